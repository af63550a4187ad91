"""benchmarks/bench_sgnn_reproduction.py: the contrast start by hand, and a small run checked against the greedy
search as bench_quality.py scores it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_sgnn_reproduction as bs  # noqa: E402
import quality_tasks as qt  # noqa: E402
import walk_methods  # noqa: E402

from lrp_lib.book.results import validate_results  # noqa: E402


def test_contrast_start_subtracts_the_other_score():
    start = torch.tensor([[0.0, 3.0]])
    got = bs.contrast_start(start, torch.tensor([[2.0, 3.0]]), target=1)
    assert got.tolist() == [[-2.0, 3.0]] and float(got.sum()) == 1.0  # z_t - z_o
    assert start.tolist() == [[0.0, 3.0]]  # not changed in place
    with pytest.raises(ValueError, match="two class scores"):
        bs.contrast_start(torch.zeros(3), torch.zeros(3), 0)


def test_a_run_matches_the_quality_benchmarks_greedy_search(tmp_path):
    """One seed, two graphs: the greedy search from the logit scores what bench_quality.py's ``sgnn_greedy`` scores
    on the same graphs and model; every share lies in [0, 1]."""
    bs.main(["--seeds", "1", "--instances", "2", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "sgnn_reproduction.json").read_text())
    validate_results(data)
    row = data["results"]["per_seed"][0]
    task = qt.build_task("ba_2motifs", 0, 2)
    aurocs = []
    for g in task.instances:
        with torch.no_grad():
            target = int(task.model(g.x, g.edge_index).argmax())
        scores = walk_methods.sgnn_greedy(task.model, g.x, g.edge_index, target)["node"]
        aurocs.append(roc_auc_score(g.node_gt.numpy(), scores.numpy()))
    assert row["auroc_logit"] == pytest.approx(float(np.mean(aurocs)), abs=1e-4)
    for key in ("shared", "motif_share_logit", "motif_share_contrast", "auroc_contrast"):
        assert 0.0 <= row[key] <= 1.0, key
    assert row["z_target"] > row["z_other"]  # the explained class is the predicted one
    with pytest.raises(SystemExit):
        bs.main(["--seeds", "6", "--out", str(tmp_path)])
