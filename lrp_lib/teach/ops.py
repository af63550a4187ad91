r"""Relevance operations: autograd functions whose backward is an LRP rule.

Every op here is a :class:`torch.autograd.Function`.  Its forward is the ordinary
operation; its backward takes the relevance :math:`R_{out}` of the output (passed in as
the "gradient") and returns the relevance of the inputs.  So for a network built from
these ops, ``out.backward(R)`` leaves the input relevance in ``.grad``.

The rules redistribute each output's relevance over the terms that produced it, in
proportion to their contribution.  For an output :math:`z = \sum_i z_i`:

.. math::  R_i = \frac{z_i}{z} R_z .

The sum over :math:`i` gives back :math:`R_z` (conservation) unless :math:`z = 0`.  An output
of zero cannot be split proportionally: its relevance is lost (set to zero) and a
:class:`LostRelevanceWarning` says so.  The epsilon rule of :func:`linear_eps` instead
divides by :math:`z + \epsilon\,\mathrm{sign}(z)`, which lets the stabiliser absorb a little
relevance.

Ops that only copy or move values (``index_select``, ``cat``, ``repeat_tensor``) pass
relevance back like a gradient: copies of one input sum their relevance.  ``relu`` passes
relevance through where the unit is active.  The ops that move values along an index (the segment
sum, mean and max, and the copies) are written in :mod:`lrp_lib.teach.index_ops` and exported here
too, so that ``ops`` holds the whole set the chapters use.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import torch
from torch import Tensor

from lrp_lib.teach.index_ops import (cat, index_select, repeat_tensor, scatter_add, scatter_max,  # noqa: F401
                                    scatter_mean)
from lrp_lib.teach.scatter import check_linear, check_tensor, normalize_dim
from lrp_lib.teach.guided import ReLUFunction
from lrp_lib.core.stabilizer import LostRelevanceWarning, stabilize
from lrp_lib.core.validation import check_number
from lrp_lib.teach.share import raise_not_finite, relevance_share, warn_lost

__all__ = [
    "LostRelevanceWarning",
    "stabilize",
    "relevance_share",
    "add",
    "sum",
    "scatter_add",
    "scatter_mean",
    "scatter_max",
    "linear_eps",
    "index_select",
    "cat",
    "repeat_tensor",
    "relu",
]


# --------------------------------------------------------------------------- add
class AddRelevance(torch.autograd.Function):
    r"""Relevance of ``a + b`` (with broadcasting).

    Rule: :math:`R_a = \frac{a}{a+b} R`, :math:`R_b = \frac{b}{a+b} R`, element-wise, where
    :math:`a + b \neq 0` (else lost).  A broadcast input collects the relevance of every
    output it took part in (summed over the broadcast dimensions), so a bias vector added
    to a batch receives the bias share of every row.
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor) -> Tensor:
        out = a + b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        a, b, out = ctx.saved_tensors
        s = relevance_share("add", rel_out, out)
        rel_a = (s * a).sum_to_size(a.shape) if ctx.needs_input_grad[0] else None
        rel_b = (s * b).sum_to_size(b.shape) if ctx.needs_input_grad[1] else None
        return rel_a, rel_b


def add(a: Tensor | float, b: Tensor | float) -> Tensor:
    r"""``a + b`` whose backward splits relevance in proportion to each term.

    :math:`R_a = \frac{a}{a+b} R_{out}`, :math:`R_b = \frac{b}{a+b} R_{out}`; broadcasting
    works both ways (a scalar, a bias vector), a broadcast term sums its shares.
    """
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("add needs at least one tensor among a and b")
    if isinstance(a, numbers.Number):
        a = torch.as_tensor(a, dtype=b.dtype, device=b.device)
    if isinstance(b, numbers.Number):
        b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    check_tensor(a, "a")
    check_tensor(b, "b")
    try:
        torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        raise ValueError(
            f"a and b cannot be broadcast together: shapes {tuple(a.shape)} and {tuple(b.shape)}"
        ) from None
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}")
    return AddRelevance.apply(a, b)


# --------------------------------------------------------------------------- sum
class SumRelevance(torch.autograd.Function):
    r"""Relevance of ``x.sum(dim)``: :math:`R_i = \frac{x_i}{\sum_j x_j} R`."""

    @staticmethod
    def forward(ctx, x: Tensor, dims: tuple[int, ...] | None, keepdim: bool) -> Tensor:
        out = x.sum() if dims is None else x.sum(dim=dims, keepdim=keepdim)
        if dims is None and keepdim:
            out = out.reshape([1] * x.dim())
        ctx.dims, ctx.keepdim = dims, keepdim
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        x, out = ctx.saved_tensors
        s = relevance_share("sum", rel_out, out)
        if not ctx.keepdim and ctx.dims is not None:
            for d in sorted(ctx.dims):
                s = s.unsqueeze(d)
        return s * x, None, None


def sum(x: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    r"""``x.sum(dim, keepdim)`` whose backward gives each summand its share.

    :math:`R_{x_i} = \frac{x_i}{\sum_j x_j} R_{out}` within each reduced group.  ``dim`` is an
    int, a sequence of ints, or ``None`` for all dimensions.
    """
    check_tensor(x, "x")
    if dim is None:
        dims = None
    else:
        raw = (dim,) if isinstance(dim, int) else tuple(dim)
        dims = tuple(normalize_dim(d, x.dim()) for d in raw)
        if len(set(dims)) != len(dims):
            raise ValueError(f"dim contains a repeated dimension: {dim}")
    return SumRelevance.apply(x, dims, bool(keepdim))


# ------------------------------------------------------------------------ linear
class LinearEpsRelevance(torch.autograd.Function):
    r"""Epsilon rule for :math:`z_k = \sum_j x_j w_{kj} + b_k`.

    .. math:: R_{x_j} = \sum_k \frac{x_j w_{kj}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k
              = x_j \sum_k w_{kj} \frac{R_k}{z_k + \epsilon\,\mathrm{sign}(z_k)}

    The second form needs matrix products and O(N (in + out)) memory, never an N x in x out
    tensor.  With ``recompute`` (the default) the saved tensors are the input, the weight and the
    bias, what the gradient of a trainable layer keeps, and the output :math:`z` is recomputed in
    backward (one more matrix product on the same values, which gives the forward's :math:`z`):
    N x in numbers are kept between forward and backward instead of N x (in + out).  Without it,
    :math:`z` is saved too and the backward is one matrix product.  Nothing saved is modified in
    backward, so a second backward gives the same result.

    For :math:`\epsilon` at least the smallest normal number of the dtype the backward runs over
    blocks of rows (about 1 MiB of :math:`z` each on the CPU, all rows at once on other devices):
    per block, :math:`z` (recomputed or a slice of the kept one), the stabiliser (``copysign``,
    then ``add_`` into the same scratch), the share divided into that scratch in place, the
    product :math:`s W` written into the block's rows of the result, the product with :math:`x`
    in place, and a read-only ``aminmax`` of the stabilised :math:`z` and of the result for the
    NaN/Inf check.  The element-wise passes then run on data still in the cache, and the only
    N-row tensor the backward allocates is the result: in memory traffic it reads :math:`x` and
    :math:`R` and writes :math:`R_x`, what a fused kernel would.  Each row is computed by the same
    operations as with all rows at once.  No zero count:
    :math:`|z + \epsilon\,\mathrm{sign}(z)| \ge \epsilon > 0`, so no relevance can be lost.  With
    :math:`\epsilon = 0` (or below that smallest normal number) the share goes through
    :func:`~lrp_lib.teach.share.relevance_share`, which counts the zeros and warns with the
    lost amount.
    """

    #: rows per block on the CPU: about this many numbers of z (1 MiB in float32)
    BLOCK_NUMBERS = 2**18

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, eps: float, recompute: bool) -> Tensor:
        out = torch.nn.functional.linear(x, weight, bias)
        ctx.eps, ctx.recompute = eps, recompute
        # an eps this small could round or flush to 0 in the dtype: then zeros must be counted
        ctx.never_zero = eps >= torch.finfo(x.dtype).tiny
        ctx.save_for_backward(x, weight, bias if recompute else out)
        return out

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        x, weight, kept = ctx.saved_tensors
        if not ctx.never_zero:
            out = torch.nn.functional.linear(x, weight, kept) if ctx.recompute else kept  # z
            denom = stabilize(out, ctx.eps) if ctx.eps else None
            s = relevance_share("linear_eps", rel_out, out, denom)
            return (s @ weight).mul_(x), None, None, None, None
        n_out, n_in = weight.shape
        xs, rs = x.reshape(-1, n_in), rel_out.reshape(-1, n_out)
        zs = None if ctx.recompute else kept.reshape(-1, n_out)
        n = xs.shape[0]
        rel_in = xs.new_empty(n, n_in)
        if rel_in.numel() == 0 or n_out == 0:
            return rel_in.zero_().view(x.shape), None, None, None, None
        rows = n if x.device.type != "cpu" else max(1, LinearEpsRelevance.BLOCK_NUMBERS // max(n_in, n_out))
        z_block = xs.new_empty(min(rows, n), n_out)
        d_block = torch.empty_like(z_block)
        eps, weight_t, ends = xs.new_tensor(ctx.eps), weight.t(), []
        for i in range(0, n, rows):
            j = min(i + rows, n)
            x_i, r_i = xs[i:j], rel_in[i:j]
            if zs is not None:
                z = zs[i:j]
            elif kept is None:
                z = torch.mm(x_i, weight_t, out=z_block[: j - i])
            else:
                z = torch.addmm(kept, x_i, weight_t, out=z_block[: j - i])
            # z + eps * sign(z), with sign(0) = +1 (copysign gives +eps for z = +0), never 0, and
            # finite exactly where z is (an infinite z would take the share 0 and drop its
            # relevance silently)
            d = torch.copysign(eps, z, out=d_block[: j - i]).add_(z)
            ends.extend(torch.aminmax(d))
            s = torch.div(rs[i:j], d, out=d)  # the share R / (z + eps sign z), in place
            torch.mm(s, weight, out=r_i).mul_(x_i)
            # NaN or Inf in x, the weight or rel_out reach the result (0 * inf = NaN included)
            ends.extend(torch.aminmax(r_i))
        if not bool(torch.isfinite(torch.stack(ends)).all()):
            raise_not_finite("linear_eps")
        return rel_in.view(x.shape), None, None, None, None


def linear_eps(x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-6,
               recompute: bool = True) -> Tensor:
    r"""``x @ weight.T + bias`` with the LRP epsilon rule in backward.

    :math:`R_{x_j} = \sum_k \frac{x_j w_{kj}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k`, with
    :math:`\mathrm{sign}(0) = +1`.  The bias takes the share :math:`b_k / (z_k + \ldots)` of
    :math:`R_k` (it is not an input, so that share leaves the explanation).  ``x`` may have
    any leading batch dimensions, like :func:`torch.nn.functional.linear`.

    ``recompute=True`` (default) keeps only ``x``, ``weight`` and ``bias`` for backward and
    recomputes :math:`z` there (less memory, one more matrix product); ``recompute=False`` keeps
    :math:`z` as well (the same relevance, bit for bit).
    """
    check_linear(x, weight, bias)
    if not isinstance(recompute, bool):
        raise TypeError(f"recompute must be True or False, got {recompute!r}")
    return LinearEpsRelevance.apply(x, weight, bias, check_number(eps, "eps"), recompute)

# -------------------------------------------------------------------- activation
class ReLURelevance(ReLUFunction):
    r"""Relevance through ReLU: :math:`R_{in} = R_{out}` where the unit is active, else lost.
    The forward, ``max(x, 0)`` with its output saved, is :class:`lrp_lib.teach.guided.ReLUFunction`."""

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        (out,) = ctx.saved_tensors
        rel_in = torch.ops.aten.threshold_backward(rel_out, out, 0)  # rel_out where out > 0, else 0
        if not torch.equal(rel_in, rel_out):  # some relevance reached an inactive unit
            warn_lost("relu", out == 0, rel_out)
        return rel_in


def relu(x: Tensor) -> Tensor:
    r"""``max(x, 0)``; relevance passes unchanged through active units,
    :math:`R_{in} = R_{out}\,[x > 0]`."""
    check_tensor(x, "x")
    return ReLURelevance.apply(x)
