r"""The relevance graph of a model cut at its message-passing layers: the engine of the walks.

The model's ``forward`` runs once inside a :class:`~lrp_lib.explain.mode.forward.ForwardMode` (the forward rules of
:class:`~lrp_lib.explain.explainer.LRPExplainer`), so a backward carries the rules' gradient and a tensor's relevance is
the tensor times it.  PyG's hooks cut every ``propagate`` call :math:`t = 1..L` by new leaves: its message inputs
(``*_j`` / ``*_i``) :math:`I_t`, of time :math:`t-1` (senders), and its output :math:`O_t`, of time :math:`t`
(receivers); also each outermost message-passing module's node input (time :math:`t-1`, so a root weight reaches back
one time only).  ``x`` has time 0, the output :math:`L+1`; the message hooks record what ``message`` reads and returns
(:class:`Message`, for :mod:`~lrp_lib.explain.walks.algebra`).  A cut's node dimension is its module's ``node_dim``.

With a row weight :math:`m_u` (N,) per time :math:`u` (a walk: one-hot rows), the nested backward multiplies
relevance going from a cut of time :math:`s` to one of time :math:`s' < s`, at its row :math:`r`, by
:math:`\prod_{u=s'}^{s-1} m_u[r]` (a route that skips times counts for the walks that stay at :math:`r`); all
:math:`m_u = 1` is the plain backward.  Relevance moving between rows inside a time, and a ``propagate`` over another
node set than the input graph's, are refused (:mod:`~lrp_lib.explain.walks.defined`).  Heterogeneous graphs (a
:class:`~lrp_lib.explain.walks.hetero.HeteroLayout`): global node ids, each cut holds one node type's rows
(``offset``, ``count``) and its time is one more than the latest cut its propagate reads.  A batch of gradients runs
at once (``torch.func.vmap``); the mode's accounts (biases, stabilisers) are read in the plain backward only.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from lrp_lib.core.modify import share_of
from lrp_lib.core.stabilizer import LostRelevanceWarning
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.function_mode import UnsupportedModelError
from lrp_lib.explain.walks.defined import WalksUndefinedError, global_rows

__all__ = ["WalkGraph", "Cut", "Message"]


#: Up to this many rows a batched backward is one plain backward per row (faster than ``torch.func.vmap`` there).
_LOOP_ROWS = 64


def _grad(source: Tensor, tensors: list, grad: Tensor, batched: bool):
    """torch.autograd.grad, batched over grad's first dimension if ``batched``: ``torch.func.vmap`` over
    ``_LOOP_ROWS`` rows, else (or where vmap fails) one backward per row, stacked (None where none reaches)."""
    if not batched:
        return torch.autograd.grad(source, tensors, grad, retain_graph=True, allow_unused=True)
    if grad.shape[0] > _LOOP_ROWS:
        unused = []

        def one(g):
            got = torch.autograd.grad(source, tensors, g, retain_graph=True, allow_unused=True)
            unused[:] = [r is None for r in got]
            return tuple(torch.zeros_like(t) if r is None else r for t, r in zip(tensors, got))
        try:
            out = torch.func.vmap(one)(grad)
            return [None if u else o for u, o in zip(unused, out)]
        except (RuntimeError, NotImplementedError, ValueError):
            pass
    rows = [torch.autograd.grad(source, tensors, g, retain_graph=True, allow_unused=True) for g in grad]
    return [None if all(p is None for p in parts) else
            torch.stack([p if p is not None else torch.zeros_like(t) for p in parts])
            for t, parts in zip(tensors, zip(*rows))]


def _parts(value) -> tuple:
    """The parts of an argument: a tuple or list's items (PyG's (source, target) pairs), else the value itself."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _rebuild(value, parts: list):
    """``value`` with its parts (:func:`_parts`) replaced by ``parts``."""
    return type(value)(parts) if isinstance(value, (tuple, list)) else parts[0]


def _check_nodes(t: Tensor, module, num_nodes: int, names: dict, what: str) -> int:
    """The node dimension of ``t`` (its module's ``node_dim``); WalksUndefinedError unless it has ``num_nodes``."""
    dim = getattr(module, "node_dim", -2)
    dim = dim % t.dim() if -t.dim() <= dim < t.dim() else 0  # (0 for a scalar: no rows to check)
    if t.dim() and t.shape[dim] != num_nodes:
        raise WalksUndefinedError(
            f"walks are not defined for this model: '{names.get(id(module), type(module).__name__)}' propagates "
            f"over another node set than the input graph ({what} has {t.shape[dim]} rows, the graph "
            f"{num_nodes} nodes): a pooled or coarsened graph, unpooling, or a readout by message passing to a "
            f"graph-level node; a walk is a sequence of the input graph's nodes")
    return dim


@dataclass
class Cut:
    """One cut: ``leaf`` (the new input of what follows), ``source`` (the tensor it replaced, whose backward leads to
    earlier cuts), its ``time`` and its ``layer`` (1-based propagate call)."""
    leaf: Tensor
    source: Tensor | None
    time: int
    layer: int
    kind: str                     # "x", "module" (a message-passing module's input), "input" (I_t),
                                  # "output" (O_t), "attr" (edge_attr: no rows)
    node_dim: int = 0             # the dimension of leaf that indexes nodes (a MessagePassing's node_dim)
    offset: int = 0               # heterogeneous: the global id of its first row (its node type's offset)
    count: int | None = None      # heterogeneous: its number of rows (its node type's nodes); None: all nodes


@dataclass
class Message:
    """What one layer's ``message`` read from the cuts (``args``: name -> (tensor (E, ...), cut index, the edge_index
    row it was gathered along)) and returned (``out``), and how often it ran."""
    args: dict = field(default_factory=dict)
    cuts: dict = field(default_factory=dict)      # (propagate argument, part or None) -> cut index
    out: Tensor | None = None
    calls: int = 0
    flow: str = "source_to_target"


@dataclass
class WalkGraph:
    """The recorded, cut relevance graph (module docstring)."""
    mode: ForwardMode
    cuts: list = field(default_factory=list)
    steps: list = field(default_factory=list)     # per layer: the (2, E_t) edge_index of its propagate
    times: list = field(default_factory=list)     # per layer: the time of its output (1..L)
    names: list = field(default_factory=list)     # per layer: the module's name
    messages: list = field(default_factory=list)  # per layer: what its message read and returned (Message)
    output: Tensor | None = None
    num_nodes: int = 0

    @property
    def depth(self) -> int:
        return max(self.times, default=0)

    @classmethod
    def record(cls, model: nn.Module, composite, inputs: dict, call, num_nodes: int, layout=None) -> "WalkGraph":
        """Run ``call()`` in a ForwardMode with the cuts; ``inputs``: name -> leaf to mark (``"x"``, else edge features
        without rows; heterogeneous, with a ``layout``: ``("x", node type)``, steps in global node ids)."""
        mode = ForwardMode(composite, model)
        graph = cls(mode, num_nodes=num_nodes)
        names = {id(m): (n or type(m).__name__) for n, m in model.named_modules() if isinstance(m, MessagePassing)}
        handles, active = [], []

        def cut(p: Tensor, time: int, layer: int, kind: str, dim: int, node_type, offset: int, count: int) -> Tensor:
            """Cut ``p`` by a new leaf; a marked copy of it for the model (which may change it in place)."""
            leaf = mode.mark(p.detach().requires_grad_(True))
            graph.cuts.append(Cut(leaf, p, time, layer, kind, dim, *((offset, count) if layout is not None else ())))
            if layout is not None:
                layout.where[id(leaf)] = (time, node_type)
            return mode.mark(leaf.clone())

        def pre(module, args):
            edge_index, size, kwargs = args
            node_args = {a[:-2] for a in module._user_args if a.endswith(("_i", "_j"))}
            sizes = {k: len(v) if isinstance(v, (tuple, list)) else 0 for k, v in kwargs.items()}
            # (a propagate inside another one's message is part of that layer: nothing marked)
            marked = [] if active else [(key, part, p, sizes[key]) for key in sorted(node_args & set(kwargs))
                                        for part, p in enumerate(_parts(kwargs[key]))
                                        if isinstance(p, Tensor) and mode.is_marked(p)]
            if not marked:
                active.append(None)
                return None
            layer, name = len(graph.steps) + 1, names.get(id(module), type(module).__name__)
            message = Message(flow=getattr(module, "flow", "source_to_target"))
            if not isinstance(edge_index, Tensor) or edge_index.is_sparse or edge_index.dim() != 2:
                raise UnsupportedModelError(
                    f"walks need each message-passing layer to propagate along a (2, E) edge_index tensor, "
                    f"but '{name}' propagates along a {type(edge_index).__name__} (a sparse adjacency has no "
                    f"per-edge messages): pass edge_index as a (2, E) tensor")
            place = layout.place_call(module, names, edge_index, marked) if layout is not None else \
                dict(time=layer, parts=[(None, 0, num_nodes)] * len(marked))
            leaves = {}
            for (key, part, p, width), (node_type, offset, count) in zip(marked, place["parts"]):
                dim = _check_nodes(p, module, count, names, f"its argument {key!r}")
                message.cuts[(key, part if width > 1 else None)] = len(graph.cuts)
                leaves[(key, part)] = cut(p, place["time"] - 1, layer, "input", dim, node_type, offset, count)
            new = dict(kwargs)
            for key in {k for k, *_ in marked}:
                new[key] = _rebuild(kwargs[key], [leaves.get((key, i), p) for i, p in enumerate(_parts(kwargs[key]))])
            active.append(module)
            graph.messages.append(message)
            graph.steps.append(place.get("edges", edge_index.detach().long()))
            graph.times.append(place["time"])
            graph.names.append(name)
            return edge_index, size, new

        def post(module, args, out):
            if active.pop() is not module or not isinstance(out, Tensor) or not mode.is_marked(out):
                return None
            node_type, offset, count = layout.calls[-1]["dst"] if layout is not None else (None, 0, num_nodes)
            dim = _check_nodes(out, module, count, names, "its output")
            return cut(out, graph.times[-1], len(graph.steps), "output", dim, node_type, offset, count)

        def message_pre(module, args):
            if not active or active[-1] is not module:
                return None
            msg = graph.messages[-1]
            msg.calls += 1
            j = 0 if msg.flow == "source_to_target" else 1
            for name, value in args[0].items():
                if not (isinstance(value, Tensor) and name.endswith(("_i", "_j"))):
                    continue
                side = j if name.endswith("_j") else 1 - j
                index = msg.cuts.get((name[:-2], None), msg.cuts.get((name[:-2], side)))
                if isinstance(index, int):
                    msg.args[name] = (value, index, side)

        def message_post(module, args, out):
            if active and active[-1] is module:
                graph.messages[-1].out = out

        outer = []  # the message-passing module being called (its own input cut: roots skip one step)

        def module_pre(module, args, kwargs):
            outer.append(module)
            if len(outer) > 1:
                return None
            value = kwargs["x"] if "x" in kwargs else (args[0] if args else None)
            parts = _parts(value)
            out = [module_cut(p) for p in parts]
            if all(o is p for o, p in zip(out, parts)):
                return None
            new = _rebuild(value, out)
            return (args, dict(kwargs, x=new)) if "x" in kwargs else ((new, *args[1:]), kwargs)

        def module_cut(p):
            if not isinstance(p, Tensor) or not mode.is_marked(p):
                return p
            time, *rows = layout.place_tensor(p) if layout is not None else (len(graph.steps), None, 0, num_nodes)
            return cut(p, time, len(graph.steps) + 1, "module", 0, *rows) if p.dim() and p.shape[0] == rows[2] else p

        def module_post(module, args, out):
            outer.pop()

        for m in model.modules():
            if isinstance(m, MessagePassing):
                handles += [m.register_forward_pre_hook(module_pre, with_kwargs=True),
                            m.register_forward_hook(module_post), m.register_propagate_forward_pre_hook(pre),
                            m.register_propagate_forward_hook(post), m.register_message_forward_pre_hook(message_pre),
                            m.register_message_forward_hook(message_post)]
        try:
            with torch.enable_grad(), mode:
                for name, leaf in inputs.items():
                    mode.mark(leaf)
                    if isinstance(name, tuple):  # ("x", node type) of a heterogeneous graph
                        graph.cuts.append(Cut(leaf, None, 0, 0, "x", 0, *layout.rows(name[1])))
                        layout.where[id(leaf)] = (0, name[1])
                    else:
                        graph.cuts.append(Cut(leaf, None, 0, 0, "x" if name == "x" else "attr"))
                graph.output = call()
        finally:
            for h in handles:
                h.remove()
        return graph

    def seed(self, start: Tensor) -> Tensor:
        """The gradient at the output that gives it the relevance ``start``: ``start / output``."""
        return share_of(start, self.output)

    def backward(self, start: Tensor, masks, batch: int | None, capture: int | None = None):
        """The nested backward for ``batch`` row weightings at once: ``start`` the output's relevance, ``masks`` a
        function ``u -> (B, N)`` row weight at time ``u`` (or None: 1).  Returns ``(rels, captured)``: the relevance
        of the cuts of kind ``"x"`` and ``"attr"`` (the inputs' order), (B, *shape), zeros where none reaches
        (``batch=None``: one plain backward, no batch dimension, the mode's accounts settled); if ``capture = t``,
        what layer t's messages carry: ``{"input": (B, N) per sender row, "attr": (B, E) per edge}``."""
        L, cuts, tally = self.depth, self.cuts, self.mode.tally
        state, captured = {}, {}  # cut index -> the gradient reaching it; what layer ``capture``'s messages carry
        probes = tally.leaves() if batch is None else []
        amounts = [None] * len(probes)

        def land(source: Tensor, grad: Tensor, s: int, leaves: range, layer: int | None = None):
            tensors = [cuts[i].leaf for i in leaves]
            grads = _grad(source, tensors + probes, grad, batch is not None)
            for k, g in enumerate(grads[len(tensors):]):
                if g is not None:
                    amounts[k] = g if amounts[k] is None else amounts[k] + g
            for i, g in zip(leaves, grads):
                if g is None:
                    continue
                c = cuts[i]
                weights = [] if c.kind == "attr" else [m for m in map(masks, range(c.time, s)) if m is not None]
                if weights:
                    w = math.prod(weights)
                    if c.count is not None:
                        w = w[:, c.offset:c.offset + c.count]
                    shape = [1] * g.dim()
                    shape[0], shape[1 + c.node_dim] = w.shape[0], w.shape[1]
                    g = g * w.view(shape).to(g.dtype)
                if capture is not None and layer == capture and (c.kind == "attr" or
                                                                 (c.kind == "input" and c.layer == capture)):
                    part = global_rows((g * c.leaf.detach()).reshape(g.shape[0], g.shape[1], -1).sum(-1), c,
                                       self.num_nodes, 1)  # (an "attr" cut has no node type: as it is)
                    captured[c.kind] = part if c.kind not in captured else captured[c.kind] + part
                state[i] = g if i not in state else state[i] + g
        grad0 = self.seed(start)
        land(self.output, grad0 if batch is None else grad0.expand(batch, *grad0.shape), L + 1, range(len(cuts)))
        for i in reversed(range(len(cuts))):
            c = cuts[i]
            if c.source is None or i not in state:
                continue
            land(c.source, state.pop(i), c.time, range(i), c.layer if c.kind == "output" else None)
        if batch is None:
            tally.settle(amounts)
        lead = () if batch is None else (batch,)
        return [state[i] * c.leaf.detach() if i in state else c.leaf.new_zeros(*lead, *c.leaf.shape)
                for i, c in enumerate(cuts) if c.source is None], captured

    def grad(self, source: Tensor, tensors: list, grad: Tensor, batched: bool):
        """:func:`_grad` of the forward rules with lost-relevance warnings silenced: a probe, not the explanation
        (it puts relevance on every row, also where an output is zero)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LostRelevanceWarning)
            return _grad(source, tensors, grad, batched)
