"""Relevance ops: slow references from each rule's definition, conservation, repeatability,
the seed's printed numbers, and the error for each kind of bad input."""
import itertools
import warnings

import pytest
import torch

from lrp_lib.teach import ops
from lrp_lib.teach.ops import LostRelevanceWarning


def relevance(fn, inputs, rel_out=None, seed=1):
    """Run ``fn`` on leaf copies of ``inputs``, backpropagate ``rel_out`` (random by default)."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*leaves)
    if isinstance(out, tuple):
        out = out[0]
    if rel_out is None:
        g = torch.Generator().manual_seed(seed)
        rel_out = torch.rand(out.shape, generator=g, dtype=out.dtype).to(out.device)
    out.backward(rel_out)
    return out, rel_out, [t.grad for t in leaves if t.requires_grad]


def proportional_split(contributions, rel_out):
    """R_i = c_i / sum(c) * R for one output made of the contributions c_i (0 if the sum is 0)."""
    total = sum(contributions)
    return [0.0 if total == 0 else c / total * rel_out for c in contributions]


# ------------------------------------------------------------------- references
def ref_add(a, b, R):
    a_b, b_b = torch.broadcast_tensors(a, b)
    Ra, Rb = torch.zeros_like(a_b), torch.zeros_like(b_b)
    for pos in itertools.product(*[range(s) for s in a_b.shape]):
        Ra[pos], Rb[pos] = proportional_split([float(a_b[pos]), float(b_b[pos])], float(R[pos]))
    return Ra.sum_to_size(a.shape), Rb.sum_to_size(b.shape)


def ref_sum_dim0(x, R):
    Rx = torch.zeros_like(x)
    for j in range(x.shape[1]):
        shares = proportional_split([float(v) for v in x[:, j]], float(R[j]))
        for i in range(x.shape[0]):
            Rx[i, j] = shares[i]
    return Rx


def ref_linear_eps(x, W, b, R, eps):
    """R_j = sum_k x_j w_kj / (z_k + eps sign z_k) R_k, contribution by contribution."""
    Rx = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for k in range(W.shape[0]):
            contributions = [float(x[n, j] * W[k, j]) for j in range(W.shape[1])]
            z = sum(contributions) + (float(b[k]) if b is not None else 0.0)
            if z == 0:
                continue
            denom = z + eps * (1.0 if z >= 0 else -1.0)
            for j, c in enumerate(contributions):
                Rx[n, j] += c / denom * float(R[n, k])
    return Rx


# ------------------------------------------------------------------------ tests
def rand(*shape, gen, device="cpu", dtype=torch.float64):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def test_add_reference_and_broadcast(gen):
    for a_shape, b_shape in [((4, 3), (4, 3)), ((4, 3), (3,)), ((4, 1), (1, 3)), ((4, 3), ())]:
        a, b = rand(*a_shape, gen=gen), rand(*b_shape, gen=gen)
        out, R, (Ra, Rb) = relevance(ops.add, [a, b])
        ref_a, ref_b = ref_add(a, b, R)
        torch.testing.assert_close(Ra, ref_a)
        torch.testing.assert_close(Rb, ref_b)
        torch.testing.assert_close(Ra.sum() + Rb.sum(), R.sum())  # conservation


def test_add_with_python_number():
    a = torch.tensor([1.0, 3.0], requires_grad=True)
    out = ops.add(a, 1.0)
    out.backward(torch.ones(2))
    torch.testing.assert_close(a.grad, torch.tensor([0.5, 0.75]))


def test_sum_reference_and_dims(gen):
    x = rand(5, 3, gen=gen)
    out, R, (Rx,) = relevance(lambda t: ops.sum(t, dim=0), [x])
    torch.testing.assert_close(Rx, ref_sum_dim0(x, R))
    # dim=1 equals dim=0 of the transpose; keepdim, tuple dims, negative dims, None
    _, R1, (Rx1,) = relevance(lambda t: ops.sum(t, dim=-1, keepdim=True), [x])
    torch.testing.assert_close(Rx1, ref_sum_dim0(x.T, R1.view(-1)).T)
    y = rand(2, 3, 4, gen=gen)
    for dim, keepdim in [((0, 2), False), ((0, 2), True), (None, False), (None, True)]:
        out, R, (Ry,) = relevance(lambda t: ops.sum(t, dim=dim, keepdim=keepdim), [y])
        expected = y.sum(dim=dim, keepdim=keepdim) if dim is not None else y.sum()
        if dim is None and keepdim:
            expected = expected.reshape(1, 1, 1)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(Ry.sum(), R.sum())
        # each summand's share: x_i / (its group's sum) * R_group
        ratio = R / out
        for d in sorted(dim if dim is not None else (0, 1, 2)):
            if not keepdim:
                ratio = ratio.unsqueeze(d)
        torch.testing.assert_close(Ry, y * ratio)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.5])
def test_linear_eps_reference(bias, eps, gen):
    x, W = rand(6, 5, gen=gen), rand(4, 5, gen=gen)
    b = rand(4, gen=gen) if bias else None
    out, R, (Rx,) = relevance(lambda t: ops.linear_eps(t, W, b, eps=eps), [x])
    torch.testing.assert_close(out, x @ W.T + (b if bias else 0))
    torch.testing.assert_close(Rx, ref_linear_eps(x, W, b, R, eps))
    if not bias and eps == 0.0:
        torch.testing.assert_close(Rx.sum(), R.sum())


def test_linear_eps_batched_dims(gen, device, dtype):
    x, W = rand(3, 7, 5, gen=gen, device=device, dtype=dtype), rand(4, 5, gen=gen, device=device, dtype=dtype)
    out, R, (Rx,) = relevance(lambda t: ops.linear_eps(t, W, eps=0.0), [x])
    assert out.shape == (3, 7, 4) and Rx.device.type == device.type and Rx.dtype == dtype
    ref = ref_linear_eps(x.reshape(21, 5).double().cpu(), W.double().cpu(), None, R.reshape(21, 4).double().cpu(), 0.0)
    torch.testing.assert_close(Rx.reshape(21, 5).double().cpu(), ref, rtol=1e-3 if dtype == torch.float32 else 1e-7,
                               atol=1e-4 if dtype == torch.float32 else 1e-9)


def test_second_backward_equals_first(gen):
    """The seed added eps to a saved tensor in place, so a second backward differed."""
    x = rand(4, 3, gen=gen).requires_grad_()
    W = rand(2, 3, gen=gen)
    out = ops.linear_eps(ops.relu(x), W, rand(2, gen=gen), eps=0.1)
    R = torch.ones_like(out)
    first, = torch.autograd.grad(out, x, R, retain_graph=True)
    second, = torch.autograd.grad(out, x, R)
    assert torch.equal(first, second)


def test_relu():
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    out = ops.relu(x)
    out.backward(torch.tensor([0.0, 0.0, 3.0]))
    assert x.grad.tolist() == [0.0, 0.0, 3.0]


# --------------------------------------------------------- the seed's numbers
def same_as_printed(t, printed):
    """``t`` equals numbers printed with two decimals, to that precision."""
    return bool((t.detach().double() - torch.tensor(printed, dtype=torch.float64)).abs().max() <= 0.005 + 1e-9)


def test_seed_add_sum_scatter_numbers():
    a = torch.tensor([1.0, 2, 3, 1], requires_grad=True)
    b = torch.tensor([0.0, 1, 2, 4], requires_grad=True)
    ops.add(a, b).backward(torch.ones(4))
    assert same_as_printed(a.grad, [1.0, 0.67, 0.6, 0.2])
    assert same_as_printed(b.grad, [0.0, 0.33, 0.4, 0.8])

    a = torch.tensor([[1.0, 2, 3, 1], [-6, -2, -1, -1]], requires_grad=True)
    out = ops.sum(a, dim=0)
    out.backward(torch.ones_like(out) * (out != 0))
    assert same_as_printed(a.grad, [[-0.2, 0, 1.5, 0], [1.2, 0, -0.5, 0]])

    src = torch.tensor([1.0, 1, 1, 1, 2, 6, 1, 1, -2], requires_grad=True)
    out = ops.scatter_add(src, torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2]), dim=0)
    out.backward(torch.ones_like(out) * (out != 0))
    assert same_as_printed(src.grad, [0.25, 0.25, 0.25, 0.25, 0.25, 0.75, 0, 0, 0])

    src = torch.tensor([1.0, 1, 1, 1, 2, 8, 1, 1, -2], requires_grad=True)
    out = ops.scatter_mean(src, torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2]), dim=0)
    out.backward(torch.ones_like(out) * (out != 0))
    assert out.tolist() == [1.0, 5.0, 0.0]
    assert same_as_printed(src.grad, [0.25, 0.25, 0.25, 0.25, 0.2, 0.8, 0, 0, 0])


def test_seed_linear_numbers():
    W = torch.tensor([[1.0, 2, -1], [0, 0, 1]])
    for bias in (None, torch.tensor([0.0, 1.0]), torch.tensor([0.0, 100.0])):
        x = torch.tensor([[4.0, 8, 0]], requires_grad=True)
        y = ops.linear_eps(x, W, bias)
        y.backward(torch.ones_like(y) * (y != 0))
        assert same_as_printed(x.grad, [[0.2, 0.8, 0.0]])


def test_seed_composed_example():
    a = torch.tensor([[1.0, 2, 3, 1, 0]], requires_grad=True)
    b = torch.tensor([[0.0, 1, 2, 4, 5]], requires_grad=True)
    d = ops.scatter_add(ops.add(a, b), torch.tensor([0, 0, 1, 1, 2]), dim=1)
    u = ops.linear_eps(d, torch.tensor([[1.0, 0, 2], [0, 5, 1]]))
    v = ops.linear_eps(d, torch.tensor([[0.0, 1, -1], [-4, -2, -3]]))
    z = ops.add(u, v)
    assert z.tolist() == [[19.0, 4.0]]
    z.backward(torch.ones_like(z))
    assert same_as_printed(a.grad, [[-0.95, -1.89, 2.41, 0.8, 0.0]])
    assert same_as_printed(b.grad, [[0.0, -0.95, 1.61, 3.21, -2.24]])
    assert round(float(a.grad.sum()), 4) == 0.3684 and round(float(b.grad.sum()), 4) == 1.6316
    torch.testing.assert_close(a.grad.sum() + b.grad.sum(), torch.tensor(2.0))


# ------------------------------------------------------------- lost relevance
def test_lost_relevance_warns():
    x = torch.tensor([[1.0, -1.0], [2.0, 3.0]], requires_grad=True)
    out = ops.sum(x, dim=1)  # first row sums to 0
    with pytest.warns(LostRelevanceWarning, match="sum: relevance of total magnitude 1"):
        out.backward(torch.ones(2))
    assert x.grad[0].tolist() == [0.0, 0.0]
    y = torch.tensor([[1.0, 2.0]], requires_grad=True)
    out = ops.sum(y, dim=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out.backward(torch.ones(1))  # nothing lost, no warning


# --------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: ops.add(torch.ones(3), torch.ones(4)), ValueError, "a and b cannot be broadcast"),
        (lambda: ops.add(torch.ones(3, dtype=torch.long), torch.ones(3)), TypeError, "a must be a floating"),
        (lambda: ops.sum(torch.ones(2, 2), dim=2), IndexError, "dim=2 is out of range"),
        (lambda: ops.sum(torch.ones(2, 2), dim=(0, -2)), ValueError, "repeated"),
        (lambda: ops.scatter_add(torch.ones(3), torch.tensor([0.0, 1, 1])), TypeError, "index must have an integer dtype"),
        (lambda: ops.scatter_mean(torch.ones(3), torch.tensor([0, 1, 7]), dim_size=3), IndexError, "out of range"),
        (lambda: ops.scatter_max(torch.ones(3), torch.tensor([0, -1, 1])), IndexError, "negative"),
        (lambda: ops.scatter_add(torch.ones(3, 2), torch.tensor([0, 1])), ValueError, "index has 2 entries"),
        (lambda: ops.linear_eps(torch.ones(2, 3), torch.ones(4, 5)), ValueError, "in_features=5"),
        (lambda: ops.linear_eps(torch.ones(2, 3), torch.ones(4, 3), torch.ones(3)), ValueError, "bias must have shape"),
        (lambda: ops.linear_eps(torch.ones(2, 3), torch.ones(4, 3), eps=-1.0), ValueError, "eps must be"),
        (lambda: ops.linear_eps(torch.ones(2, 3), torch.ones(4, 3), recompute=1), TypeError, "recompute must be"),
        (lambda: ops.index_select(torch.ones(3), 0, torch.tensor([3])), IndexError, "out of range for size 3"),
        (lambda: ops.index_select(torch.ones(3), 0, torch.tensor([[0]])), ValueError, "index must be 1-D"),
        (lambda: ops.cat([torch.ones(2, 3), torch.ones(3, 3)], dim=1), ValueError, r"tensors\[1\] has shape"),
        (lambda: ops.cat(torch.ones(2)), TypeError, "tensors must be"),
        (lambda: ops.repeat_tensor(torch.ones(3), torch.tensor([1, -1, 2])), ValueError, "non-negative"),
        (lambda: ops.repeat_tensor(torch.ones(3), -2), ValueError, "non-negative"),
        (lambda: ops.repeat_tensor(torch.ones(3), torch.tensor([1.0, 1, 1])), TypeError, "repeats must be"),
        (lambda: ops.repeat_tensor(torch.ones(3), torch.tensor([1, 1])), ValueError, "one entry per slice"),
        (lambda: ops.relu([1.0]), TypeError, "x must be a torch.Tensor"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(gen):
    x, W = rand(8, 5, gen=gen), rand(3, 5, gen=gen)
    index = torch.tensor([0, 0, 1, 2, 2, 2, 3, 1])

    def net(t, dev):
        h = ops.relu(ops.linear_eps(t, W.to(dev), eps=0.0))
        return ops.sum(ops.scatter_mean(h, index.to(dev), 0, 4), dim=1)

    _, R, (cpu,) = relevance(lambda t: net(t, "cpu"), [x])
    _, _, (gpu,) = relevance(lambda t: net(t, "cuda"), [x.cuda()], rel_out=R.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu)


def test_linear_eps_saves_only_input_weight_and_bias(gen):
    """O(N in) memory between forward and backward, as the gradient of a trainable layer: the
    output z is recomputed in backward, and nothing of size N x in x out is kept."""
    x, W, b = rand(50, 7, gen=gen).requires_grad_(), rand(5, 7, gen=gen), rand(5, gen=gen)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = ops.linear_eps(x, W, b)
    assert sorted(t.numel() for t in saved) == sorted([x.numel(), W.numel(), b.numel()])
    assert not any(t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr() for t in saved)
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = ops.linear_eps(x, W, b, recompute=False)  # keeps z instead of the bias
    assert sorted(t.numel() for t in saved) == sorted([x.numel(), W.numel(), out.numel()])


@pytest.mark.parametrize("recompute", [True, False])
def test_linear_eps_recomputed_output_gives_the_saved_output_rule(gen, recompute):
    """Recomputing z in backward (or keeping it) gives the relevance of the rule written with the
    forward's z (kept outside autograd here), bit for bit, also where z = 0 loses relevance, and a
    second backward gives the same again."""
    x, W, b, R = rand(40, 6, gen=gen), rand(4, 6, gen=gen), rand(4, gen=gen), rand(40, 4, gen=gen)
    z = torch.nn.functional.linear(x, W, b)
    denom = torch.copysign(z.new_tensor(0.1), z) + z
    expected = ((R / denom) @ W) * x
    leaf = x.clone().requires_grad_()
    out = ops.linear_eps(leaf, W, b, eps=0.1, recompute=recompute)
    assert torch.equal(out, z)
    first = torch.autograd.grad(out, leaf, R, retain_graph=True)[0]
    second = torch.autograd.grad(out, leaf, R)[0]
    assert torch.equal(first, expected) and torch.equal(second, expected)
    x[3] = 0.0  # a row with z = 0 at every output (no bias): its relevance is lost, with a warning
    with pytest.warns(ops.LostRelevanceWarning):
        leaf0 = x.clone().requires_grad_()
        (rel0,) = torch.autograd.grad(ops.linear_eps(leaf0, W, None, 0.0, recompute), leaf0, R)
    assert torch.equal(rel0[3], torch.zeros_like(rel0[3]))
    torch.testing.assert_close(rel0.sum(1)[:3], R[:3].sum(1))


def test_an_infinite_input_is_an_error_even_where_its_relevance_share_is_zero():
    """0 * inf = NaN: an infinite input must not come back as NaN relevance without an error."""
    x = torch.tensor([[float("inf")]], requires_grad=True)
    y = ops.linear_eps(x, torch.tensor([[1.0]]), None, 0.0)
    with pytest.raises((ValueError, RuntimeError, FloatingPointError), match="(?i)nan|inf|finite"):
        y.backward(torch.zeros_like(y))


@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_eps_in_blocks_of_rows_equals_the_rule_over_all_rows(gen, recompute, bias, monkeypatch):
    """The CPU backward runs over blocks of rows (here 7 rows: 33 rows make 5 blocks, the last one
    short): the result is the rule over all rows at once, with leading batch dimensions too, and NaN
    or Inf anywhere, also in the last block, is an error."""
    monkeypatch.setattr(ops.LinearEpsRelevance, "BLOCK_NUMBERS", 7 * 6)  # 7 rows of 6 inputs
    x, W, R = rand(3, 11, 6, gen=gen), rand(5, 6, gen=gen), rand(3, 11, 5, gen=gen)
    b = rand(5, gen=gen) if bias else None
    z = torch.nn.functional.linear(x, W, b)
    expected = ((R / (torch.copysign(z.new_tensor(0.1), z) + z)) @ W) * x
    leaf = x.clone().requires_grad_()
    (rel,) = torch.autograd.grad(ops.linear_eps(leaf, W, b, eps=0.1, recompute=recompute), leaf, R)
    torch.testing.assert_close(rel, expected, rtol=1e-12, atol=1e-12)
    bad = x.clone()
    bad[2, 10, 0] = float("nan")  # last row: last block
    leaf = bad.requires_grad_()
    with pytest.raises(ValueError, match="NaN or Inf"):
        torch.autograd.grad(ops.linear_eps(leaf, W, b, eps=0.1, recompute=recompute), leaf, R)
    bad_r = R.clone()
    bad_r[0, 0, 1] = float("inf")  # first block
    leaf = x.clone().requires_grad_()
    with pytest.raises(ValueError, match="NaN or Inf"):
        torch.autograd.grad(ops.linear_eps(leaf, W, b, eps=0.1, recompute=recompute), leaf, bad_r)
