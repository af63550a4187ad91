"""A heterogeneous graph (``x`` and ``edge_index`` dicts, as ``to_hetero`` and ``HeteroConv`` models take them):
:func:`explain_hetero`, a :class:`~torch_geometric.explain.HeteroExplanation` with a mask per node and edge type."""
from __future__ import annotations

import torch
from torch_geometric.explain import HeteroExplanation

from lrp_lib.explain.accounting import lost_relevance
from lrp_lib.explain.mode.edges import HeteroEdgeRecorder
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.inputs import check_hetero_inputs
from lrp_lib.explain.masks import per_mask_type, relevance_mask
from lrp_lib.explain.relevance_pass import propagate

__all__ = ["explain_hetero"]


def explain_hetero(algorithm, model, x: dict, edge_index: dict, *, target, index=None, **kwargs) -> HeteroExplanation:
    """Explain ``model`` on a heterogeneous graph with the settings of ``algorithm`` (an ``LRPExplainer``)."""
    if algorithm.per_index:
        raise ValueError("per_index=True explains homogeneous graphs only; use per_index=False for "
                         "a heterogeneous graph")
    check_hetero_inputs(model, x, edge_index, **kwargs)
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()}
    attr = kwargs.get("edge_attr")  # floating-point edge features, per edge type: inputs too
    attr_leaves = {k: v.detach().clone().requires_grad_(True) for k, v in (attr.items() if isinstance(attr, dict)
                   else ()) if isinstance(v, torch.Tensor) and v.is_floating_point()}
    if attr_leaves:
        kwargs = {**kwargs, "edge_attr": {**attr, **attr_leaves}}
    mode = ForwardMode(algorithm.composite, model)
    recorder = None if algorithm.explainer_config.edge_mask_type is None else \
        HeteroEdgeRecorder(mode, model, edge_index, next(iter(x.values())).dtype)
    _, start, grads, _ = propagate(model, mode, recorder, [*leaves.values(), *attr_leaves.values()],
                                   lambda: model(leaves, edge_index, **kwargs), target, index, algorithm.model_config,
                                   algorithm.explained)
    node_rel, attr_rel = ({k: g if g is not None else torch.zeros_like(t[k]) for k, g in zip(t, part)}
                          for t, part in ((leaves, grads[:len(leaves)]), (attr_leaves, grads[len(leaves):])))
    absorbed = mode.tally.total(mode.tally.absorbed)
    lost = lost_relevance(start, [*node_rel.values(), *attr_rel.values()], absorbed, mode.detached)
    explanation = HeteroExplanation()
    node_type = algorithm.explainer_config.node_mask_type
    node_rel = {k: per_mask_type(r, node_type).detach() for k, r in node_rel.items()}
    explanation.set_value_dict("node_relevance", node_rel)
    if node_type is not None:  # one normalisation over all node types (and one over all edge types)
        explanation.set_value_dict("node_mask", relevance_mask(node_rel, algorithm.mask))
    if recorder is not None:
        edge_rel = {k: part.record.detach() for k, part in recorder.parts.items()}
        explanation.set_value_dict("edge_relevance", edge_rel)
        explanation.set_value_dict("edge_mask", relevance_mask(edge_rel, algorithm.mask))
    if attr_rel:
        explanation.set_value_dict("edge_attr_relevance", {k: r.detach() for k, r in attr_rel.items()})
    if mode.explained_head is not None:
        explanation.explained_output = f"the input of the model's final {mode.explained_head}"
    explanation.bias_relevance = torch.tensor(absorbed, dtype=start.dtype, device=start.device)
    explanation.relevance_residual = torch.tensor(lost, dtype=start.dtype, device=start.device)
    return explanation
