"""Rules as forward modifications (lrp_lib.core.modify and each Rule's ``modify``): the value is kept to
the bit, and input times gradient of one plain backward equals the rule's relevance, checked against the
rules' definitions on explicit contributions (tests/rule_references.py), against the backward form
(``LinearMapRelevance``), under Hypothesis, through ``torch.compile``, and with no
autograd node but PyTorch's own."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from lrp_lib.core import modify, rules
from lrp_lib.teach.backward_rules import LinearMap
from lrp_lib.teach.linear_maps import LinearMapRelevance
from lrp_lib.core.stabilizer import LostRelevanceWarning

from rule_references import autograd_nodes, python_nodes, ref_rule

RULES = [rules.Epsilon(0.0), rules.Epsilon(0.3), rules.Gamma(0.25), rules.Gamma(1.0, eps=0.0),
         rules.AlphaBeta(2, 1), rules.AlphaBeta(1.5, 0.5), rules.ZPlus()]
LINEAR = LinearMap(F.linear)


def forward_relevance(rule, m, x, weight, bias, g):
    """Input (and bias) relevance from the modified forward: t * t.grad after one backward with gradient
    ``g`` at the output, whose relevance is then ``out * g``."""
    leaf = x.detach().clone().requires_grad_(True)
    b = None if bias is None else bias.detach().clone().requires_grad_(True)
    out = m(leaf, weight, b)
    y = rule.modify(m, leaf, weight, b, out)
    y.backward(g)
    return y.detach(), out.detach(), leaf * leaf.grad, None if b is None else b * b.grad


def backward_relevance(rule, m, x, weight, bias, R):
    """The same rule in its backward form: LinearMapRelevance's backward given the output relevance R."""
    leaf = x.detach().clone().requires_grad_(True)
    out = LinearMapRelevance.apply(leaf, weight, bias, m, rule, "test")
    with warnings.catch_warnings():  # (the backward form warns where relevance is lost; both lose the same)
        warnings.simplefilter("ignore", LostRelevanceWarning)
        out.backward(R)
    return leaf.grad


def data(gen, n=6, fin=10, fout=5, signed=True):
    x = torch.randn(n, fin, generator=gen, dtype=torch.float64)
    if not signed:
        x = x.clamp(min=0)
    w = torch.randn(fout, fin, generator=gen, dtype=torch.float64)
    b = torch.randn(fout, generator=gen, dtype=torch.float64)
    return x, w, b


@pytest.mark.parametrize("rule", RULES, ids=repr)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("signed", [True, False])
def test_linear_equals_definition(rule, bias, signed, gen):
    x, w, b = data(gen, signed=signed)
    b = b if bias else None
    g = torch.randn(x.shape[0], w.shape[0], generator=gen, dtype=torch.float64)
    y, out, rx, _ = forward_relevance(rule, LINEAR, x, w, b, g)
    assert torch.equal(y, out)  # the value, to the bit
    R = out * g
    torch.testing.assert_close(rx, ref_rule(rule, x, w, b, R), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rx, backward_relevance(rule, LINEAR, x, w, b, R), rtol=1e-12, atol=1e-12)
    if not signed:  # an input known to be non-negative: the negative part is not computed, the same relevance
        leaf = x.clone().requires_grad_(True)
        out = F.linear(leaf, w, b)
        rule.modify(LINEAR, leaf, w, b, out, nonneg=True).backward(g)
        torch.testing.assert_close(leaf * leaf.grad, rx, rtol=1e-12, atol=1e-12)


def test_zplus_falls_back_to_lrp0(gen):
    """Units without a positive contribution (every x_j w_jk <= 0, b_k <= 0) take LRP-0, not zero."""
    x = torch.rand(4, 6, generator=gen, dtype=torch.float64)
    w = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    w[0] = -w[0].abs()  # unit 0: no positive contribution
    b = torch.tensor([-0.5, 0.2, -0.1], dtype=torch.float64)
    g = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    _, out, rx, _ = forward_relevance(rules.ZPlus(), LINEAR, x, w, b, g)
    R = out * g
    assert (rx != 0).any()
    torch.testing.assert_close(rx, ref_rule(rules.ZPlus(), x, w, b, R), rtol=1e-12, atol=1e-12)
    only0 = torch.zeros_like(g)
    only0[:, 0] = g[:, 0]  # all the relevance on the unit without positive contribution: LRP-0 there
    _, out, rx, _ = forward_relevance(rules.ZPlus(), LINEAR, x, w, b, only0)
    torch.testing.assert_close(rx, ref_rule(rules.Epsilon(0.0), x, w, b, out * only0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rule", [rules.Epsilon(0.1), rules.Gamma(0.5), rules.AlphaBeta(2, 1), rules.ZPlus()], ids=repr)
def test_bias_keeps_its_share(rule, gen):
    """The bias's relevance, b * b.grad, is its share under the rule: what the input does not get,
    less what the stabiliser absorbs (for the epsilon rule, sum_n b_k R_nk / stab(z_nk))."""
    x, w, b = data(gen)
    g = torch.randn(x.shape[0], w.shape[0], generator=gen, dtype=torch.float64)
    _, out, rx, rb = forward_relevance(rule, LINEAR, x, w, b, g)
    R = out * g
    if isinstance(rule, rules.Epsilon):
        stab = out + rule.eps * torch.where(out >= 0, 1.0, -1.0).double()
        torch.testing.assert_close(rb, (b * R / stab).sum(0), rtol=1e-12, atol=1e-12)
    elif isinstance(rule, rules.Gamma):
        bg = b + rule.gamma * b.clamp(min=0)
        z = F.linear(x, w + rule.gamma * w.clamp(min=0), bg)
        stab = z + rule.eps * torch.where(z >= 0, 1.0, -1.0).double()
        torch.testing.assert_close(rb, (bg * R / stab).sum(0), rtol=1e-12, atol=1e-12)
    else:  # alpha-beta and z+ without stabiliser: input and bias together carry (alpha - beta) R = R
        unit_has_both = True
        if isinstance(rule, rules.ZPlus):
            unit_has_both = ((F.linear(x.clamp(min=0), w.clamp(min=0)) + F.linear(x.clamp(max=0), w.clamp(max=0))
                              + b.clamp(min=0)) != 0).all()
        assert unit_has_both
        torch.testing.assert_close(rx.sum() + rb.sum(), R.sum(), rtol=1e-10, atol=1e-10)


def test_zbox_with_its_bounds(gen):
    """z^B: x * grad plus the bounds' own terms (leaves that require grad) is the rule's relevance."""
    rule = rules.ZBox()
    x, w, b = data(gen)
    leaf = x.clone().requires_grad_(True)
    low, high = (t.detach().clone().requires_grad_(True) for t in rule.bounds(x))
    out = F.linear(leaf, w, b)
    y = rule.modify(LINEAR, leaf, w, b, out, low=low, high=high)
    assert torch.equal(y.detach(), out.detach())
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    y.backward(g)
    rel = leaf * leaf.grad + low * low.grad + high * high.grad
    R = out.detach() * g
    torch.testing.assert_close(rel, backward_relevance(rule, LINEAR, x, w, b, R), rtol=1e-12, atol=1e-12)
    # from the definition: contributions (x_j - l_j) w+_jk + (x_j - h_j) w-_jk over their sum + eps
    lo, hi = rule.bounds(x)
    c = (x - lo)[:, None, :] * w.clamp(min=0)[None] + (x - hi)[:, None, :] * w.clamp(max=0)[None]
    torch.testing.assert_close(rel, (c * (R / (c.sum(2) + rule.eps))[:, :, None]).sum(1), rtol=1e-12, atol=1e-12)
    # given bounds that the input leaves: refused, naming the bounds
    with pytest.raises(ValueError, match="outside the box"):
        rules.ZBox(low=0.0, high=0.1).bounds(x)


CONVS = [((2, 3, 6, 6), (4, 3, 3, 3), dict(stride=1, padding=1)),
         ((1, 2, 7, 5), (3, 2, 2, 3), dict(stride=2, padding=(1, 0), groups=1)),
         ((2, 4, 5, 5), (4, 2, 3, 3), dict(groups=2, dilation=2, padding=2))]


@pytest.mark.parametrize("rule", RULES, ids=repr)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv_equals_backward_form(rule, case, gen):
    shape, w_shape, kw = CONVS[case]
    m = LinearMap(lambda x, w, b: F.conv2d(x, w, b, **kw))
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64)
    b = torch.randn(w_shape[0], generator=gen, dtype=torch.float64)
    out = m(x, w, b)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    y, out, rx, _ = forward_relevance(rule, m, x, w, b, g)
    assert torch.equal(y, out)
    torch.testing.assert_close(rx, backward_relevance(rule, m, x, w, b, out * g), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rule", [rules.Epsilon(0.0), rules.Epsilon(0.2), rules.ZPlus(), rules.Gamma(0.5)], ids=repr)
def test_map_without_weight(rule, gen):
    """Pooling (fixed non-negative coefficients, ``weight=1.0``): the same relevance as the backward form."""
    m = LinearMap(lambda x: F.avg_pool2d(x, 2), has_weight=False)
    x = torch.randn(2, 3, 6, 4, generator=gen, dtype=torch.float64)
    out = m(x, 1.0, None)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    y, out, rx, _ = forward_relevance(rule, m, x, 1.0, None, g)
    torch.testing.assert_close(rx, backward_relevance(rule, m, x, None, None, out * g), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------- the rules that are not linear maps
def test_epsilon_on_a_sum_of_marked_tensors(gen):
    """z = a + b, both input-dependent: R_a = a R / stab(z)."""
    a = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    z = a + b
    y = modify.epsilon(z, 0.1)
    y.backward(g)
    R = z.detach() * g
    stab = z.detach() + 0.1 * torch.where(z.detach() >= 0, 1.0, -1.0).double()
    torch.testing.assert_close(a * a.grad, a.detach() * R / stab, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b * b.grad, (b.detach() * R / stab).sum(0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [torch.tanh, torch.sigmoid, F.gelu, F.silu, torch.exp, lambda t: 3.0 * t],
                         ids=["tanh", "sigmoid", "gelu", "silu", "exp", "times3"])
def test_identity_passes_relevance_unchanged(fn, gen):
    x = torch.randn(4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    y = fn(x)
    modify.identity(x, y).backward(g)
    torch.testing.assert_close(x * x.grad, y.detach() * g, rtol=1e-12, atol=1e-12)


def test_identity_broadcasts(gen):
    """x broadcast against y: R_x is summed over the broadcast dimension."""
    x = torch.randn(1, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.tanh(x).expand(3, 5) * 1.0
    g = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    modify.identity(x, y).backward(g)
    torch.testing.assert_close(x * x.grad, (y.detach() * g).sum(0, keepdim=True), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [2, 3])
def test_uniform_rule(n, gen):
    factors = [torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    y = factors[0]
    for f in factors[1:]:
        y = y * f
    g = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    modify.uniform(y, n).backward(g)
    for f in factors:
        torch.testing.assert_close(f * f.grad, y.detach() * g / n, rtol=1e-12, atol=1e-12)


def test_held_constant_normalisation(gen):
    """a / b with b held constant: R_a = R; b gets nothing."""
    a = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.rand(4, 1, generator=gen, dtype=torch.float64).add(0.5).requires_grad_(True)
    y = a / modify.held_constant(b)
    g = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    y.backward(g)
    torch.testing.assert_close(a * a.grad, y.detach() * g, rtol=1e-12, atol=1e-12)
    assert b.grad is None


def test_held_constant_detaches_only_what_requires_grad(gen):
    """A tensor that requires no grad is already a constant and comes back as it is (no detach to record); one
    that does comes back detached, sharing its storage."""
    t = torch.randn(3, generator=gen)
    assert modify.held_constant(t) is t
    leaf = t.clone().requires_grad_(True)
    held = modify.held_constant(leaf * 2)
    assert not held.requires_grad and torch.equal(held, t * 2)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_split_by_is_the_proportional_rule(eps, gen):
    """split_by(out, z): out's value to the bit, and R_x = x * W'^T (R / stab(z)) for contributions z = x W'^T
    that differ from out (gamma's weights), summed from explicit contributions; a zero denominator loses its
    share."""
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    w2 = w + 0.5 * w.clamp(min=0)
    w2[1] = 0.0  # a unit whose contributions are all zero: z = 0
    out = x @ w.T
    y = modify.split_by(out, x @ w2.T, eps)
    assert torch.equal(y, out.detach())
    g = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    y.backward(g)
    contributions = x.detach()[:, :, None] * w2.T[None]  # [node, input, unit]
    z = contributions.sum(1)
    d = z + eps * torch.where(z >= 0, 1.0, -1.0).to(z.dtype)
    share = torch.where(d == 0, 0.0, out.detach() * g / d)
    want = (contributions * share[:, None, :]).sum(2)
    torch.testing.assert_close(x * x.grad, want, rtol=1e-12, atol=1e-12)
    if eps == 0.0:  # unit 1's relevance is lost, every other unit's arrives
        torch.testing.assert_close((x * x.grad).sum(), (out.detach() * g)[:, [0, 2]].sum(), rtol=1e-12, atol=1e-12)


def test_blocked_measures_what_reached_it(gen):
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    y, probe = modify.blocked(torch.sort(x * 2.0, dim=1).values)
    g = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    (y * 1.0).backward(g)
    assert x.grad is None
    torch.testing.assert_close((y.detach() * probe.grad).sum(), (y.detach() * g).sum())


def test_share_of_zero_denominator():
    z = torch.tensor([1.0, 2.0, 0.0, -3.0])
    d = torch.tensor([2.0, 0.0, 0.0, -1.0])
    assert modify.share_of(z, d).tolist() == [0.5, 0.0, 0.0, 3.0]


# ------------------------------------------------------------- invariants
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), fin=st.integers(1, 7), fout=st.integers(1, 5), seed=st.integers(0, 2**31 - 1),
       rule=st.sampled_from(RULES), bias=st.booleans(), zeros=st.booleans())
def test_properties(n, fin, fout, seed, rule, bias, zeros):
    """Any shape, with or without a bias, with zero rows and columns in the input: the value is kept to
    the bit and the relevance is the definition's."""
    gen = torch.Generator().manual_seed(seed)
    x, w, b = data(gen, n, fin, fout)
    if zeros:
        x[0] = 0.0
        x[:, -1] = 0.0
    b = b if bias else None
    g = torch.randn(n, fout, generator=gen, dtype=torch.float64)
    y, out, rx, _ = forward_relevance(rule, LINEAR, x, w, b, g)
    assert torch.equal(y, out)
    torch.testing.assert_close(rx, ref_rule(rule, x, w, b, out * g), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------- PyTorch's own backward and compiler
def _all_rules(x, w, b):
    """Each rule applied to its own linear map of x, then summed: one forward to compile."""
    total = 0.0
    for rule in RULES + [rules.ZBox()]:
        out = F.linear(x, w, b)
        total = total + rule.modify(LINEAR, x, w, b, out).sum(1)
    a = torch.tanh(x[:, :3])
    total = total + modify.identity(x[:, :3], a).sum(1) + modify.uniform(x[:, :2] * x[:, 1:3], 2).sum(1)
    return total


def test_only_pytorch_nodes(gen):
    x, w, b = data(gen)
    out = _all_rules(x.requires_grad_(True), w, b)
    assert autograd_nodes(out) and not python_nodes(out)
    # and the check sees a Python Function where there is one
    leaf = x.detach().clone().requires_grad_(True)
    with_function = LinearMapRelevance.apply(leaf, w, b, LINEAR, rules.Epsilon(), "test")
    assert python_nodes(with_function)


def test_compiles_without_graph_break(gen):
    """torch.compile(fullgraph=True) traces every rule's forward (no rule reads data into Python); the
    compiled relevance equals the eager one to float32 rounding."""
    torch._dynamo.reset()
    x, w, b = (t.float() for t in data(gen, 16, 10, 5))
    compiled = torch.compile(_all_rules, fullgraph=True, backend="aot_eager")

    def rel(fn):
        leaf = x.clone().requires_grad_(True)
        fn(leaf, w, b).sum().backward()
        return leaf * leaf.grad

    torch.testing.assert_close(rel(compiled), rel(_all_rules), rtol=1e-5, atol=1e-5)
