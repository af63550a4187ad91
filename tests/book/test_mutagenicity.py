"""Mutagenicity loader: the NO2 / NH2 ground truth stays aligned with PyG's re-sorted edges."""
import os
import re
from pathlib import Path

import pytest
import torch

from lrp_lib.book.datasets import mutagenicity
from lrp_lib.book.datasets.mutagenicity import ATOMS, MUTAGEN, MutagenicityWithGroundTruth

DATA_ROOT = Path(os.environ.get("LRP_DATA_ROOT") or Path(__file__).resolve().parents[3] / "shared" / "data")
RAW = DATA_ROOT / "Mutagenicity" / "raw"
pytestmark = pytest.mark.skipif(not RAW.is_dir(), reason=f"no Mutagenicity files under {DATA_ROOT}")


@pytest.fixture(scope="module")
def dataset():
    return mutagenicity(DATA_ROOT)  # processed once into the cache (~/.cache/lrp-book/data)


def test_sizes_and_labels(dataset):
    assert len(dataset) == 4337
    y = dataset._data.y
    assert int((y == MUTAGEN).sum()) == 2401 and int((y == 1).sum()) == 1936
    assert dataset.num_features == len(ATOMS) == 14
    # every marked line of the raw file survives: no marked edge is a self-loop
    assert int(dataset._data.edge_gt.sum()) == 7352


def global_edges(dataset):
    """All graphs' edges with node ids offset into the one node table of the data set."""
    data, slices = dataset._data, dataset.slices
    counts = slices["edge_index"].diff()
    graph_of_edge = torch.repeat_interleave(torch.arange(len(dataset)), counts)
    return data.edge_index + slices["x"][graph_of_edge], graph_of_edge


def test_ground_truth_is_aligned_with_the_edges(dataset):
    """Every marked edge joins N with O or N with H, and both directions of a bond agree."""
    n, o, h = ATOMS.index("N"), ATOMS.index("O"), ATOMS.index("H")
    data = dataset._data
    atom = data.x.argmax(-1)
    edges, _ = global_edges(dataset)
    marked = data.edge_gt.bool()
    a, b = atom[edges[0, marked]], atom[edges[1, marked]]
    n_o_or_n_h = ((a == n) & ((b == o) | (b == h))) | ((b == n) & ((a == o) | (a == h)))
    assert bool(n_o_or_n_h.all())
    # the reverse of each marked edge is marked too
    key = edges[0] * data.x.shape[0] + edges[1]
    reverse_key = edges[1] * data.x.shape[0] + edges[0]
    marked_keys = set(key[marked].tolist())
    assert set(reverse_key[marked].tolist()) == marked_keys
    # one graph read through the dataset's per-graph view agrees with the global table
    _, graph_of_edge = global_edges(dataset)
    g = int(graph_of_edge[marked][0])
    graph = dataset[g]
    assert torch.equal(graph.edge_gt, data.edge_gt[graph_of_edge == g])


def test_misaligned_ground_truth_is_detectable(dataset):
    """The check above fails for the naive reading (the file in raw order, cut per graph)."""
    raw_gt = torch.tensor([int(v) for v in (RAW / "Mutagenicity_edge_gt.txt").read_text().split()])
    raw_edges = torch.tensor([[int(v) for v in line.split(",")]
                              for line in (RAW / "Mutagenicity_A.txt").read_text().splitlines()]).t() - 1
    atom = dataset._data.x.argmax(-1)
    n, o, h = ATOMS.index("N"), ATOMS.index("O"), ATOMS.index("H")
    # raw order: the marks sit on N-O / N-H bonds
    a, b = atom[raw_edges[0][raw_gt == 1]], atom[raw_edges[1][raw_gt == 1]]
    assert bool((((a == n) & ((b == o) | (b == h))) | ((b == n) & ((a == o) | (a == h)))).all())
    # the raw file in PyG's order would not be: PyG re-sorted the edges
    pyg_order = dataset._data.edge_gt
    assert not torch.equal(pyg_order, raw_gt[: pyg_order.numel()])


def test_mutagens_with_ground_truth(dataset):
    """The PGExplainer evaluation set: mutagens with at least one NO2 / NH2 edge."""
    _, graph_of_edge = global_edges(dataset)
    has_gt = torch.zeros(len(dataset), dtype=torch.bool)
    has_gt[graph_of_edge[dataset._data.edge_gt.bool()]] = True
    count = int((has_gt & (dataset._data.y == MUTAGEN)).sum())
    assert count == 1015


def test_missing_files_give_a_clear_error(tmp_path, monkeypatch):
    def offline(self):
        raise OSError("no network")

    monkeypatch.setattr(MutagenicityWithGroundTruth, "download", offline)
    with pytest.raises(FileNotFoundError, match=r"Mutagenicity_edge_gt\.txt.*" + re.escape(str(tmp_path / "Mutagenicity" / "raw"))):
        mutagenicity(tmp_path)


def test_does_not_write_into_the_data_root(dataset):
    assert Path(dataset.root).resolve() != DATA_ROOT.resolve()
    assert sorted(p.name for p in (DATA_ROOT / "Mutagenicity").iterdir()) == ["raw"]


def _nitromethane():
    """C-N(=O)-O with three hydrogens, written as Mutagenicity writes it (uncharged, Kekule, explicit H)."""
    from torch_geometric.data import Data

    atoms = ["C", "N", "O", "O", "H", "H", "H"]
    bonds = [(0, 1, 1), (1, 2, 2), (1, 3, 1), (0, 4, 1), (0, 5, 1), (0, 6, 1)]  # (atom, atom, order)
    x = torch.nn.functional.one_hot(torch.tensor([ATOMS.index(a) for a in atoms]), len(ATOMS)).float()
    pairs = [(i, j, o) for i, j, o in bonds] + [(j, i, o) for i, j, o in bonds]
    edge_index = torch.tensor([[i for i, _, _ in pairs], [j for _, j, _ in pairs]])
    edge_attr = torch.nn.functional.one_hot(torch.tensor([o - 1 for _, _, o in pairs]), 3).float()
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr)


def test_to_rdkit_builds_the_charged_nitro_group():
    from rdkit import Chem

    from lrp_lib.book.datasets.mutagenicity import to_rdkit

    mol = to_rdkit(_nitromethane())
    assert [a.GetSymbol() for a in mol.GetAtoms()] == ["C", "N", "O", "O", "H", "H", "H"]
    assert [a.GetFormalCharge() for a in mol.GetAtoms()] == [0, 1, 0, -1, 0, 0, 0]
    assert [(b.GetBeginAtomIdx(), b.GetEndAtomIdx(), b.GetBondTypeAsDouble()) for b in mol.GetBonds()] == [
        (0, 1, 1.0), (1, 2, 2.0), (1, 3, 1.0), (0, 4, 1.0), (0, 5, 1.0), (0, 6, 1.0)]  # order of first edge
    assert Chem.MolToSmiles(Chem.RemoveHs(mol)) == "C[N+](=O)[O-]"
    assert sum(a.GetTotalNumHs() for a in mol.GetAtoms()) == 0  # no implicit hydrogens were added


def test_to_rdkit_round_trips_every_molecule(dataset):
    """Atom symbols and bond orders of every graph come back; all but 4 molecules sanitise fully."""
    from rdkit import Chem

    from lrp_lib.book.datasets.mutagenicity import BOND_ORDERS, to_rdkit

    fully = 0
    for graph in dataset:
        mol = to_rdkit(graph)
        assert [a.GetSymbol() for a in mol.GetAtoms()] == [ATOMS[k] for k in graph.x.argmax(-1).tolist()]
        assert 2 * mol.GetNumBonds() == graph.edge_index.shape[1]
        orders = [BOND_ORDERS[k] for k in graph.edge_attr.argmax(-1).tolist()]
        for (s, r), order in zip(graph.edge_index.t().tolist(), orders):
            assert mol.GetBondBetweenAtoms(s, r).GetBondTypeAsDouble() == order
        no_cleanup = Chem.SanitizeFlags.SANITIZE_ALL ^ Chem.SanitizeFlags.SANITIZE_CLEANUP
        fully += Chem.SanitizeMol(Chem.Mol(mol), no_cleanup, catchErrors=True) == Chem.SanitizeFlags.SANITIZE_NONE
    assert fully == len(dataset) - 4  # 3 perchlorates and 1 periodate (Cl, I with valence 7): partial


def test_to_rdkit_bad_input_names_the_argument():
    from lrp_lib.book.datasets.mutagenicity import to_rdkit

    graph = _nitromethane()
    with pytest.raises(ValueError, match=r"data.x must be one-hot with 14 columns"):
        to_rdkit(graph.clone().update({"x": graph.x[:, :5]}))
    with pytest.raises(ValueError, match=r"data.edge_attr must be one-hot with 3 columns"):
        to_rdkit(graph.clone().update({"edge_attr": graph.edge_attr[:4]}))
    with pytest.raises(ValueError, match=r"data.edge_attr is required"):
        to_rdkit(graph.clone().update({"edge_attr": None}))
    loop = graph.clone().update({"edge_index": torch.cat([graph.edge_index, torch.tensor([[2], [2]])], 1),
                                 "edge_attr": torch.cat([graph.edge_attr, graph.edge_attr[:1]])})
    with pytest.raises(ValueError, match="data.edge_index has a self-loop at edge 12"):
        to_rdkit(loop)
    clash = graph.clone()
    clash.edge_attr = graph.edge_attr.clone()
    clash.edge_attr[7] = torch.tensor([1.0, 0.0, 0.0])  # reverse of N=O said single
    with pytest.raises(ValueError, match=r"gives the bond \(1, 2\) the orders 2 and 1"):
        to_rdkit(clash)


def test_the_books_split_and_molecule():
    """book_split is scikit-learn's stratified split (a quarter for the test, seed 11) and explained_mutagen picks
    the first test mutagen that the model gets right with a marked N-O bond and 14 to 22 atoms; has_group reads
    the marked bonds only and names a bad element."""
    import pytest
    import torch
    from sklearn.model_selection import train_test_split
    from torch_geometric.data import Data

    from lrp_lib.book.datasets.mutagenicity import ATOMS, MUTAGEN, book_split, explained_mutagen, has_group

    def molecule(n, label, marked_no):
        x = torch.zeros(n, len(ATOMS))
        x[:, ATOMS.index("C")] = 1
        x[0] = 0
        x[0, ATOMS.index("N")] = 1
        x[1] = 0
        x[1, ATOMS.index("O")] = 1
        edge_index = torch.tensor([[0, 2], [1, 3]])
        gt = torch.tensor([marked_no, True])
        return Data(x=x, edge_index=edge_index, y=torch.tensor([label]), edge_gt=gt)

    graphs = [molecule(16, MUTAGEN, True), molecule(16, MUTAGEN, False), molecule(30, MUTAGEN, True),
              molecule(18, MUTAGEN, True), molecule(15, 1, True)]
    assert has_group(graphs[0]) and not has_group(graphs[1]) and has_group(graphs[0], "C", "C")
    with pytest.raises(ValueError, match="b must be one of ATOMS"):
        has_group(graphs[0], "N", "Xx")
    logits = {16: -1.0, 30: -2.0, 18: -0.5, 15: -3.0}

    def model(x, edge_index):  # a mutagen's logit by its size; molecule 0 misclassified below
        return torch.tensor(logits[x.shape[0]] if x.shape[0] != 16 or x[2, 0] else 1.0)

    graphs[0].x[2] = 0  # molecule 0: logit +1, wrong
    evaluation, got_logits, pick = explained_mutagen(model, graphs)
    assert len(evaluation) == 4 and got_logits[0] == 1.0  # the four mutagens with marked bonds
    assert evaluation[pick] is graphs[3]  # 0 wrong, 1 no marked N-O bond, 2 too large
    with pytest.raises(ValueError, match="no correctly classified"):
        explained_mutagen(model, graphs[:3])

    class Labelled(list):
        pass

    data = Labelled(molecule(16, i % 2, True) for i in range(40))
    train, test = book_split(data)
    expected = train_test_split(list(range(40)), stratify=[i % 2 for i in range(40)], test_size=0.25,
                                random_state=11)
    assert (train, test) == (expected[0], expected[1]) and len(test) == 10
