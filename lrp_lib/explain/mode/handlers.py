"""The relevance handler of each torch function with a rule of its own: :data:`HANDLERS`.

A handler ``handler(mode, func, args, kwargs)`` computes ``func(*args, **kwargs)`` through the rule family of
:class:`~lrp_lib.explain.mode.forward.ForwardMode` that fits it (recurrent layers and attention:
:mod:`lrp_lib.explain.mode.recurrent`)."""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["HANDLERS", "arg"]


def arg(args, kwargs, i, name, default=None):
    """The argument ``name``, passed by keyword or at position ``i``; ``default`` where it is not passed."""
    return kwargs[name] if name in kwargs else args[i] if len(args) > i else default


def _linear(mode, func, args, kwargs):
    """``F.linear`` and the convolutions: the composite's rule for the weight (blocked: an input-dependent one)."""
    x, weight, bias = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "weight"), arg(args, kwargs, 2, "bias")
    if mode.is_marked(weight) or mode.is_marked(bias):
        name = "linear with an input-dependent weight" if func.__name__ == "linear" else func.__name__
        return mode.blocked(func, name, args, kwargs)
    rest, extra = args[3:], {k: v for k, v in kwargs.items() if k not in ("input", "weight", "bias")}
    return mode.weighted(x, weight, bias, lambda t, w, b: func(t, w, b, *rest, **extra))


def _matmul(mode, func, args, kwargs):
    a, b = (args[1], args[0]) if func is torch.Tensor.__rmatmul__ else (args[0], args[1])
    ma, mb = mode.is_marked(a), mode.is_marked(b)
    if ma and mb:
        ga, gb = mode.is_gate(a), mode.is_gate(b)
        weights = ((0.0, 1.0) if ga else (1.0, 0.0)) if mode.composite.attention == "cp" and ga != gb else (0.5, 0.5)
        if a.is_sparse or b.is_sparse:
            return mode.blocked(func, "sparse matmul of two input-dependent tensors", args, kwargs)
        return mode.bilinear(a, b, weights)
    plain = torch.matmul if func in (torch.Tensor.__matmul__, torch.Tensor.__rmatmul__) else func
    if ma:
        return mode.weighted(a, b, None, lambda x, w, _: plain(x, w))
    return mode.weighted(b, a, None, lambda x, w, _: plain(w, x))


def _sparse_mm(mode, func, args, kwargs):
    """``torch.sparse.mm(adj, x, reduce)`` with a constant sparse ``adj`` (PyG's ``spmm`` of an ``adj_t``), as the
    scatter of the same messages: a sum under the epsilon rule of
    :meth:`~lrp_lib.explain.mode.forward.ForwardMode.linear`; a mean that sum divided by each row's number of
    entries (the identity); ``max`` and ``min``: the winner takes all, the gradient's own rule."""
    adj, x, reduce = args[0], args[1], arg(args, kwargs, 2, "reduce", "sum")
    if mode.is_marked(adj) or not mode.is_marked(x):
        return mode.blocked(func, "sparse.mm of an input-dependent sparse matrix", args, kwargs)
    if reduce in ("max", "min", "amax", "amin"):
        return func(*args, **kwargs)
    if reduce not in ("sum", "mean"):
        return mode.blocked(func, f"sparse.mm ({reduce})", args, kwargs)
    total = mode.linear(x, lambda t: func(adj, t), constant=torch.zeros((), dtype=x.dtype, device=x.device))
    if reduce == "sum":
        return total
    count = adj.crow_indices().diff().clamp(min=1).view(-1, 1).to(x.dtype)  # (torch reduces CSR matrices only)
    return mode.elementwise(mode.mark(total), lambda t: t / count)


def _addmm(mode, func, args, kwargs):
    """``beta * input + alpha * (mat1 @ mat2)``: the product by the weight's rule, then the sum in
    proportion to its two terms (a constant ``input`` is a bias and keeps its share)."""
    inp, a, b = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "mat1"), arg(args, kwargs, 2, "mat2")
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    ma, mb = mode.is_marked(a), mode.is_marked(b)
    if ma and mb:
        return mode.blocked(func, "addmm of two input-dependent matrices", args, kwargs)
    if not (ma or mb):
        return mode.sum_terms(inp, (torch.mm(a, b) * alpha).detach(), beta, 1.0)
    part = mode.mark(_matmul(mode, torch.matmul, (a, b), {}))
    if alpha != 1:
        part = mode.mark(mode.elementwise(part, lambda t: t * alpha))
    return mode.sum_terms(part, inp, 1.0, beta)


def _einsum(mode, func, args, kwargs):
    eq, ops = args[0], list(args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:])
    if len(ops) != 2 or sum(map(mode.is_marked, ops)) != 1:
        return mode.blocked(func, "einsum of several input-dependent operands", args, kwargs)
    return _matmul(mode, lambda a, b: torch.einsum(eq, a, b), ops, {})  # (the other operand is the weight)


def _reduction(mode, func, args, kwargs):
    """sum, nansum, cumsum and the average pools (linear in their one input): the epsilon rule."""
    return mode.linear(args[0], lambda t: func(t, *args[1:], **kwargs), constant=0.0)


def _mean(mode, func, args, kwargs):
    """A mean is a sum (split in proportion, stabilised at the sum) divided by a count (identity),
    as PyG's mean aggregation computes it, so both give the same relevance."""
    x = args[0]
    if kwargs.get("dtype") is not None:
        return _reduction(mode, func, args, kwargs)
    total = mode.mark(mode.linear(x, lambda t: torch.sum(t, *args[1:], **kwargs), constant=0.0))
    # (from the sizes: a graph captured with symbolic sizes then holds no sym_numel, which torch.compile refuses)
    count = math.prod(x.shape) // max(math.prod(total.shape), 1) if x.numel() else 1
    return mode.elementwise(total, lambda t: t / count)


def _add_into(mode, func, args, kwargs):
    """``scatter_add`` / ``index_add``: the epsilon rule on what is added at ``index``, then its sum with
    ``input`` in proportion to the two terms."""
    scatter = func.__name__ == "scatter_add"
    inp, dim, index = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "dim"), arg(args, kwargs, 2, "index")
    src = arg(args, kwargs, 3, "src" if scatter else "source")
    alpha = None if scatter else kwargs.get("alpha", args[4] if len(args) > 4 else 1)

    def add(into, s):
        return into.scatter_add(dim, index, s) if scatter else into.index_add(dim, index, s, alpha=alpha)
    mi, ms = mode.is_marked(inp), mode.is_marked(src)
    if not ms:
        return mode.sum_terms(inp, add(torch.zeros_like(inp.detach()), src.detach()))
    zeros = inp.detach() if not mi else torch.zeros_like(inp.detach())
    out = mode.linear(src, lambda s: add(zeros, s), constant=zeros)
    return mode.sum_terms(inp, mode.mark(out)) if mi else out


def _scatter_reduce(mode, func, args, kwargs):
    inp, dim, index, src = (arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "dim"),
                            arg(args, kwargs, 2, "index"), arg(args, kwargs, 3, "src"))
    reduce, include_self = arg(args, kwargs, 4, "reduce"), arg(args, kwargs, 5, "include_self", True)
    if reduce in ("amax", "amin"):
        return func(*args, **kwargs)
    const = inp.detach()
    if reduce in ("sum", "mean") and mode.is_marked(src) and not mode.is_marked(inp):
        return mode.linear(src, lambda s: const.scatter_reduce(dim, index, s, reduce, include_self=include_self))
    if reduce == "prod" and mode.is_marked(src) and not mode.is_marked(inp) and index.shape == src.shape:
        # each group's product: its factors share its relevance uniformly; the constant start value takes none
        counts = torch.zeros(const.shape, dtype=torch.long, device=const.device).scatter_add(
            dim, index, torch.ones_like(index))
        return mode.uniform_product(
            src, lambda s: const.scatter_reduce(dim, index, s, "prod", include_self=include_self), counts)
    return mode.blocked(func, f"scatter_reduce ({reduce})", args, kwargs)


def _add(mode, func, args, kwargs):
    """``add``, ``sub`` and their reflected forms: ``a + alpha * b`` or ``a - alpha * b``."""
    a, b = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other")
    name = func.__name__
    if name in ("__radd__", "__rsub__", "rsub"):
        a, b = b, a
    alpha = kwargs.get("alpha", 1)
    return mode.sum_terms(a, b, 1.0, -alpha if "sub" in name else alpha)


def _mul(mode, func, args, kwargs):
    a, b = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other")
    return mode.product(a, b) if mode.is_marked(a) and mode.is_marked(b) else mode.identity(func, args, kwargs)


def _div(mode, func, args, kwargs):
    if kwargs.get("rounding_mode") is not None:
        return mode.blocked(func, "div with rounding_mode", args, kwargs)
    a, b = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other")
    if func.__name__ == "__rdiv__":  # (Tensor.__rtruediv__, ``c / x``)
        a, b = b, a
    if mode.is_marked(a) and mode.is_marked(b):
        return mode.gate(mode.normalise(a, b))
    if mode.is_marked(b):  # c / x: the identity rule of x (not homogeneous: the gradient would flip the sign)
        return mode.elementwise(b, lambda _: func(*args, **kwargs))
    return mode.identity(func, args, kwargs)


def _prod(mode, func, args, kwargs):
    """``torch.prod(x, dim, keepdim=False)``: the uniform rule over the factors along ``dim`` (all elements
    without ``dim``), :meth:`~lrp_lib.explain.mode.forward.ForwardMode.uniform_product`."""
    x, dim, keepdim = args[0], arg(args, kwargs, 1, "dim"), arg(args, kwargs, 2, "keepdim", False)
    if kwargs.get("dtype") is not None:
        return mode.blocked(func, "prod with dtype", args, kwargs)
    n = x.numel() if dim is None else x.shape[dim]  # (the same for every output)
    return mode.uniform_product(x, torch.prod if dim is None else lambda t: torch.prod(t, dim, keepdim),
                                torch.full((), n, dtype=torch.long, device=x.device))


def _max_min(mode, func, args, kwargs):
    """``max``/``min``: the winner takes all; ties split evenly (as ``amax`` and PyG's max
    aggregation do), so a graph alone and in a batch get the same relevance."""
    x, dim, is_max = args[0], arg(args, kwargs, 1, "dim"), func.__name__ == "max"
    if dim is None or isinstance(dim, Tensor):  # a full reduction, or the elementwise max of two tensors
        if dim is None and len(args) == 1 and not kwargs:
            return (torch.amax if is_max else torch.amin)(x)
        return func(*args, **kwargs)
    keepdim = arg(args, kwargs, 2, "keepdim", False)
    with torch.no_grad():
        found = func(x, dim, keepdim)
    return type(found)(((torch.amax if is_max else torch.amin)(x, dim, keepdim), found.indices))


def _cat(mode, func, args, kwargs):
    """``torch.cat`` / ``torch.stack``: a copy, so relevance passes like the gradient; a joined constant (an LSTM
    state computed from biases alone, a fixed embedding) keeps its slice as a bias does
    (:meth:`~lrp_lib.explain.mode.forward.ForwardMode.join`), unless a joined tensor was detached from the
    input (then what the constants keep is left unaccounted, for the explainer's warning)."""
    tensors, dim = arg(args, kwargs, 0, "tensors"), arg(args, kwargs, 1, "dim", kwargs.get("axis", 0))
    if (kwargs.get("out") is not None or not isinstance(tensors, (list, tuple)) or not tensors
            or not all(isinstance(t, Tensor) and t.is_floating_point() for t in tensors)
            or len({(t.dtype, t.device) for t in tensors}) > 1 or not isinstance(dim, int)
            or all(mode.is_marked(t) for t in tensors) or mode.any_detached(tensors, {})):
        return func(*args, **kwargs)
    marked = tuple(mode.is_marked(t) for t in tensors)
    if func.__name__ == "stack":  # (as torch stacks: each tensor unsqueezed at dim, then joined)
        tensors = [t.unsqueeze(dim) for t in tensors]
    return mode.join(dim, marked, [t if m else t.detach() for t, m in zip(tensors, marked)])


def _softmax(mode, func, args, kwargs):
    """AttnLRP's softmax rule, :math:`R_x = x \\odot (R - s \\sum R)`: input times gradient, so the softmax
    itself (it does not conserve: what it does not pass on is left to ``relevance_residual``)."""
    x, dim = args[0], arg(args, kwargs, 1, "dim")
    if dim is None:
        return mode.blocked(func, "softmax without dim", args, kwargs)
    if kwargs.get("dtype") is not None:
        x = mode.mark(mode.elementwise(x, lambda t: t.to(kwargs["dtype"])))
    return mode.gate(torch.softmax(x, dim))


def _batch_norm(mode, func, args, kwargs):
    """Batch norm: in eval mode an affine map of each channel (the epsilon rule), in training mode (or without
    running statistics) a normalisation (:meth:`~lrp_lib.explain.mode.forward.ForwardMode.norm_affine`)."""
    if func is not F.batch_norm:
        return mode.blocked(func, "torch.batch_norm (call F.batch_norm)", args, kwargs)
    if arg(args, kwargs, 5, "training") or arg(args, kwargs, 1, "running_mean") is None:
        return _norm_affine(4, True)(mode, func, args, kwargs)  # (its bias, like instance norm's, is argument 4)
    return mode.linear(args[0], lambda t: func(t, *args[1:], **kwargs))


def _norm_affine(bias_index: int, channel: bool):
    """The handler of a layer, group or instance norm whose bias is argument ``bias_index`` (``channel``: one
    per channel, dimension 1)."""
    def handler(mode, func, args, kwargs):
        x, bias = args[0], arg(args, kwargs, bias_index, "bias")
        beta = None if bias is None else bias.detach()
        if channel and beta is not None and x.dim() > 1:  # one per channel: along dimension 1
            beta = beta.view(1, -1, *([1] * (x.dim() - 2)))
        return mode.norm_affine(x, lambda t: func(t, *args[1:], **kwargs), beta if mode.composite.bias else None)
    return handler


#: The handler of each torch function with a rule of its own, by name.
HANDLERS: dict[str, Callable] = {name: handler for names, handler in (
    ("linear conv1d conv2d conv3d", _linear), ("matmul mm bmm mv __matmul__ __rmatmul__", _matmul),
    ("addmm", _addmm), ("_sparse_mm", _sparse_mm), ("einsum", _einsum), ("mean", _mean), ("prod", _prod),
    ("sum nansum cumsum avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d",
     _reduction), ("scatter_add index_add", _add_into), ("scatter_reduce", _scatter_reduce),
    ("add __add__ __radd__ sub subtract __sub__ __rsub__ rsub", _add), ("mul multiply __mul__ __rmul__", _mul),
    ("div divide true_divide __truediv__ __rdiv__", _div), ("softmax", _softmax), ("max min", _max_min),
    ("cat concat concatenate stack", _cat), ("batch_norm", _batch_norm),
    ("layer_norm", _norm_affine(3, False)), ("group_norm", _norm_affine(3, True)),
    ("instance_norm", _norm_affine(4, True)), ("rms_norm", _norm_affine(99, False)),
) for name in names.split()}
