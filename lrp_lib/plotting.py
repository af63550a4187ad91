"""Figures of relevance on graphs (networkx + matplotlib).

:func:`draw_graph` colours the nodes and edges of a graph by their relevance with a
diverging colormap centred at zero: red for positive relevance (evidence for the output),
blue for negative (evidence against), white for none.  Nodes and edges share one colour
scale, so their colours can be compared.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import torch
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize

__all__ = ["book_style", "draw_graph", "draw_molecule"]

#: Width of the rendered book's text column in inches at :data:`BOOK_DPI` (about 800 pixels).
BOOK_WIDTH = 7.5
BOOK_DPI = 110


def book_style() -> None:
    """Matplotlib settings for figures shown at their own size in the rendered book.

    The book's text column is about 800 pixels wide; a figure drawn :data:`BOOK_WIDTH` inches wide
    at :data:`BOOK_DPI` fills it without being shrunk, so its labels appear at the font size set
    here. Call it after ``import matplotlib.pyplot`` (the notebook backend sets its own defaults on
    import) and size figures ``figsize=(BOOK_WIDTH, height)`` or narrower.
    """
    plt.rcParams.update({
        "figure.figsize": (BOOK_WIDTH, 4.0),
        "figure.dpi": BOOK_DPI,
        "savefig.dpi": BOOK_DPI,
        "font.size": 10,
        "axes.titlesize": 10,
        "axes.labelsize": 10,
        "legend.fontsize": 9,
        "xtick.labelsize": 9,
        "ytick.labelsize": 9,
    })


def _as_numpy(values, name: str, size: int):
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.shape[0] != size:
        raise ValueError(f"{name} must have one value per {name.split('_')[0]} ({size}), got shape {values.shape}")
    return values


def draw_graph(
    edge_index,
    num_nodes: int | None = None,
    node_relevance=None,
    edge_relevance=None,
    *,
    labels: Mapping[int, str] | Sequence[str] | bool | None = True,
    pos: Mapping[int, Sequence[float]] | None = None,
    ax: plt.Axes | None = None,
    cmap: str = "RdBu_r",
    vmax: float | None = None,
    node_size: float = 500,
    edge_width: float = 3.0,
    colorbar: bool = True,
    title: str | None = None,
):
    """Draw a directed graph with nodes and edges coloured by relevance.

    Args:
        edge_index: a PyG ``Data`` (its ``edge_index`` and ``num_nodes`` are used) or a
            2 x E tensor / array (row 0 senders, row 1 receivers).
        num_nodes: number of nodes (default: from the ``Data``, else ``edge_index.max() + 1``).
        node_relevance, edge_relevance: one value per node / edge (e.g. the ``node`` and
            ``edge`` of :func:`lrp_lib.graph.read_relevance`); ``None`` draws them grey.
        labels: ``True`` for node numbers, ``False``/``None`` for none, or a dict / list of text.
        pos: node positions ``{node: (x, y)}``; default a spring layout with a fixed seed.
        ax: the axes to draw on (default: a new figure).
        cmap: a diverging colormap; the scale runs from ``-vmax`` to ``vmax`` (default: the
            largest absolute relevance), so zero is always the middle colour.
        colorbar: add a colour bar for the relevance scale.

    Returns:
        the axes.
    """
    if hasattr(edge_index, "edge_index"):
        data = edge_index
        edge_index = data.edge_index
        num_nodes = data.num_nodes if num_nodes is None else num_nodes
    if isinstance(edge_index, torch.Tensor):
        edge_index = edge_index.detach().cpu().numpy()
    edge_index = np.asarray(edge_index, dtype=np.int64)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {edge_index.shape}")
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.size else 0
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        raise ValueError(f"edge_index refers to nodes {edge_index.min()}..{edge_index.max()}, but num_nodes={num_nodes}")
    node_rel = _as_numpy(node_relevance, "node_relevance", num_nodes)
    edge_rel = _as_numpy(edge_relevance, "edge_relevance", edge_index.shape[1])

    graph = nx.DiGraph()
    graph.add_nodes_from(range(num_nodes))
    edges = [(int(s), int(r)) for s, r in edge_index.T]
    graph.add_edges_from(edges)
    if pos is None:
        pos = nx.spring_layout(graph, seed=0)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))

    present = [v for v in (node_rel, edge_rel) if v is not None and v.size]
    if vmax is None:
        vmax = max([float(np.abs(v).max()) for v in present] + [0.0])
    vmax = vmax if vmax > 0 else 1.0
    norm = Normalize(-vmax, vmax)
    colormap = plt.get_cmap(cmap)

    node_colors = "lightgrey" if node_rel is None else [colormap(norm(v)) for v in node_rel]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=node_colors, node_size=node_size,
                           edgecolors="black", linewidths=1.0)
    if edges:
        edge_colors = "grey" if edge_rel is None else [colormap(norm(v)) for v in edge_rel]
        nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=edges, edge_color=edge_colors, width=edge_width,
                               arrows=True, arrowsize=15, node_size=node_size,
                               connectionstyle="arc3,rad=0.15")
    if labels:
        if labels is True:
            labels = {i: str(i) for i in range(num_nodes)}
        elif not isinstance(labels, Mapping):
            labels = dict(enumerate(labels))
        nx.draw_networkx_labels(graph, pos, labels=dict(labels), ax=ax, font_size=10)
    if colorbar and present:
        ax.figure.colorbar(ScalarMappable(norm=norm, cmap=colormap), ax=ax, label="relevance", shrink=0.8)
    if title:
        ax.set_title(title)
    ax.set_axis_off()
    return ax


def draw_molecule(
    data,
    edge_score=None,
    *,
    atom_names: Sequence[str] | None = None,
    ground_truth=None,
    combine: str = "sum",
    ax: plt.Axes | None = None,
    cmap: str | None = None,
    pos: Mapping[int, Sequence[float]] | None = None,
    node_size: float = 260,
    title: str | None = None,
):
    """Draw a molecule graph: atoms labelled by element, bonds coloured by a score.

    Args:
        data: a PyG ``Data`` whose ``x`` is a one-hot atom type (the column picks the name in
            ``atom_names``; default the Mutagenicity atoms, :data:`lrp_lib.datasets.mutagenicity.ATOMS`).
        edge_score: one value per *directed* edge of ``data.edge_index`` (an explainer's edge mask),
            or ``None`` for plain black bonds.  The two directions of a bond are combined with
            ``combine`` ('sum', 'mean' or 'max').
        ground_truth: optional 0/1 per directed edge (``data.edge_gt``); those bonds get a dashed
            black outline.
        cmap: default 'Reds' (scale 0 .. max) when all scores are >= 0, else 'RdBu_r' centred at 0.
        pos: atom positions; default a Kamada-Kawai layout (deterministic).

    Returns:
        the axes.  Bond widths grow with the absolute score.
    """
    if atom_names is None:
        from .datasets.mutagenicity import ATOMS as atom_names
    if combine not in ("sum", "mean", "max"):
        raise ValueError(f"combine must be 'sum', 'mean' or 'max', got {combine!r}")
    x = data.x.detach().cpu()
    if x.dim() != 2 or x.shape[1] != len(atom_names):
        raise ValueError(f"data.x must be one-hot with {len(atom_names)} columns (one per atom name), "
                         f"got shape {tuple(x.shape)}")
    edge_index = data.edge_index.detach().cpu().numpy()
    num_edges = edge_index.shape[1]
    score = _as_numpy(edge_score, "edge_score", num_edges)
    truth = None if ground_truth is None else np.asarray(
        ground_truth.detach().cpu() if isinstance(ground_truth, torch.Tensor) else ground_truth, dtype=float)
    if truth is not None and truth.shape != (num_edges,):
        raise ValueError(f"ground_truth must have one value per edge ({num_edges}), got shape {truth.shape}")

    bonds: dict[tuple[int, int], list[int]] = {}
    for e, (s, r) in enumerate(edge_index.T):
        if s != r:
            bonds.setdefault((min(s, r), max(s, r)), []).append(e)
    reduce = {"sum": np.sum, "mean": np.mean, "max": np.max}[combine]
    bond_list = list(bonds)
    bond_score = None if score is None else np.array([reduce(score[bonds[b]]) for b in bond_list])

    graph = nx.Graph()
    graph.add_nodes_from(range(x.shape[0]))
    graph.add_edges_from(bond_list)
    if pos is None:
        pos = nx.kamada_kawai_layout(graph) if graph.number_of_edges() else nx.circular_layout(graph)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3.5))

    names = {i: atom_names[int(x[i].argmax())] for i in range(x.shape[0])}
    if bond_score is None:
        colors, widths = "black", 1.5
    else:
        top = float(np.abs(bond_score).max()) if bond_score.size else 0.0
        top = top if top > 0 else 1.0
        if cmap is None:
            cmap = "Reds" if bond_score.min() >= 0 else "RdBu_r"
        norm = Normalize(0, top) if bond_score.min() >= 0 and cmap == "Reds" else Normalize(-top, top)
        colormap = plt.get_cmap(cmap)
        colors = [colormap(norm(v)) for v in bond_score]
        widths = [1.0 + 5.0 * abs(v) / top for v in bond_score]
    if truth is not None:
        marked = [b for b in bond_list if truth[bonds[b]].max() > 0]
        nx.draw_networkx_edges(graph, pos, edgelist=marked, ax=ax, width=9, edge_color="black", style="dashed",
                               alpha=0.6)
    nx.draw_networkx_edges(graph, pos, edgelist=bond_list, ax=ax, width=widths, edge_color=colors)
    node_colors = ["#ffd9d9" if names[i] in ("N", "O") else "#f2f2f2" for i in range(x.shape[0])]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=node_colors, node_size=node_size,
                           edgecolors="grey", linewidths=0.8)
    nx.draw_networkx_labels(graph, pos, labels=names, ax=ax, font_size=8)
    if title:
        ax.set_title(title, fontsize=10)
    ax.set_axis_off()
    return ax
