"""LRPExplainer through the settings PyG's own explain tests cover: every model mode with each return type it
takes, node-, edge- and graph-level tasks, both explanation types, every mask type, ``index`` None, an int and a
tensor, on a batch of three small graphs built as PyG's fixtures build it (a chain whose edges cross between the
graphs).  Every explanation must give masks PyG's checks accept (shape, range [0, 1]) and account for the
explained value: node relevance + bias relevance + residual = the explained logits (or outputs) summed over the
explained rows.  Graph-level per-graph accounts are undefined where graphs share edges, and refused, naming
``batch``; one account for the batch (``accounts="total"``) explains it."""
import itertools

import pytest
import torch
from torch_geometric.explain.config import MaskType
from torch_geometric.nn import GCNConv, global_add_pool

from lrp_lib.explain.explainer import Explainer, LRPExplainer

X = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
EDGE_INDEX = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7],
                           [1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6]])
BATCH = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])  # edges 2-3 and 4-5 join two graphs
EDGE_LABEL_INDEX = torch.tensor([[0, 1, 2], [3, 4, 5]])

RETURN_TYPES = {"binary_classification": ("raw", "probs"), "multiclass_classification": ("raw", "probs", "log_probs"),
                "regression": ("raw",)}
SETTINGS = [(mode, rt, level) for mode, rts in RETURN_TYPES.items() for rt in rts
            for level in ("node", "edge", "graph")]


class Net(torch.nn.Module):
    """Two GCN layers, read per node, per link (the product of its ends) or per graph (a sum), with the head the
    return type names."""

    def __init__(self, mode: str, return_type: str, level: str):
        super().__init__()
        self.mode, self.return_type, self.level = mode, return_type, level
        self.conv1 = GCNConv(3, 16)
        self.conv2 = GCNConv(16, 7 if mode == "multiclass_classification" else 1)

    def forward(self, x, edge_index, batch=None, edge_label_index=None, raw=False):
        h = self.conv2(self.conv1(x, edge_index).relu(), edge_index)
        if self.level == "graph":
            h = global_add_pool(h, batch)
        elif self.level == "edge":
            h = h[edge_label_index[0]] * h[edge_label_index[1]]
        if raw or self.return_type == "raw":
            return h
        if self.mode == "binary_classification":
            return h.sigmoid()
        return h.softmax(-1) if self.return_type == "probs" else h.log_softmax(-1)


def _explained(model, target, index) -> float:
    """The value the relevance starts from, summed over the explained rows: the target's logit (multiclass), the
    log-odds of the target class (binary: +z for target 1, -z for 0), or the output (regression)."""
    with torch.no_grad():
        z = model(X, EDGE_INDEX, BATCH, EDGE_LABEL_INDEX, raw=True)
    if model.mode == "multiclass_classification":
        value = z.gather(1, target.view(-1, 1)).view(-1) if target.numel() == z.shape[0] else None
    elif model.mode == "binary_classification":
        value = (z.view(-1) * (target.view(-1).to(z.dtype) * 2 - 1))
    else:
        value = z.view(-1)
    rows = torch.arange(z.shape[0]) if index is None else torch.arange(z.shape[0])[index].view(-1)
    if value is None:  # a multiclass target given per explained row
        return float(z[rows].gather(1, target.view(-1, 1)).sum())
    return float(value[rows].sum())


def _check_masks(explanation, node_mask_type, edge_mask_type):
    """PyG's own checks of an explanation's masks."""
    if node_mask_type is None:
        assert "node_mask" not in explanation
    else:
        shape = {MaskType.attributes: tuple(X.shape), MaskType.object: (X.shape[0], 1),
                 MaskType.common_attributes: (1, X.shape[1])}[MaskType(node_mask_type)]
        assert tuple(explanation.node_mask.shape) == shape
        assert 0 <= float(explanation.node_mask.min()) and float(explanation.node_mask.max()) <= 1
    if edge_mask_type is None:
        assert "edge_mask" not in explanation
    else:
        assert tuple(explanation.edge_mask.shape) == (EDGE_INDEX.shape[1],)
        assert 0 <= float(explanation.edge_mask.min()) and float(explanation.edge_mask.max()) <= 1


@pytest.mark.parametrize("mode,return_type,level", SETTINGS)
@pytest.mark.parametrize("explanation_type", ["model", "phenomenon"])
def test_pygs_settings(mode, return_type, level, explanation_type):
    torch.manual_seed(0)
    model = Net(mode, return_type, level).eval()
    config = dict(mode=mode, task_level=level, return_type=return_type)
    with torch.no_grad():
        z = model(X, EDGE_INDEX, BATCH, EDGE_LABEL_INDEX, raw=True)
    predicted = z.argmax(-1) if mode == "multiclass_classification" else \
        (z > 0).long().view(-1) if mode == "binary_classification" else z
    for node_mask_type, edge_mask_type, index in itertools.product(
            ["object", "common_attributes", "attributes", None], ["object", None], [None, 2, torch.arange(3)]):
        if node_mask_type is None and edge_mask_type is None:
            continue  # (PyG's Explainer refuses an explanation without masks)
        target = predicted if explanation_type == "phenomenon" else None
        kwargs = dict(target=target, index=index, batch=BATCH, edge_label_index=EDGE_LABEL_INDEX)
        for accounts in ("each", "total"):
            explainer = Explainer(model, algorithm=LRPExplainer(accounts=accounts), explanation_type=explanation_type,
                                  node_mask_type=node_mask_type, edge_mask_type=edge_mask_type, model_config=config)
            where = f"{node_mask_type}, {edge_mask_type}, index={index}, accounts={accounts}"
            if level == "graph" and accounts == "each":
                with pytest.raises(ValueError, match=r"batch puts the two ends of 4 edge\(s\) in different graphs .*"
                                                     r"LRPExplainer\(accounts='total'\)"):
                    explainer(X, EDGE_INDEX, **kwargs)
                continue
            explanation = explainer(X, EDGE_INDEX, **kwargs)
            _check_masks(explanation, node_mask_type, edge_mask_type)
            total = float(explanation.node_relevance.sum() + explanation.bias_relevance.sum()
                          + explanation.relevance_residual.sum())
            want = _explained(model, predicted, index)
            assert total == pytest.approx(want, rel=1e-4, abs=1e-5), where
