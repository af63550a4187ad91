"""lrp_lib.explain.masks: the masks LRPExplainer returns, and PyG's own tools reading them."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from torch import nn  # noqa: E402
from torch_geometric.explain import Explainer  # noqa: E402
from torch_geometric.explain.metric import (characterization_score, fidelity, groundtruth_metrics,  # noqa: E402
                                            unfaithfulness)
from torch_geometric.nn import GCNConv  # noqa: E402

from lrp_lib.explain.explainer import LRPExplainer  # noqa: E402
from lrp_lib.explain.masks import MASKS, relevance_mask  # noqa: E402


class GCN(nn.Module):
    def __init__(self, features=5, hidden=8, classes=3):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        return self.head(torch.relu(self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)))


def graph(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (30,), generator=g)
    dst = (src + torch.randint(1, n, (30,), generator=g)) % n
    edge_index = torch.unique(torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1), dim=1)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    return x, edge_index


def model(seed=0):
    torch.manual_seed(seed)
    m = GCN().double().eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.uniform_(-0.3, 0.3)
    return m


def explainer(m, mask="abs", node="attributes", threshold=None, level="node"):
    return Explainer(m, algorithm=LRPExplainer(mask=mask), explanation_type="model", node_mask_type=node,
                     edge_mask_type="object", threshold_config=threshold,
                     model_config=dict(mode="multiclass_classification", task_level=level, return_type="raw"))


# ------------------------------------------------------------------ the transform
def test_each_kind_of_mask_follows_its_formula():
    r = torch.tensor([[0.5, -2.0], [1.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(relevance_mask(r, "abs"), torch.tensor([[0.25, 1.0], [0.5, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(relevance_mask(r, "positive"), torch.tensor([[0.5, 0.0], [1.0, 0.0]], dtype=torch.float64))
    assert torch.equal(relevance_mask(r, "relevance"), r)
    assert torch.equal(relevance_mask(-r.abs(), "positive"), torch.zeros_like(r))  # no positive evidence
    assert torch.equal(relevance_mask(torch.zeros(3), "abs"), torch.zeros(3))
    assert relevance_mask(None, "abs") is None


def test_a_dict_of_masks_shares_one_maximum():
    got = relevance_mask({"a": torch.tensor([1.0, -4.0]), "b": torch.tensor([2.0])}, "abs")
    torch.testing.assert_close(got["a"], torch.tensor([0.25, 1.0]))
    torch.testing.assert_close(got["b"], torch.tensor([0.5]))


def test_a_bad_mask_kind_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="mask must be one of 'abs', 'positive', 'relevance', got 'signed'"):
        LRPExplainer(mask="signed")
    with pytest.raises(ValueError, match="mask must be one of"):
        relevance_mask(torch.ones(2), "max")
    with pytest.raises(TypeError, match="relevance must be a tensor"):
        relevance_mask([1.0, 2.0], "abs")
    assert MASKS == ("abs", "positive", "relevance")


@pytest.mark.parametrize("mask", MASKS)
def test_masks_are_made_from_the_signed_relevance_that_conserves_the_output(mask):
    m, (x, edge_index) = model(), graph()
    e = explainer(m, mask=mask)(x, edge_index, index=3)
    logit = m(x, edge_index)[3].max()
    assert float(e.node_relevance.sum() + e.bias_relevance) == pytest.approx(float(logit), rel=1e-9)
    torch.testing.assert_close(e.node_mask, relevance_mask(e.node_relevance, mask))
    torch.testing.assert_close(e.edge_mask, relevance_mask(e.edge_relevance, mask))
    assert (e.node_relevance < 0).any() and (e.edge_relevance < 0).any()  # the case the masks are for
    if mask != "relevance":
        assert float(e.node_mask.min()) >= 0 and float(e.node_mask.max()) == pytest.approx(1.0)


def test_the_default_mask_is_the_normalised_absolute_relevance():
    m, (x, edge_index) = model(), graph()
    e = explainer(m)(x, edge_index, index=3)
    torch.testing.assert_close(e.edge_mask, e.edge_relevance.abs() / e.edge_relevance.abs().max())


def test_per_index_masks_are_made_from_the_summed_relevance():
    m, (x, edge_index) = model(), graph()
    ex = Explainer(m, algorithm=LRPExplainer(per_index=True), explanation_type="model", node_mask_type="object",
                   edge_mask_type="object",
                   model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    e = ex(x, edge_index, index=torch.tensor([1, 4]))
    torch.testing.assert_close(e.node_relevance, e.node_relevance_per_index.to_dense().sum(0))
    torch.testing.assert_close(e.edge_mask, relevance_mask(e.edge_relevance, "abs"))


# ------------------------------------------------------------------ PyG's tools on the default mask
def test_topk_threshold_keeps_the_k_most_relevant_edges():
    m, (x, edge_index) = model(), graph()
    e = explainer(m, threshold=dict(threshold_type="topk", value=5))(x, edge_index, index=3)
    kept = set(e.edge_mask.nonzero().view(-1).tolist())
    assert kept == set(e.edge_relevance.abs().topk(5).indices.tolist())


def test_hard_threshold_keeps_what_passes_it():
    m, (x, edge_index) = model(), graph()
    e = explainer(m, threshold=dict(threshold_type="hard", value=0.5))(x, edge_index, index=3)
    r = e.edge_relevance.abs()
    assert torch.equal(e.edge_mask.bool(), r / r.max() > 0.5)
    assert 0 < int(e.edge_mask.sum()) < r.numel()
    signed = explainer(m, mask="relevance", threshold=dict(threshold_type="hard", value=0.5))(x, edge_index, index=3)
    assert int(signed.edge_mask.sum()) < int(e.edge_mask.sum())  # the strongly negative edges are dropped there


def test_feature_importance_plot_shows_every_bar(tmp_path, monkeypatch):
    m, (x, edge_index) = model(), graph()
    e = explainer(m)(x, edge_index, index=3)
    plt.close("all")
    drawn = []
    save = plt.savefig
    monkeypatch.setattr(plt, "savefig", lambda *a, **k: (drawn.append(plt.gca()), save(*a, **k)))  # PyG closes it
    e.visualize_feature_importance(path=str(tmp_path / "features.png"))
    ax = drawn[0]
    widths = sorted((p.get_width() for p in ax.patches), reverse=True)
    want = sorted(e.node_mask.sum(0).tolist(), reverse=True)
    assert widths == pytest.approx([round(w, 3) for w in want], abs=1e-9)
    lo, hi = ax.get_xlim()
    assert all(lo <= w <= hi for w in widths) and min(widths) > 0  # every bar within the axes
    plt.close("all")
    signed = explainer(m, mask="relevance")(x, edge_index, index=3)
    assert float(signed.node_mask.sum(0).min()) < 0  # with the signed relevance a bar would leave the axes


def test_visualize_graph_draws_the_default_mask(tmp_path):
    m, (x, edge_index) = model(), graph()
    e = explainer(m)(x, edge_index, index=3)
    e.visualize_graph(path=str(tmp_path / "graph.png"), backend="networkx")
    assert (tmp_path / "graph.png").stat().st_size > 0
    plt.close("all")
    # PyG scales opacity by (m - min m) / max: for |R| / max |R| the most relevant edge, whatever its sign, is opaque
    opacity = (e.edge_mask - e.edge_mask.min()) / (e.edge_mask - e.edge_mask.min()).max()
    assert int(opacity.argmax()) == int(e.edge_relevance.abs().argmax())


def test_explanation_subgraph_keeps_the_nodes_and_edges_with_relevance():
    m, (x, edge_index) = model(), graph()
    e = explainer(m)(x, edge_index, index=3)
    sub = e.get_explanation_subgraph()
    assert sub.num_nodes == int((e.node_relevance != 0).any(-1).sum())
    assert sub.edge_index.shape[1] == int((e.edge_relevance != 0).sum())


def test_groundtruth_auroc_is_the_auroc_of_the_absolute_relevance():
    m, (x, edge_index) = model(), graph()
    e = explainer(m)(x, edge_index, index=3)
    truth = (torch.arange(edge_index.shape[1]) % 3 == 0).long()
    got = groundtruth_metrics(e.edge_mask, truth, metrics="auroc")
    assert float(got) == pytest.approx(roc_auc_score(truth.numpy(), e.edge_relevance.abs().numpy()), abs=1e-6)


def test_fidelity_unfaithfulness_and_characterization_on_the_topk_subgraph():
    m, (x, edge_index) = model(), graph()
    ex = Explainer(m, algorithm=LRPExplainer(), explanation_type="phenomenon", node_mask_type="object",
                   edge_mask_type="object", threshold_config=dict(threshold_type="topk", value=6),
                   model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    target = m(x, edge_index).argmax(-1)
    e = ex(x, edge_index, target=target, index=3)
    pos, neg = fidelity(ex, e)
    assert 0.0 <= pos <= 1.0 and 0.0 <= neg <= 1.0
    # by hand: the prediction at node 3 with the masks multiplied into the features and the messages
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    keep_x, keep_e = e.node_mask, e.edge_mask
    with torch.no_grad():
        set_masks(m, keep_e, edge_index, apply_sigmoid=False)
        explained = m(x * keep_x, edge_index).argmax(-1)[3]
        set_masks(m, 1 - keep_e, edge_index, apply_sigmoid=False)
        complement = m(x * (1 - keep_x), edge_index).argmax(-1)[3]
        clear_masks(m)
    assert pos == pytest.approx(float(complement != target[3]))
    assert neg == pytest.approx(float(explained != target[3]))
    score = characterization_score(torch.tensor(pos), torch.tensor(neg))
    assert torch.isfinite(torch.as_tensor(score))
    u = unfaithfulness(ex, e)
    assert 0.0 <= u <= 1.0
