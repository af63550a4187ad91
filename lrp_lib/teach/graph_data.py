"""Reading a graph for the Graph Network layers of :mod:`lrp_lib.teach.graph`.

A graph is a PyG ``Data`` or ``Batch`` with MetaLayer's names (``x``, ``edge_attr``, ``u``,
``edge_index``, ``batch``). Each function checks one thing and names the layer that asked, so
an error says which layer of a model met which bad attribute.
"""
from __future__ import annotations

import copy

import torch
from torch import Tensor

from lrp_lib.core.validation import check_batch, check_edge_index, check_finite

__all__ = ["ATTRIBUTES", "check_graph", "features", "edge_index_of", "node_count", "batch_of", "num_graphs",
           "check_batch_vs_graphs", "check_rows", "replace_attribute"]

#: The three feature sets of a graph and what they describe.
ATTRIBUTES = {"x": "node", "edge_attr": "edge", "u": "global"}


def check_graph(data, layer: str) -> None:
    if not (hasattr(data, "get") and hasattr(data, "num_nodes") and hasattr(data, "__copy__")):
        raise TypeError(f"{layer} expects a torch_geometric Data or Batch, got {type(data).__name__}")


def features(data, name: str, size: int, layer: str) -> Tensor:
    """``data.<name>`` checked to be a 2-D float tensor with ``size`` columns."""
    t = data.get(name)
    if t is None:
        raise ValueError(
            f"{layer} is configured to read {name} ({ATTRIBUTES[name]} features of size {size}) "
            f"but the graph has no {name}"
        )
    if not isinstance(t, Tensor) or not t.is_floating_point():
        got = t.dtype if isinstance(t, Tensor) else type(t).__name__
        raise TypeError(f"{layer}: {name} must be a floating point tensor, got {got}")
    if t.dim() != 2:
        raise ValueError(f"{layer}: {name} must be 2-D (rows x features), got shape {tuple(t.shape)}")
    if t.shape[1] != size:
        raise ValueError(
            f"{layer} expects {name} with {size} features, but {name} has {t.shape[1]} "
            f"(shape {tuple(t.shape)})"
        )
    try:
        check_finite(t, name)
    except ValueError as e:
        raise ValueError(f"{layer}: {e}") from None
    return t


def edge_index_of(data, layer: str, num_nodes: int) -> Tensor:
    edge_index = data.get("edge_index")
    if edge_index is None:
        raise ValueError(f"{layer} needs edge_index (2 x E, senders then receivers) but the graph has none")
    try:
        return check_edge_index(edge_index, num_nodes)
    except (TypeError, ValueError, IndexError) as e:
        raise type(e)(f"{layer}: {e}") from None


def node_count(data) -> int:
    x = data.get("x")
    if isinstance(x, Tensor) and x.dim() >= 1:
        return x.shape[0]
    n = data.num_nodes
    return 0 if n is None else int(n)


def batch_of(data, layer: str, num_nodes: int, device) -> Tensor:
    """``data.batch``, or all zeros (one graph) when the graph has no ``batch``."""
    batch = data.get("batch")
    if batch is None:
        return torch.zeros(num_nodes, dtype=torch.long, device=device)
    if not isinstance(batch, Tensor) or batch.dtype != torch.long or batch.dim() != 1:
        raise TypeError(f"{layer}: batch must be a 1-D torch.long tensor")
    if batch.numel() != num_nodes:
        raise ValueError(f"{layer}: batch has {batch.numel()} entries but the graph has {num_nodes} nodes")
    edge_index = data.get("edge_index")
    if isinstance(edge_index, Tensor):  # the graphs must not share edges (relevance is read per graph)
        try:
            check_batch(batch, num_nodes, check_edge_index(edge_index, num_nodes))
        except (TypeError, ValueError, IndexError) as e:
            raise type(e)(f"{layer}: {e}") from None
    return batch


def num_graphs(data) -> int:
    """Number of graphs in ``data``: the rows of ``u`` if it has one, else ``data.num_graphs``
    (a Batch), else ``batch.max() + 1``, else 1."""
    u = data.get("u")
    if isinstance(u, Tensor) and u.dim() >= 1:
        return u.shape[0]
    if hasattr(type(data), "num_graphs"):  # Batch
        return int(data.num_graphs)
    batch = data.get("batch")
    if isinstance(batch, Tensor):
        return int(batch.max()) + 1 if batch.numel() else 0
    return 1


def check_batch_vs_graphs(batch: Tensor, graphs: int, layer: str) -> None:
    if batch.numel() and int(batch.max()) >= graphs:
        raise ValueError(
            f"{layer}: batch refers to graph {int(batch.max())} but u has {graphs} rows (one per graph)"
        )


def check_rows(t: Tensor, name: str, rows: int, what: str, layer: str) -> None:
    if t.shape[0] != rows:
        raise ValueError(f"{layer}: {name} has {t.shape[0]} rows but the graph has {rows} {what}")


def replace_attribute(data, name: str, value: Tensor):
    out = copy.copy(data)  # shallow: the other attributes are the same tensors
    setattr(out, name, value)
    return out
