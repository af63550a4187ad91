"""Mutagenicity loader: the NO2 / NH2 ground truth stays aligned with PyG's re-sorted edges."""
import os
import re
from pathlib import Path

import pytest
import torch

from lrp_lib.datasets import mutagenicity
from lrp_lib.datasets.mutagenicity import ATOMS, MUTAGEN, MutagenicityWithGroundTruth

DATA_ROOT = Path(os.environ.get("LRP_DATA_ROOT") or Path(__file__).resolve().parents[2] / "shared" / "data")
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
