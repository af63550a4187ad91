r"""LRP for any PyTorch Geometric model, as a ``torch_geometric.explain`` algorithm.

.. code-block:: python

    explainer = Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(data.x, data.edge_index, batch=data.batch)

How it works.  The model runs unchanged inside a :class:`~lrp_lib.explain.function_mode.RelevanceMode`,
a :class:`torch.overrides.TorchFunctionMode` that sends every torch function the model calls on
tensors depending on ``x`` (and on ``edge_attr``) to a relevance primitive
(:mod:`lrp_lib.explain.primitives`): linear maps get the rule that the
:class:`~lrp_lib.core.composites.Composite` chooses for their weight, sums and aggregations split
proportionally, max and min go to the winner, elementwise functions pass relevance unchanged,
attention weights are held constant (CP-LRP) and other products split uniformly (AttnLRP).  So
GCN, GraphSAGE, GIN, GAT, a residual ``x + conv(x)``, a model with batch norm, your own
subclass of a conv -- any model built from torch operations -- is explained through its own
code.  One backward from the explained output leaves the relevance of each node feature (and
of each ``edge_attr`` entry).  An operation without a rule that relevance reaches, or one that
ran outside the interception (a custom ``autograd.Function``), gives an
:class:`UnsupportedModelError` naming it, never a wrong explanation.

Edges.  A hook on each ``MessagePassing`` module (``register_message_forward_hook``) passes its
messages through :class:`~lrp_lib.explain.primitives.EdgeMessageRelevance`, which adds the relevance of
the messages of edge :math:`j \to i`, summed over features, to that edge: the edge mask is the
relevance carried by each edge's messages, summed over layers.  Self-loops that a layer adds
(GCN, GAT) are not edges of the input: their share stays with the node (a self-loop present in
the input gets its layer's loop messages).  The hooks are registered once per module and do
nothing outside an explanation running in the same thread.

Nothing is patched globally: the mode belongs to the calling thread, so explanations run from
several threads, and training in other threads, do not disturb each other.

The relevance starts from the explained output: the raw logit of the target class (multiclass),
:math:`\pm` the single logit of a binary model (:math:`+z` for target 1, :math:`-z` for target 0: the
log-odds of the target class), or the regression value.  For a bias-free model under the ``"z"``
composite the node relevance (plus the ``edge_attr`` relevance) sums to that value; otherwise the
explanation's ``bias_relevance`` says how much the biases and stabilisers kept.  The graphs of a
batch do not exchange messages, so one backward explains all of them, with the same masks as
one graph at a time.
"""
from __future__ import annotations

import builtins
import sys
import threading
import warnings
import weakref
from collections import Counter

import torch
from torch import Tensor, nn
from torch_geometric.explain import Explainer as PyGExplainer
from torch_geometric.explain import Explanation, HeteroExplanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import MaskType, ModelMode, ModelReturnType, ModelTaskLevel
from torch_geometric.nn import GCNConv, MessagePassing

from lrp_lib.core import stabilizer
from lrp_lib.core.composites import Composite, get_composite
from lrp_lib.explain.function_mode import RelevanceMode, UnsupportedModelError, check_relevance_graph
from lrp_lib.explain.masks import check_mask_kind, relevance_mask
from lrp_lib.explain.primitives import EdgeMessageRelevance
from lrp_lib.core.rules import Rule
from lrp_lib.core.validation import check_batch, check_edge_index, check_edge_values, check_finite, check_node_features

__all__ = ["LRPExplainer", "Explainer", "UnsupportedModelError", "LostRelevanceWarning", "check_inputs",
           "check_hetero_inputs", "relevance_mask"]


# ------------------------------------------------------------------ message hooks
_current = threading.local()       # the explanation running in this thread (its _EdgeRecorder)
_hooked: "weakref.WeakKeyDictionary[nn.Module, bool]" = weakref.WeakKeyDictionary()
_hook_lock = threading.Lock()


def _message_hook(module, inputs, out):
    recorder = getattr(_current, "recorder", None)
    if recorder is None:
        return None
    return recorder.messages(module, out)


def _propagate_hook(module, inputs):
    recorder = getattr(_current, "recorder", None)
    if recorder is not None:
        recorder.propagated[id(module)] += 1
        recorder.edges_of[id(module)] = inputs[0]  # the edge_index this layer passes messages along
    return None


def _ensure_hooks(model: nn.Module) -> None:
    """Register the message hooks on every MessagePassing module of ``model`` (once per module: a
    module that has them already -- also a ``copy.deepcopy`` of a hooked one, which copies its
    hooks -- gets no second set)."""
    with _hook_lock:
        for m in model.modules():
            if isinstance(m, MessagePassing) and m not in _hooked:
                if not any(h is _message_hook for h in m._message_forward_hooks.values()):
                    m.register_message_forward_hook(_message_hook)
                if not any(h is _propagate_hook for h in m._propagate_forward_pre_hooks.values()):
                    m.register_propagate_forward_pre_hook(_propagate_hook)
                _hooked[m] = True


class _EdgeRecorder:
    """The edge relevance of one explanation: which message of each layer is which input edge."""

    def __init__(self, mode: RelevanceMode, model: nn.Module, edge_index: Tensor, dtype):
        self.mode, self.edge_index = mode, edge_index
        self.record = torch.zeros(edge_index.shape[1], dtype=dtype, device=edge_index.device)
        self.names = {id(m): (n or type(m).__name__) for n, m in model.named_modules() if isinstance(m, MessagePassing)}
        self.propagated, self.messaged = Counter(), Counter()
        self.unaligned: dict[str, int] = {}
        self._ids: dict[int, tuple] = {}
        self.edges_of: dict[int, Tensor] = {}

    def edge_ids(self, edges) -> Tensor | None:
        """The input edge of each edge of ``edges`` (the edge_index a layer propagates along): the
        same edge (source, target), its k-th copy for the k-th copy; -1 for an edge that is not in
        the input (a self-loop that the layer added)."""
        if edges is self.edge_index:
            return torch.arange(edges.shape[1], device=edges.device)
        if not isinstance(edges, Tensor) or edges.dim() != 2 or edges.shape[0] != 2 or edges.is_sparse \
                or edges.is_floating_point():
            return None
        key = id(edges)
        if key not in self._ids:
            self._ids[key] = (edges, self._match(edges.long()))
        return self._ids[key][1]

    def _match(self, edges: Tensor) -> Tensor:
        ref = self.edge_index
        # the usual layout (PyG's add_self_loops / add_remaining_self_loops): the input's edges that
        # are not loops, in order, then one loop per node; checked exactly, in O(E)
        loop = ref[0] == ref[1]
        kept = ref[:, ~loop]
        k = edges.shape[1] - kept.shape[1]
        if k >= 0 and torch.equal(edges[:, :kept.shape[1]], kept):
            nodes = torch.arange(k, device=edges.device)
            if torch.equal(edges[0, kept.shape[1]:], nodes) and torch.equal(edges[1, kept.shape[1]:], nodes) and \
                    (not bool(loop.any()) or int(ref[0, loop].max()) < k):
                ids = torch.arange(ref.shape[1], device=ref.device)
                loops = torch.full((k,), -1, dtype=torch.long, device=ref.device)
                loops[ref[0, loop]] = ids[loop]
                return torch.cat([ids[~loop], loops])
        n = int(max(int(ref.max()) if ref.numel() else 0, int(edges.max()) if edges.numel() else 0)) + 1
        m = max(ref.shape[1], edges.shape[1]) + 1

        def ranked(ei):  # key (source, target) and the rank of each copy of a repeated edge
            k = ei[0] * n + ei[1]
            order = torch.argsort(k, stable=True)
            sk = k[order]
            rank = torch.arange(k.numel(), device=k.device) - torch.searchsorted(sk, sk)
            combined = torch.empty_like(k)
            combined[order] = sk * m + rank
            return combined
        ref_keys, keys = ranked(ref), ranked(edges)
        order = torch.argsort(ref_keys)
        sorted_keys = ref_keys[order]
        pos = torch.searchsorted(sorted_keys, keys).clamp(max=max(sorted_keys.numel() - 1, 0))
        if sorted_keys.numel() == 0:
            return torch.full((edges.shape[1],), -1, dtype=torch.long, device=edges.device)
        found = sorted_keys[pos] == keys
        return torch.where(found, order[pos], torch.full_like(pos, -1))

    def messages(self, module, out):
        if id(module) not in self.names or not isinstance(out, Tensor) or not self.mode.is_marked(out):
            return None
        self.messaged[id(module)] += 1
        dim = module.node_dim if module.node_dim >= 0 else out.dim() + module.node_dim
        ids = self.edge_ids(self.edges_of.get(id(module)))
        if ids is None or ids.numel() != out.shape[dim]:
            self.unaligned[self.names[id(module)]] = out.shape[dim]
            return None
        return self.mode.mark(EdgeMessageRelevance.apply(out, ids, self.record, dim))

    def check(self) -> None:
        silent = [self.names[k] for k in self.propagated if k in self.names and not self.messaged[k]]
        problems = [f"'{n}' passes {c} messages for the {self.edge_index.shape[1]} input edges" for n, c in
                    self.unaligned.items()]
        problems += [f"'{n}' aggregates without computing messages (a fused sparse adjacency)" for n in silent]
        if problems:
            raise UnsupportedModelError(
                f"edge relevance needs each message of a layer to belong to an input edge, but {'; '.join(problems)}. "
                f"Pass edge_index as a plain (2, E) tensor, or explain with edge_mask_type=None")


class _HeteroEdgeRecorder(_EdgeRecorder):
    """Edge relevance of a heterogeneous graph: a layer's messages belong to the edge type whose
    ``edge_index`` (the very tensor of the input dict) it propagates along."""

    def __init__(self, mode: RelevanceMode, model: nn.Module, edge_index_dict: dict, dtype):
        self.parts = {k: _EdgeRecorder(mode, model, v, dtype) for k, v in edge_index_dict.items()}
        self.mode = mode
        self.names = {id(m): (n or type(m).__name__) for n, m in model.named_modules() if isinstance(m, MessagePassing)}
        self.propagated, self.messaged = Counter(), Counter()
        self.unaligned: dict[str, int] = {}
        self.edges_of: dict[int, Tensor] = {}
        self.edge_index = None

    def messages(self, module, out):
        if id(module) not in self.names or not isinstance(out, Tensor) or not self.mode.is_marked(out):
            return None
        self.messaged[id(module)] += 1
        dim = module.node_dim if module.node_dim >= 0 else out.dim() + module.node_dim
        edges = self.edges_of.get(id(module))
        for part in self.parts.values():
            if edges is part.edge_index and edges.shape[1] == out.shape[dim]:
                ids = torch.arange(edges.shape[1], device=edges.device)
                return self.mode.mark(EdgeMessageRelevance.apply(out, ids, part.record, dim))
        self.unaligned[self.names[id(module)]] = out.shape[dim]
        return None

    def check(self) -> None:
        silent = [self.names[k] for k in self.propagated if k in self.names and not self.messaged[k]]
        problems = [f"'{n}' passes {c} messages along an edge_index that is not one of the input's" for n, c in
                    self.unaligned.items()]
        problems += [f"'{n}' aggregates without computing messages (a fused sparse adjacency)" for n in silent]
        if problems:
            raise UnsupportedModelError(
                f"edge relevance of a heterogeneous graph needs each layer to pass messages along one of the "
                f"input's edge_index tensors, but {'; '.join(problems)}. Explain with edge_mask_type=None")


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
            _check_gcn_degree(model, x.shape[0], edge_index, value)
        elif name == "edge_attr":
            check_edge_values(value, edge_index.shape[1], "edge_attr")
        elif name == "edge_label_index":
            check_edge_index(value, x.shape[0], "edge_label_index")
        elif isinstance(value, Tensor):
            check_finite(value, name)


def check_hetero_inputs(x: dict, edge_index: dict) -> None:
    """:func:`check_inputs` for a heterogeneous graph: ``x`` a dict of node type -> features,
    ``edge_index`` a dict of (source type, relation, target type) -> (2, E) tensor."""
    if not isinstance(edge_index, dict):
        raise TypeError(f"x is a dict (a heterogeneous graph), so edge_index must be a dict of edge type -> "
                        f"(2, E) tensor, got {type(edge_index).__name__}")
    for node_type, value in x.items():
        check_node_features(value, f"x[{node_type!r}]")
    for edge_type, value in edge_index.items():
        if not isinstance(edge_type, tuple) or len(edge_type) != 3 or edge_type[0] not in x or edge_type[2] not in x:
            raise ValueError(f"edge_index has the key {edge_type!r}: edge types must be (source type, relation, "
                             f"target type) with both node types in x ({sorted(x)})")
        check_edge_index(value, max(x[edge_type[0]].shape[0], x[edge_type[2]].shape[0]), f"edge_index[{edge_type!r}]")


def _check_gcn_degree(model: nn.Module, n: int, edge_index: Tensor, edge_weight: Tensor) -> None:
    """GCN's normalisation :math:`\\hat d^{-1/2}` is NaN where edge weights make a node's weighted
    degree (self-loop included) negative: say so, naming the node, instead of a NaN relevance."""
    for m in model.modules():
        if isinstance(m, GCNConv) and m.normalize:
            src, dst = edge_index.long()
            loop = src == dst
            w = edge_weight.detach().to(torch.float64)
            deg = torch.zeros(n, dtype=torch.float64, device=w.device).index_add_(0, dst[~loop], w[~loop])
            if m.add_self_loops:
                fill = torch.full((n,), 2.0 if m.improved else 1.0, dtype=torch.float64, device=w.device)
                fill[src[loop]] = w[loop]
                deg = deg + fill
            else:
                deg = deg.index_add_(0, dst[loop], w[loop])
            if bool((deg < 0).any()):
                node = int((deg < 0).nonzero()[0, 0])
                raise ValueError(
                    f"GCNConv: edge_weight gives node {node} a negative weighted degree ({float(deg[node]):.4g}), and "
                    f"GCN's normalisation deg^-1/2 is NaN there: PyG's own GCNConv output is NaN too. Use non-negative "
                    f"edge_weight (or weights whose sum per receiving node, self-loop included, is >= 0)")
            return


def _checked_by_explainer(x, edge_index) -> bool:
    """Whether :class:`Explainer` checked these very tensors just before calling the algorithm."""
    done = getattr(_current, "checked", None)
    return done is not None and done[0] is x and done[1] is edge_index


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


class LostRelevanceWarning(stabilizer.LostRelevanceWarning):
    """Part of the explained output's relevance did not reach the inputs (a detach in the model)."""



# ------------------------------------------------------------------ explainer
#: LRPExplainer's defaults per task level ("node" also serves link prediction), chosen by the benchmark
#: of chapter 9 (``benchmarks/bench_quality.py``) with a rule declared before it ran: among every
#: (composite x explained x mask), the best mean rank over that level's tasks, ties to the cheaper.
DEFAULTS = {
    "node": {"rule": "zplus", "explained": "logit", "mask": "abs"},
    "graph": {"rule": "zplus", "explained": "logit", "mask": "abs"},
}


class LRPExplainer(ExplainerAlgorithm):
    r"""Layer-wise Relevance Propagation for PyG models (see the module docstring).

    Args:
        rule: the rule of every weight, or a named composite: ``"zplus"`` (the default, see
            below), ``"epsilon"`` (:math:`\epsilon = 10^{-6}`: on a bias-free ReLU network this is
            Gradient :math:`\times` Input), ``"z"`` (:math:`\epsilon = 0`: exact conservation),
            ``"gamma"``, the depth schedules ``"gamma_sgnn"``, ``"gamma_dig"``, ``"layered"``
            (:mod:`lrp_lib.core.composites`), or any :class:`lrp_lib.core.rules.Rule` (``Epsilon(0.1)``).
        composite: a :class:`lrp_lib.core.composites.Composite` instead of ``rule``: rules per module type
            or name, the stabiliser of the maps without weights, and the attention rule
            (``"cp"`` or ``"uniform"``).
        explained: what a multiclass model's relevance starts from: ``"logit"`` (the default), the raw
            logit :math:`z_c` of the target class; ``"contrast"``, :math:`z_c - \frac{1}{K-1}
            \sum_{k \ne c} z_k`, the evidence for the class against the others (for two classes, the
            log-odds, which is what a one-logit binary model explains either way).
        mask: what ``node_mask`` and ``edge_mask`` hold (:func:`lrp_lib.explain.masks.relevance_mask`):
            ``"abs"`` (the default), :math:`|R| / \max |R|`, an importance in :math:`[0, 1]` that
            PyG's plots, thresholds and metrics read as they read GNNExplainer's masks;
            ``"positive"``, :math:`\max(R, 0) / \max R`; ``"relevance"``, the signed relevance
            itself.  The signed relevance is always on the explanation as ``node_relevance`` and
            ``edge_relevance``.
        per_index: for node-level tasks with ``index`` a tensor of nodes: explain each node on its
            own (default False: one explanation of the sum of their outputs, as PyG's explainers).
            The explanation then also holds ``node_relevance_per_index``, a sparse
            (len(index), N, F) tensor (F = 1 for ``node_mask_type="object"``) whose slice ``i`` is
            the node relevance of ``index[i]`` alone, and ``edge_relevance_per_index``, sparse
            (len(index), E); ``node_relevance`` and ``edge_relevance`` are their sums over the
            targets.  The targets are explained
            ``chunk_size`` at a time on the disjoint union of their ``num_hops``-hop subgraphs
            (one forward and one backward per chunk); ``num_hops`` defaults to the number of
            message-passing modules of the model plus one (a layer that normalises by degree, as
            GCN, needs the edges into the outermost nodes), and an error says if the subgraphs do
            not reproduce the model's output at the targets.

    The defaults (:data:`DEFAULTS`): the z+ rule on every weight, the logit of the target class,
    and the mask :math:`|R| / \max |R|`.  They were chosen by the benchmark of chapter 9
    (``benchmarks/bench_quality.py``: 11 tasks with ground truth, 5 seeds, the protocols of the
    published numbers) with a rule fixed before it ran: among 6 composites x 2 explained
    quantities x 3 masks, the configuration of best mean rank among all methods (LRP's and 11
    others), ties to the cheaper.  The same configuration wins on the node-level tasks, on the
    graph-level tasks and on all of them.  z+ sends relevance along the positive evidence only
    and so differs from Gradient :math:`\times` Input (which the epsilon rule equals on ReLU
    networks); the absolute value keeps the evidence against the class, which on the motif tasks
    is part of the motif.

    Link prediction (``task_level="edge"``): the model takes ``edge_label_index`` (as PyG's
    ``link_pred`` examples) and gives one score per column; ``index`` selects the explained columns,
    whose scores (the log-odds of the target class, for a binary classifier) are conserved onto the
    node features and the edges of ``edge_index``.  A dot-product decoder is a product of the two
    end points' embeddings: AttnLRP's uniform rule gives each end point half.

    Probability heads: a classifier whose ``forward`` ends in ``softmax``, ``log_softmax`` or
    ``sigmoid`` (``return_type="probs"``/``"log_probs"``, or ``"raw"``) is explained from the input of
    that function, its logits, as the LRP literature does (the probabilities couple the classes and
    saturate); the explanation then says so in ``explained_output``.  A model declared with
    ``"probs"``/``"log_probs"`` whose output is not such a function's is refused.

    Relevance: ``node_relevance`` is the relevance of each input feature (N x F) for
    ``node_mask_type="attributes"``, its sum over the nodes (1 x F) for ``"common_attributes"``,
    its sum per node (N x 1) otherwise; ``edge_relevance`` (with an
    edge mask) the relevance carried by each edge's messages over all layers (E).  Relevance is
    signed and not normalised; ``node_mask`` and ``edge_mask`` hold the mask that ``mask`` makes of
    it.  The explanation also holds ``bias_relevance`` (what the biases and stabilisers kept, a number),
    ``relevance_residual`` (the explained value minus the relevance of the inputs and of the biases:
    zero up to rounding unless relevance was lost at a detach or a zero output) and, when the model
    gets a floating point ``edge_attr``, ``edge_attr_relevance`` (E x D).

    The inputs are checked (:func:`check_inputs`) before anything runs.  PyG's ``Explainer`` runs
    a prediction pass before this algorithm: use :class:`Explainer` (or call :func:`check_inputs`
    first) to have the inputs checked before that pass too.  If the explanation fails, the model's
    training flag is restored (PyG's ``Explainer`` would leave it in eval mode).  Relevance that a
    ``.detach()`` inside the model keeps from the inputs is reported, with its amount, by a
    :class:`LostRelevanceWarning`.
    """

    def __init__(self, rule: Rule | str | None = None, per_index: bool = False, num_hops: int | None = None,
                 chunk_size: int = 256, composite: Composite | None = None, explained: str | None = None,
                 mask: str | None = None):
        super().__init__()
        self._mask = None if mask is None else check_mask_kind(mask)
        if explained not in (None, "logit", "contrast"):
            raise ValueError(f"explained must be 'logit' or 'contrast', got {explained!r}")
        self._explained = explained
        if composite is not None and not isinstance(composite, Composite):
            raise TypeError(f"composite must be a lrp_lib.core.composites.Composite, got {type(composite).__name__}")
        if composite is not None and rule is not None:
            raise ValueError("pass either rule or composite, not both (a composite holds the rules)")
        self._composite = composite if composite is not None else (None if rule is None else get_composite(rule))
        self._default_composites: dict[str, Composite] = {}
        if not isinstance(per_index, bool):
            raise TypeError(f"per_index must be True or False, got {per_index!r}")
        for name, value, least in (("num_hops", num_hops, 0), ("chunk_size", chunk_size, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if chunk_size is None:
            raise ValueError("chunk_size must be an int >= 1, got None")
        self.per_index, self.num_hops, self.chunk_size = per_index, num_hops, chunk_size

    # ------------------------------------------------------------ the settings and their defaults
    @property
    def defaults(self) -> dict:
        """The defaults for this explainer's task level (:data:`DEFAULTS`; ``"node"`` until connected)."""
        try:
            level = self.model_config.task_level
        except (ValueError, AttributeError):
            level = None
        return DEFAULTS["graph" if level == ModelTaskLevel.graph else "node"]

    @property
    def composite(self) -> Composite:
        """The composite in use: the one given (or made from ``rule``), else the default's."""
        if self._composite is not None:
            return self._composite
        name = self.defaults["rule"]
        if name not in self._default_composites:
            self._default_composites[name] = get_composite(name)
        return self._default_composites[name]

    @property
    def rule(self) -> Rule:
        """The rule of the weights that the composite names nothing else for."""
        return self.composite.linear

    @property
    def explained(self) -> str:
        """What a multiclass model's relevance starts from: ``"logit"`` or ``"contrast"``."""
        return self._explained if self._explained is not None else self.defaults["explained"]

    @property
    def mask(self) -> str:
        """What ``node_mask`` and ``edge_mask`` hold: ``"abs"``, ``"positive"`` or ``"relevance"``."""
        return self._mask if self._mask is not None else self.defaults["mask"]

    def supports(self) -> bool:
        cfg, model_cfg = self.explainer_config, self.model_config
        if cfg.node_mask_type not in (None, MaskType.object, MaskType.attributes, MaskType.common_attributes):
            raise ValueError(f"LRPExplainer supports node_mask_type None, 'object', 'attributes' or "
                             f"'common_attributes', got {cfg.node_mask_type.value!r}")
        if cfg.edge_mask_type not in (None, MaskType.object):
            raise ValueError(f"LRPExplainer supports edge_mask_type None or 'object', got {cfg.edge_mask_type.value!r}")
        if model_cfg.task_level == ModelTaskLevel.edge and self.per_index:
            raise ValueError("per_index=True explains node-level tasks; for task_level='edge' use per_index=False "
                             "(one explanation per call, index selecting the explained edges of edge_label_index)")
        return True

    def forward(self, model: nn.Module, x: Tensor, edge_index: Tensor, *, target: Tensor,
                index=None, **kwargs) -> Explanation:
        training = _explainer_training_flag(model)
        try:
            # the relevance is a backward: it runs with autograd on, also when the caller evaluates under
            # torch.no_grad() or torch.inference_mode() (whose tensors cannot be saved for backward: copied)
            with torch.inference_mode(False), torch.enable_grad():
                x, edge_index, target, index = (_usable(t) for t in (x, edge_index, target, index))
                kwargs = {k: _usable(v) for k, v in kwargs.items()}
                return self._explain(model, x, edge_index, target=target, index=index, **kwargs)
        except BaseException:
            if training is not None:
                model.train(training)
            raise

    def _explain(self, model, x, edge_index, *, target, index=None, **kwargs) -> Explanation:
        if isinstance(x, dict):
            return self._explain_hetero(model, x, edge_index, target=target, index=index, **kwargs)
        if self.per_index and index is not None and self.model_config.task_level == ModelTaskLevel.node:
            return self._explain_each(model, x, edge_index, target=target, index=index, **kwargs)
        node_rel, edge_rel, _, extra = self._relevance(model, x, edge_index, target, index, **kwargs)
        return self._explanation(node_rel, edge_rel, **extra)

    def _explanation(self, node_rel: Tensor, edge_rel: Tensor | None, **extra) -> Explanation:
        """The explanation of node relevance (N x F) and edge relevance: signed relevance and masks."""
        return self._masked(_per_mask_type(node_rel, self.explainer_config.node_mask_type), edge_rel, **extra)

    def _masked(self, node_rel: Tensor, edge_rel: Tensor | None, **extra) -> Explanation:
        """node_relevance / edge_relevance (signed) and the node / edge masks that ``mask`` makes of them."""
        node_mask = None if self.explainer_config.node_mask_type is None else relevance_mask(node_rel, self.mask)
        if self.explainer_config.edge_mask_type is None:
            edge_rel = None
        extra = {"node_relevance": node_rel.detach(), **extra}
        if edge_rel is not None:
            extra["edge_relevance"] = edge_rel.detach()
        return Explanation(node_mask=node_mask, edge_mask=relevance_mask(edge_rel, self.mask), **extra)

    def _propagate(self, model, mode: RelevanceMode, recorder, inputs: list, call, target, index):
        """The one forward (``call()``, inside ``mode``, with the message hooks recording into
        ``recorder``) and the one backward from the explained output: (output, start relevance,
        relevance of each of ``inputs``).  Refuses what the relevance cannot pass through."""
        if recorder is not None:
            _ensure_hooks(model)
        previous = getattr(_current, "recorder", None)
        _current.recorder = recorder
        try:
            with torch.enable_grad(), mode:
                for t in inputs:
                    mode.mark(t)
                out = call()
        finally:
            _current.recorder = previous
        if not isinstance(out, Tensor) or not mode.is_marked(out):
            raise ValueError(
                "the model's output does not depend on x through autograd: model.forward detaches it "
                "(.detach(), torch.no_grad(), .item(), numpy) or does not use x; relevance can only be "
                "propagated through the model's autograd graph, so remove the detach")
        explained = self._logits(mode, out)
        mode.explained_head = mode.head_of(out)[0] if explained is not out else None
        check_relevance_graph(explained, inputs)
        if recorder is not None:
            recorder.check()
        start = self._start(explained, target, index)
        grads = torch.autograd.grad(explained, inputs, start, allow_unused=True)
        blocked = {k: v for k, v in mode.tally.read(mode.tally.blocked).items() if v != 0}
        if blocked:
            raise UnsupportedModelError(
                "relevance reached operations that LRP has no rule for: " + "; ".join(
                    f"{k} (relevance of magnitude {v:.4g})" for k, v in blocked.items()) +
                ". Replace them with supported torch operations, or explain with another method")
        return out, start, grads

    def _logits(self, mode: RelevanceMode, out: Tensor) -> Tensor:
        """What the relevance starts from: ``out``, or the logits of a classifier whose output is a
        final softmax, log_softmax or sigmoid (the LRP literature explains the logit, before the
        probabilities couple the classes)."""
        head = mode.head_of(out)
        classifier = self.model_config.mode != ModelMode.regression
        if head is not None and (classifier or head[0] != "sigmoid"):
            return head[1]
        if self.model_config.return_type != ModelReturnType.raw:
            raise ValueError(
                f"return_type={self.model_config.return_type.value!r}: LRP explains the logits before the "
                f"probabilities, but the model's output is not computed by a final softmax, log_softmax or "
                f"sigmoid of them (its last operation is something else); return the logits and use "
                f"return_type='raw'")
        return out

    def _relevance(self, model, x, edge_index, target, index, checked=False, **kwargs):
        """(node relevance, edge relevance, the model's output, extras): one forward, one backward."""
        if not checked and not _checked_by_explainer(x, edge_index):
            check_inputs(model, x, edge_index, **kwargs)
        edge_index = edge_index.long()  # PyG accepts int32; the edge ids index with int64
        leaf = x.detach().clone().requires_grad_(True)
        inputs = [leaf]
        attr = kwargs.get("edge_attr")
        if isinstance(attr, Tensor) and attr.is_floating_point():
            kwargs = {**kwargs, "edge_attr": attr.detach().clone().requires_grad_(True)}
            inputs.append(kwargs["edge_attr"])
        mode = RelevanceMode(self.composite, model)
        recorder = _EdgeRecorder(mode, model, edge_index, x.dtype) \
            if self.explainer_config.edge_mask_type is not None else None
        out, start, grads = self._propagate(model, mode, recorder, inputs, lambda: model(leaf, edge_index, **kwargs),
                                            target, index)
        node_rel = grads[0] if grads[0] is not None else torch.zeros_like(leaf)
        if not bool(torch.isfinite(node_rel).all()):
            raise ValueError("the relevance is NaN or Inf: the model's weights (or buffers, such as a batch norm's "
                             "running statistics) contain NaN or Inf values, or its output is not finite; check "
                             "them with torch.isfinite")
        attr_rel = None
        if len(inputs) > 1:
            attr_rel = grads[1] if grads[1] is not None else torch.zeros_like(inputs[1])
        absorbed = mode.tally.total(mode.tally.absorbed)
        explained = float(start.sum())
        reached = float(node_rel.sum()) + (float(attr_rel.sum()) if attr_rel is not None else 0.0)
        lost = explained - reached - absorbed
        scale = max(1.0, float(start.abs().sum()))
        if abs(lost) > (1e-6 if x.dtype == torch.float64 else 1e-3) * scale:
            share = f" ({100 * lost / explained:.1f} % of the explained {explained:.4g})" if explained else ""
            where = (f"model.forward detaches tensors ({', '.join(sorted(mode.detached))}) or joins constants"
                     if mode.detached else "relevance reached constants joined to the computation (torch.cat, "
                                            "indexing) or outputs equal to zero")
            warnings.warn(
                f"relevance {lost:.4g}{share} did not reach x: {where}; the explanation covers only the rest. "
                f"Remove the detach to explain the whole output", LostRelevanceWarning, stacklevel=4)
        extra = {"bias_relevance": torch.tensor(absorbed, dtype=x.dtype),
                 "relevance_residual": torch.tensor(lost, dtype=x.dtype)}
        if mode.explained_head is not None:
            extra["explained_output"] = f"the input of the model's final {mode.explained_head}"
        if attr_rel is not None:
            extra["edge_attr_relevance"] = attr_rel
        return node_rel, recorder.record if recorder is not None else None, out.detach(), extra

    def _explain_hetero(self, model, x: dict, edge_index: dict, *, target, index=None, **kwargs):
        """A heterogeneous graph (``x`` and ``edge_index`` dicts, as ``to_hetero`` and ``HeteroConv``
        models take them): one forward, one backward; a :class:`HeteroExplanation` with a node mask
        per node type and an edge mask per edge type."""
        if self.per_index:
            raise ValueError("per_index=True explains homogeneous graphs only; use per_index=False for "
                             "a heterogeneous graph")
        check_hetero_inputs(x, edge_index)
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()}
        inputs = list(leaves.values())
        mode = RelevanceMode(self.composite, model)
        recorder = _HeteroEdgeRecorder(mode, model, edge_index, next(iter(x.values())).dtype) \
            if self.explainer_config.edge_mask_type is not None else None
        out, start, grads = self._propagate(model, mode, recorder, inputs, lambda: model(leaves, edge_index, **kwargs),
                                            target, index)
        node_rel = {k: g if g is not None else torch.zeros_like(leaves[k]) for k, g in zip(leaves, grads)}
        absorbed = mode.tally.total(mode.tally.absorbed)
        explained = float(start.sum())
        lost = explained - sum(float(r.sum()) for r in node_rel.values()) - absorbed
        explanation = HeteroExplanation()
        node_type = self.explainer_config.node_mask_type
        node_rel = {k: _per_mask_type(r, node_type).detach() for k, r in node_rel.items()}
        explanation.set_value_dict("node_relevance", node_rel)
        if node_type is not None:  # one normalisation over all node types (and one over all edge types)
            explanation.set_value_dict("node_mask", relevance_mask(node_rel, self.mask))
        if recorder is not None:
            edge_rel = {k: part.record.detach() for k, part in recorder.parts.items()}
            explanation.set_value_dict("edge_relevance", edge_rel)
            explanation.set_value_dict("edge_mask", relevance_mask(edge_rel, self.mask))
        dtype = start.dtype
        if mode.explained_head is not None:
            explanation.explained_output = f"the input of the model's final {mode.explained_head}"
        explanation.bias_relevance = torch.tensor(absorbed, dtype=dtype)
        explanation.relevance_residual = torch.tensor(lost, dtype=dtype)
        return explanation

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
            keys, edge_b, edge_e, border_b, border_e = _k_hop_union(chunk, hops, src, perm, rowptr, counts, n)
            node_ids, graph = keys % n, keys // n
            # the edges into the outermost nodes: from inside the subgraph they are kept; from outside,
            # their sender becomes one zero-feature stand-in node per subgraph, so that every node keeps
            # its in-degree (GCN normalises messages by the sender's degree); what the stand-ins send
            # reaches only the outermost nodes' later layers, which the targets do not depend on
            inner = torch.searchsorted(keys, border_b * n + src[border_e]).clamp(max=max(keys.numel() - 1, 0))
            inside = keys[inner] == border_b * n + src[border_e] if keys.numel() else torch.zeros_like(border_b, dtype=torch.bool)
            stand_in = keys.numel() + border_b
            edge_b = torch.cat([edge_b, border_b])
            edge_e = torch.cat([edge_e, border_e])
            senders = torch.cat([torch.searchsorted(keys, edge_b[:edge_b.numel() - border_b.numel()] * n +
                                                    src[edge_e[:edge_e.numel() - border_e.numel()]]),
                                 torch.where(inside, inner, stand_in)])
            sub_edges = torch.stack([senders, torch.searchsorted(keys, edge_b * n + dst[edge_e])])
            real = torch.cat([torch.ones(edge_b.numel() - border_b.numel(), dtype=torch.bool, device=x.device), inside])
            rows = torch.searchsorted(keys, torch.arange(chunk.numel(), device=x.device) * n + chunk)
            sub_target = None
            if target is not None:
                if target.numel() == n:
                    sub_target = target.view(n, *target.shape[1:])[node_ids]
                else:
                    sub_target = target.new_zeros(keys.numel(), *target.shape[1:])
                    sub_target[rows] = target[offset:offset + chunk.numel()]
            sub_kwargs = {k: v[edge_e] for k, v in kwargs.items() if v is not None}
            sub_x = torch.cat([x[node_ids], x.new_zeros(chunk.numel(), *x.shape[1:])])
            if sub_target is not None:
                sub_target = torch.cat([sub_target, sub_target.new_zeros(chunk.numel(), *sub_target.shape[1:])])
            node_rel, edge_rel, out, _ = self._relevance(
                model, sub_x, sub_edges, sub_target, rows, checked=True, **sub_kwargs)
            node_rel = node_rel[:keys.numel()]
            if edge_rel is not None:
                edge_rel = edge_rel[real]
            edge_b, edge_e = edge_b[real], edge_e[real]
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
        if self.explainer_config.node_mask_type not in (MaskType.attributes, MaskType.common_attributes):
            node_values = node_values.sum(-1, keepdim=True)
        node_values = node_values.detach()
        node_rel = node_values.new_zeros(n, node_values.shape[1]).index_add_(0, node_index[1], node_values)
        if self.explainer_config.node_mask_type == MaskType.common_attributes:
            node_rel = node_rel.sum(0, keepdim=True)
        extra = {"node_relevance_per_index": torch.sparse_coo_tensor(
            node_index, node_values, (k, n, node_values.shape[1]), is_coalesced=True, check_invariants=False)}
        edge_rel = None
        if self.explainer_config.edge_mask_type is not None:
            edge_index_k = torch.cat([torch.stack([g, e]) for g, e, _ in edges], 1) if edges else \
                torch.zeros(2, 0, dtype=torch.long, device=x.device)
            edge_values = (torch.cat([r for _, _, r in edges]) if edges else x.new_zeros(0)).detach()
            edge_rel = edge_values.new_zeros(edge_index.shape[1]).index_add_(0, edge_index_k[1], edge_values)
            extra["edge_relevance_per_index"] = torch.sparse_coo_tensor(
                edge_index_k, edge_values, (k, edge_index.shape[1])).coalesce()
        return self._masked(node_rel, edge_rel, **extra)

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
            if self.explained == "contrast" and out_d.shape[-1] > 1:
                # z_c - mean_{k != c} z_k: the epsilon rule of that (bias-free) linear map of the logits
                k = out_d.shape[-1]
                w = torch.full((rows.numel(), k), -1.0 / (k - 1), dtype=out_d.dtype, device=out.device)
                w[torch.arange(rows.numel(), device=out.device), target] = 1.0
                rel[rows] = out_d[rows] * w
            else:
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


def _per_mask_type(node_rel: Tensor, node_type) -> Tensor:
    """Relevance per feature (N x F) as the node mask type reads it: ``attributes`` N x F,
    ``common_attributes`` summed over the nodes (1 x F), ``object`` (or no node mask) summed per node (N x 1)."""
    if node_type == MaskType.attributes:
        return node_rel
    if node_type == MaskType.common_attributes:
        return node_rel.sum(0, keepdim=True)
    return node_rel.sum(-1, keepdim=True)


def _usable(t):
    """``t`` with every inference-mode tensor in it (a tensor or a dict of them) copied to a normal one."""
    if isinstance(t, Tensor):
        return t.clone() if t.is_inference() else t
    if isinstance(t, dict):
        return {k: _usable(v) for k, v in t.items()}
    return t


def _k_hop_union(targets: Tensor, hops: int, src: Tensor, perm: Tensor, rowptr: Tensor, counts: Tensor, n: int):
    """The k-hop subgraphs (upstream, as messages flow) of ``targets``, as one disjoint union.

    Returns ``(keys, edge_graph, edge_id, border_graph, border_id)``: the sorted keys ``b * n + node``
    of the nodes of subgraph ``b`` (the subgraph of ``targets[b]``), for each edge of the union its
    subgraph and its id in the full graph (every edge into a node fewer than ``hops`` hops from the
    target), and the same for the edges into the nodes exactly ``hops`` hops away (the border).
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
    border_graph, border_id = empty, empty
    if frontier.numel():
        node, graph = frontier % n, frontier // n
        c = counts[node]
        total = int(c.sum())
        if total:
            which = torch.repeat_interleave(torch.arange(frontier.numel(), device=targets.device), c)
            within = torch.arange(total, device=targets.device) - torch.repeat_interleave(torch.cumsum(c, 0) - c, c)
            border_id = perm[rowptr[node][which] + within]
            border_graph = graph[which]
    return (torch.sort(visited).values, torch.cat(edge_graph) if edge_graph else empty,
            torch.cat(edge_id) if edge_id else empty, border_graph, border_id)


class Explainer(PyGExplainer):
    """PyG's :class:`~torch_geometric.explain.Explainer`, with the inputs checked before its
    prediction pass and the model's training flag restored when the explanation fails.

    A drop-in replacement: ``from lrp_lib.explain.explainer import Explainer`` and use it as PyG's.  With an
    :class:`LRPExplainer` the inputs go through :func:`check_inputs` first, so a bad input gives an
    error that names it instead of one from inside PyG's message passing (or NaN masks).
    """

    def __call__(self, x, edge_index, *, target=None, index=None, **kwargs):
        checked = isinstance(self.algorithm, LRPExplainer) and not isinstance(x, dict)
        if isinstance(self.algorithm, LRPExplainer) and isinstance(x, dict):
            check_hetero_inputs(x, edge_index)
        if checked:
            check_inputs(self.model, x, edge_index, **kwargs)
        training = self.model.training
        previous = getattr(_current, "checked", None)
        _current.checked = (x, edge_index) if checked else None  # the algorithm need not check them again
        try:
            return super().__call__(x, edge_index, target=target, index=index, **kwargs)
        finally:
            _current.checked = previous
            self.model.train(training)
