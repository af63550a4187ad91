"""Hook-based relprop modules: the seed's printed numbers, slow references written from each
rule's definition (float64 loops over the individual contributions), conservation, agreement
with the autograd trick of lrp_lib.teach.ops, lost relevance, and the error for each bad input."""
import itertools
import warnings

import pytest
import torch

from lrp_lib.teach import ops
from lrp_lib.teach import relprop as rp
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.teach.ops import LostRelevanceWarning


def rand(*shape, gen):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def split(contributions, rel):
    """R_i = c_i / sum(c) * R (0 if the sum is 0)."""
    total = sum(contributions)
    return [0.0 if total == 0 else c / total * rel for c in contributions]


# ------------------------------------------------------------------- references
def ref_matmul(a, b, R):
    """z_ik = sum_j a_ij b_jk: the term a_ij b_jk gets its share of R_ik, for a_ij and for b_jk."""
    Ra, Rb = torch.zeros_like(a), torch.zeros_like(b)
    for i, k in itertools.product(range(a.shape[0]), range(b.shape[1])):
        terms = [float(a[i, j] * b[j, k]) for j in range(a.shape[1])]
        for j, share in enumerate(split(terms, float(R[i, k]))):
            Ra[i, j] += share
            Rb[j, k] += share
    return Ra, Rb


def ref_add_normalised(a, b, R):
    ra, rb = torch.zeros_like(a), torch.zeros_like(b)
    for pos in itertools.product(*[range(s) for s in a.shape]):
        ra[pos], rb[pos] = split([float(a[pos]), float(b[pos])], float(R[pos]))
    sa, sb, total = float(ra.sum()), float(rb.sum()), float(R.sum())
    return ra * (abs(sa) / (abs(sa) + abs(sb)) * total / sa), rb * (abs(sb) / (abs(sa) + abs(sb)) * total / sb)


def ref_linear(x, W, b, R, rule, eps=0.0, alpha=1.0, beta=0.0):
    """One sample and one output at a time, from the list of contributions x_j w_kj."""
    Rx = torch.zeros_like(x)
    for n, k in itertools.product(range(x.shape[0]), range(W.shape[0])):
        c = [float(x[n, j] * W[k, j]) for j in range(W.shape[1])]
        r = float(R[n, k])
        if rule == "epsilon":
            z = sum(c) + (float(b[k]) if b is not None else 0.0)
            if z != 0:
                for j in range(len(c)):
                    Rx[n, j] += c[j] / (z + eps * (1 if z >= 0 else -1)) * r
        else:
            pos = split([max(v, 0.0) for v in c], r)
            neg = split([min(v, 0.0) for v in c], r)
            for j in range(len(c)):
                Rx[n, j] += alpha * pos[j] - beta * neg[j]
    return Rx


# ------------------------------------------------------------ the seed's numbers
A = torch.ones(2, 2)
B = torch.tensor([[-2.0, 1.0], [1.0, -2.0]])


def test_seed_matmul_add():
    mm = rp.MatMul()
    assert mm([A, B]).tolist() == [[-1.0, -1.0], [-1.0, -1.0]]
    Ra, Rb = mm.relprop(torch.tensor([[1.0, 0], [0, 0]]))
    assert Ra.tolist() == [[2.0, -1.0], [0.0, 0.0]] and Rb.tolist() == [[2.0, 0.0], [-1.0, 0.0]]
    add = rp.Add()
    assert add([A, B]).tolist() == [[-1.0, 2.0], [2.0, -1.0]]
    Ra, Rb = add.relprop(torch.tensor([[1.0, 0], [0, 0]]))
    torch.testing.assert_close(Ra, torch.tensor([[1 / 3, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(Rb, torch.tensor([[2 / 3, 0.0], [0.0, 0.0]]))


def test_seed_index_select_clone():
    pool = rp.IndexSelect()
    assert pool(B, 1, torch.zeros(1, dtype=torch.int32)).tolist() == [[-2.0], [1.0]]
    assert pool.relprop(torch.tensor([[1.0], [0.0]])).tolist() == [[1.0, 0.0], [0.0, 0.0]]
    clone = rp.Clone()
    copies = clone(B, 2)
    assert len(copies) == 2 and all(torch.equal(c, B) for c in copies)
    R = clone.relprop([torch.tensor([[0.5, 0.5], [0, 0]]), torch.tensor([[0, 0.25], [0.25, 0.5]])])
    assert R.tolist() == [[0.5, 0.75], [0.25, 0.5]]


# ------------------------------------------------------------------- references
def test_safe_divide():
    a = torch.tensor([1.0, 1.0, 1.0, 2.0], dtype=torch.float64)
    b = torch.tensor([2.0, -2.0, 0.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(rp.safe_divide(a, b, eps=0.5), torch.tensor([0.4, -0.4, 0.0, 2 / 4.5], dtype=torch.float64))
    assert rp.safe_divide(a, b, eps=0.0).tolist() == [0.5, -0.5, 0.0, 0.5]


def test_matmul_reference(gen):
    a, b = rand(3, 4, gen=gen), rand(4, 2, gen=gen)
    mm = rp.MatMul()
    mm([a, b])
    R = rand(3, 2, gen=gen)
    Ra, Rb = mm.relprop(R)
    ref_a, ref_b = ref_matmul(a, b, R)
    torch.testing.assert_close(Ra, ref_a)
    torch.testing.assert_close(Rb, ref_b)
    torch.testing.assert_close(Ra.sum(), R.sum())  # each factor receives the whole relevance
    torch.testing.assert_close(Rb.sum(), R.sum())


def test_add_normalised_reference_and_conservation(gen):
    a, b = rand(4, 3, gen=gen), rand(4, 3, gen=gen)
    add = rp.Add()
    out = add([a, b])
    R = rand(4, 3, gen=gen)
    Ra, Rb = add.relprop(R)
    ref_a, ref_b = ref_add_normalised(a, b, R)
    torch.testing.assert_close(Ra, ref_a)
    torch.testing.assert_close(Rb, ref_b)
    torch.testing.assert_close(Ra.sum() + Rb.sum(), R.sum())  # the total is conserved
    # the totals are in the ratio of the magnitudes of the element-wise split
    ops_a, ops_b = torch.autograd.grad(ops.add(a.requires_grad_(), b.requires_grad_()), [a, b], R)
    torch.testing.assert_close(Ra.sum() / Rb.sum(), ops_a.sum().abs() / ops_b.sum().abs())
    assert not torch.allclose(Ra, ops_a)  # and element by element it differs from ops.add by design
    assert torch.equal(out, a + b)


def test_add_normalised_conserves_what_the_split_loses():
    a = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    b = torch.tensor([[-1.0, 1.0]], dtype=torch.float64)  # a + b = 0 in the first position
    add = rp.Add()
    add([a, b])
    with pytest.warns(LostRelevanceWarning, match="Add.relprop: relevance of total magnitude 1"):
        Ra, Rb = add.relprop(torch.tensor([[1.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(Ra.sum() + Rb.sum(), torch.tensor(2.0, dtype=torch.float64))
    torch.testing.assert_close(Ra, torch.tensor([[0.0, 4 / 3]], dtype=torch.float64))  # 2/3 of the total


def test_add_normalisation_mixes_the_batch(gen):
    """The normalising sums run over the whole tensor: a sample's relevance depends on the others."""
    a, b = rand(2, 3, gen=gen), rand(2, 3, gen=gen)
    R = rand(2, 3, gen=gen)
    batch, single = rp.Add(), rp.Add()
    batch([a, b])
    single([a[:1], b[:1]])
    assert not torch.allclose(batch.relprop(R)[0][0], single.relprop(R[:1])[0][0])


def test_index_select_and_clone_reference(gen):
    x = rand(5, 2, gen=gen)
    index = torch.tensor([2, 4, 4, 0, 4])
    pool = rp.IndexSelect()
    pool(x, 0, index)
    R = rand(5, 2, gen=gen)
    ref = torch.zeros_like(x)
    for k, j in enumerate(index.tolist()):
        ref[j] += R[k]
    torch.testing.assert_close(pool.relprop(R), ref)
    leaf = x.clone().requires_grad_()
    (via_ops,) = torch.autograd.grad(ops.index_select(leaf, 0, index), leaf, R)
    torch.testing.assert_close(pool.relprop(R), via_ops)  # the same where x != 0
    clone = rp.Clone()
    clone(x, 3)
    Rs = [rand(5, 2, gen=gen) for _ in range(3)]
    torch.testing.assert_close(clone.relprop(Rs), Rs[0] + Rs[1] + Rs[2])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("eps", [0.0, 1e-9, 0.5])
def test_linear_epsilon_reference(bias, eps, gen):
    layer = rp.Linear(5, 4, bias=bias, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(rand(4, 5, gen=gen))
        if bias:
            layer.bias.copy_(rand(4, gen=gen))
        x = rand(6, 5, gen=gen)
        out = layer(x)  # the hook stores x even under no_grad
    R = rand(6, 4, gen=gen)
    Rx = layer.relprop(R, rule="epsilon", eps=eps)
    torch.testing.assert_close(Rx, ref_linear(x, layer.weight.detach(), layer.bias.detach() if bias else None, R, "epsilon", eps=eps))
    torch.testing.assert_close(out, x @ layer.weight.T + (layer.bias if bias else 0))
    if not bias and eps == 0.0:
        torch.testing.assert_close(Rx.sum(), R.sum())


@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (2.0, 1.0), (1.5, None), (0.0, -1.0)])
def test_linear_alpha_beta_reference(alpha, beta, gen):
    layer = rp.Linear(6, 3, bias=True, dtype=torch.float64)  # the bias is not used by the rule
    with torch.no_grad():
        layer.weight.copy_(rand(3, 6, gen=gen))
    x = rand(4, 6, gen=gen)
    layer(x)
    R = rand(4, 3, gen=gen)
    Rx = layer.relprop(R, rule="alpha_beta", alpha=alpha, beta=beta)
    ref_beta = alpha - 1 if beta is None else beta
    torch.testing.assert_close(Rx, ref_linear(x, layer.weight.detach(), None, R, "alpha_beta", alpha=alpha, beta=ref_beta))
    if alpha - ref_beta == 1:  # every output has positive and negative contributions here
        torch.testing.assert_close(Rx.sum(), R.sum())


# ------------------------------------------------- agreement with the autograd trick
def mlp_weights(gen, sizes=(10, 16, 16, 4)):
    return [rand(o, i, gen=gen) / i ** 0.5 for i, o in zip(sizes[:-1], sizes[1:])]


def relprop_mlp(weights):
    layers = []
    for k, W in enumerate(weights):
        layer = rp.Linear(W.shape[1], W.shape[0], bias=False, dtype=W.dtype)
        with torch.no_grad():
            layer.weight.copy_(W)
        layers += [layer] + ([rp.ReLU()] if k < len(weights) - 1 else [])
    return rp.Sequential(*layers)


def autograd_mlp(x, weights, eps=None, rule=None):
    for k, W in enumerate(weights):
        x = ops.linear_eps(x, W, eps=eps) if rule is None else linear_maps.linear(x, W, rule=rule)
        if k < len(weights) - 1:
            x = ops.relu(x)
    return x


def test_mlp_epsilon_agrees_with_autograd_trick(gen):
    weights = mlp_weights(gen)
    x = rand(32, 10, gen=gen)
    net = relprop_mlp(weights)
    out = net(x)
    R = out * (out == out.max(dim=1, keepdim=True).values)  # explain the winning class
    for eps in (1e-9, 0.1):
        leaf = x.clone().requires_grad_()
        autograd_mlp(leaf, weights, eps).backward(R)
        torch.testing.assert_close(net.relprop(R, rule="epsilon", eps=eps), leaf.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(net.relprop(R, eps=0.0).sum(), R.sum())  # bias-free: conserved


@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (2.0, 1.0)])
def test_mlp_alpha_beta_agrees_with_autograd_trick(alpha, beta, gen):
    weights = mlp_weights(gen)
    x = rand(32, 10, gen=gen)
    net = relprop_mlp(weights)
    R = net(x)  # every output explained: some have no positive (or no negative) contribution
    leaf = x.clone().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:  # and both lose their relevance alike
        warnings.simplefilter("always", LostRelevanceWarning)
        autograd_mlp(leaf, weights, rule=rules.AlphaBeta(alpha=alpha, beta=beta)).backward(R)
        by_hooks = net.relprop(R, rule="alpha_beta", alpha=alpha, beta=beta)
    assert caught and all(w.category is LostRelevanceWarning for w in caught)
    torch.testing.assert_close(by_hooks, leaf.grad, rtol=1e-6, atol=1e-6)


def test_relprop_can_be_repeated(gen):
    net = relprop_mlp(mlp_weights(gen))
    x = rand(3, 10, gen=gen)
    R = net(x)
    assert torch.equal(net.relprop(R), net.relprop(R))


def test_lost_relevance_warns():
    layer = rp.Linear(2, 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 1.0]]))
    layer(torch.tensor([[1.0, -1.0], [1.0, 2.0]]))  # first output is 0
    with pytest.warns(LostRelevanceWarning, match="Linear.relprop: relevance of total magnitude 1"):
        Rx = layer.relprop(torch.ones(2, 1))
    assert Rx[0].tolist() == [0.0, 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(torch.tensor([[1.0, 2.0]]))
        layer.relprop(torch.ones(1, 1))


# ------------------------------------------------------------------ bad inputs
def called(module, *args):
    module(*args)
    return module


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: rp.Linear(2, 1).relprop(torch.ones(1, 1)), RuntimeError, "call the module on an input before relprop"),
        (lambda: called(rp.Linear(2, 3), torch.ones(4, 2)).relprop(torch.ones(4, 2)), ValueError,
         r"R has shape \(4, 2\) but the module's output has shape \(4, 3\)"),
        (lambda: called(rp.Linear(2, 3), torch.ones(4, 2)).relprop(torch.ones(4, 3), rule="gamma"), ValueError, "rule must be one of"),
        (lambda: called(rp.Linear(2, 3), torch.ones(4, 2)).relprop(torch.ones(4, 3), eps=-1), ValueError, "eps must be"),
        (lambda: called(rp.MatMul(), [A, B]).relprop([1.0]), TypeError, "R must be a torch.Tensor"),
        (lambda: rp.MatMul()(A), TypeError, r"inputs must be a list \[a, b\]"),
        (lambda: rp.Add()([A, torch.ones(2, 2, dtype=torch.long)]), TypeError, r"inputs\[1\] must be a floating"),
        (lambda: called(rp.Clone(), B, 2).relprop([B]), ValueError, "R must be a list of 2 tensors"),
        (lambda: called(rp.Clone(), B, 2).relprop([B, torch.ones(3)]), ValueError, r"R\[1\] has shape \(3,\)"),
        (lambda: rp.Clone()(B, 0), ValueError, "num must be a positive int"),
        (lambda: called(rp.Sequential(rp.ReLU(), torch.nn.Tanh()), B).relprop(B), TypeError, "Tanh has no relprop"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
