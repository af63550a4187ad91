"""benchmarks/pyg_grid.py: LRPExplainer through PyG's Explainer on a slice of the settings grid
(every task level, mode, return type and explanation type, each model, the mask types), with
conservation against the explained value computed independently of the explainer; and the grid's
checks themselves: the explained value by hand, PyG's rejections, a wrong explanation caught."""
import sys
from pathlib import Path

import pytest
import torch

from lrp_lib.explain.explainer import LRPExplainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pyg_grid as pg  # noqa: E402

# one valid (mode, return_type) per row, crossed with the task levels and models below
SETTINGS = [
    ("binary_classification", "raw", "model", "attributes", "object"),
    ("binary_classification", "probs", "phenomenon", "object", None),
    ("multiclass_classification", "raw", "phenomenon", None, "object"),
    ("multiclass_classification", "probs", "model", "common_attributes", "object"),
    ("multiclass_classification", "log_probs", "model", "attributes", None),
    ("regression", "raw", "phenomenon", "attributes", "object"),
]


@pytest.mark.parametrize("model", pg.MODELS)
@pytest.mark.parametrize("task_level", pg.TASK_LEVELS)
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(str(v) for v in s))
def test_lrp_works_and_conserves_on_the_grid(model, task_level, setting):
    mode, return_type, explanation_type, node_mask_type, edge_mask_type = setting
    combo = dict(model=model, task_level=task_level, mode=mode, return_type=return_type,
                 explanation_type=explanation_type, node_mask_type=node_mask_type, edge_mask_type=edge_mask_type)
    assert pg.pyg_rejects(combo) is None
    row = pg.run_one(combo, "lrp")
    assert row["status"] == "works", row
    # node relevance + biases (+ nothing lost) is the explained value, computed from the logits here
    assert row["accounted"] == pytest.approx(row["explained"], rel=1e-6, abs=1e-9)
    assert abs(row["relevance_residual"]) < 1e-6 * max(1.0, abs(row["explained"]))
    assert "warning" not in row


def test_the_explained_value_by_hand():
    """explained_value against the logits read by hand: the target class's logit (multiclass), the
    log-odds of the target class (binary), the output (regression), over the explained rows."""
    data, kwargs, index = pg.make_inputs("node")
    for mode in pg.MODES:
        model = pg.make_model("GCN", "node", mode, "raw")
        with torch.no_grad():
            z = model(data.x, data.edge_index, **kwargs)
        combo = dict(mode=mode)
        target = torch.tensor([2, 0] * (z.shape[0] // 2) + [1] * (z.shape[0] % 2))
        if mode == "multiclass_classification":
            want = float(z[1, target[1]] + z[8, target[8]])
        elif mode == "binary_classification":
            target = target.clamp(max=1)
            want = float((2 * target[1] - 1) * z[1, 0] + (2 * target[8] - 1) * z[8, 0])
        else:
            want = float(z[1, 0] + z[8, 0])
        assert pg.explained_value(combo, model, data, kwargs, index, target) == pytest.approx(want, rel=1e-12)


def test_pyg_rejections_are_counted_as_invalid_not_as_refusals():
    base = dict(model="GCN", task_level="graph", explanation_type="model", node_mask_type="object",
                edge_mask_type=None)
    assert "regression needs to return raw" in pg.pyg_rejects(dict(base, mode="regression", return_type="probs"))
    assert "binary classification" in pg.pyg_rejects(dict(base, mode="binary_classification",
                                                            return_type="log_probs"))
    assert "must be provided" in pg.pyg_rejects(dict(base, mode="regression", return_type="raw",
                                                     node_mask_type=None))
    assert pg.pyg_rejects(dict(base, mode="regression", return_type="raw")) is None
    valid = sum(pg.pyg_rejects(c) is None for c in pg.grid(("GCN",)))
    assert valid == 252  # 12 accepted (mode, return_type, explanation_type) x 3 task levels x 7 mask pairs


def test_a_wrong_explanation_is_caught():
    """LRPExplainer(explained="contrast") conserves z_c - mean_k z_k, not the target's logit: the grid's
    independent check calls it wrong (the check is not a tautology of the explainer's own accounts)."""
    combo = dict(model="GIN", task_level="graph", mode="multiclass_classification", return_type="raw",
                 explanation_type="model", node_mask_type="attributes", edge_mask_type="object")
    row = pg.run_one(combo, LRPExplainer(explained="contrast"))
    assert row["status"] == "wrong" and "the explained value is" in row["detail"]
    assert pg.run_one(combo, LRPExplainer())["status"] == "works"


def test_a_refusal_is_recorded_with_its_message():
    """GPSConv with Performer attention has no rule (FAVOR+ never forms the attention weights): refused."""
    combo = dict(model="GPS", task_level="graph", mode="regression", return_type="raw", explanation_type="model",
                 node_mask_type="attributes", edge_mask_type=None)
    model = pg.make_model("GPS", "graph", "regression", "raw")
    from torch_geometric.nn import GPSConv
    model.convs[0] = GPSConv(pg.HIDDEN, None, heads=2, attn_type="performer").double().eval()
    from torch_geometric.explain import Explainer
    data, kwargs, index = pg.make_inputs("graph")
    ex = Explainer(model, algorithm=LRPExplainer(), **pg.explainer_kwargs(combo))
    with pytest.raises(Exception, match="einsum of several input-dependent operands"):
        ex(data.x, data.edge_index, index=index, **kwargs)


def test_another_algorithms_refusal_keeps_pygs_reason():
    """PyG logs why an algorithm does not support the settings and raises a generic error: the row keeps both."""
    combo = dict(model="GCN", task_level="node", mode="binary_classification", return_type="raw",
                 explanation_type="model", node_mask_type="object", edge_mask_type=None)
    row = pg.run_one(combo, "captum_saliency")
    assert row["status"] == "refused"
    assert "expects 'node_mask_type' to be 'None' or 'attributes' (got 'object')" in row["detail"]
