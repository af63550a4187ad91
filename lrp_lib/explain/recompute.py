"""Messages not kept for backward: :func:`linear_chain` and :class:`Recipe`.

A scatter (PyG's sum aggregation) splits each output over its messages in proportion,
:math:`R_{src} = src \\odot \\mathrm{gather}(R / \\mathrm{stab}(z))`, so its backward needs the messages
``src``, one row per edge.  Kept from the forward, they hold :math:`E \\times F` values per layer
until the backward reaches that layer, where the gradient keeps none.  But a message is usually a
selection of a node tensor scaled by a constant (GCN: ``edge_weight.view(-1, 1) * x.index_select(0,
j)``), and relevance passes unchanged through a selection and through a product with a constant (the
identity rule).  The scatter's relevance then reaches the node tensor :math:`x` as

.. math::  R_x = x \\odot J^\\top \\big(R / \\mathrm{stab}(z)\\big), \\qquad J^\\top v
           = \\mathrm{index\\_add}_j\\big(c \\odot \\mathrm{gather}_i(v)\\big),

the epsilon rule of the whole map :math:`x \\mapsto \\mathrm{scatter}_i(c \\odot x_j)`: the same
relevance (up to rounding) for the cost of the gradient's backward, keeping :math:`x` instead of the
messages.  The mode notes, on the result of a row selection (``index_select``, ``__getitem__``) of a
marked tensor and of a product or quotient of a marked tensor and a constant, how to compute it
again from its input and, where it has one, its VJP (:func:`note`); a scatter into a constant asks
:func:`linear_chain` for a chain of such steps back to a smaller tensor and, if there is one, applies
the epsilon rule to the composed map.  A step without a VJP (an edge hook's view of the messages,
when edge relevance is recorded) ends the chain.

Otherwise the messages are kept, or, with ``RelevanceMode(recompute=True)`` (``LRPExplainer(recompute=True)``),
the scatter keeps a :class:`Recipe` (:func:`recipe_for`) that computes them again in backward.  A
tensor that the model changes in place afterwards would recompute differently: the mode computes the
recipes on it, or copies a chain's root, before such a change (:meth:`Recipe.keep`), and a change that
the mode does not see is an error in backward, never a wrong value.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = ["Recipe", "note", "note_selection", "scaling_vjp", "recipe_for", "linear_chain", "SELECTIONS", "SCALINGS"]

#: Selections whose result is recomputed from their input.
SELECTIONS = frozenset({"index_select", "__getitem__"})
#: Products and quotients by a constant (the identity rule), recomputed from their marked input.
SCALINGS = frozenset({"mul", "__mul__", "__rmul__", "multiply", "div", "__truediv__", "true_divide", "divide"})
_STEPS = 4  # the longest chain followed back


def note(out, source: Tensor, fn: Callable[[Tensor], Tensor], vjp: Callable[[Tensor], Tensor] | None = None) -> None:
    """Note that ``out`` is ``fn(source)`` (deterministic, no autograd needed to recompute it); ``vjp``
    (where known): :math:`J^\\top v` of ``fn``, shaped like ``source``; it may overwrite ``v``."""
    if isinstance(out, Tensor) and isinstance(source, Tensor):
        out._lrp_recipe = (source, fn, vjp)


def note_selection(func, out, args: tuple, kwargs: dict) -> None:
    """Note that ``out = func(*args, **kwargs)``, a selection of ``args[0]``, is recomputed from it
    (and, for rows picked by a 1-D integer index, its VJP: the rows added back, as autograd does)."""
    rest = args[1:]  # (not args itself: the function would keep args[0] when a recipe does not)
    note(out, args[0], lambda t: func(t, *rest, **kwargs), _selection_vjp(func, args, kwargs))


def _selection_vjp(func, args: tuple, kwargs: dict):
    name, x = getattr(func, "__name__", ""), args[0]
    if name == "index_select" and not kwargs and len(args) == 3:
        dim, index = args[1], args[2]
    elif name == "__getitem__" and len(args) == 2 and not kwargs:
        dim, index = 0, args[1]
    else:
        return None
    if not (isinstance(index, Tensor) and index.dim() == 1 and not index.is_floating_point()
            and index.dtype != torch.bool and isinstance(dim, int)):
        return None
    shape = x.shape
    if name == "__getitem__":  # autograd's own backward of x[index], negative indices included
        return lambda v: v.new_zeros(shape).index_put_((index,), v, accumulate=True)
    return lambda v: v.new_zeros(shape).index_add_(dim, index, v)


def scaling_vjp(name: str, args: tuple, kwargs: dict, i: int, out: Tensor):
    """The VJP of ``out``, a product (or quotient) of ``args[i]`` and a constant (``name`` in
    :data:`SCALINGS`), with respect to ``args[i]``, written into its argument (:func:`linear_chain`
    passes it a tensor of its own); None where the constant broadcasts ``args[i]`` to another shape
    or dtype, or divides by it."""
    x = args[i]
    if kwargs or len(args) != 2 or out.shape != x.shape or out.dtype != x.dtype:
        return None
    c = args[1 - i]
    if isinstance(c, Tensor) and (c.requires_grad or c.is_complex()):
        return None
    if name in ("mul", "__mul__", "__rmul__", "multiply"):
        return lambda v: v.mul_(c)
    return (lambda v: v.div_(c)) if i == 0 else None


class Recipe:
    """A tensor kept as its ``root`` and the functions that compute it from the root, in order."""

    def __init__(self, root: Tensor, fns: list):
        self.root, self.fns, self.version, self.value = root, fns, root._version, None

    def compute(self) -> Tensor:
        t = self.root
        for fn in self.fns:
            t = fn(t)
        return t

    def keep(self) -> None:
        """Compute the tensor now (its root is about to change in place) and keep it (a copy of the
        root itself, for a recipe of no step)."""
        if self.value is None:
            self.value = self.compute() if self.fns else self.root.clone()

    def get(self) -> Tensor:
        if self.value is not None:
            return self.value
        if self.root._version != self.version:
            raise RuntimeError(
                "a tensor that messages were computed from was changed in place outside lrp_lib's "
                "interception (under torch.no_grad() or through .data); its messages cannot be recomputed: "
                "change it out of place")
        return self.compute()


def recipe_for(src: Tensor, registry: dict) -> Recipe | None:
    """A :class:`Recipe` of ``src`` from a tensor with fewer elements (None: none noted), registered
    under its root's id in ``registry`` (so that the mode can keep it before the root changes)."""
    fns, t = [], src
    for _ in range(_STEPS):
        noted = getattr(t, "_lrp_recipe", None)
        if noted is None:
            break
        t, fn, _ = noted
        fns.append(fn)
    if not fns or t.numel() >= src.numel() or t.is_inference():
        return None
    recipe = Recipe(t, fns[::-1])
    registry.setdefault(id(t), []).append(recipe)
    return recipe


def linear_chain(src: Tensor, registry: dict):
    """``(root, compute, vjp)`` where ``src = compute(root)`` through noted steps that all have a VJP
    (row selections, products with constants), ``root`` having fewer elements and ``vjp`` the chain's
    :math:`J^\\top` (it may overwrite its argument); None where a step has no VJP (an edge hook's view
    of the messages, a mask) or nothing leads to a smaller tensor.  The root is kept as a
    :class:`Recipe` of no step, registered in ``registry`` like :func:`recipe_for`'s, so that a change
    in place copies it first."""
    fns, vjps, t = [], [], src
    for _ in range(_STEPS):
        noted = getattr(t, "_lrp_recipe", None)
        if noted is None:
            break
        t, fn, vjp = noted
        if vjp is None:
            return None
        fns.append(fn)
        vjps.append(vjp)
    if not fns or t.numel() >= src.numel() or t.is_inference():
        return None
    fns.reverse()

    def compute(root):
        for fn in fns:
            root = fn(root)
        return root

    def chain_vjp(v):
        for vjp in vjps:
            v = vjp(v)
        return v
    root = Recipe(t, [])
    registry.setdefault(id(t), []).append(root)
    return root, compute, chain_vjp
