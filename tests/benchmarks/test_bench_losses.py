"""benchmarks/bench_losses.py: the logit and relevance shares from their definitions on models whose answer is
known, the losing tasks read from the quality results, and one instance of a book task measured by hand."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_losses as bl  # noqa: E402


class Weighted(nn.Module):
    """One graph-level logit, sum_v (v + 1) x_v + 2, and a second logit 0: node v's features produce (v + 1) x_v
    of it, whatever the graph."""

    def forward(self, x, edge_index):
        z = ((torch.arange(x.shape[0], dtype=x.dtype) + 1) * x[:, 0]).sum() + 2.0
        return torch.stack([z, torch.zeros_like(z)]).view(1, 2)


def test_logit_share_is_the_kept_nodes_part_of_the_logit():
    x = torch.ones(4, 1, dtype=torch.float64)
    ei = torch.empty(2, 0, dtype=torch.long)
    keep = torch.tensor([False, True, False, True])
    # z(x) - z(0) = 1 + 2 + 3 + 4 = 10; nodes 1 and 3 give 2 + 4
    assert bl.logit_share(Weighted(), x, ei, None, 0, keep) == pytest.approx(0.6)
    assert bl.logit_share(Weighted(), x, ei, None, 0, torch.ones(4, dtype=torch.bool)) == pytest.approx(1.0)
    # the second logit does not move: no share
    assert bl.logit_share(Weighted(), x, ei, None, 1, keep) is None


def test_top_nodes_and_share():
    scores = torch.tensor([0.2, 0.9, 0.5, 0.5, 0.0])
    keep = bl.top_nodes(scores, 2, seed=3)
    assert keep.sum() == 2 and bool(keep[1]) and (bool(keep[2]) != bool(keep[3]))  # the tie broken by the seed
    assert torch.equal(bl.top_nodes(scores, 2, seed=3), keep)
    motif = torch.tensor([False, True, True, False, False])
    assert bl.share(scores, motif) == pytest.approx(1.4 / 2.1)
    assert bl.share(torch.zeros(5), motif) is None
    assert bl.share(torch.tensor([1.0, -1.0, 2.0, 0.0, 0.0]), motif) == pytest.approx(1.0 / 2.0)


def test_losing_tasks_are_those_not_within_a_hundredth():
    quality = {"results": {"summary": {"overall": {"per_task": {
        "a": {"within_0.01_of_best_non_lrp": False, "best_non_lrp": "cam"},
        "b": {"within_0.01_of_best_non_lrp": True, "best_non_lrp": "saliency"}}}}}}
    assert bl.losing_tasks(quality) == {"a": "cam"}
    stored = json.loads((ROOT / "benchmarks" / "results" / "quality.json").read_text())
    losing = bl.losing_tasks(stored)
    assert losing and all(w != bl.DEFAULT for w in losing.values())


def test_one_tree_cycles_instance_by_hand():
    """The measures of the first Tree-Cycles instance of seed 0 against the same quantities computed here from
    the model, the motif and the default explanation."""
    import bench_quality as bq
    import quality_tasks as qt
    from lrp_lib.explain.explainer import Explainer, LRPExplainer

    task = qt.build_task("tree_cycles", 0, 1)
    meth = bq.Methods(task, 0, [bl.DEFAULT, bl.OTHER], bq.EXPLAINER_SETTINGS.get("tree_cycles", bq.PYG_DEFAULTS))
    meth._lift = lambda node, edge, eids: (node, edge)
    meth.n_instances = 1
    inst = task.instances[0]
    row = bl.instance_row(task, meth, inst, 0, 0, bl.OTHER)
    x, ei, kw, _, eids = meth.inputs(inst)
    index = kw["index"]
    with torch.no_grad():
        out = task.model(x, ei)[index]
    target = int(out.argmax())
    truth = task.data.edge_mask[eids].bool()
    motif = torch.zeros(x.shape[0], dtype=torch.bool)
    motif[ei[1][truth]] = True
    assert row["motif_size"] == int(motif.sum()) > 0

    def logit(keep):
        with torch.no_grad():
            return float(task.model(x * keep.to(x.dtype)[:, None], ei)[index, target])
    full, empty = logit(torch.ones_like(motif)), logit(torch.zeros_like(motif))
    assert row["motif_logit"] == pytest.approx((logit(motif) - empty) / (full - empty), rel=1e-9)
    e = Explainer(task.model, algorithm=LRPExplainer(), explanation_type="phenomenon", node_mask_type="attributes",
                  model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))(
        x, ei, target=torch.tensor([target]), index=index)
    r = e.node_relevance.sum(-1).double()
    assert row["motif_relevance"] == pytest.approx(float(r[motif].sum() / r.sum()), rel=1e-6)
    assert row["motif_abs"] == pytest.approx(float(r.abs()[motif].sum() / r.abs().sum()), rel=1e-6)
    k = int(motif.sum())
    ranked = r.abs().sort(descending=True).values
    assert ranked[k - 1] > ranked[k]  # the top k is one set, whatever the order of ties below it
    top = torch.zeros_like(motif)
    top[torch.topk(r.abs(), k).indices] = True
    assert row["top_logit_default"] == pytest.approx((logit(top) - empty) / (full - empty), rel=1e-6)
