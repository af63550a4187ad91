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


def _relevance(model, rule="zplus", recompute=True, edge_masks=True):
    """(node, edge (None without edge masks) and bias relevance) of two nodes' outputs, float64."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(12, 4, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, 12, (2, 40), generator=g)
    algorithm = LRPExplainer(rule=rule, mask="relevance", recompute=recompute, mechanism="functions")
    explainer = Explainer(model.double().eval(), algorithm=algorithm,
                          explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object" if edge_masks else None,
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    e = explainer(x, edge_index, index=torch.tensor([0, 5]))
    return e.node_relevance, e.get("edge_relevance"), e.bias_relevance


def _spy(monkeypatch, name: str) -> list:
    """Each result of ``handlers.<name>`` (recipe_for, linear_chain), appended to the list returned."""
    made, original = [], getattr(handlers, name)

    def spy(src, registry):
        made.append(original(src, registry))
        return made[-1]
    monkeypatch.setattr(handlers, name, spy)
    return made


@pytest.mark.parametrize("change", [None, "in place"])
@pytest.mark.parametrize("rule", ["zplus", "epsilon", "z"])
def test_recomputed_messages_give_the_relevance_of_kept_ones(change, rule, monkeypatch):
    made = _spy(monkeypatch, "recipe_for")
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
    with pytest.raises(ValueError, match="mechanism='functions'"):  # the forward rules keep no messages
        LRPExplainer(recompute=True)


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


# ------------------------------------------------ messages as one map from the node rows (linear_chain)
@pytest.mark.parametrize("change", [None, "in place"])
@pytest.mark.parametrize("rule", ["zplus", "epsilon", "z", "gamma"])
def test_messages_of_node_rows_times_constants_are_split_as_one_map(change, rule, monkeypatch):
    """Both layers' scatters take the chain (selection, product with the edge weights) back to the node
    tensor, and the relevance equals the messages' own split to rounding (float64), also when the node
    tensor is changed in place after the messages (the root is copied first)."""
    chains = _spy(monkeypatch, "linear_chain")
    fused = _relevance(Net(change), rule, recompute=False, edge_masks=False)
    assert len(chains) == 2 and all(c is not None for c in chains)
    monkeypatch.setattr(handlers, "linear_chain", lambda src, registry: None)
    kept = _relevance(Net(change), rule, recompute=False, edge_masks=False)
    for a, b in zip(fused, kept):
        if a is None:  # no edge relevance asked for
            assert b is None
            continue
        assert a.abs().sum() > 0.1
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_recorded_edge_relevance_keeps_the_messages(monkeypatch):
    """With edge relevance recorded, the messages pass an edge hook (a step without a VJP): no chain."""
    chains = _spy(monkeypatch, "linear_chain")
    _relevance(Net(), "zplus", recompute=False)
    assert len(chains) == 2 and all(c is None for c in chains)


def test_an_unseen_change_of_the_chain_root_is_an_error():
    with pytest.raises(RuntimeError, match="changed in place outside"):
        _relevance(Net("unseen"), recompute=False, edge_masks=False)


def test_the_chain_keeps_no_message():
    """Under the mode, no floating tensor with one row per edge is saved for the relevance backward
    (the gradient keeps none either); with the chain switched off, the messages are."""
    from lrp_lib.explain.function_mode import RelevanceMode
    from lrp_lib.core.composites import get_composite

    def saved_edge_rows(chain):
        model = Net().double().eval()
        g = torch.Generator().manual_seed(1)
        x = torch.randn(12, 4, generator=g, dtype=torch.float64, requires_grad=True)
        edge_index = torch.randint(0, 12, (2, 40), generator=g)
        rows = []

        def pack(t):
            if t.is_floating_point() and t.dim() == 2 and t.shape[0] >= 40:
                rows.append(tuple(t.shape))
            return t
        with pytest.MonkeyPatch.context() as mp:
            if not chain:
                mp.setattr(handlers, "linear_chain", lambda src, registry: None)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                mode = RelevanceMode(get_composite("zplus"), model)
                with mode:
                    mode.mark(x)
                    model(x, edge_index)
        return rows
    assert saved_edge_rows(chain=True) == []
    assert len(saved_edge_rows(chain=False)) == 2  # one E x F message tensor per layer


@pytest.mark.parametrize("select", ["index_select", "getitem"])
def test_a_selection_and_a_constant_product_have_the_vjp_of_autograd(select):
    g = torch.Generator().manual_seed(3)
    h = torch.randn(7, 3, dtype=torch.float64, generator=g, requires_grad=True)
    index = torch.randint(0, 7, (20,), generator=g)
    if select == "getitem":
        index[::3] -= 7  # negative indices count from the end, as in x[index]
    c = torch.rand(20, 1, dtype=torch.float64, generator=g) + 0.5
    picked = h.index_select(0, index) if select == "index_select" else h[index]
    func = torch.Tensor.index_select if select == "index_select" else torch.Tensor.__getitem__
    recompute.note_selection(func, picked, (h, 0, index) if select == "index_select" else (h, index), {})
    scaled = picked * c
    recompute.note(scaled, picked, lambda t: t * c, recompute.scaling_vjp("mul", (picked, c), {}, 0, scaled))
    registry = {}
    root, compute, vjp = recompute.linear_chain(scaled, registry)
    assert root.root is h and registry == {id(h): [root]}
    torch.testing.assert_close(compute(h.detach()), scaled.detach(), rtol=0, atol=0)
    v = torch.randn(20, 3, dtype=torch.float64, generator=g)
    (want,) = torch.autograd.grad(scaled, h, v)
    torch.testing.assert_close(vjp(v), want, rtol=1e-15, atol=1e-15)


def test_steps_without_a_vjp_end_the_chain():
    h = torch.randn(5, 3)
    mask = torch.tensor([True, False, True, True, False])
    picked = h[mask]  # a boolean mask: no VJP noted
    recompute.note_selection(torch.Tensor.__getitem__, picked, (h, mask), {})
    assert recompute.linear_chain(picked, {}) is None
    wide = torch.randn(5, 1)
    out = wide * torch.ones(5, 3)  # the constant broadcasts the input: not the identity's shape
    assert recompute.scaling_vjp("mul", (wide, torch.ones(5, 3)), {}, 0, out) is None
    assert recompute.scaling_vjp("div", (2.0, h), {}, 1, 2.0 / h) is None  # a constant divided by the input
    assert recompute.scaling_vjp("div", (h, 2.0), {}, 0, h / 2.0) is not None
