r"""Record once, replay after: the forward of an explanation without the model's Python.

Inside :class:`~lrp_lib.explain.function_mode.RelevanceMode` the model's own Python (PyG's
``propagate``, ``collect``, the checks of each layer) runs on every explanation, and the mode looks
at each of the few hundred torch functions it calls.  For a given model and input signature (the
shapes, dtypes and devices of the inputs, the other arguments, the composite and the options) the
torch functions that run are the same every time, unless the model's Python reads values from
tensor data (``.item()``, ``int(t)``, ``if t.any():``, a ``nonzero`` whose size decides a shape).

:class:`~lrp_lib.explain.record.RecordingMode` is the mode that also writes down a :class:`Plan`: each
torch function the model called, its arguments with every tensor replaced by a reference (to an input, a parameter or
buffer, a constant, or an earlier step's result), the module labels the handlers asked for, the
shape and dtype of each result and every Python value read from tensor data.  :func:`replay`
executes the plan on new inputs: each step goes through the mode's own dispatch
(:meth:`~lrp_lib.explain.function_mode.RelevanceMode.__torch_function__`, called as a function,
not as a mode) or, for a step on constants only, is called directly, so the same relevance
primitives build the same autograd graph, and the same backward gives the same relevance.

Guards (:class:`Stale`: the explainer then runs the mode, records again and says so).  Every value
read from tensor data is read again and compared; every result's shape and dtype, and whether it
depends on the input, is compared; the parameters, buffers and constants the plan holds must be the
same tensors at the same version (``_version``: changed in place), the modules' training flags the
same.  A model whose control flow depends on its data therefore replays only while the values it
reads are the same, and otherwise falls back.

When.  The first explanation of a signature runs in the mode and records nothing (a signature that
never comes back, as molecules of many sizes explained one at a time, costs nothing more); the
second records (:data:`RECORD_ON`), the later ones replay.

The graph part.  Steps computed from the unexplained inputs (``edge_index``, ``batch``) alone, and
from tensors that such steps or steps without tensor arguments made (degrees, normalisation
coefficients, self-loops: most of the torch functions a GCN calls), give the same results while those
inputs have the same values.  The plan keeps their results, and a call whose unexplained inputs equal
the recorded ones (``torch.equal``) runs only the other steps; a step that changes a kept result in
place, or a random function, keeps the plan from keeping them.  A step that reads a parameter, a
buffer or another tensor the model holds is always run again: such a tensor can change without its
version counter noticing (through ``.data``), and the replay must then compute with its new values.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch import Tensor, nn

from lrp_lib.explain.edges import EdgeRecorder
from lrp_lib.explain.function_mode import RelevanceMode
from lrp_lib.explain.propagate import forward_in_mode
from lrp_lib.explain.record import (LITERALS, PLAIN_STEP, PROPAGATE_STEP, NotReplayable, Plan, RecordingEdgeRecorder,
                                    RecordingMode, Stale, hooked, model_state, resolve, same_value)

__all__ = ["ReplayMode", "replay", "signature", "plans_of", "forward", "keep", "MAX_PLANS", "RECORD_ON", "MAX_SEEN", "Plan",
           "Stale", "NotReplayable", "hooked"]


class ReplayMode(RelevanceMode):
    """The mode's dispatch, called step by step by :func:`replay` (never entered as a mode); the
    handlers' module labels are the recorded ones."""
    _labels: list = []

    def module_label(self) -> str:
        return self._labels.pop() if self._labels else "the model"


def replay(plan: Plan, model: nn.Module, mode: ReplayMode, recorder, inputs: list, marked: list,
           reuse: bool = True) -> Tensor:
    """The model's output on ``inputs`` (of which ``marked`` are marked in ``mode``), computed by the
    plan; :class:`Stale` if a guard fails.  ``reuse``: where the unexplained inputs (``edge_index``,
    ``batch``) have the recorded values, the steps computed from them and constants alone are not run
    again, their recorded results are used (the graph part: degrees, normalisation, self-loops)."""
    if model_state(model) != plan.states:
        raise Stale("the model's parameters, buffers or training flags changed")
    for t, version in plan.held:
        if t._version != version:
            raise Stale("a constant of the model changed in place")
    steps, env, drops_of = plan.steps, plan.env, plan.drops
    if reuse and plan.cached_env is not None and all(torch.equal(inputs[i], v) for i, v in plan.graph_inputs) and \
            all(t._version == v for t, v in plan.cached):  # the same graph: its part of the plan is done
        steps, env, drops_of = plan.live_steps, plan.cached_env, plan.live_drops
    env = list(env)
    env[:len(inputs)] = inputs
    for t in marked:
        mode.mark(t)
    dispatch, token = RelevanceMode.__torch_function__, mode._token
    through_mode = plan.detaches
    for (kind, func, args_t, kwargs_t, flat, spec, value, labels), drops in zip(steps, drops_of):
        if kind >= PROPAGATE_STEP:  # a message-passing layer's propagate, or its messages
            module = func()
            if module is None:
                raise Stale("a module of the model is gone")
            if kind == PROPAGATE_STEP:
                recorder.propagated[id(module)] += 1
                recorder.edges_of[id(module)] = resolve(args_t, env)
                continue
            out = recorder.messages(module, resolve(args_t, env))
            if spec is None:
                if out is not None:
                    raise Stale("a layer's messages were recorded as not aligned with the edges")
                for slot in drops:
                    env[slot] = None
                continue
        else:
            if flat is not None:
                args = flat[0][:]
                for i, slot in flat[1]:
                    args[i] = env[slot]
            else:
                args = resolve(args_t, env)
            kwargs = resolve(kwargs_t, env) if kwargs_t else {}
            if kind == PLAIN_STEP and not through_mode:
                out = func(*args, **kwargs)
            else:
                mode._labels = list(labels)
                out = dispatch(mode, func, (), tuple(args), kwargs)
        if spec is None:  # a Python value: read again, compared
            if not same_value(out, value):
                raise Stale(f"{getattr(func, '__name__', func)} read {out!r} from the data, not {value!r} "
                            f"as when recorded")
        elif type(spec[0]) is int:
            slot, shape, dtype, marked_out = spec
            if type(out) is not Tensor and not isinstance(out, Tensor) or out.shape != shape or \
                    out.dtype != dtype or (getattr(out, "_lrp_mark", None) is token) != marked_out:
                raise Stale(f"{getattr(func, '__name__', func)} gave a result of another shape, dtype or "
                            f"dependence on the input than when recorded")
            env[slot] = out
        else:
            if not isinstance(out, (tuple, list)) or len(out) != len(spec):
                raise Stale(f"{getattr(func, '__name__', func)} gave another result")
            for o, s in zip(out, spec):
                if s[0] is None:
                    if not same_value(o, s[1]):
                        raise Stale(f"{getattr(func, '__name__', func)} gave another value")
                elif not isinstance(o, Tensor) or o.shape != s[1] or o.dtype != s[2] or mode.is_marked(o) != s[3]:
                    raise Stale(f"{getattr(func, '__name__', func)} gave a result of another shape, dtype or "
                                f"dependence on the input than when recorded")
                else:
                    env[s[0]] = o
        for slot in drops:  # read by no later step
            env[slot] = None
    return env[plan.output.slot]


# ------------------------------------------------------------------ the plans of each model
_plans: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _describe(v):
    if isinstance(v, Tensor):
        return "tensor", tuple(v.shape), v.dtype, v.device, v.requires_grad, v.layout, type(v)
    if isinstance(v, LITERALS):
        return v
    raise NotReplayable(f"an argument of type {type(v).__name__}")


def signature(inputs: list, kwargs: dict, options: tuple) -> tuple:
    """The key of a plan: each input's shape, dtype, device (or value), which inputs are the same
    tensor, and ``options`` (the composite, the dispatch, ...).  :class:`NotReplayable` for an
    argument it cannot describe."""
    first = {}
    alias = tuple(first.setdefault(id(t), i) for i, t in enumerate(inputs))
    return (tuple(_describe(t) for t in inputs), tuple((k, _describe(v)) for k, v in kwargs.items()), alias,
            options)


#: The most plans kept per model (the least recently recorded is dropped first): subgraphs of many
#: sizes (``per_index=True``) would otherwise each keep one.
MAX_PLANS = 16

#: Which explanation of a signature records its plan: the first one of each signature runs in the
#: mode without recording (recording costs about a third more than the mode), so that explanations
#: whose inputs never repeat a signature (molecules of many sizes, one at a time) pay nothing for
#: replay; the second records, and the later ones replay.  1: the first records.
RECORD_ON = 2

#: How many signatures seen once are remembered per model (the oldest forgotten first).
MAX_SEEN = 256


def plans_of(model: nn.Module) -> dict:
    """The plans recorded for ``model`` (signature -> :class:`Plan`), kept as long as the model lives,
    at most :data:`MAX_PLANS`."""
    with _lock:
        plans = _plans.get(model)
        if plans is None:
            plans = _plans[model] = {}
        return plans


_seen: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


def _sighting(model: nn.Module, key) -> int:
    """How many explanations of ``model`` with signature ``key`` (this one included) have run without a
    plan, counted up to :data:`RECORD_ON` (at most :data:`MAX_SEEN` signatures per model)."""
    with _lock:
        seen = _seen.get(model)
        if seen is None:
            seen = _seen[model] = {}
        count = seen.pop(key, 0) + 1
        if count < RECORD_ON:
            seen[key] = count
            while len(seen) > MAX_SEEN:
                del seen[next(iter(seen))]
        return count


def forward(model: nn.Module, make, model_inputs: list, marked: list, kwargs: dict, options: tuple, call,
            enabled: bool = True, reuse: bool = True):
    """The explanation's forward: replayed if a plan of this signature holds, else in the mode (and
    recorded).  ``make(mode_class, recorder_class)`` gives a fresh (mode, edge recorder or None);
    ``model_inputs`` the tensors the model gets (``marked``: those explained), ``kwargs`` its other
    arguments.  Returns (mode, recorder, output, replayed, reason)."""
    if not enabled:
        mode, recorder = make(RelevanceMode, EdgeRecorder)
        return mode, recorder, forward_in_mode(model, mode, recorder, marked, call), False, "replay=False"
    try:
        hooks = hooked(model)
        if hooks:
            raise NotReplayable(f"{hooks} (a replay would not run them)")
        key = signature(model_inputs, kwargs, options)
    except NotReplayable as e:
        mode, recorder = make(RelevanceMode, EdgeRecorder)
        return mode, recorder, forward_in_mode(model, mode, recorder, marked, call), False, f"not replayable: {e}"
    plans = plans_of(model)
    plan = plans.get(key)
    reason = "recorded"
    if plan is not None:
        mode, recorder = make(ReplayMode, EdgeRecorder)
        try:
            return mode, recorder, replay(plan, model, mode, recorder, model_inputs, marked, reuse), True, "replayed"
        except Exception as e:  # noqa: BLE001 - a guard (Stale), or a step that failed: the mode decides
            reason = f"the plan did not hold ({e}): recorded again" if isinstance(e, Stale) else \
                f"the replay failed ({type(e).__name__}: {e}): recorded again"
            with _lock:
                if plans.get(key) is plan:
                    del plans[key]
    if reason == "recorded" and _sighting(model, key) < RECORD_ON:  # a signature seen for the first time
        mode, recorder = make(RelevanceMode, EdgeRecorder)
        return (mode, recorder, forward_in_mode(model, mode, recorder, marked, call), False,
                "a new signature: run in the mode (the next explanation of this signature is recorded)")
    plan = Plan(model_inputs, marked)
    mode, recorder = make(lambda *a, **k: RecordingMode(*a, plan=plan, **k), RecordingEdgeRecorder)
    out = forward_in_mode(model, mode, recorder, marked, call)
    try:
        if mode.failure is not None:
            raise NotReplayable(mode.failure)
        plan.finish(out, mode, model)
        mode.pending = (plans, key, plan)
    except NotReplayable as e:
        reason = f"not replayable: {e}"
    return mode, recorder, out, False, reason


def keep(mode) -> None:
    """Keep the plan that ``mode`` recorded (if any), for the later calls of its signature: called once
    the explanation passed every check (a plan is replayed without :func:`~lrp_lib.explain.graph_check.
    check_relevance_graph`, which its recording passed)."""
    pending = getattr(mode, "pending", None)
    if pending is not None:
        plans, key, plan = pending
        with _lock:
            plans.pop(key, None)
            plans[key] = plan
            while len(plans) > MAX_PLANS:
                del plans[next(iter(plans))]
        mode.pending = None


