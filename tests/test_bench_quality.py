"""benchmarks/bench_quality.py: its LRP variants and CAM from their definitions, and a --fast run's JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.explain import Explainer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_quality as bq  # noqa: E402
import quality_tasks as qt  # noqa: E402

from lrp_lib.explain import LRPExplainer  # noqa: E402
from lrp_lib.results import validate_results  # noqa: E402


def small_graph_model(seed=0):
    torch.manual_seed(seed)
    model = qt.GraphGCN(4, 3, hidden=8, layers=2).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(-0.5, 0.5)  # biases that matter
    x = torch.rand(7, 4, dtype=torch.double)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 5]])
    return model, x, edge_index


def lrp(model, rule):
    return Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="model", node_mask_type="object",
                     edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))


def test_epsilon_without_bias_sends_the_whole_logit_to_the_inputs():
    model, x, edge_index = small_graph_model()
    with torch.no_grad():  # only the head's bias (the one the rule sees: GCNConv adds its bias outside its Linear)
        for conv in model.convs:
            conv.bias.zero_()
    logit = model(x, edge_index).max().detach()
    with_bias = lrp(model, "epsilon")(x, edge_index).node_mask.sum()
    without = lrp(model, bq.EpsilonNoBias(0.0))(x, edge_index).node_mask.sum()
    assert float(without) == pytest.approx(float(logit), rel=1e-9)
    assert abs(float(with_bias) - float(logit)) > 1e-3  # the biases take their share under the default rule


def test_contrast_is_each_logit_minus_the_mean_of_the_others():
    model, x, edge_index = small_graph_model()
    z = model(x, edge_index)
    got = bq.Contrast(model, 3).double()(x, edge_index)
    want = torch.stack([z[:, c] - (z.sum(1) - z[:, c]) / 2 for c in range(3)], 1)
    torch.testing.assert_close(got, want.to(got.dtype))


def test_cam_is_the_head_contribution_of_each_node():
    model, x, edge_index = small_graph_model()
    model = model.float()
    x = x.float()
    inst = qt.Data(x=x, edge_index=edge_index, y=torch.tensor([0]))
    task = qt.Task("toy", "graph", "atom", model, 1.0, instances=[inst])
    methods = bq.Methods(task, 0, 1, ["cam"])
    cam = methods._cam("cam", inst)
    z = model(x, edge_index)
    c = int(z.argmax())
    # mean pool then a linear head: the logit is the bias plus the mean of the nodes' contributions
    assert float(cam.mean() + model.head.bias[c]) == pytest.approx(float(z[0, c]), rel=1e-5)
    grad_cam = methods._cam("grad_cam", inst)
    torch.testing.assert_close(grad_cam, torch.relu(cam) / x.shape[0])


def test_infection_truth_marks_the_shortest_paths_only():
    # 0 infected; path 0 -> 1 -> 2 -> 3 and a detour 0 -> 4 -> 5 -> 6 -> 3 (longer)
    pairs = [(0, 1), (1, 2), (2, 3), (0, 4), (4, 5), (5, 6), (6, 3)]
    edge_index = torch.tensor(pairs + [(b, a) for a, b in pairs]).t()
    data = qt.Data(edge_index=edge_index, num_nodes=7)
    data.infected = torch.tensor([True] + [False] * 6)
    truth = qt.infection_truth(data, 3)
    marked = {tuple(e) for e in edge_index.t()[truth.bool()].tolist()}
    assert marked == {(0, 1), (1, 2), (2, 3)}


def test_fast_run_writes_every_method_and_lrp_beats_random(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_quality.py"), "--fast", "--tasks",
                          "ba_shapes", "--out", str(tmp_path), "--no-progress"],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    data = validate_results(json.loads((tmp_path / "quality.json").read_text()), "quality")
    assert data["settings"]["fast"] is True
    diagnostics = data["results"]["signed_diagnostics"]
    assert set(diagnostics["variants"]) >= {"epsilon, logit", "z+, contrast"}
    assert set(diagnostics["relevance_sums"]) == {"explained_logit", "inputs", "biases", "motif_edges",
                                                  "other_subgraph_edges"}
    task = data["results"]["tasks"]["ba_shapes"]
    assert 0.5 < task["accuracy"] <= 1.0
    methods = task["methods"]
    assert set(methods) == set(bq.METHODS) - {"cam", "grad_cam"}  # node-level: no pooling, so no CAM
    for name, row in methods.items():
        assert set(row) >= {"auroc", "auroc_std", "auroc_per_seed", "ms"}, name
        assert 0.0 <= row["auroc"] <= 1.0 and row["ms"] > 0, name
    for lrp in ("lrp_eps_abs", "lrp_zplus_contrast"):
        assert methods[lrp]["auroc"] > methods["random"]["auroc"] + 0.15, lrp
    assert np.isfinite(methods["random"]["auroc"])
