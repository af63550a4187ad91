r"""Composites: which rule each part of a model gets (Zennit's design, for graph networks).

A :class:`Composite` maps the weights of a model to :class:`~lrp_lib.core.rules.Rule` objects -- by module type,
by qualified name (a glob such as ``"convs.0.*"``) or by message-passing depth -- and sets the few choices that
are not per-weight rules.  What each family of operations (:mod:`lrp_lib.explain.mode.function_mode`) gets, and why:

* **Linear maps with a weight**: the rule that ``rules`` or ``layers`` name, else ``linear``, whose default
  ``None`` is the default of what runs the composite: :class:`~lrp_lib.core.rules.ZPlus` in ``LRPExplainer``,
  :class:`~lrp_lib.core.rules.Epsilon` (:math:`\epsilon = 10^{-6}`) in the walks and ``explain_tensor``.  A small
  :math:`\epsilon` is LRP-0 up to the stabiliser: input :math:`\times` gradient on a bias-free piecewise-linear model.
* **Maps without a weight** (sums, aggregations, pools, a product with the adjacency, batch norm in eval mode):
  epsilon with the composite's ``epsilon``; the coefficients are data, so :math:`\gamma` and z+ do not apply.
* **Max and min**: the winner takes all.  **Elementwise functions**: the identity rule.
* **Gates** (a sigmoid's output, or ``1 - z`` of one, times a signal: GRU, LSTM, gated convolutions): the gate is
  held constant and the signal takes all ("signal-take-all", Arras et al., 2017).  **Other products of two
  input-dependent factors** (FiLM, ``h * h``): AttnLRP's uniform rule, half each.
* **Attention** (a normalised weight: a softmax's output, PyG's ``softmax``, ``a / b`` with a data-dependent
  ``b``): ``attention="cp"`` (default) holds it constant (CP-LRP, Ali et al., 2022), so all relevance goes to the
  values; ``"uniform"`` gives it half (AttnLRP), which flows on through the scores.  The softmax gets AttnLRP's
  rule :math:`R_x = x \odot (R - s \sum R)`; what it does not conserve is counted with the biases.
* **Normalisation** (layer, group, instance norm): relevance passes the normalisation unchanged and the affine
  part splits it (AttnLRP's LayerNorm rule); batch norm in eval mode is the linear map :math:`a x + c` it is.

Named composites (besides every rule name):

* ``"epsilon"``, ``"z"``: :class:`~lrp_lib.core.rules.Epsilon` (:math:`10^{-6}`, or 0: exact conservation on
  bias-free models) on every weight; ``"gamma"``, ``"zplus"``: ``Gamma(0.25)``, :class:`~lrp_lib.core.rules.ZPlus`
  (``LRPExplainer``'s default, chosen by the benchmark of chapter 9) on every weight.
* ``"gamma_sgnn"``: :math:`\gamma_i` from 3 at the first message-passing layer down to 0 at the last, the dense
  head at :math:`\epsilon`: Xiong et al.'s sGNN-LRP.
* ``"gamma_dig"``: :math:`\gamma = 2` in the first message-passing layer, :math:`\gamma = 1` elsewhere: DIG's
  GNN-LRP (after Schnake et al., 2021).
* ``"layered"``, after Kohlbrenner et al. (2020): ``Epsilon(0.1)`` on the dense layers, ``Gamma(0.25)`` in the
  message-passing layers, the bounded :class:`~lrp_lib.core.rules.ZBox` in the first one, whose input is the data.
"""
from __future__ import annotations

import copy
import fnmatch
from typing import Callable, Mapping, Sequence

import torch
from torch import nn
from torch_geometric.nn import MessagePassing

from lrp_lib.core.rules import Epsilon, Gamma, Rule, ZBox, get_rule
from lrp_lib.core.validation import check_number

__all__ = ["Composite", "get_composite", "weight_owners", "message_passing_layers", "NAMED_COMPOSITES"]

_ATTENTION = ("cp", "uniform")


class Composite:
    """Rules for the weights of a model, and the choices that are not per-weight rules.

    Args:
        linear: the rule (a :class:`Rule` or its name) of every weight that ``rules`` and ``layers`` do not name.
            ``None`` (the default): the default rule of what runs the composite (:meth:`with_default`).
        rules: ``{module type or glob pattern of the qualified module name: rule}``; the first entry that matches
            the module owning a weight wins (names before types: put the most specific first).  Example:
            ``{"conv1.*": "gamma", nn.Linear: Epsilon(0.01)}``.
        epsilon: the stabiliser of the maps without weights (sums, aggregations, pools) and of the elementwise
            affine maps (norms).  ``0`` conserves exactly (a zero output then loses its relevance, with a warning).
        attention: ``"cp"`` (normalised weights held constant) or ``"uniform"`` (half the product's relevance).
        bias: ``True`` (default): biases and other constant terms take their share of each split (reported as
            ``bias_relevance``).  ``False``: they take none, and all relevance reaches the inputs (Zennit's
            ``zero_params="bias"``).
        layers: the rule of the weights inside each message-passing layer (the model's ``MessagePassing``
            modules in registration order, submodules included): a sequence (rule of layer 0, 1, ...; layers past
            its end get ``linear``) or a function ``(i, n) -> rule`` of the layer's index ``i`` and the model's
            number ``n`` of message-passing layers.  ``rules`` take precedence, then ``layers``, then ``linear``.

    Raises TypeError or ValueError for a bad rule, key, ``layers``, ``epsilon``, ``attention`` or ``bias``.
    """

    def __init__(self, linear: Rule | str | None = None, rules: Mapping | None = None, epsilon: float = 1e-6,
                 attention: str = "cp", bias: bool = True,
                 layers: Sequence[Rule | str] | Callable[[int, int], Rule | str] | None = None):
        self.linear = None if linear is None else get_rule(linear)
        if layers is not None and not callable(layers):
            if isinstance(layers, (str, Rule)) or not isinstance(layers, Sequence):
                raise TypeError(f"layers must be a sequence of rules or a function (i, n) -> rule, got {layers!r}")
            layers = tuple(get_rule(r) for r in layers)
        self.layers = layers
        self.rules = []
        for key, rule in (rules or {}).items():
            if not (isinstance(key, str) or (isinstance(key, type) and issubclass(key, nn.Module))):
                raise TypeError(f"rules keys must be module types or name patterns (str), got {key!r}")
            self.rules.append((key, get_rule(rule)))
        self.epsilon = check_number(epsilon, "epsilon")
        if attention not in _ATTENTION:
            raise ValueError(f"attention must be one of {_ATTENTION}, got {attention!r}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False, got {bias!r}")
        self.attention, self.bias = attention, bias

    def with_default(self, rule: Rule | str) -> "Composite":
        """This composite if its ``linear`` is set, else a copy with ``rule`` as ``linear`` (the default rule)."""
        if self.linear is not None:
            return self
        resolved = copy.copy(self)
        resolved.linear = get_rule(rule)
        return resolved

    def rules_of(self, model: nn.Module) -> dict[str, Rule]:
        """The rule of each module of ``model`` that owns a weight (a parameter of two or more dimensions; biases and
        norms' scales take no rule), by qualified name (``""``: the model itself)."""
        return {name: self.rule_for(name, module, layer) for name, module, layer in weight_owners(model)
                if any(p is not None and p.dim() >= 2 for p in module._parameters.values())}

    def rule_for(self, name: str, module: nn.Module, layer: tuple[int, int] | None = None) -> Rule:
        """The rule of the weights owned by ``module`` (qualified name ``name``); ``layer``: ``(i, n)``
        when the module belongs to the ``i``-th of the model's ``n`` message-passing layers."""
        found = [r for k, r in self.rules if isinstance(k, str) and fnmatch.fnmatchcase(name, k)] + \
            [r for k, r in self.rules if isinstance(k, type) and isinstance(module, k)]  # names before types
        if found:
            return found[0]
        if layer is not None and self.layers is not None:
            i, n = layer
            if callable(self.layers):
                return get_rule(self.layers(i, n))
            if i < len(self.layers):
                return self.layers[i]
        if self.linear is None:
            raise ValueError("this Composite leaves its default rule to what runs it (linear=None): give "
                             "Composite.with_default(rule) a rule, or pass the composite to an explainer")
        return self.linear

    def key(self) -> tuple:
        """A hashable value (an explainer's cache key), the same for composites that make the same choices; a tensor
        in a rule (a :class:`~lrp_lib.core.rules.ZBox` bound) and a ``layers`` function count by identity."""
        def value(v):
            return ("object", id(v)) if isinstance(v, torch.Tensor) or callable(v) else v

        def rule(r):
            return type(r).__name__, tuple(sorted((k, value(v)) for k, v in vars(r).items()))
        layers = value(self.layers) if callable(self.layers) or self.layers is None else \
            tuple(rule(r) for r in self.layers)
        linear = None if self.linear is None else rule(self.linear)
        return (linear, tuple((value(k) if isinstance(k, type) else k, rule(r)) for k, r in self.rules),
                self.epsilon, self.attention, self.bias, layers)

    def __repr__(self):
        return (f"Composite(linear={self.linear!r}, rules={dict(self.rules)!r}, epsilon={self.epsilon!r}, "
                f"attention={self.attention!r}, bias={self.bias!r}, layers={self.layers!r})")


def _linear_gamma(i: int, n: int) -> Rule:
    """Xiong et al.'s schedule: gamma from 3 at the first of ``n`` layers down to 0 at the last."""
    return Gamma(3.0 * (n - 1 - i) / (n - 1)) if n > 1 else Gamma(3.0)


#: name -> function making the named composite (see the module docstring).
NAMED_COMPOSITES: dict[str, Callable[[], Composite]] = {
    "gamma_sgnn": lambda: Composite(linear=Epsilon(), layers=_linear_gamma),
    "gamma_dig": lambda: Composite(linear=Gamma(1.0), layers=[Gamma(2.0)]),
    "layered": lambda: Composite(linear=Epsilon(0.1), layers=lambda i, n: ZBox() if i == 0 else Gamma(0.25)),
}


def message_passing_layers(model: nn.Module) -> list[str]:
    """The qualified names of the model's outermost ``MessagePassing`` modules, in the order of ``named_modules``."""
    layers = [name for name, module in model.named_modules() if isinstance(module, MessagePassing)]
    return [n for n in layers if not any(n.startswith(o + ".") for o in layers if o != n and o)]


def weight_owners(model: nn.Module) -> list[tuple[str, nn.Module, tuple[int, int] | None]]:
    """Each module of ``model`` that owns parameters, once, in the order of ``named_modules``: its qualified name, the
    module, and ``(i, n)`` if it is in the ``i``-th of the model's ``n`` outermost message-passing modules
    (:func:`message_passing_layers`)."""
    layers = message_passing_layers(model)
    return [(name, module, next(((i, len(layers)) for i, o in enumerate(layers)
                                 if name == o or not o or name.startswith(o + ".")), None))
            for name, module in model.named_modules() if any(p is not None for p in module._parameters.values())]


def get_composite(composite: Composite | Rule | str, default: Rule | str = "epsilon") -> Composite:
    """A :class:`Composite` from a composite (one with ``linear=None`` gets ``default``), a rule (for every weight,
    its epsilon for the maps without weights), a named composite (listed in the module docstring) or any rule name
    of :func:`lrp_lib.core.rules.get_rule`."""
    if isinstance(composite, Composite):
        return composite.with_default(default)
    if isinstance(composite, str) and composite.lower().replace("-", "_") in NAMED_COMPOSITES:
        return NAMED_COMPOSITES[composite.lower().replace("-", "_")]()
    rule = get_rule(composite)
    return Composite(linear=rule, epsilon=getattr(rule, "eps", 1e-6))
