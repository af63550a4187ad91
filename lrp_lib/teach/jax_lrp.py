r"""The relprop style ported to JAX / Flax: ``relprop`` methods built on ``jax.vjp``.

The third of the book's three implementations (after the autograd trick of
:mod:`lrp_lib.teach.ops` and the hook-based modules of :mod:`lrp_lib.teach.relprop`).  JAX has no
hooks and no stored graph: a Flax module's ``relprop(R, *inputs)`` gets its inputs passed
in again, and each step is

.. math:: Z, \mathrm{vjp} = \texttt{jax.vjp}(f, X),\quad S = R \oslash Z,\quad R_X = X \odot \mathrm{vjp}(S),

the same vector-Jacobian product that ``torch.autograd.grad`` gives the relprop modules.
The model's ``relprop`` (here :class:`MLP`) runs the forward once to collect each layer's
input and walks the layers backwards.  Fan-out needs no ``Clone`` module: where a value is
used twice, the walk adds the relevance of its uses (``+``).

JAX is an optional dependency of ``lrp_lib``: only this module imports it.  Everything here
works in float32 and, after ``jax.config.update("jax_enable_x64", True)``, in float64; the
functions are pure, so ``jax.jit`` compiles a whole relevance pass (the lost-relevance
warning is only raised outside ``jit``, where values are concrete).
"""
from __future__ import annotations

import numbers
import warnings
from typing import Sequence

import flax.linen as fnn
import jax
import jax.numpy as jnp

from lrp_lib.core.stabilizer import LostRelevanceWarning

__all__ = ["safe_divide", "RelProp", "MatMul", "Add", "IndexSelect", "ReLU", "Dense", "MLP"]


def safe_divide(a, b, eps: float = 1e-9):
    r""":math:`a / (b + \epsilon\,\mathrm{sign}(b))` where :math:`b \neq 0`, and 0 where :math:`b = 0`
    (as :func:`lrp_lib.teach.relprop.safe_divide`).  This module's own division: it works on JAX
    arrays, which :mod:`lrp_lib.core.stabilizer` (torch) does not take, and keeps the relprop
    convention at :math:`b = 0` (0 for every :math:`\epsilon`) on which the chapter's numbers,
    equal to the PyTorch ones, depend."""
    b = jnp.asarray(b, dtype=jnp.result_type(a, b))
    sign = jnp.where(b >= 0, 1.0, -1.0).astype(b.dtype)
    safe = jnp.where(b == 0, jnp.ones_like(b), b + eps * sign)
    return jnp.where(b == 0, jnp.zeros_like(a / safe), a / safe)


def _warn_if_lost(name: str, z, r) -> None:
    if isinstance(z, jax.core.Tracer) or isinstance(r, jax.core.Tracer):
        return  # inside jit: values are not known
    lost = (z == 0) & (r != 0)
    if bool(lost.any()):
        amount = float(jnp.abs(jnp.where(lost, r, 0)).sum())
        warnings.warn(
            f"{name}.relprop: relevance of total magnitude {amount:.4g} reached outputs equal to zero "
            f"and was lost (a zero output cannot be split in proportion to its inputs)",
            LostRelevanceWarning,
            stacklevel=3,
        )


def _check_relevance(name: str, R, z, what: str = "R"):
    if not hasattr(R, "shape"):
        raise TypeError(f"{name}.relprop: {what} must be an array, got {type(R).__name__}")
    if tuple(R.shape) != tuple(z.shape):
        raise ValueError(
            f"{name}.relprop: {what} has shape {tuple(R.shape)} but the module's output has shape {tuple(z.shape)}"
        )


def _proportional(name: str, f, R, *inputs):
    r""":math:`R_{X_i} = X_i \odot J_i^\top (R \oslash f(X))` for each input :math:`X_i` of ``f``."""
    z, vjp = jax.vjp(f, *inputs)
    _check_relevance(name, R, z)
    _warn_if_lost(name, z, R)
    c = vjp(safe_divide(R, z).astype(z.dtype))  # R in another precision is cast to the output's
    return tuple(x * ci for x, ci in zip(inputs, c))


class RelProp(fnn.Module):
    """Base class: ``relprop(R, *inputs, **rule)`` returns ``R``; rule arguments are ignored
    by the modules that have no rule, so that a model can pass them to every layer."""

    def relprop(self, R, *inputs, **rule):
        return R


class MatMul(RelProp):
    r"""``jnp.matmul(a, b)``; ``relprop(R, a, b)`` returns ``(R_a, R_b)``,
    :math:`R_{a_{ij}} = \sum_k \frac{a_{ij} b_{jk}}{z_{ik}} R_{ik}` and likewise for ``b``."""

    def __call__(self, a, b):
        return jnp.matmul(a, b)

    def relprop(self, R, a, b, **rule):
        return _proportional("MatMul", jnp.matmul, R, a, b)


class Add(RelProp):
    r"""``a + b`` with the seed's normalised relevance (see :class:`lrp_lib.teach.relprop.Add`):
    the element-wise split, rescaled so that the two totals are in the ratio
    :math:`|\Sigma r_a| : |\Sigma r_b|` and add up to :math:`\Sigma R`."""

    def __call__(self, a, b):
        return jnp.add(a, b)

    def relprop(self, R, a, b, **rule):
        r_a, r_b = _proportional("Add", jnp.add, R, a, b)
        sum_a, sum_b = r_a.sum(), r_b.sum()
        magnitude = jnp.abs(sum_a) + jnp.abs(sum_b)
        _warn_if_lost("Add", magnitude.reshape(1), R.sum().reshape(1))
        share_a = safe_divide(jnp.abs(sum_a), magnitude) * R.sum()
        share_b = safe_divide(jnp.abs(sum_b), magnitude) * R.sum()
        return r_a * safe_divide(share_a, sum_a), r_b * safe_divide(share_b, sum_b)


class IndexSelect(RelProp):
    r"""``jnp.take(x, index, axis=dim)``; ``relprop(R, x, dim, index)``:
    :math:`R_{x_j} = x_j \sum_{k: index_k = j} R_k / x_j`."""

    def __call__(self, x, dim: int, index):
        return jnp.take(x, index, axis=dim)

    def relprop(self, R, x, dim: int, index, **rule):
        (r_x,) = _proportional("IndexSelect", lambda t: jnp.take(t, index, axis=dim), R, x)
        return r_x


class ReLU(RelProp):
    r"""``max(x, 0)``: :math:`R_x = R` where :math:`x > 0`, else lost."""

    def __call__(self, x):
        return fnn.relu(x)

    def relprop(self, R, x, **rule):
        (r_x,) = _proportional("ReLU", fnn.relu, R, x)
        return r_x


class Dense(fnn.Dense):
    r"""``flax.linen.Dense`` (:math:`z = x K + b`, kernel ``(in, out)``) with ``relprop(R, x, rule=...)``.

    The rules of :class:`lrp_lib.teach.relprop.Linear`: ``"epsilon"`` (bias inside :math:`z`) and
    ``"alpha_beta"`` (bias left out; ``beta`` defaults to ``alpha - 1``), with
    :math:`(xw)^+ = x^+ w^+ + x^- w^-` and :math:`(xw)^- = x^+ w^- + x^- w^+`.
    """

    RULES = ("epsilon", "alpha_beta")

    def relprop(self, R, x, rule: str = "epsilon", eps: float = 1e-9,
                alpha: float = 1.0, beta: float | None = None, **other):
        if rule not in self.RULES:
            raise ValueError(f"Dense.relprop: rule must be one of {self.RULES}, got {rule!r}")
        if not isinstance(eps, numbers.Real) or eps < 0:
            raise ValueError(f"Dense.relprop: eps must be a non-negative number, got {eps!r}")
        if rule == "epsilon":
            z, vjp = jax.vjp(self.__call__, x)
            _check_relevance("Dense", R, z)
            _warn_if_lost("Dense", z, R)
            return x * vjp(safe_divide(R, z, eps).astype(z.dtype))[0]
        beta = alpha - 1 if beta is None else beta
        kernel = self.variables["params"]["kernel"]
        w_pos, w_neg = jnp.clip(kernel, min=0), jnp.clip(kernel, max=0)
        x_pos, x_neg = jnp.clip(x, min=0), jnp.clip(x, max=0)
        positive = self._split(R, x_pos, x_neg, w_pos, w_neg) if alpha != 0 else 0.0
        negative = self._split(R, x_pos, x_neg, w_neg, w_pos) if beta != 0 else 0.0
        return alpha * positive - beta * negative

    @staticmethod
    def _split(R, x1, x2, w1, w2):
        """:math:`x_1 \\odot S W_1^\\top + x_2 \\odot S W_2^\\top` with :math:`S = R / (x_1 W_1 + x_2 W_2)`."""
        z, vjp = jax.vjp(lambda a, b: jnp.dot(a, w1) + jnp.dot(b, w2), x1, x2)
        _check_relevance("Dense", R, z)
        _warn_if_lost("Dense", z, R)
        c1, c2 = vjp(safe_divide(R, z, eps=0.0).astype(z.dtype))
        return x1 * c1 + x2 * c2


class MLP(fnn.Module):
    """``Dense -> ReLU -> ... -> Dense`` with one ``Dense`` per entry of ``features``.

    ``relprop(R, x, **rule)`` runs the forward once to collect every layer's input, then
    walks the layers backwards, passing ``rule`` to each.
    """

    features: Sequence[int]
    use_bias: bool = True

    def setup(self):
        layers = []
        for i, f in enumerate(self.features):
            layers.append(Dense(f, use_bias=self.use_bias))
            if i < len(self.features) - 1:
                layers.append(ReLU())
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def relprop(self, R, x, **rule):
        inputs = []
        for layer in self.layers:
            inputs.append(x)
            x = layer(x)
        for layer, layer_input in zip(reversed(self.layers), reversed(inputs)):
            R = layer.relprop(R, layer_input, **rule)
        return R
