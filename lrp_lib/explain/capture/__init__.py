r"""An explanation of one graph, captured once and compiled by PyTorch: :class:`CompiledExplanation`.

:func:`capture` records an explanation's forward (an ordinary PyTorch program under
:class:`~lrp_lib.explain.mode.forward.ForwardMode`) once with ``make_fx``, as a graph of ATen operations from the
node features and probes to the output, with the part that depends on ``edge_index`` alone kept as constants
(:func:`fold_constants`).  Later explanations of the graph run that graph (``compile=True``: compiled by
``torch.compile(fullgraph=True)``, as no rule reads tensor data into Python) and one ordinary backward.  A model
whose Python reads an input-dependent value is refused by ``make_fx`` (explained eagerly), as is an operation
without a rule.

A captured graph keeps the values the model's Python read (the graph's size, the edges a layer adds), so it
explains that graph only.  :func:`capture_any_graph` records with symbolic sizes instead (``edge_index`` an input):
one capture, compiled with dynamic shapes for node masks (:class:`AnyGraphExplanation`), serves graphs of every
size that meet the conditions the model's Python placed on the sizes it saw (the molecules of a data set).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP, ShapeEnv
from torch.overrides import TorchFunctionMode

from lrp_lib.core import modify
from lrp_lib.core.composites import get_composite
from lrp_lib.explain.capture.graphs import deduplicated, fold_constants, python_bindings
from lrp_lib.explain.mode.edges import EdgeRecorder, ensure_hooks, is_edge_index, message_hook, recording, usual_layout
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.function_mode import UnsupportedModelError

#: torch.compile's backend for compiled explanations (PyTorch's default compiler).
BACKEND = "inductor"

__all__ = ["BACKEND", "CompiledExplanation", "AnyGraphExplanation", "capture", "capture_any_graph", "fold_constants",
           "deduplicated", "python_bindings"]


class _ListRecorder(EdgeRecorder):
    """Edge relevance read from ``found``, a list of what each layer's messages give, in the order the layers pass
    them: ``ids=True`` the messages, their input edges and edge dimension (:meth:`locate`; an eager pass: the match
    reads the edges, which a captured graph cannot); else the messages alone, outputs of the captured graph read in
    the backward as the eager hooks read them."""

    def __init__(self, mode, model, edge_index, dtype, ids: bool):
        super().__init__(mode, model, edge_index, dtype)
        self.ids, self.found = ids, []

    def messages(self, module, out):
        if self.ids:
            found = self.locate(module, out)
            if found is not None:
                self.found.append((out, *found))
        elif self.mine(module, out):
            self.found.append(out)


class _AnyGraphRecorder(_ListRecorder):
    """Edge relevance in a graph captured for any graph: ``found`` holds each layer's messages, the input edge of
    each and the edge dimension, computed in the graph (:func:`~lrp_lib.explain.mode.edges.usual_layout`), and
    ``usual`` whether each layer's edges are laid out so (checked on every graph the capture explains)."""

    def __init__(self, mode, model, edge_index, dtype):
        super().__init__(mode, model, edge_index, dtype, ids=True)
        self.usual = []

    def edge_ids(self, edges):
        if edges is self.edge_index or not is_edge_index(edges):
            return super().edge_ids(edges)
        ids, usual = usual_layout(self.edge_index, edges.long())
        self.usual.append(usual)
        return ids


class _Reads(TorchFunctionMode):
    """The model's reads of ``int(t.max())`` or ``int(t.min())`` where ``t`` is one of its tensor inputs (PyG's
    ``int(batch.max()) + 1``, the number of graphs a batch vector names), which a capture cannot trace: the value
    the real input gives, noted in ``reads`` as ``(name, "max" or "min", value)``, a constant of the captured graph
    and a condition on the inputs it explains.  ``traced``: the inputs as the model receives them while captured,
    by name (:meth:`over`); ``real``: their values.  Other reads of data are left to ``make_fx``, which refuses them."""

    def __init__(self, real: dict):  # (made before tracing: a read inside it would be traced)
        super().__init__()
        self.real = {k: {r: int(getattr(t, r)()) for r in ("max", "min")} for k, t in real.items()
                     if isinstance(t, Tensor) and not t.is_floating_point() and t.numel()}
        self.names: dict = {}
        self.reduced: dict = {}  # id of a reduction's result -> (input name, reduction, the result, kept alive)
        self.reads: list = []

    def over(self, traced: dict) -> _Reads:
        self.names = {id(t): k for k, t in traced.items() if k in self.real}
        return self

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("max", "min") and len(args) == 1 and not kwargs and id(args[0]) in self.names:
            out = func(*args)
            self.reduced[id(out)] = (self.names[id(args[0])], name, out)
            return out
        if name in ("__int__", "__index__", "item") and len(args) == 1 and id(args[0]) in self.reduced:
            key, reduction, _ = self.reduced[id(args[0])]
            self.reads.append((key, reduction, self.real[key][reduction]))
            return self.reads[-1][2]
        return func(*args, **(kwargs or {}))


class _ProductRecorder(EdgeRecorder):
    """Edge relevance by a multiplicative probe (an input of ones, one per input edge) on every layer's
    messages, whose gradient is each edge's relevance; the input edge of each message comes from ``order``
    (an eager :class:`_ListRecorder`)."""

    def __init__(self, mode, model, edge_index, dtype, probe: Tensor, order: list):
        super().__init__(mode, model, edge_index, dtype)
        self.probe, self.order = probe, list(order)

    def messages(self, module, out):
        if not self.mine(module, out):
            return None
        ids, dim = self.order.pop(0)
        padded = torch.cat([self.probe, self.probe.new_ones(1)])  # an added self-loop (id -1) reads the 1
        scale = padded.index_select(0, torch.where(ids < 0, ids.new_full((), self.probe.numel()), ids))
        shape = [1] * out.dim()
        shape[dim] = -1
        probed = out * scale.view(shape)  # a plain product (no rule): the probe's gradient is the edge relevance
        return self.mode.mark(probed)


def capture(model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus", edges: bool = False,
            probe: bool = True, **kwargs) -> tuple[torch.fx.GraphModule, dict]:
    """The explanation's forward on this graph as an FX graph of ATen operations.

    The graph takes ``(x, kept, probe)`` (``kept``: the accounts' probe; ``probe``: the edge probe, ones of length
    ``E``; any tensor when ``edges=False``) and a float ``edge_attr`` (:func:`traced_attr`), and returns the model's
    output and the explained output (the logits before a final softmax, log_softmax or sigmoid).  ``probe=False``:
    no edge probe; each layer's messages follow those two, for their gradient (in a graph run as it is, not
    compiled).  ``kwargs``: the model's other inputs, constants of the graph.  Returns the graph and what was seen
    while recording (``head``: the final function the logits were taken before, or None; ``order``: the input edge
    of each message of each layer, and the message's edge dimension)."""
    composite = get_composite(composite)
    order = _edge_order(model, x, edge_index, composite, **kwargs) if edges else None
    seen, reads, attr = {"order": order}, _Reads(kwargs), traced_attr(kwargs)

    def forward(x_, kept, ones, *attr_):
        mode = ForwardMode(composite, model)
        recorder = None if not edges else _ProductRecorder(mode, model, edge_index, x_.dtype, ones, order) \
            if probe else _ListRecorder(mode, model, edge_index, x_.dtype, ids=False)
        with recording(recorder):
            out = _in_mode(mode, model, x_, kept, edge_index, {**kwargs, **dict(zip(attr, attr_))}, reads.over(kwargs))
        messages = tuple(recorder.found) if isinstance(recorder, _ListRecorder) else ()
        return (*_outputs(mode, out, seen), *messages)

    leaves = _leaves(x, edge_index if edges and probe else None) + [kwargs[k] for k in attr]
    with torch.enable_grad():
        graph = fold_constants(make_fx(forward)(*leaves), leaves)
        return (graph if probe else python_bindings(graph, leaves)), seen


def capture_any_graph(model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus", edges: bool = False,
                      **kwargs) -> tuple[torch.fx.GraphModule, dict, Callable]:
    """The explanation's forward for any graph, as an FX graph with symbolic sizes.

    The graph takes ``(x, edge_index, kept, *tensors)`` (``tensors``: the model's other tensor
    inputs, in the order of ``kwargs``), returns what :func:`capture`'s graph returns, and runs the graph part on
    every call.  ``edges=True``: it also returns whether every layer's edges are laid out as they were when
    captured (a boolean tensor), then each layer's messages and the input edge of each (``seen["dims"]``: their
    edge dimensions), for hooks that read their gradient (run as it is, not compiled).  Returns the graph, what was
    seen while recording, and ``fits(args, kwargs)``: whether the sizes of ``args`` meet the conditions the model's
    Python placed on the sizes it saw (PyTorch's own guards, ``ShapeEnv.produce_guards_expression``) and ``kwargs``
    give the values it read from them (:class:`_Reads`), so that the graph explains them as the model would."""
    composite = get_composite(composite)
    seen: dict = {}
    names = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
    other = {k: v for k, v in kwargs.items() if k not in names}
    reads = _Reads(kwargs)
    if edges:
        ensure_hooks(model)

    def forward(x_, edge_index_, kept, *values):
        mode = ForwardMode(composite, model)
        recorder = _AnyGraphRecorder(mode, model, edge_index_, x_.dtype) if edges else None
        traced = dict(zip(names, values))
        with recording(recorder):
            out = _in_mode(mode, model, x_, kept, edge_index_, {**traced, **other}, reads.over(traced))
        if recorder is None:
            return _outputs(mode, out, seen)
        recorder.check()
        seen["dims"] = [dim for _, _, dim in recorder.found]
        usual = torch.stack(recorder.usual).all() if recorder.usual else torch.ones((), dtype=torch.bool)
        return (*_outputs(mode, out, seen), usual, *(t for messages, ids, _ in recorder.found for t in (messages, ids)))

    args = _graph_args(_leaves(x, None), edge_index, kwargs, names)
    # (each size its own symbol, no duck shaping: a graph whose node count equals its feature count is not
    # specialised to it)
    with torch.enable_grad(), FakeTensorMode(shape_env=ShapeEnv(duck_shape=False), allow_non_fake_inputs=True):
        graph = make_fx(forward, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*args)
    fakes = [n.meta["val"] for n in graph.graph.nodes if n.op == "placeholder"]
    shape_env = next(f.fake_mode.shape_env for f in fakes if isinstance(f, Tensor))
    code = shape_env.produce_guards_expression(fakes, ignore_static=False)
    graph = fold_constants(deduplicated(graph, args), args)  # (the parameters' part: the weights' clamps)
    # ShapeEnv.evaluate_guards_expression, with the expression parsed once (None: no guards, every size fits)
    guard_names, expression = [f"t{i}" for i in range(len(fakes))], compile(code or "True", "<guards>", "eval")
    read = reads.reads  # (and the values the model read from its inputs, held as constants)
    return graph, seen, lambda values, given: eval(expression, SYMPY_INTERP, {"L": dict(zip(guard_names, values))}) \
        and all(int(getattr(given[k], reduction)()) == value for k, reduction, value in read)


def _in_mode(mode: ForwardMode, model: nn.Module, x: Tensor, kept: Tensor, edge_index, kwargs: dict, reads: _Reads):
    """The model's forward under ``mode`` from the node features ``x``, a float ``edge_attr`` and the accounts' probe
    ``kept`` (``reads``: the reads of its inputs' values, over ``mode``)."""
    with torch.enable_grad(), mode, reads:
        mode.mark(x)
        mode.kept, mode.kept_delta = kept, kept - kept.detach()  # (after the first mark, which makes its own)
        for k in traced_attr(kwargs):
            mode.mark(kwargs[k])
        return model(x, edge_index, **kwargs)


def traced_attr(kwargs: dict) -> list[str]:
    """``["edge_attr"]`` if ``kwargs`` hold a float one (an input of a captured graph, not a constant), else ``[]``."""
    return [k for k in ("edge_attr",) if isinstance(kwargs.get(k), Tensor) and kwargs[k].is_floating_point()]


def _outputs(mode: ForwardMode, out: Tensor, seen: dict) -> tuple[Tensor, Tensor]:
    """A captured forward's outputs: the model's output and the explained output (the logits before a final
    softmax, log_softmax or sigmoid, whose function goes into ``seen["head"]``).  An operation without a rule
    is refused here."""
    if mode.probes:
        raise UnsupportedModelError("relevance cannot pass through " + ", ".join(
            label for label, _, _ in mode.probes) + ": an operation without a rule; a captured explanation "
            "does not take it")
    head = mode.head_of(out)
    seen["head"] = None if head is None else head[0]
    return out, (out if head is None else head[1])


def _edge_order(model: nn.Module, x: Tensor, edge_index: Tensor, composite, **kwargs) -> list:
    """The input edge of each layer's messages, in the order the layers pass them, from one eager forward."""
    ensure_hooks(model)
    mode = ForwardMode(composite, model)
    recorder = _ListRecorder(mode, model, edge_index, x.dtype, ids=True)
    with recording(recorder), torch.enable_grad(), mode:
        leaf = mode.mark(x.detach().clone().requires_grad_(True))
        model(leaf, edge_index, **kwargs)
    recorder.check()
    return [(ids, dim) for _, ids, dim in recorder.found]


def _graph_args(leaves: list, edge_index: Tensor, kwargs: dict, names: list) -> list:
    """The inputs of a graph captured for any graph, each laid out as when captured: contiguous from the start of
    its storage (PyTorch's guards read strides and offsets; a graph of a data set is a view into its storage)."""
    return [t if t.is_contiguous() and not t.storage_offset() else t.clone(memory_format=torch.contiguous_format)
            for t in (leaves[0], edge_index, leaves[1], *(kwargs[k] for k in names))]


def _leaves(x: Tensor, edge_index: Tensor | None) -> list[Tensor]:
    """``(x, kept, probe)``: the node features, the accounts' probe and the edge probe, leaves of the backward."""
    probe = torch.ones(edge_index.shape[1] if edge_index is not None else 1, dtype=x.dtype, device=x.device,
                       requires_grad=edge_index is not None)
    return [x.detach().clone().requires_grad_(True), torch.ones((), dtype=x.dtype, device=x.device,
                                                                requires_grad=True), probe]


class CompiledExplanation:
    """One graph's explanation, captured (:func:`capture`) and compiled by ``torch.compile(fullgraph=True)``
    (``compile=False``: the captured graph run as it is): :meth:`forward` runs it on node features of the recorded
    shape, :meth:`backward` the one ordinary backward.  ``head``: the final function whose input is explained, or
    None."""

    def __init__(self, model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus", edges: bool = False,
                 backend: str | None = None, compile: bool = True, **kwargs):
        # compiled: the edges by a probe, an input of the graph; run as it is: by the gradient at the messages
        graph, seen = capture(model, x, edge_index, composite, edges, probe=compile, **kwargs)
        self.compiled = torch.compile(graph, fullgraph=True, backend=backend or BACKEND, dynamic=False) \
            if compile else graph
        self.head, self.edges, self.edge_index = seen["head"], edges, edge_index
        self.probe, self.order, self.attr = compile, seen["order"], traced_attr(kwargs)
        # what a cache keys this explanation by, by identity, kept alive so that no other object takes its id
        self.held = (model, list(model.parameters()), list(model.buffers()), edge_index, dict(kwargs))

    def forward(self, x: Tensor, edge_index: Tensor | None = None, kwargs: dict | None = None) \
            -> tuple[Tensor, Tensor, list]:
        """``(output, explained output, leaves)`` on the recorded graph (``edge_index`` and ``kwargs``: the
        same graph's, not read, but a float ``edge_attr``: a leaf).  Run as it is with edges, the last leaf is the
        record of the edges, which hooks on each layer's messages fill in the backward."""
        leaves = _leaves(x, self.edge_index if self.edges and self.probe else None) + [kwargs[k] for k in self.attr]
        with torch.enable_grad():
            out, head, *messages = self.compiled(*leaves)
        if self.edges and not self.probe:  # the messages' relevance, read in the backward as it passes them
            leaves.append(_hooked(x.new_zeros(self.edge_index.shape[1]), messages, self.order))
        return out, head, leaves

    def backward(self, head: Tensor, leaves: list, start: Tensor) -> tuple:
        """From the explained output ``head`` with start relevance ``start``: ``((node relevance, edge_attr's
        relevance or None), edge relevance or None, kept)``: each input times its gradient, the edge probe's
        gradient (or the record the message hooks filled), and what biases, constant terms and stabilisers kept."""
        attr = leaves[3:3 + len(self.attr)]
        wrt = leaves[:2] + (leaves[2:3] if self.edges and self.probe else []) + attr
        grads = torch.autograd.grad(head, wrt, modify.share_of(start, head), materialize_grads=True)
        edge_rel = (grads[2] if self.probe else leaves[-1]) if self.edges else None
        return (leaves[0].detach() * grads[0], attr[0].detach() * grads[-1] if attr else None), edge_rel, grads[1]


class AnyGraphExplanation(CompiledExplanation):
    """An explanation captured once for any graph (:func:`capture_any_graph`) and compiled by
    ``torch.compile(fullgraph=True, dynamic=True)`` (``compile=False``: run as it is, through PyTorch's Python
    bindings): one capture serves graphs of every size that meet the conditions the model's Python placed on them
    (:meth:`fits`).  ``edges=True`` (``compile=False`` only: torch.compile would not run the hooks): edge relevance
    too, from hooks on each layer's messages;
    :meth:`forward` gives None for a graph whose layers lay out their edges otherwise than when captured."""

    def __init__(self, model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus", compile: bool = True,
                 edges: bool = False, **kwargs):
        graph, seen, self._fits = capture_any_graph(model, x, edge_index, composite, edges, **kwargs)
        self.dims = seen.get("dims")
        self.names = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
        self._kept = _leaves(x, None)[1]  # (what the guards read of the probe: its shape)
        with torch.enable_grad():
            args = _graph_args(_leaves(x, None), edge_index, kwargs, self.names)
            self.compiled = torch.compile(graph, fullgraph=True, backend=BACKEND, dynamic=True) if compile else \
                python_bindings(graph, args)
            if edges and not bool(self.compiled(*args)[2]):  # (then on no graph: each is captured on its own)
                raise UnsupportedModelError("a layer's edges are not the input's laid out as PyG's self-loops "
                                            "lay them out")
        self.head, self.edges, self.edge_index, self.probe, self.attr = seen["head"], edges, None, compile, \
            traced_attr(kwargs)
        self.held = (model, list(model.parameters()), list(model.buffers()))

    def fits(self, x: Tensor, edge_index: Tensor, kwargs: dict) -> bool:
        """Whether this graph's sizes meet the conditions its capture saw (else it is captured again)."""
        return bool(self._fits(_graph_args([x, self._kept], edge_index, kwargs, self.names), kwargs))

    def forward(self, x: Tensor, edge_index: Tensor | None = None, kwargs: dict | None = None) \
            -> tuple[Tensor, Tensor, list] | None:
        leaves = _leaves(x, None) + [kwargs[k] for k in self.attr]
        # (a scatter's index and PyG's self-loops select by a mask: outputs whose size depends on the data; each
        # size its own symbol, as in the capture; PyTorch's config patches are thread-local)
        dynamic, unducked = (torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True,
                                                        capture_scalar_outputs=True),
                             torch.fx.experimental._config.patch(use_duck_shape=False)) if self.probe else \
            (nullcontext(), nullcontext())
        with torch.enable_grad(), dynamic, unducked:
            out, head, *rest = self.compiled(*_graph_args(leaves, edge_index, kwargs or {}, self.names))
        if self.edges:
            if not bool(rest[0]):  # (a layer lays out this graph's edges otherwise: explained eagerly)
                return None
            order = list(zip(rest[2::2], self.dims))
            leaves.append(_hooked(x.new_zeros(edge_index.shape[1]), rest[1::2], order))
        return out, head, leaves


def _hooked(record: Tensor, messages, order) -> Tensor:
    """``record``, to which hooks on each layer's ``messages`` add their relevance in the backward at their input
    edges (``order``: the input edge of each message and the edge dimension, per layer)."""
    for (ids, dim), m in zip(order, messages):
        if m.requires_grad:
            m.register_hook(message_hook(record, m, ids, dim))
    return record

