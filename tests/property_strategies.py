"""Hypothesis strategies shared by the property-based tests (tests/*/test_properties_*.py).

Graphs are drawn as a *spec* (node count, edge list, a seed for the features) and turned into
tensors of a chosen dtype, so one drawn graph can be explained in float32 and in float64 alike.
Edge lists may be empty, may leave nodes isolated, may contain self-loops and repeated edges,
as PyG allows.  Features come from continuous distributions (no two nodes share a value, so the
winner of a max aggregation is unique).  Models are drawn from the zoo LRPExplainer supports.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import (MLP, GCNConv, GINConv, GraphConv, SAGEConv, global_add_pool,
                                global_max_pool, global_mean_pool)

FEATURES = 3
DTYPES = {"float32": torch.float32, "float64": torch.float64}


# ------------------------------------------------------------------ graphs
@dataclass(frozen=True)
class GraphSpec:
    nodes: int
    edges: tuple[tuple[int, int], ...]
    seed: int
    signed: bool  # features of both signs (else in [0, 1), as after a ReLU)

    def tensors(self, dtype=torch.float64, features=FEATURES, edge_features=0, globals_=0):
        """(x, edge_index, edge_attr or None, u or None) drawn from ``seed``, cast to ``dtype``."""
        g = torch.Generator().manual_seed(self.seed)

        def draw(*shape):
            t = torch.randn(*shape, generator=g, dtype=torch.float64) if self.signed else \
                torch.rand(*shape, generator=g, dtype=torch.float64)
            return t.to(dtype)

        x = draw(self.nodes, features)
        edge_index = torch.tensor(self.edges, dtype=torch.long).view(-1, 2).t().contiguous()
        edge_attr = draw(len(self.edges), edge_features) if edge_features else None
        u = draw(1, globals_) if globals_ else None
        return x, edge_index, edge_attr, u

    def data(self, dtype=torch.float64, **kw) -> Data:
        x, edge_index, edge_attr, u = self.tensors(dtype, **kw)
        d = Data(x=x, edge_index=edge_index)
        if edge_attr is not None:
            d.edge_attr = edge_attr
        if u is not None:
            d.u = u
        return d


@st.composite
def graph_specs(draw, min_nodes=1, max_nodes=7, max_edges_per_node=3, unique_edges=False, min_edges=0):
    """A graph with 0..3n directed edges (self-loops and isolated nodes included)."""
    n = draw(st.integers(min_nodes, max_nodes))
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
    edges = draw(st.lists(pair, min_size=min_edges, max_size=max(min_edges, max_edges_per_node * n),
                          unique=unique_edges))
    return GraphSpec(n, tuple(edges), draw(st.integers(0, 2**31 - 1)), draw(st.booleans()))


def batch_of(specs, dtype=torch.float64, **kw) -> Batch:
    return Batch.from_data_list([s.data(dtype, **kw) for s in specs])


@st.composite
def permutations(draw, n: int) -> torch.Tensor:
    """A permutation of range(n) as a long tensor (new node j is old node perm[j])."""
    return torch.tensor(draw(st.permutations(list(range(n)))), dtype=torch.long).view(n)


# ------------------------------------------------------------------ the zoo
POOLS = {"add": global_add_pool, "mean": global_mean_pool, "max": global_max_pool}
WEIGHTED = ("gcn", "gcn-no-loops", "gcn-improved", "gcn-unnormalised", "graphconv-add",
            "graphconv-mean", "graphconv-max")  # take an edge_weight
CONVS = {
    "gcn": lambda i, o, b: GCNConv(i, o, bias=b),
    "gcn-no-loops": lambda i, o, b: GCNConv(i, o, bias=b, add_self_loops=False),
    "gcn-improved": lambda i, o, b: GCNConv(i, o, bias=b, improved=True),
    "gcn-unnormalised": lambda i, o, b: GCNConv(i, o, bias=b, normalize=False),
    "graphconv-add": lambda i, o, b: GraphConv(i, o, aggr="add", bias=b),
    "graphconv-mean": lambda i, o, b: GraphConv(i, o, aggr="mean", bias=b),
    "graphconv-max": lambda i, o, b: GraphConv(i, o, aggr="max", bias=b),
    "sage-mean": lambda i, o, b: SAGEConv(i, o, aggr="mean", bias=b),
    "sage-add": lambda i, o, b: SAGEConv(i, o, aggr="add", bias=b),
    "sage-max": lambda i, o, b: SAGEConv(i, o, aggr="max", bias=b),
    "sage-no-root": lambda i, o, b: SAGEConv(i, o, aggr="mean", bias=b, root_weight=False),
    "gin-seq": lambda i, o, b: GINConv(nn.Sequential(nn.Linear(i, o, bias=b), nn.ReLU(),
                                                     nn.Linear(o, o, bias=b)), train_eps=True),
    "gin-mlp": lambda i, o, b: GINConv(MLP([i, o, o], norm=None, bias=b)),
    "gin-max": lambda i, o, b: GINConv(nn.Sequential(nn.Linear(i, o, bias=b)), aggr="max"),
}
MAX_FREE = [c for c in CONVS if not c.endswith("max")]


@dataclass(frozen=True)
class ModelSpec:
    conv: str
    layers: int
    hidden: int
    pool: str
    deep_head: bool
    bias: bool
    out: int
    seed: int
    gin_eps: float

    def build(self, dtype=torch.float64, features=FEATURES) -> "ZooNet":
        torch.manual_seed(self.seed)
        model = ZooNet(self, features).to(dtype).eval()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, GINConv):
                    m.eps.fill_(self.gin_eps)
        return model


class ZooNet(nn.Module):
    """conv -> ReLU (x layers) -> pool -> Linear [-> ReLU -> Linear], the ReLUs written in the
    three ways users write them (F.relu, Tensor.relu, nn.ReLU).  ``pool=None`` keeps it node-level."""

    def __init__(self, spec: ModelSpec, features: int):
        super().__init__()
        self.spec = spec
        sizes = [features] + [spec.hidden] * spec.layers
        self.convs = nn.ModuleList(CONVS[spec.conv](i, o, spec.bias) for i, o in zip(sizes, sizes[1:]))
        self.act = nn.ReLU()
        self.pool = POOLS.get(spec.pool)
        head = [nn.Linear(spec.hidden, spec.out, bias=spec.bias)]
        if spec.deep_head:
            head = [nn.Linear(spec.hidden, spec.hidden, bias=spec.bias), nn.ReLU(), *head]
        self.head = nn.Sequential(*head)

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        for k, conv in enumerate(self.convs):
            h = conv(x, edge_index, edge_weight) if self.spec.conv in WEIGHTED else conv(x, edge_index)
            x = (F.relu(h), h.relu(), self.act(h))[k % 3]
        if self.pool is not None:
            x = self.pool(x, batch)
        return self.head(x)


@st.composite
def model_specs(draw, convs=tuple(CONVS), bias=None, pools=("add", "mean", "max"), out=None):
    return ModelSpec(
        conv=draw(st.sampled_from(list(convs))), layers=draw(st.integers(1, 2)),
        hidden=draw(st.integers(2, 5)), pool=draw(st.sampled_from(list(pools))),
        deep_head=draw(st.booleans()), bias=draw(st.booleans()) if bias is None else bias,
        out=draw(st.integers(1, 3)) if out is None else out, seed=draw(st.integers(0, 2**31 - 1)),
        gin_eps=draw(st.sampled_from([0.0, 0.3, -0.4, 1.5])))


def scale(*tensors) -> float:
    """The size of an explanation, for tolerances: 1 + the largest sum of |values|."""
    return 1.0 + max((float(t.abs().sum()) for t in tensors if t is not None and t.numel()), default=0.0)


TOL = {torch.float64: 1e-9, torch.float32: 1e-4}  # relative to scale(): rounding only
