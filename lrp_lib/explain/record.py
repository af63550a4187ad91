r"""Recording a :class:`Plan`: :class:`RecordingMode` is the relevance mode that also writes down each
torch function the model calls, for :mod:`lrp_lib.explain.replay` to execute again without the model's
Python.

A step holds the function, its arguments with every tensor replaced by a :class:`Ref` (to an input, a
parameter or buffer, a constant the model holds, or an earlier step's result), the module labels the
handlers asked for, and its result's shape, dtype and dependence on the input, or the Python value it
read from tensor data.  Functions whose result follows from the shapes (``size``, ``.shape``, ``dim``)
are not steps.  The layers' message hooks (:mod:`lrp_lib.explain.edges`) are steps too
(:class:`RecordingEdgeRecorder`).  A forward that cannot be written so (an argument the plan cannot
hold: a slice with tensor bounds, a sparse matrix object; a tensor depending on the input made outside
the intercepted functions) raises :class:`NotReplayable` and is explained by the mode.
"""
from __future__ import annotations

import weakref

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from lrp_lib.explain.dispatch import METADATA, PLAIN_ROUTE, route_of
from lrp_lib.explain.edges import EdgeRecorder
from lrp_lib.explain.function_mode import RelevanceMode

__all__ = ["Plan", "RecordingMode", "RecordingEdgeRecorder", "Ref", "Stale", "NotReplayable", "model_state",
           "hooked", "hooks_of", "resolve", "same_value", "LITERALS", "SHAPE_READS", "PLAIN_STEP", "MODE_STEP",
           "READ_STEP", "PROPAGATE_STEP", "MESSAGE_STEP"]

#: Functions whose (non-tensor) result follows from the shapes, which the signature and the shape checks fix.
SHAPE_READS = frozenset("""size dim ndimension numel nelement stride is_contiguous is_floating_point is_complex
element_size get_device __len__ storage_offset""".split())
LITERALS = (int, float, bool, str, complex, type(None), type(Ellipsis), torch.dtype, torch.device, torch.layout,
             torch.memory_format, torch.Size, np.generic)
PLAIN_STEP, MODE_STEP, READ_STEP, PROPAGATE_STEP, MESSAGE_STEP = range(5)
#: Names of functions whose results are random: never kept from one call to the next.
_RANDOM = ("rand", "normal", "bernoulli", "dropout", "multinomial", "poisson", "uniform", "exponential", "geometric",
           "cauchy", "random", "empty")


class Stale(Exception):
    """The plan does not hold for this call (a value read from data, a shape, a parameter changed)."""


class NotReplayable(Exception):
    """The recorded forward cannot be written as a plan (an argument the plan cannot hold)."""


class Ref:
    """A tensor of the plan: slot ``slot`` of the replay's values."""
    __slots__ = ("slot",)

    def __init__(self, slot: int):
        self.slot = slot


def resolve(a, env):
    t = type(a)
    if t is Ref:
        return env[a.slot]
    if t is tuple or t is list:
        return t(resolve(b, env) for b in a)
    if t is dict:
        return {k: resolve(v, env) for k, v in a.items()}
    return a


def _literal(v) -> bool:
    if isinstance(v, (tuple, list)):
        return all(_literal(b) for b in v)
    return isinstance(v, (*LITERALS, np.ndarray))


def same_value(new, old) -> bool:
    if isinstance(new, np.ndarray) or isinstance(old, np.ndarray):
        return isinstance(new, np.ndarray) and isinstance(old, np.ndarray) and new.shape == old.shape and \
            bool(np.array_equal(new, old))
    try:
        same = new == old
        return type(new) is type(old) and isinstance(same, bool) and same
    except Exception:  # noqa: BLE001 - an uncomparable value: not the same
        return False


class Plan:
    """The straight-line forward of one explanation (see the module docstring)."""

    def __init__(self, inputs: list[Tensor], marked: list[Tensor]):
        self.steps: list[tuple] = []
        self.step_refs: list[list[int]] = []  # per step: the slots its arguments read (while recording)
        self.env: list = list(inputs)  # slots 0..len(inputs)-1: the inputs, filled per replay
        self.n_inputs = len(inputs)
        self._slots = {id(t): i for i, t in enumerate(inputs)}
        self._alive: list = list(inputs)  # recorded tensors kept alive while recording (no reused ids)
        self._index = {i: i for i in range(len(inputs))}  # slot -> position in _alive
        self.held: list[tuple[Tensor, int]] = []  # (constant, its version) for the plan's constants
        self.states = None
        self.output: Ref | None = None
        self.detaches = False
        # the graph part: steps on the unexplained inputs (edge_index, batch) and constants only
        marked_ids = {id(t) for t in marked}
        self._graph = {i for i, t in enumerate(inputs) if id(t) not in marked_ids}
        self._touched: dict[int, tuple[Tensor, int]] = {}  # id -> (graph tensor, its version after its last step)
        self._kept: dict[int, Tensor] = {}  # graph slot -> its tensor
        self._cached_steps: list[int] = []
        self.graph_inputs: list[tuple[int, Tensor]] | None = None  # (slot, the recorded value)
        self.live_steps: list[tuple] = []
        self.drops: list[tuple] = []  # per step: the slots read by no later step (live_drops: of live_steps)
        self.live_drops: list[tuple] = []
        self.cached_env: list | None = None
        self.cached: list[tuple[Tensor, int]] = []  # (kept result of the graph part, its version)
        # the ATen program of a replayed explanation (lrp_lib.explain.compiled), how many times the
        # programs failed their guards and ran, and why none is made
        self.program = None
        self.program_failures = self.program_runs = 0
        self.program_refused: str | None = None

    # ------------------------------------------------------------ recording
    def ref(self, t: Tensor, marked: bool) -> Ref:
        slot = self._slots.get(id(t))
        if slot is not None:
            return Ref(slot)
        if marked or t.requires_grad and t.grad_fn is not None:
            raise NotReplayable("a tensor depending on the input was made outside the intercepted functions")
        # a constant: a parameter, a buffer, a tensor the model holds.  Not part of the graph part: its
        # values can change through .data without a version bump, so steps reading it run on every call
        slot = self._slots[id(t)] = len(self.env)
        self.env.append(t)
        self._index[slot] = len(self._alive)
        self._alive.append(t)
        self.held.append((t, t._version))
        return Ref(slot)

    def template(self, a, mode, refs: list | None = None):
        """``a`` with each tensor replaced by its :class:`Ref`; ``refs``: a list the slots are appended to."""
        if isinstance(a, Tensor):
            ref = self.ref(a, mode.is_marked(a))
            if refs is not None:
                refs.append(ref.slot)
            return ref
        if type(a) in (tuple, list):
            return type(a)(self.template(b, mode, refs) for b in a)
        if type(a) is dict:
            return {k: self.template(v, mode, refs) for k, v in a.items()}
        if isinstance(a, slice) and all(isinstance(v, (int, type(None))) for v in (a.start, a.stop, a.step)):
            return a
        if isinstance(a, LITERALS):
            return a
        raise NotReplayable(f"an argument of type {type(a).__name__}")

    def result(self, out, mode):
        """The result's spec: ``(slot, shape, dtype, marked)`` per tensor, or the value (non-tensors)."""
        if isinstance(out, Tensor):
            return self._register(out, mode)
        if isinstance(out, (tuple, list)) and any(isinstance(o, Tensor) for o in out):
            return tuple(self._register(o, mode) if isinstance(o, Tensor) else (None, o) for o in out)
        return None

    def _register(self, t: Tensor, mode):
        slot = self._slots[id(t)] = len(self.env)
        self.env.append(None)
        self._index[slot] = len(self._alive)
        self._alive.append(t)
        return slot, t.shape, t.dtype, mode.is_marked(t)

    def append(self, step: tuple, refs: list) -> None:
        """A step, with the slots its arguments read (``refs``, in order)."""
        self.steps.append(step)
        self.step_refs.append(refs)

    def add(self, kind: int, func, args, kwargs, out, labels: list, mode) -> None:
        refs: list[int] = []
        args_t, top, nested = [], [], False  # top: (position, slot) of the arguments that are tensors
        for i, a in enumerate(args):
            before = len(refs)
            t = self.template(a, mode, refs)
            if type(t) is Ref:
                top.append((i, t.slot))
            elif len(refs) > before:
                nested = True
            args_t.append(t)
        flat = None if nested else ([None if type(a) is Ref else a for a in args_t], tuple(top))
        args_t = tuple(args_t)
        kwargs_t = {k: self.template(v, mode, refs) for k, v in kwargs.items()} if kwargs else {}
        spec = self.result(out, mode)
        value = None
        if spec is None:
            value = out
            if not _literal(out):
                raise NotReplayable(f"{getattr(func, '__name__', func)} returned a {type(out).__name__}")
            kind = READ_STEP
        self.append((kind, func, args_t, kwargs_t, flat, spec, value, labels[::-1]), refs)
        name = getattr(func, "__name__", "")
        graph = all(r in self._graph for r in refs) and (refs or kind == PLAIN_STEP)
        if kind in (PLAIN_STEP, READ_STEP) and graph and not any(w in name for w in _RANDOM):
            # computed from the graph and constants only
            self._cached_steps.append(len(self.steps) - 1)
            outs = [] if spec is None else [spec] if type(spec[0]) is int else [e for e in spec if e[0] is not None]
            self._graph.update(e[0] for e in outs)
            tensors = [(e[0], o) for e, o in zip(outs, [out] if isinstance(out, Tensor) else
                                                 [o for o in out if isinstance(o, Tensor)])] if outs else []
            for r in refs:
                tensors.append((r, self._alive[self._index[r]] if r in self._index else None))
            for slot, t in tensors:
                if t is not None:
                    self._touched[id(t)] = (t, t._version)
                    self._kept[slot] = t

    def finish(self, out: Tensor, mode, model: nn.Module) -> None:
        if not isinstance(out, Tensor):
            raise NotReplayable(f"the model returns a {type(out).__name__}")
        self.output = self.ref(out, mode.is_marked(out))
        self.states = model_state(model)
        for t, version in self.held:
            if t._version != version:
                raise NotReplayable("the forward changes a constant in place")
        self.detaches = bool(mode.detached)
        self.env = [None] * self.n_inputs + self.env[self.n_inputs:]
        self.drops = _drops(self.steps, self.output.slot, self.step_refs)
        if not self.detaches and all(t._version == v for t, v in self._touched.values()):
            # nothing else changed the graph part in place: its results are kept, for calls on the same graph
            self.graph_inputs = [(i, self._alive[i].detach().clone()) for i in range(self.n_inputs)
                                 if i in self._kept]
            self.cached_env = list(self.env)
            for slot, t in self._kept.items():
                if slot >= self.n_inputs:
                    self.cached_env[slot] = t
            cached = set(self._cached_steps)
            self.live_steps = [step for i, step in enumerate(self.steps) if i not in cached]
            self.live_drops = _drops(self.live_steps, self.output.slot,
                                     [r for i, r in enumerate(self.step_refs) if i not in cached])
            inputs = {id(t) for t in self._alive[:self.n_inputs]}
            self.cached = [(t, v) for t, v in self._touched.values() if id(t) not in inputs]
        del self._slots, self._alive, self._index, self._touched, self._graph, self._kept, self.step_refs


def _drops(steps: list, output: int, refs: list) -> list:
    """For each step, the slots that no later step reads (``refs``: the slots each step reads):
    :func:`~lrp_lib.explain.replay.replay` lets go of them after the step, so that a replayed forward
    holds no more than the model's own (an intermediate tensor, such as a layer's messages, is freed
    once its last reader has run)."""
    last: dict[int, int] = {}
    for i, (step, reads) in enumerate(zip(steps, refs)):
        spec = step[5]
        if spec is not None:  # a result read by no step is dropped at once
            for e in ([spec] if type(spec[0]) is int else [e for e in spec if e[0] is not None]):
                last.setdefault(e[0], i)
        for r in reads:
            last[r] = i
    drops: dict[int, list] = {}
    for slot, i in last.items():
        if slot != output:
            drops.setdefault(i, []).append(slot)
    return [tuple(drops.get(i, ())) for i in range(len(steps))]


def model_state(model: nn.Module) -> tuple:
    """What the plan holds of the model: its parameters and buffers (which tensors, at which version),
    every module's training flag, and whether hooks would run Python in its forward (:func:`hooks_of`,
    or global module hooks), all from one walk over its modules."""
    flags, tensors = [], []
    hooks = any(getattr(_torch_module, name, None) for name in _GLOBAL_HOOKS)
    for m in _modules(model):
        flags.append(m.training)
        for t in m._parameters.values():
            if t is not None:
                tensors.append((id(t), t._version))
        if m._buffers:
            for t in m._buffers.values():
                if t is not None:
                    tensors.append((id(t), t._version))
        if not hooks and hooks_of(m) is not None:
            hooks = True
    return tuple(tensors), tuple(flags), hooks


def _modules(model: nn.Module) -> list[nn.Module]:
    """``list(model.modules())`` (each module once, parents before children, in order), without the
    names that ``named_modules`` builds for each."""
    found, seen, stack = [], set(), [model]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        found.append(m)
        children = [c for c in m._modules.values() if c is not None]
        children.reverse()
        stack.extend(children)
    return found


_torch_module = torch.nn.modules.module
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_OWN_HOOKS = "lrp_lib.explain.edges"  # the message hooks of edge relevance: steps of the plan
_HOOK_DICTS: dict = {}  # a MessagePassing class -> the names of its hook dictionaries


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


def hooked(model: nn.Module) -> str | None:
    """Which hooks of ``model`` (or global module hooks) would run Python in its forward, or None."""
    if any(getattr(_torch_module, name, None) for name in _GLOBAL_HOOKS):
        return "global module hooks are registered"
    for name, m in model.named_modules():
        found = hooks_of(m)
        if found is not None:
            return f"module '{name or type(m).__name__}' has {found}"
    return None


class RecordingMode(RelevanceMode):
    """:class:`~lrp_lib.explain.function_mode.RelevanceMode` that writes down its :class:`Plan`
    (the same relevance: each call goes through the mode's dispatch unchanged)."""

    def __init__(self, *args, plan: Plan, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan, self.failure, self._inner, self._labels = plan, None, 0, None

    def module_label(self) -> str:
        label = super().module_label()
        if self._labels is not None:
            self._labels.append(label)
        return label

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self._inner or self.failure is not None:
            return super().__torch_function__(func, types, args, kwargs)
        route = route_of(func) if self.fast else None
        plain = route is not None and (route.kind == PLAIN_ROUTE or not torch.is_grad_enabled()
                                       or not self._any_marked(args, kwargs or {}))
        self._labels = labels = []
        try:
            out = super().__torch_function__(func, types, args, kwargs)
        finally:
            self._labels = None
        if not isinstance(out, Tensor) and route is not None and route.kind == PLAIN_ROUTE and (
                func.__name__ in SHAPE_READS or (route.name == "__get__" and getattr(
                    getattr(func, "__self__", None), "__name__", "") in METADATA)):
            return out  # follows from the shapes: not replayed
        try:
            self.plan.add(PLAIN_STEP if plain else MODE_STEP, func, args, kwargs, out, labels, self)
        except NotReplayable as e:
            self.failure = str(e)
        return out

    def layer_step(self, kind: int, module, tensors, passed=None) -> None:
        """A message-passing layer's propagate (``tensors`` its edges) or messages (``tensors`` the
        messages, ``passed`` what the hook returned) as a step of the plan."""
        if self.failure is None:
            try:
                refs: list[int] = []
                args_t = self.plan.template(tensors, self, refs)
                spec = self.plan.result(passed, self) if passed is not None else None
                self.plan.append((kind, weakref.ref(module), args_t, None, None, spec, None, []), refs)
            except NotReplayable as e:
                self.failure = str(e)


class _Propagations(dict):
    """The edges each layer propagates along (written by the propagate hook of :mod:`lrp_lib.explain.edges`):
    each write is a step of the plan."""

    def __init__(self, record):
        super().__init__()
        self.record = record

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.record(key, value)


class RecordingEdgeRecorder(EdgeRecorder):
    """:class:`~lrp_lib.explain.edges.EdgeRecorder` whose hooks are steps of the plan."""

    def __init__(self, mode, model, edge_index, dtype):
        super().__init__(mode, model, edge_index, dtype)
        modules = {id(m): m for m in model.modules()}
        self.edges_of = _Propagations(lambda key, edges: mode.layer_step(PROPAGATE_STEP, modules[key], edges))
        self.modules = modules

    def messages(self, module, out):
        mode = self.mode
        mode._inner += 1
        try:
            passed = super().messages(module, out)
        finally:
            mode._inner -= 1
        if id(module) in self.names:
            mode.layer_step(MESSAGE_STEP, module, out, passed)
        return passed
