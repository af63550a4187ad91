"""Plain scatter reductions on PyTorch's own kernels, with torch_scatter's conventions.

``scatter_add(src, index, dim=0, dim_size=None)`` groups the slices of ``src`` along ``dim``
by ``index`` and reduces each group.  ``index`` is either 1-D (one group id per slice of
``src`` along ``dim``) or has the shape of ``src``.  ``dim_size`` is the number of groups;
by default ``index.max() + 1``.  Groups that receive nothing are zero.

These are ordinary differentiable functions (autograd gives the true gradient).  The
relevance versions in :mod:`lrp_lib.teach.ops` reuse them for their forward pass, and the graph
layers use them outside the relevance mode.  torch-scatter is not needed; where it is
installed the tests check these against it.
"""
from __future__ import annotations

import torch
from torch import Tensor

from lrp_lib.core.validation import check_index_dtype

__all__ = ["scatter_add", "scatter_mean", "scatter_max", "check_index", "broadcast_index", "check_tensor",
           "check_linear"]


def normalize_dim(dim: int, ndim: int, name: str = "dim") -> int:
    """Return ``dim`` as a non-negative axis of a tensor with ``ndim`` dimensions."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{name}={dim} is out of range for a tensor with {ndim} dimension(s)")
    return dim % max(ndim, 1)


def check_index(index: Tensor, size: int | None, name: str = "index") -> Tensor:
    """``index`` as torch.long, after a clear error unless it is an integer tensor (torch.long,
    or torch.int32 as PyG accepts) with values in ``[0, size)``."""
    index = check_index_dtype(index, name)
    if index.numel() == 0:
        return index
    low, high = int(index.min()), int(index.max())
    if low < 0:
        raise IndexError(f"{name} contains the negative value {low}; indices must be >= 0")
    if size is not None and high >= size:
        raise IndexError(f"{name} contains {high}, out of range for size {size}")
    return index


def check_tensor(x, name: str, floating: bool = True) -> Tensor:
    """``x`` itself if it is a tensor (of a floating dtype unless ``floating=False``); else a
    TypeError naming ``name``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating point tensor, got {x.dtype}")
    return x


def check_linear(x, weight, bias) -> None:
    """Clear errors for the arguments of a linear map ``x @ weight.T + bias``."""
    check_tensor(x, "x")
    check_tensor(weight, "weight")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D (out_features, in_features), got shape {tuple(weight.shape)}")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x has {x.shape[-1] if x.dim() else 0} features in its last dimension but weight "
            f"expects in_features={weight.shape[1]} (x {tuple(x.shape)}, weight {tuple(weight.shape)})"
        )
    if bias is not None:
        check_tensor(bias, "bias")
        if bias.shape != (weight.shape[0],):
            raise ValueError(
                f"bias must have shape ({weight.shape[0]},) to match weight's out_features, got {tuple(bias.shape)}"
            )


def broadcast_index(index: Tensor, src: Tensor, dim: int) -> Tensor:
    """Expand a 1-D ``index`` along ``dim`` to the shape of ``src`` (a view, no copy)."""
    if index.dim() == 1 and src.dim() > 1:
        if index.numel() != src.shape[dim]:
            raise ValueError(
                f"index has {index.numel()} entries but src has size {src.shape[dim]} along dim={dim}"
            )
        shape = [1] * src.dim()
        shape[dim] = -1
        return index.view(shape).expand_as(src)
    if index.shape != src.shape:
        raise ValueError(
            f"index must be 1-D with src.shape[dim] entries or have the shape of src; "
            f"got index {tuple(index.shape)} and src {tuple(src.shape)} (dim={dim})"
        )
    return index


def _prepare(src: Tensor, index: Tensor, dim: int, dim_size: int | None):
    """Check the arguments; return (dim, expanded index, output shape)."""
    if not isinstance(src, Tensor):
        raise TypeError(f"src must be a torch.Tensor, got {type(src).__name__}")
    if not src.is_floating_point():
        raise TypeError(f"src must be a floating point tensor, got {src.dtype}")
    if src.dim() == 0:
        raise ValueError("src must have at least one dimension to scatter along")
    dim = normalize_dim(dim, src.dim())
    if dim_size is not None and (not isinstance(dim_size, int) or dim_size < 0):
        raise ValueError(f"dim_size must be a non-negative int or None, got {dim_size!r}")
    index = check_index(index, dim_size)
    if index.device != src.device:
        raise ValueError(f"index is on {index.device} but src is on {src.device}")
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    idx = broadcast_index(index, src, dim)
    shape = list(src.shape)
    shape[dim] = dim_size
    return dim, idx, shape


def scatter_add(src: Tensor, index: Tensor, dim: int = 0, dim_size: int | None = None) -> Tensor:
    """Sum the slices of ``src`` that share a group: ``out[j] = sum_{i: index[i]=j} src[i]``."""
    dim, idx, shape = _prepare(src, index, dim, dim_size)
    return src.new_zeros(shape).scatter_add(dim, idx, src)


def scatter_count(index: Tensor, src: Tensor, dim: int, dim_size: int) -> Tensor:
    """Number of elements in each group, broadcastable against the scatter output.

    ``index`` is the caller's index (1-D, or already the shape of ``src``).
    """
    if index.dim() == 1:
        count = torch.zeros(dim_size, dtype=src.dtype, device=src.device)
        count.index_add_(0, index, torch.ones_like(index, dtype=src.dtype))
        shape = [1] * src.dim()
        shape[dim] = dim_size
        return count.view(shape)
    shape = list(src.shape)
    shape[dim] = dim_size
    return src.new_zeros(shape).scatter_add_(dim, index, torch.ones_like(src))


def scatter_mean(src: Tensor, index: Tensor, dim: int = 0, dim_size: int | None = None) -> Tensor:
    """Average the slices of ``src`` per group: ``out[j] = mean_{i: index[i]=j} src[i]`` (0 if empty)."""
    dim, idx, shape = _prepare(src, index, dim, dim_size)
    sums = src.new_zeros(shape).scatter_add(dim, idx, src)
    count = scatter_count(index.long() if index.dim() == 1 else idx, src, dim, shape[dim])
    return sums / count.clamp(min=1)


def scatter_max(
    src: Tensor, index: Tensor, dim: int = 0, dim_size: int | None = None
) -> tuple[Tensor, Tensor]:
    """Maximum per group and its position: ``(out, argmax)``.

    ``out[j] = max_{i: index[i]=j} src[i]`` and ``argmax[j]`` the position ``i`` along ``dim``
    that attains it; among ties, the last one.  An empty group has ``out = 0`` and
    ``argmax = src.size(dim)``, as in torch_scatter.
    """
    dim, idx, shape = _prepare(src, index, dim, dim_size)
    with torch.no_grad():
        best = src.new_zeros(shape).scatter_reduce(dim, idx, src, reduce="amax", include_self=False)
        n = src.shape[dim]
        pos_shape = [1] * src.dim()
        pos_shape[dim] = n
        positions = torch.arange(n, device=src.device).view(pos_shape).expand_as(src)
        is_max = src == best.gather(dim, idx)
        candidates = torch.where(is_max, positions, torch.full_like(positions, -1))
        argmax = torch.full(shape, -1, dtype=torch.long, device=src.device)
        argmax = argmax.scatter_reduce(dim, idx, candidates, reduce="amax", include_self=True)
        empty = argmax < 0
    # Read the maxima back through the winners, so that the gradient reaches the winner only
    # (as torch_scatter's does), never an even split among ties.
    out = src.gather(dim, argmax.clamp(min=0)) if n > 0 else src.new_zeros(shape)
    out = torch.where(empty, torch.zeros_like(out), out)
    argmax = torch.where(empty, torch.full_like(argmax, n), argmax)
    return out, argmax
