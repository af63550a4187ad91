"""ESOL loader: parsed graphs checked against the csv's own columns (molecular weight recomputed
from our atom features, ring counts, minimum degree, targets), hand-checked small molecules, the
bond/edge layout, and the errors."""
import csv
import os
from pathlib import Path

import pytest
import torch

from lrp_lib.book.datasets import esol
from lrp_lib.book.datasets.esol import ATOM_TYPES, EDGE_FEATURES, FILENAME, NODE_FEATURES, TARGET_COLUMN, smiles_to_graph

ROOT = os.environ.get("LRP_DATA_ROOT")
needs_data = pytest.mark.skipif(not ROOT or not (Path(ROOT) / FILENAME).exists(),
                                reason="LRP_DATA_ROOT with delaney-processed.csv not set")
MASS = {"C": 12.011, "N": 14.007, "O": 15.999, "S": 32.065, "F": 18.998, "Cl": 35.453, "Br": 79.904,
        "I": 126.904, "P": 30.974, "H": 1.008}


@pytest.fixture(scope="module")
def data():
    with open(Path(ROOT) / FILENAME, newline="") as f:
        rows = list(csv.DictReader(f))
    return esol(ROOT, download=False), rows


@needs_data
def test_every_row_parsed_with_its_target(data):
    graphs, rows = data
    assert len(graphs) == len(rows) == 1128
    for g, r in zip(graphs, rows):
        assert g.y.shape == (1,) and g.y.item() == pytest.approx(float(r[TARGET_COLUMN]), abs=1e-6)
        assert g.name == r["Compound ID"] and g.smiles == r["smiles"].strip()


@needs_data
def test_against_the_csv_columns(data):
    graphs, rows = data
    heavy_only = 0
    for g, r in zip(graphs, rows):
        # molecular weight from our element one-hots and hydrogen counts vs the csv's column
        elements = g.x[:, :len(ATOM_TYPES)].sum(0)
        hydrogens = (g.x[:, 12:16] * torch.arange(4)).sum()
        assert g.x[:, len(ATOM_TYPES)].sum() == 0  # no 'other' atoms in ESOL
        mw = sum(float(elements[i]) * MASS[a] for i, a in enumerate(ATOM_TYPES)) + float(hydrogens) * MASS["H"]
        if g.num_nodes > 1:  # methane has 4 H, which the one-hot caps at "3+"
            assert mw == pytest.approx(float(r["Molecular Weight"]), abs=0.05), r["smiles"]
            heavy_only += 1
        assert g.u[0, 0].item() * 100 == pytest.approx(float(r["Molecular Weight"]), abs=0.01)
        assert int(g.u[0, 1]) == int(float(r["Number of Rings"]))
        degree = torch.bincount(g.edge_index[1], minlength=g.num_nodes)
        assert int(degree.min()) == int(r["Minimum Degree"]), r["smiles"]
    assert heavy_only == 1127


def test_benzene_phenol_ethanol_by_hand():
    benzene = smiles_to_graph("c1ccccc1")
    assert benzene.x.shape == (6, len(NODE_FEATURES)) and benzene.edge_index.shape == (2, 12)
    carbon = [1.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0]  # C, aromatic, ring, one H
    assert benzene.x.tolist() == [carbon] * 6
    assert benzene.edge_attr.tolist() == [[0, 0, 0, 1, 1, 1]] * 12  # aromatic, conjugated, ring
    assert benzene.u.shape == (1, 2) and benzene.u[0, 1] == 1

    phenol = smiles_to_graph("Oc1ccccc1")
    oxygen = phenol.x[0]
    assert oxygen[ATOM_TYPES.index("O")] == 1 and oxygen[13] == 1 and oxygen[10] == 0  # O-H, not aromatic
    assert phenol.edge_attr[0, EDGE_FEATURES.index("single")] == 1

    ethanol = smiles_to_graph("CCO")
    assert ethanol.x[:, 12:16].argmax(1).tolist() == [3, 2, 1]  # CH3, CH2, OH
    assert ethanol.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert ethanol.u[0, 0].item() == pytest.approx(0.46069, abs=1e-4)

    charged = smiles_to_graph("C[N+](=O)[O-]")  # nitromethane
    assert charged.x[:, 16].tolist() == [0, 1, 0, -1]


def test_each_bond_gives_two_reversed_edges():
    g = smiles_to_graph("OCC(=O)N1CCC1C#N")
    assert torch.equal(g.edge_index[:, 0::2], g.edge_index[:, 1::2].flip(0))
    assert torch.equal(g.edge_attr[0::2], g.edge_attr[1::2])
    assert (g.edge_attr[:, :4].sum(1) == 1).all() and (g.x[:, :10].sum(1) == 1).all()
    assert g.edge_attr[:, EDGE_FEATURES.index("triple")].sum() == 2


def test_single_atom_has_no_edges():
    g = smiles_to_graph("C")
    assert g.edge_index.shape == (2, 0) and g.edge_attr.shape == (0, len(EDGE_FEATURES))


def test_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="RDKit cannot parse the SMILES string 'C1CC'"):
        smiles_to_graph("C1CC")
    with pytest.raises(TypeError, match="smiles must be a str"):
        smiles_to_graph(None)
    with pytest.raises(FileNotFoundError, match="delaney-processed.csv does not exist"):
        esol(tmp_path, download=False)
    monkeypatch.setenv("LRP_DATA_ROOT", str(tmp_path))  # the default root follows the variable
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        esol(download=False)
    (tmp_path / FILENAME).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="lacks the column"):
        esol(tmp_path, download=False)
