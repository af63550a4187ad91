"""Higher-order LRP explanations of ``lrp_lib.explain.walks`` as scored methods of ``bench_quality.py``.

Each function takes ``(model, x, edge_index, target=int, index=None)`` and returns a dict with node
(and edge) scores, higher meaning more relevant:

* ``sgnn_greedy``: sGNN-LRP (Xiong et al., ICML 2022): the greedy search that grows the node set of
  largest signed subgraph relevance, gamma decreasing linearly from 3 at the first message-passing
  layer to 0 at the last; a node scores by the step at which it joins (first = highest), as their
  evaluation does (``get_feat_order_local_best_guess``, ``'extr'``).
* ``sgnn_greedy_alpha``: the same with their relaxation ``alpha = 0.05`` (walks that leave the set by
  ``m`` positions count with weight ``alpha ** m``), the setting of their best BA-2Motifs number.
* ``top_walks``: GNN-LRP (Schnake et al., 2021): the 25 walks of largest signed relevance under the
  same gamma schedule, each adding its relevance to every node and edge it visits.
"""
from __future__ import annotations

from torch_geometric.nn import MessagePassing

from lrp_lib.explain.walks import gamma_schedule, greedy_subgraph, walk_scores

#: Walks kept by ``top_walks``.
TOP_WALKS = 25


def _schedule(model):
    return gamma_schedule(sum(isinstance(m, MessagePassing) for m in model.modules()))


def sgnn_greedy(model, x, edge_index, target, index=None, alpha=0.0):
    result = greedy_subgraph(model, x, edge_index, rule=_schedule(model), alpha=alpha, target=target, index=index)
    return {"node": result.scores}


def sgnn_greedy_alpha(model, x, edge_index, target, index=None):
    return sgnn_greedy(model, x, edge_index, target, index=index, alpha=0.05)


def top_walks(model, x, edge_index, target, index=None):
    node, edge = walk_scores(model, x, edge_index, TOP_WALKS, rule=_schedule(model), target=target, index=index,
                             signed=True)
    return {"node": node, "edge": edge}


#: bench_quality's WALK_METHODS entries: key -> (description, "module:function").
METHODS = {
    "sgnn_greedy": ("sGNN-LRP greedy subgraph search (Xiong et al. 2022), gamma 3 -> 0, node rank by step",
                    "walk_methods:sgnn_greedy"),
    "sgnn_greedy_alpha": ("sGNN-LRP greedy search with alpha = 0.05 (Xiong et al. 2022)",
                          "walk_methods:sgnn_greedy_alpha"),
    "top_walks": (f"GNN-LRP: the {TOP_WALKS} most relevant walks (signed, gamma 3 -> 0) summed onto nodes and edges",
                  "walk_methods:top_walks"),
}
