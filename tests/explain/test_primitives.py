"""Each relevance primitive against a slow reference written from its rule's definition."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lrp_lib.explain import primitives as P
from lrp_lib.core.rules import Epsilon, Gamma, LinearMap
from lrp_lib.core.stabilizer import relevance_share


def rand(*shape, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g, dtype=torch.float64)
    return t if positive else t * 2 - 1


def leaf(t):
    return t.clone().requires_grad_(True)


def test_sum_splits_in_proportion_and_a_constant_keeps_its_share():
    a, b, R = rand(4, 3, seed=1), rand(3, seed=2), rand(4, 3, seed=3)
    la, tally = leaf(a), P.Tally()
    z = P.AddRelevance.apply(la, b, (True, False), 0.0, "add", tally)
    (ra,) = torch.autograd.grad(z, la, R)
    zz = a + b
    ref_a = torch.tensor([[a[i, j] / zz[i, j] * R[i, j] for j in range(3)] for i in range(4)], dtype=torch.float64)
    ref_b = sum(b[j] / zz[i, j] * R[i, j] for i in range(4) for j in range(3))
    torch.testing.assert_close(ra, ref_a)
    assert tally.total(tally.absorbed) == pytest.approx(float(ref_b))
    assert float(ra.sum()) + tally.total(tally.absorbed) == pytest.approx(float(R.sum()))


def test_sum_of_two_marked_terms_with_broadcasting():
    a, b, R = rand(4, 3, seed=4), rand(1, 3, seed=5), rand(4, 3, seed=6)
    la, lb = leaf(a), leaf(b)
    z = P.AddRelevance.apply(la, lb, (True, True), 0.0, "add", None)
    ra, rb = torch.autograd.grad(z, (la, lb), R)
    zz = a + b
    torch.testing.assert_close(ra, a / zz * R)
    torch.testing.assert_close(rb, (b / zz * R).sum(0, keepdim=True))
    assert float(ra.sum() + rb.sum()) == pytest.approx(float(R.sum()))


def test_linear_relevance_is_the_epsilon_rule_of_the_map():
    """scatter_add of rows into 3 nodes, with epsilon: R_j = x_j / (z_i + eps sign z_i) R_i."""
    x, index, R, eps = rand(6, 2, seed=7), torch.tensor([0, 0, 1, 2, 2, 2]), rand(3, 2, seed=8), 0.05
    lx, tally = leaf(x), P.Tally()
    idx = index.view(-1, 1).expand(6, 2)
    out = P.linear_relevance(lx, lambda t: torch.zeros(3, 2, dtype=t.dtype).scatter_add(0, idx, t),
                             lambda v: v.gather(0, idx), eps, "scatter_add", tally)
    (rx,) = torch.autograd.grad(out, lx, R)
    z = torch.zeros(3, 2, dtype=torch.float64).index_add_(0, index, x)
    ref = torch.stack([x[j] / (z[index[j]] + eps * z[index[j]].sign()) * R[index[j]] for j in range(6)])
    torch.testing.assert_close(rx, ref)
    assert tally.total(tally.absorbed) == pytest.approx(float(R.sum() - ref.sum()))
    # without a vjp, autograd computes the same
    out2 = P.linear_relevance(lx, lambda t: torch.zeros(3, 2, dtype=t.dtype).scatter_add(0, idx, t), None, eps,
                              "scatter_add", None)
    torch.testing.assert_close(torch.autograd.grad(out2, lx, R)[0], ref)


def test_weight_relevance_applies_the_rule():
    x, W, R = rand(5, 4, seed=9, positive=True), rand(3, 4, seed=10), rand(5, 3, seed=11)
    m = LinearMap(torch.nn.functional.linear, lambda v, x_, w: v @ w)
    lx = leaf(x)
    out = P.LinearMapRelevance.apply(lx, W, None, m, Gamma(0.5, eps=0.0), "linear", None, True, False)
    (rx,) = torch.autograd.grad(out, lx, R)
    Wg = W + 0.5 * W.clamp(min=0)
    zg = x @ Wg.T
    ref = torch.stack([torch.stack([sum(x[n, j] * Wg[k, j] / zg[n, k] * R[n, k] for k in range(3)) for j in range(4)])
                       for n in range(5)])
    torch.testing.assert_close(rx, ref)


@pytest.mark.parametrize("weights", [(0.5, 0.5), (1.0, 0.0), (0.0, 1.0)])
def test_product_uniform_and_cp(weights):
    a, b, R = rand(4, 3, seed=12), rand(4, 1, seed=13), rand(4, 3, seed=14)
    la, lb = leaf(a), leaf(b)
    z = P.ProductRelevance.apply(la, lb, weights)
    torch.testing.assert_close(z, a * b)
    ra, rb = torch.autograd.grad(z, (la, lb), R)
    torch.testing.assert_close(ra, weights[0] * R)
    torch.testing.assert_close(rb, weights[1] * R.sum(1, keepdim=True))


def test_normalise_holds_the_denominator_constant():
    a, b, R = rand(4, 3, seed=15), rand(4, 1, seed=16, positive=True) + 1, rand(4, 3, seed=17)
    la, lb = leaf(a), leaf(b)
    z = P.NormaliseRelevance.apply(la, lb)
    ra, rb = torch.autograd.grad(z, (la, lb), R)
    torch.testing.assert_close(ra, R)
    assert float(rb.abs().sum()) == 0.0


def test_bilinear_splits_each_product_term_uniformly():
    A, B, R = rand(3, 4, seed=18), rand(4, 2, seed=19), rand(3, 2, seed=20)
    la, lb = leaf(A), leaf(B)
    z = P.BilinearRelevance.apply(la, lb, (0.5, 0.5), 0.0, "matmul", None)
    ra, rb = torch.autograd.grad(z, (la, lb), R)
    Z = A @ B
    ref_a = torch.zeros_like(A)
    ref_b = torch.zeros_like(B)
    for i in range(3):
        for k in range(4):
            for j in range(2):
                term = A[i, k] * B[k, j] / Z[i, j] * R[i, j]
                ref_a[i, k] += term / 2
                ref_b[k, j] += term / 2
    torch.testing.assert_close(ra, ref_a)
    torch.testing.assert_close(rb, ref_b)
    assert float(ra.sum() + rb.sum()) == pytest.approx(float(R.sum()))


def test_softmax_rule_of_attnlrp():
    x, R = rand(2, 5, seed=21), rand(2, 5, seed=22)
    lx = leaf(x)
    s = P.SoftmaxRelevance.apply(lx, -1, "softmax", None)
    (rx,) = torch.autograd.grad(s, lx, R)
    sm = torch.softmax(x, -1)
    ref = torch.stack([torch.stack([x[n, i] * (R[n, i] - sm[n, i] * R[n].sum()) for i in range(5)]) for n in range(2)])
    torch.testing.assert_close(rx, ref)


def test_norm_affine_passes_through_the_normalisation():
    x, R = rand(4, 6, seed=23), rand(4, 6, seed=24)
    gamma, beta = rand(6, seed=25), rand(6, seed=26)
    lx, tally = leaf(x), P.Tally()
    fn = lambda t: torch.nn.functional.layer_norm(t, (6,), gamma, beta)  # noqa: E731
    y = P.NormAffineRelevance.apply(lx, fn, beta, 0.0, "layer_norm", tally)
    (rx,) = torch.autograd.grad(y, lx, R)
    yy = fn(x)
    torch.testing.assert_close(rx, (yy - beta) / yy * R)
    assert float(rx.sum()) + tally.total(tally.absorbed) == pytest.approx(float(R.sum()))


def test_blocked_passes_nothing_and_records_the_amount():
    x = leaf(rand(3, seed=27))
    tally = P.Tally()
    with torch.no_grad():
        y = torch.special.i0(x)
    out = P.BlockedRelevance.apply("i0", tally, 1, y, x)
    (rx,) = torch.autograd.grad(out, x, torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    assert float(rx.abs().sum()) == 0.0
    assert tally.read(tally.blocked) == {"i0": pytest.approx(3.5)}


def test_edge_messages_record_each_edges_relevance():
    msgs = leaf(rand(4, 2, seed=28))
    record = torch.zeros(3, dtype=torch.float64)
    out = P.EdgeMessageRelevance.apply(msgs, torch.tensor([2, -1, 0, 2]), record, 0)
    R = rand(4, 2, seed=29)
    (rm,) = torch.autograd.grad(out, msgs, R)
    torch.testing.assert_close(rm, R)
    torch.testing.assert_close(record, torch.stack([R[2].sum(), torch.tensor(0.0, dtype=torch.float64),
                                                    R[0].sum() + R[3].sum()]))


def test_tally_sums_each_label_in_float64_in_the_order_the_amounts_came():
    """The amounts are converted and summed only when a table is read; the sums are those of adding
    each amount in float64 as it comes (float32 and float64 amounts mixed, labels repeated), the
    tables can be swapped out and back (as the weighted bookkeeping backward does) and a table read
    twice does not count an amount twice."""
    g = torch.Generator().manual_seed(3)
    amounts = [torch.randn((), generator=g) * 10 ** int(torch.randint(-6, 6, (), generator=g)) for _ in range(40)]
    amounts[7] = amounts[7].double()
    labels = [f"op{i % 3}" for i in range(40)]
    tally = P.Tally()
    reference: dict = {}
    for label, a in zip(labels, amounts):
        tally.absorb(label, a.requires_grad_() if a.dtype == torch.float32 and label == "op1" else a)
        previous = reference.get(label)
        reference[label] = a.detach().double() if previous is None else previous + a.detach().double()
    tally.block("b", torch.tensor(2.5))
    assert tally.absorbed == {k: v.item() for k, v in reference.items()}  # exact, not approximately
    assert tally.absorbed == {k: v.item() for k, v in reference.items()}
    assert tally.total(tally.absorbed) == float(sum(reference.values()))
    kept = tally.absorbed
    tally.absorb("op0", torch.tensor(1.0))  # pending while the tables are swapped: into the old table
    tally.absorbed = {}
    tally.absorb("other", torch.tensor(4.0))
    assert tally.absorbed == {"other": 4.0}
    tally.absorbed = kept
    assert tally.absorbed["op0"] == (reference["op0"] + 1.0).item()
    assert tally.read(tally.blocked) == {"b": 2.5}


@settings(deadline=None)
@given(st.lists(st.lists(st.floats(width=32), min_size=1, max_size=6), min_size=1, max_size=4),
       st.sampled_from([torch.float32, torch.float64]))
def test_a_difference_left_to_the_tally_is_the_one_the_dtype_computes(rows, dtype):
    """``absorb_rows(label, None, (a,), (b, c))`` gives ``a.sum() - b.sum() - c.sum()`` computed in
    the tensors' dtype, bit for bit: float32 overflow to infinity, NaN and cancellation included."""
    tensors = [torch.tensor(r, dtype=dtype) for r in rows]
    tally = P.Tally()
    tally.absorb_rows("op", None, (tensors[0],), tensors[1:])
    want = tensors[0].sum()
    for t in tensors[1:]:
        want = want - t.sum()
    got, want = tally.absorbed["op"], float(want.double())
    assert got == want or (math.isnan(got) and math.isnan(want))


def test_the_tally_sums_a_tensor_once_and_again_after_a_change_in_place():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([0.25, 0.5])
    tally = P.Tally()
    tally.absorb_rows("first", None, (a,), (b,))
    tally.absorb_rows("second", None, (b,), ())  # b's sum is taken once
    b.mul_(4)  # a new version: summed again
    tally.absorb_rows("third", None, (b,), ())
    assert tally.absorbed == {"first": 2.25, "second": 0.75, "third": 3.0}
    assert len(tally._sums) == 0  # read: the sums are forgotten with the tensors


def test_unchecked_share_stabilises_with_the_sign_and_drops_zero_outputs():
    """The primitives' division: R / (z + eps sign z), sign(0) = +1; with eps = 0, 0 where z = 0
    (no warning: the explainer accounts for it at the end)."""
    z, R = torch.tensor([2.0, -2.0, 0.0]), torch.tensor([1.0, 1.0, 1.0])
    torch.testing.assert_close(relevance_share("t", R, z, eps=0.5, check=False),
                               torch.tensor([1 / 2.5, 1 / -2.5, 1 / 0.5]))
    torch.testing.assert_close(relevance_share("t", R, z, check=False), torch.tensor([0.5, -0.5, 0.0]))
    assert Epsilon(0.5).eps == 0.5


def test_linear_relevance_without_the_constant_splits_over_jx_alone():
    """keep_constant=False: a buffer scattered into takes no share, R_j = x_j / (J x)_i R_i."""
    x, index, R = rand(4, 2, seed=40, positive=True), torch.tensor([0, 0, 1, 1]), rand(2, 2, seed=41)
    base, idx = torch.full((2, 2), 3.0, dtype=torch.float64), index.view(-1, 1).expand(4, 2)
    lx = leaf(x)
    out = P.linear_relevance(lx, lambda t: base.scatter_add(0, idx, t), None, 0.0, "scatter_add", None, False)
    (rx,) = torch.autograd.grad(out, lx, R)
    jx = torch.zeros(2, 2, dtype=torch.float64).index_add_(0, index, x)
    torch.testing.assert_close(rx, torch.stack([x[j] / jx[index[j]] * R[index[j]] for j in range(4)]))


def test_softmax_rule_gives_masked_logits_nothing_and_stays_finite():
    """A logit masked with -inf (attention masks) has weight 0: it gets 0, not -inf * 0 = nan; the
    others get the rule of the softmax over the unmasked logits alone."""
    x, R = rand(2, 5, seed=31), rand(2, 5, seed=32)
    x[0, 1] = x[1, 3] = x[1, 4] = float("-inf")
    keep = torch.isfinite(x)
    R = R.masked_fill(~keep, 0.0)  # what a CP or uniform product passes back for weight 0
    lx = leaf(x)
    tally = P.Tally()
    s = P.SoftmaxRelevance.apply(lx, -1, "softmax", tally)
    (rx,) = torch.autograd.grad(s, lx, R)
    assert torch.isfinite(rx).all() and (rx[~keep] == 0).all()
    for n in range(2):
        xs, rs = x[n][keep[n]], R[n][keep[n]]
        sm = torch.softmax(xs, -1)
        torch.testing.assert_close(rx[n][keep[n]], xs * (rs - sm * rs.sum()))
    assert all(math.isfinite(v) for v in tally.absorbed.values())


def test_join_passes_slices_and_a_constant_keeps_its_share():
    a, c, b, R = rand(3, 2, seed=33), rand(3, 4, seed=34), rand(3, 1, seed=35), rand(3, 7, seed=36)
    la, lb = leaf(a), leaf(b)
    tally = P.Tally()
    out = P.JoinRelevance.apply(1, (True, False, True), "cat", tally, la, c, lb)
    torch.testing.assert_close(out, torch.cat([a, c, b], 1))
    ra, rb = torch.autograd.grad(out, (la, lb), R)
    torch.testing.assert_close(ra, R[:, :2])
    torch.testing.assert_close(rb, R[:, 6:])
    assert tally.total(tally.absorbed) == pytest.approx(float(R[:, 2:6].sum()), rel=1e-12)
    assert float(ra.sum() + rb.sum()) + tally.total(tally.absorbed) == pytest.approx(float(R.sum()), rel=1e-12)


def test_uniform_product_gives_each_factor_an_equal_share_and_empty_groups_keep_theirs():
    """scatter (prod) of 5 rows into 4 groups, one empty: each factor gets R_group / n_group (a loop
    over the rows from the rule's definition), the empty group's relevance is tallied."""
    x, R = rand(5, 3, seed=41), rand(4, 3, seed=42)
    index = torch.tensor([0, 0, 1, 3, 3]).view(-1, 1).expand(5, 3)
    ones = torch.ones(4, 3, dtype=torch.float64)
    counts = torch.zeros(4, 3, dtype=torch.long).scatter_add(0, index, torch.ones_like(index))
    lx, tally = leaf(x), P.Tally()
    out = P.UniformProductRelevance.apply(lx, lambda s: ones.scatter_reduce(0, index, s, "prod"), counts,
                                          lambda t: t.gather(0, index), "empty", tally)
    torch.testing.assert_close(out, ones.scatter_reduce(0, index, x, "prod"))
    (rx,) = torch.autograd.grad(out, lx, R)
    n = {0: 2, 1: 1, 3: 2}
    ref = torch.stack([R[g] / n[g] for g in (0, 0, 1, 3, 3)])
    torch.testing.assert_close(rx, ref)
    assert tally.total(tally.absorbed) == pytest.approx(float(R[2].sum()), rel=1e-12)
    assert float(rx.sum()) + tally.total(tally.absorbed) == pytest.approx(float(R.sum()), rel=1e-12)


def test_linear_map_relevance_without_the_bias_share_and_with_its_tally():
    """keep_bias=False: the bias takes no share, R_j = sum_k x_j w_kj / (x w)_k R_k (epsilon 0);
    keep_bias=True: it keeps b_k / z_k R_k, which the tally counts."""
    x, W, b, R = rand(4, 3, seed=50), rand(2, 3, seed=51), rand(2, seed=52), rand(4, 2, seed=53)
    m = LinearMap(torch.nn.functional.linear, lambda v, x_, w: v @ w)
    for keep, z in ((False, x @ W.T), (True, x @ W.T + b)):
        lx, tally = leaf(x), P.Tally()
        out = P.LinearMapRelevance.apply(lx, W, b, m, Epsilon(0.0), "linear", tally, keep, False)
        torch.testing.assert_close(out, x @ W.T + b)
        (rx,) = torch.autograd.grad(out, lx, R)
        ref = torch.tensor([[sum(float(x[n, j] * W[k, j] / z[n, k] * R[n, k]) for k in range(2)) for j in range(3)]
                            for n in range(4)], dtype=torch.float64)
        torch.testing.assert_close(rx, ref)
        assert tally.total(tally.absorbed) == pytest.approx(float(R.sum() - ref.sum()))
