r"""One explanation: the forward under the rules (or its captured graph, :mod:`lrp_lib.explain.capture`), one
backward (:func:`propagate`), and the accounts (:mod:`lrp_lib.explain.accounting`)."""
from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Callable

import torch
from torch import Tensor, nn
from torch_geometric.explain.config import ModelConfig

from lrp_lib.core.validation import is_adjacency
from lrp_lib.explain.accounting import account, account_one, lost_relevance
from lrp_lib.explain.capture import traced_attr
from lrp_lib.explain.mode.tally import Tally
from lrp_lib.explain.mode.edges import EdgeRecorder, adjacency_edges, ensure_hooks, recording
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.explain.mode.function_mode import RelevanceMode, UnsupportedModelError
from lrp_lib.explain.inputs import check_inputs, checked_by_explainer
from lrp_lib.explain.subgraphs.layer_pruning import current_plan
from lrp_lib.explain.targets import explained_of, start_of

__all__ = ["relevance", "propagate", "check_blocked", "NO_EDGE_ATTR_RELEVANCE"]

NO_EDGE_ATTR_RELEVANCE = (
    "edge_attr_relevance is zero everywhere: no relevance reached edge_attr.  Where the model reads edge_attr only "
    "inside attention scores (GATConv, TransformerConv with edge_dim), that is by design: attention weights are held "
    "constant (Composite(attention='cp'), the default), so relevance flows through the values, not the scores "
    "(under Composite(attention='uniform') the scores take half of each product)")


def relevance(algorithm, model: nn.Module, x: Tensor, edge_index: Tensor, target, index, checked: bool = False,
              node_group=None, row_group=None, row_groups=None, split_losses: bool = True, one_group: bool = False,
              **kwargs):
    """(node relevance, edge relevance, the model's output, extras) with the settings of ``algorithm`` (an
    :class:`~lrp_lib.explain.algorithm.LRPExplainer`).  With ``node_group`` (the group of each node) the extras'
    ``bias_relevance`` and ``relevance_residual`` hold one value per group (:func:`~lrp_lib.explain.accounting.account`
    takes ``row_groups`` and ``split_losses``): group ``g`` explains the output rows where ``row_group == g``
    (None: row ``g``).  ``one_group``: a single graph, needing no other backward, so it may be captured."""
    if not checked and not checked_by_explainer(x, edge_index):
        check_inputs(model, x, edge_index, **kwargs)
    edges = algorithm.explainer_config.edge_mask_type is not None
    if not is_adjacency(edge_index):
        edge_index = edge_index.long()  # PyG accepts int32; the edge ids index with int64
    leaf = x.detach().clone().requires_grad_(True)
    inputs = [leaf]
    for k in traced_attr(kwargs):  # (edge_attr's relevance: a leaf too)
        kwargs = {**kwargs, k: kwargs[k].detach().clone().requires_grad_(True)}
        inputs.append(kwargs[k])
    grouped = row_groups is not None and node_group is not None  # per_index: the accounts in this pass
    captured = why = None
    if (algorithm.compile or algorithm.replay) and not grouped and (node_group is None or one_group) \
            and current_plan() is None:
        captured, why = algorithm.captures.get(model, x, edge_index, kwargs, algorithm.composite, edges,
                                               algorithm.compile)
    ran = None if captured is None else captured.forward(x, edge_index, kwargs)
    if captured is not None and ran is None:  # (a capture for any graph whose layers lay out these edges otherwise)
        captured, why = None, "edges laid out otherwise than when captured for any graph: eager"
    if captured is not None:  # the forward rules on this graph, captured (and compiled by torch.compile)
        out, head, leaves = ran
        head = explained_of(captured.head, out, head, algorithm.model_config)
        start = start_of(out, head, target, index, algorithm.model_config, algorithm.explained)
        grads, edge_rel, kept = captured.backward(head, leaves, start)
        tally = Tally()
        tally.absorb("biases, constant terms and stabilisers", kept)
        mode = SimpleNamespace(tally=tally, detached=set(), explained_head=captured.head if head is not out else None)
        recorder = None if edge_rel is None else SimpleNamespace(record=edge_rel)
    else:  # (grouped: probes per row, whose gradients split the accounts by graph or target)
        mode = ForwardMode(algorithm.composite, model, rows=grouped)
        recorder = EdgeRecorder(mode, model, adjacency_edges(edge_index) if is_adjacency(edge_index) else edge_index,
                                x.dtype) if edges else None
        out, start, grads, head = propagate(
            model, mode, recorder, inputs, lambda: model(leaf, edge_index, **kwargs), target, index,
            algorithm.model_config, algorithm.explained, retain_graph=node_group is not None and not one_group)
    node_rel = grads[0] if grads[0] is not None else torch.zeros_like(leaf)
    attr_rel = None
    if len(inputs) > 1:
        attr_rel = grads[1] if grads[1] is not None else torch.zeros_like(inputs[1])
        if bool(start.any()) and not bool(attr_rel.any()):
            warnings.warn(NO_EDGE_ATTR_RELEVANCE, UserWarning, stacklevel=2)
    absorbed = mode.tally.total(mode.tally.absorbed)
    if one_group and start.dim() > 0 and start.shape[0] == 1:  # a single graph and output row: one account
        bias, residual = account_one(start, [node_rel, attr_rel], absorbed, mode.detached)
    else:
        lost = lost_relevance(start, [node_rel, attr_rel], absorbed, mode.detached)
        bias, residual = (torch.tensor(v, dtype=x.dtype, device=x.device) for v in (absorbed, lost))
        if one_group and node_group is None:
            node_group = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        if node_group is not None and start.dim() > 0:
            row_group = torch.arange(start.shape[0], device=start.device) if row_group is None else row_group
            groups = int(row_group.max()) + 1 if row_group.numel() else 0
            if groups and (not node_group.numel() or int(node_group.max()) < groups):
                edge_group = node_group[edge_index[1]] if attr_rel is not None else None
                bias, residual = account(head, inputs, start, [node_rel, attr_rel], mode.tally, recorder,
                                         node_group=node_group, row_group=row_group, num_groups=groups,
                                         edge_group=edge_group, row_groups=row_groups, split_losses=split_losses)
    extra = {"bias_relevance": bias, "relevance_residual": residual}
    if mode.explained_head is not None:
        extra["explained_output"] = f"the input of the model's final {mode.explained_head}"
    if attr_rel is not None:
        extra["edge_attr_relevance"] = attr_rel
    if algorithm.replay:
        extra.update(replayed=captured is not None, replay_reason=why)
    return node_rel, recorder.record if recorder is not None else None, out.detach(), extra


def propagate(model: nn.Module, mode: RelevanceMode, recorder, inputs: list, call: Callable, target, index,
              model_config: ModelConfig, explained: str = "logit", retain_graph: bool = False):
    """The forward ``call()`` (inside ``mode`` with ``inputs`` marked, message hooks recording into ``recorder``)
    and the backward from the explained output: (output, start relevance, relevance of each of ``inputs``, the
    explained output).  Refuses what relevance cannot pass through.  ``retain_graph``: for more backward passes;
    ``target``: class labels, or a function of the output giving them (:class:`~lrp_lib.explain.one_pass.OnePass`)."""
    if recorder is not None:
        ensure_hooks(model)
    with recording(recorder), torch.enable_grad(), mode:
        for t in inputs:
            mode.mark(t)
        out = call()
    if not isinstance(out, Tensor) or not mode.is_marked(out):
        raise ValueError("the model's output does not depend on x through autograd: model.forward detaches it "
                         "(.detach(), torch.no_grad(), .item(), numpy) or does not use x; relevance can only be "
                         "propagated through the model's autograd graph, so remove the detach")
    name, logits = mode.head_of(out) or (None, None)
    head = explained_of(name, out, logits, model_config)
    mode.explained_head = name if head is not out else None
    if recorder is not None:
        recorder.check()
    start = start_of(out, head, target, index, model_config, explained)
    grads = mode.tally.backward(head, inputs, start, retain_graph)
    check_blocked(mode.tally)
    return out, start, grads, head


def check_blocked(tally) -> None:
    """:class:`UnsupportedModelError` where relevance reached operations without a rule (``tally.blocked``)."""
    if blocked := {k: v for k, v in tally.blocked.items() if v != 0}:
        found = "; ".join(f"{k} (relevance of magnitude {v:.4g})" for k, v in blocked.items())
        raise UnsupportedModelError(f"relevance reached operations that LRP has no rule for: {found}. Replace them "
                                    "with supported torch operations, or explain with another method")
