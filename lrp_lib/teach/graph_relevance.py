"""Reading relevance off a model of the Graph Network layers of :mod:`lrp_lib.teach.graph`.

:func:`relevance_inputs` makes the graph's features leaves, :func:`read_relevance` sums what a
backward pass left in their ``.grad`` per node, edge and graph, and :func:`relevance_pass` does
both around one forward in relevance mode.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lrp_lib.teach.graph_data import ATTRIBUTES, batch_of, check_graph, node_count, num_graphs
from lrp_lib.teach.mode import relevance

__all__ = ["relevance_inputs", "GraphRelevance", "read_relevance", "relevance_pass"]


def relevance_inputs(data, attributes=("x", "edge_attr", "u")):
    """Shallow copy of ``data`` whose float ``attributes`` are fresh leaves requiring grad.

    After ``out = model(relevance_inputs(data))`` and a backward pass, their ``.grad`` holds
    the relevance; :func:`read_relevance` sums it up.
    """
    check_graph(data, "relevance_inputs")
    out = copy.copy(data)
    for name in attributes:
        if name not in ATTRIBUTES:
            raise ValueError(f"attributes may contain {tuple(ATTRIBUTES)}, got {name!r}")
        t = data.get(name)
        if isinstance(t, Tensor) and t.is_floating_point():
            setattr(out, name, t.detach().clone().requires_grad_(True))
    return out


@dataclass
class GraphRelevance:
    """Relevance of one (batch of) graph(s), each summed over the features.

    ``node`` (N,), ``edge`` (E,), ``graph`` (G,: the relevance of each graph's global features
    ``u``); ``None`` for an attribute the graph lacks or that does not require grad.
    ``node_graph`` and ``edge_graph`` give the graph of each node and edge.
    """

    node: Tensor | None
    edge: Tensor | None
    graph: Tensor | None
    node_graph: Tensor
    edge_graph: Tensor | None
    num_graphs: int

    def totals(self) -> dict[str, float]:
        """Total relevance per group: ``{'nodes', 'edges', 'globals', 'total'}`` (0 when absent)."""
        parts = {k: 0.0 if v is None else float(v.sum()) for k, v in
                 (("nodes", self.node), ("edges", self.edge), ("globals", self.graph))}
        parts["total"] = parts["nodes"] + parts["edges"] + parts["globals"]
        return parts

    def per_graph(self) -> Tensor:
        """Total relevance of each graph: its nodes, edges and globals together, shape (G,)."""
        dtype = next(t.dtype for t in (self.node, self.edge, self.graph) if t is not None)
        total = torch.zeros(self.num_graphs, dtype=dtype, device=self.node_graph.device)
        if self.node is not None:
            total = total.index_add(0, self.node_graph, self.node)
        if self.edge is not None:
            total = total.index_add(0, self.edge_graph, self.edge)
        if self.graph is not None:
            total = total + self.graph
        return total


def read_relevance(data) -> GraphRelevance:
    """Read the relevance left in ``x.grad``, ``edge_attr.grad`` and ``u.grad`` after backward.

    ``data`` is the *input* graph whose attributes are leaves requiring grad (see
    :func:`relevance_inputs`).  A leaf that relevance never reached counts 0.
    """
    check_graph(data, "read_relevance")
    sums, found = {}, False
    for name in ATTRIBUTES:
        t = data.get(name)
        if not isinstance(t, Tensor) or not t.requires_grad:
            sums[name] = None
            continue
        if not t.is_leaf:
            raise ValueError(
                f"{name} is not a leaf tensor, so backward leaves no .grad on it; read the relevance "
                f"from the input graph (relevance_inputs(data)), not from a layer's output"
            )
        found = True
        g = t.grad if t.grad is not None else torch.zeros_like(t)
        sums[name] = g.flatten(1).sum(1) if g.dim() > 1 else (g if g.dim() == 1 else g.reshape(1))
    if not found:
        raise ValueError("none of x, edge_attr, u requires grad: pass relevance_inputs(data) to the model")
    n = node_count(data)
    x = data.get("x")
    node_graph = batch_of(data, "read_relevance", n, x.device if isinstance(x, Tensor) else None)
    edge_index = data.get("edge_index")
    edge_graph = node_graph[edge_index[0]] if isinstance(edge_index, Tensor) else None
    if sums["edge_attr"] is not None and edge_graph is None:
        raise ValueError("read_relevance: the graph has edge_attr but no edge_index to place its edges")
    return GraphRelevance(sums["x"], sums["edge_attr"], sums["u"], node_graph, edge_graph, num_graphs(data))


def relevance_pass(model: nn.Module, data):
    """The relevance entry point of a model of these layers: ``model`` runs forward on a copy of
    ``data`` whose ``x``, ``edge_attr`` and ``u`` are leaves (:func:`relevance_inputs`), in
    relevance mode and with gradients on.  Returns the output and a function that, after the
    caller's ``backward``, reads the relevance (:func:`read_relevance`: a :class:`GraphRelevance`
    with ``node``, ``edge`` and ``per_graph()``).

    Every layer of this module carries it as ``lrp_relevance_pass``, so a caller that must not
    import :mod:`lrp_lib.teach` (:func:`lrp_lib.explain.jobs.explain_dataset`) finds it on the model.
    """
    inputs = relevance_inputs(data, ("x", "edge_attr", "u"))
    with torch.enable_grad(), relevance():
        out = model(inputs)
    return out, lambda: read_relevance(inputs)
