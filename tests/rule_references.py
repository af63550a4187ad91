"""References written from the definitions of the linear-map rules, shared by the tests of
``lrp_lib.core.rules`` (tests/core/test_rules.py, tests/core/test_modify.py) and of chapter 3's skip
connections (tests/teach/test_residual.py): the dense matrix of a convolution by explicit loops, each
rule's input relevance on the explicit contribution tensor, and the autograd nodes behind a tensor (to
check that an explanation holds no Python autograd Function)."""
import itertools

import torch

from lrp_lib.core import rules


def conv_matrix(in_shape, weight, stride, padding, dilation, groups):
    """The dense matrix A (outputs x inputs) of a bias-free N-d convolution, by explicit loops:
    A[(o, p), (c, i)] = w[o, c - g * C_g, q] where i = p * stride + q * dilation - padding."""
    C, *spatial = in_shape
    O, Cg, *kernel = weight.shape
    d = len(spatial)
    out_spatial = [(spatial[a] + 2 * padding[a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1 for a in range(d)]
    n_in = C * int(torch.tensor(spatial).prod())
    out_positions = list(itertools.product(*[range(s) for s in out_spatial]))
    A = torch.zeros(O * len(out_positions), n_in, dtype=torch.float64)
    Og = O // groups
    for o in range(O):
        g = o // Og
        for pi, p in enumerate(out_positions):
            for c_local in range(Cg):
                c = g * Cg + c_local
                for q in itertools.product(*[range(k) for k in kernel]):
                    i = [p[a] * stride[a] + q[a] * dilation[a] - padding[a] for a in range(d)]
                    if all(0 <= i[a] < spatial[a] for a in range(d)):
                        flat = c
                        for a in range(d):
                            flat = flat * spatial[a] + i[a]
                        A[o * len(out_positions) + pi, flat] += float(weight[(o, c_local) + q])
    return A, [O] + out_spatial


def ref_rule(rule, X, A, b, R):
    """Input relevance of ``z = X @ A.T + b`` (rows of X are samples) from the rule's definition,
    on the explicit contributions c[n, k, j] = x[n, j] * a[k, j]."""
    c = X[:, None, :] * A[None]                         # N x K x J
    bias = torch.zeros(A.shape[0], dtype=X.dtype) if b is None else b

    def split(contrib, z, R):                          # R_j = sum_k contrib_kj / z_k R_k (0 where z = 0)
        ratio = torch.where(z == 0, torch.zeros_like(R), R / torch.where(z == 0, torch.ones_like(z), z))
        return (contrib * ratio[:, :, None]).sum(1)

    def stab(z, eps):
        return z + eps * torch.where(z >= 0, 1.0, -1.0).double()

    if isinstance(rule, rules.Gamma):
        A_g = A + rule.gamma * A.clamp(min=0)
        c_g = X[:, None, :] * A_g[None]
        z = c_g.sum(2) + bias + rule.gamma * bias.clamp(min=0)
        return split(c_g, torch.where(z == 0, z, stab(z, rule.eps)), R)
    if isinstance(rule, rules.ZPlus):  # units without a positive contribution fall back to LRP-0
        pos = c.clamp(min=0)
        z_pos = pos.sum(2) + bias.clamp(min=0)
        none = z_pos == 0
        return split(pos, z_pos, R) + split(c, c.sum(2) + bias, torch.where(none, R, torch.zeros_like(R)))
    if isinstance(rule, rules.AlphaBeta):
        pos, neg = c.clamp(min=0), c.clamp(max=0)
        z_pos, z_neg = pos.sum(2) + bias.clamp(min=0), neg.sum(2) + bias.clamp(max=0)
        return rule.alpha * split(pos, z_pos, R) - rule.beta * split(neg, z_neg, R)
    z = c.sum(2) + bias
    return split(c, torch.where(z == 0, z, stab(z, rule.eps)), R)


def autograd_nodes(t):
    """Every autograd node that ``t``'s graph reaches."""
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(n for n, _ in node.next_functions)
    return seen


def python_nodes(t) -> list:
    """The nodes of ``t``'s graph that are Python autograd Functions."""
    return [n for n in autograd_nodes(t) if isinstance(n, torch.autograd.function.BackwardCFunction)]
