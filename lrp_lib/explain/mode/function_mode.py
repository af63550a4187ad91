r"""LRP for any model, by intercepting torch functions: :class:`RelevanceMode`.

Inside ``with ForwardMode(composite, model):`` every torch function the model calls (``F.linear``,
``Tensor.scatter_add_``, ``a * b``, ...) goes through :meth:`RelevanceMode.__torch_function__`, a
:class:`torch.overrides.TorchFunctionMode` pushed on the calling thread's own stack (other threads never see it;
nothing is patched).  It follows the tensors that depend on the explained inputs ("marked": the inputs and every
result of an operation on a marked tensor); an operation on marked tensors goes to its rule family, one on
constants only (weights, degrees, coefficients computed from ``edge_index``) runs unchanged.

What each operation on marked tensors gets (see :mod:`lrp_lib.core.composites` for why):

* views, indexing, ``gather``, ``index_select``, ``split``, ``expand``, ``repeat``, ``where``, ``sort``, ``topk``,
  ``max``/``min``/``amax``, ``scatter_reduce`` amax/amin, max pooling, dropout in eval mode: they pass like the
  gradient (copies sum their relevance; max and min: the winner takes all);
* ``cat``/``stack``: likewise, and a joined constant keeps its slice (a bias's share);
* ``F.linear``, ``x @ W``, convolutions (``W`` a weight): the composite's rule for that weight;
* sums, means, ``cumsum``, ``scatter_add``, ``index_add``, ``scatter_reduce`` sum/mean, ``A @ x`` (``A`` data),
  average pools, batch norm (eval): the epsilon rule (proportional split; constant terms keep their share);
* ``a + b``, ``a - b``: proportional to the terms; elementwise functions, ``x * c``, ``x / c``: identity;
* ``a * b`` (both marked): uniform (CP-LRP for attention weights); ``prod``, ``scatter_reduce`` prod
  (``MulAggregation``): uniform over the factors, R / n; ``a / b`` (both marked): denominator held constant;
  ``A @ B`` (both marked): uniform on each product term;
* ``softmax``: AttnLRP's softmax rule; layer / group / instance norm: identity through the normalisation;
* ``nn.MultiheadAttention`` (``GPSConv``, ``TransformerEncoderLayer``), ``nn.LSTM``/``GRU``/``RNN`` and their
  cells (``SAGEConv(aggr="lstm")``, ``Set2Set``): written out, each part as above (gates held constant:
  signal-take-all);
* anything else: blocked (no relevance passes, and the amount that reached it is recorded).

Sent to no rule: attribute reads (``.data``: a detach, reported), dropout (refused in training mode), and in-place
operations (``x.relu_()``, ``h += m``), computed out of place by the same rule, then copied into the tensor.
"""
from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from lrp_lib.core.composites import Composite, get_composite, weight_owners
from lrp_lib.explain.mode.dispatch import (BLOCKED_ROUTE, COPY_ROUTE, DETACH_ROUTE, DROPOUT_ROUTE, GET_ROUTE, HANDLERS,
                                           HANDLER_ROUTE, IDENTITY_ROUTE, INPLACE_ROUTE, PASS_ROUTE, PLAIN_ROUTE,
                                           route_of)
from lrp_lib.explain.mode import UnsupportedModelError, node_name
from lrp_lib.explain.mode.op_tables import AUGMENTED, IDENTITY, PASS_NODES

__all__ = ["RelevanceMode", "UnsupportedModelError"]


def _tensors(t):
    """The tensors of ``t``: itself, or those of the items of a tuple or list (nested)."""
    if isinstance(t, Tensor):
        yield t
    elif isinstance(t, (tuple, list)):
        for item in t:
            yield from _tensors(item)


class RelevanceMode(TorchFunctionMode):
    """The interception: every torch function called in its block on input-dependent tensors goes to its rule
    family, a method of :class:`~lrp_lib.explain.mode.forward.ForwardMode` (the class to use).

    Args:
        composite: a :class:`~lrp_lib.core.composites.Composite` (or a rule or its name).
        model: the explained module: its parameters are the weights whose rule the composite
            chooses (by the owning module's type or name), and its module names label the report.

    Raises:
        TypeError: ``model`` is not a module.

    Mark the explained inputs with :meth:`mark` inside the block, run the model, leave the block, then call
    ``mode.tally.backward(out, inputs, R)`` for the inputs' relevance; :attr:`tally` then holds what the biases
    and stabilisers kept and what reached operations without a rule.
    """

    def __init__(self, composite: Composite | str = "epsilon", model: nn.Module | None = None):
        super().__init__()
        self.composite = get_composite(composite)
        self._heads: dict[int, tuple[str, Tensor, Tensor]] = {}  # id(output) -> (function, its input, output)
        self.detached: set[str] = set()
        self._token = object()
        self._leaves: list[Tensor] = []
        self._leaf_nodes: set | None = None
        self._walked: set = set()  # the autograd nodes that _escaped has walked
        self._rules: dict[int, Any] = {}
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
        self._module_names = {} if model is None else {id(m): name for name, m in model.named_modules()}
        # id(parameter) -> (owner's name, owner, (message-passing layer, number of them) or None)
        self._owners = {id(p): owner for owner in ([] if model is None else weight_owners(model))
                        for p in owner[1]._parameters.values() if p is not None}

    def mark(self, t):
        """Mark ``t`` (a tensor, or a tuple/list of them) as depending on the explained input."""
        for x in _tensors(t):
            if x.is_floating_point() and x.requires_grad:
                x._lrp_mark = self._token
                if x.grad_fn is None:
                    self._leaves.append(x)
        return t

    def is_marked(self, t) -> bool:
        """Whether ``t`` is a tensor that depends on the explained input."""
        return isinstance(t, Tensor) and getattr(t, "_lrp_mark", None) is self._token

    def gate(self, t: Tensor) -> Tensor:
        """Mark ``t`` as a gate (a weight in [0, 1] that multiplies a signal)."""
        t._lrp_gate = self._token
        return t

    def is_gate(self, t) -> bool:
        return getattr(t, "_lrp_gate", None) is self._token

    def _escaped(self, t: Tensor) -> None:
        """Raise :class:`UnsupportedModelError` if ``t``, not marked, has an autograd history that reaches a marked
        input: it was computed outside the interception (a custom ``autograd.Function``)."""
        if self._leaf_nodes is None:
            self._leaf_nodes = {leaf.view_as(leaf).grad_fn.next_functions[0][0] for leaf in self._leaves}
        stack, path = [t.grad_fn], []
        while stack:
            node = stack.pop()
            if node is None or node in self._walked:
                continue
            if node in self._leaf_nodes:
                break
            self._walked.add(node)
            path.append(node)
            stack.extend(n for n, _ in node.next_functions)
        else:
            return
        # the Python autograd Functions on the way, if any; else every operation that does not pass relevance as it is
        names = sorted({node_name(n) for n in path if isinstance(n, torch.autograd.function.BackwardCFunction)}) or \
            sorted({node_name(n) for n in path if node_name(n) not in PASS_NODES})
        raise UnsupportedModelError(
            f"a tensor in {self.module_label()} depends on the input through {', '.join(names) or 'an operation'}, "
            f"which ran outside lrp_lib's interception (a custom torch.autograd.Function or an extension op): "
            f"relevance cannot be propagated through it. Write it with torch operations, or explain with "
            f"another method")

    def any_detached(self, args, kwargs) -> bool:
        """Whether an argument was detached from the input in this block (or computed from one that was)."""
        return any(getattr(a, "_lrp_detached", None) is self._token for a in _tensors([*args, *kwargs.values()]))

    def _any_marked(self, args, kwargs) -> bool:
        """Whether an argument is marked (checking each unmarked positional tensor with :meth:`_escaped`)."""
        for a in args:
            if self.is_marked(a) or (isinstance(a, (list, tuple)) and any(self.is_marked(b) for b in a)):
                return True
            if isinstance(a, Tensor) and a.grad_fn is not None and a.requires_grad:
                self._escaped(a)
        return any(self.is_marked(a) for a in kwargs.values())

    def module_label(self) -> str:
        """The qualified name and type of the innermost module of the model on the call stack."""
        frame = sys._getframe(2)
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, nn.Module) and id(owner) in self._module_names:
                name = self._module_names[id(owner)]
                return f"module '{name}' ({type(owner).__name__})" if name else \
                    f"the model's own forward ({type(owner).__name__})"
            frame = frame.f_back
        return "the model"

    def rule_for(self, w: Tensor):
        """The rule for a weight (or a view of one): the composite's rule of its owning module; None for a
        constant that no module owns (data)."""
        owner = self._owners.get(id(w)) or self._owners.get(id(getattr(w, "_base", None)))  # (or a view's base)
        if owner is None:
            return None
        key = id(owner[1])
        if key not in self._rules:
            self._rules[key] = self.composite.rule_for(*owner)
        return self._rules[key]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        route, kwargs = route_of(func), kwargs or {}
        kind = route.kind
        if kind == PLAIN_ROUTE or not torch.is_grad_enabled() or not self._any_marked(args, kwargs):
            out = func(*args, **kwargs)
            if self.detached and isinstance(out, Tensor) and self.any_detached(args, kwargs):
                out._lrp_detached = self._token  # computed from a detached input-dependent tensor
            return out
        name = route.name
        if kind == PASS_ROUTE:
            out = func(*args, **kwargs)
            if route.view:
                return out
            if any(self.is_gate(a) for a in args):  # a view or copy of attention weights stays one
                for t in _tensors(out):
                    self.gate(t)
            if args and getattr(args[0], "_lrp_nonneg", None) is self._token and isinstance(out, Tensor):
                out._lrp_nonneg = self._token  # a view or selection of a non-negative tensor is one
            return self.mark(out)
        if kind == COPY_ROUTE:
            if not kwargs.get("reduce") and not kwargs.get("accumulate"):
                out = func(*args, **kwargs)
                self.mark(args[0])
                return out
            kind = route.fallback
        if kind == HANDLER_ROUTE:
            out = self.mark(route.handler(self, func, args, kwargs))
        elif kind == IDENTITY_ROUTE:
            out = self.mark(self.identity(func, args, kwargs))
            if route.gate or (route.sign_flip and any(self.is_gate(a) for a in args)):
                self.gate(out)  # a sigmoid is a gate; so is its negation
        elif kind == INPLACE_ROUTE:
            return self.run_inplace(func, name, args, kwargs)
        elif kind == DETACH_ROUTE:
            self.detached.add(f"{name} in {self.module_label()}")
            out = func(*args, **kwargs)
            out._lrp_detached = self._token
            return out
        elif kind == GET_ROUTE:  # an attribute read: the attribute, marked where it is a tensor but .data or .grad
            attr = getattr(getattr(func, "__self__", None), "__name__", "")
            out = func(*args, **kwargs)
            if attr == "data":
                self.detached.add(f".data in {self.module_label()}")
            return self.mark(out) if isinstance(out, Tensor) and attr not in ("data", "grad") else out
        elif kind == DROPOUT_ROUTE:
            return self.run_dropout(func, name, args, kwargs)
        else:
            assert kind == BLOCKED_ROUTE
            out = self.blocked(func, name, args, kwargs)
        if route.head and isinstance(out, Tensor):
            self._heads[id(out)] = (name, args[0], out)
        return out

    def run_dropout(self, func, name, args, kwargs):
        """Dropout: refused in training mode with ``p > 0``; else its value, which keeps the input's marks."""
        training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        if training and p:
            raise UnsupportedModelError(f"{name} in training mode in {self.module_label()}: relevance of a random "
                                        f"mask is not defined; call model.eval() (PyG's Explainer does)")
        out = func(*args, **kwargs)
        source = args[0] if args else kwargs.get("input")
        if out is not source and isinstance(out, Tensor) and isinstance(source, Tensor):  # (eager: the input itself;
            out.__dict__.update({k: v for k, v in vars(source).items() if k.startswith("_lrp_")})  # traced: a copy)
        return self.mark(out)

    def run_inplace(self, func, name, args, kwargs):
        """An in-place operation: computed out of place on a copy, then copied into the tensor (so autograd
        records the copy and nothing that a rule saved is overwritten)."""
        base = AUGMENTED.get(name, name[:-1])
        target = args[0]
        if not isinstance(target, Tensor) or not (base in HANDLERS or base in IDENTITY):
            raise UnsupportedModelError(f"the in-place operation {name} in {self.module_label()} on a tensor that "
                                        f"depends on the input: LRP has no rule for it")
        source = target.clone()
        if self.is_marked(target):
            self.mark(source)
        outofplace = getattr(torch.Tensor, base, None) or getattr(torch, base, None) or getattr(F, base, None)
        if outofplace is None:
            raise UnsupportedModelError(f"the in-place operation {name} in {self.module_label()}: no out-of-place "
                                        f"version of it was found to compute its relevance")
        handler, new_args = HANDLERS.get(base), (source, *args[1:])
        result = handler(self, outofplace, new_args, kwargs) if handler else self.identity(outofplace, new_args, kwargs)
        return self.mark(target.copy_(result))

    def head_of(self, out: Tensor) -> tuple[str, Tensor] | None:
        """``(name, logits)`` if ``out`` is the output of a softmax, log_softmax or sigmoid computed in
        this mode (a probability head), with ``logits`` its input; else ``None``."""
        entry = self._heads.get(id(out))
        return (entry[0], entry[1]) if entry is not None and entry[2] is out else None
