"""Properties of lrp_lib.teach.ops and lrp_lib.core.rules over generated networks built from the relevance
ops (linear maps, biases by ops.add, ReLU, copies by index_select / cat / repeat_tensor, sum,
mean and max scatters), in float32 and float64.  Tolerances relative to the explanation's size:
1e-9 in float64, 1e-4 in float32.
"""
import warnings
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.utils import scatter as pyg_scatter

from lrp_lib.teach import ops
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.core.rules import Epsilon, Gamma
from property_strategies import DTYPES, TOL, scale

dtypes = st.sampled_from(list(DTYPES.values()))


@dataclass(frozen=True)
class OpsNet:
    rows: int
    features: int
    hidden: int
    groups: int
    copies: tuple       # rows gathered by index_select (repeats allowed, rows may be left out)
    repeats: tuple      # repeat_tensor counts, one per row (0 drops the row)
    segment: tuple      # group of each row of cat([copies, repeats]) (groups may stay empty)
    aggregation: str
    bias: bool
    seed: int

    def tensors(self, dtype):
        g = torch.Generator().manual_seed(self.seed)

        def r(*shape):
            return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

        return dict(x=r(self.rows, self.features), w1=r(self.hidden, self.features), b1=r(self.hidden),
                    w2=r(2, self.hidden), b2=r(2))

    def forward(self, t, relevant: bool, eps: float = 0.0):
        """The network with relevance ops (``relevant``) or with plain torch / PyG operations."""
        copies, repeats = torch.tensor(self.copies, dtype=torch.long), torch.tensor(self.repeats, dtype=torch.long)
        segment = torch.tensor(self.segment, dtype=torch.long)
        if relevant:
            h = ops.linear_eps(t["x"], t["w1"], None, eps)
            h = ops.relu(ops.add(h, t["b1"]) if self.bias else h)
            h = ops.cat([ops.index_select(h, 0, copies), ops.repeat_tensor(h, repeats)], 0)
            if self.aggregation == "sum":
                g = ops.scatter_add(h, segment, 0, self.groups)
            elif self.aggregation == "mean":
                g = ops.scatter_mean(h, segment, 0, self.groups)
            else:
                g = ops.scatter_max(h, segment, 0, self.groups)[0]
            y = ops.linear_eps(g, t["w2"], None, eps)
            return ops.add(y, t["b2"]) if self.bias else y
        h = F.linear(t["x"], t["w1"], t["b1"] if self.bias else None).relu()
        h = torch.cat([h.index_select(0, copies), h.repeat_interleave(repeats, 0)], 0)
        g = pyg_scatter(h, segment, 0, self.groups, reduce=self.aggregation)
        return F.linear(g, t["w2"], t["b2"] if self.bias else None)


@st.composite
def ops_nets(draw, bias=None):
    rows = draw(st.integers(1, 6))
    copies = draw(st.lists(st.integers(0, rows - 1), max_size=8))
    repeats = draw(st.lists(st.integers(0, 2), min_size=rows, max_size=rows))
    groups = draw(st.integers(1, 3))
    segment = draw(st.lists(st.integers(0, groups - 1), min_size=len(copies) + sum(repeats),
                            max_size=len(copies) + sum(repeats)))
    return OpsNet(rows, draw(st.integers(1, 4)), draw(st.integers(1, 4)), groups, tuple(copies),
                  tuple(repeats), tuple(segment), draw(st.sampled_from(["sum", "mean", "max"])),
                  draw(st.booleans()) if bias is None else bias, draw(st.integers(0, 2**31 - 1)))


def leaves(tensors):
    return {k: v.clone().requires_grad_(True) for k, v in tensors.items()}


def close(actual, expected, tol):
    gap = (actual - expected).abs()
    worst = float(gap.max()) if gap.numel() else 0.0
    assert worst <= tol, f"max |difference| {worst:.3g} > tolerance {tol:.3g}\nactual {actual}\nexpected {expected}"


def grad(t):
    return t.grad if t.grad is not None else torch.zeros_like(t)


# ------------------------------------------------------------------ conservation
@given(net=ops_nets(), dtype=dtypes)
def test_lrp0_conserves_the_output_with_bias_relevance(net, dtype):
    """With LRP-0: input relevance + the relevance the biases receive (ops.add gives a bias its
    share when it requires grad) = the sum of the outputs; without biases the inputs alone."""
    t = leaves(net.tensors(dtype))
    y = net.forward(t, relevant=True)
    y.backward(y.detach())
    total = grad(t["x"]).sum() + (grad(t["b1"]).sum() + grad(t["b2"]).sum() if net.bias else 0)
    size = scale(grad(t["x"]), grad(t["b1"]), grad(t["b2"]), y)
    close(total, y.detach().sum(), TOL[dtype] * size)
    if not net.bias:
        assert t["b1"].grad is None and t["b2"].grad is None


# ------------------------------------------------------------------ LRP-0 = x * grad
@given(net=ops_nets(bias=False), dtype=dtypes)
def test_lrp0_equals_input_times_gradient_without_biases(net, dtype):
    """Against plain torch / PyG operations (torch_geometric.utils.scatter): the bias-free ReLU
    network is positively homogeneous, so LRP-0 = x * df/dx."""
    lrp, plain = leaves(net.tensors(dtype)), leaves(net.tensors(dtype))
    y = net.forward(lrp, relevant=True)
    y.backward(y.detach())
    net.forward(plain, relevant=False).sum().backward()
    expected = plain["x"].detach() * grad(plain["x"])
    close(grad(lrp["x"]), expected, TOL[dtype] * scale(expected, y))


@given(channels=st.integers(1, 3), out=st.integers(1, 3), size=st.integers(3, 6), kernel=st.integers(1, 3),
       stride=st.integers(1, 2), padding=st.integers(0, 1), seed=st.integers(0, 2**31 - 1), dtype=dtypes)
def test_lrp0_of_a_bias_free_convolution_is_input_times_gradient(channels, out, size, kernel, stride, padding,
                                                                  seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, channels, size, size, generator=g, dtype=torch.float64).to(dtype)
    w = torch.randn(out, channels, kernel, kernel, generator=g, dtype=torch.float64).to(dtype)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    z = linear_maps.conv2d(a, w, None, stride=stride, padding=padding, rule=Epsilon(0.0))
    z.backward(z.detach())
    F.conv2d(b, w, None, stride=stride, padding=padding).sum().backward()
    close(a.grad, x * b.grad, TOL[dtype] * scale(a.grad, z))


# ------------------------------------------------------------------ rule limits
def linear_case(draw_seed, rows, fin, fout, bias, dtype):
    """(x >= 0, weight, bias or None, relevance of the outputs): the relevance is the output
    times a random factor, so an output equal to 0 receives none (as from a layer above)."""
    g = torch.Generator().manual_seed(draw_seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)  # noqa: E731
    x, w, b, factor = r(rows, fin).relu(), r(fout, fin), r(fout), r(rows, fout)
    b = b if bias else None
    return x, w, b, F.linear(x, w, b) * factor


def linear_relevance(x, w, b, rel, rule):
    leaf = x.clone().requires_grad_(True)
    linear_maps.linear(leaf, w, b, rule=rule).backward(rel)
    return leaf.grad


@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 5), fin=st.integers(1, 5), fout=st.integers(1, 5),
       bias=st.booleans(), dtype=dtypes)
def test_gamma_zero_is_epsilon_on_a_linear_map(seed, rows, fin, fout, bias, dtype):
    x, w, b, rel = linear_case(seed, rows, fin, fout, bias, dtype)
    for gamma, epsilon in ((Gamma(0.0, eps=0.0), Epsilon(0.0)), (Gamma(0.0), Epsilon())):
        expected = linear_relevance(x, w, b, rel, epsilon)
        close(linear_relevance(x, w, b, rel, gamma), expected, TOL[dtype] * scale(expected, rel))


@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 5), fin=st.integers(1, 5), fout=st.integers(1, 5),
       bias=st.booleans(), eps=st.sampled_from([0.0, 1e-6, 0.01, 1.0]), dtype=dtypes)
def test_linear_eps_and_rules_epsilon_are_the_same_rule(seed, rows, fin, fout, bias, eps, dtype):
    """ops.linear_eps(eps) and linear_maps.linear(rule=Epsilon(eps)) are two routes to one rule."""
    x, w, b, rel = linear_case(seed, rows, fin, fout, bias, dtype)
    leaf = x.clone().requires_grad_(True)
    ops.linear_eps(leaf, w, b, eps).backward(rel)
    expected = linear_relevance(x, w, b, rel, Epsilon(eps))
    close(leaf.grad, expected, TOL[dtype] * scale(expected, rel))


@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 5), fin=st.integers(1, 5), fout=st.integers(1, 5),
       bias=st.booleans())
def test_epsilon_tends_to_lrp0_on_a_linear_map(seed, rows, fin, fout, bias):
    """Float64: Epsilon(eps) -> Epsilon(0) to first order in eps (the bias keeps its share)."""
    x, w, b, _ = linear_case(seed, rows, fin, fout, bias, torch.float64)
    rel = F.linear(x, w, b)  # R = z, as when the map is the explained output
    zero = linear_relevance(x, w, b, rel, Epsilon(0.0))
    size = scale(zero, rel)
    gaps = {eps: float((linear_relevance(x, w, b, rel, Epsilon(eps)) - zero).abs().max()) for eps in (1e-8, 1e-12)}
    assert gaps[1e-12] <= 1e-8 * size, gaps
    assert gaps[1e-12] <= 1e-3 * gaps[1e-8] + 1e-12 * size, gaps


# ------------------------------------------------------------------ bad input
def finite_or_raises(call):
    """``call()`` raises, or returns a relevance that is finite (warnings recorded, not raised)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            rel = call()
        except Exception:  # noqa: BLE001 -- an error of any kind is not a silent NaN
            return
    assert bool(torch.isfinite(rel).all()), f"relevance is not finite: {rel}"


@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 4), fin=st.integers(1, 4), fout=st.integers(1, 4),
       bias=st.booleans(), eps=st.sampled_from([float("nan"), float("inf"), -1.0, -1e-9]), dtype=dtypes)
def test_an_invalid_epsilon_never_gives_a_silent_nan(seed, rows, fin, fout, bias, eps, dtype):
    """ops.linear_eps and rules.Epsilon with eps NaN, Inf or negative: an error, or finite."""
    x, w, b, rel = linear_case(seed, rows, fin, fout, bias, dtype)

    def by_ops():
        leaf = x.clone().requires_grad_(True)
        ops.linear_eps(leaf, w, b, eps).backward(rel)
        return leaf.grad

    finite_or_raises(by_ops)
    finite_or_raises(lambda: linear_relevance(x, w, b, rel, Epsilon(eps)))


@given(net=ops_nets(), bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]), data=st.data(),
       dtype=dtypes)
def test_a_bad_input_to_the_ops_never_gives_a_silent_nan(net, bad, data, dtype):
    """NaN or Inf in the input of a network of relevance ops: an error, or a finite relevance."""
    t = leaves(net.tensors(dtype))
    with torch.no_grad():
        t["x"].view(-1)[data.draw(st.integers(0, t["x"].numel() - 1), label="entry")] = bad

    def run():
        y = net.forward(t, relevant=True)
        y.backward(y.detach())
        return grad(t["x"])

    finite_or_raises(run)
