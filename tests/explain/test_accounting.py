"""Accounts (:mod:`lrp_lib.explain.accounting`): :func:`account_one`, the account of a single graph, gives
:func:`account`'s numbers bit for bit (the same float64 row sums, added in the same order), reports
sums that are not finite, and warns with the amount of relevance lost; an explanation of one graph
through ``LRPExplainer`` reports that account."""
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn
from torch_geometric.nn import GCNConv, global_mean_pool

from lrp_lib.explain.accounting import LostRelevanceWarning, account, account_one, lost_relevance
from lrp_lib.explain.mode.tally import Tally
from lrp_lib.explain.explainer import Explainer, LRPExplainer


def _tally(amounts: list[float], dtype) -> Tally:
    tally = Tally()
    for i, a in enumerate(amounts):
        tally.absorb(f"op {i}", torch.tensor(a, dtype=dtype))
    return tally


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 40), features=st.integers(1, 5), classes=st.integers(1, 4),
       edges=st.one_of(st.none(), st.integers(0, 30)), dtype=st.sampled_from([torch.float32, torch.float64]),
       amounts=st.lists(st.floats(-10, 10), max_size=4), seed=st.integers(0, 2 ** 16))
def test_account_one_gives_the_numbers_of_account(nodes, features, classes, edges, dtype, amounts, seed):
    g = torch.Generator().manual_seed(seed)
    start = torch.zeros(1, classes, dtype=dtype)
    start[0, int(torch.randint(classes, (1,), generator=g))] = float(torch.randn(1, generator=g)) * 5
    node_rel = torch.randn(nodes, features, generator=g, dtype=dtype) * 3
    attr_rel = None if edges is None else torch.randn(edges, 2, generator=g, dtype=dtype)
    grads = [node_rel] + ([attr_rel] if attr_rel is not None else [])
    tally = _tally(amounts, dtype)
    bias, residual = account(None, [], start, grads, tally, None, node_group=torch.zeros(nodes, dtype=torch.long),
                             row_group=torch.zeros(1, dtype=torch.long), num_groups=1,
                             edge_group=None if edges is None else torch.zeros(edges, dtype=torch.long))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LostRelevanceWarning)
        bias_one, residual_one = account_one(start, [node_rel, attr_rel], tally.total(tally.absorbed), set())
    assert bias_one.dtype == residual_one.dtype == dtype and bias_one.shape == residual_one.shape == (1,)
    assert torch.equal(bias_one, bias) and torch.equal(residual_one, residual)


def test_account_one_sums_the_rows_in_order():
    # float32 rows whose float64 sum depends on the order: 1e16 + 1 - 1e16 is 0 left to right
    start = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    node_rel = torch.tensor([[1e16], [1.0], [-1e16]], dtype=torch.float64)
    with pytest.warns(LostRelevanceWarning):  # the 1 added to 1e16 is lost to rounding
        bias, residual = account_one(start, [node_rel, None], 0.0, set())
    assert bias.item() == 0.0
    assert residual.item() == 1.0 - ((0.0 + 1e16) + 1.0 - 1e16) == 1.0


def test_account_one_warns_with_the_amount_lost_and_refuses_relevance_not_finite():
    start = torch.tensor([[0.0, 2.0]])
    with pytest.warns(LostRelevanceWarning, match=r"relevance 0\.5 \(25\.0 % of the explained 2\)"):
        bias, residual = account_one(start, [torch.full((3, 1), 0.5)], 0.0, set())
    assert residual.item() == pytest.approx(0.5) and bias.item() == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing lost: no warning
        account_one(start, [torch.full((4, 1), 0.25)], 1.0, set())
    for bad in ([torch.tensor([[float("nan")], [1.0]])], [torch.ones(2, 1), torch.tensor([[float("inf")]])]):
        with pytest.raises(ValueError, match="the relevance is NaN or Inf"):
            account_one(start, bad, 0.0, set())
    with pytest.raises(ValueError, match="the relevance is NaN or Inf"):  # an edge_attr's too
        lost_relevance(start, [torch.ones(2, 1), torch.tensor([[float("nan")]])], 0.0, set())


class _Graph(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.conv1, self.conv2, self.lin = GCNConv(4, 8), GCNConv(8, 8), nn.Linear(8, 3)

    def forward(self, x, edge_index, batch=None):
        h = self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu()
        return self.lin(global_mean_pool(h, batch))


@pytest.mark.parametrize("rule", ["epsilon", "zplus", "gamma"])
def test_one_graph_reports_its_account(rule):
    torch.manual_seed(0)
    model = _Graph().eval()
    x, edge_index = torch.randn(7, 4), torch.randint(0, 7, (2, 20))
    ex = Explainer(model, algorithm=LRPExplainer(rule), explanation_type="phenomenon", node_mask_type="attributes",
                   model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))
    for _ in range(4):  # in the mode, recorded, replayed, compiled: the same account
        e = ex(x, edge_index, target=torch.tensor([1]))
        value = model(x, edge_index)[0, 1].item()
        assert e.bias_relevance.shape == e.relevance_residual.shape == (1,)
        total = e.node_relevance.double().sum().item() + e.bias_relevance.item() + e.relevance_residual.item()
        assert total == pytest.approx(value, rel=1e-5, abs=1e-6)
        assert abs(e.relevance_residual.item()) < 1e-4 * max(1.0, abs(value))
        # the explanation's account as account() gives it for the graph (group 0)
        tally = _tally([e.bias_relevance.item()], torch.float64)
        start = torch.zeros(1, 3)
        start[0, 1] = value
        _, residual = account(None, [], start, [e.node_relevance], tally, None,
                              node_group=torch.zeros(7, dtype=torch.long), row_group=torch.zeros(1, dtype=torch.long),
                              num_groups=1)
        assert residual.item() == pytest.approx(e.relevance_residual.item(), abs=1e-6)
