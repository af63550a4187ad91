"""The captured explanations an :class:`~lrp_lib.explain.algorithm.LRPExplainer` keeps, keyed by what they depend
on: :class:`CaptureCache` decides which applies to a call; :func:`model_state` is what they depend on in the model
(a captured graph runs no hook, and holds the parameters it was captured with)."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from lrp_lib.core.validation import is_adjacency
from lrp_lib.explain.capture import AnyGraphExplanation, CompiledExplanation, traced_attr
from lrp_lib.explain.mode.function_mode import UnsupportedModelError

__all__ = ["CaptureCache", "model_state", "hooks_of", "ANY_GRAPH_AFTER"]

#: Without ``compile``, explanations of graphs explained once are captured for any graph from the model's this-many-th
#: such graph on (with the same parameters and input signature): the capture with symbolic sizes takes about a
#: second, which a few graphs explained eagerly do not pay.
ANY_GRAPH_AFTER = 32


class CaptureCache:
    """The captured explanations of the graphs an explainer explained, four at most (the most recent kept).

    :meth:`get` gives a graph's captured explanation (``compile=True``: compiled) from its second call on; None on
    the first call, where it does not apply (a sparse adjacency; hooks, which a captured graph would not run) and
    where the capture failed (``make_fx`` refuses a read of an input-dependent value): then every call with this key
    runs eagerly.  The key: the model's :func:`model_state`, the composite, the graph (``edge_index`` and the other
    tensor inputs, by identity and version; a float ``edge_attr``, an input of the graph, by its shape), the node
    features' shape, dtype and device, and ``compile``; each entry holds the objects its key names, so that no new
    object takes their ids.  Without an edge mask, ``compile=True`` first looks for an
    :class:`~lrp_lib.explain.capture.AnyGraphExplanation`, keyed by the model's state and the input signature
    instead (a model that cannot be captured so: per graph), as does ``compile=False`` (with or without an edge
    mask) for a graph not explained before, from the :data:`ANY_GRAPH_AFTER`-th on."""

    def __init__(self, size: int = 4):
        self.size = size
        self.captured: dict = {}  # key -> CompiledExplanation, [AnyGraphExplanation], or why not captured (str)
        self.seen: dict = {}  # key -> the objects it names: the graphs explained once

    def __len__(self) -> int:
        return sum(len(v) if isinstance(v, list) else isinstance(v, CompiledExplanation)
                   for v in self.captured.values())

    def get(self, model: nn.Module, x: Tensor, edge_index: Tensor, kwargs: dict, composite,
            edges: bool, compile: bool) -> tuple[CompiledExplanation | None, str]:
        """``(the captured explanation of this graph or None, why: "captured", "torch.compile", "captured for any
        graph", "torch.compile for any graph" or why not)``."""
        if is_adjacency(edge_index):  # (make_fx traces no sparse constant)
            return None, "a sparse adjacency: not captured"
        state, flags, hooks, held = model_state(model)
        if hooks:
            return None, f"not captured: {hooks} (a captured graph would not run them)"
        tensors = tuple((k, v.shape, v.dtype) if k in traced_attr(kwargs) else (id(v), v._version)  # (an input)
                        for k, v in kwargs.items() if isinstance(v, Tensor))
        key = (id(model), state, flags, composite.key(), edges, id(edge_index), edge_index._version, tensors,
               tuple(x.shape), x.dtype, x.device, compile)
        fresh = key not in self.captured and key not in self.seen  # (a graph not explained before)

        def seen():  # the first call on this graph: captured per graph from the second (the graph part folded)
            self.seen[key] = (edge_index, kwargs, held)
            _trim(self.seen, self.size)
        not_any = None  # why the explanation for any graph does not apply
        if (compile and not edges) or (fresh and not compile):
            found, not_any = self._any_graph(model, x, edge_index, kwargs, composite, (state, flags), edges, compile)
            if found is not None:
                if fresh and not compile:
                    seen()
                return found, ("torch.compile" if compile else "captured") + " for any graph"
        found = self.captured.pop(key, None)
        if found is None and key not in self.seen:  # the first call: eager (compiling per graph pays only on repeats)
            seen()
            first = "first call on this graph (" + ("compiled" if compile else "captured") + " from the second)"
            return None, first if not_any is None else f"{not_any}; {first}"
        if found is None:
            try:
                found = CompiledExplanation(model, x, edge_index, composite, edges, compile=compile, **kwargs)
            except (RuntimeError, UnsupportedModelError) as error:  # (make_fx: a read of input-dependent data; an
                found = f"not captured: {str(error).splitlines()[0]}"  # operation without a rule: eager, checked)
            _trim(self.captured, self.size - 1)
        self.captured[key] = found  # (the most recent last)
        return (None, found) if isinstance(found, str) else (found, "torch.compile" if compile else "captured")

    def _any_graph(self, model, x, edge_index, kwargs, composite, state, edges: bool, compile: bool) \
            -> tuple[AnyGraphExplanation | None, str | None]:
        """``(the explanation for any graph of this model and input signature that fits this graph, None)``,
        captured now if none does (``compile=False``: from the :data:`ANY_GRAPH_AFTER`-th graph not explained before
        on); ``(None, why)`` where the model cannot be captured so, or where the cache is full of captures that fit
        no later graph (the model's Python specialises on the sizes): then it is captured per graph."""
        tensors = tuple((k, v.dtype, v.dim()) for k, v in kwargs.items() if isinstance(v, Tensor))
        plain = tuple((k, v) for k, v in kwargs.items() if not isinstance(v, Tensor))
        key = ("any graph", id(model), *state, composite.key(), edges, tensors, plain, x.shape[1:], x.dtype,
               x.device, edge_index.dtype)
        entries = self.captured.pop(key, None)
        if isinstance(entries, str):
            self.captured[key] = entries
            return None, entries
        if not compile and not isinstance(entries, list) and (entries or 0) + 1 < ANY_GRAPH_AFTER:
            self.captured[key] = (entries or 0) + 1  # (the graphs seen, not yet captured for)
            return None, None
        entries = entries if isinstance(entries, list) else []
        found = next((e for e in entries if e.fits(x, edge_index, kwargs)), None)
        if found is None and len(entries) == self.size:  # (sizes the model's Python specialises on: per graph)
            self.captured[key] = f"not captured for any graph: {self.size} captures fit no later graph"
            return None, self.captured[key]
        if found is None:
            try:
                found = AnyGraphExplanation(model, x, edge_index, composite, compile, edges, **kwargs)
            except Exception as error:  # (make_fx: a read of input-dependent data, a size it cannot trace)
                self.captured[key] = f"not captured for any graph: {str(error).splitlines()[0]}"
                return None, self.captured[key]
            entries = [found, *entries][:self.size]
            _trim(self.captured, self.size - 1)
        self.captured[key] = entries
        return found, None


def _trim(entries: dict, size: int) -> None:
    while len(entries) > size:
        entries.pop(next(iter(entries)))


_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_OWN_HOOKS = "lrp_lib.explain.mode.edges"  # the message hooks of edge relevance, which run in every explanation
_HOOK_DICTS: dict = {}  # a MessagePassing class -> the names of its hook dictionaries


def model_state(model: nn.Module) -> tuple:
    """What a captured explanation depends on in the model: its parameters and buffers (which tensors, at which
    version), every module's training flag, which hooks would run Python in its forward, named, or None (global
    module hooks, or the first module with :func:`hooks_of`), and the parameters and buffers themselves (held by
    a cache that keys by their ids), all from one walk over its modules."""
    flags, held, hooks = [], [], None
    if any(getattr(torch.nn.modules.module, name, None) for name in _GLOBAL_HOOKS):
        hooks = "global module hooks are registered"
    for name, m in model.named_modules():
        flags.append(m.training)
        held += [t for t in (*m._parameters.values(), *m._buffers.values()) if t is not None]
        if hooks is None and (found := hooks_of(m)) is not None:
            hooks = f"module '{name or type(m).__name__}' has {found}"
    return tuple((id(t), t._version) for t in held), tuple(flags), hooks, held


def hooks_of(m: nn.Module) -> str | None:
    """Which hooks of module ``m`` (not its children) would run Python in its forward, or None: module
    hooks, and a message-passing layer's hooks other than those of edge relevance."""
    if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
        return "hooks"
    if isinstance(m, MessagePassing):
        attrs = _HOOK_DICTS.get(type(m))
        if attrs is None:  # (the same for every instance of a class: made by MessagePassing.__init__)
            attrs = _HOOK_DICTS[type(m)] = tuple(a for a, v in vars(m).items() if "forward" in a and
                                                 isinstance(v, dict) and not a.startswith("_forward"))
        for attr in attrs:
            hooks = getattr(m, attr, None)
            if hooks and any(getattr(h, "__module__", None) != _OWN_HOOKS for h in hooks.values()):
                return attr.strip("_")
    return None
