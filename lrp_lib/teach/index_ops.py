r"""Relevance operations that move values along an index: segment sums, means and maxima (the
aggregations of message passing) and the copies that gather node features onto edges.

Like the arithmetic ops of :mod:`lrp_lib.teach.ops` (which re-exports these), each op is a
:class:`torch.autograd.Function` whose backward is an LRP rule: the segment sum and mean split each
group's relevance in proportion to its terms, the maximum gives it to the winner, and the copies
(``index_select``, ``cat``, ``repeat_tensor``) sum the relevance of their copies, as a gradient would.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import torch
from torch import Tensor

from lrp_lib.teach import scatter as _scatter
from lrp_lib.teach.scatter import broadcast_index, check_index, check_tensor, normalize_dim
from lrp_lib.teach.share import relevance_share, warn_lost
from lrp_lib.core.validation import INDEX_DTYPES

__all__ = ["scatter_add", "scatter_mean", "scatter_max", "index_select", "cat", "repeat_tensor",
           "ScatterAddRelevance", "ScatterMeanRelevance", "ScatterMaxRelevance", "IndexSelectRelevance",
           "CatRelevance", "RepeatRelevance"]

def _as_index(index):
    """An int32 index (PyG accepts int32 edge_index) as torch.long, the dtype of torch's scatter
    kernels; anything else unchanged (lrp_lib.teach.scatter then names what is wrong with it)."""
    return index.long() if isinstance(index, Tensor) and index.dtype in INDEX_DTYPES else index



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
