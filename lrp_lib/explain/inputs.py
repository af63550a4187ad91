"""The inputs checked before anything runs (:func:`check_inputs`, :func:`check_hetero_inputs`), each error naming
the argument and the fix; and what the explainer learns from the call it runs in."""
from __future__ import annotations

import sys
import warnings
from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch_geometric.explain import Explainer as PyGExplainer
from torch_geometric.nn import GCNConv
from torch_geometric.utils import add_remaining_self_loops

from lrp_lib.explain.mode import UnsupportedModelError
from lrp_lib.explain.mode.edges import adjacency_edges
from lrp_lib.explain.mode.hooks import bound
from lrp_lib.core.validation import (check_adjacency, check_batch, check_edge_index, check_edge_values,
                                     check_finite, check_model, check_node_features, is_adjacency)

__all__ = ["check_inputs", "check_dtype", "check_hetero_inputs", "checked_by_explainer", "inputs_checked",
           "explainer_training_flag", "uncompiled", "usable", "warn_training"]

_checked: ContextVar = ContextVar("checked", default=None)  # the inputs Explainer checked in this thread, just before


def check_inputs(model: nn.Module, x: Tensor, edge_index: Tensor, **kwargs) -> None:
    """Raise an error naming the argument (and the fix) unless the inputs can be explained.

    Checks that ``model`` is a module; ``x`` a finite floating point (num_nodes, num_features) tensor with at
    least one node, of the model's dtype; ``edge_index`` an integer (2, E) tensor (torch.long or torch.int32)
    within ``0 .. num_nodes - 1``, or a sparse (num_nodes, num_nodes) adjacency of finite values (an ``adj_t``,
    without ``edge_weight`` or ``edge_attr``); ``batch`` (if given) one graph id per node (edges joining two graphs
    are refused where per-graph accounts read them); ``edge_weight`` one finite value per edge (and GCN degrees
    that are not negative); ``edge_attr`` one finite row per edge; any other floating point tensor finite.

    :class:`LRPExplainer` runs it itself, but PyG's ``Explainer`` first runs a prediction pass of the unmodified
    model, where a bad input fails inside PyG (or gives NaN): call it first, with the same arguments, or use
    :class:`Explainer` (which calls it before that pass)::

        check_inputs(model, data.x, data.edge_index, batch=data.batch)
        explanation = explainer(data.x, data.edge_index, batch=data.batch)
    """
    check_model(model)
    x = check_node_features(x, "x")
    check_dtype(model, x, "x")
    if is_adjacency(edge_index):  # an adj_t: its values are the edge weights
        check_adjacency(edge_index, x.shape[0], "edge_index")
        for name in ("edge_weight", "edge_attr"):
            if kwargs.get(name) is not None:
                raise ValueError(f"{name} with a sparse adjacency as edge_index: the adjacency's values are the edge "
                                 f"weights; pass the edges as a (2, E) edge_index with {name} instead")
        edge_index = adjacency_edges(edge_index)
    else:
        edge_index = check_edge_index(edge_index, x.shape[0], "edge_index")
    for name, value in ((k, v) for k, v in kwargs.items() if v is not None):
        if name == "batch":
            check_batch(value, x.shape[0], None, "batch")
        elif name == "edge_weight":
            check_edge_values(value, edge_index.shape[1], "edge_weight", one_dimensional=True)
            _check_gcn_degree(model, x.shape[0], edge_index, value)
        elif name == "edge_attr":
            check_dtype(model, check_edge_values(value, edge_index.shape[1], "edge_attr"), "edge_attr")
        elif name == "edge_label_index":  # one link may come as a 1-D pair, as in PyG's examples
            one = isinstance(value, Tensor) and value.dim() == 1 and value.numel() == 2
            check_edge_index(value.view(2, 1) if one else value, x.shape[0], "edge_label_index")
        elif isinstance(value, Tensor):
            check_finite(value, name)


def check_dtype(model: nn.Module, value: Tensor, name: str) -> None:
    """Refuse, naming both, a floating-point input whose dtype differs from every floating-point parameter of
    ``model`` (float64 features into a float32 model), where torch would fail inside a layer."""
    if any(p.dtype == value.dtype for p in model.parameters() if p.is_floating_point()):
        return  # (the first parameter that matches ends the walk)
    if dtypes := {p.dtype for p in model.parameters() if p.is_floating_point()}:
        weights = " and ".join(sorted(str(d) for d in dtypes))
        raise TypeError(f"{name} is {value.dtype} but the model's weights are {weights}: convert the input "
                        f"({name}.to({weights.split(' and ')[0]})) or the model (model.to({value.dtype}))")


def warn_training(training: bool | None) -> None:
    """Warn if ``training``: the model was found in training mode by an explainer that explains it in eval mode."""
    if training:
        warnings.warn("the model is in training mode: it is explained in eval mode (dropout off, batch norm on "
                      "its running statistics), as PyG's Explainer predicts with it, and put back in training mode "
                      "afterwards; call model.eval() first to make this explicit", UserWarning, stacklevel=4)


def check_hetero_inputs(model: nn.Module, x: dict, edge_index: dict, **kwargs) -> None:
    """:func:`check_inputs` for a heterogeneous graph: ``x`` a dict of node type -> features (of the model's dtype),
    ``edge_index`` a dict of (source type, relation, target type) -> (2, E) tensor, ``edge_attr`` (if a dict) one
    finite row per edge of an edge type of ``edge_index``."""
    check_model(model)
    if not isinstance(edge_index, dict):
        raise TypeError(f"x is a dict (a heterogeneous graph), so edge_index must be a dict of edge type -> "
                        f"(2, E) tensor, got {type(edge_index).__name__}")
    for node_type, value in x.items():
        check_dtype(model, check_node_features(value, f"x[{node_type!r}]"), f"x[{node_type!r}]")
    for edge_type, value in edge_index.items():
        if not isinstance(edge_type, tuple) or len(edge_type) != 3 or edge_type[0] not in x or edge_type[2] not in x:
            raise ValueError(f"edge_index has the key {edge_type!r}: edge types must be (source type, relation, "
                             f"target type) with both node types in x ({sorted(x)})")
        check_edge_index(value, max(x[edge_type[0]].shape[0], x[edge_type[2]].shape[0]), f"edge_index[{edge_type!r}]")
    edge_attr = kwargs.get("edge_attr")
    for edge_type, value in (edge_attr.items() if isinstance(edge_attr, dict) else ()):
        if edge_type not in edge_index:
            raise ValueError(f"edge_attr has the key {edge_type!r}, which is not an edge type of edge_index "
                             f"({sorted(edge_index)})")
        check_edge_values(value, edge_index[edge_type].shape[1], f"edge_attr[{edge_type!r}]")


def _check_gcn_degree(model: nn.Module, n: int, edge_index: Tensor, edge_weight: Tensor) -> None:
    """GCN's normalisation :math:`\\hat d^{-1/2}` is NaN where edge weights make a node's weighted degree
    (self-loop included, as ``gcn_norm`` adds it) negative: say so, naming the node, instead of a NaN relevance."""
    conv = next((m for m in model.modules() if isinstance(m, GCNConv) and m.normalize), None)
    if conv is None:
        return
    edge_index, w = edge_index.long(), edge_weight.detach().to(torch.float64)
    if conv.add_self_loops:
        edge_index, w = add_remaining_self_loops(edge_index, w, 2.0 if conv.improved else 1.0, n)
    deg = torch.zeros(n, dtype=torch.float64, device=w.device).index_add_(0, edge_index[1], w)
    if bool((deg < 0).any()):
        node = int((deg < 0).nonzero()[0, 0])
        raise ValueError(
            f"GCNConv: edge_weight gives node {node} a negative weighted degree ({float(deg[node]):.4g}), and "
            f"GCN's normalisation deg^-1/2 is NaN there: PyG's own GCNConv output is NaN too. Use non-negative "
            f"edge_weight (or weights whose sum per receiving node, self-loop included, is >= 0)")


def checked_by_explainer(x, edge_index) -> bool:
    """Whether :class:`~lrp_lib.explain.explainer.Explainer` checked these very tensors just before."""
    done = _checked.get()
    return done is not None and done[0] is x and done[1] is edge_index


def explainer_training_flag(model: nn.Module) -> bool | None:
    """The training flag that PyG's ``Explainer.__call__`` saved before putting ``model`` in eval mode (its local
    ``training``), found on the call stack; None if not called from there."""
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


def inputs_checked(x, edge_index):
    """Inside the block, :func:`checked_by_explainer` is true for these very tensors (None: for none)."""
    return bound(_checked, None if x is None else (x, edge_index))


def usable(t):
    """``t`` with every inference-mode tensor in it (a tensor or a dict of them) copied to a normal one."""
    if isinstance(t, Tensor):
        return t.clone() if t.is_inference() else t
    if isinstance(t, dict):
        return {k: usable(v) for k, v in t.items()}
    return t


def uncompiled(model: nn.Module) -> nn.Module:
    """The module that ``torch.compile(model)`` wraps (the same parameters), whose own ``forward`` is explained; a
    submodule compiled in place, which would run neither the rules nor PyG's message hooks, is refused by name."""
    if isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        model = model._orig_mod
    for name, module in model.named_modules():
        if isinstance(module, torch._dynamo.eval_frame.OptimizedModule) or \
                getattr(module, "_compiled_call_impl", None) is not None:
            where = f"its submodule {name!r}" if name else "it"
            raise UnsupportedModelError(
                f"model: {where} was compiled in place (torch.compile of a submodule, or Module.compile()), and a "
                f"compiled program runs neither the rules nor PyG's message hooks: explain the uncompiled model "
                f"(torch.compile(model) of the whole model is fine: its original module is explained)")
    return model
