r"""GNN-LRP: the relevance of walks and of node sets (taught in the book's chapter ``08_relevant_walks``).

A walk :math:`(j_0, j_1, \dots, j_L)` through a model of :math:`L` message-passing steps starts at the input node
:math:`j_0` and takes at step :math:`t` an edge :math:`j_{t-1} \to j_t` of the ``edge_index`` that the step propagates
along (GCN's added self-loops included) or a self step :math:`j \to j` (root weights, skips; its relevance may be 0).
Its relevance (Schnake et al., TPAMI 2021) is the nested LRP backward that keeps, at every step, only the message
from :math:`j_{t-1}` to :math:`j_t`:

.. math::  R_{j_0 \dots j_L} = \big(M_{j_0} B_1 M_{j_1} B_2 \cdots M_{j_{L-1}} B_L M_{j_L} B_{\text{out}}\big) R,

:math:`B_t` the backward of :class:`~lrp_lib.explain.explainer.LRPExplainer`'s rules across step :math:`t` (linear:
the denominators are fixed in the forward), :math:`M_j` keeping node :math:`j`'s row.  A route that skips steps (a
jumping-knowledge head) belongs to the walks that stay at its node.  Exact for every rule (the walks partition the
backward):

* :math:`\sum_w R_w` is the relevance that reaches ``x`` (the output under LRP-0 on a bias-free ReLU network); by
  start node it is ``LRPExplainer``'s node relevance (:meth:`WalkModel.node_relevance`); what biases, stabilisers and
  ``edge_attr`` keep is reported beside (:attr:`WalkModel.bias_relevance`, :attr:`WalkModel.edge_attr_relevance`);
* what step :math:`t` carries along :math:`j \to k` (``LRPExplainer``'s edge relevance at that layer) is the sum of
  the walks through that step plus what earlier biases keep of it (:meth:`WalkModel.step_relevance`);
* a node set :math:`S` has :math:`R_S = \sum_{w \subseteq S} R_w` (sGNN-LRP, :func:`subgraph_relevance`).

Relevance that moves between nodes without a message (a graph-wise norm, global attention, pooling) belongs to no walk:
such models raise :class:`WalksUndefinedError` (:mod:`~lrp_lib.explain.walks.defined`).  ``rule``: anything
``LRPExplainer`` takes, or one rule per message-passing module (:func:`gamma_schedule`).  Submodules:
:mod:`~lrp_lib.explain.walks.graph` (the cut relevance graph), :mod:`~lrp_lib.explain.walks.algebra` (per-walk matrix
products where the model decomposes; elsewhere batched masked backwards), :mod:`~lrp_lib.explain.walks.search`,
:mod:`~lrp_lib.explain.walks.model` (:class:`WalkModel`), :mod:`~lrp_lib.explain.walks.hetero` (heterogeneous graphs).
"""
from __future__ import annotations

from torch import Tensor, nn

from lrp_lib.explain.walks.hetero import HeteroWalkModel, walk_model
from lrp_lib.explain.walks.model import WalkModel, gamma_schedule
from lrp_lib.explain.walks.defined import WalksUndefinedError
from lrp_lib.explain.walks.search import GreedySubgraph, all_walks, check_alpha

__all__ = ["walk_relevance", "top_walks", "subgraph_relevance", "all_walks", "WalkModel", "HeteroWalkModel",
           "walk_scores", "greedy_subgraph", "GreedySubgraph", "gamma_schedule", "WalksUndefinedError"]


def walk_relevance(model: nn.Module, x: Tensor, edge_index: Tensor, walks: Tensor, rule="epsilon",
                   *, index: int | None = None, target: int | None = None, **model_kwargs) -> Tensor:
    r"""The GNN-LRP relevance of each walk (module docstring).

    Args:
        model: any model :class:`~lrp_lib.explain.explainer.LRPExplainer` explains; eval mode while it runs.
        x, edge_index: the graph; ``**model_kwargs`` (``batch=``, ``edge_weight=``, ``edge_attr=``) go to
            ``model``.  Dicts (node type -> features, edge type -> edge_index): a heterogeneous graph.
        walks: LongTensor (W, L+1), one walk :math:`(j_0, \dots, j_L)` per row, :math:`L` the number of
            message-passing steps; it ends anywhere for a graph-level output, at ``index`` for a node-level one.
            Heterogeneous: typed walks ``[((type_0, j_0), ..., (type_L, j_L)), ...]`` or global ids
            (:class:`~lrp_lib.explain.walks.hetero.HeteroWalkModel`).
        rule: a rule, a named composite, a Composite, or one rule per message-passing module.
        index: the explained node of a node-level output (its row; heterogeneous: also ``(node type, row)``).
        target: the explained column of the output (class), if it has several.

    Returns: (W,) relevance, in x's dtype; all walks (:func:`all_walks`) sum to the relevance that reaches ``x``."""
    return walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs).walk_relevance(walks)


def subgraph_relevance(model: nn.Module, x: Tensor, edge_index: Tensor, nodes, rule="epsilon", *,
                       index: int | None = None, target: int | None = None, alpha: float = 0.0,
                       **model_kwargs) -> Tensor:
    r"""The relevance of a node set :math:`S`, :math:`R_S = \sum_{w \subseteq S} R_w` (sGNN-LRP, Xiong et al.,
    ICML 2022): one backward with every cut masked to :math:`S`, no enumeration.  With ``alpha`` :math:`> 0`,
    their relaxation: every walk that visits :math:`S` counts, weighted by :math:`\alpha` per position outside,

    .. math::  R_\alpha(S) = \sum_{w:\ \exists t,\ j_t \in S} \alpha^{\#\{t \in 0..L:\ j_t \notin S\}} R_w

    (the weighted backward with weight 1 on :math:`S` and :math:`\alpha` off it, minus the one with 0 on :math:`S`).

    Args: ``nodes``: node ids, a boolean mask (N,), or (M, N) for M sets at once; ``alpha`` in [0, 1] (default 0);
    the others as :func:`walk_relevance`.  Returns: a scalar tensor, or (M,) for M sets."""
    check_alpha(alpha)  # (before the forward pass)
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.subgraph_relevance(nodes, alpha)


def top_walks(model: nn.Module, x: Tensor, edge_index: Tensor, k: int, rule="epsilon", *,
              index: int | None = None, target: int | None = None, beam: int | None = None,
              signed: bool = False, **model_kwargs) -> tuple[Tensor, Tensor]:
    r"""The ``k`` walks of largest :math:`|R|` (of largest :math:`R` with ``signed=True``), exactly.

    Where the model decomposes (:mod:`~lrp_lib.explain.walks.algebra`): branch and bound from the output side.  A suffix
    :math:`(j_t, \dots, j_L)` with state :math:`a` at time :math:`t` completes to walks of relevance
    :math:`\pi \cdot a`, :math:`\pi` in a box :math:`[lo_t[j_t], hi_t[j_t]]` (interval arithmetic from the input), so
    :math:`\max(\sum_f \max(lo_f a_f, hi_f a_f), -\sum_f \min(lo_f a_f, hi_f a_f))` bounds their :math:`|R|`
    (``signed``: :math:`\sum_f \max(lo_f a_f, hi_f a_f)` bounds :math:`R`).  A beam pass (width ``beam``, default
    :math:`\max(8k, 64)`) sets the threshold :math:`\tau`, the :math:`k`-th best of its walks less float rounding's
    margin; then every suffix whose bound is :math:`\ge \tau` is expanded: the result is the exact top k.  Elsewhere
    (jumping knowledge; heterogeneous graphs) every walk is scored by batched masked backwards, :math:`N (d+1)^L` walks
    for average degree :math:`d`.  Walks within :data:`~lrp_lib.explain.walks.search.TIE` (relative to the largest) are
    tied and ordered by smallest node ids, so that the result does not depend on float rounding.

    Returns: ``(walks, relevance)``: LongTensor (k, L+1) and (k,), by decreasing :math:`|R|` (:math:`R` if ``signed``);
    fewer if the graph has fewer walks.  Heterogeneous: typed walks, a list of ``((type_0, j_0), ..., (type_L, j_L))``.
    """
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    walks, rel = wm.top_walks(k, beam, signed)
    return (wm.typed_walks(walks), rel) if isinstance(wm, HeteroWalkModel) else (walks, rel)


def walk_scores(model: nn.Module, x: Tensor, edge_index: Tensor, k: int, rule="epsilon", *,
                index: int | None = None, target: int | None = None, signed: bool = True,
                beam: int | None = None, **model_kwargs) -> tuple[Tensor, Tensor]:
    r"""Node and edge scores from the ``k`` most relevant walks :math:`T` (:func:`top_walks` with ``signed``),
    with :math:`v_w = R_w` (``signed=True``) or :math:`|R_w|`:

    .. math::  \mathrm{node}_j = \sum_{w \in T} v_w \, \#\{t \in 0..L : j_t = j\}, \qquad
               \mathrm{edge}_e = \sum_{w \in T} v_w \, \#\{t \in 1..L : (j_{t-1}, j_t) = (s_e, d_e)\} / m_e

    (:math:`m_e` parallel copies of edge :math:`e`; a self step goes to the edge :math:`(j, j)` if any).

    Returns: ``(node_scores, edge_scores)``: (N,) and (E,) in x's dtype (heterogeneous: dicts per node type and
    per edge type)."""
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.walk_scores(k, signed, beam)


def greedy_subgraph(model: nn.Module, x: Tensor, edge_index: Tensor, size: int | None = None,
                    rule="epsilon", *, alpha: float = 0.0, index: int | None = None,
                    target: int | None = None, **model_kwargs) -> GreedySubgraph:
    r"""sGNN-LRP's greedy subgraph search (Xiong et al., ICML 2022): from :math:`S_0 = \emptyset`, step :math:`i`
    adds :math:`v_i = \arg\max_{v \notin S_{i-1}} R_\alpha(S_{i-1} \cup \{v\})` (signed; ties, up to 16 ulp of the
    step's largest :math:`|R|`, to the smallest node id), until ``size`` nodes (default all :math:`N`).  Node score
    :math:`N - i` for the :math:`i`-th added node, 0 if never added (``best_fo[fs] = nb_nodes - i`` in their code).
    One batched masked backward per step (two with :math:`\alpha > 0`).

    Returns: :class:`GreedySubgraph` ``(order, scores, relevance)`` (heterogeneous graphs: global node ids)."""
    check_alpha(alpha)  # (before the forward pass)
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.greedy_subgraph(size, alpha)
