r"""Relevance rules for the primitives that any PyTorch model is built from.

:mod:`lrp_lib.explain.function_mode` intercepts every torch function a model calls while it is
explained and sends each one here.  Each primitive is a :class:`torch.autograd.Function`
whose forward is the ordinary operation and whose backward takes the relevance :math:`R` of
the output and returns the relevance of the inputs that depend on the explained input
("marked" inputs); constant inputs (weights, biases, normalisation coefficients, the
adjacency) get none.  The rules, with :math:`z` the output and
:math:`\mathrm{stab}(z) = z + \epsilon\,\mathrm{sign}(z)` (where :math:`z = 0` the relevance is
lost, with a :class:`~lrp_lib.core.stabilizer.LostRelevanceWarning`):

* :class:`~lrp_lib.core.rules.LinearMapRelevance` (the one function of every linear map, from
  :mod:`lrp_lib.core.rules`) -- a map with a weight (``F.linear``, ``x @ W``, convolutions): the
  composite's :class:`~lrp_lib.core.rules.Rule` for that weight (epsilon, gamma, z+, ...); a
  map linear in one marked input :math:`x` plus constants, without a weight (sums, means,
  ``scatter_add``, ``index_add``, an adjacency matrix product, a batch norm in eval mode),
  through :func:`linear_relevance`: the epsilon rule
  :math:`R_x = x \odot J^\top\big(R / \mathrm{stab}(z)\big)`.  A constant term (a bias, a
  non-zero buffer scattered into) keeps its share.
* :class:`AddRelevance` -- :math:`z = a + b` with broadcasting: each term gets its share
  :math:`R_a = a \odot R / \mathrm{stab}(z)` (summed over broadcast dimensions); a constant
  term (a bias) keeps its share.
* :class:`IdentityRelevance` -- an elementwise function of one marked input
  (ReLU, GELU, SiLU, tanh, sigmoid, exp, a product with a constant, ...):
  :math:`R_x = R` (the identity rule of AttnLRP, Achtibat et al., 2024).
* :class:`ProductRelevance` -- :math:`z = a \odot b` with both factors marked: the uniform
  rule :math:`R_a = R_b = R / 2` (AttnLRP); if one factor is a normalised weight (attention)
  and the composite says ``attention="cp"``, CP-LRP (Ali et al., 2022): the weight is held
  constant, :math:`R_{other} = R`, :math:`R_{weight} = 0`.
* :class:`NormaliseRelevance` -- :math:`z = a / b` with both marked (softmax, normalisation
  by a data-dependent sum or norm): the denominator is held constant, :math:`R_a = R`.
* :class:`BilinearRelevance` -- :math:`z = A B` with both matrices marked: the uniform rule
  on each product term, :math:`R_{A} = \tfrac12 A \odot (S B^\top)`,
  :math:`R_{B} = \tfrac12 B \odot (A^\top S)`, :math:`S = R / \mathrm{stab}(z)`.
* :class:`SoftmaxRelevance` -- dense softmax :math:`s = \mathrm{softmax}(x)`: AttnLRP's rule
  :math:`R_x = x \odot (R - s \textstyle\sum_j R_j)`; a masked-out logit (:math:`x = -\infty`,
  :math:`s = 0`) gets no relevance.
* :class:`NormAffineRelevance` -- layer, group and instance norm
  :math:`y = \gamma\,\hat x + \beta`: the normalisation passes relevance unchanged (AttnLRP's
  LayerNorm rule), the affine part splits it, :math:`R_x = (y - \beta) \odot R / \mathrm{stab}(y)`;
  :math:`\beta` keeps its share.
* :class:`UniformProductRelevance` -- a product of :math:`n` marked factors (``torch.prod``,
  the ``"prod"`` scatter of ``MulAggregation``): the uniform rule :math:`R_i = R / n` (AttnLRP).
* :class:`JoinRelevance` -- ``torch.cat`` of marked tensors and constants: the marked ones get
  their slices of :math:`R`, each constant keeps its slice (a bias's share, tallied).
* :class:`BlockedRelevance` -- an operation without a rule: it passes no relevance and records
  how much reached it, so that the explainer can refuse the model instead of returning a
  wrong explanation.

The functions keep their output as ``ctx.out`` (not through ``save_for_backward``): a model that
later changes that output in place (``h += bias``) goes through
:meth:`lrp_lib.explain.function_mode.RelevanceMode` which first gives the function a copy, so the backward
sees the value it computed.

Every division by an output goes through :func:`lrp_lib.core.stabilizer.relevance_share` with
``check=False`` (no check and no synchronisation per operation: the explainer accounts once, at
the end, for what did not arrive, ``relevance_residual`` and a warning with its amount, and
checks that the relevance is finite).

Every function that keeps a share (a bias, the stabiliser) adds the amount to a
:class:`Tally`, so the explainer can report where the relevance that did not reach the
inputs went.
"""
from __future__ import annotations

import math
import struct
import weakref
from typing import Callable

import torch
from torch import Tensor

from lrp_lib.core.rules import Epsilon, LinearMap, LinearMapRelevance
from lrp_lib.core.stabilizer import relevance_share

__all__ = ["Tally", "linear_relevance", "LinearMapRelevance", "AddRelevance", "IdentityRelevance",
           "ProductRelevance", "NormaliseRelevance", "BilinearRelevance", "SoftmaxRelevance",
           "NormAffineRelevance", "UniformProductRelevance", "JoinRelevance", "BlockedRelevance", "EdgeMessageRelevance"]


class Tally:
    """Amounts of relevance kept by constants (biases, the stabiliser) or blocked, per label.

    Filled during the backward pass (which runs in the thread that called it); read afterwards
    through :attr:`absorbed` and :attr:`blocked` (``{label: float64 amount}``) or :meth:`total`.
    The amounts are kept as they come, tensors of the backward's dtype, until one of the tables is
    read: then all of them are read at once, with one synchronisation, and summed label by label
    in float64 in the order they came (so no operation and no synchronisation per op).  An amount
    given as a difference of sums (:meth:`absorb_rows` with ``amount=None``) is kept as its terms,
    and the sum of a tensor is taken once while it is unchanged: the relevance that one rule
    returns is, most often, the very tensor that the next one receives.  The difference is then
    taken in the terms' own precision (float32 subtraction for float32 terms), so each amount is
    the one that ``R_out.sum() - R_x.sum()`` gives."""

    def __init__(self):
        self._tables: dict[str, dict] = {"absorbed": {}, "blocked": {}}
        self._pending: list[tuple[str, str, tuple]] = []
        self._sums: dict[int, tuple] = {}

    def _put(self, table: str, label: str, terms: tuple) -> None:
        self._pending.append((table, label, tuple(t.detach() if t.requires_grad else t for t in terms)))

    def _sum(self, t: Tensor) -> Tensor:
        """``t.sum()``, once per tensor and version (a weak reference: no tensor is kept alive)."""
        hit = self._sums.get(id(t))
        if hit is not None and hit[0]() is t and hit[1] == t._version:
            return hit[2]
        total = t.sum()
        self._sums[id(t)] = (weakref.ref(t), t._version, total)
        return total

    def _flush(self) -> None:
        self._sums.clear()
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        terms = [t for _, _, ts in pending for t in ts]
        if all(t.device == terms[0].device and t.dtype == terms[0].dtype for t in terms):
            read = iter(torch.stack(terms).tolist())  # one synchronisation
        else:  # a model spread over devices or dtypes
            read = iter([t.item() for t in terms])
        for table, label, ts in pending:
            value = _difference([next(read) for _ in ts], ts[0].dtype)
            target = self._tables[table]
            previous = target.get(label)
            target[label] = value if previous is None else previous + value

    @property
    def absorbed(self) -> dict[str, float]:
        self._flush()
        return self._tables["absorbed"]

    @absorbed.setter
    def absorbed(self, table: dict) -> None:
        self._flush()
        self._tables["absorbed"] = table

    @property
    def blocked(self) -> dict[str, float]:
        self._flush()
        return self._tables["blocked"]

    @blocked.setter
    def blocked(self, table: dict) -> None:
        self._flush()
        self._tables["blocked"] = table

    def unread(self) -> list[tuple[str, str, tuple]]:
        """The amounts kept and not read yet: ``(table, label, terms)`` in the order they came."""
        return list(self._pending)

    def was_read(self) -> bool:
        """Whether any amount has been read into the tables."""
        return any(self._tables.values())

    @classmethod
    def of(cls, unread: list[tuple[str, str, tuple]]) -> "Tally":
        """A tally holding ``unread`` (as :meth:`unread` gives them), to be read like any other."""
        tally = cls()
        tally._pending = list(unread)
        return tally

    #: Whether :meth:`absorb_rows` wants the tensors' rows too (a tally that splits the amounts by rows).
    rows_wanted = False

    def absorb(self, label: str, amount: Tensor) -> None:
        self._put("absorbed", label, (amount,))

    def absorb_rows(self, label: str, amount: Tensor | None, plus=(), minus=()) -> None:
        """:meth:`absorb` ``amount``, which is the sum of the tensors ``plus`` minus the sums of
        ``minus`` (a tally that splits the amounts by rows reads them; this one does not).
        ``amount=None``: that difference, left to the tally (``plus`` one tensor): kept as its
        terms, each tensor's sum taken once."""
        if amount is not None:
            terms = (amount,)
        elif len(plus) == 1 and plus[0].dtype in _EXACT:
            terms = (self._sum(plus[0]), *(self._sum(m) for m in minus))
        else:
            terms = (_eager_difference(plus, minus),)
        self._put("absorbed", label, terms)

    def block(self, label: str, amount: Tensor) -> None:
        self._put("blocked", label, (amount,))

    def backward(self, head: Tensor, inputs: list, start: Tensor, retain_graph: bool = False) -> tuple:
        """The relevance of ``inputs`` from one backward of ``head`` with start relevance ``start``, its
        amounts kept here: the primitives' backward computes relevance, so it is the gradient."""
        return torch.autograd.grad(head, inputs, start, allow_unused=True, retain_graph=retain_graph)

    @staticmethod
    def total(table: dict) -> float:
        return float(sum(table.values())) if table else 0.0

    def read(self, table: dict) -> dict[str, float]:
        return {k: float(v) for k, v in table.items()}


#: Dtypes whose subtraction :func:`_difference` repeats exactly from the terms read as Python floats.
_EXACT = (torch.float32, torch.float64)


def _difference(values: list, dtype: torch.dtype) -> float:
    """``values[0] - values[1] - ...`` (left to right) as the dtype of the terms computes it: a
    float32 difference is the float64 difference of the (exactly representable) terms rounded to
    float32, which is exactly float32 subtraction (53 bits hold 2 x 24 + 2)."""
    value = values[0]
    for v in values[1:]:
        value = value - v
        if dtype == torch.float32:
            value = _float32(value)
    return value


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (ties to even; C's conversion), an infinity where
    that rounding overflows (which ``struct`` reports instead of returning it)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _eager_difference(plus, minus) -> Tensor:
    amount = sum(p.sum() for p in plus) if len(plus) != 1 else plus[0].sum()
    for m in minus:
        amount = amount - m.sum()
    return amount


def _to_shape(rel: Tensor, shape) -> Tensor:
    """Relevance of a broadcast input: summed over the dimensions it was broadcast along."""
    return rel if rel.shape == shape else rel.sum_to_size(shape)


def _times(t: Tensor, s: Tensor, last: bool) -> Tensor:
    """``t * s``, written into ``s`` (a share of this backward's own) on its ``last`` use where that
    gives the same values: the same shape and dtype, both contiguous."""
    if last and s.shape == t.shape and s.dtype == t.dtype and s.is_contiguous() and t.is_contiguous():
        return s.mul_(t)
    return t * s


def _absorbed(tally: Tally | None, label: str, rel_out: Tensor, *rel_in: Tensor) -> None:
    if tally is not None:
        tally.absorb_rows(label, None, (rel_out,), [r for r in rel_in if r is not None])


def _keep(ctx, out: Tensor, eps: float, label: str, tally, *saved: Tensor) -> Tensor:
    """Keep for the backward of a proportional rule: ``eps``, ``label``, ``tally``, the tensors
    ``saved`` and the output itself, as ``ctx.out`` (a detached view, no copy); returns ``out``."""
    ctx.eps, ctx.label, ctx.tally = eps, label, tally
    ctx.save_for_backward(*saved)
    ctx.out = out.detach()
    return out


def _share(ctx, rel_out: Tensor) -> Tensor:
    r""":math:`R / \mathrm{stab}(z)` of the kept output (:func:`~lrp_lib.core.stabilizer.relevance_share`,
    unchecked)."""
    return relevance_share(ctx.label, rel_out, ctx.out, eps=ctx.eps, check=False)


def linear_relevance(x: Tensor, fn: Callable, vjp: Callable | None, eps: float, label: str, tally,
                     keep_constant: bool = True, fresh_vjp: bool = False, source=None, value=None) -> Tensor:
    r"""``fn(x)``, linear in ``x`` up to a constant term, with the epsilon rule
    :math:`R_x = x \odot J^\top(R / \mathrm{stab}(z))` in backward: the weight-free case of
    :class:`~lrp_lib.core.rules.LinearMapRelevance` (:math:`J^\top` given by ``vjp(v)``, or
    autograd).  ``keep_constant=False``: the constant term :math:`f(0)` takes no share.
    ``fresh_vjp``: ``vjp`` returns a new tensor each call (:class:`~lrp_lib.core.rules.LinearMap`);
    ``source``: ``x`` recomputed in backward instead of kept, ``value``: ``fn(x)`` computed already
    (:class:`~lrp_lib.core.rules.LinearMapRelevance`)."""
    m = LinearMap(fn, None if vjp is None else (lambda v, _x: vjp(v)), has_weight=False, fresh_vjp=fresh_vjp)
    return LinearMapRelevance.apply(x, None, None, m, Epsilon(eps), label, tally, keep_constant, False, source,
                                    value)


class AddRelevance(torch.autograd.Function):
    r""":math:`z = a + b`: :math:`R_a = a \odot R/\mathrm{stab}(z)`, the same for :math:`b`;
    ``marked`` says which terms depend on the input (the others keep their share)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, marked: tuple, eps: float, label: str, tally):
        ctx.marked = marked
        return _keep(ctx, a + b, eps, label, tally, a, b)

    @staticmethod
    def backward(ctx, rel_out):
        a, b = ctx.saved_tensors
        s = _share(ctx, rel_out)  # a new tensor: the last product is written into it
        rb = _to_shape(_times(b, s, not ctx.marked[0]), b.shape) if ctx.marked[1] else None
        ra = _to_shape(_times(a, s, True), a.shape) if ctx.marked[0] else None
        _absorbed(ctx.tally, ctx.label, rel_out, ra, rb)
        return ra, rb, None, None, None, None


class IdentityRelevance(torch.autograd.Function):
    r"""``fn(x)``, elementwise in ``x``: :math:`R_x = R` (summed over broadcast dimensions)."""

    @staticmethod
    def forward(ctx, x: Tensor, fn: Callable):
        ctx.shape = x.shape
        return fn(x)

    @staticmethod
    def backward(ctx, rel_out):
        return _to_shape(rel_out, ctx.shape), None


class ProductRelevance(torch.autograd.Function):
    r""":math:`z = a \odot b`, both marked: ``weights=(wa, wb)`` the fraction of :math:`R` each gets
    (``(0.5, 0.5)`` uniform; ``(1, 0)`` CP-LRP with :math:`b` held constant)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, weights: tuple):
        ctx.shapes, ctx.weights = (a.shape, b.shape), weights
        return a * b

    @staticmethod
    def backward(ctx, rel_out):
        (sa, sb), (wa, wb) = ctx.shapes, ctx.weights
        ra = _to_shape(rel_out * wa, sa) if wa else torch.zeros(sa, dtype=rel_out.dtype, device=rel_out.device)
        rb = _to_shape(rel_out * wb, sb) if wb else torch.zeros(sb, dtype=rel_out.dtype, device=rel_out.device)
        return ra, rb, None


class NormaliseRelevance(torch.autograd.Function):
    r""":math:`z = a / b`, both marked: the denominator is held constant, :math:`R_a = R`, :math:`R_b = 0`."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor):
        ctx.shapes = (a.shape, b.shape)
        return a / b

    @staticmethod
    def backward(ctx, rel_out):
        sa, sb = ctx.shapes
        return _to_shape(rel_out, sa), torch.zeros(sb, dtype=rel_out.dtype, device=rel_out.device)


class BilinearRelevance(torch.autograd.Function):
    r""":math:`Z = A B` (matrix product, batched), both marked: each product term
    :math:`A_{ik} B_{kj}` gets its share of :math:`R_{ij}`, split ``weights`` between the factors."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, weights: tuple, eps: float, label: str, tally):
        ctx.weights = weights
        return _keep(ctx, torch.matmul(a, b), eps, label, tally, a, b)

    @staticmethod
    def backward(ctx, rel_out):
        a, b = ctx.saved_tensors
        wa, wb = ctx.weights
        s = _share(ctx, rel_out)
        a2 = a.unsqueeze(0) if a.dim() == 1 else a
        b2 = b.unsqueeze(-1) if b.dim() == 1 else b
        s2 = s
        if a.dim() == 1:
            s2 = s2.unsqueeze(-2)
        if b.dim() == 1:
            s2 = s2.unsqueeze(-1)
        ra = a2 * (s2 @ b2.transpose(-1, -2)) * wa
        rb = b2 * (a2.transpose(-1, -2) @ s2) * wb
        ra = _to_shape(ra.reshape(ra.shape[-a.dim():]) if a.dim() == 1 else ra, a.shape)
        rb = _to_shape(rb.squeeze(-1) if b.dim() == 1 else rb, b.shape)
        _absorbed(ctx.tally, ctx.label, rel_out, ra, rb)
        return ra, rb, None, None, None, None


class SoftmaxRelevance(torch.autograd.Function):
    r"""Dense softmax along ``dim``: :math:`R_x = x \odot (R - s \sum_j R_j)` (AttnLRP: Achtibat et al.,
    "AttnLRP: Attention-Aware Layer-Wise Relevance Propagation for Transformers", ICML 2024);
    a logit masked out with :math:`-\infty` (attention masks) has :math:`s = 0` and gets 0."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int, label: str, tally):
        s = torch.softmax(x, dim)
        ctx.dim, ctx.label, ctx.tally = dim, label, tally
        ctx.save_for_backward(x)
        ctx.out = s.detach()
        return s

    @staticmethod
    def backward(ctx, rel_out):
        (x,), s = ctx.saved_tensors, ctx.out
        # a masked-out logit (-inf, weight 0: attention masks) gets none, not -inf * 0 = nan
        x = x.masked_fill(torch.isneginf(x), 0.0)
        rel = x * (rel_out - s * rel_out.sum(ctx.dim, keepdim=True))
        _absorbed(ctx.tally, ctx.label, rel_out, rel)  # the rule is not conservative: report the difference
        return rel, None, None, None


class NormAffineRelevance(torch.autograd.Function):
    r""":math:`y = \mathrm{fn}(x) = \gamma \hat x + \beta` (a layer/group/instance norm):
    :math:`R_x = (y - \beta) \odot R / \mathrm{stab}(y)`; :math:`\beta` keeps its share."""

    @staticmethod
    def forward(ctx, x: Tensor, fn: Callable, beta: Tensor | None, eps: float, label: str, tally):
        return _keep(ctx, fn(x), eps, label, tally, beta)

    @staticmethod
    def backward(ctx, rel_out):
        (beta,), out = ctx.saved_tensors, ctx.out
        s = _share(ctx, rel_out)
        rel = (out if beta is None else out - beta) * s
        _absorbed(ctx.tally, ctx.label, rel_out, rel)
        return rel, None, None, None, None, None


class UniformProductRelevance(torch.autograd.Function):
    r"""A product of several input-dependent factors per output (``torch.prod`` along a dimension, the
    ``"prod"`` scatter reduction of PyG's ``MulAggregation``): AttnLRP's uniform rule for the product of
    :math:`n` factors, :math:`R_i = R / n` for each factor :math:`i` of the output (Achtibat et al.,
    "AttnLRP", ICML 2024: multiplication of :math:`N` inputs); a constant factor (the ones a
    scatter starts from) takes none.  ``fn(x)`` computes the output, ``counts`` the number of
    factors of each output element, ``spread(t)`` sends a tensor of the output's shape to the
    factors' (gather, expand).  Outputs without factors (empty groups, the constant start value)
    keep their relevance, tallied as ``label``."""

    @staticmethod
    def forward(ctx, x: Tensor, fn: Callable, counts: Tensor, spread: Callable, label: str, tally):
        out = fn(x)
        ctx.counts, ctx.spread, ctx.label, ctx.tally = counts, spread, label, tally
        return out

    @staticmethod
    def backward(ctx, rel_out):
        counts = ctx.counts.to(rel_out.dtype)
        empty = counts == 0
        rel = ctx.spread(torch.where(empty, torch.zeros_like(rel_out), rel_out / counts.clamp(min=1)))
        if ctx.tally is not None and bool(empty.any()):
            kept = torch.where(empty, rel_out, torch.zeros_like(rel_out)) if ctx.tally.rows_wanted else None
            ctx.tally.absorb_rows(ctx.label, rel_out[empty].sum(), () if kept is None else (kept,))
        return rel, None, None, None, None, None


class JoinRelevance(torch.autograd.Function):
    r"""``torch.cat(tensors, dim)`` where some of the joined tensors are constants (``marked[i]`` false):
    the marked ones get their slice of :math:`R` (the gradient of a copy), each constant keeps its
    slice :math:`\sum R_{\text{slice}}` as a bias keeps its share (added to ``tally.absorb(label)``),
    instead of being lost unaccounted.  Example: PyG's ``Set2Set`` joins the first LSTM step's query,
    computed from its zero start and the biases only, to the readout."""

    @staticmethod
    def forward(ctx, dim: int, marked: tuple, label: str, tally, *tensors: Tensor):
        ctx.dim, ctx.marked, ctx.label, ctx.tally = dim, marked, label, tally
        ctx.sizes = [t.shape[dim] for t in tensors]
        return torch.cat(tensors, dim)

    @staticmethod
    def backward(ctx, rel_out):
        parts = rel_out.split(ctx.sizes, ctx.dim)
        kept = [p.sum() for p, m in zip(parts, ctx.marked) if not m]
        if kept and ctx.tally is not None:
            ctx.tally.absorb(ctx.label, sum(kept))
        return (None, None, None, None, *[p if m else None for p, m in zip(parts, ctx.marked)])


class BlockedRelevance(torch.autograd.Function):
    """An operation without a relevance rule: outputs computed beforehand (``outputs``), no
    relevance to the inputs; the amount that reached the outputs goes to ``tally.block(label)``."""

    @staticmethod
    def forward(ctx, label: str, tally: Tally, n_out: int, *tensors: Tensor):
        ctx.label, ctx.tally, ctx.n_out = label, tally, n_out
        ctx.in_shapes = [(t.shape, t.dtype, t.device) for t in tensors[n_out:]]
        outs = tuple(t.clone() for t in tensors[:n_out])  # copies: the model may change them in place
        return outs if n_out > 1 else outs[0]

    @staticmethod
    def backward(ctx, *rel_out):
        amount = sum(r.abs().sum() for r in rel_out if r is not None)
        if isinstance(amount, Tensor):
            ctx.tally.block(ctx.label, amount)
        zeros = [torch.zeros(s, dtype=d, device=dev) for s, d, dev in ctx.in_shapes]
        return (None, None, None, *([None] * ctx.n_out), *zeros)


class EdgeMessageRelevance(torch.autograd.Function):
    r"""The messages of a message-passing layer, unchanged; backward adds each message's relevance
    :math:`\sum_f R_{e f}` to ``record[edge_id[e]]`` (entries with ``edge_id < 0`` are not edges of
    the explained graph, e.g. added self-loops) and passes :math:`R` on unchanged."""

    @staticmethod
    def forward(ctx, messages: Tensor, edge_id: Tensor, record: Tensor, node_dim: int):
        ctx.record, ctx.node_dim = record, node_dim
        ctx.save_for_backward(edge_id)
        return messages.view_as(messages)

    @staticmethod
    def backward(ctx, rel_out):
        (edge_id,) = ctx.saved_tensors
        moved = rel_out.movedim(ctx.node_dim, 0)
        per_edge = moved.sum(tuple(range(1, moved.dim()))) if moved.dim() > 1 else moved
        keep = edge_id >= 0
        ctx.record.index_add_(0, edge_id[keep], per_edge[keep].to(ctx.record.dtype))
        return rel_out, None, None, None

