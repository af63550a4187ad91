"""Figures of relevance on graphs (networkx + matplotlib) and molecules (RDKit).

:func:`draw_graph` colours the nodes and edges of a graph by their relevance with a
diverging colormap centred at zero: red for positive relevance (evidence for the output),
blue for negative (evidence against), white for none.  Nodes and edges share one colour
scale, so their colours can be compared. :func:`draw_molecule` does the same for a molecule drawn
as chemists draw it (an RDKit 2D depiction); :func:`bond_values` turns an edge mask into bond values.
"""
from __future__ import annotations

import io
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import torch
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.text import Text

__all__ = ["book_style", "smallest_text_px", "png_with_text_size", "TEXT_SIZE_KEY", "draw_graph", "draw_molecule", "bond_values", "relevance_colours", "depict"]

#: Width of the rendered book's text column in inches at :data:`BOOK_DPI` (726 pixels; the column is
#: about 736 pixels wide in a 1280-pixel window).
BOOK_WIDTH = 6.6
BOOK_DPI = 110
#: The PNG text field in which a figure drawn after :func:`book_style` records the height of its smallest text,
#: in the image's pixels (the rendered book's browser test scales it by the width the image is shown at).
TEXT_SIZE_KEY = "Smallest text px"


def book_style() -> None:
    """Matplotlib settings for figures shown at their own size in the rendered book.

    The book's text column is about 736 pixels wide; a figure drawn :data:`BOOK_WIDTH` inches wide
    at :data:`BOOK_DPI` fills it without being shrunk, so its labels appear at the font size set
    here. Call it after ``import matplotlib.pyplot`` (the notebook backend sets its own defaults on
    import) and size figures ``figsize=(BOOK_WIDTH, height)`` or narrower.  In a notebook, each figure's PNG
    then records the height of its smallest text (:func:`png_with_text_size`), for the rendered book's check that
    every figure's text is at least 8 pixels high at the width the page shows it.
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
        "figure.hooks": [f"{__name__}:_record_text_size"],
    })


def drawn_texts(fig) -> list:
    """The text artists of ``fig`` that a drawing shows: visible and not empty, without the labels of an axis
    that is switched off (``ax.axis("off")``) or of ticks outside the view."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            shown = {id(t) for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True)} \
                if ax.axison and axis.get_visible() else set()
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                hidden.update(id(t) for t in (tick.label1, tick.label2) if id(t) not in shown)
            if not (ax.axison and axis.get_visible()):
                hidden.update((id(axis.label), id(axis.get_offset_text())))
    return [t for t in fig.findobj(Text) if id(t) not in hidden and t.get_visible() and t.get_text().strip()]


def smallest_text_px(fig, dpi: float | None = None) -> float | None:
    """The height of the smallest text ``fig`` shows, in pixels of an image saved at ``dpi`` (the figure's own
    by default): the font size in points times ``dpi / 72``; None for a figure without text."""
    sizes = [t.get_fontsize() for t in drawn_texts(fig)]
    return min(sizes) * (dpi or fig.dpi) / 72 if sizes else None


def png_with_text_size(fig) -> bytes | None:
    """The figure as the notebook shows it (IPython's ``print_figure``: PNG at the figure's dpi, tight
    bounding box), with the height of its smallest text (:func:`smallest_text_px`) in the PNG's text field
    :data:`TEXT_SIZE_KEY`."""
    from IPython.core.pylabtools import print_figure
    fig.draw_without_rendering()  # (text whose size is set when drawn)
    smallest = smallest_text_px(fig)
    metadata = {TEXT_SIZE_KEY: f"{smallest:.2f}"} if smallest is not None else {}
    return print_figure(fig, "png", metadata=metadata)


def _record_text_size(fig) -> None:
    """A figure hook (``rcParams["figure.hooks"]``, set by :func:`book_style`): in a notebook, figures are shown
    as :func:`png_with_text_size` draws them.  Registered when a figure is made, after the notebook's
    matplotlib backend has registered its own, so that it takes that one's place."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, png_with_text_size)


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
    label: str = "relevance",
    title: str | None = None,
):
    """Draw a directed graph with nodes and edges coloured by relevance.

    Args:
        edge_index: a PyG ``Data`` (its ``edge_index`` and ``num_nodes`` are used) or a
            2 x E tensor / array (row 0 senders, row 1 receivers).
        num_nodes: number of nodes (default: from the ``Data``, else ``edge_index.max() + 1``).
        node_relevance, edge_relevance: one value per node / edge (e.g. the ``node`` and
            ``edge`` of :func:`lrp_lib.teach.graph.read_relevance`); ``None`` draws them grey.
        labels: ``True`` for node numbers, ``False``/``None`` for none, or a dict / list of text.
        pos: node positions ``{node: (x, y)}``; default a spring layout with a fixed seed.
        ax: the axes to draw on (default: a new figure).
        cmap: a diverging colormap; the scale runs from ``-vmax`` to ``vmax`` (default: the
            largest absolute relevance), so zero is always the middle colour.
        colorbar: add a colour bar for the relevance scale.
        label: the colour bar's label: say what is shown, e.g. ``"relevance of the prediction (LRP)"``.

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
    node_rel = _values(node_relevance, "node_relevance", num_nodes, "node")
    edge_rel = _values(edge_relevance, "edge_relevance", edge_index.shape[1], "edge")

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
        ax.figure.colorbar(ScalarMappable(norm=norm, cmap=colormap), ax=ax, label=label, shrink=0.8)
    if title:
        ax.set_title(title)
    ax.set_axis_off()
    return ax


def _values(values, name: str, size: int, what: str):
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.shape[0] != size:
        raise ValueError(f"{name} must have one value per {what} ({size}), got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} must be finite, got {values[~np.isfinite(values)][:3].tolist()}")
    return values


def _check_mol(mol):
    from rdkit import Chem

    if not isinstance(mol, Chem.Mol):
        raise TypeError(f"mol must be an rdkit.Chem.Mol, got {type(mol).__name__}")


def bond_values(mol, edge_index, edge_values, combine: str = "sum") -> np.ndarray:
    """Per-bond values of ``mol`` from per-directed-edge values (an explainer's edge mask).

    Args:
        mol: an ``rdkit.Chem.Mol`` whose atom ``i`` is node ``i`` of the graph.
        edge_index: 2 x E (row 0 senders, row 1 receivers); every edge must join two bonded atoms.
        edge_values: one value per edge.
        combine: how the edges of one bond (normally its two directions) are combined:
            ``'sum'`` (the relevance a bond carries in both directions), ``'mean'`` or ``'max'``.

    Returns:
        an array with one value per bond, in RDKit's bond index order. Raises ``ValueError`` for an
        edge that is not a bond or a bond without an edge.
    """
    _check_mol(mol)
    if combine not in ("sum", "mean", "max"):
        raise ValueError(f"combine must be 'sum', 'mean' or 'max', got {combine!r}")
    if isinstance(edge_index, torch.Tensor):
        edge_index = edge_index.detach().cpu().numpy()
    edge_index = np.asarray(edge_index)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {edge_index.shape}")
    values = _values(edge_values, "edge_values", edge_index.shape[1], "edge of edge_index")
    per_bond: list[list[float]] = [[] for _ in range(mol.GetNumBonds())]
    n = mol.GetNumAtoms()
    for e, (s, r) in enumerate(edge_index.T.tolist()):
        bond = mol.GetBondBetweenAtoms(int(s), int(r)) if 0 <= s < n and 0 <= r < n and s != r else None
        if bond is None:
            raise ValueError(f"edge_index[:, {e}] = ({s}, {r}) is not a bond of mol ({n} atoms, "
                             f"{mol.GetNumBonds()} bonds)")
        per_bond[bond.GetIdx()].append(values[e])
    missing = [b for b, v in enumerate(per_bond) if not v]
    if missing:
        b = mol.GetBondWithIdx(missing[0])
        raise ValueError(f"edge_index has no edge for bond {missing[0]} ({b.GetBeginAtomIdx()}-"
                         f"{b.GetEndAtomIdx()}) of mol; {len(missing)} bond(s) without an edge")
    reduce = {"sum": np.sum, "mean": np.mean, "max": np.max}[combine]
    return np.array([reduce(v) for v in per_bond], dtype=float)


def relevance_colours(mol, atom_relevance=None, bond_relevance=None, *, vmax: float | None = None,
                      cmap: str = "bwr"):
    """The colours :func:`draw_molecule` gives atoms and bonds: one scale from ``-vmax`` to ``vmax``.

    Returns ``(mappable, atom_colours, bond_colours)``: a matplotlib ``ScalarMappable`` of the scale
    (``vmax`` defaults to the largest absolute value over atoms *and* bonds, so zero is always the
    middle colour and atoms and bonds can be compared) and dicts ``{index: (r, g, b)}`` (empty when
    the values are ``None``).
    """
    _check_mol(mol)
    atoms = _values(atom_relevance, "atom_relevance", mol.GetNumAtoms(), "atom of mol")
    bonds = _values(bond_relevance, "bond_relevance", mol.GetNumBonds(), "bond of mol")
    present = [v for v in (atoms, bonds) if v is not None and v.size]
    if vmax is None:
        vmax = max([float(np.abs(v).max()) for v in present] + [0.0])
    elif not vmax > 0:
        raise ValueError(f"vmax must be positive, got {vmax}")
    vmax = vmax if vmax > 0 else 1.0
    mappable = ScalarMappable(norm=Normalize(-vmax, vmax), cmap=plt.get_cmap(cmap))

    def colours(values):
        if values is None:
            return {}
        return {i: tuple(float(c) for c in mappable.to_rgba(v)[:3]) for i, v in enumerate(values)}

    return mappable, colours(atoms), colours(bonds)


def depict(mol, atom_colours=None, bond_colours=None, *, size=(400, 300), padding: float = 0.08,
           font_size: float | None = 14, atom_radius: float = 0.35, bond_width: float = 16.0,
           bond_notes: Mapping[int, str] | None = None):
    """An RDKit 2D depiction of ``mol`` (as chemists draw it) with highlighted atoms and bonds.

    Coordinates come from ``rdDepictor.Compute2DCoords`` with RDKit's own depictor and a fixed
    seed (the same picture on every machine), drawn by ``rdMolDraw2D.MolDraw2DCairo`` with
    ``padding`` (a fraction of the image) around the molecule and its highlights, so no atom is
    clipped. ``atom_colours`` / ``bond_colours``: ``{index: (r, g, b)}`` of the atoms / bonds to
    highlight. ``bond_notes``: ``{bond index: text}`` written next to those bonds.

    Returns ``(image, atom_xy)``: an ``H x W x 4`` float array and the pixel position of each atom.
    """
    from matplotlib.image import imread
    from rdkit import Chem
    from rdkit.Chem import rdDepictor
    from rdkit.Chem.Draw import rdMolDraw2D

    _check_mol(mol)
    width, height = (int(v) for v in size)
    if width < 50 or height < 50:
        raise ValueError(f"size must be at least (50, 50) pixels, got {size}")
    mol = Chem.Mol(mol)  # the caller's molecule keeps its conformers and properties
    try:  # alternating single and double bonds, as the data sets list rings, not aromatic circles
        Chem.Kekulize(mol, clearAromaticFlags=True)
    except Exception:  # noqa: BLE001 -- a molecule RDKit cannot kekulise is drawn as it is
        pass
    rdDepictor.Compute2DCoords(mol, canonOrient=True, sampleSeed=0, forceRDKit=True)
    for bond, text in (bond_notes or {}).items():
        mol.GetBondWithIdx(int(bond)).SetProp("bondNote", str(text))
    drawer = rdMolDraw2D.MolDraw2DCairo(width, height)
    options = drawer.drawOptions()
    options.padding = padding
    options.clearBackground = True
    options.highlightBondWidthMultiplier = int(bond_width)
    options.fillHighlights = True
    options.annotationFontScale = 0.9
    options.atomHighlightsAreCircles = True
    options.continuousHighlight = False
    options.prepareMolsBeforeDrawing = False  # keep the atoms, hydrogens and bonds as they are
    if font_size:
        options.minFontSize = int(font_size)
        options.maxFontSize = int(font_size)
    atom_colours = dict(atom_colours or {})
    bond_colours = dict(bond_colours or {})
    drawer.DrawMolecule(mol, highlightAtoms=list(atom_colours), highlightAtomColors=atom_colours,
                        highlightAtomRadii={i: atom_radius for i in atom_colours},
                        highlightBonds=list(bond_colours), highlightBondColors=bond_colours)
    drawer.FinishDrawing()
    image = imread(io.BytesIO(drawer.GetDrawingText()), format="png")
    atom_xy = np.array([[p.x, p.y] for p in (drawer.GetDrawCoords(i) for i in range(mol.GetNumAtoms()))])
    return image, atom_xy


def draw_molecule(
    mol,
    atom_relevance=None,
    bond_relevance=None,
    *,
    ax: plt.Axes | None = None,
    vmax: float | None = None,
    cmap: str = "bwr",
    label: str = "relevance",
    title: str | None = None,
    colorbar: bool = True,
    size=(400, 300),
    marked_bonds=None,
    marked_colour=(1.0, 0.75, 0.0),
    marked_note: str = "GT",
    font_size: float | None = 14,
    padding: float = 0.08,
) -> ScalarMappable:
    """Draw a molecule as chemists do (RDKit 2D depiction), atoms and bonds coloured by relevance.

    Args:
        mol: an ``rdkit.Chem.Mol`` whose atom order is the graph's node order (e.g.
            :func:`lrp_lib.book.datasets.mutagenicity.to_rdkit`).
        atom_relevance: one value per atom, or ``None`` (atoms not highlighted).
        bond_relevance: one value per RDKit bond index (:func:`bond_values` maps an edge mask onto
            the bonds), or ``None``.
        ax: the axes to show the image in (default: a new figure); the axis is switched off.
        vmax, cmap: one diverging scale from ``-vmax`` to ``vmax`` for atoms *and* bonds, centred at
            zero (white for ``'bwr'``); ``vmax`` defaults to the largest absolute value.
        label: the colour bar's label: say what is shown, e.g. ``"edge relevance (LRP, log-odds)"``.
        colorbar: add the colour bar (only when there are values to show).
        size: the image size in pixels (width, height).
        marked_bonds: bond indices to mark (e.g. a ground truth): highlighted in ``marked_colour``
            when there is no ``bond_relevance``, else labelled ``marked_note`` next to the bond.

    Returns:
        the ``ScalarMappable`` of the colour scale (for a shared colour bar of several panels).
    """
    _check_mol(mol)
    mappable, atom_colours, bond_colours = relevance_colours(mol, atom_relevance, bond_relevance,
                                                             vmax=vmax, cmap=cmap)
    notes = None
    if marked_bonds is not None:
        if isinstance(marked_bonds, torch.Tensor):
            marked_bonds = marked_bonds.tolist()
        marked = [int(b) for b in marked_bonds]
        bad = [b for b in marked if not 0 <= b < mol.GetNumBonds()]
        if bad:
            raise ValueError(f"marked_bonds must be bond indices of mol (0..{mol.GetNumBonds() - 1}), got {bad}")
        if bond_relevance is None:
            bond_colours.update({b: tuple(marked_colour) for b in marked})
        else:
            notes = {b: marked_note for b in marked}
    image, _ = depict(mol, atom_colours, bond_colours, size=size, padding=padding, font_size=font_size,
                      bond_notes=notes)
    if ax is None:
        _, ax = plt.subplots(figsize=(size[0] / BOOK_DPI, size[1] / BOOK_DPI))
    ax.imshow(image, interpolation="antialiased")
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    if colorbar and (atom_relevance is not None or bond_relevance is not None):
        ax.figure.colorbar(mappable, ax=ax, label=label, shrink=0.8)
    return mappable
