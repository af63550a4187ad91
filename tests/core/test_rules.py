"""LRP rules for linear maps: every rule against a reference written from its definition on an
explicit contribution tensor (float64), conservation, the seed's numbers, memory, Captum's LRP,
and the error for each kind of bad input."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lrp_lib.teach import ops
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.teach.ops import LostRelevanceWarning


from rule_references import conv_matrix, ref_rule  # also used by tests/teach/test_residual.py


RULES = [rules.Epsilon(0.0), rules.Epsilon(0.3), rules.Gamma(0.25), rules.Gamma(1.0, eps=0.0),
         rules.AlphaBeta(2, 1), rules.AlphaBeta(1.5, 0.5), rules.ZPlus()]


def relevance(fn, x, seed=1):
    leaf = x.detach().clone().requires_grad_(True)
    out = fn(leaf)
    R = torch.rand(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    out.backward(R)
    return out, R, leaf.grad


# ----------------------------------------------------------------------- rules
@pytest.mark.parametrize("rule", RULES, ids=repr)
@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_definition(rule, bias, gen):
    x, W = torch.randn(5, 12, generator=gen, dtype=torch.float64), torch.randn(4, 12, generator=gen, dtype=torch.float64)
    b = torch.randn(4, generator=gen, dtype=torch.float64) if bias else None
    out, R, Rx = relevance(lambda t: linear_maps.linear(t, W, b, rule=rule), x)
    torch.testing.assert_close(out, F.linear(x, W, b))
    torch.testing.assert_close(Rx, ref_rule(rule, x, W, b, R))


CONVS = {  # name: (d, in_shape (C, *spatial), weight shape, stride, padding, dilation, groups)
    "plain": (2, (2, 5, 5), (3, 2, 3, 3), 1, 1, 1, 1),
    "stride2": (2, (2, 6, 5), (3, 2, 3, 2), 2, 0, 1, 1),
    "pad_dilation": (2, (2, 6, 6), (2, 2, 3, 3), (1, 2), (2, 1), (2, 1), 1),
    "groups": (2, (4, 5, 4), (6, 2, 2, 3), 1, (1, 0), 1, 2),
    "depthwise": (2, (3, 4, 4), (3, 1, 3, 3), 1, 1, 1, 3),
    "conv1d": (1, (3, 9), (2, 3, 4), 2, 1, 2, 1),
    "conv3d": (3, (2, 3, 4, 3), (2, 1, 2, 2, 2), 1, 1, 1, 2),
}


@pytest.mark.parametrize("rule", RULES, ids=repr)
@pytest.mark.parametrize("case", list(CONVS))
def test_conv_matches_definition(case, rule, gen):
    d, in_shape, w_shape, stride, padding, dilation, groups = CONVS[case]
    as_tuple = (lambda v: (v,) * d if isinstance(v, int) else v)
    x = torch.randn((2,) + in_shape, generator=gen, dtype=torch.float64)
    w = torch.randn(w_shape, generator=gen, dtype=torch.float64)
    b = torch.randn(w_shape[0], generator=gen, dtype=torch.float64)
    conv = getattr(linear_maps, f"conv{d}d")
    with warnings.catch_warnings():  # few, random contributions: some z+ or z- are 0 (the reference drops them too)
        warnings.simplefilter("ignore", LostRelevanceWarning)
        out, R, Rx = relevance(lambda t: conv(t, w, b, stride, padding, dilation, groups, rule=rule), x)
    A, out_shape = conv_matrix(in_shape, w, as_tuple(stride), as_tuple(padding), as_tuple(dilation), groups)
    X, n_pos = x.reshape(2, -1), out.shape[2:].numel()
    # the explicit matrix is the convolution torch computes
    torch.testing.assert_close(out.reshape(2, -1), X @ A.T + b.repeat_interleave(n_pos))
    expected = ref_rule(rule, X, A, b.repeat_interleave(n_pos), R.reshape(2, -1))
    torch.testing.assert_close(Rx.reshape(2, -1), expected)


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_avg_pool_matches_definition(rule, gen):
    x = torch.randn(2, 2, 6, 5, generator=gen, dtype=torch.float64)
    with warnings.catch_warnings():  # windows with no input of one sign lose that part (as in the reference)
        warnings.simplefilter("ignore", LostRelevanceWarning)
        out, R, Rx = relevance(lambda t: linear_maps.avg_pool2d(t, (3, 2), stride=(2, 1), padding=(1, 0), rule=rule), x)
    torch.testing.assert_close(out, F.avg_pool2d(x, (3, 2), (2, 1), (1, 0)))
    # a 2-channel depthwise convolution with the constant kernel 1/6 is the same map
    A, _ = conv_matrix((2, 6, 5), torch.full((2, 1, 3, 2), 1 / 6, dtype=torch.float64), (2, 1), (1, 0), (1, 1), 2)
    torch.testing.assert_close(Rx.reshape(2, -1), ref_rule(rule, x.reshape(2, -1), A, None, R.reshape(2, -1)))


@pytest.mark.parametrize("rule", [rules.Epsilon(0.0), rules.ZPlus(), rules.AlphaBeta(2, 1)], ids=repr)
@pytest.mark.filterwarnings("ignore::lrp_lib.core.stabilizer.LostRelevanceWarning")  # few terms: some z+ or z- are 0
def test_generic_linear_map_with_autograd_vjp(rule, gen):
    """A map given only as a function (cumulative sum, non-negative coefficients)."""
    x = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    out, R, Rx = relevance(lambda t: linear_maps.linear_map(t, lambda u: u.cumsum(-1), rule=rule), x)
    torch.testing.assert_close(out, x.cumsum(-1))
    torch.testing.assert_close(Rx, ref_rule(rule, x, torch.ones(5, 5, dtype=torch.float64).tril(), None, R))
    # with a weight: fn(x, w, b) and no vjp given
    W = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    _, R, Rx = relevance(lambda t: linear_maps.linear_map(t, F.linear, W, rule=rule), x)
    torch.testing.assert_close(Rx, ref_rule(rule, x, W, None, R))


def test_linear_epsilon_equals_ops_linear_eps(gen):
    x, W, b = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in [(4, 5), (3, 5), (3,)])
    _, R, mine = relevance(lambda t: linear_maps.linear(t, W, b, rule=rules.Epsilon(0.01)), x)
    _, _, theirs = relevance(lambda t: ops.linear_eps(t, W, b, eps=0.01), x)
    torch.testing.assert_close(mine, theirs)


def test_same_padding_and_unbatched(gen):
    x = torch.randn(2, 3, 6, 6, generator=gen, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, generator=gen, dtype=torch.float64)
    for rule in [rules.Epsilon(0.0), rules.Gamma(0.5)]:
        _, R, same = relevance(lambda t: linear_maps.conv2d(t, w, padding="same", rule=rule), x)
        _, _, one = relevance(lambda t: linear_maps.conv2d(t, w, padding=1, rule=rule), x)
        torch.testing.assert_close(same, one)
        _, R1, single = relevance(lambda t: linear_maps.conv2d(t, w, padding=1, rule=rule), x[0])
        _, _, batched = relevance(lambda t: linear_maps.conv2d(t, w, padding=1, rule=rule), x[:1])
        assert single.shape == (3, 6, 6)
        torch.testing.assert_close(single, batched[0])


# ---------------------------------------------------------------- conservation
def small_cnn(x, convs, lin, rule):
    h = x
    for i, w in enumerate(convs):
        h = ops.relu(linear_maps.conv2d(h, w, padding=1, stride=1 + (i == 1), rule=rule))
    h = linear_maps.avg_pool2d(h, 2, rule="z")  # positive coefficients, x >= 0: no negative part for alpha-beta
    return linear_maps.linear(h.flatten(1), lin, rule=rule)


@pytest.mark.parametrize("rule", [rules.Epsilon(0.0), rules.Gamma(0.25, eps=0.0), rules.AlphaBeta(2, 1),
                                  rules.ZPlus(), "z", "zplus"], ids=str)
def test_bias_free_network_conserves(rule, gen):
    x = torch.rand(3, 2, 8, 8, generator=gen, dtype=torch.float64)  # non-negative, like pixels
    convs = [torch.randn(4, 2, 3, 3, generator=gen, dtype=torch.float64),
             torch.randn(4, 4, 3, 3, generator=gen, dtype=torch.float64)]
    lin = torch.randn(5, 16, generator=gen, dtype=torch.float64)
    x.requires_grad_(True)
    out = small_cnn(x, convs, lin, rule)
    R = out * F.one_hot(out.argmax(1), 5)  # start from the winning logit
    out.backward(R)
    torch.testing.assert_close(x.grad.sum((1, 2, 3)), R.sum(1))
    if rules.get_rule(rule) == rules.ZPlus():
        assert bool((x.grad * R.sum(1).sign()[:, None, None, None] >= 0).all())  # z+ keeps the sign


def test_epsilon_absorbs_relevance():
    x = torch.tensor([[1.0, 1.0]], requires_grad=True)
    out = linear_maps.linear(x, torch.tensor([[1.0, 1.0]]), rule=rules.Epsilon(2.0))  # z = 2: shares 1/(2+2)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, torch.tensor([[0.25, 0.25]]))


# --------------------------------------------------------------- seed numbers
def same_as_printed(t, printed):
    return bool((t.detach().double() - torch.tensor(printed, dtype=torch.float64)).abs().max() <= 0.00005 + 1e-9)


def test_seed_z_rule_example():
    x = torch.tensor([[-1.0, -1.0, 1.0, 1.0]] * 4).view(1, 1, 4, 4).requires_grad_()
    f = linear_maps.conv2d(x, torch.ones(1, 1, 3, 3), None, 1, 1, rule="z")
    assert f.tolist() == [[[[-4.0, -2.0, 2.0, 4.0], [-6.0, -3.0, 3.0, 6.0]] * 1 + [[-6.0, -3.0, 3.0, 6.0], [-4.0, -2.0, 2.0, 4.0]]]]
    f.sum().backward()
    assert same_as_printed(x.grad[0, 0], [[1.25, 0.4167, 0.4167, 1.25], [1.75, 0.5833, 0.5833, 1.75],
                                          [1.75, 0.5833, 0.5833, 1.75], [1.25, 0.4167, 0.4167, 1.25]])
    assert float(x.grad.sum()) == pytest.approx(16.0)


def test_seed_skip_connection_double_counts():
    branch = [[0.6944, 0.9722, 0.9722, 0.6944], [0.9722, 1.3611, 1.3611, 0.9722]]
    branch = branch + branch[::-1]
    for skip in (False, True):
        x = torch.ones(1, 1, 4, 4, requires_grad=True)
        f = linear_maps.conv2d(x, torch.ones(1, 1, 3, 3), None, 1, 1, rule="z")
        (f + x if skip else f).backward(torch.ones(1, 1, 4, 4))
        assert same_as_printed(x.grad[0, 0], [[v + skip for v in row] for row in branch])
    assert float(x.grad.sum()) == pytest.approx(32.0)  # every unit of relevance counted twice
    x = torch.ones(1, 1, 4, 4, requires_grad=True)
    ops.add(linear_maps.conv2d(x, torch.ones(1, 1, 3, 3), None, 1, 1, rule="z"), x).backward(torch.ones(1, 1, 4, 4))
    assert float(x.grad.sum()) == pytest.approx(16.0)
    # corner: 1/5 through the skip; the branch's shares f/(f+1) of the four outputs it feeds, split by z-rule
    assert float(x.grad[0, 0, 0, 0]) == pytest.approx(1 / 5 + (1 / 5 + 2 / 7 + 1 / 10), abs=1e-6)


# ---------------------------------------------------------------------- memory
def test_saves_only_input_weight_and_output(gen):
    """O(input + output): nothing but x, the weight, the bias and the output is kept for backward
    (the output as ``ctx.out``, a detached view of the returned tensor: no copy)."""
    x = torch.randn(8, 3, 10, 10, generator=gen, requires_grad=True)
    w, b = torch.randn(5, 3, 3, 3, generator=gen), torch.randn(5, generator=gen)
    for rule in RULES:
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            out = linear_maps.conv2d(x, w, b, padding=1, rule=rule)
        assert sorted(saved) == sorted([x.numel(), w.numel(), b.numel()])
        assert out.grad_fn.out.data_ptr() == out.data_ptr()


def test_second_backward_equals_first(gen):
    x = torch.randn(2, 2, 5, 5, generator=gen, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, generator=gen)
    for rule in RULES:
        out = linear_maps.conv2d(x, w, padding=1, rule=rule)
        first, = torch.autograd.grad(out, x, torch.ones_like(out), retain_graph=True)
        second, = torch.autograd.grad(out, x, torch.ones_like(out))
        assert torch.equal(first, second)


# ----------------------------------------------------------------- lost relevance
def test_lost_relevance_warns():
    x = torch.tensor([[1.0, -1.0]], requires_grad=True)
    with pytest.warns(LostRelevanceWarning, match="linear: relevance of total magnitude 1"):
        linear_maps.linear(x, torch.ones(1, 2), rule="z").backward(torch.ones(1, 1))
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)  # no negative contribution: beta's share is lost
    with pytest.warns(LostRelevanceWarning):
        linear_maps.linear(x, torch.ones(1, 2), rule="alpha2beta1").backward(torch.ones(1, 1))
    torch.testing.assert_close(x.grad, torch.tensor([[2 / 3, 4 / 3]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = torch.tensor([[1.0, 2.0]], requires_grad=True)
        linear_maps.linear(y, torch.ones(1, 2), rule="zplus").backward(torch.ones(1, 1))  # beta = 0: nothing lost


# ------------------------------------------------------------------- captum
class PlainCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 3, padding=1), nn.Conv2d(6, 6, 3, padding=1, stride=2)
        self.conv3, self.fc = nn.Conv2d(6, 8, 3, padding=1), nn.Linear(8, 10)
        self.relu1, self.relu2, self.relu3 = nn.ReLU(), nn.ReLU(), nn.ReLU()
        self.pool = nn.AvgPool2d(4)

    def forward(self, x):
        h = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.fc(self.pool(self.relu3(self.conv3(h))).flatten(1))

    def lrp(self, x, rule):
        h = x
        for conv in (self.conv1, self.conv2, self.conv3):
            h = ops.relu(linear_maps.conv2d(h, conv.weight, conv.bias, conv.stride, conv.padding, rule=rule))
        return linear_maps.linear(linear_maps.avg_pool2d(h, 4, rule=rule).flatten(1), self.fc.weight, self.fc.bias, rule=rule)


def test_matches_captum_lrp_epsilon():
    """Captum's LRP (epsilon rule, eps=1e-9 in the denominator z + eps*sign(z), the bias inside z,
    starting from R = output[target]) equals lrp_lib's Epsilon(1e-9) to 1e-5 in float64."""
    captum_lrp = pytest.importorskip("captum.attr").LRP
    torch.manual_seed(0)
    model = PlainCNN().double().eval()
    x = torch.rand(6, 1, 8, 8, dtype=torch.float64)
    target = torch.tensor([0, 3, 5, 9, 2, 7])
    expected = captum_lrp(model).attribute(x.clone().requires_grad_(True), target=target).detach()
    leaf = x.clone().requires_grad_(True)
    out = model.lrp(leaf, rules.Epsilon(1e-9))
    torch.testing.assert_close(out, model(x))
    out.backward(out * F.one_hot(target, 10))
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-5, atol=1e-5)
    assert float((leaf.grad - expected).abs().max()) < 1e-10  # in fact equal to rounding
    assert float(expected.abs().sum()) > 0.1  # not trivially zero


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: linear_maps.conv2d(torch.ones(1, 3, 5, 5), torch.ones(2, 2, 3, 3)), ValueError, "3 input channels"),
        (lambda: linear_maps.conv2d(torch.ones(1, 4, 5, 5), torch.ones(3, 2, 3, 3), groups=2), ValueError, "divisible by groups"),
        (lambda: linear_maps.conv2d(torch.ones(1, 2, 5, 5), torch.ones(3, 2, 3)), ValueError, "weight must be 4-D"),
        (lambda: linear_maps.conv2d(torch.ones(5, 5), torch.ones(3, 1, 3, 3)), ValueError, "x must be 4-D"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5), torch.ones(3, 1, 3, 3), torch.ones(2)), ValueError, r"bias must have shape \(3,\)"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5), torch.ones(3, 1, 3, 3), stride=0), ValueError, "stride must be"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5), torch.ones(3, 1, 3, 3), padding=(1, 1, 1)), ValueError, "padding must be"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5), torch.ones(3, 1, 3, 3), padding="full"), ValueError, "padding must be"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5), torch.ones(3, 1, 3, 3), dilation=-1), ValueError, "dilation must be"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5), torch.ones(3, 1, 3, 3), groups=0), ValueError, "groups must be"),
        (lambda: linear_maps.conv2d(torch.ones(1, 1, 5, 5, dtype=torch.long), torch.ones(3, 1, 3, 3)), TypeError, "x must be a floating"),
        (lambda: linear_maps.conv1d(torch.ones(1, 2, 5), torch.ones(3, 2, 3, 3)), ValueError, "weight must be 3-D"),
        (lambda: linear_maps.linear(torch.ones(2, 3), torch.ones(4, 5)), ValueError, "in_features=5"),
        (lambda: linear_maps.linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(3)), ValueError, "bias must have shape"),
        (lambda: linear_maps.linear(torch.ones(2, 3), torch.ones(3)), ValueError, "weight must be 2-D"),
        (lambda: linear_maps.linear(torch.ones(2, 3), torch.ones(4, 3), rule="lrp"), ValueError, "rule 'lrp' is not known"),
        (lambda: linear_maps.linear(torch.ones(2, 3), torch.ones(4, 3), rule=0.1), TypeError, "rule must be"),
        (lambda: linear_maps.avg_pool2d(torch.ones(1, 1, 4, 4), 2, padding=2), ValueError, "at most half"),
        (lambda: linear_maps.avg_pool2d(torch.ones(4, 4), 2), ValueError, "x must be 4-D"),
        (lambda: linear_maps.linear_map(torch.ones(2), "cumsum"), TypeError, "fn must be callable"),
        (lambda: rules.Epsilon(-1e-3), ValueError, "eps must be"),
        (lambda: rules.Gamma(-0.5), ValueError, "gamma must be"),
        (lambda: rules.AlphaBeta(2, 0.5), ValueError, "alpha - beta must be 1"),
        (lambda: rules.AlphaBeta(0.5, -0.5), ValueError, "alpha must be"),
        (lambda: rules.get_rule("alpha3beta1"), ValueError, "alpha - beta must be 1"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_rule_names():
    assert rules.get_rule("epsilon") == rules.Epsilon(1e-6)
    assert rules.get_rule("z") == rules.Epsilon(0.0)
    assert rules.get_rule("gamma") == rules.Gamma(0.25)
    assert rules.get_rule("z+") == rules.get_rule("zplus") == rules.ZPlus()
    assert rules.get_rule("alpha1beta0") == rules.AlphaBeta(1, 0) and vars(rules.ZPlus()) == vars(rules.AlphaBeta(1, 0))
    assert rules.get_rule("alpha2beta1") == rules.AlphaBeta(2, 1)
    assert repr(rules.Gamma(0.5)) == "Gamma(gamma=0.5, eps=1e-06)"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(gen):
    x = torch.rand(2, 3, 7, 7, generator=gen, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, generator=gen, dtype=torch.float64)
    for rule in RULES:
        _, R, cpu = relevance(lambda t: linear_maps.conv2d(t, w, stride=2, padding=1, rule=rule), x)
        leaf = x.cuda().requires_grad_(True)
        linear_maps.conv2d(leaf, w.cuda(), stride=2, padding=1, rule=rule).backward(R.cuda())
        torch.testing.assert_close(leaf.grad.cpu(), cpu)


def test_ops_does_not_import_rules():
    """rules builds on ops, never the other way round (no import cycle)."""
    import subprocess
    import sys
    code = "import sys, lrp_lib.teach.ops; assert 'lrp_lib.core.rules' not in sys.modules, 'ops imported rules'"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert not hasattr(ops, "conv2d")


def test_one_stabiliser_and_no_lost_relevance_when_eps_is_positive():
    z = torch.tensor([2.0, -2.0, 0.0])
    torch.testing.assert_close(ops.stabilize(z, 0.5), torch.tensor([2.5, -2.5, 0.5]))
    assert ops.stabilize(z, 0.0) is z
    x = torch.tensor([[1.0, -1.0]], requires_grad=True)  # z = 0 exactly
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # eps > 0: nothing is lost, so no warning
        linear_maps.linear(x, torch.ones(1, 2), rule=rules.Epsilon(0.1)).backward(torch.ones(1, 1))
    torch.testing.assert_close(x.grad, torch.tensor([[10.0, -10.0]]))


def test_rule_names_normalise():
    assert rules.get_rule("alpha_beta") == rules.AlphaBeta(2.0, 1.0)
    assert rules.get_rule("Z+") == rules.ZPlus()
    assert rules.get_rule("alpha-2-beta-1") == rules.AlphaBeta(2.0, 1.0)


# ----------------------------------------------------------------------- z^B
def ref_zbox(x, W, low, high, R):
    """z^B from its definition, one (sample, input, output) triple at a time."""
    n, d = x.shape
    k = W.shape[0]
    out = torch.zeros_like(x)
    for s in range(n):
        for o in range(k):
            terms = [float(x[s, j] * W[o, j] - low[s, j] * max(float(W[o, j]), 0.0) -
                           high[s, j] * min(float(W[o, j]), 0.0)) for j in range(d)]
            z = sum(terms) + 1e-6
            for j in range(d):
                out[s, j] += terms[j] / z * R[s, o]
    return out


@pytest.mark.parametrize("bias", [False, True])
def test_zbox_matches_definition_with_the_data_range_as_box(bias, gen):
    x = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    W = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    b = torch.randn(3, generator=gen, dtype=torch.float64) if bias else None
    out, R, Rx = relevance(lambda t: linear_maps.linear(t, W, b, rule=rules.ZBox()), x)
    low = torch.minimum(x.amin(0, keepdim=True), torch.zeros(())).expand_as(x)
    high = torch.maximum(x.amax(0, keepdim=True), torch.zeros(())).expand_as(x)
    torch.testing.assert_close(Rx, ref_zbox(x, W, low, high, R))
    assert float(Rx.sum()) == pytest.approx(float(R.sum()), rel=1e-5)  # the bias takes nothing: all reaches x


def test_zbox_with_given_bounds_and_constant_inputs(gen):
    x = torch.ones(4, 3, dtype=torch.float64)  # constant features: the box [0, 1] (0 included), never a point
    W = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    _, R, Rx = relevance(lambda t: linear_maps.linear(t, W, None, rule=rules.ZBox()), x)
    torch.testing.assert_close(Rx, ref_zbox(x, W, torch.zeros_like(x), torch.ones_like(x), R))
    x = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    _, R, Rx = relevance(lambda t: linear_maps.linear(t, W, None, rule=rules.ZBox(-1.0, 2.0)), x)
    torch.testing.assert_close(Rx, ref_zbox(x, W, torch.full_like(x, -1.0), torch.full_like(x, 2.0), R))
    assert rules.get_rule("zbox") == rules.ZBox()


def test_zbox_refuses_inputs_outside_its_box_and_bad_bounds():
    with pytest.raises(ValueError, match="low must not exceed high"):
        rules.ZBox(1.0, 0.0)
    x = torch.full((2, 3), 3.0, requires_grad=True)
    y = linear_maps.linear(x, torch.ones(1, 3), None, rule=rules.ZBox(0.0, 1.0))
    with pytest.raises(ValueError, match="outside the box"):
        y.backward(torch.ones_like(y))


def test_zplus_falls_back_to_lrp0_for_a_unit_without_positive_contributions():
    """A unit whose every contribution is negative (no positive bias) gets LRP-0 instead of losing
    its relevance; the other unit keeps z+."""
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    W = torch.tensor([[-1.0, -0.5], [1.0, -1.0]], dtype=torch.float64)  # unit 0: -1 - 1 = -2; unit 1: 1 - 2
    R = torch.tensor([[3.0, 5.0]], dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is lost, so nothing warns
        linear_maps.linear(leaf, W, None, rule=rules.ZPlus()).backward(R)
    unit0 = torch.tensor([-1.0, -1.0]) / -2.0 * 3.0  # LRP-0: x_j w_0j / z_0 * R_0
    unit1 = torch.tensor([1.0, 0.0]) / 1.0 * 5.0     # z+: only x_0 w_10 > 0
    torch.testing.assert_close(leaf.grad[0], (unit0 + unit1).double())
    assert float(leaf.grad.sum()) == pytest.approx(8.0)
