r"""Mutagenicity (Kazius et al., 2005) with the NO2 / NH2 edge ground truth on every graph.

``mutagenicity(root=None)`` returns a :class:`torch_geometric.datasets.TUDataset` of the 4,337
molecules whose graphs carry one extra attribute, ``edge_gt`` (one 0/1 per directed edge of
``edge_index``): 1 where the bond lies inside an NO2 or NH2 group.  That ground truth is the one
used by the PGExplainer paper (Luo et al., 2020) and ships as ``Mutagenicity_edge_gt.txt``, one line
per line of ``Mutagenicity_A.txt``.

Keeping it aligned is the whole difficulty: PyG's TU reader drops self-loops and re-sorts the edges
(``coalesce``).  Here the ground truth goes through exactly the same two steps as the edges
(``remove_self_loops`` and ``coalesce`` applied to the raw edge list with the ground truth as its
edge attribute), and the resulting edge list is checked to be identical to PyG's before the column
is attached, so it cannot silently fall out of order.

Where the files come from:

* ``root`` (the argument, else ``$LRP_DATA_ROOT``, else ``~/.cache/lrp_lib/data``) holding
  ``Mutagenicity/raw/Mutagenicity_*.txt`` (the TU files plus ``Mutagenicity_edge_gt.txt``);
* otherwise they are downloaded into ``root``: the TU files from TU Dortmund (as
  ``TUDataset`` does) and the ground truth from the PGExplainer repository.

Nothing is ever written into ``root`` itself unless it is the cache: the raw files are copied into
``$LRP_CACHE_DIR`` (default ``~/.cache/lrp_lib/data``) and PyG writes its processed file there, so a
read-only shared data folder works.

Node features are the 14-dimensional one-hot atom types; :data:`ATOMS` names the columns.
Edge attributes are the one-hot bond orders; :data:`BOND_ORDERS` names the columns (single,
double, triple; the data set writes rings in Kekule form and hydrogens as atoms).
Graph label 0 = mutagen, 1 = nonmutagen.  :func:`to_rdkit` turns a graph back into an RDKit
molecule (atom ``i`` = node ``i``) for drawing.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import os.path as osp
import shutil
import tempfile
from pathlib import Path

import torch
from torch_geometric.data import Data
from torch_geometric.datasets import TUDataset
from torch_geometric.io import read_txt_array
from torch_geometric.io.tu import read_tu_data
from torch_geometric.utils import coalesce, remove_self_loops

from lrp_lib.book.datasets.roots import cache_root, data_root

__all__ = ["mutagenicity", "MutagenicityWithGroundTruth", "ATOMS", "BOND_ORDERS", "MUTAGEN", "GT_URL",
           "to_rdkit", "book_split", "has_group", "explained_mutagen"]

NAME = "Mutagenicity"
#: Atom symbol of each one-hot column of ``x`` (``Mutagenicity_label_readme.txt``).
ATOMS = ["C", "O", "Cl", "H", "N", "F", "Br", "S", "P", "I", "Na", "K", "Li", "Ca"]
#: Bond order of each one-hot column of ``edge_attr`` (edge labels 0, 1, 2 = valence 1, 2, 3).
BOND_ORDERS = [1, 2, 3]
#: The graph label of mutagens.
MUTAGEN = 0
#: Where readers get the ground-truth file: the PGExplainer repository's copy of the data set.
GT_URL = "https://github.com/flyingdoog/PGExplainer/raw/master/dataset/Mutagenicity.zip"
RAW_FILES = [f"{NAME}_{part}.txt" for part in
             ("A", "graph_indicator", "graph_labels", "node_labels", "edge_labels", "edge_gt")]


class MutagenicityWithGroundTruth(TUDataset):
    """``TUDataset(root, "Mutagenicity")`` whose graphs also carry ``edge_gt`` (aligned with ``edge_index``)."""

    def __init__(self, root: str, transform=None, force_reload: bool = False):
        super().__init__(root, NAME, transform=transform, force_reload=force_reload)

    @property
    def raw_file_names(self):
        return RAW_FILES

    @property
    def processed_dir(self) -> str:  # keep apart from a stock TUDataset processed in the same root
        return osp.join(self.root, self.name, "processed_edge_gt")

    def download(self) -> None:
        super().download()  # the TU files from TU Dortmund
        from torch_geometric.data import download_url, extract_zip

        with tempfile.TemporaryDirectory() as tmp:
            extract_zip(download_url(GT_URL, tmp), tmp)
            found = sorted(Path(tmp).rglob(f"{NAME}_edge_gt.txt"))
            if not found:
                raise FileNotFoundError(f"{GT_URL} does not contain {NAME}_edge_gt.txt")
            shutil.copy(found[0], osp.join(self.raw_dir, f"{NAME}_edge_gt.txt"))

    def process(self) -> None:
        # PyG's own reading (as TUDataset.process): drops self-loops, coalesces, splits per graph
        data, slices, sizes = read_tu_data(self.raw_dir, self.name)
        gt = aligned_ground_truth(self.raw_dir, data, slices)
        data.edge_gt = gt
        slices["edge_gt"] = slices["edge_index"]
        torch.save((data.to_dict(), slices, sizes, data.__class__), self.processed_paths[0])


def aligned_ground_truth(raw_dir: str, data: Data, slices: dict) -> torch.Tensor:
    """The ground truth of ``Mutagenicity_edge_gt.txt`` in the order of PyG's edges.

    The raw edge list and its ground truth go through ``remove_self_loops`` and ``coalesce`` (the
    steps of PyG's TU reader); the result must reproduce PyG's global edge list exactly.
    """
    raw_edges = read_txt_array(osp.join(raw_dir, f"{NAME}_A.txt"), sep=",", dtype=torch.long).t() - 1
    gt = read_txt_array(osp.join(raw_dir, f"{NAME}_edge_gt.txt"), sep=",", dtype=torch.long).view(-1)
    if gt.numel() != raw_edges.shape[1]:
        raise ValueError(f"{NAME}_edge_gt.txt has {gt.numel()} lines but {NAME}_A.txt has "
                         f"{raw_edges.shape[1]}: the two files must list the same edges in the same order")
    num_nodes = data.x.shape[0]
    edges, gt = remove_self_loops(raw_edges, gt)
    edges, gt = coalesce(edges, gt, num_nodes, reduce="max")
    # PyG's edge_index is stored per graph (offsets removed): put the offsets back and compare
    node_slice, edge_slice = slices["x"], slices["edge_index"]
    graph_of_edge = torch.repeat_interleave(torch.arange(len(edge_slice) - 1), edge_slice.diff())
    pyg_edges = data.edge_index + node_slice[graph_of_edge]
    if pyg_edges.shape != edges.shape or not torch.equal(pyg_edges, edges):
        raise RuntimeError("the ground truth could not be aligned with PyG's edges")
    return gt


def _has_raw(root: Path) -> bool:
    return all((root / NAME / "raw" / f).is_file() for f in RAW_FILES)


def mutagenicity(root: str | os.PathLike | None = None, transform=None) -> MutagenicityWithGroundTruth:
    """Load Mutagenicity with ``edge_gt`` on each graph.

    ``root``: a folder with ``Mutagenicity/raw/Mutagenicity_*.txt``; default ``$LRP_DATA_ROOT``, else
    ``~/.cache/lrp_lib/data`` (downloaded there on first use).  Raw files found elsewhere are copied
    into the cache, which is where the processed file goes.  Raises ``FileNotFoundError`` naming the expected files when they are
    neither there nor downloadable.
    """
    root = Path(root) if root is not None else data_root()
    work = root
    if _has_raw(root) and root.resolve() != cache_root().resolve():
        # never write next to someone else's files (a shared, read-only data folder): copy the raw
        # files into the cache and let PyG process them there
        work = cache_root() / ("copy-" + hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:10])
        raw = work / NAME / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        for f in RAW_FILES:
            src, dst = root / NAME / "raw" / f, raw / f
            if not dst.is_file() or dst.stat().st_size != src.stat().st_size:
                shutil.copyfile(src, dst)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # PyG's "Processing... Done!" notes
            return MutagenicityWithGroundTruth(str(work), transform=transform)
    except Exception as err:  # no files and no download (offline, or a read-only root)
        if _has_raw(work):
            raise
        raise FileNotFoundError(
            f"Mutagenicity was not found under {root} and could not be downloaded ({type(err).__name__}: "
            f"{err}). Put the files {', '.join(RAW_FILES)} in {root / NAME / 'raw'} (the TU Dortmund "
            f"files from {TUDataset.url}/{NAME}.zip and {NAME}_edge_gt.txt from {GT_URL}), or set "
            f"LRP_DATA_ROOT to a folder that has them."
        ) from err


def book_split(dataset) -> tuple[list[int], list[int]]:
    """The book's split of the data set: a quarter of the molecules for the test, stratified by label
    (scikit-learn's ``train_test_split``, ``random_state=11``).  Returns the train and test indices."""
    from sklearn.model_selection import train_test_split

    labels = dataset._data.y.tolist() if hasattr(dataset, "_data") else [int(g.y) for g in dataset]
    return train_test_split(list(range(len(dataset))), stratify=labels, test_size=0.25, random_state=11)


def has_group(graph: Data, a: str = "N", b: str = "O") -> bool:
    """Whether ``graph`` has a ground-truth bond from an atom of element ``a`` to one of ``b`` (:data:`ATOMS`)."""
    for name, element in (("a", a), ("b", b)):
        if element not in ATOMS:
            raise ValueError(f"{name} must be one of ATOMS ({', '.join(ATOMS)}), got {element!r}")
    s, d = graph.edge_index[:, graph.edge_gt.bool()]
    kinds = graph.x.argmax(-1)
    return bool(((kinds[s] == ATOMS.index(a)) & (kinds[d] == ATOMS.index(b))).any())


def explained_mutagen(model, test_set, device=None) -> tuple[list[Data], list[float], int]:
    """The molecule the book's chapters explain: among the test mutagens with ground-truth bonds (returned, with
    the model's logit of each), the position of the first that the model classifies correctly (logit below 0:
    "mutagen" is class 0) with a marked nitrogen-oxygen bond (a nitro group) and 14 to 22 atoms."""
    evaluation = [g for g in test_set if int(g.y) == MUTAGEN and bool(g.edge_gt.any())]
    with torch.no_grad():
        logits = [float(model(g.x.to(device), g.edge_index.to(device)) if device is not None else
                        model(g.x, g.edge_index)) for g in evaluation]
    picks = [i for i, (g, z) in enumerate(zip(evaluation, logits))
             if z < 0 and has_group(g) and 14 <= g.num_nodes <= 22]
    if not picks:
        raise ValueError("no correctly classified test mutagen with a marked nitro group and 14 to 22 atoms: "
                         "is model the book's trained Mutagenicity GCN?")
    return evaluation, logits, picks[0]


def to_rdkit(data: Data):
    """The RDKit molecule of a Mutagenicity graph: atom ``i`` is node ``i``, one bond per edge pair.

    ``data.x`` must be the one-hot atom types (columns :data:`ATOMS`) and ``data.edge_attr`` the
    one-hot bond orders (columns :data:`BOND_ORDERS`); both directions of a bond must be present and
    agree.  Bonds are added in the order their first directed edge appears in ``data.edge_index``
    (use :func:`lrp_lib.book.plotting.bond_values` to map per-edge values onto the bonds).

    The data set lists every hydrogen as an atom, so no implicit hydrogens are added.  It writes a
    nitro group as ``N(=O)-O`` without charges; a nitrogen with four bonds gets the charge +1 and
    each of its singly bonded, otherwise bare oxygens -1 (the usual charge-separated ``[N+](=O)[O-]``);
    an oxygen with three bonds (the pyrylium rings of a few dyes) gets +1.
    Groups are not rewritten (no RDKit clean-up), so every bond keeps the order of ``edge_attr``
    (Kekule form). Four molecules still break RDKit's valence rules (uncharged perchlorate and
    periodate ions); they are sanitised partially (everything except the valence
    check) instead of refused, which is enough to draw them.
    """
    from rdkit import Chem, rdBase

    for name in ("x", "edge_index", "edge_attr"):
        if getattr(data, name, None) is None:
            raise ValueError(f"data.{name} is required to build the molecule")
    x, edge_index, edge_attr = data.x.detach().cpu(), data.edge_index.detach().cpu(), data.edge_attr.detach().cpu()
    if x.dim() != 2 or x.shape[1] != len(ATOMS):
        raise ValueError(f"data.x must be one-hot with {len(ATOMS)} columns (ATOMS), got shape {tuple(x.shape)}")
    if edge_attr.dim() != 2 or edge_attr.shape != (edge_index.shape[1], len(BOND_ORDERS)):
        raise ValueError(f"data.edge_attr must be one-hot with {len(BOND_ORDERS)} columns (BOND_ORDERS) and one "
                         f"row per edge ({edge_index.shape[1]}), got shape {tuple(edge_attr.shape)}")
    kinds = x.argmax(-1).tolist()
    orders = [BOND_ORDERS[k] for k in edge_attr.argmax(-1).tolist()]
    bond_type = {1: Chem.BondType.SINGLE, 2: Chem.BondType.DOUBLE, 3: Chem.BondType.TRIPLE}

    mol = Chem.RWMol()
    for k in kinds:
        atom = Chem.Atom(ATOMS[k])
        atom.SetNoImplicit(True)  # hydrogens are atoms of the graph
        mol.AddAtom(atom)
    seen: dict[tuple[int, int], int] = {}
    for e, (s, r) in enumerate(edge_index.t().tolist()):
        if s == r:
            raise ValueError(f"data.edge_index has a self-loop at edge {e} (node {s}); a molecule has none")
        key = (min(s, r), max(s, r))
        if key in seen:
            if seen[key] != orders[e]:
                raise ValueError(f"data.edge_attr gives the bond {key} the orders {seen[key]} and {orders[e]} "
                                 f"in its two directions")
            continue
        seen[key] = orders[e]
        mol.AddBond(s, r, bond_type[orders[e]])
    valence = [0] * len(kinds)
    for (s, r), order in seen.items():
        valence[s] += order
        valence[r] += order
    for atom in mol.GetAtoms():
        if atom.GetSymbol() == "N" and valence[atom.GetIdx()] == 4:
            atom.SetFormalCharge(1)
            for bond in atom.GetBonds():
                other = bond.GetOtherAtom(atom)
                if (other.GetSymbol() == "O" and bond.GetBondType() == Chem.BondType.SINGLE
                        and other.GetDegree() == 1):
                    other.SetFormalCharge(-1)
        elif atom.GetSymbol() == "O" and valence[atom.GetIdx()] == 3:  # an oxonium (pyrylium) oxygen
            atom.SetFormalCharge(1)
    mol = mol.GetMol()
    quiet = rdBase.BlockLogs()  # RDKit's valence complaints; the partial sanitisation below handles them
    keep = Chem.SanitizeFlags.SANITIZE_ALL ^ Chem.SanitizeFlags.SANITIZE_CLEANUP  # no rewriting of groups
    problems = Chem.SanitizeMol(mol, keep, catchErrors=True)
    if problems != Chem.SanitizeFlags.SANITIZE_NONE:
        mol.UpdatePropertyCache(strict=False)
        Chem.SanitizeMol(mol, keep ^ Chem.SanitizeFlags.SANITIZE_PROPERTIES, catchErrors=True)
    # back to the data set's own single and double bonds where sanitising perceived aromatic rings
    for bond in mol.GetBonds():
        if bond.GetIsAromatic():
            i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
            bond.SetBondType(bond_type[seen[(min(i, j), max(i, j))]])
            bond.SetIsAromatic(False)
    for atom in mol.GetAtoms():
        atom.SetIsAromatic(False)
    del quiet
    return mol
