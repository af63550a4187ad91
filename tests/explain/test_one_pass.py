"""``Explainer(one_pass=True)`` (:mod:`lrp_lib.explain.one_pass`): the prediction and target taken from
the explanation's own forward.  On every model of the coverage zoo (``benchmarks/bench_coverage.py``,
float64, explained as a binary classifier so that the target, the sign of the output, matters) and
on multiclass GCN / GIN / GAT models: the same target and bitwise the same relevance as PyG's two
passes, the prediction equal to PyG's up to rounding (1e-12 relative, float64: a primitive may
compute a mean as a sum divided by the count), the same error where the model is refused."""
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch_geometric.nn.models import GAT, GCN, GIN

from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.one_pass import OnePass, one_pass, pending_target

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
