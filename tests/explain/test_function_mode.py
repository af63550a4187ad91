"""The interception (RelevanceMode, with the forward rules: ForwardMode) gives the relevance of the rules' definitions on any model
built from torch operations, never patches anything, and is safe across threads."""
import threading

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCNConv, global_add_pool

from lrp_lib.teach import graph as G
from lrp_lib.teach import ops
from lrp_lib.core.composites import Composite
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.function_mode import UnsupportedModelError
from lrp_lib.teach.mode import relevance
from lrp_lib.core.rules import Epsilon, Gamma


def relevance_of(model, *inputs, composite="z", start=None):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    with ForwardMode(composite, model if isinstance(model, nn.Module) else None) as mode:
        for t in leaves:
            mode.mark(t)
        out = model(*leaves)
    grads = mode.tally.backward(out, leaves, out.detach() if start is None else start)
    return out, grads, mode


def x_times_grad(model, *inputs):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = model(*leaves)
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    return [t.detach() * g for t, g in zip(leaves, grads)]


class Residual(nn.Module):
    """x -> Linear -> ReLU -> (+ x) -> Linear -> ReLU -> sum; the residual written as ``h + x``, in
    place as ``h += x`` and with ``torch.add``."""

    def __init__(self, width=5, style="plus", seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.a = nn.Linear(width, width, bias=False)
        self.b = nn.Linear(width, 3, bias=False)
        self.style = style

    def forward(self, x):
        h = F.relu(self.a(x))
        if self.style == "plus":
            h = h + x
        elif self.style == "inplace":
            h = h.clone()  # (plain autograd needs ReLU's output unchanged)
            h += x
        else:
            h = torch.add(x, h)
        return self.b(h).relu().sum(-1)


@pytest.mark.parametrize("style", ["plus", "inplace", "torch.add"])
def test_lrp0_on_a_bias_free_residual_net_is_input_times_gradient(style):
    model = Residual(style=style).double()
    x = torch.rand(4, 5, dtype=torch.float64)
    out, (rx,), mode = relevance_of(model, x)
    torch.testing.assert_close(rx, x_times_grad(model, x)[0])
    torch.testing.assert_close(rx.sum(-1), out.detach())  # conservation per row
    assert mode.tally.total(mode.tally.absorbed) == pytest.approx(0.0, abs=1e-12)


@given(width=st.integers(1, 6), depth=st.integers(1, 3), seed=st.integers(0, 10**6), rows=st.integers(1, 4))
def test_property_lrp0_equals_input_times_gradient_on_piecewise_linear_nets(width, depth, seed, rows):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width, bias=False), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 1, bias=False)).double()
    x = torch.randn(rows, width, dtype=torch.float64)
    with torch.no_grad():
        if bool((model(x) == 0).any()):
            return
    out, (rx,), _ = relevance_of(model, x)
    torch.testing.assert_close(rx, x_times_grad(model, x)[0], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(rx.sum(-1), out.detach().view(-1), rtol=1e-7, atol=1e-9)


def test_a_bias_keeps_its_share_and_the_tally_says_how_much():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1)).double()
    x = torch.rand(2, 4, dtype=torch.float64)
    out, (rx,), mode = relevance_of(model, x)
    absorbed = mode.tally.total(mode.tally.absorbed)
    assert abs(absorbed) > 1e-3
    assert float(rx.sum()) + absorbed == pytest.approx(float(out.sum()), rel=1e-10)


def test_the_same_relevance_as_the_ops_written_by_hand():
    """Linear -> ReLU -> Linear with Gamma on the first layer (a composite by name) equals the same
    net written with lrp_lib's relevance ops."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)).double()
    x = torch.rand(3, 4, dtype=torch.float64)
    composite = Composite(linear=Epsilon(1e-3), rules={"0": Gamma(0.25, eps=1e-3)}, epsilon=1e-3)
    out, (rx,), _ = relevance_of(model, x, composite=composite)
    from lrp_lib.teach import linear_maps as rules
    leaf = x.clone().requires_grad_(True)
    h = rules.linear(leaf, model[0].weight.detach(), model[0].bias.detach(), rule=Gamma(0.25, eps=1e-3))
    y = rules.linear(ops.relu(h), model[2].weight.detach(), model[2].bias.detach(), rule=Epsilon(1e-3))
    y.backward(y.detach())
    torch.testing.assert_close(rx, leaf.grad)


def test_the_lrp_lib_graph_layers_give_the_same_relevance_in_gradient_mode():
    """The teaching layers of lrp_lib.teach.graph run on plain torch ops outside ``relevance()``; the generic
    mechanism explains that plain run and gets what their own relevance mode gets."""
    torch.manual_seed(3)
    model = nn.Sequential(G.EdgeLinear(4, edge_features=2, sender_features=3, bias=False, eps=0.0), G.EdgeReLU(),
                          G.NodeLinear(5, node_features=3, incoming_features=4, bias=False, eps=0.0), G.NodeReLU(),
                          G.GlobalLinear(2, node_features=5, bias=False, eps=0.0)).double()
    graphs = []
    for k in range(2):
        n = 4 + k
        ei = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
        graphs.append(Data(x=torch.rand(n, 3, dtype=torch.float64), edge_index=ei,
                           edge_attr=torch.rand(n, 2, dtype=torch.float64)))
    batch = Batch.from_data_list(graphs)

    data = G.relevance_inputs(Data(x=batch.x, edge_index=batch.edge_index, edge_attr=batch.edge_attr, batch=batch.batch))
    with relevance():
        out = model(data)
    out.u.backward(out.u.detach())
    want_x, want_e = data.x.grad, data.edge_attr.grad

    def plain(x, edge_attr):
        return model(Data(x=x, edge_index=batch.edge_index, edge_attr=edge_attr, batch=batch.batch,
                          num_graphs=2)).u
    _, (rx, re), _ = relevance_of(plain, batch.x, batch.edge_attr)
    torch.testing.assert_close(rx, want_x)
    torch.testing.assert_close(re, want_e)


class MessageTimesTwo(GCNConv):
    """A subclass that overrides ``message``: it must be explained through its own code."""

    def message(self, x_j, edge_weight):
        return 2.0 * super().message(x_j, edge_weight)


class OneConv(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv
        self.lin = nn.Linear(3, 1, bias=False)

    def forward(self, x, edge_index):
        return self.lin(global_add_pool(F.relu(self.conv(x, edge_index)), None))


def test_a_subclass_is_explained_through_its_own_code():
    torch.manual_seed(4)
    model = OneConv(MessageTimesTwo(4, 3, bias=False)).double()
    x = torch.rand(5, 4, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 0]])
    out, (rx,), _ = relevance_of(lambda t: model(t, ei), x)
    torch.testing.assert_close(rx.sum(), out.detach().sum())
    torch.testing.assert_close(rx, x_times_grad(lambda t: model(t, ei), x)[0])


def test_relevance_reaching_an_operation_without_a_rule_is_reported():
    model = lambda x: torch.special.i0(x).sum()  # noqa: E731
    x = torch.rand(3, dtype=torch.float64)
    _, (rx,), mode = relevance_of(model, x)
    assert rx is None  # (no relevance passes the blocked operation: x is not reached)
    assert mode.tally.total(mode.tally.blocked) > 0
    assert "special_i0" in next(iter(mode.tally.blocked))


def test_dropout_in_training_mode_is_refused():
    model = nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5)).double().train()
    with pytest.raises(UnsupportedModelError, match="dropout in training mode"):
        relevance_of(model, torch.rand(2, 3, dtype=torch.float64))


def test_nothing_is_patched_and_other_threads_are_untouched():
    """While one thread explains inside the mode, another thread trains a model: its gradients equal
    those of the same training run alone, and explanations from four threads at once equal the
    sequential ones."""
    def train(seed, steps=20):
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).double()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            x = torch.rand(16, 4, generator=g, dtype=torch.float64)
            loss = (net(x) - x.sum(-1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().clone() for p in net.parameters()]

    alone = train(7)
    torch.manual_seed(5)
    model = Residual(seed=5).double()
    inputs = [torch.rand(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(k)) for k in range(4)]
    sequential = [relevance_of(model, x)[1][0] for x in inputs]

    results, trained, errors = [None] * 4, [], []
    barrier = threading.Barrier(5)

    def explain(k):
        try:
            barrier.wait()
            for _ in range(5):
                results[k] = relevance_of(model, inputs[k])[1][0]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def trainer():
        barrier.wait()
        trained.append(train(7))

    threads = [threading.Thread(target=explain, args=(k,)) for k in range(4)] + [threading.Thread(target=trainer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, sequential):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    for got, want in zip(trained[0], alone):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # and afterwards plain autograd is plain autograd
    x = torch.rand(2, 5, dtype=torch.float64, requires_grad=True)
    assert "Relevance" not in type(model(x).grad_fn).__name__


def test_gates_pass_relevance_to_the_signal():
    """GRU-style gating, (1 - sigmoid(W x)) * x + sigmoid(W x) * x: the gates are held constant
    (signal-take-all), so the input relevance is x * (1 - s) + x * s = x, summed: the output."""
    torch.manual_seed(6)
    lin = nn.Linear(4, 4, bias=False).double()

    def gated(x):
        s = torch.sigmoid(lin(x))
        return ((1 - s) * x + s * x).sum(-1)

    x = torch.randn(3, 4, dtype=torch.float64)
    out, (rx,), mode = relevance_of(gated, x)
    torch.testing.assert_close(rx, x)
    torch.testing.assert_close(rx.sum(-1), out.detach())
    assert mode.tally.total(mode.tally.absorbed) == pytest.approx(0.0, abs=1e-12)


def test_a_softmax_used_as_a_value_is_not_counted_as_a_bias():
    """AttnLRP's softmax rule does not conserve; what it does not pass on is left out of the tally
    (the explainer reports it as relevance_residual, with a warning), not hidden among the biases."""
    x = torch.randn(2, 5, dtype=torch.float64)
    out, (rx,), mode = relevance_of(lambda t: torch.softmax(t, -1)[:, 0], x)
    s = torch.softmax(x, -1)
    R = torch.zeros_like(x)
    R[:, 0] = s[:, 0]
    torch.testing.assert_close(rx, x * (R - s * R.sum(-1, keepdim=True)))
    assert mode.tally.total(mode.tally.absorbed) == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ attention (nn.MultiheadAttention)
def _z(attention="cp"):
    return Composite(linear=Epsilon(0.0), epsilon=0.0, attention=attention)


def _run_in_mode(module, composite, *inputs, **kwargs):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    with ForwardMode(composite, module) as mode:
        for t in leaves:
            mode.mark(t)
        out = module(*leaves, **kwargs)
    return leaves, out, mode


MHA_CASES = {
    "batch_first, key_padding_mask": (dict(batch_first=True), dict(key_padding_mask="bool")),
    "seq first, float key_padding_mask": (dict(), dict(key_padding_mask="float")),
    "2-d bool attn_mask, weights per head": (dict(batch_first=True), dict(attn_mask="bool2", average_attn_weights=False)),
    "3-d float attn_mask and key_padding_mask": (dict(batch_first=True), dict(attn_mask="float3", key_padding_mask="bool")),
    "causal": (dict(batch_first=True), dict(attn_mask="causal", is_causal=True)),
    "cross attention, kdim/vdim": (dict(batch_first=True, kdim=3, vdim=5), dict()),
    "no bias, 3 heads": (dict(batch_first=True, bias=False, num_heads=3), dict(key_padding_mask="bool")),
    "unbatched": (dict(), dict(unbatched=True)),
}


def _mha_inputs(ctor, call, need_weights, g):
    E, H, L, S, N = 6, ctor.pop("num_heads", 2), 4, 5, 2
    mha = nn.MultiheadAttention(E, H, **ctor).double().eval()
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))  # biases non-zero too
    bf = ctor.get("batch_first", False)
    kd, vd = ctor.get("kdim", E), ctor.get("vdim", E)
    cross = "kdim" in ctor
    S = S if cross else L

    def seq(n, d):
        t = torch.randn(N, n, d, generator=g, dtype=torch.float64)
        return t if bf else t.transpose(0, 1).contiguous()
    q = seq(L, E)
    k, v = (seq(S, kd), seq(S, vd)) if cross else (q, q)
    kw = dict(need_weights=need_weights)
    call = dict(call)
    if call.pop("unbatched", False):
        q = k = v = q[:, 0]
    kpm = call.pop("key_padding_mask", None)
    if kpm is not None:
        pad = torch.zeros(N, S, dtype=torch.bool)
        pad[1, -2:] = True
        kw["key_padding_mask"] = pad if kpm == "bool" else torch.zeros(N, S, dtype=torch.float64).masked_fill(
            pad, float("-inf")) + 0.3 * torch.rand(N, S, generator=g, dtype=torch.float64)
    am = call.pop("attn_mask", None)
    if am == "bool2":
        kw["attn_mask"] = torch.rand(L, S, generator=g) > 0.7
        kw["attn_mask"][:, 0] = False
    elif am == "float3":
        kw["attn_mask"] = torch.randn(N * H, L, S, generator=g, dtype=torch.float64)
    elif am == "causal":
        kw["attn_mask"] = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    kw.update(call)
    return mha, (q, k, v), kw


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_attention_written_out_in_the_mode_computes_torchs_output(case, need_weights):
    """F.multi_head_attention_forward written out in torch ops (projections, scaled scores, masks,
    softmax, A @ v, out-projection) gives torch's own output and weights to 1e-12 in float64."""
    g = torch.Generator().manual_seed(len(case))
    ctor, call = (dict(d) for d in MHA_CASES[case])
    mha, (q, k, v), kw = _mha_inputs(ctor, call, need_weights, g)
    with torch.no_grad():
        ref_out, ref_w = mha(q, k, v, **kw)
    leaves, (out, w), mode = _run_in_mode(mha, _z(), q, k, v, **kw)
    assert type(out.grad_fn).__name__ != "BlockedRelevanceBackward"
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    if need_weights:
        torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    else:
        assert w is None
    rel = mode.tally.backward(out, leaves, out.detach())
    assert not mode.tally.blocked
    total = sum(float(r.sum()) for r in rel if r is not None) + mode.tally.total(mode.tally.absorbed)
    assert total == pytest.approx(float(out.detach().sum()), rel=1e-9)  # CP-LRP with LRP-0 conserves, biases included


class AttentionNet(nn.Module):
    """Linear -> self-attention -> + residual -> ReLU -> Linear, bias-free: with the attention weights
    held constant it is piecewise linear in x."""

    def __init__(self, width=6, heads=2, detach=False):
        super().__init__()
        self.inp = nn.Linear(3, width, bias=False)
        self.attn = nn.MultiheadAttention(width, heads, bias=False, batch_first=True)
        self.out = nn.Linear(width, 2, bias=False)
        self.heads, self.detach = heads, detach

    def attention(self, h, mask):
        """The slow reference: the attention from its definition, weights optionally detached."""
        N, L, E = h.shape
        d = E // self.heads
        wq, wk, wv = self.attn.in_proj_weight.chunk(3)
        split = lambda t: t.view(N, L, self.heads, d).transpose(1, 2)  # noqa: E731
        q, k, v = split(h @ wq.T), split(h @ wk.T), split(h @ wv.T)
        scores = (q @ k.transpose(-1, -2)) / d ** 0.5
        scores = scores.masked_fill(mask.view(N, 1, 1, L), float("-inf"))
        a = torch.softmax(scores, -1)
        a = a.detach() if self.detach else a
        o = (a @ v).transpose(1, 2).reshape(N, L, E)
        return o @ self.attn.out_proj.weight.T

    def forward(self, x, mask, reference=False):
        h = self.inp(x)
        a = self.attention(h, mask) if reference else self.attn(h, h, h, key_padding_mask=mask, need_weights=False)[0]
        return self.out(torch.relu(a + h)).sum(-1)


def test_lrp0_with_cp_on_attention_is_input_times_gradient_with_the_weights_detached():
    """CP-LRP holds the attention weights constant: under LRP-0 a bias-free attention net gets exactly
    x * grad of the same net with its attention weights detached (a reference written from the
    definition of attention, masked keys included), and conserves per sequence."""
    torch.manual_seed(5)
    model = AttentionNet().double()
    x = torch.rand(2, 5, 3, dtype=torch.float64)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True
    leaves, out, mode = _run_in_mode(model, _z("cp"), x, mask=mask)
    (rx,) = mode.tally.backward(out, leaves, out.detach())
    model.detach = True
    with torch.no_grad():
        torch.testing.assert_close(model(x, mask, reference=True), out.detach(), rtol=0, atol=1e-12)
    leaf = x.clone().requires_grad_(True)
    ref = model(leaf, mask, reference=True)
    (g,) = torch.autograd.grad(ref, leaf, torch.ones_like(ref))  # LRP-0 from R = out: x * d(sum out)/dx
    torch.testing.assert_close(rx, leaf.detach() * g, rtol=1e-10, atol=1e-12)
    # conserved per sequence (attention mixes the positions of a sequence, never two sequences)
    torch.testing.assert_close(rx.sum((-1, -2)), out.detach().sum(-1), rtol=1e-10, atol=1e-12)


def test_attnlrp_uniform_attention_equals_the_rules_written_by_hand():
    """attention="uniform" (AttnLRP): one head, LRP-0 everywhere, against the rules applied by hand:
    out-projection (z-rule), A @ v (each product term split half and half), the softmax
    R_s = s_logit * (R_A - A sum R_A), q k^T / sqrt(d) (half and half), the projections (z-rule)."""
    torch.manual_seed(6)
    E, L = 4, 5
    mha = nn.MultiheadAttention(E, 1, bias=False, batch_first=True).double()
    h = torch.randn(1, L, E, dtype=torch.float64)
    leaves, (y, _), mode = _run_in_mode(mha, _z("uniform"), h, h, h, need_weights=False)
    (rq, rk, rv) = mode.tally.backward(y, leaves, y.detach())
    wq, wk, wv = (w.detach() for w in mha.in_proj_weight.chunk(3))
    wo = mha.out_proj.weight.detach()
    x = h[0]
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    logits = (q / E ** 0.5) @ k.T
    a = torch.softmax(logits, -1)
    o = a @ v
    out = o @ wo.T
    r_o = o * ((out / out) @ wo)                          # R_out = out: the z-rule of the out-projection
    s = r_o / o
    r_a = 0.5 * a * (s @ v.T)                             # A_ij v_jf gets S_if A_ij v_jf, half to A_ij
    r_v = 0.5 * v * (a.T @ s)
    r_logits = logits * (r_a - a * r_a.sum(-1, keepdim=True))
    s2 = r_logits / logits
    r_qs = 0.5 * (q / E ** 0.5) * (s2 @ k)
    r_k = 0.5 * k * (s2.T @ (q / E ** 0.5))
    ref = [x * ((r_qs / q) @ wq), x * ((r_k / k) @ wk), x * ((r_v / v) @ wv)]
    for got, want in zip((rq, rk, rv), ref):
        torch.testing.assert_close(got[0], want, rtol=1e-9, atol=1e-12)
    assert float(rk.abs().sum()) > 1e-3  # uniform: relevance flows through the scores (CP gives none)


class GPSNet(nn.Module):
    def __init__(self, channels=6, attn_type="multihead", norm="batch_norm"):
        super().__init__()
        from torch_geometric.nn import GINConv, GPSConv
        self.inp = nn.Linear(4, channels)
        mlp = nn.Sequential(nn.Linear(channels, channels), nn.ReLU(), nn.Linear(channels, channels))
        self.gps = GPSConv(channels, GINConv(mlp), heads=2, attn_type=attn_type, norm=norm)
        self.head = nn.Linear(channels, 1)

    def forward(self, x, edge_index, batch=None):
        from torch_geometric.nn import global_add_pool
        return self.head(global_add_pool(self.gps(self.inp(x), edge_index, batch), batch))


def _random_batch(seed=0, sizes=(4, 6, 5)):
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for n in sizes:
        src, dst = torch.randint(0, n, (2, 2 * n), generator=g)
        keep = src != dst
        ei = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
        graphs.append(Data(x=torch.rand(n, 4, generator=g, dtype=torch.float64), edge_index=ei))
    return Batch.from_data_list(graphs)


def _graph_explainer(model, composite, node_mask_type="attributes"):
    from torch_geometric.explain import Explainer
    from lrp_lib.explain.explainer import LRPExplainer
    return Explainer(model, algorithm=LRPExplainer(composite), explanation_type="model",
                     node_mask_type=node_mask_type, edge_mask_type="object",
                     model_config=dict(mode="regression", task_level="graph", return_type="raw"))


def _conserves_per_graph(e, batch, out):
    """Graph by graph: node relevance + bias_relevance[g] + relevance_residual[g] = output of graph g."""
    graphs = out.shape[0]
    assert e.bias_relevance.shape == e.relevance_residual.shape == (graphs,)
    nodes = torch.zeros(graphs, dtype=out.dtype).index_add_(0, batch, e.node_relevance.sum(-1))
    torch.testing.assert_close(nodes + e.bias_relevance + e.relevance_residual, out.view(graphs), rtol=0,
                               atol=1e-9)


@pytest.mark.parametrize("norm", ["batch_norm", None])
def test_gpsconv_is_explained_and_conserves(norm):
    """GPSConv(channels, GINConv(...), heads=2) in a model: LRPExplainer explains a batch of graphs of
    different sizes (to_dense_batch pads them: the padded keys are masked); under LRP-0 with CP the
    node relevance plus bias_relevance is each graph's output, and a graph's nodes get relevance only
    from its own output (the padding never mixes graphs)."""
    torch.manual_seed(7)
    model = GPSNet(norm=norm).double().eval()
    if norm:
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    data = _random_batch()
    e = _graph_explainer(model, _z())(data.x, data.edge_index, batch=data.batch)
    out = model(data.x, data.edge_index, data.batch).detach()
    _conserves_per_graph(e, data.batch, out)
    assert float(e.relevance_residual.abs().max()) < 1e-9
    assert torch.isfinite(e.node_mask).all() and float(e.edge_mask.max()) == pytest.approx(1.0)
    # graph 1 alone: the same node relevance as its rows in the batch, the other graphs' outputs aside
    one = _random_batch(sizes=(4, 6, 5)).get_example(1)
    e1 = _graph_explainer(model, _z())(one.x, one.edge_index)
    torch.testing.assert_close(e1.node_relevance, e.node_relevance[data.batch == 1], rtol=1e-9, atol=1e-12)


def test_transformer_encoder_layer_is_written_out_and_conserves_without_biases():
    torch.manual_seed(8)
    layer = nn.TransformerEncoderLayer(6, 2, dim_feedforward=8, batch_first=True, bias=False).double().eval()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, -1] = True
    with torch.no_grad():
        ref = layer(x, src_key_padding_mask=pad)
    leaves, out, mode = _run_in_mode(layer, _z(), x, src_key_padding_mask=pad)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    (rx,) = mode.tally.backward(out, leaves, out.detach())
    assert not mode.tally.blocked
    # layer norms pass relevance unchanged (AttnLRP), biases absent: the total is conserved
    assert float(rx.sum()) == pytest.approx(float(out.sum()), rel=1e-9)


def test_attention_options_without_a_rule_are_refused_by_name():
    torch.manual_seed(9)
    x = torch.randn(1, 4, 6, dtype=torch.float64)
    mha = nn.MultiheadAttention(6, 2, add_bias_kv=True, batch_first=True).double().eval()
    leaves, (out, _), mode = _run_in_mode(mha, _z(), x, x, x, need_weights=False)
    mode.tally.backward(out, leaves, out.detach())
    assert any("multi_head_attention_forward with bias_k, bias_v" in k for k in mode.tally.blocked)
    mha = nn.MultiheadAttention(6, 2, dropout=0.1, batch_first=True).double().train()
    with pytest.raises(UnsupportedModelError, match=r"attention dropout \(p=0.1\) in training mode"):
        _run_in_mode(mha, _z(), x, x, x)


def test_performer_attention_stays_refused_with_the_operation_named():
    """GPSConv(attn_type="performer") never forms the attention matrix: its FAVOR+ kernel multiplies
    random features of q and k (einsum of input-dependent operands), so no weight can be held
    constant; LRPExplainer refuses it naming the operation and module."""
    torch.manual_seed(10)
    model = GPSNet(attn_type="performer").double().eval()
    data = _random_batch(sizes=(5,))
    with pytest.raises(UnsupportedModelError, match=r"einsum of several input-dependent operands in module "
                                                    r"'gps.attn.fast_attn' \(PerformerProjection\)"):
        _graph_explainer(model, _z())(data.x, data.edge_index)


# ------------------------------------------------------------------ recurrent layers (LSTM aggregation)
RNN_CASES = {
    "lstm": lambda: nn.LSTM(3, 4),
    "lstm 2 layers, bidirectional, batch_first": lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True,
                                                                 batch_first=True),
    "lstm proj_size": lambda: nn.LSTM(3, 4, proj_size=2, batch_first=True),
    "lstm without bias": lambda: nn.LSTM(3, 4, bias=False),
    "gru 2 layers, bidirectional": lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True),
    "rnn tanh": lambda: nn.RNN(3, 4, batch_first=True),
    "rnn relu": lambda: nn.RNN(3, 4, nonlinearity="relu"),
}


@pytest.mark.parametrize("initial_state", [False, True])
@pytest.mark.parametrize("case", list(RNN_CASES))
def test_recurrent_layers_written_out_in_the_mode_compute_torchs_output(case, initial_state):
    """torch.lstm / gru / rnn_* written out step by step gives torch's output and final states to 1e-12
    (float64), and conserves: relevance of the inputs + what the biases kept = the output (the gates
    held constant, sums split in proportion, tanh the identity)."""
    torch.manual_seed(11)
    rnn = RNN_CASES[case]().double().eval()
    bf = rnn.batch_first
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    x = x if bf else x.transpose(0, 1).contiguous()
    dirs, layers = 1 + rnn.bidirectional, rnn.num_layers
    inputs = [x]
    if initial_state:
        h0 = torch.randn(dirs * layers, 2, rnn.proj_size or 4, dtype=torch.float64)
        c0 = torch.randn(dirs * layers, 2, 4, dtype=torch.float64)
        inputs.append((h0, c0) if isinstance(rnn, nn.LSTM) else h0)
    with torch.no_grad():
        ref = rnn(*inputs)
    leaves = [x.clone().requires_grad_(True)]
    with ForwardMode(_z(), rnn) as mode:
        mode.mark(leaves[0])
        out = rnn(leaves[0], *inputs[1:])
    flat = lambda o: [o[0], *(o[1] if isinstance(o[1], tuple) else (o[1],))]  # noqa: E731
    for got, want in zip(flat(out), flat(ref)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    (rx,) = mode.tally.backward(out[0], leaves, out[0].detach())
    assert not mode.tally.blocked
    if not initial_state:  # a given initial state is a constant: its share is not tallied
        total = float(rx.sum()) + mode.tally.total(mode.tally.absorbed)
        assert total == pytest.approx(float(out[0].detach().sum()), rel=1e-9)


def _lstm_lrp_reference(lstm: nn.LSTM, x: Tensor, r_out: Tensor) -> Tensor:
    """LRP for a one-layer LSTM after Arras et al. (2017), written with explicit loops over time steps
    and units (an independent implementation): the gates get nothing (signal-take-all),
    c_t = f c_{t-1} + i g splits R_c in proportion to its two terms, h_t = o tanh(c_t) passes R_h to c_t,
    the pre-activation of g splits by the z-rule over x_t, h_{t-1} and the biases (which keep theirs).
    ``x``: (T, F) one sequence; ``r_out``: (T, H) the relevance of each output h_t."""
    w_ih, w_hh = lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    T, H = x.shape[0], w_hh.shape[1]
    hs, cs, gs, fs, igs, pre = [torch.zeros(H, dtype=x.dtype)], [torch.zeros(H, dtype=x.dtype)], [], [], [], []
    for t in range(T):
        z = w_ih @ x[t] + w_hh @ hs[-1] + b
        i, f, g, o = torch.sigmoid(z[:H]), torch.sigmoid(z[H:2 * H]), torch.tanh(z[2 * H:3 * H]), torch.sigmoid(z[3 * H:])
        c = f * cs[-1] + i * g
        fs.append(f * cs[-1]), igs.append(i * g), pre.append(z[2 * H:3 * H]), gs.append(g)
        cs.append(c), hs.append(o * torch.tanh(c))
    r_x = torch.zeros_like(x)
    r_h = torch.zeros(H, dtype=x.dtype)
    r_c = torch.zeros(H, dtype=x.dtype)
    for t in range(T - 1, -1, -1):
        r_h = r_h + r_out[t]
        r_c = r_c + r_h                                   # h_t = o * tanh(c_t): all to c_t
        c = cs[t + 1]
        r_prev_c = torch.zeros(H, dtype=x.dtype)
        r_pre = torch.zeros(H, dtype=x.dtype)
        for j in range(H):
            if c[j] != 0:
                r_prev_c[j] = fs[t][j] / c[j] * r_c[j]
                r_pre[j] = igs[t][j] / c[j] * r_c[j]      # i * g: all to g, identity to its pre-activation
        new_r_h = torch.zeros(H, dtype=x.dtype)
        for j in range(H):
            zj = pre[t][j]
            row_x, row_h = w_ih[2 * H + j], w_hh[2 * H + j]
            for k in range(x.shape[1]):
                r_x[t, k] += x[t, k] * row_x[k] / zj * r_pre[j]
            for k in range(H):
                new_r_h[k] += hs[t][k] * row_h[k] / zj * r_pre[j]
        r_h, r_c = new_r_h, r_prev_c
    return r_x


def test_lstm_relevance_equals_a_loop_reference_of_arras_et_al():
    torch.manual_seed(12)
    lstm = nn.LSTM(3, 4).double().eval()
    x = torch.randn(6, 1, 3, dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    with ForwardMode(_z(), lstm) as mode:
        mode.mark(leaf)
        out, _ = lstm(leaf)
    start = torch.zeros_like(out)
    start[-1] = out[-1].detach()  # explain the last output, as LSTMAggregation reads it
    (rx,) = mode.tally.backward(out, [leaf], start)
    ref = _lstm_lrp_reference(lstm, x[:, 0], start[:, 0])
    torch.testing.assert_close(rx[:, 0], ref, rtol=1e-9, atol=1e-12)
    assert float(rx[:-1].abs().sum()) > 1e-3  # earlier steps get relevance through the recurrence


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_recurrent_cells_written_out(cell):
    """nn.LSTMCell / GRUCell / RNNCell inside the mode: torch's values to 1e-12, and relevance reaches x."""
    torch.manual_seed(13)
    module = {"lstm": lambda: nn.LSTMCell(3, 4), "gru": lambda: nn.GRUCell(3, 4),
              "rnn_tanh": lambda: nn.RNNCell(3, 4), "rnn_relu": lambda: nn.RNNCell(3, 4, nonlinearity="relu")}[cell]()
    module = module.double()
    x, h, c = (torch.randn(2, d, dtype=torch.float64) for d in (3, 4, 4))
    state = (h, c) if cell == "lstm" else h
    with torch.no_grad():
        ref = module(x, state)
    leaf = x.clone().requires_grad_(True)
    with ForwardMode(_z(), module) as mode:
        mode.mark(leaf)
        got = module(leaf, state)
    got, ref = (got, ref) if cell == "lstm" else ((got,), (ref,))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    (rx,) = mode.tally.backward(got[0], [leaf], got[0].detach())
    assert not mode.tally.blocked and torch.isfinite(rx).all() and float(rx.abs().sum()) > 0


class LSTMAggrNet(nn.Module):
    def __init__(self, kind):
        super().__init__()
        from torch_geometric.nn import SAGEConv, Set2Set
        from torch_geometric.nn.aggr import LSTMAggregation
        self.kind = kind
        self.conv = SAGEConv(4, 5, aggr="lstm") if kind == "sage" else None
        self.pool = {"set2set": lambda: Set2Set(4, processing_steps=3),
                     "lstm_aggr": lambda: LSTMAggregation(4, 5)}.get(kind, lambda: None)()
        self.head = nn.Linear({"sage": 5, "set2set": 8, "lstm_aggr": 5}[kind], 1)

    def forward(self, x, edge_index, batch=None):
        from torch_geometric.nn import global_add_pool
        if batch is None:
            batch = torch.zeros(x.shape[0], dtype=torch.long)
        if self.kind == "sage":
            return self.head(global_add_pool(torch.relu(self.conv(x, edge_index)), batch))
        return self.head(self.pool(x, batch))


@pytest.mark.parametrize("kind", ["sage", "set2set", "lstm_aggr"])
def test_lstm_aggregations_are_explained_and_conserve(kind):
    """SAGEConv(aggr="lstm"), Set2Set and LSTMAggregation: LRPExplainer explains them, and the node
    relevance plus bias_relevance is the output (LRP-0, gates and attention held constant)."""
    torch.manual_seed(14)
    model = LSTMAggrNet(kind).double().eval()
    data = _random_batch(seed=1)
    # SAGEConv's LSTM needs the edges sorted by destination
    perm = (data.edge_index[1] * data.num_nodes + data.edge_index[0]).argsort()
    ei = data.edge_index[:, perm]
    e = _graph_explainer(model, _z())(data.x, ei, batch=data.batch)
    out = model(data.x, ei, data.batch).detach()
    _conserves_per_graph(e, data.batch, out)
    assert float(e.relevance_residual.abs().max()) < 1e-9
    assert float(e.node_relevance.abs().sum()) > 1e-3


def test_a_joined_constant_keeps_its_share_but_a_detached_part_is_not_a_constant():
    """torch.cat of an input-dependent tensor and a constant: the constant's slice is a bias's share
    (tallied, so the total is conserved); a part the model detached is left unaccounted (lost)."""
    torch.manual_seed(15)
    lin = nn.Linear(5, 1, bias=False).double()
    const = torch.rand(2, 2, dtype=torch.float64)
    x = torch.rand(2, 3, dtype=torch.float64)
    for detach in (False, True):
        def model(t):
            other = t[:, :2].detach() * 2 if detach else const
            return lin(torch.cat([t, other], 1)).sum(-1)
        out, (rx,), mode = relevance_of(model, x)
        absorbed = mode.tally.total(mode.tally.absorbed)
        w = lin.weight.detach()[0]
        other = x[:, :2] * 2 if detach else const
        torch.testing.assert_close(rx, x * w[:3])  # LRP-0 of a linear map: x_i w_i
        if detach:
            assert absorbed == 0.0 and mode.detached
        else:
            assert absorbed == pytest.approx(float((other * w[3:]).sum()), rel=1e-12)
            assert float(rx.sum()) + absorbed == pytest.approx(float(out.sum()), rel=1e-12)


@pytest.mark.parametrize("join", ["cat", "cat axis", "concat", "stack -1"])
def test_every_way_of_joining_a_constant_conserves(join):
    torch.manual_seed(16)
    const = torch.rand(3, 2, dtype=torch.float64)
    x = torch.rand(3, 2, dtype=torch.float64)
    w = torch.rand(4, dtype=torch.float64)

    def model(t):
        if join == "cat":
            h = torch.cat([const, t], 1)
        elif join == "cat axis":
            h = torch.cat((const, t), axis=1)
        elif join == "concat":
            h = torch.concat([const, t], dim=-1)
        else:
            h = torch.stack([const, t], -1).flatten(1)
        return (h * w).sum(-1)
    out, (rx,), mode = relevance_of(model, x)
    absorbed = mode.tally.total(mode.tally.absorbed)
    order = [0, 2, 1, 3] if join == "stack -1" else [0, 1, 2, 3]  # stack interleaves const, x
    wc, wx = w[order[:2]], w[order[2:]]
    torch.testing.assert_close(rx, x * wx)
    assert absorbed == pytest.approx(float((const * wc).sum()), rel=1e-12)


def test_product_aggregation_and_prod_split_uniformly_over_the_factors():
    """PyG's MulAggregation (scatter_reduce prod) and torch.prod: every factor of a product gets the same
    share R / n (AttnLRP's rule for a product of n inputs), against a loop over the groups."""
    from torch_geometric.nn.aggr import MulAggregation
    torch.manual_seed(17)
    x = torch.rand(6, 2, dtype=torch.float64) + 0.5
    index = torch.tensor([0, 0, 0, 1, 3, 3])
    agg = MulAggregation()
    out, (rx,), mode = relevance_of(lambda t: agg(t, index, dim_size=4), x)
    torch.testing.assert_close(out, agg(x, index, dim_size=4))
    n = torch.bincount(index, minlength=4).double()
    torch.testing.assert_close(rx, out.detach()[index] / n[index].view(-1, 1))
    assert not mode.tally.blocked
    assert float(rx.sum()) + mode.tally.total(mode.tally.absorbed) == pytest.approx(float(out.sum()), rel=1e-12)
    for dim, keepdim in ((0, False), (1, True), (None, False)):
        f = (lambda t: torch.prod(t)) if dim is None else (lambda t: torch.prod(t, dim, keepdim=keepdim))
        out, (rx,), _ = relevance_of(f, x)
        k = x.numel() if dim is None else x.shape[dim]
        want = (out.detach() if dim is None else (out.detach() if keepdim else out.detach().unsqueeze(dim))) / k
        torch.testing.assert_close(rx, want.expand(x.shape))


def test_gpsconv_with_attnlrp_uniform_attention_accounts_for_the_output():
    """attention="uniform" (AttnLRP): half of A v's relevance goes through the softmax to the scores and
    on to q and k; the softmax rule does not conserve, and the explanation says by how much
    (relevance_residual), so inputs + biases + residual is still the output; CP and uniform differ."""
    torch.manual_seed(18)
    model = GPSNet(norm=None).double().eval()
    data = _random_batch(seed=2, sizes=(5, 4))
    out = model(data.x, data.edge_index, data.batch).detach()
    with pytest.warns(UserWarning, match="did not reach x"):
        e = _graph_explainer(model, _z("uniform"))(data.x, data.edge_index, batch=data.batch)
    _conserves_per_graph(e, data.batch, out)
    assert float(e.relevance_residual.abs().min()) > 1e-9  # each graph's softmax loses some
    assert torch.isfinite(e.node_relevance).all()
    cp = _graph_explainer(model, _z("cp"))(data.x, data.edge_index, batch=data.batch)
    assert float((cp.node_relevance - e.node_relevance).abs().max()) > 1e-6



SUM_FORMS = [  # (name, the reduction, the sum it is a multiple of)
    ("torch.sum(x)", lambda x: torch.sum(x), None),
    ("x.sum(0)", lambda x: x.sum(0), None),
    ("x.sum(-1, keepdim=True)", lambda x: x.sum(-1, keepdim=True), None),
    ("x.sum((0, 2))", lambda x: x.sum((0, 2)), None),
    ("torch.sum(x, dim=[2, -3])", lambda x: torch.sum(x, dim=[2, -3]), None),
    ("x.mean(1)", lambda x: x.mean(1), lambda x: x.sum(1)),
    ("x.mean(dim=(0, 1), keepdim=True)", lambda x: x.mean(dim=(0, 1), keepdim=True),
     lambda x: x.sum(dim=(0, 1), keepdim=True)),
    ("torch.mean(x)", lambda x: torch.mean(x), lambda x: torch.sum(x)),
]


@pytest.mark.parametrize("form,total", [(f, t) for _, f, t in SUM_FORMS], ids=[n for n, _, _ in SUM_FORMS])
@given(seed=st.integers(0, 2**16))
def test_a_sum_splits_its_relevance_in_proportion_without_a_nested_backward(form, total, seed):
    """Sums and means (a mean is a sum, then the identity) give each summand its share of the sum,
    R_x = x * R / sum, expanded back over the summed dimensions (the z-rule, from the definition);
    their VJP is written out, so no backward runs inside the relevance backward."""
    total = total or form
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    nested = []
    original = torch.autograd.grad

    def counted(*args, **kwargs):
        nested.append(1)
        return original(*args, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.autograd, "grad", counted)
        out, (rx,), _ = relevance_of(form, x, composite="z")
    assert len(nested) == 1  # the outer backward alone
    share = out.detach() / total(x)
    reference = x * torch.autograd.functional.vjp(total, x, share)[1]
    torch.testing.assert_close(rx, reference, rtol=1e-12, atol=1e-12)
