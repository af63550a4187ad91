"""The rule families of :class:`~lrp_lib.explain.function_mode.RelevanceMode`: the identity rule,
the epsilon rule of a map without weights, the composite's rule of a weighted map, the proportional
split of a sum, the product rules and the blocked operation.  The handlers of
:mod:`lrp_lib.explain.handlers` compute each torch function through one of them; the mode
inherits them from :class:`RuleFamilies`, which reads the mode's composite, tally, marks and
labels (``composite``, ``tally``, ``is_marked``, ``mark``, ``gate``, ``is_gate``, ``rule_for``,
``module_label``)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from lrp_lib.core.rules import LinearMap
from lrp_lib.explain.primitives import (AddRelevance, BilinearRelevance, BlockedRelevance, IdentityRelevance,
                                        JoinRelevance, LinearMapRelevance, NormAffineRelevance, NormaliseRelevance,
                                        ProductRelevance, SoftmaxRelevance, UniformProductRelevance,
                                        linear_relevance)
from lrp_lib.explain.recompute import SCALINGS, note, scaling_vjp

__all__ = ["RuleFamilies"]


class RuleFamilies:
    """The rule families, as methods of the mode (see the module docstring)."""

    def identity(self, func, args, kwargs):
        kwargs = {k: (False if k == "inplace" else v) for k, v in kwargs.items()}
        pos = [i for i, a in enumerate(args) if self.is_marked(a)]
        keys = [k for k, v in kwargs.items() if self.is_marked(v)]
        if len(pos) + len(keys) != 1:
            return self.blocked(func, getattr(func, "__name__", "?"), args, kwargs)
        if pos:  # (the function holds the other arguments, not x: a recipe keeps it, explain.recompute)
            i = pos[0]
            x, before, after = args[i], args[:i], args[i + 1:]

            def fn(t):
                return func(*before, t, *after, **kwargs)
        else:
            k = keys[0]
            x, rest = kwargs[k], {name: v for name, v in kwargs.items() if name != k}

            def fn(t):
                return func(*args, **{**rest, k: t})
        out = IdentityRelevance.apply(x, fn)
        name = getattr(func, "__name__", None)
        if name in SCALINGS:  # a product or quotient by a constant
            note(out, x, fn, scaling_vjp(name, args, kwargs, pos[0], out) if pos else None)
        return out

    def linear(self, x: Tensor, fn: Callable, vjp: Callable | None, label: str, source=None, value=None,
               constant=None):
        """A map linear in ``x`` (plus constants) with no weight: the epsilon rule.  ``vjp`` (the
        handlers' own) returns a new tensor each call; ``source``: ``x`` recomputed in backward
        (:class:`lrp_lib.explain.recompute.Recipe`); ``value``: ``fn(x)``, computed already; ``constant``:
        the constant term ``fn(0)`` where the handler knows it (``None``: not known; the primitives' backward
        does not need it)."""
        return linear_relevance(x, fn, vjp, self.composite.epsilon, label, self.tally, self.composite.bias, True,
                                source, value)

    def weighted(self, x: Tensor, weight: Tensor, bias: Tensor | None, fn: Callable, vjp: Callable | None,
                 op: str, rowwise: bool = False):
        """A map linear in ``x`` and in a constant ``weight``: the composite's rule for that weight.
        ``rowwise``: each output row is the map of the same row of ``x`` (``F.linear``, ``x @ W`` on a
        matrix), so where the mode's ``live_rows`` names the only rows that the explained outputs read
        (:meth:`lrp_lib.explain.layer_pruning.LayerPlan.live_rows`), the map runs on those rows and the
        others are zero."""
        if rowwise and self.live_rows is not None and x.dim() == 2:
            rows = self.live_rows(x.shape[0])
            if rows is not None:
                tally = self.tally
                if getattr(tally, "rows_wanted", False):  # the amounts count at the rows they were kept on
                    self.tally = _OnRows(tally, rows, x.shape[0])
                try:
                    part = self.weighted(x.index_select(0, rows), weight, bias, fn, vjp, op)
                finally:
                    self.tally = tally
                return part.new_zeros((x.shape[0], *part.shape[1:])).index_copy(0, rows, part)
        rule, label = self.rule_for(weight)
        w = weight.detach()
        b = None if bias is None else bias.detach()
        if rule is None:  # a data constant, not a parameter
            return self.linear(x, lambda t: fn(t, w, b), None if vjp is None else (lambda v: vjp(v, x, w)),
                               f"{op} in {self.module_label()}")
        return LinearMapRelevance.apply(x, w, b, LinearMap(fn, vjp, fresh_vjp=True), rule, f"{op} in {label}",
                                        self.tally, self.composite.bias, False)

    def sum_terms(self, a, b, ca: float = 1.0, cb: float = 1.0, op: str = "add"):
        """``ca * a + cb * b`` (numbers allowed): each marked term gets its proportional share."""
        ma, mb = self.is_marked(a), self.is_marked(b)
        ref = a if isinstance(a, Tensor) else b
        ta = a if isinstance(a, Tensor) else torch.as_tensor(a, dtype=ref.dtype, device=ref.device)
        tb = b if isinstance(b, Tensor) else torch.as_tensor(b, dtype=ref.dtype, device=ref.device)
        if not ma:
            ta = ta.detach()
        if not mb:
            tb = tb.detach()
        if ca != 1.0:
            ta = self.elementwise(ta, lambda t: t * ca) if ma else ta * ca
        if cb != 1.0:
            tb = self.elementwise(tb, lambda t: t * cb) if mb else tb * cb
        gate = (ma and not mb and self.is_gate(a)) or (mb and not ma and self.is_gate(b))
        if gate:  # 1 - z of a gate z is a gate too (GRU's update gate): it passes relevance like one
            marked, const = (ta, tb) if ma else (tb, ta)
            return self.gate(self.elementwise(marked, lambda t: t + const))
        if not (ma and mb) and not self.composite.bias:  # the constant term takes no share
            marked, const = (ta, tb) if ma else (tb, ta)
            return self.elementwise(marked, lambda t: t + const)
        label = op if (ma and mb) else f"{op} of a constant in {self.module_label()}"
        return AddRelevance.apply(ta, tb, (ma, mb), self.composite.epsilon, label, self.tally)

    def product(self, a: Tensor, b: Tensor):
        ga, gb = self.is_gate(a), self.is_gate(b)
        if self.composite.attention == "cp" and ga != gb:
            weights = (0.0, 1.0) if ga else (1.0, 0.0)
        else:
            weights = (0.5, 0.5)
        return ProductRelevance.apply(a, b, weights)

    def elementwise(self, x: Tensor, fn: Callable):
        """``fn(x)``, elementwise in ``x``: the identity rule."""
        return IdentityRelevance.apply(x, fn)

    def bilinear(self, a: Tensor, b: Tensor, weights: tuple, label: str):
        """``a @ b``, both marked: each product term split uniformly (``weights``: the share of each)."""
        return BilinearRelevance.apply(a, b, weights, self.composite.epsilon, label, self.tally)

    def normalise(self, a: Tensor, b: Tensor):
        """``a / b``, both marked: the denominator held constant."""
        return NormaliseRelevance.apply(a, b)

    def uniform_product(self, x: Tensor, fn: Callable, counts: Tensor, expand: Callable, label: str):
        """``fn(x)`` a product of ``counts`` factors of ``x`` per output: each gets ``R / n``."""
        return UniformProductRelevance.apply(x, fn, counts, expand, label, self.tally)

    def join(self, dim: int, marked: tuple, label: str, joined: list):
        """``torch.cat(joined, dim)`` of marked tensors and constants: each constant keeps its slice."""
        return JoinRelevance.apply(dim, marked, label, self.tally, *joined)

    def softmax(self, x: Tensor, dim: int, label: str):
        """A dense softmax: AttnLRP's rule."""
        return SoftmaxRelevance.apply(x, dim, label, None)

    def norm_affine(self, x: Tensor, fn: Callable, beta: Tensor | None, label: str):
        """A normalisation with an affine part (``fn(x) = gamma * x_hat + beta``): the identity through
        the normalisation, the affine part split with ``beta`` keeping its share."""
        return NormAffineRelevance.apply(x, fn, beta, self.composite.epsilon, label, self.tally)

    def blocked(self, func, name, args, kwargs):
        with torch.no_grad():
            out = func(*args, **kwargs)
        flat = out if isinstance(out, (tuple, list)) else (out,)
        floats = [i for i, t in enumerate(flat) if isinstance(t, Tensor) and t.is_floating_point()]
        if not floats:
            return out
        marked = [a for a in args if self.is_marked(a)] + [b for a in args if isinstance(a, (list, tuple))
                                                          for b in a if self.is_marked(b)]
        marked += [v for v in kwargs.values() if self.is_marked(v)]
        label = f"{name} in {self.module_label()}"
        res = BlockedRelevance.apply(label, self.tally, len(floats), *[flat[i] for i in floats], *marked)
        res = res if isinstance(res, tuple) else (res,)
        self.mark(res)
        if not isinstance(out, (tuple, list)):
            return res[0]
        items = list(flat)
        for i, r in zip(floats, res):
            items[i] = r
        return type(out)(items) if not hasattr(out, "_fields") else type(out)(*items)


class _OnRows:
    """A tally that splits amounts by rows, seen from a map computed on rows ``rows`` of ``n``-row
    tensors: the amounts' rows are counted at those rows."""
    rows_wanted = True

    def __init__(self, tally, rows: Tensor, n: int):
        self.tally, self.rows, self.n = tally, rows, n

    def absorb(self, label, amount):
        self.tally.absorb(label, amount)

    def absorb_rows(self, label, amount, plus=(), minus=()):
        self.tally.absorb_rows(label, amount, plus, minus, rows=(self.rows, self.n))

    def block(self, label, amount):
        self.tally.block(label, amount)
