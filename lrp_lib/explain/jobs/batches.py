"""One batch of graphs explained for :func:`lrp_lib.explain.jobs.explain_dataset` (:func:`backend_of`):
:class:`PyGBatch` for a PyTorch Geometric model (``LRPExplainer``), :class:`GraphBatch` for a model with its own
relevance entry point (``lrp_relevance_pass``, found by duck typing: the product never imports the teaching code).
Each gives per graph the target, the explained value and the bias share, per node and per edge the relevance.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from lrp_lib.explain.algorithm import LRPExplainer
from lrp_lib.explain.pyg_explainer import Explainer

__all__ = ["relevance_pass_of", "backend_of", "batch_explainer", "resolve_target", "rows_of", "PyGBatch", "GraphBatch"]


def relevance_pass_of(model: nn.Module):
    """The ``lrp_relevance_pass(model, batch)`` of the model or one of its modules (None: none): it returns the
    output and a function that, after the backward, reads the relevance (``node``, ``edge``, ``per_graph()``)."""
    entries = (getattr(type(module), "lrp_relevance_pass", None) for module in model.modules())
    return next((entry for entry in entries if callable(entry)), None)


def backend_of(model: nn.Module) -> str:
    """'graph' for a model with its own relevance entry point (:func:`relevance_pass_of`), else 'pyg'."""
    return "graph" if relevance_pass_of(model) is not None else "pyg"


def resolve_target(target_spec, batch, n_graphs: int, device, predicted):
    """The target class of each graph: ``predicted()`` for "prediction", ``data.y`` for "label", else the constant
    class ``target_spec``."""
    if target_spec == "prediction":
        return predicted()
    if target_spec == "label":
        return batch.y.view(-1).long()
    return torch.full((n_graphs,), target_spec, dtype=torch.long, device=device)


def rows_of(out, mode: str, n_graphs: int) -> Tensor:
    """The output ``out`` for ``n_graphs`` graphs, detached: ``(graphs, classes)`` for multiclass, else
    ``(graphs,)``.  Raises TypeError for an output that is not a tensor, ValueError for another shape."""
    if not isinstance(out, Tensor):
        raise TypeError(f"model: explain_dataset needs a model that returns a tensor, got {type(out).__name__}")
    out = out.detach()
    if out.dim() == 0 or out.shape[0] != n_graphs:
        raise ValueError(f"model: explain_dataset explains graph-level models (one output row per graph), but the "
                         f"model gave {tuple(out.shape)} for a batch of {n_graphs} graphs; node-level models "
                         "are not supported")
    if mode == "multiclass_classification":
        if out.dim() != 2:
            raise ValueError(f"mode='multiclass_classification' expects outputs of shape (graphs, classes), "
                             f"got {tuple(out.shape)}")
        return out
    if out.dim() == 2 and out.shape[1] == 1:
        out = out[:, 0]
    if out.dim() != 1:
        raise ValueError(f"mode={mode!r} expects one output per graph, got shape {tuple(out.shape)}; "
                         "use mode='multiclass_classification' for several columns")
    return out


class PyGBatch:
    """A PyG model: LRPExplainer through lrp_lib.explain.explainer.Explainer, explanation_type='phenomenon'."""

    def __init__(self, model, mode, rule):
        self.model, self.mode = model, mode
        # binary and regression: the raw output explained (mode 'regression'); target 0's relevance is exactly
        # minus target 1's (the backward is linear), so no prediction pass is needed
        inner = "multiclass_classification" if mode == "multiclass_classification" else "regression"
        self.explainer = Explainer(
            model, algorithm=LRPExplainer(rule="epsilon" if rule is None else rule, accounts="total"),
            explanation_type="phenomenon", node_mask_type="object", edge_mask_type="object",
            model_config=dict(mode=inner, task_level="graph", return_type="raw"))

    def __call__(self, batch, target_spec):
        n_graphs = int(batch.num_graphs)
        target = torch.zeros(n_graphs, dtype=torch.long, device=batch.x.device)
        if self.mode == "multiclass_classification":
            predicted = torch.no_grad()(lambda: self.model(batch.x, batch.edge_index, batch=batch.batch).argmax(-1))
            target = resolve_target(target_spec, batch, n_graphs, batch.x.device, predicted)
        seen = {}  # the output of the explaining forward pass
        with self.model.register_forward_hook(lambda module, args, output: seen.update(out=output)):
            explanation = self.explainer(batch.x, batch.edge_index, batch=batch.batch, target=target)
        out = rows_of(seen.get("out"), self.mode, n_graphs)
        node, edge = (r.detach().view(-1) for r in (explanation.node_relevance, explanation.edge_relevance))
        if self.mode == "multiclass_classification":
            value = out.gather(1, target.view(-1, 1)).view(-1)
        elif self.mode == "binary_classification":
            target = resolve_target(target_spec, batch, n_graphs, out.device, lambda: (out > 0).long())
            if target.numel() != n_graphs or bool(((target < 0) | (target > 1)).any()):
                raise ValueError("target='label' needs one label 0 or 1 per graph in data.y for "
                                 "mode='binary_classification'")
            sign = target.to(out.dtype) * 2 - 1
            value, node, edge = sign * out, node * sign[batch.batch], edge * sign[batch.batch[batch.edge_index[0]]]
        else:
            target = torch.full((n_graphs,), -1, dtype=torch.long, device=out.device)
            value = out
        node_sum = torch.zeros(n_graphs, dtype=node.dtype, device=node.device).index_add_(0, batch.batch, node)
        return target, value, value - node_sum, node, edge


class GraphBatch:
    """A model with its own relevance entry point: one forward in its relevance mode, one backward."""

    def __init__(self, model, mode):
        self.model, self.mode, self.entry = model, mode, relevance_pass_of(model)

    def __call__(self, batch, target_spec):
        raw, read = self.entry(self.model, batch)
        n_graphs = int(batch.num_graphs)
        out = rows_of(raw, self.mode, n_graphs)
        if self.mode == "multiclass_classification":
            target = resolve_target(target_spec, batch, n_graphs, out.device, lambda: out.argmax(-1))
            start = torch.zeros_like(out).scatter_(1, target.view(-1, 1), out.gather(1, target.view(-1, 1)))
            value = start.sum(1)
        elif self.mode == "binary_classification":
            target = resolve_target(target_spec, batch, n_graphs, out.device, lambda: (out > 0).long())
            value = start = (target.to(out.dtype) * 2 - 1) * out
        else:
            target = torch.full((n_graphs,), -1, dtype=torch.long, device=out.device)
            value = start = out
        raw.backward(start.view_as(raw))
        rel = read()
        node = rel.node if rel.node is not None else torch.zeros(batch.num_nodes, device=out.device)
        edge = rel.edge if rel.edge is not None else torch.zeros(batch.edge_index.shape[1], device=out.device)
        return target, value, value - rel.per_graph().to(value.dtype), node, edge


def batch_explainer(model: nn.Module, mode: str, rule):
    """A :class:`GraphBatch` (its layers carry the rules: ``rule`` unused) for a model with its own relevance
    entry point, else a :class:`PyGBatch`."""
    return GraphBatch(model, mode) if backend_of(model) == "graph" else PyGBatch(model, mode, rule)
