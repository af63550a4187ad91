r"""GNN-LRP: the relevance of walks and of node sets, on the product's relevance graph.

GNN-LRP (Schnake et al., *Higher-Order Explanations of Graph Neural Networks via Relevant Walks*,
TPAMI 2021) gives each walk :math:`(j_0, j_1, \dots, j_L)` through a graph network with :math:`L`
message-passing steps its relevance: :math:`j_0` the input node, :math:`j_t` the node that receives
the message at step :math:`t`.  The walk's relevance is the nested LRP backward in which, at every
step, only the relevance of the message from :math:`j_{t-1}` to :math:`j_t` is kept:

.. math::  R_{j_0 \dots j_L} = \big(M_{j_0} B_1 M_{j_1} B_2 \cdots M_{j_{L-1}} B_L M_{j_L} B_{\text{out}}\big) R,

with :math:`B_t` the relevance backward of the model between the cut before and after step
:math:`t` (the rules of :class:`~lrp_lib.explain.explainer.LRPExplainer`, whose denominators are
fixed in the forward, so each :math:`B_t` is linear), and :math:`M_j` keeping node :math:`j`'s row.
The cuts are made by PyG's ``MessagePassing`` hooks at every ``propagate`` call
(:mod:`lrp_lib.explain.walks.graph`), so every model ``LRPExplainer`` explains whose relevance moves
between nodes only along messages has walks: GCN, GraphConv, SAGE, GIN, GINE and other convs with
``edge_attr``, GAT, GATv2, TransformerConv, residual, jumping-knowledge, gated and normalised models.
A step :math:`j \to k` is an edge of the ``edge_index`` that the step propagates along (GCN's added
self-loops included) or a self step :math:`j \to j` (root weights, skip connections; its relevance
may be 0).  A route that skips steps (a jumping-knowledge head reading layer 1) belongs to the walks
that stay at its node over the skipped steps.  Heterogeneous graphs (``x`` and ``edge_index``
dicts): walks of typed nodes, :mod:`lrp_lib.explain.walks.hetero`.

Consequences (exact, for every rule: the walks partition the backward):

* the walks' relevances sum to the relevance that reaches ``x`` (to the output under LRP-0 on a
  bias-free network of ReLUs, linear maps and sum pools); grouped by start node they are
  ``LRPExplainer``'s node relevance (:meth:`WalkModel.node_relevance`);
* what the biases, the stabilisers and ``edge_attr`` keep is in no walk; it is reported beside
  them (:attr:`WalkModel.bias_relevance`, :attr:`WalkModel.edge_attr_relevance`);
* the relevance that step :math:`t` carries along :math:`j \to k` (``LRPExplainer``'s edge
  relevance of that edge at that layer) is the sum of the walks through that step plus what the
  earlier biases keep of it (:meth:`WalkModel.step_relevance` gives both parts).

Relevance that moves between nodes without a message (a norm over the nodes of a graph, attention
over all nodes, pooling) would belong to no walk: :class:`WalkModel` refuses such models with
:class:`WalksUndefinedError` (:mod:`lrp_lib.explain.walks.defined`).  ``rule`` is anything
``LRPExplainer`` takes (a rule, a named composite, a :class:`~lrp_lib.core.composites.Composite`) or a
list with one rule per message-passing module (:func:`gamma_schedule`).

Where the recorded backward decomposes into one matrix per node between steps and per-edge shares
inside them (:mod:`lrp_lib.explain.walks.algebra`), :func:`walk_relevance` is a product of small
matrices per walk, :func:`subgraph_relevance` one weighted pass (the sGNN-LRP relevance of Xiong et
al., ICML 2022) and :func:`top_walks` a branch and bound (exact); elsewhere (jumping knowledge, long
residuals) the same queries run as batched masked backwards of the recorded graph.  The searches are
in :mod:`lrp_lib.explain.walks.search`, :class:`WalkModel` in :mod:`lrp_lib.explain.walks.model`.
"""
from __future__ import annotations

from torch import Tensor, nn

from lrp_lib.explain.walks.hetero import HeteroWalkModel, walk_model
from lrp_lib.explain.walks.model import WalkModel, all_walks, check_alpha, gamma_schedule
from lrp_lib.explain.walks.defined import WalksUndefinedError
from lrp_lib.explain.walks.search import GreedySubgraph

__all__ = ["walk_relevance", "top_walks", "subgraph_relevance", "all_walks", "WalkModel", "HeteroWalkModel", "walk_scores",
           "greedy_subgraph", "GreedySubgraph", "gamma_schedule", "WalksUndefinedError"]


def walk_relevance(model: nn.Module, x: Tensor, edge_index: Tensor, walks: Tensor, rule="epsilon",
                   *, index: int | None = None, target: int | None = None, **model_kwargs) -> Tensor:
    r"""The GNN-LRP relevance of each walk (module docstring).

    Args:
        model: any model :class:`~lrp_lib.explain.explainer.LRPExplainer` explains; eval mode while it runs.
        x, edge_index: the graph; ``**model_kwargs`` (``batch=``, ``edge_weight=``, ``edge_attr=``)
            go to ``model``.  Dicts (node type -> features, edge type -> edge_index): a heterogeneous
            graph (:mod:`lrp_lib.explain.walks.hetero`).
        walks: LongTensor (W, L+1), one walk per row :math:`(j_0, \dots, j_L)`, :math:`L` the number
            of message-passing steps.  A walk ends anywhere for a graph-level output, at ``index`` for a
            node-level one.  Heterogeneous: typed walks ``[((type_0, j_0), ..., (type_L, j_L)), ...]``
            or global ids (:class:`~lrp_lib.explain.walks.hetero.HeteroWalkModel`).
        rule: a rule, a named composite, a Composite, or one rule per message-passing module.
        index: the explained node of a node-level output (the output's row; heterogeneous: also
            ``(node type, row)``).
        target: the explained column of the output (class), if it has several.

    Returns: (W,) relevance, in x's dtype; all walks (:func:`all_walks`) sum to the relevance that
    reaches ``x``.  Cost: one forward, then one batched backward per 1,024 walks.
    """
    return walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs).walk_relevance(walks)


def subgraph_relevance(model: nn.Module, x: Tensor, edge_index: Tensor, nodes, rule="epsilon", *,
                       index: int | None = None, target: int | None = None, alpha: float = 0.0,
                       **model_kwargs) -> Tensor:
    r"""The relevance of a node set :math:`S`: the sum over the walks that stay inside it,
    :math:`R_S = \sum_{w \subseteq S} R_w` (sGNN-LRP, Xiong et al., ICML 2022), as one backward
    with every cut masked to :math:`S`, no enumeration.

    With ``alpha`` :math:`= \alpha > 0`, Xiong et al.'s relaxation: every walk that visits :math:`S`
    at least once counts, weighted by :math:`\alpha` per position outside :math:`S`,

    .. math::  R_\alpha(S) = \sum_{w:\ \exists t,\ j_t \in S} \alpha^{\#\{t \in 0..L:\ j_t \notin S\}} R_w

    computed as the weighted backward with weight 1 on :math:`S` and :math:`\alpha` off it minus the
    one with 0 on :math:`S` and :math:`\alpha` off it.

    Args:
        nodes: node ids, or a boolean mask (N,), or (M, N) for M sets at once (batched).
        alpha: a number in [0, 1] (default 0), see above.
        others: as :func:`walk_relevance`.

    Returns: a scalar tensor, or (M,) for M sets.
    """
    alpha = check_alpha(alpha)
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.subgraph_relevance(nodes, alpha)


def top_walks(model: nn.Module, x: Tensor, edge_index: Tensor, k: int, rule="epsilon", *,
              index: int | None = None, target: int | None = None, beam: int | None = None,
              signed: bool = False, **model_kwargs) -> tuple[Tensor, Tensor]:
    r"""The ``k`` walks of largest :math:`|R|` (of largest :math:`R` with ``signed=True``), exactly.

    Search (where the model decomposes, :mod:`lrp_lib.explain.walks.algebra`): **branch and bound
    from the output side**.  A partial walk is a suffix :math:`(j_t, \dots, j_L)` with its state
    :math:`a` at time :math:`t`; every completion has relevance :math:`\pi \cdot a` for a prefix vector
    :math:`\pi` in a box :math:`[lo_t[j_t], hi_t[j_t]]` (one pass of interval arithmetic from the
    input), so :math:`\max(\sum_f \max(lo_f a_f, hi_f a_f), -\sum_f \min(lo_f a_f, hi_f a_f))` bounds
    the :math:`|R|` of every walk that extends the suffix.  A beam pass (width ``beam``, default
    :math:`\max(8k, 64)`) completes some walks; the :math:`k`-th largest of their :math:`|R|`, lowered
    by float rounding's margin, is a threshold :math:`\tau`; then every suffix is expanded step by step
    keeping those whose bound is :math:`\ge \tau`.  A walk of the true top :math:`k` has
    :math:`|R| \ge \tau` and so do the bounds of all its suffixes: **the result is the exact top k**.
    With ``signed=True`` the bound is :math:`\sum_f \max(lo_f a_f, hi_f a_f)` and the threshold the
    :math:`k`-th largest :math:`R`.  Elsewhere (jumping knowledge) every walk is scored with batched
    masked backwards, :math:`N (d+1)^L` walks for average degree :math:`d`.

    Walks whose relevance differs by less than :data:`~lrp_lib.explain.walks.search.TIE` (relative to
    the largest) are tied, as the walks of a symmetric graph with constant features are; among them the
    walks with the smallest node ids come first, so that the result does not depend on float rounding.

    Heterogeneous graphs (:mod:`lrp_lib.explain.walks.hetero`): every walk is scored (masked
    backwards), and the walks are returned typed, a list of ``((type_0, j_0), ..., (type_L, j_L))``.

    Returns: ``(walks, relevance)``: LongTensor (k, L+1) and (k,), sorted by decreasing :math:`|R|`
    (decreasing :math:`R` if ``signed``); fewer if the graph has fewer walks.
    """
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    walks, rel = wm.top_walks(k, beam, signed)
    return (wm.typed_walks(walks), rel) if isinstance(wm, HeteroWalkModel) else (walks, rel)


def walk_scores(model: nn.Module, x: Tensor, edge_index: Tensor, k: int, rule="epsilon", *,
                index: int | None = None, target: int | None = None, signed: bool = True,
                beam: int | None = None, **model_kwargs) -> tuple[Tensor, Tensor]:
    r"""Node and edge scores from the ``k`` most relevant walks (GNN-LRP, Schnake et al., TPAMI 2021).

    With :math:`T` the top walks (:func:`top_walks` with ``signed``) and :math:`v_w = R_w`
    (``signed=True``) or :math:`|R_w|`:

    .. math::  \mathrm{node}_j = \sum_{w \in T} v_w \, \#\{t \in 0..L : j_t = j\}, \qquad
               \mathrm{edge}_e = \sum_{w \in T} v_w \, \#\{t \in 1..L : (j_{t-1}, j_t) = (s_e, d_e)\} / m_e

    (a node once per position it occupies; an edge of ``edge_index`` once per step along it, split
    between its :math:`m_e` parallel copies; a self step goes to the edge :math:`(j, j)` if
    ``edge_index`` has one, else to no edge).

    Returns: ``(node_scores, edge_scores)``: (N,) and (E,) in x's dtype (heterogeneous: dicts per
    node type and per edge type).
    """
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.walk_scores(k, signed, beam)


def greedy_subgraph(model: nn.Module, x: Tensor, edge_index: Tensor, size: int | None = None,
                    rule="epsilon", *, alpha: float = 0.0, index: int | None = None,
                    target: int | None = None, **model_kwargs) -> GreedySubgraph:
    r"""sGNN-LRP's greedy subgraph search (Xiong et al., ICML 2022).

    Start from :math:`S_0 = \emptyset`; step :math:`i` adds
    :math:`v_i = \arg\max_{v \notin S_{i-1}} R_\alpha(S_{i-1} \cup \{v\})` (signed; ties, up to
    16 ulp of the step's largest :math:`|R|`, to the smallest node id), until ``size`` nodes
    (default all :math:`N`).  Node score :math:`N - i` for the :math:`i`-th added node (0 if
    never added), as ``best_fo[fs] = nb_nodes - i`` in their code.  Each step is one batched
    masked backward over its candidates (two with :math:`\alpha > 0`).

    Returns: :class:`GreedySubgraph` ``(order, scores, relevance)`` (heterogeneous graphs: global
    node ids, :class:`~lrp_lib.explain.walks.hetero.HeteroWalkModel`).
    """
    wm = walk_model(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.greedy_subgraph(size, alpha)
