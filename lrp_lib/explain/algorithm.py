r"""LRP for any PyTorch Geometric model, as a ``torch_geometric.explain`` algorithm: :class:`LRPExplainer`.  One
explanation is :func:`~lrp_lib.explain.relevance_pass.relevance`; ``per_index=True`` runs it per chunk of targets
(:mod:`lrp_lib.explain.subgraphs`), heterogeneous graphs go through :mod:`lrp_lib.explain.hetero`.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.explain import Explanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import MaskType, ModelTaskLevel

from lrp_lib.core.composites import Composite, get_composite
from lrp_lib.core.rules import Rule
from lrp_lib.core.validation import check_batch, is_adjacency
from lrp_lib.explain.accounting import batch_row_groups
from lrp_lib.explain.capture.cache import CaptureCache
from lrp_lib.explain.hetero import explain_hetero
from lrp_lib.explain.inputs import (check_inputs, checked_by_explainer, explainer_training_flag, uncompiled, usable,
                                   warn_training)
from lrp_lib.explain.subgraphs.layer_pruning import current_plan
from lrp_lib.explain.mode.edges import adjacency_edges
from lrp_lib.explain.masks import check_mask_kind, per_mask_type, relevance_mask
from lrp_lib.explain.one_pass import pending_target
from lrp_lib.explain.relevance_pass import relevance
from lrp_lib.explain.subgraphs import explain_per_index
from lrp_lib.explain.targets import check_graph_rows

__all__ = ["LRPExplainer", "DEFAULTS"]


#: LRPExplainer's defaults, for every task level: see LRPExplainer's docstring.
DEFAULTS = {"rule": "zplus", "explained": "logit", "mask": "abs"}


class LRPExplainer(ExplainerAlgorithm):
    r"""Layer-wise Relevance Propagation for PyG models (how it works: :mod:`lrp_lib.explain.explainer`).

    Args:
        rule: the rule of every weight, or a named composite: ``"zplus"`` (the default, see below), ``"epsilon"``
            (:math:`\epsilon = 10^{-6}`: Gradient :math:`\times` Input on a bias-free ReLU network), ``"z"``
            (:math:`\epsilon = 0`: exact conservation), ``"gamma"``, the depth schedules ``"gamma_sgnn"``,
            ``"gamma_dig"``, ``"layered"`` (:mod:`lrp_lib.core.composites`), or any
            :class:`lrp_lib.core.rules.Rule` (``Epsilon(0.1)``).
        composite: a :class:`lrp_lib.core.composites.Composite` instead of ``rule``: rules per module type or
            name, the stabiliser of the maps without weights, and the attention rule (``"cp"`` or ``"uniform"``).
        explained: what a multiclass model's relevance starts from: ``"logit"`` (the default), the target class's
            logit :math:`z_c`; ``"contrast"``, :math:`z_c - \frac{1}{K-1} \sum_{k \ne c} z_k`, the evidence for the
            class against the others (for two classes the log-odds, which a one-logit binary model explains anyway).
        mask: what ``node_mask`` and ``edge_mask`` hold (:func:`lrp_lib.explain.masks.relevance_mask`): ``"abs"``
            (the default), :math:`|R| / \max |R|`, an importance in :math:`[0, 1]` that PyG's plots, thresholds and
            metrics read as GNNExplainer's masks; ``"positive"``, :math:`\max(R, 0) / \max R`; ``"relevance"``, the
            signed relevance, which is always on the explanation as ``node_relevance`` and ``edge_relevance``.
        per_index: for node-level tasks with ``index`` a tensor of nodes: explain each node on its own (default
            False: one explanation of the sum of their outputs, as PyG's explainers), adding sparse
            ``node_relevance_per_index`` (len(index), N, F) (F = 1 for ``node_mask_type="object"``; slice ``i``: the
            node relevance of ``index[i]`` alone) and ``edge_relevance_per_index`` (len(index), E), whose sums are
            ``node_relevance`` and ``edge_relevance``.  The targets are explained in chunks, each on the disjoint
            union of their ``num_hops``-hop subgraphs (:mod:`lrp_lib.explain.subgraphs`; ``num_hops`` defaults to the
            number of message-passing modules), as many as keep a pass's estimated memory within ``max_memory``
            bytes (default: a quarter of the memory available; on the CPU also its largest tensor within
            :data:`~lrp_lib.explain.subgraphs.CPU_TENSOR_BYTES`), at most ``chunk_size`` (default: no limit).
            ``prune=None`` (default) prunes the subgraphs where that gives the same output, ``True`` always, ``False``
            never; a pruned pass that does not reproduce the targets' output runs again unpruned (else an error).
        accounts: ``"each"`` (the default): ``bias_relevance`` and ``relevance_residual`` hold one value per graph
            of a graph-level batch and per target of ``per_index=True`` (:mod:`lrp_lib.explain.accounting`: at most
            one more backward pass); ``"total"``: one number each, for the whole call (one backward pass).
        replay: from the second explanation of a graph on (the same ``edge_index`` and other graph inputs, by
            identity and unchanged; node features of the same shape; the same parameters and buffers), run the
            forward captured with ``make_fx`` (:mod:`lrp_lib.explain.capture`) and one backward, without the model's
            or the rules' Python: the same relevance (``replayed`` and ``replay_reason`` say whether it ran captured,
            and why not).  Graphs explained once (molecules one at a time): from the model's
            :data:`~lrp_lib.explain.capture.cache.ANY_GRAPH_AFTER`-th such graph on, one capture with symbolic sizes
            for graphs of every size, the graph part run on each call (about a second, once).  Models that branch
            on input values, or have hooks, run eagerly (a read of how many graphs a batch vector names is held
            and checked).  On by default; applies with one account for the call (node-level tasks, one graph, a
            batch of one, or ``accounts="total"``), not ``per_index``.
        compile: compile the captured explanation with ``torch.compile(fullgraph=True)`` (off by default): with node
            masks once, with symbolic sizes, for every graph while the parameters are unchanged (``replay_reason``
            ``"torch.compile for any graph"``); with an edge mask per graph, at its second explanation.  It takes
            seconds, so it pays where many explanations follow; it applies where ``replay`` does (a float
            ``edge_attr`` is an input of the graph, as ``x``); elsewhere the rules run eagerly.

    The defaults (:data:`DEFAULTS`: z+, the target class's logit, :math:`|R| / \max |R|`) had the best mean rank of
    6 composites x 2 explained quantities x 3 masks on chapter 9's 11 tasks with ground truth, node- and graph-level
    (``benchmarks/bench_quality.py``, ``benchmarks/select_default.py``); the absolute value keeps the evidence
    against the class, which on the motif tasks is part of the motif.

    Link prediction (``task_level="edge"``): the model takes ``edge_label_index`` and gives one score per column;
    ``index`` selects the explained columns, whose scores (a binary classifier's target-class log-odds) are
    conserved onto the node features and the edges of ``edge_index`` (a dot-product decoder's end points: half each).

    Probability heads: a classifier whose ``forward`` ends in ``softmax``, ``log_softmax`` or ``sigmoid`` is explained
    from that function's input, its logits (``explained_output`` says so); a model declared ``"probs"`` or
    ``"log_probs"`` whose output is not such a function's is refused.

    Relevance (signed, not normalised): ``node_relevance`` per input feature (N x F) for
    ``node_mask_type="attributes"``, summed over the nodes (1 x F) for ``"common_attributes"``, per node (N x 1)
    otherwise; ``edge_relevance`` (with an edge mask) what each edge's messages carried over all layers (E);
    ``bias_relevance`` (what the biases and stabilisers kept), ``relevance_residual`` (the explained value minus the
    relevance of the inputs and of the biases: zero up to rounding unless relevance was lost at a detach or a zero
    output) and, for a floating point ``edge_attr``, ``edge_attr_relevance`` (E x D; a heterogeneous graph's
    ``edge_attr`` dict: per edge type, as the masks).  The two accounts are tensors
    on the explanation's device: for ``task_level="graph"`` of shape ``[num_graphs]`` (``[1]`` for a single graph;
    0 for a graph that ``index`` leaves out), so that graph ``g``'s node relevance plus ``bias_relevance[g]`` plus
    ``relevance_residual[g]`` is its explained output; with ``per_index=True`` of shape ``[len(index)]``, in the
    order of ``index``; otherwise (one explanation of the summed outputs, a heterogeneous graph) 0-dimensional.

    The inputs are checked (:func:`check_inputs`) before anything runs (and before PyG's prediction pass with
    :class:`~lrp_lib.explain.pyg_explainer.Explainer`); a failure restores the model's training flag; relevance
    that a ``.detach()`` inside the model keeps from the inputs is reported by a :class:`LostRelevanceWarning`.
    """

    def __init__(self, rule: Rule | str | None = None, per_index: bool = False, num_hops: int | None = None,
                 chunk_size: int | None = None, composite: Composite | None = None, explained: str | None = None,
                 mask: str | None = None, accounts: str = "each", max_memory: int | None = None,
                 prune: bool | None = None, replay: bool = True, compile: bool = False):
        super().__init__()
        self.captures = CaptureCache()  # the captured explanation of each graph
        for name, value in (("replay", replay), ("per_index", per_index), ("compile", compile)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        if accounts not in ("each", "total"):
            raise ValueError(f"accounts must be 'each' (one per graph or target) or 'total', got {accounts!r}")
        self._mask = None if mask is None else check_mask_kind(mask)
        if explained not in (None, "logit", "contrast"):
            raise ValueError(f"explained must be 'logit' or 'contrast', got {explained!r}")
        if composite is not None and not isinstance(composite, Composite):
            raise TypeError(f"composite must be a lrp_lib.core.composites.Composite, got {type(composite).__name__}")
        if composite is not None and rule is not None:
            raise ValueError("pass either rule or composite, not both (a composite holds the rules)")
        self._composite = get_composite(composite if composite is not None else get_composite(
            DEFAULTS["rule"] if rule is None else rule), DEFAULTS["rule"])
        for name, value, least in (("num_hops", num_hops, 0), ("chunk_size", chunk_size, 1),
                                   ("max_memory", max_memory, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be an int >= {least} or None, got {value!r}")
        if prune not in (None, True, False):
            raise ValueError(f"prune must be None (where exact), True or False, got {prune!r}")
        self.replay, self.compile, self.accounts, self._explained = replay, compile, accounts, explained
        self.per_index, self.num_hops, self.chunk_size = per_index, num_hops, chunk_size
        self.max_memory, self.prune = max_memory, prune

    @property
    def composite(self) -> Composite:
        """The composite in use: the one given (or made from ``rule``), its weights that it names no rule for
        (``linear=None``) on the default rule; else the default's."""
        return self._composite

    def __repr__(self) -> str:
        c = self.composite
        parts = [f"rule={c.linear!r}"]
        if c.rules:
            parts.append("rules={" + ", ".join(f"{k if isinstance(k, str) else k.__name__!r}: {r!r}"
                                               for k, r in c.rules) + "}")
        if c.layers is not None:
            parts.append(f"layers={c.layers!r}")
        parts += [f"explained={self.explained!r}", f"mask={self.mask!r}"]
        return f"LRPExplainer({', '.join(parts)})"

    @property
    def rule(self) -> Rule:
        """The rule of the weights that the composite names nothing else for."""
        return self.composite.linear

    @property
    def explained(self) -> str:
        """What a multiclass model's relevance starts from: ``"logit"`` or ``"contrast"``."""
        return self._explained if self._explained is not None else DEFAULTS["explained"]

    @property
    def mask(self) -> str:
        """What ``node_mask`` and ``edge_mask`` hold: ``"abs"``, ``"positive"`` or ``"relevance"``."""
        return self._mask if self._mask is not None else DEFAULTS["mask"]

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
        given, training = model, explainer_training_flag(model)  # (PyG's Explainer, up the stack, set eval mode)
        warn_training(training)
        try:
            model = uncompiled(model)
            # the relevance is a backward: autograd on, also under torch.no_grad() or torch.inference_mode()
            # (whose tensors cannot be saved for backward: copied)
            with torch.inference_mode(False), torch.enable_grad():
                args = [usable(t) for t in (x, edge_index, target, index)]
                return self._explain(model, *args[:2], target=args[2], index=args[3],
                                     **{k: usable(v) for k, v in kwargs.items()})
        except BaseException:
            if training is not None:
                given.train(training)
            raise

    def _explain(self, model, x, edge_index, *, target, index=None, **kwargs) -> Explanation:
        if isinstance(x, dict):
            return explain_hetero(self, model, x, edge_index, target=target, index=index, **kwargs)
        target = pending_target() if target is None else target  # Explainer(one_pass=True): from this forward
        if self.model_config.task_level == ModelTaskLevel.graph:
            target = check_graph_rows(target, x, kwargs.get("batch"))
        if self.per_index and index is not None and self.model_config.task_level == ModelTaskLevel.node:
            if is_adjacency(edge_index):
                raise ValueError("per_index=True with a sparse adjacency as edge_index: each target's receptive field "
                                 "is cut from the edges; pass them as a (2, E) edge_index "
                                 "(torch_geometric.utils.to_edge_index(adj_t)[0].flip(0))")
            if not checked_by_explainer(x, edge_index):  # (relevance checks them where per_index is off)
                check_inputs(model, x, edge_index, **kwargs)
            def explain_chunk(sub_x, sub_edges, sub_target, rows, groups, **sub_kwargs):  # one account per target
                if self.accounts == "total":
                    return relevance(self, model, sub_x, sub_edges, sub_target, rows, checked=True, **sub_kwargs)
                row_group = torch.full((sub_x.shape[0],), -1, dtype=torch.long, device=rows.device)
                row_group[rows] = torch.arange(rows.numel(), device=rows.device)
                row_groups = getattr(current_plan(), "row_groups", None)  # each row's group in this pass
                return relevance(self, model, sub_x, sub_edges, sub_target, rows, checked=True, node_group=groups,
                                 row_group=row_group, row_groups=row_groups, **sub_kwargs)
            node_rel, edge_rel, extra = explain_per_index(
                explain_chunk, model, x, edge_index, target=target, index=index, num_hops=self.num_hops,
                chunk_size=self.chunk_size, max_memory=self.max_memory, prune=self.prune,
                node_mask_type=self.explainer_config.node_mask_type,
                edge_mask_type=self.explainer_config.edge_mask_type, **kwargs)
            if self.accounts == "total":  # the chunks' totals, summed
                extra.update({k: extra[k].sum() for k in ("bias_relevance", "relevance_residual") if k in extra})
            return self._masked(node_rel, edge_rel, **extra)
        per_graph = self.model_config.task_level == ModelTaskLevel.graph and self.accounts == "each"  # one per graph
        batch = kwargs.get("batch")
        batched = per_graph and isinstance(batch, Tensor) and batch.numel() == x.shape[0]
        node_group = None if not batched else check_batch(  # (no edge between graphs)
            batch, x.shape[0], adjacency_edges(edge_index) if is_adjacency(edge_index) else edge_index.long(), "batch",
            fix="an account per graph needs graphs that share none; fix batch (torch_geometric.data.Batch builds a "
                "consistent one), or explain the batch with one account, LRPExplainer(accounts='total')")
        if batched and not (node_group.numel() and int(node_group.max())):  # one graph (a loader of batch size 1):
            batched, node_group = False, None  # its one account, as a graph alone, which may be captured
        node_rel, edge_rel, _, extra = relevance(
            self, model, x, edge_index, target, index, node_group=node_group, split_losses=False,
            row_groups=batch_row_groups(node_group) if batched else None, one_group=per_graph and not batched, **kwargs)
        if edge_rel is not None and is_adjacency(edge_index):  # (PyG counts no edges of a sparse edge_index)
            extra["num_edges"] = edge_rel.numel()
        return self._masked(per_mask_type(node_rel, self.explainer_config.node_mask_type), edge_rel, **extra)

    def _masked(self, node_rel: Tensor, edge_rel: Tensor | None, **extra) -> Explanation:
        """node_relevance / edge_relevance (signed) and the node / edge masks that ``mask`` makes of them."""
        node_mask = None if self.explainer_config.node_mask_type is None else relevance_mask(node_rel, self.mask)
        extra = {"node_relevance": node_rel.detach(), **extra}
        if edge_rel is not None:
            extra["edge_relevance"] = edge_rel.detach()
        return Explanation(node_mask=node_mask, edge_mask=relevance_mask(edge_rel, self.mask), **extra)
