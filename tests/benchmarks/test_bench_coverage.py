"""benchmarks/bench_coverage.py: the checking function sorts explanations into ok / refused / wrong /
crash, and it can fail: deliberately wrong explainers are classified "wrong"."""
import json
import sys
from pathlib import Path

import pytest
import torch
import torch_geometric.nn.conv as pyg_conv
import torch_geometric.nn.models as pyg_models
from torch import nn
from torch_geometric.explain import Explanation, HeteroExplanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm

from lrp_lib.explain.explainer import LRPExplainer
from lrp_lib.core.rules import Epsilon

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_coverage as bc  # noqa: E402

SPECS = {s.name: s for s in bc.ALL}


def case(name, level="graph", edge_attr=False):
    return bc.build_case(SPECS[name], level, edge_attr)


class InputTimesGradient(ExplainerAlgorithm):
    """Not LRP: x * gradient (``times_input``) or the bare gradient, of the explained output."""

    def __init__(self, times_input=True):
        super().__init__()
        self.times_input = times_input

    def forward(self, model, x, edge_index, *, target, index=None, **kwargs):
        x = x.detach().clone().requires_grad_(True)
        out = model(x, edge_index, **kwargs)
        y = out.sum() if index is None else out[index].sum()
        (g,) = torch.autograd.grad(y, x)
        return Explanation(node_mask=x.detach() * g if self.times_input else g,
                           edge_mask=torch.zeros(edge_index.shape[1], dtype=x.dtype))

    def supports(self):
        return True


class Uniform(InputTimesGradient):
    """Conserves (the output spread evenly over all node features) but is not LRP-0."""

    def forward(self, model, x, edge_index, *, target, index=None, **kwargs):
        out = model(x, edge_index, **kwargs).detach()
        y = out.sum() if index is None else out[index].sum()
        return Explanation(node_mask=torch.full_like(x, float(y) / x.numel()),
                           edge_mask=torch.zeros(edge_index.shape[1], dtype=x.dtype))


class Doubled(LRPExplainer):
    """LRPExplainer with its node mask multiplied by 2."""

    def forward(self, *args, **kwargs):
        explanation = super().forward(*args, **kwargs)
        explanation.node_mask = explanation.node_mask * 2
        return explanation


class Raises(InputTimesGradient):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def forward(self, *args, **kwargs):
        raise self.error


class WhitenConv(nn.Module):
    """Not a message-passing layer LRP has a rule for: x (x^T x + I)^-1."""

    def forward(self, x, edge_index):
        return x @ torch.linalg.inv(x.T @ x + torch.eye(x.shape[1], dtype=x.dtype))


def whiten_model(level):
    inputs = bc.graph_inputs()
    inputs = {k: inputs[k] for k in ("x", "edge_index", "batch")}
    model = bc.ConvModel(WhitenConv(), bc.call_plain, level, bc.F_IN).double()
    return model, inputs


@pytest.mark.parametrize("level", ["graph", "node"])
def test_gcn_is_ok_and_equals_x_times_gradient(level):
    model, inputs = case("GCNConv", level)
    row = bc.check(model, inputs, level)
    assert row["status"] == "ok", row
    assert row["piecewise_linear"] is True
    assert row["conservation_error"] <= bc.TOL and row["xgrad_error"] <= bc.TOL


def test_a_layer_without_a_rule_is_refused_naming_it():
    model, inputs = whiten_model("graph")
    row = bc.check(model, inputs, "graph")
    assert row["status"] == "refused", row
    assert "WhitenConv" in row["reason"], row["reason"]


def test_doubled_relevance_is_wrong():
    model, inputs = case("GCNConv")
    row = bc.check(model, inputs, "graph", algorithm=Doubled(rule=Epsilon(0.0), mask="relevance"))
    assert row["status"] == "wrong"
    y, _ = bc.reference(model, inputs, "graph")
    assert row["conservation_error"] == pytest.approx(abs(y) / max(1.0, abs(y)), rel=0.05)


def test_x_times_gradient_is_ok_only_where_it_is_lrp0():
    """x * grad is LRP-0 for the piecewise-linear GCN, and does not conserve through a sigmoid."""
    model, inputs = case("GCNConv")
    assert bc.check(model, inputs, "graph", algorithm=InputTimesGradient())["status"] == "ok"
    model, inputs = case("sigmoid head")
    row = bc.check(model, inputs, "graph", algorithm=InputTimesGradient())
    assert row["piecewise_linear"] is False and row["status"] == "wrong", row
    assert row["conservation_error"] > 1e-3


def test_gradient_instead_of_relevance_is_wrong():
    model, inputs = case("sigmoid head", "node")
    row = bc.check(model, inputs, "node", algorithm=InputTimesGradient(times_input=False))
    assert row["status"] == "wrong" and row["conservation_error"] > 1e-3, row


def test_conserving_but_not_x_times_gradient_is_wrong():
    model, inputs = case("GCNConv")
    row = bc.check(model, inputs, "graph", algorithm=Uniform())
    assert row["conservation_error"] <= bc.TOL
    assert row["status"] == "wrong" and row["xgrad_error"] > 1e-3, row


@pytest.mark.parametrize("error, status", [(ValueError("cannot explain this"), "refused"),
                                           (RuntimeError("index out of range"), "crash")])
def test_exceptions_are_sorted(error, status):
    model, inputs = case("GCNConv")
    row = bc.check(model, inputs, "graph", algorithm=Raises(error))
    assert row["status"] == status and str(error) in row["reason"]


def test_piecewise_linear_detection():
    model, inputs = case("GCNConv")
    assert bc.piecewise_linear(model, inputs, "graph", False) == (True, True)
    model, inputs = case("sigmoid head")
    assert bc.piecewise_linear(model, inputs, "graph", False) == (False, False)
    # AGNN's attention depends on cosines only: homogeneous, but not piecewise linear
    model, inputs = case("AGNNConv")
    assert bc.piecewise_linear(model, inputs, "graph", False) == (True, False)


def test_every_conv_and_model_is_in_the_table():
    names = {s.name for s in bc.CONVS}
    assert set(pyg_conv.__all__) <= names
    assert set(pyg_models.__all__) <= bc.COVERED_MODELS | set(bc.MODEL_SKIPS)
    assert all(s.skip or s.build is not None for s in bc.ALL)


def test_results_file_has_a_row_per_case():
    data = json.loads((Path(bc.__file__).parent / "results" / "coverage.json").read_text())
    rows = data["results"]["rows"]
    assert {r["status"] for r in rows} <= set(bc.STATUSES)
    assert data["results"]["counts"] == bc.counts(rows)
    keys = {bc.row_key(r) for r in rows}
    for spec in bc.ALL:
        expected = [bc.row_key(dict(layer=spec.name, level=None, edge_attr=None))] if spec.skip else \
            [bc.row_key(dict(layer=spec.name, level=lv, edge_attr=ea)) for lv, ea in bc.cases(spec)]
        assert set(expected) <= keys, spec.name
    for r in rows:
        if r["status"] == "ok":
            assert r["conservation_error"] <= bc.TOL
            assert r["xgrad_error"] is None or r["xgrad_error"] <= bc.TOL


def test_a_refused_row_is_retried_without_edge_relevance():
    rows = bc.run_spec(SPECS["GCNConv"], algorithm_factory=lambda: Raises(ValueError("no edges, please")))
    assert [r["status"] for r in rows] == ["refused", "refused"]
    assert all(r["without_edge_mask"]["status"] == "refused" for r in rows)
    rows = bc.run_spec(SPECS["GCNConv"])
    assert all(r["status"] == "ok" and "without_edge_mask" not in r for r in rows)


class HeteroInputTimesGradient(ExplainerAlgorithm):
    """x * gradient per node type, as a HeteroExplanation."""

    def forward(self, model, x, edge_index, *, target, index=None, **kwargs):
        xs = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()}
        out = model(xs, edge_index, **kwargs)
        y = out.sum() if index is None else out[index].sum()
        keys = sorted(xs)
        explanation = HeteroExplanation()
        for k, g in zip(keys, torch.autograd.grad(y, [xs[k] for k in keys])):
            explanation[k].node_mask = xs[k].detach() * g
        for edge_type, ei in edge_index.items():
            explanation[edge_type].edge_mask = torch.zeros(ei.shape[1], dtype=torch.float64)
        return explanation

    def supports(self):
        return True


def test_hetero_checks_sum_over_node_types():
    """The hetero path reads node_mask per type: x * grad is ok for the piecewise-linear to_hetero
    GraphSAGE and wrong (does not conserve) for HGT's attention."""
    rows = bc.run_spec(SPECS["to_hetero(SAGEConv x2)"], algorithm_factory=HeteroInputTimesGradient)
    assert [r["status"] for r in rows] == ["ok", "ok"] and all(r["piecewise_linear"] for r in rows)
    rows = bc.run_spec(SPECS["HGTConv(hetero)"], algorithm_factory=HeteroInputTimesGradient)
    assert [r["status"] for r in rows] == ["wrong", "wrong"]


def test_a_wrong_row_says_whether_other_reported_numbers_make_up_the_rest():
    model, inputs = case("GCNConv")
    row = bc.check(model, inputs, "graph", algorithm=Doubled(rule=Epsilon(0.0)))
    assert row["status"] == "wrong" and row["accounted"] is False
    row = bc.check(model, inputs, "graph", algorithm=InputTimesGradient())
    assert row["other_relevance"] == {} and row["accounted"] is False


@pytest.mark.parametrize("level", ["graph", "node"])
def test_walks_of_an_ok_row_are_checked_against_its_node_relevance(level):
    model, inputs = case("GATConv", level)
    row = bc.check(model, inputs, level)
    node_relevance = row.pop("_node_relevance")
    walks = bc.check_walks(model, inputs, level, node_relevance)
    assert walks["walks"] == "ok" and walks["walks_count"] > 0 and walks["walks_error"] <= bc.TOL
    # the check can fail: relevance moved from one node to another is caught
    moved = node_relevance.clone()
    moved[[0, 1]] = moved[[1, 0]] + torch.tensor([[0.1], [-0.1]], dtype=moved.dtype)
    wrong = bc.check_walks(model, inputs, level, moved)
    assert wrong["walks"] == "wrong" and "differ from the node relevance" in wrong["walks_reason"]


@pytest.mark.parametrize("level", ["graph", "node"])
def test_walks_of_a_hetero_row_are_checked_per_node_type(level):
    model, inputs = bc.build_case(SPECS["to_hetero(SAGEConv x2)"], level, False)
    row = bc.check(model, inputs, level)
    node_relevance = row.pop("_node_relevance")
    assert row["status"] == "ok" and sorted(node_relevance) == ["a", "b"]
    walks = bc.check_walks(model, inputs, level, node_relevance)
    assert walks["walks"] == "ok" and walks["walks_count"] > 0 and walks["walks_error"] <= bc.TOL
    # relevance moved from a node of one type to a node of the other is caught
    moved = {k: v.clone() for k, v in node_relevance.items()}
    moved["a"][0, 0] += 0.1
    moved["b"][0, 0] -= 0.1
    wrong = bc.check_walks(model, inputs, level, moved)
    assert wrong["walks"] == "wrong" and "differ from the node relevance" in wrong["walks_reason"]


def test_first_graph_of_a_batch_keeps_its_rows():
    inputs = bc.graph_inputs()
    first = bc._first_graph(inputs)
    n0 = int((inputs["batch"] == 0).sum())
    assert first["x"].shape[0] == n0 and bool((first["batch"] == 0).all())
    assert int(first["edge_index"].max()) < n0
    assert first["edge_attr"].shape[0] == first["edge_index"].shape[1] == first["edge_weight"].shape[0]


def test_results_file_has_walks_for_the_ok_rows():
    rows = json.loads((Path(bc.__file__).parent / "results" / "coverage.json").read_text())["results"]["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(r.get("walks") in ("ok", "refused", "wrong", "crash", "n/a") for r in ok)
    assert all(r.get("walks") is None for r in rows if r["status"] != "ok")
