"""Checks of user input shared by lrp_lib's entry points: each error names the argument at fault and the fix.

``num_nodes`` is the number of rows of the node features; an ``edge_index`` has shape (2, E), row 0 the senders
and row 1 the receivers, and dtype torch.long or torch.int32 (as PyG accepts); an index is returned as torch.long.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from lrp_lib.core.stabilizer import all_finite

__all__ = ["INDEX_DTYPES", "check_model", "check_number", "check_finite", "check_index_dtype", "check_edge_index",
           "is_adjacency", "check_adjacency", "check_node_features", "check_batch", "check_edge_values"]

#: Integer dtypes accepted as an index (PyG accepts both for ``edge_index``).
INDEX_DTYPES = (torch.long, torch.int32)


def check_model(model) -> None:
    """Raise TypeError unless ``model`` is a ``torch.nn.Module``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def check_number(value, name: str, minimum: float = 0.0) -> float:
    """``value`` (an epsilon, a gamma, ...) as a float, after checking that it is a finite real number ``>= minimum``
    (NaN would make every relevance NaN, an infinite stabiliser would absorb all of it)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= minimum \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def check_finite(t: Tensor, name: str) -> None:
    """Raise a ValueError if the floating point tensor ``t`` contains NaN or Inf, saying how many and where."""
    if not isinstance(t, Tensor) or not t.is_floating_point() or all_finite(t.detach()):
        return
    nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    first = tuple(int(i) for i in (~torch.isfinite(t)).nonzero()[0])
    raise ValueError(f"{name} contains {nan} NaN and {inf} Inf value(s) (the first at {first}), so the explanation "
                     f"would be NaN; replace them (e.g. torch.nan_to_num({name})) or remove those entries")


def check_index_dtype(index, name: str = "index") -> Tensor:
    """``index`` as torch.long, after checking that it is a torch.long or torch.int32 tensor (TypeError)."""
    if not isinstance(index, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.long, got {type(index).__name__}")
    if index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have an integer dtype (torch.long or torch.int32), got {index.dtype}; "
                        f"convert it with {name}.long()")
    return index.long() if index.dtype != torch.long else index


def check_edge_index(edge_index, num_nodes: int, name: str = "edge_index") -> Tensor:
    """``edge_index`` as torch.long, after checking its type (TypeError), its shape (2, E) (ValueError) and that it
    only refers to nodes ``0 .. num_nodes - 1`` (IndexError)."""
    sparse = edge_index.layout if isinstance(edge_index, Tensor) else type(edge_index).__name__
    if sparse == "SparseTensor" or isinstance(edge_index, Tensor) and sparse != torch.strided:
        raise TypeError(f"{name} must be a dense (2, E) tensor (senders, receivers), got a sparse adjacency "
                        f"({sparse}); pass the edges instead: for an adj_t (PyG's ToSparseTensor, row = receiver) "
                        f"torch_geometric.utils.to_edge_index(adj_t)[0].flip(0)")
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (2, E) (senders, receivers), "
                        f"got {type(edge_index).__name__}")
    edge_index = check_index_dtype(edge_index, name)
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        hint = (f"it looks transposed: pass {name}.t()" if edge_index.dim() == 2 and edge_index.shape[1] == 2
                else "row 0 the senders, row 1 the receivers")
        raise ValueError(f"{name} must have shape (2, E), got {tuple(edge_index.shape)}; {hint}")
    if edge_index.numel():
        low, high = torch.stack(torch.aminmax(edge_index)).tolist()
        if low < 0 or high >= num_nodes:
            raise IndexError(f"{name} refers to nodes {low}..{high} but the graph has {num_nodes} nodes "
                             f"(valid: 0..{num_nodes - 1}); check that {name} belongs to these node features")
    return edge_index


def is_adjacency(t) -> bool:
    """Whether ``t`` is a torch sparse tensor (COO, CSR or CSC): an adjacency given in place of ``edge_index``."""
    return isinstance(t, Tensor) and t.layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


def check_adjacency(adj: Tensor, num_nodes: int, name: str = "edge_index") -> Tensor:
    """``adj``, after checking that this sparse adjacency (PyG's ``adj_t``: row ``i``, what node ``i`` receives) is
    square over the ``num_nodes`` nodes (ValueError) with finite floating-point values (TypeError, ValueError)."""
    if adj.dim() != 2 or tuple(adj.shape) != (num_nodes, num_nodes):
        raise ValueError(f"{name} is a sparse adjacency of shape {tuple(adj.shape)}, but the graph has {num_nodes} "
                         f"nodes: it must have shape ({num_nodes}, {num_nodes})")
    values = adj.coalesce().values() if adj.layout == torch.sparse_coo else adj.values()
    if not values.is_floating_point():
        raise TypeError(f"{name} is a sparse adjacency of {values.dtype} values: the values are edge weights, "
                        f"make them floating point ({name}.float())")
    check_finite(values, f"{name}'s values")
    return adj


def check_node_features(x, name: str = "x") -> Tensor:
    """``x``, after checking that it is a finite floating point (num_nodes, num_features) tensor with a node."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of node features (num_nodes, num_features), "
                        f"got {type(x).__name__} (heterogeneous graphs are not supported)")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating point tensor, got {x.dtype}; convert it with {name}.float()")
    if x.dim() != 2:
        hint = f"; for one feature per node pass {name}.unsqueeze(-1)" if x.dim() == 1 else ""
        raise ValueError(f"{name} must be 2-D (num_nodes, num_features), got shape {tuple(x.shape)}{hint}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} has no nodes (shape {tuple(x.shape)}): the graph is empty, there is nothing "
                         f"to explain")
    check_finite(x, name)
    return x


def check_batch(batch, num_nodes: int, edge_index: Tensor | None = None, name: str = "batch",
                fix: str | None = None) -> Tensor:
    """``batch`` as torch.long, after checking that it has one non-negative graph id per node and, given
    ``edge_index`` (long, in range), that no edge joins two graphs (relevance is read per graph)."""
    batch = check_index_dtype(batch, name)
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"{name} must be 1-D with one graph id per node ({num_nodes}), got shape {tuple(batch.shape)}")
    if batch.numel() and int(batch.min()) < 0:
        raise ValueError(f"{name} contains the negative graph id {int(batch.min())}")
    if edge_index is not None and edge_index.numel():
        cross = batch[edge_index[0]] != batch[edge_index[1]]
        if bool(cross.any()):
            k = int(cross.nonzero()[0, 0])
            s, r = int(edge_index[0, k]), int(edge_index[1, k])
            raise ValueError(f"{name} puts the two ends of {int(cross.sum())} edge(s) in different graphs (the "
                             f"first: edge {k}, {s} -> {r}, graphs {int(batch[s])} and {int(batch[r])}); the graphs "
                             "of a batch must not share edges: " +
                             (fix or f"fix {name} (torch_geometric.data.Batch builds a consistent one)"))
    return batch


def check_edge_values(values, num_edges: int, name: str, one_dimensional: bool = False) -> Tensor:
    """``values`` (``edge_weight``: 1-D; ``edge_attr``: rows), after checking that it is a finite floating point
    tensor with one row per edge (TypeError, ValueError)."""
    if not isinstance(values, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor with one row per edge, got {type(values).__name__}")
    if not values.is_floating_point():
        raise TypeError(f"{name} must be a floating point tensor, got {values.dtype}; use {name}.float()")
    if one_dimensional and values.dim() != 1:
        raise ValueError(f"{name} must be 1-D with one value per edge ({num_edges}), got shape {tuple(values.shape)}")
    if values.dim() == 0 or values.shape[0] != num_edges:
        raise ValueError(f"{name} has {values.shape[0] if values.dim() else 0} rows but edge_index has "
                         f"{num_edges} edges: one row per edge (column of edge_index)")
    check_finite(values, name)
    return values
