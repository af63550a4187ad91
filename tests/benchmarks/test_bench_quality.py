"""benchmarks/bench_quality.py and quality_tasks.py: the protocols, models and statistics from their definitions,
and a --fast run's JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data
from torch_geometric.explain import Explainer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_quality as bq  # noqa: E402
import quality_tasks as qt  # noqa: E402

from lrp_lib.explain.explainer import LRPExplainer  # noqa: E402
from lrp_lib.book.results import validate_results  # noqa: E402

torch.set_num_threads(1)


def node_explainer(model, rule="epsilon"):
    return Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="model", node_mask_type="attributes",
                     edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))


def test_lrp0_on_the_bias_free_holdijk_gcn_is_input_times_gradient():
    data = qt.make_node_data("ba_shapes", 0)
    x = torch.rand(data.num_nodes, 10, dtype=torch.double, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = qt.HoldijkNodeGCN(10, 4).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    data.x = x
    node = 400
    xs, ei, idx, _ = qt.computation_subgraph(data, node)
    e = node_explainer(model, "z")(xs, ei, index=idx)
    xg = xs.clone().requires_grad_(True)
    out = model(xg, ei)[idx]
    c = int(out.argmax())
    out[c].backward()
    torch.testing.assert_close(e.node_relevance if e.get("node_relevance") is not None else e.node_mask,
                               (xg * xg.grad).detach(), rtol=1e-8, atol=1e-10)
    assert float((xg * xg.grad).sum()) == pytest.approx(float(out[c]), rel=1e-9)  # conservation, bias-free


def test_the_4_hop_subgraph_reproduces_the_output_and_3_hops_do_not():
    data = qt.make_node_data("ba_shapes", 1)
    torch.manual_seed(1)
    model = qt.HoldijkNodeGCN(10, 4).eval()
    with torch.no_grad():
        full = model(data.x, data.edge_index)
    worst3 = 0.0
    for node in range(400, 700, 25):
        x, ei, idx, eids = qt.computation_subgraph(data, node, hops=4)
        torch.testing.assert_close(model(x, ei)[idx], full[node], rtol=1e-5, atol=1e-6)
        # the edge ids map back: the subgraph's edges are the task graph's edges eids
        sub_nodes = torch.unique(torch.cat([torch.tensor([node]), data.edge_index[:, eids].view(-1)]))
        torch.testing.assert_close(sub_nodes[ei], data.edge_index[:, eids])
        x3, ei3, idx3, _ = qt.computation_subgraph(data, node, hops=3)
        worst3 = max(worst3, float((model(x3, ei3)[idx3] - full[node]).abs().max()))
    assert worst3 > 1e-4  # GCN's degree normalisation needs the edges into the 3-hop nodes


def test_t_interval_is_scipys():
    vals = [0.81, 0.86, 0.79, 0.9, 0.84]
    mean, lo, hi = bq.t_interval(vals)
    want = stats.t.interval(0.95, len(vals) - 1, loc=np.mean(vals), scale=stats.sem(vals))
    assert mean == pytest.approx(np.mean(vals))
    assert (lo, hi) == pytest.approx(want, rel=1e-12)


def test_pooled_edge_auroc_over_the_3_hop_edges_of_each_node():
    # path 0-1-2-3-4-5 (both directions); motif: edges among 3, 4, 5
    pairs = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    ei = torch.tensor(pairs + [(b, a) for a, b in pairs]).t()
    truth = torch.tensor([0, 0, 0, 1, 1] * 2, dtype=torch.float)
    data = Data(edge_index=ei, edge_mask=truth, num_nodes=6, x=torch.ones(6, 1))
    task = qt.Task("toy", "node", "edge", None, 1.0, "lineage_node", data=data, instances=[0, 5])
    s0 = torch.arange(10, dtype=torch.float)          # instance 0 sees edges among nodes 0..3
    s1 = -torch.arange(10, dtype=torch.float)         # instance 5 sees edges among nodes 2..5
    got = bq.score(task, [(None, s0), (None, s1)])["auroc"]
    hard0 = torch.tensor([1, 1, 1, 0, 0] * 2, dtype=torch.bool)
    hard1 = torch.tensor([0, 0, 1, 1, 1] * 2, dtype=torch.bool)
    want = roc_auc_score(torch.cat([truth[hard0], truth[hard1]]), torch.cat([s0[hard0], s1[hard1]]))
    assert got == pytest.approx(want)
    assert 0 < want < 1


def test_node_auroc_pools_the_3_hop_nodes_against_the_ends_of_the_truth_edges():
    # path 0-1-2-3-4-5-6 (both directions); motif: edges among 4, 5, 6, so nodes 4, 5, 6 are the node truth
    pairs = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    ei = torch.tensor(pairs + [(b, a) for a, b in pairs]).t()
    truth = torch.tensor([0, 0, 0, 0, 1, 1] * 2, dtype=torch.float)
    data = Data(edge_index=ei, edge_mask=truth, num_nodes=7, x=torch.ones(7, 1))
    task = qt.Task("toy", "node", "edge", None, 1.0, "lineage_node", data=data, instances=[1, 6])
    n0 = torch.tensor([0.0, 1, 2, 3, 4, 9, 9])        # instance 1 sees nodes 0..4: node 4 (truth) scores highest
    n1 = torch.tensor([9.0, 9, 9, 5, 1, 2, 3])        # instance 6 sees nodes 3..6: node 3 (not truth) highest
    edge = torch.zeros(12)
    got = bq.score(task, [(n0, edge), (n1, edge)])["node_auroc"]
    want = roc_auc_score([0, 0, 0, 0, 1] + [0, 1, 1, 1], [0, 1, 2, 3, 4] + [5, 1, 2, 3])
    assert got == pytest.approx(want)
    assert 0 < want < 1
    # Mutagenicity: the atoms at the ends of the truth bonds, pooled over the molecules
    g = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), edge_gt=torch.tensor([1.0, 1, 0, 0]),
             num_nodes=3)
    task = qt.Task("toy", "graph", "edge", None, 1.0, "mutag_pooled", instances=[g, g])
    out = bq.score(task, [(torch.tensor([0.9, 0.1, 0.5]), torch.tensor([1.0, 1, 0, 0])),
                          (torch.tensor([0.1, 0.9, 0.5]), torch.tensor([1.0, 1, 0, 0]))])
    assert out["node_auroc"] == pytest.approx(roc_auc_score([1, 1, 0, 1, 1, 0], [0.9, 0.1, 0.5, 0.1, 0.9, 0.5]))


def test_bond_auroc_takes_the_bonds_inside_the_best_alternative():
    # a chain 0-1-2-3; alternative 0: atoms 0, 1 (bond 0-1); alternative 1: atoms 1, 2, 3 (bonds 1-2, 2-3)
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    g = Data(x=torch.ones(4, 1), edge_index=ei,
             atom_gt=torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]]))
    task = qt.Task("toy", "graph", "atom", None, 1.0, "graph_attribution", instances=[g])
    edge = torch.tensor([0.1, 0.2, 0.9, 0.3, 0.8, 0.7])
    got = bq.score(task, [(torch.zeros(4), edge)])["bond_auroc"]
    alt0 = roc_auc_score([1, 1, 0, 0, 0, 0], edge)
    alt1 = roc_auc_score([0, 0, 1, 1, 1, 1], edge)
    assert got == pytest.approx(max(alt0, alt1)) and alt0 != alt1
    # without edge scores, a bond scores the mean of its atoms'
    node = torch.tensor([0.9, 0.1, 0.4, 0.6])
    mean = (node[ei[0]] + node[ei[1]]) / 2
    want = max(roc_auc_score([1, 1, 0, 0, 0, 0], mean), roc_auc_score([0, 0, 1, 1, 1, 1], mean))
    assert bq.score(task, [(node, None)])["bond_auroc"] == pytest.approx(want)


def test_atom_auroc_takes_the_best_alternative_and_xiong_node_auroc_averages_graphs():
    g = Data(x=torch.ones(4, 1), edge_index=torch.tensor([[0, 1], [1, 0]]),
             atom_gt=torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    task = qt.Task("toy", "graph", "atom", None, 1.0, "graph_attribution", instances=[g])
    assert bq.score(task, [(torch.tensor([0.1, 0.2, 0.9, 0.8]), None)])["auroc"] == 1.0  # second alternative
    a = Data(node_gt=torch.tensor([1.0, 0, 0, 1]), edge_gt=torch.tensor([1.0, 0]))
    b = Data(node_gt=torch.tensor([0.0, 1, 0, 0]), edge_gt=torch.tensor([0.0, 1]))
    task = qt.Task("toy", "graph", "node", None, 1.0, "xiong_node", instances=[a, b])
    out = bq.score(task, [(torch.tensor([0.9, 0.1, 0.2, 0.8]), torch.tensor([1.0, 0.0])),
                          (torch.tensor([0.9, 0.1, 0.2, 0.3]), torch.tensor([1.0, 0.0]))])
    assert out["auroc"] == pytest.approx((1.0 + 0.0) / 2)
    assert out["edge_auroc"] == pytest.approx((1.0 + 0.0) / 2)


def test_relevance_masks_from_their_formulas():
    r = torch.tensor([-2.0, 1.0, 0.5, 0.0])
    torch.testing.assert_close(bq.relevance_mask(r, "abs"), torch.tensor([1.0, 0.5, 0.25, 0.0]))
    torch.testing.assert_close(bq.relevance_mask(r, "positive"), torch.tensor([0.0, 1.0, 0.5, 0.0]))
    torch.testing.assert_close(bq.relevance_mask(r, "relevance"), r)


def test_gengraph_graphs_have_the_published_sizes():
    shapes = qt.make_node_data("ba_shapes", 3)
    assert shapes.num_nodes == 700 and int(shapes.edge_mask.sum()) == 80 * 6 * 2
    assert shapes.y.bincount().tolist() == [300, 160, 160, 80]
    base_edges = 5 * 295 + 80 * 7   # BA(300, m=5) + 80 houses with their attachment edge
    assert shapes.edge_index.shape[1] == 2 * (base_edges + int(0.01 * base_edges))
    cycles = qt.make_node_data("tree_cycles", 3)
    assert cycles.num_nodes == 511 + 60 * 6 and int(cycles.edge_mask.sum()) == 60 * 6 * 2
    grid = qt.make_node_data("tree_grid", 3)
    assert grid.num_nodes == 511 + 80 * 9 and int(grid.edge_mask.sum()) == 80 * 12 * 2
    assert all(int(grid.y[v]) == 1 for v in qt.NODE_RANGES["tree_grid"])
    community = qt.make_node_data("ba_community", 3)
    assert community.num_nodes == 1400 and int(community.y.max()) == 7
    torch.testing.assert_close(community.x[:700, :2].mean(0), torch.tensor([-1.0, -1.0]), atol=0.1, rtol=0)


def test_cam_is_the_exact_share_of_the_logit():
    g = Data(x=torch.rand(9, 14), edge_index=torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8],
                                                             [1, 0, 2, 1, 3, 2, 4, 3, 6, 5, 8, 7]]))
    torch.manual_seed(0)
    for model, bias in ((qt.HoldijkGraphGCN(14, 2), lambda m, c: m.lin.bias[c]),
                        (qt.GraphGCN(14, 2, hidden=8), lambda m, c: m.head.bias[c])):
        model.eval()
        with torch.no_grad():
            z = model(g.x, g.edge_index)[0]
        for c in (0, 1):
            cam = bq.cam_scores(model, g.x, g.edge_index, c, grad=False)
            assert float(cam.sum() + bias(model, c)) == pytest.approx(float(z[c]), rel=1e-5, abs=1e-6)
    gin = qt.XiongGIN(14).eval()
    with torch.no_grad():
        z = gin(g.x, g.edge_index)[0]
    assert float(bq.cam_scores(gin, g.x, g.edge_index, 1, grad=False).sum()) == pytest.approx(float(z[1]), rel=1e-5)


def test_default_selection_by_mean_rank_with_ties_to_the_cheaper():
    def row(v, ms=1.0):
        return {"auroc": v, "ms": ms}
    lrp_a, lrp_b = "lrp_epsilon_logit_abs", "lrp_zplus_logit_abs"
    results = {"t1": {"level": "node", "methods": {lrp_a: row(0.9, 5.0), lrp_b: row(0.8, 1.0),
                                                   "saliency": row(0.85), "grad_x_input": row(0.7), "random": row(0.5)}},
               "t2": {"level": "graph", "methods": {lrp_a: row(0.6, 5.0), lrp_b: row(0.7, 1.0),
                                                    "saliency": row(0.95), "grad_x_input": row(0.65),
                                                    "random": row(0.5)}}}
    got = bq.select_default(results, ["t1", "t2"])
    assert got["configurations"][lrp_a]["mean_rank"] == got["configurations"][lrp_b]["mean_rank"] == 2.5
    assert got["winner"] == lrp_b  # same mean rank, cheaper
    assert got["per_task"]["t2"]["best_non_lrp"] == "saliency"
    assert got["per_task"]["t1"]["within_0.01_of_best_non_lrp"] is False
    assert got["per_task"]["t2"]["better_than_grad_x_input"] is True
    assert bq.select_default(results, ["t1"])["winner"] == lrp_a


def test_fast_run_writes_every_method_with_protocol_intervals_and_anchors(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_quality.py"), "--fast", "--tasks",
                          "ba_shapes", "--out", str(tmp_path), "--no-progress"],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    data = validate_results(json.loads((tmp_path / "quality.json").read_text()), "quality")
    assert data["settings"]["fast"] is True
    assert "PGExplainer lineage" in data["settings"]["protocols"]["lineage_node"]
    task = data["results"]["tasks"]["ba_shapes"]
    assert task["protocol"] == "lineage_node" and task["subgraph_max_abs_error"] < 1e-4
    methods = task["methods"]
    assert set(methods) == set(bq.all_methods()) - {"cam", "grad_cam"} - set(bq.WALK_METHODS)  # graph tasks only
    assert len([m for m in methods if m.startswith("lrp_")]) == 6 * 2 * 3
    for name, row in methods.items():
        assert 0.0 <= row["auroc"] <= 1.0 and row["ms"] > 0, name
        assert len(row["auroc_per_seed"]) == 1 and row["ci95"] is None, name  # one seed: no interval
    # the three masks of one configuration come from one call: one time
    assert methods["lrp_gamma_logit_abs"]["ms"] == methods["lrp_gamma_logit_relevance"]["ms"]
    assert [p["value"] for p in methods["pgexplainer"]["published"]] == [0.963, 0.999]
    assert methods["lrp_epsilon_logit_abs"]["auroc"] > methods["random"]["auroc"] + 0.15
    summary = data["results"]["summary"]
    assert summary["overall"]["winner"] in bq.LRP_METHODS and summary["graph_level"] is None


def test_reannotate_puts_the_published_number_beside_the_measured_one_and_keeps_the_machine(tmp_path):
    row = {"auroc": 0.9, "ci95": [0.85, 0.95], "auroc_per_seed": [0.9], "ms": 1.0, "failed": 0,
           "edge_auroc": {"auroc": 0.7, "ci95": None, "auroc_per_seed": [0.7]}}
    methods = {"pgexplainer": dict(row), "grad_x_input": dict(row, auroc=0.5), "random": dict(row, auroc=0.5),
               "lrp_epsilon_logit_abs": dict(row, auroc=0.95)}
    data = {"benchmark": "quality", "command": "python benchmarks/bench_quality.py", "machine": {"cpu": "x"},
            "settings": {}, "results": {"tasks": {"ba_2motifs": {"level": "graph", "methods": methods}}}}
    (tmp_path / "quality.json").write_text(json.dumps(data))
    bq.reannotate(tmp_path / "quality.json")
    out = json.loads((tmp_path / "quality.json").read_text())
    assert out["machine"] == {"cpu": "x"} and out["command"] == data["command"]
    pub = out["results"]["tasks"]["ba_2motifs"]["methods"]["pgexplainer"]["published"]
    assert pub == [{"value": 0.926, "source": bq._LUO, "same_protocol": False, "compared_with": "edge_auroc",
                    "note": "edge AUROC of a GCN: compare with our edge AUROC", "difference": round(0.7 - 0.926, 4),
                    "within_0.05": False, "in_reference_notes": False}]
    assert out["results"]["summary"]["overall"]["winner"] == "lrp_epsilon_logit_abs"


def test_update_from_merges_the_updated_methods_only_onto_the_same_models(tmp_path):
    row = {"auroc": 0.6, "ci95": [0.5, 0.7], "auroc_per_seed": [0.6], "ms": 1.0, "failed": 0}
    task = {"level": "node", "metrics_per_seed": [{"test_accuracy": 0.9}], "instances_per_seed": [3],
            "methods": {"lrp_epsilon_logit_abs": dict(row), "grad_x_input": dict(row), "random": dict(row, auroc=0.5)}}
    base = {"benchmark": "quality", "command": "c", "machine": {}, "settings": {"methods": {}},
            "results": {"tasks": {"ba_shapes": json.loads(json.dumps(task))}}}
    other = json.loads(json.dumps(base))
    other["results"]["tasks"]["ba_shapes"]["methods"]["gnnexplainer_orig"] = dict(row, auroc=0.93)
    other["results"]["tasks"]["ba_shapes"]["methods"]["grad_x_input"] = dict(row, auroc=0.99)  # not updated: ignored
    other["settings"]["methods"]["gnnexplainer_orig"] = "GNNExplainer, original settings"
    other["settings"]["updates"] = [{"command": "python benchmarks/bench_quality.py --update --out /tmp/x",
                                     "tasks": ["ba_shapes"], "methods": ["gnnexplainer_orig"], "machine": {}}]
    (tmp_path / "quality.json").write_text(json.dumps(base))
    (tmp_path / "other.json").write_text(json.dumps(other))
    bq.update_from(tmp_path / "quality.json", tmp_path / "other.json")
    out = json.loads((tmp_path / "quality.json").read_text())
    methods = out["results"]["tasks"]["ba_shapes"]["methods"]
    assert methods["gnnexplainer_orig"]["auroc"] == 0.93 and methods["grad_x_input"]["auroc"] == 0.6
    assert out["settings"]["updates"][0]["command"] == "python benchmarks/bench_quality.py --update"
    other["results"]["tasks"]["ba_shapes"]["metrics_per_seed"] = [{"test_accuracy": 0.8}]  # another model
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(RuntimeError, match="other models"):
        bq.update_from(tmp_path / "quality.json", tmp_path / "other.json")
