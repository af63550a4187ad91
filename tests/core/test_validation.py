"""Bad input gets a clear error (or a correct result), never a wrong explanation (issue 14).

The catalogue of ``benchmarks/bad_inputs.py`` is run case by case: each must end as a clear error
naming the argument or as a result that passes its check.  The tests below it pin the messages
and behaviours the catalogue cannot see on its own.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch_geometric.explain import Explainer as PyGExplainer

from lrp_lib.teach import ops
from lrp_lib.core import rules, validation
from lrp_lib.explain.explainer import Explainer, LostRelevanceWarning, LRPExplainer, check_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bad_inputs  # noqa: E402


@pytest.mark.parametrize("c", bad_inputs.CASES, ids=[f"{c['entry']}: {c['case']}" for c in bad_inputs.CASES])
def test_catalogue_case_is_a_clear_error_or_works(c):
    result = bad_inputs.classify(c)
    assert result["outcome"] in ("clear error", "works"), result
    if c["check"] is None:  # no correct result exists: it must be refused, naming the argument
        assert result["outcome"] == "clear error", result


def test_catalogue_is_large_and_classifies_a_silent_wrong_result():
    assert len(bad_inputs.CASES) >= 90
    fake = dict(case="nan", entry="test", names=("x",), run=lambda: torch.tensor(float("nan")),
                check=lambda r: bool(torch.isfinite(r)))
    assert bad_inputs.classify(fake)["outcome"] == "silently wrong"
    crash = dict(case="crash", entry="test", names=("x",), run=lambda: 1 / 0, check=None)
    assert bad_inputs.classify(crash)["outcome"] == "obscure crash"
    # "x" must be found as a word, not inside "expected"
    assert not bad_inputs.names_argument("expected m1 and m2", ("x",))
    assert bad_inputs.sanitise("see /home/me/a.py at 0x7f00") == "see <path> at 0x…"


# ---------------------------------------------------------------- helpers
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "0.1", True, None])
def test_check_number_refuses(value):
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        validation.check_number(value, "eps")


def test_epsilon_is_checked_in_one_place():
    for bad in (float("nan"), float("inf")):
        for make in (lambda e: rules.Epsilon(e), lambda e: ops.linear_eps(torch.ones(1, 2), torch.ones(1, 2), eps=e)):
            with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
                make(bad)


def test_check_edge_index_messages():
    ei = torch.tensor([[0, 1], [1, 2]])
    assert validation.check_edge_index(ei.int(), 3).dtype == torch.long
    with pytest.raises(ValueError, match=r"looks transposed: pass edge_index.t\(\)"):
        validation.check_edge_index(torch.tensor([[0, 1], [1, 2], [2, 0]]), 3)
    with pytest.raises(ValueError, match=r"must have shape \(2, E\), got \(3, 2\)"):
        validation.check_edge_index(torch.cat([ei, ei[:1]]), 3)
    with pytest.raises(TypeError, match=r"integer dtype .* edge_index.long\(\)"):
        validation.check_edge_index(ei.float(), 3)
    with pytest.raises(IndexError, match=r"refers to nodes 0..2 but the graph has 2 nodes"):
        validation.check_edge_index(ei, 2)


@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "SparseTensor"])
def test_a_sparse_adjacency_is_refused_with_its_conversion(layout):
    """Every sparse layout (not only COO, which ``is_sparse`` names) and PyG's SparseTensor get the message that
    says how to pass the edges; the conversion it names gives back the edges of an adj_t."""
    from torch_geometric.utils import to_edge_index, to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    if layout == "SparseTensor":
        typing = pytest.importorskip("torch_geometric.typing")
        if not typing.WITH_TORCH_SPARSE:
            pytest.skip("torch_sparse is not installed")
        adj_t = typing.SparseTensor.from_edge_index(ei.flip(0), sparse_sizes=(3, 3))
    else:
        make = {"coo": to_torch_coo_tensor, "csr": to_torch_csr_tensor, "csc": to_torch_csc_tensor}[layout]
        adj_t = make(ei.flip(0), torch.ones(3), size=(3, 3))
    with pytest.raises(TypeError, match=r"edge_index must be a dense \(2, E\) tensor .* sparse adjacency .*"
                                        r"to_edge_index\(adj_t\)\[0\]\.flip\(0\)"):
        validation.check_edge_index(adj_t, 3)
    if layout != "SparseTensor":
        back = to_edge_index(adj_t)[0].flip(0)
        assert sorted(map(tuple, back.t().tolist())) == sorted(map(tuple, ei.t().tolist()))


def test_check_batch_refuses_edges_across_graphs():
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"batch puts the two ends of 1 edge\(s\) in different graphs .*edge 1, 1 -> 2"):
        validation.check_batch(torch.tensor([0, 0, 1]), 3, ei)
    with pytest.raises(ValueError, match=r"one graph id per node \(3\)"):
        validation.check_batch(torch.tensor([0, 0]), 3, ei)
    assert validation.check_batch(torch.tensor([0, 0, 0], dtype=torch.int32), 3, ei).dtype == torch.long


def test_check_finite_counts_and_locates():
    t = torch.ones(3, 2)
    t[1, 1] = float("nan")
    t[2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"x contains 1 NaN and 1 Inf value\(s\) \(the first at \(1, 1\)\)"):
        validation.check_finite(t, "x")


def test_nan_relevance_is_not_reported_as_lost():
    """NaN != 0 is true: the old warning said NaN relevance 'reached outputs equal to zero'."""
    x = torch.tensor([[1.0, -1.0]], requires_grad=True)
    out = ops.relu(x)
    with pytest.raises(ValueError, match="relevance is NaN or Inf"):
        out.backward(torch.tensor([[float("nan"), float("nan")]]))


def test_int32_index_accepted_by_the_scatters():
    src = torch.rand(5, 2)
    idx = torch.tensor([0, 0, 1, 2, 2])
    for op in (ops.scatter_add, ops.scatter_mean):
        torch.testing.assert_close(op(src, idx.int()), op(src, idx))


# -------------------------------------------------------------- explainer
def _model():
    return bad_inputs.model("GIN")


def _explainer(cls=Explainer, m=None):
    return cls(m if m is not None else _model(), algorithm=LRPExplainer(), explanation_type="model",
               node_mask_type="attributes", edge_mask_type="object",
               model_config=dict(mode="binary_classification", task_level="graph", return_type="raw"))


def test_check_inputs_runs_before_pygs_prediction_pass():
    x, ei = bad_inputs.graph()
    bad = torch.cat([ei, torch.tensor([[0], [6]])], 1)
    with pytest.raises(IndexError, match="edge_index refers to nodes 0..6 but the graph has 6 nodes"):
        check_inputs(_model(), x, bad)
    with pytest.raises(IndexError, match="edge_index refers to nodes"):
        _explainer()(x, bad)  # lrp_lib's Explainer: before the prediction pass
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        check_inputs(None, x, ei)


@pytest.mark.parametrize("cls", [Explainer, PyGExplainer])
def test_training_flag_restored_after_an_error(cls):
    m = _model().train()
    x, ei = bad_inputs.graph()
    with pytest.raises(ValueError, match="batch puts the two ends"):
        _explainer(cls, m)(x, ei, batch=torch.tensor([0, 0, 0, 1, 1, 1]))
    assert m.training


def test_detach_inside_the_model_reports_the_missing_amount():
    m = bad_inputs.model("GCN", bad_inputs.HalfDetached)
    x, ei = bad_inputs.graph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expl = _explainer(m=m)(x, ei)
    lost = [w for w in caught if issubclass(w.category, LostRelevanceWarning)]
    assert len(lost) == 1 and "did not reach x" in str(lost[0].message)
    amount = float(str(lost[0].message).split()[1])
    explained = float(m(x, ei).abs().sum())  # no biases: node relevance + lost = the explained logit
    assert abs(float(expl.node_relevance.sum()) + amount - explained) < 1e-3 * explained
    assert issubclass(LostRelevanceWarning, ops.LostRelevanceWarning)


def test_fully_detached_output_is_a_clear_error():
    x, ei = bad_inputs.graph()
    with pytest.raises(ValueError, match="output does not depend on x .* remove the detach"):
        _explainer(m=bad_inputs.model("SAGE", bad_inputs.AllDetached))(x, ei)


def test_negative_gcn_degree_says_pyg_is_nan_too():
    m = bad_inputs.model("GCN")
    x, ei = bad_inputs.graph()
    w = -torch.ones(ei.shape[1])
    with torch.no_grad():
        assert torch.isnan(m(x, ei, edge_weight=w)).all()  # PyG's own output
    with pytest.raises(ValueError, match="edge_weight .* PyG's own GCNConv output is NaN too"):
        _explainer(m=m)(x, ei, edge_weight=w)


@pytest.mark.parametrize("target,match", [(torch.tensor([2]), "only 0 or 1"), (torch.tensor([-1]), "only 0 or 1"),
                                          (torch.tensor([1, 0]), "target has 2 entries")])
def test_binary_target_validated(target, match):
    x, ei = bad_inputs.graph()
    expl = Explainer(_model(), algorithm=LRPExplainer(), explanation_type="phenomenon", node_mask_type="attributes",
                     model_config=dict(mode="binary_classification", task_level="graph", return_type="raw"))
    with pytest.raises(ValueError, match=match):
        expl(x, ei, target=target)
