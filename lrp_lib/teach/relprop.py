r"""LRP the "relprop" way: forward hooks store the inputs, each module walks back by hand.

This is the style of Chefer et al.'s Transformer-Explainability code and of the book's seed
transcript, kept here as the second of three implementations (the autograd trick of
:mod:`lrp_lib.teach.ops` and the JAX port of :mod:`lrp_lib.teach.jax_lrp` are the others):

* every module registers a forward hook that keeps a detached copy of its input (``self.X``,
  with ``requires_grad``) and its output (``self.Y``);
* every module has a method ``relprop(R)`` that takes the relevance of its output and
  returns the relevance of its input(s).  Most are the same three lines: run the forward
  again on ``self.X``, divide, and ask autograd for one vector-Jacobian product,

  .. math:: Z = f(X),\quad S = R \oslash Z,\quad C = J_f(X)^\top S,\quad R_X = X \odot C,

  which for a function that is linear in ``X`` is :math:`R_{X_j} = \sum_k X_j \frac{\partial
  Z_k}{\partial X_j} \frac{R_k}{Z_k}`: every output's relevance split over the terms that
  made it;
* the *model* walks the modules backwards, calling ``relprop`` in reverse order
  (:class:`Sequential` does that for a chain).  A tensor used twice must go through
  :class:`Clone`, so that the walk can add the relevance of its copies.

Relevance that reaches an output equal to zero cannot be split and is lost; it raises a
:class:`lrp_lib.core.stabilizer.LostRelevanceWarning`, as in :mod:`lrp_lib.teach.ops`.
"""
from __future__ import annotations

import numbers
import warnings
from typing import Sequence

import torch
from torch import Tensor

from lrp_lib.core.stabilizer import LostRelevanceWarning
from lrp_lib.teach.share import relevance_share

__all__ = [
    "safe_divide",
    "RelProp",
    "RelPropSimple",
    "MatMul",
    "Add",
    "IndexSelect",
    "Clone",
    "ReLU",
    "Linear",
    "Sequential",
]


def safe_divide(a: Tensor, b: Tensor | float, eps: float = 1e-9) -> Tensor:
    r""":math:`a / (b + \epsilon\,\mathrm{sign}(b))` where :math:`b \neq 0`, and 0 where :math:`b = 0`.

    The division is :func:`lrp_lib.teach.share.relevance_share` (``check=False``) with the one
    stabiliser, :func:`~lrp_lib.core.stabilizer.stabilize`; what is this module's own is the value
    at :math:`b = 0`: 0 for every :math:`\epsilon` (the stabiliser would give :math:`a/\epsilon`),
    the convention of the relprop implementations this chapter reproduces, whose numbers depend on
    it.  :math:`\epsilon = 0` gives the plain ratio.  The seed's version added :math:`+10^{-9}` on
    both sides, which only matters for outputs within :math:`10^{-9}` of zero.
    """
    b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    zero = b == 0
    share = relevance_share("safe_divide", a, torch.where(zero, torch.ones_like(b), b), eps=eps, check=False)
    return torch.where(zero, torch.zeros_like(share), share)


def _warn_if_lost(name: str, Z: Tensor, R: Tensor) -> None:
    lost = (Z == 0) & (R != 0)
    if bool(lost.any()):
        amount = float(R.detach()[lost].abs().sum())
        warnings.warn(
            f"{name}.relprop: relevance of total magnitude {amount:.4g} reached outputs equal to zero "
            f"and was lost (a zero output cannot be split in proportion to its inputs)",
            LostRelevanceWarning,
            stacklevel=3,
        )


def _check_relevance(name: str, R, Z: Tensor, what: str = "R") -> Tensor:
    if not isinstance(R, Tensor):
        raise TypeError(f"{name}.relprop: {what} must be a torch.Tensor, got {type(R).__name__}")
    if R.shape != Z.shape:
        raise ValueError(
            f"{name}.relprop: {what} has shape {tuple(R.shape)} but the module's output has shape {tuple(Z.shape)}"
        )
    return R


def _store_inputs(module: "RelProp", inputs: tuple, output) -> None:
    """Forward hook: keep detached leaf copies of the first positional input, and the output."""
    first = inputs[0]
    if isinstance(first, (list, tuple)):
        module.X = [t.detach().requires_grad_(t.is_floating_point()) for t in first]
    else:
        module.X = first.detach().requires_grad_(first.is_floating_point())
    module.Y = output


class RelProp(torch.nn.Module):
    """Base class: a forward hook stores the input in ``self.X``; ``relprop(R)`` returns ``R``.

    ``relprop`` takes keyword arguments that only some modules use (the rule of
    :class:`Linear`); the others accept and ignore them, so that a container can pass the
    same arguments to every module.
    """

    def __init__(self):
        super().__init__()
        self.X = None
        self.Y = None
        self.register_forward_hook(_store_inputs)

    def _inputs(self):
        if self.X is None:
            raise RuntimeError(f"{type(self).__name__}: call the module on an input before relprop")
        return self.X

    @staticmethod
    def gradprop(Z, X, S):
        """One vector-Jacobian product :math:`J^\\top S` by ``torch.autograd.grad``."""
        return torch.autograd.grad(Z, X, S, retain_graph=True)

    def relprop(self, R: Tensor, **rule) -> Tensor:
        return R


class RelPropSimple(RelProp):
    r"""``relprop`` for a module linear in its input(s): :math:`R_X = X \odot J^\top (R \oslash f(X))`.

    With two inputs (``module([a, b])``) each gets :math:`R_a = a \odot J_a^\top S` and
    :math:`R_b = b \odot J_b^\top S` from the same :math:`S = R \oslash Z`.
    """

    def _recompute(self, X):
        return self.forward(X)

    def relprop(self, R: Tensor, **rule):
        X = self._inputs()
        name = type(self).__name__
        with torch.enable_grad():
            Z = self._recompute(X)
            _check_relevance(name, R, Z)
            _warn_if_lost(name, Z, R)
            S = safe_divide(R, Z)
            C = self.gradprop(Z, X, S)
        if isinstance(X, list):
            return [(x * c).detach() for x, c in zip(X, C)]
        return (X * C[0]).detach()


class MatMul(RelPropSimple):
    r"""``torch.matmul(a, b)`` called as ``MatMul()([a, b])``.

    :math:`R_{a_{ij}} = \sum_k \frac{a_{ij} b_{jk}}{z_{ik}} R_{ik}` and
    :math:`R_{b_{jk}} = \sum_i \frac{a_{ij} b_{jk}}{z_{ik}} R_{ik}`: each product term is counted for
    both factors, so ``a`` and ``b`` each receive the whole relevance (the total doubles).
    """

    def forward(self, inputs: Sequence[Tensor]) -> Tensor:
        a, b = _two_tensors("MatMul", inputs)
        return torch.matmul(a, b)


class Add(RelPropSimple):
    r"""``a + b`` called as ``Add()([a, b])``, with the seed's *normalised* relevance.

    First the proportional split :math:`r_a = \frac{a}{a+b} R`, :math:`r_b = \frac{b}{a+b} R`
    (element-wise); then each input's map is rescaled so that the two totals are in the ratio
    of their magnitudes and add up to the total of :math:`R`:

    .. math:: R_a = r_a \frac{|\Sigma r_a|}{|\Sigma r_a| + |\Sigma r_b|} \frac{\Sigma R}{\Sigma r_a},
              \qquad R_b = r_b \frac{|\Sigma r_b|}{|\Sigma r_a| + |\Sigma r_b|} \frac{\Sigma R}{\Sigma r_b}.

    So :math:`\Sigma R_a + \Sigma R_b = \Sigma R` even where the element-wise split would lose
    relevance, but the sums :math:`\Sigma` run over the *whole* tensor, batch included: one
    sample's relevance changes another's scale.  :func:`lrp_lib.teach.ops.add` is the element-wise
    split alone.
    """

    def forward(self, inputs: Sequence[Tensor]) -> Tensor:
        a, b = _two_tensors("Add", inputs)
        return torch.add(a, b)

    def relprop(self, R: Tensor, **rule):
        r_a, r_b = super().relprop(R)
        sum_a, sum_b = r_a.sum(), r_b.sum()
        magnitude = sum_a.abs() + sum_b.abs()
        if bool(magnitude == 0) and bool(R.sum() != 0):
            _warn_if_lost("Add", magnitude.reshape(1), R.sum().reshape(1))
        share_a = safe_divide(sum_a.abs(), magnitude) * R.sum()
        share_b = safe_divide(sum_b.abs(), magnitude) * R.sum()
        return [r_a * safe_divide(share_a, sum_a), r_b * safe_divide(share_b, sum_b)]


class IndexSelect(RelProp):
    r"""``torch.index_select(x, dim, index)`` called as ``IndexSelect()(x, dim, index)``.

    :math:`R_{x_j} = x_j \sum_{k: index_k = j} \frac{R_k}{x_j}`: the copies of :math:`x_j` sum their
    relevance (lost where :math:`x_j = 0`, unlike :func:`lrp_lib.teach.ops.index_select`, which passes it).
    """

    def forward(self, x: Tensor, dim: int, index: Tensor) -> Tensor:
        self.dim, self.index = dim, index
        return torch.index_select(x, dim, index)

    def relprop(self, R: Tensor, **rule):
        X = self._inputs()
        with torch.enable_grad():
            Z = self.forward(X, self.dim, self.index)
            _check_relevance("IndexSelect", R, Z)
            _warn_if_lost("IndexSelect", Z, R)
            (C,) = self.gradprop(Z, X, safe_divide(R, Z))
        return (X * C).detach()


class Clone(RelProp):
    r"""``num`` references to one tensor, called as ``Clone()(x, num)``; returns a list.

    The explicit fan-out point of the relprop walk: ``relprop([R_1, ..., R_num])`` gives
    :math:`R_x = x \odot \sum_i R_i \oslash x = \sum_i R_i` (where :math:`x \neq 0`).
    """

    def forward(self, x: Tensor, num: int) -> list:
        if not isinstance(num, numbers.Integral) or num < 1:
            raise ValueError(f"Clone: num must be a positive int, got {num!r}")
        self.num = int(num)
        return [x for _ in range(self.num)]

    def relprop(self, R: Sequence[Tensor], **rule):
        X = self._inputs()
        if isinstance(R, Tensor) or not isinstance(R, (list, tuple)) or len(R) != self.num:
            got = f"a list of {len(R)}" if isinstance(R, (list, tuple)) else type(R).__name__
            raise ValueError(f"Clone.relprop: R must be a list of {self.num} tensors (one per copy), got {got}")
        for i, r in enumerate(R):
            _check_relevance("Clone", r, X, what=f"R[{i}]")
            _warn_if_lost("Clone", X, r)
        with torch.enable_grad():
            Z = [X] * self.num
            (C,) = self.gradprop(Z, X, [safe_divide(r, X) for r in R])
        return (X * C).detach()


class ReLU(RelPropSimple):
    r"""``max(x, 0)``: :math:`R_x = x \frac{R}{\max(x, 0)} = R` where :math:`x > 0`, else lost."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x)


class Linear(torch.nn.Linear, RelProp):
    r"""``torch.nn.Linear`` with ``relprop(R, rule=..., ...)``; two rules.

    ``rule="epsilon"`` (default):
    :math:`R_{x_j} = \sum_k \frac{x_j w_{kj}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k` with the bias
    inside :math:`z_k` (its share leaves the explanation), exactly :func:`lrp_lib.teach.ops.linear_eps`.

    ``rule="alpha_beta"``: positive and negative contributions are split separately,

    .. math:: R_{x_j} = \sum_k \Big(\alpha \frac{(x_j w_{kj})^+}{\sum_i (x_i w_{ki})^+}
              - \beta \frac{(x_j w_{kj})^-}{\sum_i (x_i w_{ki})^-}\Big) R_k,

    each sum computed, as in the seed, from two products: :math:`(xw)^+ = x^+ w^+ + x^- w^-` and
    :math:`(xw)^- = x^+ w^- + x^- w^+`.  The bias is left out (as in the seed and in Chefer et
    al.'s code).  ``beta`` defaults to ``alpha - 1``, which conserves relevance.
    """

    RULES = ("epsilon", "alpha_beta")

    def relprop(self, R: Tensor, rule: str = "epsilon", eps: float = 1e-9,
                alpha: float = 1.0, beta: float | None = None, **other):
        if rule not in self.RULES:
            raise ValueError(f"Linear.relprop: rule must be one of {self.RULES}, got {rule!r}")
        if not isinstance(eps, numbers.Real) or eps < 0:
            raise ValueError(f"Linear.relprop: eps must be a non-negative number, got {eps!r}")
        X = self._inputs()
        if rule == "epsilon":
            with torch.enable_grad():
                Z = torch.nn.functional.linear(X, self.weight, self.bias)
                _check_relevance("Linear", R, Z)
                _warn_if_lost("Linear", Z, R)
                (C,) = self.gradprop(Z, X, safe_divide(R, Z, eps))
            return (X * C).detach()
        beta = alpha - 1 if beta is None else beta
        w_pos, w_neg = self.weight.detach().clamp(min=0), self.weight.detach().clamp(max=0)
        x_pos, x_neg = X.detach().clamp(min=0), X.detach().clamp(max=0)
        positive = self._split(R, x_pos, x_neg, w_pos, w_neg) if alpha != 0 else 0.0
        negative = self._split(R, x_pos, x_neg, w_neg, w_pos) if beta != 0 else 0.0
        return alpha * positive - beta * negative

    def _split(self, R, x1, x2, w1, w2):
        """:math:`x_1 \\odot W_1^\\top S + x_2 \\odot W_2^\\top S` with :math:`S = R / (x_1 W_1^\\top + x_2 W_2^\\top)`."""
        with torch.enable_grad():
            x1, x2 = x1.requires_grad_(), x2.requires_grad_()
            Z1 = torch.nn.functional.linear(x1, w1)
            Z2 = torch.nn.functional.linear(x2, w2)
            _check_relevance("Linear", R, Z1)
            _warn_if_lost("Linear", Z1 + Z2, R)
            S = safe_divide(R, Z1 + Z2, eps=0.0)
            C1, C2 = torch.autograd.grad([Z1, Z2], [x1, x2], [S, S])
        return (x1 * C1 + x2 * C2).detach()


class Sequential(torch.nn.Sequential, RelProp):
    """A chain of relprop modules; ``relprop`` calls theirs in reverse order with the same rule."""

    def relprop(self, R: Tensor, **rule):
        for module in reversed(self):
            if not hasattr(module, "relprop"):
                raise TypeError(f"Sequential.relprop: {type(module).__name__} has no relprop method")
            R = module.relprop(R, **rule)
        return R


def _two_tensors(name: str, inputs) -> tuple:
    if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
        raise TypeError(f"{name}: inputs must be a list [a, b] of two tensors")
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise TypeError(f"{name}: inputs[{i}] must be a floating point tensor, got {got}")
    return inputs[0], inputs[1]
