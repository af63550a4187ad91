"""Messages recomputed in backward instead of kept: :class:`Recipe`.

A scatter (PyG's sum aggregation) splits each output over its messages in proportion,
:math:`R_{src} = src \\odot \\mathrm{gather}(R / \\mathrm{stab}(z))`, so its backward needs the messages
``src``, one row per edge.  Kept from the forward, they hold :math:`E \\times F` values per layer
until the backward reaches that layer, where the gradient keeps none.  But a message is usually a
selection of a node tensor scaled by a constant (GCN: ``edge_weight.view(-1, 1) * x.index_select(0,
j)``), and the node tensor is kept anyway: recomputing the messages from it in backward gives the same
values (the same operations on the same tensors) and keeps :math:`N \\times F` values instead.

The mode notes, on the result of a row selection (``index_select``, ``__getitem__``) of a marked
tensor and of a product or quotient of a marked tensor and a constant, how to compute it again from
its input (:func:`note`); a scatter asks :func:`recipe_for` its source and, if that leads back to a
smaller tensor, keeps the :class:`Recipe` instead of the source (``RelevanceMode(recompute=True)``,
``LRPExplainer(recompute=True)``; off by default).  The trade, on a 3-layer GCN (hidden 32, ten edges per
node): at 30,000 nodes the peak memory of one relevance pass falls from 302 to 166 MiB above the start
(the gradient's: 137), while the pass takes 1.06 (700 nodes) to 1.4 (30,000) times as long: the
selection and scaling run again, and the allocator is not spared its page faults.  A tensor that the model changes in
place afterwards would recompute differently: the mode computes the recipes on it before such a
change (:meth:`Recipe.keep`), and a change that the mode does not see is an error in backward, never a
wrong value.
"""
from __future__ import annotations

from typing import Callable

from torch import Tensor

__all__ = ["Recipe", "note", "note_selection", "recipe_for", "SELECTIONS", "SCALINGS"]

#: Selections whose result is recomputed from their input.
SELECTIONS = frozenset({"index_select", "__getitem__"})
#: Products and quotients by a constant (the identity rule), recomputed from their marked input.
SCALINGS = frozenset({"mul", "__mul__", "__rmul__", "multiply", "div", "__truediv__", "true_divide", "divide"})
_STEPS = 4  # the longest chain followed back


def note(out, source: Tensor, fn: Callable[[Tensor], Tensor]) -> None:
    """Note that ``out`` is ``fn(source)`` (deterministic, no autograd needed to recompute it)."""
    if isinstance(out, Tensor) and isinstance(source, Tensor):
        out._lrp_recipe = (source, fn)


def note_selection(func, out, args: tuple, kwargs: dict) -> None:
    """Note that ``out = func(*args, **kwargs)``, a selection of ``args[0]``, is recomputed from it."""
    rest = args[1:]  # (not args itself: the function would keep args[0] when a recipe does not)
    note(out, args[0], lambda t: func(t, *rest, **kwargs))


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
        """Compute the tensor now (its root is about to change in place) and keep it."""
        if self.value is None:
            self.value = self.compute()

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
        t, fn = noted
        fns.append(fn)
    if not fns or t.numel() >= src.numel() or t.is_inference():
        return None
    recipe = Recipe(t, fns[::-1])
    registry.setdefault(id(t), []).append(recipe)
    return recipe
