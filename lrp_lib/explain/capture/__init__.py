r"""An explanation of one graph, captured once and compiled by PyTorch: :class:`CompiledExplanation`.

With the rules written as forward modifications (:mod:`lrp_lib.explain.mode.forward`), an explanation's forward
is an ordinary PyTorch program, so PyTorch's own tools take it over.  :func:`capture` records it once under
:class:`~lrp_lib.explain.mode.forward.ForwardMode` with ``make_fx``, as a graph of ATen operations from the node
features (and the scalar probes that total what biases and stabilisers keep, and the edge probe) to the output;
the graph part that depends on ``edge_index`` alone (self-loops, degrees, normalisation) is computed then and kept
as constants (:func:`fold_constants`).  Later explanations of the graph run that graph and one ordinary backward,
without the model's or the rules' Python; ``compile=True`` compiles it with ``torch.compile(fullgraph=True)``,
which traces without a break because no rule reads tensor data into Python.  A model whose own Python reads the
value of an input-dependent tensor (a branch on ``x``) is refused by ``make_fx`` and explained eagerly; an
operation without a rule is refused when the graph is captured.

A captured graph keeps the values the model's Python read while it was recorded (the graph's size, the edges a
layer adds), so it explains that graph only.  For graphs that each come once (the molecules of a data set),
:func:`capture_any_graph` records with symbolic sizes instead: ``edge_index`` is an input and the graph part runs
on every call, so one capture, compiled with dynamic shapes (:class:`AnyGraphExplanation`, node masks only),
serves graphs of every size that meet the conditions the model's Python placed on the sizes it saw.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

from lrp_lib.core import modify
from lrp_lib.core.composites import get_composite
from lrp_lib.explain.mode.edges import EdgeRecorder, ensure_hooks, message_hook, recording
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.function_mode import UnsupportedModelError

#: torch.compile's backend for compiled explanations (PyTorch's default compiler).
BACKEND = "inductor"

__all__ = ["BACKEND", "CompiledExplanation", "AnyGraphExplanation", "capture", "capture_any_graph", "fold_constants"]


class _IdsRecorder(EdgeRecorder):
    """An eager pass that records the input edge of each message of each layer, in the order the layers pass
    them (the match reads the edges, which a captured graph cannot)."""

    def __init__(self, mode, model, edge_index, dtype):
        super().__init__(mode, model, edge_index, dtype)
        self.order: list[tuple[Tensor, int]] = []

    def messages(self, module, out):
        found = self.locate(module, out)
        if found is not None:
            self.order.append(found)


class _ProductRecorder(EdgeRecorder):
    """Edge relevance by a multiplicative probe (an input of ones, one per input edge) on every layer's
    messages, whose gradient is each edge's relevance; the input edge of each message comes from ``order``
    (:class:`_IdsRecorder`)."""

    def __init__(self, mode, model, edge_index, dtype, probe: Tensor, order: list):
        super().__init__(mode, model, edge_index, dtype)
        self.probe, self.order = probe, list(order)

    def messages(self, module, out):
        if id(module) not in self.names or not isinstance(out, Tensor) or not self.mode.is_marked(out):
            return None
        ids, dim = self.order.pop(0)
        padded = torch.cat([self.probe, self.probe.new_ones(1)])  # an added self-loop (id -1) reads the 1
        scale = padded.index_select(0, torch.where(ids < 0, ids.new_full((), self.probe.numel()), ids))
        shape = [1] * out.dim()
        shape[dim] = -1
        probed = out * scale.view(shape)  # a plain product (no rule): the probe's gradient is the edge relevance
        return self.mode.mark(probed)


class _OutputRecorder(EdgeRecorder):
    """Edge relevance from the messages themselves: each layer's messages become outputs of the captured graph,
    read in the backward as the eager hooks read them."""

    def __init__(self, mode, model, edge_index, dtype):
        super().__init__(mode, model, edge_index, dtype)
        self.outputs: list[Tensor] = []

    def messages(self, module, out):
        if id(module) in self.names and isinstance(out, Tensor) and self.mode.is_marked(out):
            self.outputs.append(out)


def capture(model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus", edges: bool = False,
            probe: bool = True, **kwargs) -> tuple[torch.fx.GraphModule, dict]:
    """The explanation's forward on this graph as an FX graph of ATen operations.

    The graph takes ``(x, one_out, one_in, kept, probe)`` (``probe``: the edge probe, ones of length ``E``;
    pass any tensor when ``edges=False``) and returns the model's output and the explained output: the output
    itself, or the logits before a final softmax, log_softmax or sigmoid.  ``probe=False``: no edge probe; the
    graph returns each layer's messages after those two, for their gradient (a graph run as it is: the
    messages are tensors of its autograd graph, which a compiled graph's are not).  ``kwargs``: the model's
    other inputs (``edge_attr``, ``batch``), constants of the graph.  Returns the graph and what was seen while
    recording (``head``: the final function the logits were taken before, or None; ``order``: the input edge
    of each message of each layer, and the message's edge dimension)."""
    composite = get_composite(composite)
    seen: dict = {}
    order = _edge_order(model, x, edge_index, composite, **kwargs) if edges else None
    seen["order"] = order

    def forward(x_, one_out, one_in, kept, ones):
        mode = ForwardMode(composite, model)
        recorder = None if not edges else _ProductRecorder(mode, model, edge_index, x_.dtype, ones, order) \
            if probe else _OutputRecorder(mode, model, edge_index, x_.dtype)
        with recording(recorder):
            out = _in_mode(mode, model, x_, (one_out, one_in, kept), edge_index, kwargs)
        messages = tuple(recorder.outputs) if isinstance(recorder, _OutputRecorder) else ()
        return (*_outputs(mode, out, seen), *messages)

    leaves = _leaves(x, edge_index if edges and probe else None)
    with torch.enable_grad():
        graph = make_fx(forward)(*leaves)
    return fold_constants(graph, leaves), seen


def fold_constants(graph: torch.fx.GraphModule, inputs: list) -> torch.fx.GraphModule:
    """The graph part (every operation that reads no input of ``graph``: self-loops, degrees, normalisation
    coefficients, the weights' clamps) run once, each constant an input-dependent operation reads kept as the
    value it had when it was read, so that an in-place change (PyG's ``scatter_add_`` into a buffer, which
    ``torch.fx.experimental.const_fold`` leaves in the graph) is seen where it happened."""
    nodes = list(graph.graph.nodes)
    variable = set()
    for node in nodes:
        if node.op == "placeholder" or any(a in variable for a in node.all_input_nodes):
            variable.add(node)
    reads: dict = {}
    reads_of: dict = {}  # the values as read, with their strides

    class Reader(torch.fx.Interpreter):
        def run_node(self, node):
            if node in variable and node.op != "placeholder":
                for arg in node.all_input_nodes:
                    if arg not in variable and (node, arg) not in reads:
                        value = self.env[arg]
                        reads[(node, arg)] = value.detach().clone() if isinstance(value, Tensor) else value
                        reads_of[(node, arg)] = value
            return super().run_node(node)

    with torch.enable_grad():
        Reader(graph).run(*inputs)
    for i, ((node, arg), value) in enumerate(reads.items()):
        if not isinstance(value, Tensor):
            continue
        name = f"_graph_part_{i}"
        compact, shape = _compact(reads_of.get((node, arg), value), value)
        graph.register_buffer(name, compact)
        with graph.graph.inserting_before(node):
            kept = graph.graph.get_attr(name)
            if shape is not None:  # a broadcast (an index expanded over the features) stays a broadcast
                kept = graph.graph.call_function(torch.ops.aten.expand.default, (kept, shape))
            node.replace_input_with(arg, kept)
    for node in reversed(nodes):
        if node not in variable and node.op not in ("placeholder", "output", "get_attr") and not node.users:
            graph.graph.erase_node(node)
    graph.graph.lint()
    graph.recompile()
    return graph


def _compact(read: Tensor, value: Tensor) -> tuple[Tensor, list | None]:
    """A constant to keep, and the shape to expand it to: a value read as a broadcast (an index PyG's scatters
    expand over the features) is kept as one slice and expanded again in the graph."""
    if read.dim() == 0 or 0 not in read.stride() or read.numel() == 0:
        return value, None
    index = tuple(slice(0, 1) if stride == 0 and size > 1 else slice(None)
                  for stride, size in zip(read.stride(), read.shape))
    return value[index].contiguous(), list(read.shape)


def capture_any_graph(model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus",
                      **kwargs) -> tuple[torch.fx.GraphModule, dict, Callable]:
    """The explanation's forward for any graph, as an FX graph with symbolic sizes: node masks only.

    The graph takes ``(x, edge_index, one_out, one_in, kept, *tensors)`` (``tensors``: the model's other tensor
    inputs, such as ``batch``, in the order of ``kwargs``) and returns what :func:`capture`'s graph returns; the
    graph part runs in it on every call, for whatever graph it is given.  ``make_fx`` traces it with symbolic
    sizes (``tracing_mode="symbolic"``); the model's parameters and buffers are constants of the graph.  Returns
    the graph, what was seen while recording, and ``fits(args)``: whether the sizes of ``args`` meet the
    conditions the model's Python placed on the sizes it saw (a branch on a size; PyTorch's own guards,
    ``ShapeEnv.produce_guards_expression``), so that the graph explains them as the model would."""
    composite = get_composite(composite)
    seen: dict = {}
    names = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
    other = {k: v for k, v in kwargs.items() if k not in names}

    def forward(x_, edge_index_, one_out, one_in, kept, *values):
        mode = ForwardMode(composite, model)
        out = _in_mode(mode, model, x_, (one_out, one_in, kept), edge_index_, {**dict(zip(names, values)), **other})
        return _outputs(mode, out, seen)

    leaves = _leaves(x, None)[:4]
    args = [leaves[0], edge_index, *leaves[1:], *(kwargs[k] for k in names)]
    with torch.enable_grad():
        graph = make_fx(forward, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*args)
    fakes = [n.meta["val"] for n in graph.graph.nodes if n.op == "placeholder"]
    shape_env = next(f.fake_mode.shape_env for f in fakes if isinstance(f, Tensor))
    code = shape_env.produce_guards_expression(fakes, ignore_static=False)
    graph.graph.eliminate_dead_code()
    graph.recompile()
    if code is None:
        return graph, seen, lambda values: True
    # ShapeEnv.evaluate_guards_expression, with the expression parsed once
    guard_names, expression = [f"t{i}" for i in range(len(fakes))], compile(code, "<guards>", "eval")
    return graph, seen, lambda values: eval(expression, SYMPY_INTERP, {"L": dict(zip(guard_names, values))})


def _in_mode(mode: ForwardMode, model: nn.Module, x: Tensor, probes: tuple, edge_index, kwargs: dict):
    """The model's forward under ``mode`` from the node features ``x`` and the three scalar probes."""
    with torch.enable_grad(), mode:
        mode.mark(x)
        mode.one_out, mode.one_in, mode.kept = probes  # (after the first mark, which makes its own)
        mode.kept_delta = probes[2] - probes[2].detach()
        return model(x, edge_index, **kwargs)


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
    recorder = _IdsRecorder(mode, model, edge_index, x.dtype)
    with recording(recorder), torch.enable_grad(), mode:
        leaf = mode.mark(x.detach().clone().requires_grad_(True))
        model(leaf, edge_index, **kwargs)
    recorder.check()
    return recorder.order


def _leaves(x: Tensor, edge_index: Tensor | None) -> list[Tensor]:
    ones = [torch.ones((), dtype=x.dtype, device=x.device, requires_grad=True) for _ in range(3)]
    probe = torch.ones(edge_index.shape[1] if edge_index is not None else 1, dtype=x.dtype, device=x.device,
                       requires_grad=edge_index is not None)
    return [x.detach().clone().requires_grad_(True), *ones, probe]


class CompiledExplanation:
    """One graph's explanation, captured (:func:`capture`) and compiled by ``torch.compile(fullgraph=True)``
    (``compile=False``: the captured graph run as it is):
    :meth:`forward` runs the compiled forward on node features of the recorded shape, :meth:`backward` the one
    ordinary backward.  ``head``: the final function whose input is explained, or None."""

    def __init__(self, model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus", edges: bool = False,
                 backend: str | None = None, compile: bool = True, **kwargs):
        # compiled: the edges by a probe, an input of the graph; run as it is: by the gradient at the messages
        graph, seen = capture(model, x, edge_index, composite, edges, probe=compile, **kwargs)
        # compile=False: the captured graph runs as it is, op by op (no model Python, no rules' Python)
        self.compiled = torch.compile(graph, fullgraph=True, backend=backend or BACKEND, dynamic=False) \
            if compile else graph
        self.head, self.edges, self.edge_index = seen["head"], edges, edge_index
        self.probe, self.order = compile, seen["order"]
        # what a cache keys this explanation by, by identity, kept alive so that no other object takes its id
        self.held = (model, list(model.parameters()), list(model.buffers()), edge_index, dict(kwargs))

    def forward(self, x: Tensor, edge_index: Tensor | None = None, kwargs: dict | None = None) \
            -> tuple[Tensor, Tensor, list]:
        """``(output, explained output, leaves)`` on the recorded graph (``edge_index`` and ``kwargs``: the
        same graph's, not read).  Run as it is with edges, the last leaf is the record of the edges, which hooks
        on each layer's messages fill in the backward."""
        leaves = _leaves(x, self.edge_index if self.edges and self.probe else None)
        with torch.enable_grad():
            out, head, *messages = self.compiled(*leaves)
        if self.edges and not self.probe:  # the messages' relevance, read in the backward as it passes them
            record = x.new_zeros(self.edge_index.shape[1])
            for (ids, dim), m in zip(self.order, messages):
                if m.requires_grad:
                    m.register_hook(message_hook(record, m, ids, dim))
            leaves.append(record)
        return out, head, leaves

    def backward(self, head: Tensor, leaves: list, start: Tensor) -> tuple[Tensor, Tensor | None, Tensor]:
        """From the explained output ``head`` with start relevance ``start``: ``(node relevance, edge relevance
        or None, kept)``: input times gradient, the edge probe's gradient (or the record the message hooks
        filled), and what biases, constant terms and stabilisers kept."""
        wrt = leaves[:4] + (leaves[4:] if self.edges and self.probe else [])
        grads = torch.autograd.grad(head, wrt, modify.share_of(start, head), allow_unused=True)
        zero = leaves[0].new_zeros(())
        received, passed, kept = (zero if g is None else g for g in grads[1:4])
        edge_rel = None
        if self.edges:
            edge_rel = grads[4] if self.probe else leaves[-1]
        return leaves[0].detach() * grads[0], edge_rel, received - passed + kept


class AnyGraphExplanation(CompiledExplanation):
    """An explanation captured once for any graph (:func:`capture_any_graph`, node masks only) and compiled by
    ``torch.compile(fullgraph=True, dynamic=True)``: one compilation serves graphs of every size (each molecule
    of a data set, each new graph), as long as their sizes meet the conditions the model's Python placed on them
    (:meth:`fits`).  ``compile=False``: the captured graph run as it is."""

    def __init__(self, model: nn.Module, x: Tensor, edge_index: Tensor, composite="zplus",
                 backend: str | None = None, compile: bool = True, **kwargs):
        graph, seen, self._fits = capture_any_graph(model, x, edge_index, composite, **kwargs)
        self.names = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
        self._scalars = _leaves(x, None)[1:4]  # (what the guards read of the probes: their shape)
        self.compiled = torch.compile(graph, fullgraph=True, backend=backend or BACKEND, dynamic=True) \
            if compile else graph
        self.head, self.edges, self.edge_index = seen["head"], False, None
        self.held = (model, list(model.parameters()), list(model.buffers()))

    def _args(self, leaves: list, edge_index: Tensor, kwargs: dict) -> list:
        return [leaves[0], edge_index, *leaves[1:4], *(kwargs[k] for k in self.names)]

    def fits(self, x: Tensor, edge_index: Tensor, kwargs: dict) -> bool:
        """Whether this graph's sizes meet the conditions its capture saw (else it is captured again)."""
        return bool(self._fits(self._args([x, *self._scalars], edge_index, kwargs)))

    def forward(self, x: Tensor, edge_index: Tensor | None = None, kwargs: dict | None = None) \
            -> tuple[Tensor, Tensor, list]:
        leaves = _leaves(x, None)
        # (a scatter's index and PyG's self-loops select by a mask: outputs whose size depends on the data)
        with torch.enable_grad(), torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True,
                                                               capture_scalar_outputs=True):
            out, head = self.compiled(*self._args(leaves, edge_index, kwargs or {}))
        return out, head, leaves

