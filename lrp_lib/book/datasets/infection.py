r"""The infection data set of Baldassarre & Azizpour (2019): graphs with a known explanation.

Each graph is a Barabási-Albert graph (:math:`m = 2`) made directed (every undirected edge
becomes two directed ones), from which a fraction of the directed edges is removed.

* Node features ``x = [sick, immune, noise, noise]``: ``sick`` and ``immune`` are :math:`\pm 1`,
  the noise is :math:`U(-1, 1)`.  Sick and immune nodes are disjoint, and placed at random
  (the original code put them on the lowest ids, which in a Barabási-Albert graph are the hubs).
* Edge features ``edge_attr = [virtual, noise]``: ``virtual`` is :math:`\pm 1`, the noise
  :math:`U(-1, 1)`.
* Label ``y`` (1 = infected): a node is infected if it is sick, or if it is not immune and has a
  sick in-neighbour joined to it by a non-virtual edge (one hop; ``edge_index[0]`` sends,
  ``edge_index[1]`` receives):

  .. math:: y_v = \mathrm{sick}_v \lor \Big(\lnot \mathrm{immune}_v \land
            \exists\, (s \to v):\ \mathrm{sick}_s \land \lnot \mathrm{virtual}_{s \to v}\Big)

* Ground truth: an infected node that is not sick was infected *by* its sick in-neighbours over
  non-virtual edges.  ``gt_edge_mask[e]`` marks those edges (each belongs to its receiver), so
  the explanation of node :math:`v` is the set of marked edges into :math:`v` and their senders
  (:func:`ground_truth`).  Sick nodes explain themselves and have no ground-truth edges.

Boolean masks ``sick``, ``immune`` (per node) and ``virtual`` (per edge) travel with each
:class:`~torch_geometric.data.Data`, so the ground truth survives batching.
"""
from __future__ import annotations

import numbers

import networkx as nx
import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["infection", "infection_graph", "infection_labels", "ground_truth", "explained_nodes"]

NODE_FEATURES = ["sick", "immune", "noise_0", "noise_1"]
EDGE_FEATURES = ["virtual", "noise"]


def _check_fraction(value, name: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    return float(value)


def _check_count(value, name: str, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def infection_labels(edge_index: Tensor, sick: Tensor, immune: Tensor, virtual: Tensor) -> tuple[Tensor, Tensor]:
    r"""Apply the infection rule: return ``(y, gt_edge_mask)``.

    ``y[v] = 1.0`` if node ``v`` is sick, or is not immune and receives a non-virtual edge from a
    sick node.  ``gt_edge_mask[e]`` is true for the non-virtual edges from a sick node into an
    infected node that is not itself sick: the edges that caused the infection.
    """
    n = sick.numel()
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    if virtual.shape != (edge_index.shape[1],):
        raise ValueError(f"virtual must have one entry per edge ({edge_index.shape[1]}), got {tuple(virtual.shape)}")
    if immune.shape != (n,):
        raise ValueError(f"sick and immune must both have one entry per node, got {tuple(sick.shape)} and {tuple(immune.shape)}")
    if bool((sick & immune).any()):
        raise ValueError("a node cannot be both sick and immune")
    src, dst = edge_index
    transmits = sick[src] & ~virtual  # the edge carries the infection
    gt_edge_mask = transmits & ~immune[dst] & ~sick[dst]
    infected = sick.clone()
    infected[dst[gt_edge_mask]] = True
    return infected.float(), gt_edge_mask


def infection_graph(
    num_nodes: int,
    edge_index: Tensor,
    sick: Tensor,
    immune: Tensor,
    virtual: Tensor,
    generator: np.random.Generator | None = None,
) -> Data:
    """Build one infection graph from its structure: features with fresh noise, labels and ground truth.

    ``sick`` and ``immune`` are boolean node masks, ``virtual`` a boolean edge mask.  The noise
    features come from ``generator`` (a :class:`numpy.random.Generator`; seed 0 if ``None``).  Use
    it to write small hand-made cases; :func:`infection` uses it for the random graphs.
    """
    num_nodes = _check_count(num_nodes, "num_nodes", 1)
    edge_index = torch.as_tensor(edge_index, dtype=torch.long).reshape(2, -1)
    sick = torch.as_tensor(sick, dtype=torch.bool)
    immune = torch.as_tensor(immune, dtype=torch.bool)
    virtual = torch.as_tensor(virtual, dtype=torch.bool)
    if sick.shape != (num_nodes,):
        raise ValueError(f"sick must have one entry per node ({num_nodes}), got {tuple(sick.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise IndexError(f"edge_index refers to nodes outside [0, {num_nodes})")
    y, gt_edge_mask = infection_labels(edge_index, sick, immune, virtual)
    rng = generator if generator is not None else np.random.default_rng(0)
    num_edges = edge_index.shape[1]
    x = torch.empty(num_nodes, 4)
    x[:, 0] = sick.float() * 2 - 1
    x[:, 1] = immune.float() * 2 - 1
    x[:, 2:] = torch.from_numpy(rng.uniform(-1, 1, (num_nodes, 2))).float()
    edge_attr = torch.empty(num_edges, 2)
    edge_attr[:, 0] = virtual.float() * 2 - 1
    edge_attr[:, 1] = torch.from_numpy(rng.uniform(-1, 1, num_edges)).float()
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, y=y,
                sick=sick, immune=immune, virtual=virtual, gt_edge_mask=gt_edge_mask)


def infection(
    num_graphs: int,
    *,
    min_nodes: int = 10,
    max_nodes: int = 30,
    removed_edges: float = 0.3,
    max_sick: float = 0.1,
    max_immune: float = 0.3,
    max_virtual: float = 0.3,
    seed: int = 0,
) -> list[Data]:
    r"""Generate ``num_graphs`` random infection graphs, reproducibly from ``seed``.

    For each graph: the number of nodes :math:`N` is uniform in ``[min_nodes, max_nodes]``; a
    Barabási-Albert graph with :math:`m = 2` is made directed and ``removed_edges`` of its
    :math:`E` directed edges (rounded) are removed at random.  The number of sick nodes is uniform
    in :math:`[1, \max(1, \lfloor N \cdot \mathrm{max\_sick} \rfloor)]` (none if ``max_sick = 0``),
    of immune nodes uniform in :math:`[0, \lfloor N \cdot \mathrm{max\_immune} \rfloor]`, of
    virtual edges uniform in :math:`[0, \lfloor E' \cdot \mathrm{max\_virtual} \rfloor]`; all are
    placed uniformly at random.  Labels and ground truth as in the module docstring.

    Returns a list of :class:`~torch_geometric.data.Data` with ``x`` (N, 4), ``edge_index``
    (2, E'), ``edge_attr`` (E', 2), ``y`` (N,) float, and boolean masks ``sick``, ``immune``,
    ``virtual``, ``gt_edge_mask``.
    """
    num_graphs = _check_count(num_graphs, "num_graphs", 0)
    min_nodes = _check_count(min_nodes, "min_nodes", 3)  # BA with m = 2 needs more than 2 nodes
    max_nodes = _check_count(max_nodes, "max_nodes", 3)
    if min_nodes > max_nodes:
        raise ValueError(f"min_nodes ({min_nodes}) must not be greater than max_nodes ({max_nodes})")
    removed_edges = _check_fraction(removed_edges, "removed_edges")
    max_sick = _check_fraction(max_sick, "max_sick")
    max_immune = _check_fraction(max_immune, "max_immune")
    max_virtual = _check_fraction(max_virtual, "max_virtual")
    if max_sick + max_immune > 1:
        raise ValueError(f"max_sick + max_immune must be at most 1 (sick and immune nodes are disjoint), "
                         f"got {max_sick} + {max_immune}")
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(num_graphs):
        n = int(rng.integers(min_nodes, max_nodes + 1))
        ba = nx.barabasi_albert_graph(n, 2, seed=int(rng.integers(2**31)))
        undirected = sorted(tuple(sorted(e)) for e in ba.edges())
        edges = np.array([(u, v) for u, v in undirected] + [(v, u) for u, v in undirected]).T
        keep = np.sort(rng.choice(edges.shape[1], edges.shape[1] - round(removed_edges * edges.shape[1]), replace=False))
        edge_index = torch.from_numpy(edges[:, keep]).long()
        num_edges = edge_index.shape[1]

        num_sick = int(rng.integers(1, max(1, int(n * max_sick)) + 1)) if max_sick > 0 else 0
        num_immune = int(rng.integers(0, int(n * max_immune) + 1))
        order = torch.from_numpy(rng.permutation(n))
        sick = torch.zeros(n, dtype=torch.bool)
        sick[order[:num_sick]] = True
        immune = torch.zeros(n, dtype=torch.bool)
        immune[order[num_sick:num_sick + num_immune]] = True
        num_virtual = int(rng.integers(0, int(num_edges * max_virtual) + 1))
        virtual = torch.zeros(num_edges, dtype=torch.bool)
        virtual[torch.from_numpy(rng.choice(num_edges, num_virtual, replace=False))] = True
        graphs.append(infection_graph(n, edge_index, sick, immune, virtual, generator=rng))
    return graphs


def explained_nodes(data: Data) -> Tensor:
    """Indices of the nodes that have a ground-truth explanation: infected and not sick."""
    return ((data.y > 0.5) & ~data.sick).nonzero().view(-1)


def ground_truth(data: Data, node: int) -> tuple[Tensor, Tensor]:
    """The explanation of an infected, non-sick ``node``: ``(node_mask, edge_mask)``.

    ``edge_mask`` marks the non-virtual edges from sick nodes into ``node``; ``node_mask`` their
    senders (the sick sources).  Works on a single graph or a batch (global node ids).
    """
    n = data.num_nodes
    if not isinstance(node, numbers.Integral) or not 0 <= int(node) < n:
        raise IndexError(f"node must be an int in [0, {n}), got {node!r}")
    if not (bool(data.y[node] > 0.5) and not bool(data.sick[node])):
        raise ValueError(f"node {node} is not infected-and-not-sick, so it has no ground-truth explanation")
    edge_mask = data.gt_edge_mask & (data.edge_index[1] == node)
    node_mask = torch.zeros(n, dtype=torch.bool)
    node_mask[data.edge_index[0, edge_mask]] = True
    return node_mask, edge_mask
