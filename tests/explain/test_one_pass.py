"""``Explainer(one_pass=True)`` (:mod:`lrp_lib.explain.one_pass`): the prediction and target taken from
the explanation's own forward.  On every model of the coverage zoo (``benchmarks/bench_coverage.py``,
float64, explained as a binary classifier so that the target, the sign of the output, matters) and
on multiclass GCN / GIN / GAT models: the same target and bitwise the same relevance as PyG's two
passes, the prediction equal to PyG's up to rounding (1e-12 relative, float64: a rule may
compute a mean as a sum divided by the count), the same error where the model is refused.  A decision
within rounding of flipping (a near tie) is taken by the model's own pass (``clear_of_rounding``); the
default ``one_pass=None`` runs one pass for classification, two for a regression."""
import sys
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn
from torch_geometric.explain import Explainer as PyGExplainer
from torch_geometric.explain.config import ModelConfig
from torch_geometric.nn.models import GAT, GCN, GIN

from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.one_pass import OnePass, clear_of_rounding, one_pass, pending_target

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_coverage as bc  # noqa: E402

ZOO = [(spec, level, ea) for spec in bc.ALL if not spec.skip for level, ea in bc.cases(spec)]


def _run(model, inputs, level, once, mode, index, kwargs):
    explainer = Explainer(model, algorithm=LRPExplainer(mask="relevance"), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object", one_pass=once,
                          model_config=dict(mode=mode, task_level=level, return_type="raw"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return explainer(inputs["x"], inputs["edge_index"], index=index, **kwargs)
        except Exception as e:  # noqa: BLE001 - both ways must fail alike
            return e


def _same(a, b):
    if isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b)
        return
    assert not isinstance(a, Exception), a
    assert torch.equal(a.target, b.target)
    assert torch.allclose(a.prediction, b.prediction, rtol=1e-12, atol=1e-12)
    for key in ("node_relevance", "edge_relevance", "node_mask", "edge_mask", "bias_relevance", "relevance_residual",
                "edge_attr_relevance"):
        if key in b:
            assert torch.equal(a[key], b[key]), key
        else:
            assert key not in a
    ia, ib = a.get("index"), b.get("index")
    assert torch.equal(ia, ib) if isinstance(ib, torch.Tensor) else ia == ib
    assert sorted(a.keys()) == sorted(b.keys())


@pytest.mark.parametrize("spec,level,edge_attr", ZOO, ids=[f"{s.name}|{lv}|{ea}" for s, lv, ea in ZOO])
def test_one_pass_gives_the_two_pass_explanation_on_the_zoo(spec, level, edge_attr):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, inputs = bc.build_case(spec, level, edge_attr)
            bc.reference(model, inputs, level)
        except Exception:  # noqa: BLE001 - the unmodified model fails: the zoo skips it too
            pytest.skip("the unmodified model fails on the generic inputs")
    if isinstance(inputs["x"], dict):
        pytest.skip("heterogeneous graphs run the two passes")
    index = None if level == "graph" else bc.NODE
    args = (model, inputs, level)
    _same(_run(*args, True, "binary_classification", index, bc._kwargs(inputs)),
          _run(*args, False, "binary_classification", index, bc._kwargs(inputs)))


@pytest.mark.parametrize("build", [lambda: GCN(8, 16, 3, out_channels=5), lambda: GIN(8, 16, 3, out_channels=5),
                                   lambda: GAT(8, 16, 2, out_channels=5, heads=2)], ids=["GCN", "GIN", "GAT"])
@pytest.mark.parametrize("index", [None, 3, torch.tensor([0, 4, 7])], ids=["all", "int", "tensor"])
def test_one_pass_multiclass_same_target_and_relevance(build, index):
    torch.manual_seed(0)
    model = build().eval()
    x, edge_index = torch.randn(12, 8), torch.randint(0, 12, (2, 40))
    a = _run(model, dict(x=x, edge_index=edge_index), "node", True, "multiclass_classification", index, {})
    b = _run(model, dict(x=x, edge_index=edge_index), "node", False, "multiclass_classification", index, {})
    _same(a, b)
    assert torch.equal(a.target, model(x, edge_index).argmax(-1))


def test_one_pass_keeps_the_training_flag_and_the_thread_state():
    torch.manual_seed(0)
    model = GCN(8, 16, 2, out_channels=3).train()
    explainer = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"),
                          one_pass=True)
    explainer(torch.randn(6, 8), torch.randint(0, 6, (2, 12)), index=2)
    assert model.training and pending_target() is None
    with pytest.raises(ValueError):
        explainer(torch.full((6, 8), float("nan")), torch.randint(0, 6, (2, 12)), index=2)
    assert model.training and pending_target() is None


def test_one_pass_record_and_bad_switch():
    with one_pass(lambda p: p.argmax(-1)) as record:
        assert pending_target() is record
        assert torch.equal(record(torch.tensor([[0.0, 2.0], [3.0, 1.0]])), torch.tensor([1, 0]))
    assert pending_target() is None and isinstance(record, OnePass) and record.prediction.shape == (2, 2)
    with pytest.raises(TypeError, match="one_pass"):
        Explainer(GCN(2, 2, 1), algorithm=LRPExplainer(), explanation_type="model", node_mask_type="object",
                  model_config=dict(mode="regression", task_level="node", return_type="raw"), one_pass="yes")


def test_one_pass_with_per_index_runs_the_two_passes():
    torch.manual_seed(0)
    model = GCN(8, 16, 2, out_channels=3).eval()
    x, edge_index = torch.randn(12, 8), torch.randint(0, 12, (2, 40))
    made = [Explainer(model, algorithm=LRPExplainer(per_index=True), explanation_type="model",
                      node_mask_type="attributes", one_pass=once,
                      model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
            for once in (True, False)]
    a, b = (e(x, edge_index, index=torch.tensor([1, 5])) for e in made)
    assert torch.equal(a.prediction, b.prediction) and torch.equal(a.target, b.target)
    assert torch.equal(a.node_relevance, b.node_relevance)
    assert torch.equal(a.node_relevance_per_index.to_dense(), b.node_relevance_per_index.to_dense())


def _config(mode, return_type="raw"):
    return ModelConfig(mode=mode, task_level="node", return_type=return_type)


def test_clear_of_rounding_on_hand_made_predictions():
    multi, binary, probs = _config("multiclass_classification"), _config("binary_classification"), \
        _config("binary_classification", "probs")
    assert clear_of_rounding(torch.tensor([[0.0, 1.0, -2.0], [3.0, 2.0, 2.0]]), multi)
    assert not clear_of_rounding(torch.tensor([[0.0, 1.0, -2.0], [3.0, 2.0, 3.0]]), multi)  # an exact tie
    assert not clear_of_rounding(torch.tensor([[100.0, 100.01]]), multi)  # 1e-2 apart: within 3.5e-4 * 201
    assert clear_of_rounding(torch.tensor([[100.0, 100.1]]), multi)
    assert clear_of_rounding(torch.tensor([[100.0, 100.01]], dtype=torch.float64), multi)  # float64: 1.5e-8
    for bad in (float("nan"), float("inf")):
        assert not clear_of_rounding(torch.tensor([[bad, 1.0]]), multi)
    assert not clear_of_rounding(torch.tensor([[float("inf"), float("inf")]]), multi)
    assert clear_of_rounding(torch.tensor([[1.0]]), multi) and not clear_of_rounding(torch.tensor([[float("nan")]]),
                                                                                      multi)
    assert clear_of_rounding(torch.tensor([0.5, -0.01]), binary)
    assert not clear_of_rounding(torch.tensor([0.5, 1e-4]), binary)  # 1e-4 from the threshold 0
    assert not clear_of_rounding(torch.tensor([0.50001]), probs) and clear_of_rounding(torch.tensor([0.51]), probs)
    assert clear_of_rounding(torch.tensor([0.0, float("nan")]), _config("regression"))  # no decision
    assert clear_of_rounding(torch.empty(0, 3), multi)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e4, 1e4, width=32), st.lists(st.floats(-1, 1, width=32), min_size=2, max_size=5)),
                min_size=1, max_size=4),
       st.sampled_from([1e-6, 1e-4, 1e-2, 1.0]), st.integers(0, 2**31 - 1),
       st.sampled_from(["multiclass_classification", "binary_classification"]))
def test_a_clear_target_survives_any_perturbation_within_rounding(rows, spread, seed, mode):
    """Where the check says clear, moving every value by up to a tenth of its margin (relative) leaves
    PyG's target unchanged: a wrong margin (too small, or without the values' size) would let it flip.
    Each row is a base value plus offsets of a given spread, so that near ties of large values come up."""
    width = min(len(offsets) for _, offsets in rows)
    prediction = torch.tensor([[base + spread * o for o in offsets[:width]] for base, offsets in rows],
                              dtype=torch.float32)
    if mode == "binary_classification":
        prediction = prediction[:, 0] - torch.tensor([base for base, _ in rows])  # offsets around the threshold
    config = _config(mode)
    explainer = PyGExplainer(nn.Identity(), algorithm=LRPExplainer(), explanation_type="model",
                             node_mask_type="attributes", model_config=config)
    if not clear_of_rounding(prediction, config):
        return
    tol = torch.finfo(torch.float32).eps ** 0.5
    g = torch.Generator().manual_seed(seed)
    for _ in range(20):
        noise = (torch.rand(prediction.shape, generator=g) * 2 - 1) * tol / 10
        moved = prediction + noise * (1 + prediction.abs()) / 2
        assert torch.equal(explainer.get_target(moved), explainer.get_target(prediction))


class _Tied(nn.Module):
    """A GCN whose two output classes have the same weights (and bias): every row ties exactly."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.gcn = GCN(4, 8, 2, out_channels=1)
        self.classes = 2

    def forward(self, x, edge_index):
        return self.gcn(x, edge_index).expand(-1, self.classes)


@pytest.mark.parametrize("tied", [True, False], ids=["tie", "clear"])
def test_a_near_tie_is_decided_by_the_models_own_pass(tied):
    torch.manual_seed(1)
    model = (_Tied() if tied else GCN(4, 8, 2, out_channels=3)).eval()
    x, edge_index = torch.randn(10, 4), torch.randint(0, 10, (2, 30))
    forwards = []
    model.register_forward_hook(lambda *a: forwards.append(1))
    config = dict(mode="multiclass_classification", task_level="node", return_type="raw")
    made = {once: Explainer(model, algorithm=LRPExplainer(replay=False), explanation_type="model",
                            node_mask_type="attributes", model_config=config, one_pass=once)
            for once in (None, False)}
    counts, out = {}, {}
    for once, explainer in made.items():
        forwards.clear()
        out[once] = explainer(x, edge_index, index=torch.tensor([2, 7]))
        counts[once] = len(forwards)
    assert counts[False] == 2 and counts[None] == (2 if tied else 1)  # a tie: the model's pass runs too
    assert torch.equal(out[None].target, out[False].target)
    assert torch.equal(out[None].node_relevance, out[False].node_relevance)
    if tied:  # the prediction is then the model's own, to the bit
        assert torch.equal(out[None].prediction, out[False].prediction)


@pytest.mark.parametrize("mode,forwards", [("multiclass_classification", 1), ("binary_classification", 1),
                                           ("regression", 2)])
def test_the_default_runs_one_pass_for_classification_only(mode, forwards):
    torch.manual_seed(0)
    model = GCN(4, 8, 2, out_channels=1 if mode != "multiclass_classification" else 3).eval()
    x, edge_index = torch.randn(10, 4), torch.randint(0, 10, (2, 30))
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    explainer = Explainer(model, algorithm=LRPExplainer(replay=False), explanation_type="model",
                          node_mask_type="attributes",
                          model_config=dict(mode=mode, task_level="node", return_type="raw"))
    assert explainer.one_pass is None
    two = Explainer(model, algorithm=LRPExplainer(replay=False), explanation_type="model", node_mask_type="attributes",
                    model_config=dict(mode=mode, task_level="node", return_type="raw"), one_pass=False)
    a = explainer(x, edge_index, index=3)
    assert len(calls) == forwards
    b = two(x, edge_index, index=3)
    assert torch.equal(a.target, b.target) and torch.equal(a.node_relevance, b.node_relevance)
