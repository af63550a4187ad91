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
relevance through where the unit is active.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import torch
from torch import Tensor

from lrp_lib.teach import scatter as _scatter
from lrp_lib.teach.scatter import broadcast_index, check_index, normalize_dim
from lrp_lib.core.guided import ReLUFunction
from lrp_lib.core.stabilizer import (LostRelevanceWarning, all_finite, raise_not_finite, relevance_share, stabilize,
                                      warn_lost)
from lrp_lib.core.validation import INDEX_DTYPES, check_linear, check_number, check_tensor

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


def _as_index(index):
    """An int32 index (PyG accepts int32 edge_index) as torch.long, the dtype of torch's scatter
    kernels; anything else unchanged (lrp_lib.teach.scatter then names what is wrong with it)."""
    return index.long() if isinstance(index, Tensor) and index.dtype in INDEX_DTYPES else index


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


# ----------------------------------------------------------------------- scatter
class ScatterAddRelevance(torch.autograd.Function):
    r"""Relevance of a segment sum: :math:`R_i = \frac{x_i}{\sum_{k: idx_k = idx_i} x_k} R_{idx_i}`."""

    @staticmethod
    def forward(ctx, src: Tensor, index: Tensor, dim: int, dim_size: int | None) -> Tensor:
        out = _scatter.scatter_add(src, index, dim, dim_size)
        ctx.dim = dim
        ctx.save_for_backward(src, index, out)
        return out

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        src, index, out = ctx.saved_tensors
        s = relevance_share("scatter_add", rel_out, out)
        idx = broadcast_index(index, src, ctx.dim)
        return s.gather(ctx.dim, idx).mul_(src), None, None, None


def scatter_add(src: Tensor, index: Tensor, dim: int = 0, dim_size: int | None = None) -> Tensor:
    r"""Segment sum ``out[j] = sum_{i: index[i]=j} src[i]`` with the proportional rule.

    Backward: :math:`R_{src_i} = \frac{src_i}{out_{index_i}} R_{out_{index_i}}`.  Arguments as in
    torch_scatter: ``index`` 1-D along ``dim`` or the shape of ``src``; ``dim_size`` groups.
    """
    check_tensor(src, "src")
    dim = normalize_dim(dim, src.dim())  # index and dim_size are checked by lrp_lib.teach.scatter
    return ScatterAddRelevance.apply(src, _as_index(index), dim, dim_size)


class ScatterMeanRelevance(torch.autograd.Function):
    r"""Relevance of a segment mean.

    The mean :math:`\frac1n\sum_k x_k` is a sum of the terms :math:`x_k / n`, so
    :math:`R_i = \frac{x_i / n}{\mathrm{mean}} R = \frac{x_i}{\sum_k x_k} R`: the same split as the sum.
    """

    @staticmethod
    def forward(ctx, src: Tensor, index: Tensor, dim: int, dim_size: int | None) -> Tensor:
        out = _scatter.scatter_mean(src, index, dim, dim_size)
        ctx.dim = dim
        ctx.save_for_backward(src, index, out)
        return out

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        src, index, out = ctx.saved_tensors
        idx = broadcast_index(index, src, ctx.dim)
        count = _scatter.scatter_count(index if index.dim() == 1 else idx, src, ctx.dim, out.shape[ctx.dim])
        # x_i / sum = x_i / (mean * n): divide by the mean, then by the group size
        s = relevance_share("scatter_mean", rel_out, out).div_(count.clamp(min=1))
        return s.gather(ctx.dim, idx).mul_(src), None, None, None


def scatter_mean(src: Tensor, index: Tensor, dim: int = 0, dim_size: int | None = None) -> Tensor:
    r"""Segment mean with the proportional rule :math:`R_{src_i} = \frac{src_i}{\sum_{k \in g} src_k} R_g`.

    Empty groups give 0 (and lose any relevance sent to them).
    """
    check_tensor(src, "src")
    dim = normalize_dim(dim, src.dim())  # index and dim_size are checked by lrp_lib.teach.scatter
    return ScatterMeanRelevance.apply(src, _as_index(index), dim, dim_size)


class ScatterMaxRelevance(torch.autograd.Function):
    r"""Relevance of a segment max: winner takes all, :math:`R_{argmax_g} = R_g`."""

    @staticmethod
    def forward(ctx, src: Tensor, index: Tensor, dim: int, dim_size: int | None):
        out, argmax = _scatter.scatter_max(src, index, dim, dim_size)
        ctx.dim, ctx.n = dim, src.shape[dim]
        ctx.save_for_backward(out, argmax)
        ctx.mark_non_differentiable(argmax)
        return out, argmax

    @staticmethod
    def backward(ctx, rel_out: Tensor, _rel_argmax: Tensor | None):
        out, argmax = ctx.saved_tensors
        if int(torch.count_nonzero(out)) < out.numel():
            zero = out == 0
            warn_lost("scatter_max", zero, rel_out)
            rel_out = rel_out.masked_fill(zero, 0)
        # empty groups have argmax == n: send them to an extra slot and drop it
        shape = list(out.shape)
        shape[ctx.dim] = ctx.n + 1
        rel_src = rel_out.new_zeros(shape).scatter_add_(ctx.dim, argmax, rel_out)
        return rel_src.narrow(ctx.dim, 0, ctx.n), None, None, None


def scatter_max(
    src: Tensor, index: Tensor, dim: int = 0, dim_size: int | None = None
) -> tuple[Tensor, Tensor]:
    r"""Segment max ``(out, argmax)``; backward gives the whole :math:`R_g` to the winner.

    :math:`R_{src_i} = R_g` if ``i == argmax[g]``, else 0.  Ties go to the last maximal
    element.  An empty group has ``out = 0`` and ``argmax = src.size(dim)``.
    """
    check_tensor(src, "src")
    dim = normalize_dim(dim, src.dim())  # index and dim_size are checked by lrp_lib.teach.scatter
    return ScatterMaxRelevance.apply(src, _as_index(index), dim, dim_size)


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
    :func:`~lrp_lib.core.stabilizer.relevance_share`, which counts the zeros and warns with the
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


# ------------------------------------------------------------ copies and moves
class IndexSelectRelevance(torch.autograd.Function):
    r"""Relevance of ``src.index_select(dim, index)``: each copy returns its relevance,
    :math:`R_{src_j} = \sum_{k: index_k = j} R_k`."""

    @staticmethod
    def forward(ctx, src: Tensor, dim: int, index: Tensor) -> Tensor:
        ctx.dim, ctx.n = dim, src.shape[dim]
        ctx.save_for_backward(index)
        return src.index_select(dim, index)

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        (index,) = ctx.saved_tensors
        shape = list(rel_out.shape)
        shape[ctx.dim] = ctx.n
        return rel_out.new_zeros(shape).index_add_(ctx.dim, index, rel_out), None, None


def index_select(src: Tensor, dim: int, index: Tensor) -> Tensor:
    r"""``src.index_select(dim, index)``; copies sum their relevance back:
    :math:`R_{src_j} = \sum_{k: index_k = j} R_{out_k}`."""
    check_tensor(src, "src")
    dim = normalize_dim(dim, src.dim())
    if isinstance(index, Tensor) and index.dim() != 1:
        raise ValueError(f"index must be 1-D, got shape {tuple(index.shape)}")
    index = check_index(index, src.shape[dim])
    return IndexSelectRelevance.apply(src, dim, index)


class CatRelevance(torch.autograd.Function):
    r"""Relevance of ``torch.cat``: each block gets back the relevance of its own slice."""

    @staticmethod
    def forward(ctx, dim: int, *tensors: Tensor) -> Tensor:
        ctx.dim = dim
        ctx.sizes = [t.shape[dim] for t in tensors]
        return torch.cat(tensors, dim)

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        return (None, *torch.split(rel_out, ctx.sizes, dim=ctx.dim))


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    r"""``torch.cat(tensors, dim)``; each input receives the relevance of its slice."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)) or len(tensors) == 0:
        raise TypeError("tensors must be a non-empty list or tuple of tensors")
    for i, t in enumerate(tensors):
        check_tensor(t, f"tensors[{i}]")
    dim = normalize_dim(dim, tensors[0].dim())
    ref = tensors[0].shape
    for i, t in enumerate(tensors[1:], start=1):
        if t.dim() != len(ref) or any(t.shape[d] != ref[d] for d in range(len(ref)) if d != dim):
            raise ValueError(
                f"tensors[{i}] has shape {tuple(t.shape)}, which does not match tensors[0] "
                f"{tuple(ref)} outside dim={dim}"
            )
    return CatRelevance.apply(dim, *tensors)


class RepeatRelevance(torch.autograd.Function):
    r"""Relevance of ``repeat_interleave``: :math:`R_{src_j} = \sum_{\text{copies of } j} R`."""

    @staticmethod
    def forward(ctx, src: Tensor, repeats: Tensor, dim: int) -> Tensor:
        ctx.dim, ctx.n = dim, src.shape[dim]
        index = torch.repeat_interleave(torch.arange(ctx.n, device=src.device), repeats)
        ctx.save_for_backward(index)
        return src.index_select(dim, index)

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        (index,) = ctx.saved_tensors
        shape = list(rel_out.shape)
        shape[ctx.dim] = ctx.n
        return rel_out.new_zeros(shape).index_add_(ctx.dim, index, rel_out), None, None


def repeat_tensor(src: Tensor, repeats: Tensor | int, dim: int = 0) -> Tensor:
    r"""Repeat slice ``j`` of ``src`` along ``dim`` ``repeats[j]`` times (``repeat_interleave``).

    Backward: the copies of slice ``j`` sum their relevance, :math:`R_{src_j} = \sum R_{copies}`.
    """
    check_tensor(src, "src")
    dim = normalize_dim(dim, src.dim())
    n = src.shape[dim]
    if isinstance(repeats, numbers.Integral) and not isinstance(repeats, bool):
        if repeats < 0:
            raise ValueError(f"repeats must be non-negative, got {repeats}")
        repeats = torch.full((n,), int(repeats), dtype=torch.long, device=src.device)
    if not isinstance(repeats, Tensor) or repeats.dtype != torch.long:
        got = repeats.dtype if isinstance(repeats, Tensor) else type(repeats).__name__
        raise TypeError(f"repeats must be an int or a torch.long tensor, got {got}")
    if repeats.dim() != 1 or repeats.numel() != n:
        raise ValueError(
            f"repeats must be 1-D with one entry per slice of src along dim={dim} ({n}), "
            f"got shape {tuple(repeats.shape)}"
        )
    if repeats.numel() and int(repeats.min()) < 0:
        raise ValueError(f"repeats must be non-negative, got a minimum of {int(repeats.min())}")
    return RepeatRelevance.apply(src, repeats.to(src.device), dim)


# -------------------------------------------------------------------- activation
class ReLURelevance(ReLUFunction):
    r"""Relevance through ReLU: :math:`R_{in} = R_{out}` where the unit is active, else lost.
    The forward, ``max(x, 0)`` with its output saved, is :class:`lrp_lib.core.guided.ReLUFunction`."""

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
