"""Messages recomputed in backward (:mod:`lrp_lib.explain.recompute`): the same relevance as keeping them,
bitwise, also when the model changes the tensor they were selected from in place afterwards (the mode
computes them before the change); a change the mode cannot see is an error, not a wrong value; and the
scatter keeps no message of the edges."""
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv, MessagePassing

from lrp_lib.explain import handlers, recompute
from lrp_lib.explain.explainer import Explainer, LRPExplainer


class Layer(MessagePassing):
    """x W, its messages w_e (x W)_j summed, plus x W, changed in place after the messages as ``change`` says."""

    def __init__(self, a, b, change):
        super().__init__(aggr="add")
        self.lin, self.change = nn.Linear(a, b), change

    def forward(self, x, edge_index, weight):
        h = self.lin(x)
        out = self.propagate(edge_index, x=h, weight=weight)
        if self.change == "in place":
            h.mul_(3.0)
        elif self.change == "unseen":
            with torch.no_grad():
                h.mul_(3.0)
        return out + h

    def message(self, x_j, weight):
        return weight.view(-1, 1) * x_j


class Net(nn.Module):
    def __init__(self, change=None):
        super().__init__()
        torch.manual_seed(0)
        self.one, self.two = Layer(4, 6, change), GCNConv(6, 3)

    def forward(self, x, edge_index):
        weight = torch.linspace(0.5, 1.5, edge_index.shape[1], dtype=x.dtype)
        return self.two(torch.relu(self.one(x, edge_index, weight)), edge_index)


def _relevance(model, rule="zplus"):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 4, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, 12, (2, 40), generator=g)
    algorithm = LRPExplainer(rule=rule, mask="relevance", recompute=True)
    explainer = Explainer(model.double().eval(), algorithm=algorithm,
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    e = explainer(x, edge_index, index=torch.tensor([0, 5]))
    return e.node_relevance, e.edge_relevance, e.bias_relevance


@pytest.mark.parametrize("change", [None, "in place"])
@pytest.mark.parametrize("rule", ["zplus", "epsilon", "z"])
def test_recomputed_messages_give_the_relevance_of_kept_ones(change, rule, monkeypatch):
    made = []
    original = handlers.recipe_for

    def spy(src, registry):
        made.append(original(src, registry))
        return made[-1]

    monkeypatch.setattr(handlers, "recipe_for", spy)
    recomputed = _relevance(Net(change), rule)
    assert len(made) == 2 and all(r is not None for r in made)  # both layers
    monkeypatch.setattr(handlers, "recipe_for", lambda src, registry: None)
    kept = _relevance(Net(change), rule)
    for a, b in zip(recomputed, kept):
        assert torch.equal(a, b)


def test_recompute_is_off_by_default_and_must_be_a_bool():
    assert not LRPExplainer().recompute
    with pytest.raises(TypeError, match="recompute"):
        LRPExplainer(recompute="yes")


def test_a_change_the_mode_cannot_see_is_an_error():
    with pytest.raises(RuntimeError, match="changed in place outside"):
        _relevance(Net("unseen"))


def test_the_scatter_keeps_no_message():
    """A recipe keeps the node tensor and the functions, not the E x F messages."""
    h = torch.randn(5, 3, requires_grad=True)
    index = torch.tensor([0, 1, 1, 4, 2, 2, 3, 0])
    selected = h.index_select(0, index)
    recompute.note(selected, h, lambda t: t.index_select(0, index))
    scaled = selected * 2.0
    recompute.note(scaled, selected, lambda t: t * 2.0)
    registry = {}
    recipe = recompute.recipe_for(scaled, registry)
    assert recipe.root is h and registry == {id(h): [recipe]}
    assert torch.equal(recipe.get(), scaled)
    assert recompute.recipe_for(h, {}) is None  # nothing noted
    big = torch.randn(2, 3)
    small = big[:1]
    recompute.note(big, small, lambda t: t.expand(2, 3))
    assert recompute.recipe_for(big, {}) is not None
    recompute.note(small, big, lambda t: t[:1])
    assert recompute.recipe_for(small, {}) is None  # from a larger tensor: kept instead
