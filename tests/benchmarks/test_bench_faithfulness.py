"""benchmarks/bench_faithfulness.py: deletion and insertion curves from their definition on models whose answer is
known, the areas and fidelities by hand, and a small run's results on two of the book's tasks."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_faithfulness as bf  # noqa: E402

from lrp_lib.book.results import validate_results  # noqa: E402


class InDegree(nn.Module):
    """Logit 0 of node i: the summed weight of the edges into i (edge j weighs j + 1); logit 1: zero.  Removing the
    heaviest edges first lowers logit 0 fastest."""

    def forward(self, x, edge_index):
        weight = (edge_index[0] + 1).to(x.dtype) * x[edge_index[0], 0]
        z = torch.zeros(x.shape[0], dtype=x.dtype).index_add_(0, edge_index[1], weight)
        return torch.stack([z, torch.zeros_like(z)], dim=-1)


def star(n=10):
    """Edges j -> 0 for j = 1..n: edge k comes from node k + 1."""
    src = torch.arange(1, n + 1)
    return torch.ones(n + 1, 1, dtype=torch.float64), torch.stack([src, torch.zeros_like(src)])


def test_ranking_puts_the_highest_first_and_breaks_ties_by_the_seed():
    scores = torch.tensor([0.1, 0.9, 0.5, 0.5, 0.0])
    order = bf.ranking(scores, seed=0)
    assert order[0] == 1 and order[-1] == 4 and set(order[1:3].tolist()) == {2, 3}
    ties = torch.zeros(50)
    assert torch.equal(bf.ranking(ties, 3), bf.ranking(ties, 3))
    assert not torch.equal(bf.ranking(ties, 3), bf.ranking(ties, 4))
    assert sorted(bf.ranking(ties, 3).tolist()) == list(range(50))


def test_deletion_and_insertion_follow_the_model():
    """On the in-degree model the heaviest-first ranking is the most faithful one: its deletion area is the smallest
    and its insertion area the largest, the reversed ranking is the least faithful, and the curves' values are the
    model's own (the logit after removing the k heaviest edges is the sum of the rest)."""
    model = InDegree()
    x, edge_index = star()
    weights = torch.arange(2, 12, dtype=torch.float64)  # edge k weighs k + 2 (its source node k + 1, plus one)
    best, worst = bf.ranking(weights, 0), bf.ranking(-weights, 0)
    c = bf.curves(model, x, edge_index, 0, 0, best, "edges")
    total = float(weights.sum())
    assert c["deletion"][0][0] == total and c["deletion"][-1][0] == 0.0
    assert c["deletion"][1][0] == total - 11  # 10 % of 10 edges: the heaviest one
    assert c["insertion"][1][0] == 11 and c["insertion"][-1][0] == total
    areas = {name: bf.summarise_instance(bf.curves(model, x, edge_index, 0, 0, order, "edges"), 0)
             for name, order in (("best", best), ("worst", worst),
                                 ("random", bf.ranking(torch.rand(10, generator=torch.Generator().manual_seed(1)), 0)))}
    assert areas["best"]["deletion_logit"] < areas["random"]["deletion_logit"] < areas["worst"]["deletion_logit"]
    assert areas["best"]["insertion_logit"] > areas["random"]["insertion_logit"] > areas["worst"]["insertion_logit"]
    # deletion and insertion of one ranking add up to one (the logit is additive over the edges)
    assert areas["best"]["deletion_logit"] + areas["best"]["insertion_logit"] == pytest.approx(1.0)
    # nodes: zeroing the features of the heaviest sources first
    nodes = bf.curves(model, x, edge_index, 0, 0, bf.ranking(torch.arange(11.0), 0), "nodes")
    assert nodes["deletion"][1][0] == total - 11


def test_areas_and_fidelity_by_hand():
    steps = len(bf.STEPS)
    deletion = [(1.0 - f, 0.9 if f < 0.15 else 0.2, 0 if f < 0.15 else 1) for f in bf.STEPS]
    insertion = [(f, 0.5, 1 if f < 0.25 else 0) for f in bf.STEPS]
    got = bf.summarise_instance({"deletion": deletion, "insertion": insertion}, target=0)
    assert got["deletion_logit"] == pytest.approx(0.5) and got["insertion_logit"] == pytest.approx(0.5)
    probs = np.array([v[1] for v in deletion])
    assert got["deletion_probability"] == pytest.approx(float(np.trapezoid(probs, bf.STEPS)))
    assert got["insertion_probability"] == pytest.approx(0.5)
    assert got["fid_plus@0.1"] == 0.0 and got["fid_plus@0.2"] == 1.0  # the prediction flips from 20 % removed
    assert got["fid_minus@0.2"] == 1.0 and got["fid_minus@0.3"] == 0.0  # and is kept from 30 % kept
    flat = [(0.3, 0.5, 0)] * steps  # the logit does not depend on the edges: no normalised area
    assert bf.summarise_instance({"deletion": flat, "insertion": flat}, 0)["deletion_logit"] is None


class FirstNode(nn.Module):
    """A graph classifier whose logits are (x[0, 0], 0): only node 0 matters."""

    def forward(self, x, edge_index):
        return torch.stack([x[0, 0], torch.zeros((), dtype=x.dtype)]).unsqueeze(0)


def test_gef_both_ways_by_hand():
    """GraphXAI's GEF on a model that reads node 0 only (4 nodes: the top quarter is one node).  Ranking node 0 first
    is the faithful explanation: the paper's GEF (only the top node kept) is 0, while the code's (the top node
    zeroed) is the divergence from the uniform prediction, its largest value here; ranking it last swaps them."""
    model = FirstNode()
    x = torch.tensor([[2.0], [5.0], [7.0], [1.0]], dtype=torch.float64)
    edge_index = torch.zeros(2, 0, dtype=torch.long)
    p = torch.softmax(torch.tensor([2.0, 0.0], dtype=torch.float64), 0)
    u = torch.full((2,), 0.5, dtype=torch.float64)
    kl_u_p = float((u * (u / p).log()).sum())  # KL(uniform || p): the code's direction, node 0 zeroed
    kl_p_u = float((p * (p / u).log()).sum())  # KL(p || uniform): the paper's direction, node 0 dropped
    first = bf.gef(model, x, edge_index, torch.tensor([0, 1, 2, 3]))
    assert first["gef_paper"] == pytest.approx(0.0, abs=1e-12)
    assert first["gef_code"] == pytest.approx(1 - np.exp(-kl_u_p), rel=1e-12)
    last = bf.gef(model, x, edge_index, torch.tensor([3, 2, 1, 0]))
    assert last["gef_code"] == pytest.approx(0.0, abs=1e-12)
    assert last["gef_paper"] == pytest.approx(1 - np.exp(-kl_p_u), rel=1e-12)
    assert kl_u_p != pytest.approx(kl_p_u)  # the two directions differ: each is checked


def test_a_run_on_two_tasks(tmp_path):
    """Two tasks (a node task and a molecule task), one seed, two instances, the default LRP configuration and the
    reference rows: every area and fidelity inside its range, intervals inside the range, a valid results file."""
    methods = "lrp_zplus_logit_abs,saliency,random,ground_truth"
    bf.main(["--tasks", "ba_shapes,benzene", "--seeds", "2", "--instances", "2", "--methods", methods,
             "--out", str(tmp_path)])
    data = json.loads((tmp_path / "faithfulness.json").read_text())
    validate_results(data)
    for task in ("ba_shapes", "benzene"):
        rows = data["results"][task]["methods"]
        assert set(rows) == set(methods.split(","))
        for method, row in rows.items():
            for key, value in row.items():
                if key.split("_", 1)[1].startswith(("deletion_probability", "insertion_probability", "fid", "gef")):
                    assert 0.0 <= value["mean"] <= 1.0, (task, method, key)
                    if value["ci95"] is not None:
                        assert 0.0 <= value["ci95"][0] <= value["ci95"][1] <= 1.0
            assert "edges_deletion_probability" in row and "nodes_insertion_probability" in row
            assert ("nodes_gef_code" in row and "nodes_gef_paper" in row) == (task == "benzene")  # graph tasks only
    with pytest.raises(SystemExit):
        bf.main(["--tasks", "nope", "--out", str(tmp_path)])
