r"""LRP for unmodified PyTorch Geometric models, as a ``torch_geometric.explain`` algorithm.

.. code-block:: python

    explainer = Explainer(model, algorithm=LRPExplainer(rule="epsilon"), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(data.x, data.edge_index, batch=data.batch)

How it works.  While explaining, every supported module's ``forward`` is replaced (on that
instance only, restored afterwards) by the same computation written with relevance ops
(:mod:`lrp_lib.ops`, :mod:`lrp_lib.rules`), and the functions a ``forward`` may call directly --
``F.relu`` / ``torch.relu`` / ``Tensor.relu`` and PyG's ``global_add_pool``, ``global_mean_pool``,
``global_max_pool`` -- are swapped for relevance versions (in ``torch_geometric.nn`` and in the
namespaces of the model's own modules, so ``from torch_geometric.nn import global_mean_pool``
is covered).  The model's own ``forward`` code runs unchanged; one ``backward`` from the explained
output leaves the node relevance in ``x.grad``.  Afterwards the autograd graph is checked: an
operation that was not replaced (a sigmoid, a residual ``+``, an active dropout) would pass a plain
gradient, so it raises :class:`UnsupportedModelError` naming it instead of returning a wrong
explanation.

The layers, each written as a sum of terms (the bias is a term) whose relevance splits in
proportion to the terms, a linear map per weight with the chosen ``rule``, and aggregations with
the scatter rules (proportional for sum and mean, winner takes all for max):

* ``Linear``: :math:`z = W x + b`.
* ``GCNConv``: :math:`z_i = W \sum_{j \in N(i) \cup \{i\}} \hat a_{ij} x_j + b`,
  :math:`\hat a_{ij} = w_{ji} / \sqrt{\hat d_i \hat d_j}` (PyG's ``gcn_norm``).  Aggregating before
  the weight gives the same value as PyG's order; for a rule that only changes :math:`W` the
  relevance is that of the whole layer as one linear map of all :math:`x_{jf}`,
  :math:`R_{jf} = \sum_{i,k} \hat a_{ij} x_{jf} w_{kf} / z_{ik} \, R_{ik}`.
* ``GraphConv``: :math:`z_i = W_{root} x_i + W_{rel} \,\mathrm{agg}_j\, e_{ji} x_j + b`.
* ``SAGEConv`` (no projection, no normalisation): :math:`z_i = W_r x_i + W_l \,\mathrm{mean}_j\, x_j + b`.
* ``GINConv``: :math:`z_i = \mathrm{nn}\big((1 + \epsilon) x_i + \sum_j x_j\big)`, ``nn`` built from
  the supported modules.
* ``ReLU`` (module or function): relevance passes where the unit is active.
* ``global_add_pool`` / ``global_mean_pool`` / ``global_max_pool``: the scatter rules.
* ``Dropout``: the identity in eval mode (``Explainer`` puts the model in eval mode).

A message :math:`\hat a_{ij} x_j` (or :math:`e_{ji} x_j`, :math:`x_j`) is multiplied by a number that
is not an input, so it carries its relevance unchanged; the relevance reaching the messages of
edge :math:`j \to i`, summed over features and over layers, is that edge's relevance.  GCN's added
self-loops are not edges of the input: their share stays with the node.

The relevance starts from the explained output: the raw logit of the target class (multiclass),
:math:`\pm` the single logit of a binary model (:math:`+z` for target 1, :math:`-z` for target 0: the
log-odds of the target class), or the regression value.  For a model without biases the node
relevance of a graph sums to that value (up to the rule's :math:`\epsilon`).  The graphs of a
batch do not exchange messages, so one backward explains all of them, with the same masks as
one graph at a time.
"""
from __future__ import annotations

import builtins
import contextlib
import sys
import warnings
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.explain import Explanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import (ExplanationType, MaskType, ModelMode, ModelReturnType,
                                            ModelTaskLevel)
from torch_geometric.nn import GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn import MLP as PyGMLP
from torch_geometric.nn import Linear as PyGLinear
from torch_geometric.nn import MessagePassing
from torch_geometric.nn import pool as pyg_pool

from torch_geometric.explain import Explainer as PyGExplainer

from . import ops
from .rules import Rule, get_rule
from .rules import linear as rule_linear
from .validation import check_batch, check_edge_index, check_edge_values, check_finite, check_node_features

__all__ = ["LRPExplainer", "Explainer", "UnsupportedModelError", "lrp_patched", "check_inputs", "SUPPORTED"]

#: What the explainer can propagate through (shown in the error for anything else).
SUPPORTED = ("Linear", "GCNConv", "GraphConv", "GINConv (with an nn of supported modules)",
             "SAGEConv (aggr 'mean', 'add' or 'max', no project/normalize)", "ReLU / F.relu",
             "global_add_pool", "global_mean_pool", "global_max_pool", "Dropout (eval mode)",
             "Identity", "containers (Sequential, ModuleList, ModuleDict, torch_geometric.nn.MLP "
             "without norms, your own modules)")

# Autograd nodes that only copy or move values: relevance passes through them like a gradient.
_COPY_NODES = {"AccumulateGrad", "ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0",
               "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2",
               "SqueezeBackward3", "SelectBackward0", "SliceBackward0", "IndexBackward0",
               "TBackward0", "TransposeBackward0", "PermuteBackward0", "CloneBackward0",
               "AliasBackward0", "ToCopyBackward0", "ExpandBackward0", "CatBackward0",
               "SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0", "StackBackward0",
               "NarrowBackward0"}


class UnsupportedModelError(TypeError):
    """The model uses a module or an operation that LRPExplainer cannot propagate relevance through."""


def _unsupported(what: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"LRPExplainer does not support {what}. Supported: {'; '.join(SUPPORTED)}.")


# ----------------------------------------------------------- message relevance
class MessageRelevance(torch.autograd.Function):
    r"""Messages :math:`m_e = c_e\, x_{s(e)}` from rows already gathered per edge.

    The factor :math:`c_e` (a normalisation or an edge weight) is not an input, so the message
    keeps its relevance: :math:`R_{x_{s(e)}} \mathrel{+}= R_{m_e}`.  The backward also adds
    :math:`\sum_f R_{m_{e,f}}` to ``record[edge_id[e]]`` (entries with ``edge_id < 0`` are not
    edges of the explained graph, e.g. GCN's added self-loops).
    """

    @staticmethod
    def forward(ctx, rows: Tensor, coeff: Tensor | None, edge_id: Tensor, record: Tensor | None) -> Tensor:
        ctx.record = record
        ctx.save_for_backward(edge_id)
        return rows * coeff.unsqueeze(-1) if coeff is not None else rows.clone()

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        (edge_id,) = ctx.saved_tensors
        if ctx.record is not None:
            keep = edge_id >= 0
            ctx.record.index_add_(0, edge_id[keep], rel_out.sum(-1)[keep].to(ctx.record.dtype))
        return rel_out, None, None, None


class ScaleRelevance(torch.autograd.Function):
    r"""``c * x`` for a constant ``c`` (not an input): :math:`R_x = R_{out}`."""

    @staticmethod
    def forward(ctx, x: Tensor, c: Tensor) -> Tensor:
        return x * c

    @staticmethod
    def backward(ctx, rel_out: Tensor):
        return rel_out, None


# ------------------------------------------------------------------ the state
class _State:
    """What one explanation needs while the model runs: the rule and the edge record."""

    def __init__(self, rule: Rule, num_edges: int | None, dtype):
        self.rule = rule
        self.num_edges = num_edges
        self.record = torch.zeros(num_edges, dtype=dtype) if num_edges is not None else None
        self.gcn_cache: dict = {}  # (id(edge_index), ...) -> (edge_index, edge_weight, normalisation)
        # set when the model runs on the targets' k-hop subgraphs (LRPExplainer(per_index=True)):
        # (original id of every subgraph node, the full edge_index, the full edge_weight, full size)
        self.subgraph: tuple | None = None
        self.degree_cache: dict = {}

    def gcn_degree(self, m: GCNConv, dtype, device) -> Tensor | None:
        """On a k-hop subgraph, GCN's degree of each of its nodes in the full graph (with the
        self-loop): the nodes on the border miss incoming edges, and their degree enters the
        normalisation of the messages they send.  None when the model runs on the whole graph."""
        if self.subgraph is None:
            return None
        node_ids, edge_index, edge_weight, n = self.subgraph
        key = (m.add_self_loops, m.improved and edge_weight is not None, dtype)
        if key not in self.degree_cache:
            w = edge_weight.detach().to(dtype) if edge_weight is not None else torch.ones(
                edge_index.shape[1], dtype=dtype, device=device)
            self.degree_cache[key] = _gcn_loops_and_degree(m, n, edge_index, w, edge_weight is not None)[3]
        return self.degree_cache[key][node_ids]

    def messages(self, x: Tensor, edge_index: Tensor, coeff: Tensor | None, edge_id: Tensor, layer: str):
        if self.record is not None and self.record.device != x.device:
            self.record = self.record.to(x.device)
        if self.num_edges is not None and edge_id.numel() and int(edge_id.max()) >= self.num_edges:
            raise ValueError(f"{layer} received an edge_index with more edges than the explained one "
                             f"({self.num_edges}); edge relevance needs the convolutions to get the explained edge_index")
        rows = ops.index_select(x, 0, edge_index[0])
        return MessageRelevance.apply(rows, coeff, edge_id, self.record)

    def linear(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return rule_linear(x, weight.detach(), None if bias is None else bias.detach(), rule=self.rule)


def _aggregate(msgs: Tensor, dst: Tensor, n: int, aggr: str, layer: str) -> Tensor:
    if aggr in ("add", "sum"):
        return ops.scatter_add(msgs, dst, 0, n)
    if aggr == "mean":
        return ops.scatter_mean(msgs, dst, 0, n)
    if aggr == "max":
        return ops.scatter_max(msgs, dst, 0, n)[0]
    raise _unsupported(f"{layer} with aggr={aggr!r}")


def _check_edges(edge_index, layer: str, n: int) -> Tensor:
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2 \
            or edge_index.is_sparse:
        raise _unsupported(f"{layer} called with a {type(edge_index).__name__} adjacency; pass a dense "
                           f"edge_index of shape (2, E)")
    return edge_index


def _terms(state: _State, terms: list[Tensor], bias: Tensor | None) -> Tensor:
    out = terms[0]
    for t in terms[1:]:
        out = ops.add(out, t)
    return out if bias is None else ops.add(out, bias.detach())


# ------------------------------------------------------------- layer forwards
def _linear_forward(state: _State, m: nn.Linear, x: Tensor) -> Tensor:
    return state.linear(x, m.weight, m.bias)


def _relu_forward(state: _State, m: nn.Module, x: Tensor) -> Tensor:
    return ops.relu(x)


def _identity_forward(state: _State, m: nn.Module, x: Tensor, *args, **kwargs) -> Tensor:
    if m.training and isinstance(m, nn.modules.dropout._DropoutNd):
        raise _unsupported(f"{type(m).__name__} in training mode (call model.eval())")
    return x


def _gcn_forward(state: _State, m: GCNConv, x: Tensor, edge_index, edge_weight: Tensor | None = None) -> Tensor:
    n = x.shape[0]
    edge_index = _check_edges(edge_index, "GCNConv", n)
    if m.flow != "source_to_target":
        raise _unsupported(f"GCNConv with flow={m.flow!r}")
    # the layers of a model usually share edge_index and edge_weight: normalise once per explanation
    key = (id(edge_index), id(edge_weight), n, x.dtype, m.normalize, m.add_self_loops,
           m.improved and edge_weight is not None)
    if key not in state.gcn_cache:
        state.gcn_cache[key] = (edge_index, edge_weight, _gcn_norm(m, x, edge_index, edge_weight,
                                                                   state.gcn_degree(m, x.dtype, x.device)))
    _, _, (edge_index, w, edge_id) = state.gcn_cache[key]
    msgs = state.messages(x, edge_index, w, edge_id, "GCNConv")
    aggregated = ops.scatter_add(msgs, edge_index[1], 0, n)
    return state.linear(aggregated, m.lin.weight, m.bias)


def _gcn_norm(m: GCNConv, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None, degree: Tensor | None = None):
    """(edge_index with GCN's self-loops, normalised weights, id of the explained edge or -1).
    ``degree``: the weighted degree of each node if not that of ``edge_index`` (a subgraph's)."""
    n, e = x.shape[0], edge_index.shape[1]
    w = edge_weight.detach().to(x.dtype) if edge_weight is not None else x.new_ones(e)
    if not m.normalize:
        return edge_index, w, torch.arange(e, device=x.device)
    edge_index, w, edge_id, deg = _gcn_loops_and_degree(m, n, edge_index, w, edge_weight is not None)
    if degree is not None:
        deg = degree
    if bool((deg < 0).any()):
        node = int((deg < 0).nonzero()[0, 0])
        raise ValueError(
            f"GCNConv: edge_weight gives node {node} a negative weighted degree ({float(deg[node]):.4g}), and "
            f"GCN's normalisation deg^-1/2 is NaN there: PyG's own GCNConv output is NaN too. Use non-negative "
            f"edge_weight (or weights whose sum per receiving node, self-loop included, is >= 0)")
    src, dst = edge_index
    dinv = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
    return edge_index, dinv[src] * w * dinv[dst], edge_id


def _gcn_loops_and_degree(m: GCNConv, n: int, edge_index: Tensor, w: Tensor, weighted: bool):
    """GCN's self-loops added (as add_remaining_self_loops: existing loops keep their weight, moved
    to the end): (edge_index, weights, id of the explained edge or -1, weighted in-degree)."""
    edge_id = torch.arange(edge_index.shape[1], device=edge_index.device)
    if m.add_self_loops:
        loop = edge_index[0] == edge_index[1]
        nodes = torch.arange(n, device=edge_index.device)
        # PyG fills 2 for improved=True only when edge weights are given (gcn_norm)
        loop_w = w.new_full((n,), 2.0 if m.improved and weighted else 1.0)
        loop_id = torch.full((n,), -1, dtype=torch.long, device=edge_index.device)
        if bool(loop.any()):
            loop_w[edge_index[0, loop]] = w[loop]
            loop_id[edge_index[0, loop]] = edge_id[loop]
            edge_index, w, edge_id = edge_index[:, ~loop], w[~loop], edge_id[~loop]
        edge_index = torch.cat([edge_index, nodes.repeat(2, 1)], dim=1)
        w = torch.cat([w, loop_w])
        edge_id = torch.cat([edge_id, loop_id])
    deg = torch.zeros(n, dtype=w.dtype, device=w.device).index_add_(0, edge_index[1], w)
    return edge_index, w, edge_id, deg


def _graph_conv_forward(state: _State, m: GraphConv, x, edge_index, edge_weight: Tensor | None = None, size=None):
    if isinstance(x, (tuple, list)):
        raise _unsupported("GraphConv on bipartite (x_src, x_dst) input")
    edge_index = _check_edges(edge_index, "GraphConv", x.shape[0])
    coeff = edge_weight.detach() if edge_weight is not None else None
    edge_id = torch.arange(edge_index.shape[1], device=x.device)
    msgs = state.messages(x, edge_index, coeff, edge_id, "GraphConv")
    aggregated = _aggregate(msgs, edge_index[1], x.shape[0], m.aggr, "GraphConv")
    return _terms(state, [state.linear(x, m.lin_root.weight, None),
                          state.linear(aggregated, m.lin_rel.weight, None)], m.lin_rel.bias)


def _sage_forward(state: _State, m: SAGEConv, x, edge_index, size=None):
    if isinstance(x, (tuple, list)):
        raise _unsupported("SAGEConv on bipartite (x_src, x_dst) input")
    if m.project or m.normalize:
        raise _unsupported("SAGEConv with project=True or normalize=True")
    edge_index = _check_edges(edge_index, "SAGEConv", x.shape[0])
    edge_id = torch.arange(edge_index.shape[1], device=x.device)
    msgs = state.messages(x, edge_index, None, edge_id, "SAGEConv")
    aggregated = _aggregate(msgs, edge_index[1], x.shape[0], m.aggr, "SAGEConv")
    terms = [state.linear(aggregated, m.lin_l.weight, None)]
    if m.root_weight:
        terms.insert(0, state.linear(x, m.lin_r.weight, None))
    return _terms(state, terms, m.lin_l.bias)


def _gin_forward(state: _State, m: GINConv, x, edge_index, size=None):
    if isinstance(x, (tuple, list)):
        raise _unsupported("GINConv on bipartite (x_src, x_dst) input")
    edge_index = _check_edges(edge_index, "GINConv", x.shape[0])
    edge_id = torch.arange(edge_index.shape[1], device=x.device)
    msgs = state.messages(x, edge_index, None, edge_id, "GINConv")
    aggregated = _aggregate(msgs, edge_index[1], x.shape[0], m.aggr, "GINConv")
    root = ScaleRelevance.apply(x, (1 + m.eps).detach().to(x.dtype))
    return m.nn(ops.add(root, aggregated))


_LAYERS: dict[type, Callable] = {
    GCNConv: _gcn_forward, GraphConv: _graph_conv_forward, SAGEConv: _sage_forward, GINConv: _gin_forward,
    nn.Linear: _linear_forward, PyGLinear: _linear_forward, nn.ReLU: _relu_forward,
    nn.Dropout: _identity_forward, nn.Identity: _identity_forward,
}
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict, PyGMLP)


# ---------------------------------------------------------- pooling functions
def _batch_or_zeros(x: Tensor, batch: Tensor | None) -> Tensor:
    return batch if batch is not None else torch.zeros(x.shape[0], dtype=torch.long, device=x.device)


def _groups(batch: Tensor, size: int | None) -> int:
    return size if size is not None else (int(batch.max()) + 1 if batch.numel() else 0)


def global_add_pool(x: Tensor, batch: Tensor | None = None, size: int | None = None) -> Tensor:
    batch = _batch_or_zeros(x, batch)
    return ops.scatter_add(x, batch, 0, _groups(batch, size))


def global_mean_pool(x: Tensor, batch: Tensor | None = None, size: int | None = None) -> Tensor:
    batch = _batch_or_zeros(x, batch)
    return ops.scatter_mean(x, batch, 0, _groups(batch, size))


def global_max_pool(x: Tensor, batch: Tensor | None = None, size: int | None = None) -> Tensor:
    batch = _batch_or_zeros(x, batch)
    return ops.scatter_max(x, batch, 0, _groups(batch, size))[0]


def _relu_function(x: Tensor, inplace: bool = False) -> Tensor:
    return ops.relu(x)


# ------------------------------------------------------------------- patching
def _plan(model: nn.Module) -> list[tuple[nn.Module, Callable]]:
    """(module, relevance forward) for every supported module; a clear error for anything else."""
    plan = []

    def visit(name: str, m: nn.Module, is_root: bool):
        for cls, fn in _LAYERS.items():
            if type(m) is cls or (cls is not nn.Linear and isinstance(m, cls)):
                plan.append((m, fn))
                if isinstance(m, GINConv):
                    visit(f"{name}.nn", m.nn, False)
                return
        if isinstance(m, nn.Dropout) or type(m).__name__ in ("Dropout1d", "Dropout2d", "AlphaDropout"):
            plan.append((m, _identity_forward))
            return
        if isinstance(m, PyGMLP) and any(not isinstance(norm, nn.Identity) for norm in m.norms):
            raise _unsupported(f"module '{name}' (torch_geometric.nn.MLP with norm layers: use norm=None)")
        library = type(m).__module__.split(".")[0] in ("torch", "torch_geometric")
        if isinstance(m, MessagePassing) or (library and not isinstance(m, _CONTAINERS)):
            raise _unsupported(f"module '{name}' of type {type(m).__name__}")
        for child_name, child in m.named_children():
            visit(f"{name}.{child_name}" if name else child_name, child, False)

    visit("", model, True)
    return plan


_FUNCTIONS = {"global_add_pool": global_add_pool, "global_mean_pool": global_mean_pool,
              "global_max_pool": global_max_pool}


@contextlib.contextmanager
def lrp_patched(model: nn.Module, rule: Rule | str = "epsilon", num_edges: int | None = None,
                dtype=torch.float32) -> Iterator[_State]:
    """Within this context ``model``'s forward computes the same values with relevance ops.

    Yields the state whose ``record`` collects edge relevance (``num_edges`` entries) during the
    backward.  Everything is restored on exit, also after an error.
    """
    state = _State(get_rule(rule), num_edges, dtype)
    plan = _plan(model)
    saved_forwards = []
    saved_attrs = []

    def swap(owner, attr, new):
        saved_attrs.append((owner, attr, owner.__dict__.get(attr, _MISSING) if isinstance(owner, type)
                            else getattr(owner, attr)))
        setattr(owner, attr, new)

    try:
        for m, fn in plan:
            saved_forwards.append((m, m.__dict__.get("forward", _MISSING)))
            m.forward = _bind(fn, state, m)
        originals = {name: getattr(pyg_pool, name) for name in _FUNCTIONS}
        namespaces = {id(mod): mod for mod in (sys.modules["torch_geometric.nn"], pyg_pool,
                                               sys.modules.get("torch_geometric.nn.pool.glob"))
                      if mod is not None}
        for m in model.modules():  # the model's own files: `from torch_geometric.nn import global_mean_pool`
            mod = sys.modules.get(type(m).__module__)
            if mod is not None:
                namespaces[id(mod)] = mod
        for mod in namespaces.values():
            for attr, new in _replacements(mod, originals):
                swap(mod, attr, new)
        for m in model.modules():  # a pooling function kept as an attribute: self.pool = global_mean_pool
            for attr, value in list(vars(m).items()):
                for name, original in originals.items():
                    if value is original:
                        swap(m, attr, _FUNCTIONS[name])
        swap(F, "relu", _relu_function)
        swap(torch, "relu", _relu_function)
        swap(torch.Tensor, "relu", _relu_function)
        yield state
    finally:
        for owner, attr, value in reversed(saved_attrs):
            if value is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, value)
        for m, forward in saved_forwards:
            if forward is _MISSING:
                del m.forward
            else:
                m.forward = forward


_MISSING = object()
_LIBRARY_HITS: dict[str, list[tuple[str, Callable]]] = {}


def _replacements(mod, originals: dict) -> list[tuple[str, Callable]]:
    """(attribute, relevance version) for each pooling function or F.relu found in ``mod``.

    Library namespaces do not change, so their scan is remembered; a user's module is scanned
    every time (it may have imported something since).
    """
    library = mod.__name__.split(".")[0] in ("torch", "torch_geometric")
    if library and mod.__name__ in _LIBRARY_HITS:
        return _LIBRARY_HITS[mod.__name__]
    hits = []
    for attr, value in list(vars(mod).items()):
        for name, original in originals.items():
            if value is original:
                hits.append((attr, _FUNCTIONS[name]))
        if value is F.relu and mod is not F:
            hits.append((attr, _relu_function))
    if library:
        _LIBRARY_HITS[mod.__name__] = hits
    return hits


def _bind(fn, state, m):
    def forward(*args, **kwargs):
        return fn(state, m, *args, **kwargs)
    return forward


def check_relevance_graph(out: Tensor) -> None:
    """Raise :class:`UnsupportedModelError` if ``out`` depends on the input through an operation
    that was not replaced by a relevance op (it would pass a gradient, not relevance)."""
    seen, stack, bad = set(), [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if not (name.endswith("RelevanceBackward") or name in _COPY_NODES):
            bad.add(name.replace("Backward0", "").replace("Backward1", ""))
        stack.extend(n for n, _ in node.next_functions)
    if bad:
        raise _unsupported(
            f"the operation(s) {', '.join(sorted(bad))} applied in model.forward outside the supported "
            f"modules and functions (relevance cannot be propagated through them)")


# ------------------------------------------------------------ checking inputs
def check_inputs(model: nn.Module, x: Tensor, edge_index: Tensor, **kwargs) -> None:
    """Raise an error naming the argument (and the fix) unless the inputs can be explained.

    Checks that ``model`` is a module; ``x`` a finite floating point (num_nodes, num_features)
    tensor with at least one node; ``edge_index`` an integer (2, E) tensor (torch.long or
    torch.int32) within ``0 .. num_nodes - 1``; ``batch`` (if given) one graph id per node, with no
    edge joining two graphs; ``edge_weight`` one finite value per edge; ``edge_attr`` one finite row
    per edge; any other floating point tensor argument finite.

    :class:`LRPExplainer` runs it itself, but PyG's ``Explainer`` first runs a prediction pass of
    the unmodified model, where a bad input fails with an error from inside PyG (or gives NaN).  So
    call it before the explainer, with the same arguments::

        check_inputs(model, data.x, data.edge_index, batch=data.batch)
        explanation = explainer(data.x, data.edge_index, batch=data.batch)

    or use :class:`Explainer` (PyG's ``Explainer``, which calls it before that pass).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    x = check_node_features(x, "x")
    edge_index = check_edge_index(edge_index, x.shape[0], "edge_index")
    for name, value in kwargs.items():
        if value is None:
            continue
        if name == "batch":
            check_batch(value, x.shape[0], edge_index, "batch")
        elif name == "edge_weight":
            check_edge_values(value, edge_index.shape[1], "edge_weight", one_dimensional=True)
        elif name == "edge_attr":
            check_edge_values(value, edge_index.shape[1], "edge_attr")
        elif isinstance(value, Tensor):
            check_finite(value, name)


def _explainer_training_flag(model: nn.Module) -> bool | None:
    """The training flag that PyG's ``Explainer.__call__`` saved before putting ``model`` in eval
    mode (its local ``training``), found on the call stack; None if not called from there."""
    frame = sys._getframe(1)
    for _ in range(16):
        frame = frame.f_back
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if (frame.f_code.co_name == "__call__" and isinstance(owner, PyGExplainer)
                and owner.model is model and isinstance(frame.f_locals.get("training"), bool)):
            return frame.f_locals["training"]
    return None


class _DetachedRelevance:
    """Relevance sent into tensors that left the autograd graph inside ``model.forward``.

    A ``.detach()`` (or a constant) joined to the computation by a copy operation (``torch.cat``,
    ``stack``, indexing) shows up as a copy node with a missing input: the relevance of that input
    never reaches ``x``.  A hook on each such node adds up what its inputs did not receive."""

    def __init__(self, out: Tensor):
        self.lost, self.nodes, self.handles = 0.0, set(), []
        seen, stack = set(), [out.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            name = type(node).__name__
            if name in _COPY_NODES and name != "AccumulateGrad" and any(n is None for n, _ in node.next_functions):
                self.nodes.add(name.replace("Backward0", ""))
                missing = [i for i, (n, _) in enumerate(node.next_functions) if n is None]
                self.handles.append(node.register_hook(self._hook(missing)))
            stack.extend(n for n, _ in node.next_functions)

    def _hook(self, missing: list[int]):
        def hook(grad_inputs, grad_outputs):  # what the inputs outside the graph were sent
            self.lost += sum(float(grad_inputs[i].sum()) for i in missing if grad_inputs[i] is not None)
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()



class LostRelevanceWarning(ops.LostRelevanceWarning):
    """Part of the explained output's relevance did not reach the inputs (a detach in the model)."""


# ------------------------------------------------------------------ explainer
class LRPExplainer(ExplainerAlgorithm):
    r"""Layer-wise Relevance Propagation for PyG models (see the module docstring).

    Args:
        rule: the rule of every linear map: ``"epsilon"`` (default, :math:`\epsilon = 10^{-6}`),
            ``"gamma"``, or any :class:`lrp_lib.rules.Rule` (``Epsilon(0.1)``, ``Gamma(0.25)``).
        per_index: for node-level tasks with ``index`` a tensor of nodes: explain each node on its
            own (default False: one explanation of the sum of their outputs, as PyG's explainers).
            The explanation then also holds ``node_relevance``, a sparse (len(index), N, F) tensor
            (F = 1 for ``node_mask_type="object"``) whose slice ``i`` is the node mask of
            ``index[i]`` alone, and ``edge_relevance``, sparse (len(index), E); ``node_mask`` and
            ``edge_mask`` are their sums over the targets.  The targets are explained
            ``chunk_size`` at a time on the disjoint union of their ``num_hops``-hop subgraphs
            (one forward and one backward per chunk); ``num_hops`` defaults to the number of
            message-passing modules of the model, and an error says if the subgraphs do not
            reproduce the model's output at the targets.

    Masks: ``node_mask_type="attributes"`` gives the relevance of each input feature (N x F),
    ``"object"`` its sum per node (N x 1); ``edge_mask_type="object"`` the relevance carried by each
    edge's messages over all layers (E).  Relevance is signed and not normalised.

    The inputs are checked (:func:`check_inputs`) before anything runs.  PyG's ``Explainer`` runs
    a prediction pass before this algorithm: use :class:`Explainer` (or call :func:`check_inputs`
    first) to have the inputs checked before that pass too.  If the explanation fails, the model's
    training flag is restored (PyG's ``Explainer`` would leave it in eval mode).  Relevance that a
    ``.detach()`` inside the model keeps from the inputs is reported, with its amount, by a
    :class:`LostRelevanceWarning`.
    """

    def __init__(self, rule: Rule | str = "epsilon", per_index: bool = False, num_hops: int | None = None,
                 chunk_size: int = 256):
        super().__init__()
        self.rule = get_rule(rule)
        if not isinstance(per_index, bool):
            raise TypeError(f"per_index must be True or False, got {per_index!r}")
        for name, value, least in (("num_hops", num_hops, 0), ("chunk_size", chunk_size, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if chunk_size is None:
            raise ValueError("chunk_size must be an int >= 1, got None")
        self.per_index, self.num_hops, self.chunk_size = per_index, num_hops, chunk_size

    def supports(self) -> bool:
        cfg, model_cfg = self.explainer_config, self.model_config
        if cfg.node_mask_type not in (None, MaskType.object, MaskType.attributes):
            raise ValueError(f"LRPExplainer supports node_mask_type None, 'object' or 'attributes', "
                             f"got {cfg.node_mask_type.value!r}")
        if cfg.edge_mask_type not in (None, MaskType.object):
            raise ValueError(f"LRPExplainer supports edge_mask_type None or 'object', got {cfg.edge_mask_type.value!r}")
        if model_cfg.return_type != ModelReturnType.raw:
            raise ValueError(f"LRPExplainer starts from raw model outputs: use return_type='raw', "
                             f"got {model_cfg.return_type.value!r}")
        if model_cfg.task_level == ModelTaskLevel.edge:
            raise ValueError("LRPExplainer explains graph- and node-level tasks, not task_level='edge'")
        return True

    def forward(self, model: nn.Module, x: Tensor, edge_index: Tensor, *, target: Tensor,
                index=None, **kwargs) -> Explanation:
        training = _explainer_training_flag(model)
        try:
            return self._explain(model, x, edge_index, target=target, index=index, **kwargs)
        except BaseException:
            if training is not None:
                model.train(training)
            raise

    def _explain(self, model, x, edge_index, *, target, index=None, **kwargs) -> Explanation:
        if self.per_index and index is not None and self.model_config.task_level == ModelTaskLevel.node:
            return self._explain_each(model, x, edge_index, target=target, index=index, **kwargs)
        node_rel, edge_rel, _ = self._relevance(model, x, edge_index, target, index, **kwargs)
        return self._explanation(node_rel, edge_rel)

    def _explanation(self, node_rel: Tensor, edge_rel: Tensor | None, **extra) -> Explanation:
        node_type = self.explainer_config.node_mask_type
        node_mask = None if node_type is None else (
            node_rel if node_type == MaskType.attributes else node_rel.sum(-1, keepdim=True))
        edge_mask = edge_rel if self.explainer_config.edge_mask_type is not None else None
        return Explanation(node_mask=node_mask, edge_mask=edge_mask, **extra)

    def _relevance(self, model, x, edge_index, target, index, subgraph=None, checked=False, **kwargs):
        """(node relevance, edge relevance, the model's output): one forward, one backward."""
        if not checked:
            check_inputs(model, x, edge_index, **kwargs)
        edge_index = edge_index.long()  # PyG accepts int32; the relevance ops index with int64
        leaf = x.detach().clone().requires_grad_(True)
        with torch.enable_grad(), lrp_patched(model, self.rule, edge_index.shape[1], x.dtype) as state:
            state.subgraph = subgraph
            out = model(leaf, edge_index, **kwargs)
            if not isinstance(out, Tensor) or not out.requires_grad:
                raise ValueError(
                    "the model's output does not depend on x through autograd: model.forward detaches it "
                    "(.detach(), torch.no_grad(), .item(), numpy) or does not use x; relevance can only be "
                    "propagated through the model's autograd graph, so remove the detach")
            check_relevance_graph(out)
            start = self._start(out, target, index)
            detached = _DetachedRelevance(out)
            try:
                out.backward(start)
            finally:
                detached.remove()
        if detached.nodes and abs(detached.lost) > 1e-6 * max(1.0, float(start.abs().sum())):
            total = float(start.sum())
            share = f" ({100 * detached.lost / total:.1f} % of the explained {total:.4g})" if total else ""
            warnings.warn(
                f"relevance {detached.lost:.4g}{share} did not reach x: model.forward joins tensors that "
                f"were detached (.detach() or constants) by {', '.join(sorted(detached.nodes))}; the "
                f"explanation covers only the rest. Remove the detach to explain the whole output",
                LostRelevanceWarning, stacklevel=3)
        node_rel = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        return node_rel, state.record, out.detach()

    def _explain_each(self, model, x, edge_index, *, target, index, **kwargs) -> Explanation:
        """``per_index=True``: each node of ``index`` explained on its own, over its k-hop subgraph.

        The targets of a chunk (``chunk_size``) are explained together on the disjoint union of
        their subgraphs (one forward and one backward per chunk); a subgraph holds every node within
        ``num_hops`` hops upstream and every edge into a node closer than that, which is all that the
        target's output depends on (GCN's normalisation takes the degrees of the full graph).  The
        subgraphs' outputs at the targets are compared with the model's output on the full graph:
        a model that looks further than ``num_hops`` gives an error instead of a wrong explanation.
        """
        check_inputs(model, x, edge_index, **kwargs)
        for name, value in kwargs.items():
            if value is not None and name not in ("edge_weight", "edge_attr"):
                raise ValueError(f"per_index=True takes edge_weight and edge_attr besides x and edge_index, "
                                 f"got {name}; explain with per_index=False")
        n = x.shape[0]
        index = torch.as_tensor(index, device=x.device)
        if index.is_floating_point() or index.dtype == torch.bool or index.dim() > 1:
            raise TypeError(f"index must be an int or a 1-D integer tensor of node indices, got "
                            f"{index.dtype} with shape {tuple(index.shape)}")
        index = index.long().view(-1)
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= n):
            raise ValueError(f"index must contain node indices 0..{n - 1}, got {int(index.min())}..{int(index.max())}")
        hops = self.num_hops if self.num_hops is not None else \
            builtins.sum(isinstance(m, MessagePassing) for m in model.modules())
        edge_index = edge_index.long()
        with torch.no_grad():
            expected = model(x, edge_index, **kwargs)
        if target is not None and target.numel() not in (n, index.numel()):
            raise ValueError(f"target has {target.numel()} entries: pass one per node ({n}) or one per index "
                             f"({index.numel()})")
        src, dst = edge_index
        perm = torch.argsort(dst, stable=True)
        counts = torch.bincount(dst, minlength=n)
        rowptr = torch.cumsum(counts, 0) - counts
        nodes, edges, offset = [], [], 0
        for chunk in index.split(self.chunk_size):
            keys, edge_b, edge_e = _k_hop_union(chunk, hops, src, perm, rowptr, counts, n)
            node_ids, graph = keys % n, keys // n
            sub_edges = torch.stack([torch.searchsorted(keys, edge_b * n + src[edge_e]),
                                     torch.searchsorted(keys, edge_b * n + dst[edge_e])])
            rows = torch.searchsorted(keys, torch.arange(chunk.numel(), device=x.device) * n + chunk)
            sub_target = None
            if target is not None:
                if target.numel() == n:
                    sub_target = target.view(n, *target.shape[1:])[node_ids]
                else:
                    sub_target = target.new_zeros(keys.numel(), *target.shape[1:])
                    sub_target[rows] = target[offset:offset + chunk.numel()]
            sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
            node_rel, edge_rel, out = self._relevance(
                model, x[node_ids], sub_edges, sub_target, rows,
                (node_ids, edge_index, kwargs.get("edge_weight"), n), checked=True, **sub_kwargs)
            want, got = expected[chunk].to(out.dtype), out[rows]
            tol = 1e-4 if out.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
            if not torch.allclose(got, want, rtol=tol, atol=tol * max(1.0, float(want.abs().max()) if want.numel() else 1.0)):
                raise ValueError(
                    f"per_index=True: the targets' {hops}-hop subgraphs do not reproduce the model's output "
                    f"(largest difference {float((got - want).abs().max()):.3g}): the model looks further than "
                    f"{hops} hops; pass num_hops= the number of message-passing steps of the model")
            nodes.append((graph + offset, node_ids, node_rel))
            edges.append((edge_b + offset, edge_e, edge_rel))
            offset += chunk.numel()
        k = index.numel()
        node_index = torch.cat([torch.stack([g, i]) for g, i, _ in nodes], 1) if nodes else \
            torch.zeros(2, 0, dtype=torch.long, device=x.device)
        node_values = torch.cat([r for _, _, r in nodes]) if nodes else x.new_zeros(0, x.shape[1])
        if self.explainer_config.node_mask_type == MaskType.object:
            node_values = node_values.sum(-1, keepdim=True)
        node_mask = node_values.new_zeros(n, node_values.shape[1]).index_add_(0, node_index[1], node_values)
        extra = {"node_relevance": torch.sparse_coo_tensor(node_index, node_values, (k, n, node_values.shape[1]),
                                                           is_coalesced=True, check_invariants=False)}
        edge_mask = None
        if self.explainer_config.edge_mask_type is not None:
            edge_index_k = torch.cat([torch.stack([g, e]) for g, e, _ in edges], 1) if edges else \
                torch.zeros(2, 0, dtype=torch.long, device=x.device)
            edge_values = torch.cat([r for _, _, r in edges]) if edges else x.new_zeros(0)
            edge_mask = edge_values.new_zeros(edge_index.shape[1]).index_add_(0, edge_index_k[1], edge_values)
            extra["edge_relevance"] = torch.sparse_coo_tensor(edge_index_k, edge_values, (k, edge_index.shape[1])).coalesce()
        if self.explainer_config.node_mask_type is None:
            node_mask = None
            del extra["node_relevance"]
        return Explanation(node_mask=node_mask, edge_mask=edge_mask, **extra)

    def _start(self, out: Tensor, target: Tensor, index) -> Tensor:
        """The relevance of the outputs: the explained value where explained, else 0."""
        out_d = out.detach()
        mode = self.model_config.mode
        if mode != ModelMode.regression:
            if not isinstance(target, Tensor) or target.is_floating_point() or target.is_complex():
                got = target.dtype if isinstance(target, Tensor) else type(target).__name__
                raise TypeError(f"target must be an integer tensor of class labels, got {got}")
            if target.numel() != out_d.shape[0] and not (index is not None and mode == ModelMode.multiclass_classification):
                raise ValueError(f"target has {target.numel()} entries but the model gives {out_d.shape[0]} output "
                                 f"row(s): pass one label per row")
            classes = out_d.shape[-1] if mode == ModelMode.multiclass_classification else 2
            if target.numel() and (int(target.min()) < 0 or int(target.max()) >= classes):
                allowed = "0 or 1 (binary_classification: the class to explain)" if classes == 2 and \
                    mode == ModelMode.binary_classification else f"0..{classes - 1} (one per output column)"
                raise ValueError(f"target must contain only {allowed}, got values "
                                 f"{int(target.min())}..{int(target.max())}")
        if mode == ModelMode.multiclass_classification:
            rel = torch.zeros_like(out_d)
            target = target.view(-1)
            rows = torch.arange(out_d.shape[0], device=out.device)
            if index is not None:
                rows = rows[index].view(-1)
                target = target[index].view(-1) if target.numel() == out_d.shape[0] else target
            rel[rows, target] = out_d[rows, target]
            return rel
        if mode == ModelMode.binary_classification:
            if out_d.shape[-1] != 1 and out_d.dim() > 1:
                raise ValueError(f"binary_classification expects one logit per row, got output shape {tuple(out_d.shape)}")
            sign = target.view(out_d.shape[0], *([1] * (out_d.dim() - 1))).to(out_d.dtype) * 2 - 1
            rel = sign * out_d
        else:
            rel = out_d.clone()
        if index is not None:
            keep = torch.zeros(out_d.shape[0], dtype=torch.bool, device=out.device)
            keep[index] = True
            rel = torch.where(keep.view(-1, *([1] * (out_d.dim() - 1))), rel, torch.zeros_like(rel))
        return rel


def _k_hop_union(targets: Tensor, hops: int, src: Tensor, perm: Tensor, rowptr: Tensor, counts: Tensor, n: int):
    """The k-hop subgraphs (upstream, as messages flow) of ``targets``, as one disjoint union.

    Returns ``(keys, edge_graph, edge_id)``: the sorted keys ``b * n + node`` of the nodes of
    subgraph ``b`` (the subgraph of ``targets[b]``), and for each edge of the union its subgraph and
    its id in the full graph: every edge into a node fewer than ``hops`` hops from the target.
    ``perm``/``rowptr``/``counts``: the edges sorted by receiver, where each receiver's start, how many.
    """
    frontier = torch.arange(targets.numel(), device=targets.device) * n + targets
    visited = frontier
    edge_graph, edge_id = [], []
    for _ in range(hops):
        node, graph = frontier % n, frontier // n
        c = counts[node]
        total = int(c.sum())
        if total == 0:
            break
        which = torch.repeat_interleave(torch.arange(frontier.numel(), device=targets.device), c)
        within = torch.arange(total, device=targets.device) - torch.repeat_interleave(torch.cumsum(c, 0) - c, c)
        e = perm[rowptr[node][which] + within]
        g = graph[which]
        edge_graph.append(g)
        edge_id.append(e)
        new = torch.unique(g * n + src[e])
        frontier = new[~torch.isin(new, visited)]
        visited = torch.cat([visited, frontier])
    empty = torch.zeros(0, dtype=torch.long, device=targets.device)
    return (torch.sort(visited).values, torch.cat(edge_graph) if edge_graph else empty,
            torch.cat(edge_id) if edge_id else empty)


class Explainer(PyGExplainer):
    """PyG's :class:`~torch_geometric.explain.Explainer`, with the inputs checked before its
    prediction pass and the model's training flag restored when the explanation fails.

    A drop-in replacement: ``from lrp_lib.explain import Explainer`` and use it as PyG's.  With an
    :class:`LRPExplainer` the inputs go through :func:`check_inputs` first, so a bad input gives an
    error that names it instead of one from inside PyG's message passing (or NaN masks).
    """

    def __call__(self, x, edge_index, *, target=None, index=None, **kwargs):
        if isinstance(self.algorithm, LRPExplainer):
            check_inputs(self.model, x, edge_index, **kwargs)
        training = self.model.training
        try:
            return super().__call__(x, edge_index, target=target, index=index, **kwargs)
        finally:
            self.model.train(training)
