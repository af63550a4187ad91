r"""ESOL (Delaney, 2004): 1,128 molecules and their measured aqueous solubility, as PyG graphs.

The data is MoleculeNet's ``delaney-processed.csv`` (the file PyG's
``MoleculeNet(root, "ESOL")`` downloads).  :func:`esol` reads it from ``root`` and, if it is not
there, downloads it from MoleculeNet's address (:data:`URL`).  ``root`` defaults to
``$LRP_DATA_ROOT`` when that is set (tests and CI point it at a local copy), else to
``~/.cache/lrp_lib/data``.

Each SMILES string is parsed by RDKit (:func:`smiles_to_graph`) into a graph with

* node features ``x`` (one row per heavy atom, :data:`NODE_FEATURES`): the element one-hot
  over :data:`ATOM_TYPES` (with ``other``), aromatic, in a ring, the number of attached
  hydrogens one-hot (0, 1, 2, 3+), the formal charge;
* edge features ``edge_attr`` (:data:`EDGE_FEATURES`): the bond type one-hot (single, double,
  triple, aromatic), conjugated, in a ring.  Each bond gives two directed edges, ``2b`` and
  ``2b + 1`` for RDKit's bond ``b``, so ``edge_index[:, ::2]`` lists each bond once;
* global features ``u`` (1 x 2, :data:`GLOBAL_FEATURES`): molecular weight / 100 and the
  number of rings;
* ``y`` (1,): the measured log solubility in mol/L, plus ``smiles`` and ``name``.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import torch
from torch_geometric.data import Data

from lrp_lib.book.datasets.roots import data_root

__all__ = ["esol", "smiles_to_graph", "default_root", "ATOM_TYPES", "NODE_FEATURES", "EDGE_FEATURES", "GLOBAL_FEATURES",
           "URL", "FILENAME", "TARGET_COLUMN"]

URL = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/delaney-processed.csv"
FILENAME = "delaney-processed.csv"
TARGET_COLUMN = "measured log solubility in mols per litre"

ATOM_TYPES = ["C", "N", "O", "S", "F", "Cl", "Br", "I", "P"]
BOND_TYPES = ["SINGLE", "DOUBLE", "TRIPLE", "AROMATIC"]
NODE_FEATURES = ATOM_TYPES + ["other", "aromatic", "in_ring", "H0", "H1", "H2", "H3+", "charge"]
EDGE_FEATURES = ["single", "double", "triple", "aromatic", "conjugated", "in_ring"]
GLOBAL_FEATURES = ["mol_weight/100", "num_rings"]


def _rdkit():
    from rdkit import Chem, RDLogger
    from rdkit.Chem import Descriptors

    RDLogger.DisableLog("rdApp.*")
    return Chem, Descriptors


def smiles_to_graph(smiles: str) -> Data:
    """Parse a SMILES string with RDKit into a :class:`~torch_geometric.data.Data` (no ``y``).

    Raises ``ValueError`` naming the string if RDKit cannot parse it.
    """
    if not isinstance(smiles, str):
        raise TypeError(f"smiles must be a str, got {type(smiles).__name__}")
    Chem, Descriptors = _rdkit()
    mol = Chem.MolFromSmiles(smiles.strip())
    if mol is None or mol.GetNumAtoms() == 0:
        raise ValueError(f"RDKit cannot parse the SMILES string {smiles!r}")
    rows = []  # in atom index order
    for atom in mol.GetAtoms():
        row = [0.0] * len(NODE_FEATURES)
        symbol = atom.GetSymbol()
        row[ATOM_TYPES.index(symbol) if symbol in ATOM_TYPES else len(ATOM_TYPES)] = 1.0
        row[10] = float(atom.GetIsAromatic())
        row[11] = float(atom.IsInRing())
        row[12 + min(atom.GetTotalNumHs(), 3)] = 1.0
        row[16] = float(atom.GetFormalCharge())
        rows.append(row)
    x = torch.tensor(rows)
    senders, receivers, edge_attr = [], [], []
    for bond in mol.GetBonds():
        a, b = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        feats = [0.0] * len(EDGE_FEATURES)
        feats[BOND_TYPES.index(str(bond.GetBondType()))] = 1.0
        feats[4], feats[5] = float(bond.GetIsConjugated()), float(bond.IsInRing())
        senders += [a, b]
        receivers += [b, a]
        edge_attr += [feats, feats]
    edge_index = torch.tensor([senders, receivers], dtype=torch.long).reshape(2, -1)
    edge_attr = torch.tensor(edge_attr, dtype=torch.float).reshape(-1, len(EDGE_FEATURES))
    u = torch.tensor([[Descriptors.MolWt(mol) / 100, float(mol.GetRingInfo().NumRings())]])
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, u=u, smiles=smiles.strip())


def default_root() -> Path:
    """Where :func:`esol` looks by default: :func:`lrp_lib.book.datasets.roots.data_root` (``$LRP_DATA_ROOT``
    if set, else the cache, ``$LRP_CACHE_DIR`` or ``~/.cache/lrp_lib/data``)."""
    return data_root()


def esol(root: str | os.PathLike | None = None, download: bool = True) -> list[Data]:
    """The ESOL molecules as a list of graphs with ``y`` = measured log solubility (mol/L), file order.

    Reads ``root/delaney-processed.csv``; if it is missing and ``download`` is true, downloads it
    from :data:`URL` into ``root`` first.  ``root`` defaults to ``$LRP_DATA_ROOT`` or
    ``~/.cache/lrp_lib/data``.
    """
    root = default_root() if root is None else Path(root)
    path = root / FILENAME
    if not path.exists():
        if not download:
            raise FileNotFoundError(f"{path} does not exist (and download=False); get it from {URL}")
        from torch_geometric.data import download_url

        root.mkdir(parents=True, exist_ok=True)
        download_url(URL, str(root), log=False)
    graphs = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"smiles", TARGET_COLUMN, "Compound ID"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path} lacks the column(s) {sorted(missing)}; is it MoleculeNet's {FILENAME}?")
        for row in reader:
            g = smiles_to_graph(row["smiles"])
            g.y = torch.tensor([float(row[TARGET_COLUMN])])
            g.name = row["Compound ID"]
            graphs.append(g)
    return graphs
