r"""The rules as forward modifications: :class:`ForwardMode`, one ordinary backward.

Each rule family is a forward that keeps the operation's value and changes its gradient (:mod:`lrp_lib.core.modify`);
PyTorch's own backward then leaves :math:`t \odot \partial f/\partial t` as the relevance of every tensor :math:`t`:

* the start: the explained output :math:`f` with the start relevance :math:`R_0`, sent back as the gradient
  :math:`R_0 / f` (:func:`~lrp_lib.core.modify.share_of`);
* the node features and ``edge_attr``: input times gradient;
* the edges: messages times their gradient, summed per input edge (:mod:`~lrp_lib.explain.mode.edges`);
* an operation without a rule: a zero probe added to its output (:func:`~lrp_lib.core.modify.blocked`), whose
  gradient times the output is the relevance that reached it.

What biases, constant terms and stabilisers kept is read from one probe, ``kept`` (a one that requires grad): the
relevance that the operations which can keep relevance receive at their outputs, less what reaches their inputs,
and the amounts computed directly; each added to the forward as ``(kept - kept.detach()) * amount``, a zero.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from lrp_lib.core import modify
from lrp_lib.core.stabilizer import stabilize
from lrp_lib.explain.mode.tally import ProbeTally
from lrp_lib.explain.mode.edges import EdgeRecorder
from lrp_lib.explain.mode.function_mode import RelevanceMode

__all__ = ["ForwardMode"]


#: Elementwise functions whose output has no negative entry.
NONNEGATIVE = frozenset("relu relu6 sigmoid hardsigmoid softplus exp abs absolute square".split())


class ForwardMode(RelevanceMode):
    """:class:`~lrp_lib.explain.mode.function_mode.RelevanceMode` with every rule family (the methods below) a
    forward modification, followed by one ordinary backward (:meth:`ProbeTally.backward
    <lrp_lib.explain.mode.tally.ProbeTally.backward>` of :attr:`tally`).  ``rows=True``: probes per row, which
    split the accounts by graph or target.  ``probes`` holds ``(label, output, probe)`` of each operation without
    a rule; ``recorder`` the :class:`~lrp_lib.explain.mode.edges.EdgeRecorder` of the edges, if any."""

    def __init__(self, composite="epsilon", model: nn.Module | None = None, rows: bool = False):
        super().__init__(composite, model)
        self.probes: list[tuple[str, Tensor, Tensor]] = []
        self.recorder: EdgeRecorder | None = None
        #: ``rows=True``: the probes per row, by row count: (the leaf, its zero ``ones - ones.detach()``)
        self.row_probes: dict | None = {} if rows else None
        self._probes(torch.float32, torch.device("cpu"))
        self.tally = ProbeTally(self)

    def _probes(self, dtype, device) -> None:
        """The scalar probe ``kept`` (a one that requires grad) in the input's dtype and device, and
        ``kept - kept.detach()``, the zero whose product with an amount carries the amount's gradient into it."""
        self.kept = torch.ones((), dtype=dtype, device=device, requires_grad=True)
        with torch.enable_grad():
            self.kept_delta = self.kept - self.kept.detach()

    def mark(self, t):
        if isinstance(t, Tensor) and not self._leaves and t.is_floating_point() and t.requires_grad:
            self._probes(t.dtype, t.device)  # the first input's dtype and device
        return super().mark(t)

    def _in(self, t: Tensor, rows: bool = True) -> Tensor:
        r"""``t``, an input of an operation that may keep relevance: :math:`-\sum t \odot g` into ``kept``."""
        return torch.addcmul(t, self._probe(t, rows), modify.held_constant(t), value=-1)

    def _out(self, t: Tensor, rows: bool = True) -> Tensor:
        r"""``t``, the output of such an operation: :math:`\sum t \odot g`, what it receives, into ``kept``."""
        return self._kept(t, t, rows)

    def _kept(self, y: Tensor, amount: Tensor, rows: bool = True) -> Tensor:
        r"""``y`` unchanged, plus ``kept * amount`` for the probe ``kept``, whose gradient totals
        :math:`\sum g \odot a`, the relevance kept where :math:`a = z - c \odot (z - f(0))` (gradient scale
        :math:`c`)."""
        return torch.addcmul(y, self._probe(y, rows), modify.held_constant(amount))

    def _probe(self, t: Tensor, rows: bool = True) -> Tensor:
        """The zero that carries amounts into the probe ``kept`` for ``t``: one per row where the accounts are split
        by rows (:attr:`row_probes`) and the operation does not mix rows (``rows``), else the scalar one."""
        if self.row_probes is None or t.dim() == 0 or not rows:
            if self.row_probes is not None:
                self.tally.unsplit = True  # an amount without rows
            return self.kept_delta
        n = t.shape[0]
        probe = self.row_probes.get(n)
        if probe is None:
            ones = torch.ones(n, dtype=self.kept.dtype, device=self.kept.device, requires_grad=True)
            probe = self.row_probes[n] = (ones, ones - ones.detach())
        return probe[1].view(n, *([1] * (t.dim() - 1)))

    def _eps_share(self, z: Tensor, base: Tensor | None = None) -> Tensor:
        """The epsilon rule's constant :math:`z / \\mathrm{stab}(z)` (``base``: the part of ``z`` that is split,
        when a constant term takes no share)."""
        eps = self.composite.epsilon
        d = stabilize(modify.held_constant(z if base is None else base), eps)
        return modify.held_constant(z) / d if eps > 0 else modify.share_of(z, d)

    def identity(self, func, args, kwargs):
        r"""An elementwise function of one marked input, :math:`R_x = R_y`: the gradient
        :math:`g \odot y / x` (:func:`~lrp_lib.core.modify.identity`), or the function itself where its
        gradient is that already (:data:`~lrp_lib.core.modify.HOMOGENEOUS`)."""
        kwargs = {k: (False if k == "inplace" else v) for k, v in kwargs.items()}
        marked = [a for a in args if self.is_marked(a)] + [v for v in kwargs.values() if self.is_marked(v)]
        name = getattr(func, "__name__", "?")
        if len(marked) != 1:
            return self.blocked(func, name, args, kwargs)
        if name == "exp" and (out := self._softmax_numerator(marked[0])) is not None:
            return out
        out = func(*args, **kwargs) if name in modify.HOMOGENEOUS else modify.identity(marked[0], func(*args, **kwargs))
        if name in NONNEGATIVE:
            out._lrp_nonneg = self._token  # (lets z+ and alpha-beta skip the negative part of the next map's input)
        return out

    def elementwise(self, x: Tensor, fn: Callable):
        """``fn(x)`` elementwise: the identity rule."""
        return modify.identity(x, fn(x))

    def linear(self, x: Tensor, fn: Callable, constant=None):
        r"""A map linear in ``x`` without a weight, :math:`z = J x + f(0)`, under the epsilon rule
        :math:`R_x = x \odot J^\top(R / \mathrm{stab}(z))`: the gradient at :math:`z` scaled by
        :math:`c = z / \mathrm{stab}(z)`; the amount kept, :math:`\sum g \odot (z - c \odot (z - f(0)))`, into
        the probe ``kept``.  ``constant``: :math:`f(0)`, computed where not given."""
        z = fn(x)
        zd = z.detach()
        if constant is None:
            constant = modify.held_constant(fn(torch.zeros_like(x)))
        c = self._eps_share(zd, zd if self.composite.bias else zd - constant)
        return self._kept(modify.scale_gradient(z, c, zd), torch.addcmul(zd, c, constant - zd))

    def weighted(self, x: Tensor, weight: Tensor, bias: Tensor | None, fn: Callable):
        """A map ``fn(x, weight, bias)`` linear in ``x`` and a parameter ``weight``: the composite's rule for it,
        in its forward form (``Rule.modify``); what it keeps is the relevance its output receives (:meth:`_out`)
        less what its input gets (:meth:`_in`).  A ``weight`` that no module owns (data): the epsilon rule of
        :meth:`linear`."""
        rule = self.rule_for(weight)
        w, b = weight.detach(), None if bias is None else bias.detach()
        if rule is None:
            return self.linear(x, lambda t: fn(t, w, b))
        nonneg = getattr(x, "_lrp_nonneg", None) is self._token
        rows = x.dim() >= 2  # a map of each row (F.linear, x @ W, a convolution of each item)
        x = self._in(x, rows)
        out = fn(x, w, b)
        if rows and (out.dim() == 0 or out.shape[0] != x.shape[0]):  # not a map of rows after all: the
            self.tally.unsplit, rows = True, False  # in-probe counted rows that are not the output's
        # (z+ without a bias keeps nothing, but skipping its probes here made compiled explanations slower on the
        # CPU: AOTAutograd then saves the clamps' and ReLUs' masks as bool tensors, which inductor writes slowly,
        # and its fused kernels ran 1.5 to 3 times longer)
        if b is None or self.composite.bias:
            return self._out(rule.modify(fn, x, w, b, out, nonneg=nonneg), rows)
        # the bias takes no share: the rule splits the map without it, z0, whose relevance is out's
        z0 = fn(x, w, None)
        split = rule.modify(fn, x, w, None, z0, nonneg=nonneg)
        return self._out(modify.keep_value(out, split, modify.share_of(out, z0)), rows)

    def sum_terms(self, a, b, ca: float = 1.0, cb: float = 1.0):
        r"""``ca * a + cb * b``: each marked term its proportional share, :math:`R_a = a \odot R/\mathrm{stab}(z)`
        (the epsilon rule on the sum); a constant term keeps its share (the identity rule for the marked one
        with ``Composite(bias=False)``, or where the marked term is a gate)."""
        ma, mb = self.is_marked(a), self.is_marked(b)
        shift = ma != mb and getattr(b if ma else a, "_lrp_detached", None) is self._token
        ref = a if isinstance(a, Tensor) else b

        def term(t, marked: bool, scale: float) -> Tensor:  # scale * t; t held constant unless marked
            t = t if isinstance(t, Tensor) else torch.as_tensor(t, dtype=ref.dtype, device=ref.device)
            t = t if marked else modify.held_constant(t)
            return t if scale == 1.0 else modify.identity(t, t * scale) if marked else t * scale
        ta, tb = term(a, ma, ca), term(b, mb, cb)
        gate = (ma and not mb and self.is_gate(a)) or (mb and not ma and self.is_gate(b))
        if gate or (not (ma and mb) and not self.composite.bias):  # the constant term takes no share
            out = modify.identity(ta if ma else tb, ta + tb)
            if gate:
                return self.gate(out)
        else:
            z = ta + tb
            zd = z.detach()
            c = self._eps_share(zd)
            constant = tb if ma and not mb else (ta if mb and not ma else None)
            kept = zd - c * zd if constant is None else torch.addcmul(zd, c, constant - zd)
            out = self._kept(modify.scale_gradient(z, c, zd), kept)
        if shift:  # the constant is computed from a detached copy of a marked tensor: a softmax's shift
            out._lrp_shift = (self._token, ta if ma else tb, tb if ma else ta)  # (:meth:`_softmax_numerator`)
        return out

    def _softmax_numerator(self, x: Tensor):
        r"""``exp(a + c)``, ``c`` a constant made from a detached copy of a marked tensor (:meth:`sum_terms`): the
        numerator of a softmax written out, :math:`e^{a + c} / \sum e^{a + c}` (PyG's ``softmax``).  AttnLRP's
        rule is input times gradient, so it keeps the plain gradient, as does the division by its sum
        (:meth:`normalise`); the probes count what it keeps.  None where ``x`` is not such a sum."""
        shift = getattr(x, "_lrp_shift", None)
        if shift is None or shift[0] is not self._token:
            return None
        _, a, c = shift
        y = self._out(torch.exp(self._in(a) + c))
        y._lrp_softmax = self._token
        return y

    def product(self, a: Tensor, b: Tensor):
        """``a * b``, both marked: the uniform rule (half the gradient each), or, under CP-LRP, the gate (an
        attention weight) held constant."""
        ga, gb = self.is_gate(a), self.is_gate(b)
        if self.composite.attention == "cp" and ga != gb:  # the attention weight held constant
            return modify.held_constant(a) * b if ga else a * modify.held_constant(b)
        return modify.uniform(a * b, 2)

    def bilinear(self, a: Tensor, b: Tensor, weights: tuple):
        r"""``a @ b``, both marked: the epsilon rule on the product terms, :math:`R_a = w_a\, a \odot (S b^\top)`,
        :math:`R_b = w_b\, b \odot (a^\top S)`, :math:`S = R / \mathrm{stab}(z)`."""
        a, b = self._in(a, rows=False), self._in(b, rows=False)  # (b's rows reach every row of z)
        z = a @ b
        c = self._eps_share(z)
        wa, wb = weights
        if wa == wb:
            return self._out(modify.keep_value(z, z * (c * wa)), rows=False)
        t = (a @ b.detach()) * (c * wa) if wa else 0.0
        return self._out(modify.keep_value(z, t + (a.detach() @ b) * (c * wb) if wb else t), rows=False)

    def normalise(self, a: Tensor, b: Tensor):
        """``a / b``, both marked: the denominator held constant, :math:`R_a = R`; where ``a`` is the numerator of
        a softmax written out (:meth:`_softmax_numerator`), the plain division (AttnLRP's softmax rule)."""
        if getattr(a, "_lrp_softmax", None) is self._token:
            return self._out(self._in(a) / self._in(b))
        return a / modify.held_constant(b)

    def uniform_product(self, x: Tensor, fn: Callable, counts: Tensor):
        """``fn(x)``, a product of ``counts`` factors per output: :math:`R_i = R / n` (an empty product keeps
        its value's share)."""
        y = fn(self._in(x, rows=False))
        n = counts.to(y.dtype)
        return self._out(modify.keep_value(y, y * torch.where(n == 0, torch.zeros_like(n), 1.0 / n.clamp(min=1))),
                         rows=False)

    def join(self, dim: int, marked: tuple, joined: list):
        """``torch.cat``: the gradient's copy; a joined constant keeps its slice."""
        rows = dim % joined[0].dim() != 0 if joined[0].dim() else False  # (joined along the rows: mixed)
        return self._out(torch.cat([self._in(t, rows) if m else t for t, m in zip(joined, marked)], dim), rows)

    def norm_affine(self, x: Tensor, fn: Callable, beta: Tensor | None):
        r""":math:`y = \gamma \hat x + \beta`: the identity through the normalisation, the affine part split,
        :math:`R_x = (y - \beta) \odot R / \mathrm{stab}(y)`: the gradient at ``x``
        :math:`g \odot y (y - \beta) / (x\, \mathrm{stab}(y))`."""
        y = fn(x)
        part = y if beta is None else y - beta.detach()  # what the input contributes (beta keeps its share)
        x = self._in(x)
        return self._out(modify.keep_value(y, x * (modify.share_of(part, x) * self._eps_share(y))))

    def blocked(self, func, name, args, kwargs):
        """An operation without a rule: its value, no gradient, and a zero probe on each floating-point output,
        whose gradient times the output is the relevance that reached it (refused with its amount)."""
        with torch.no_grad():
            out = func(*args, **kwargs)
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        for i, t in enumerate(items):
            if isinstance(t, Tensor) and t.is_floating_point():
                probed, probe = modify.blocked(t)
                self.probes.append((f"{name} in {self.module_label()}", t, probe))
                items[i] = self.mark(probed)
        if not isinstance(out, (tuple, list)):
            return items[0]
        return type(out)(items) if not hasattr(out, "_fields") else type(out)(*items)
