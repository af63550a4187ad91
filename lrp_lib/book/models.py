"""The architectures of the book's trained models whose weights more than one page uses.

Chapter 5 trains :class:`MutagenicityGCN` on Mutagenicity, chapter 7 :class:`SolubilityGN` on
ESOL and the quick start :class:`HousesGCN` on generated houses; their weights are stored in
``lrp_lib/book/weights`` (``"mutagenicity-gcn"``, ``"esol-gn"``, ``"quickstart-ba-houses-gcn"``, read
by :func:`lrp_lib.book.pretrained.load_or_train`). The quick start writes its model out in full, as a
reader writes their own. Later pages (relevant walks, explaining a data set)
and the benchmarks load those weights into these same classes, so the architecture is written once,
here; loading is strict, so a class that drifted from its weights is an error, not a different model.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, global_mean_pool

from lrp_lib.teach import graph
from lrp_lib.book.datasets.esol import EDGE_FEATURES, NODE_FEATURES

__all__ = ["MutagenicityGCN", "SolubilityGN", "HousesGCN"]


class MutagenicityGCN(nn.Module):
    """Four ``GCNConv`` layers with ReLU, a global mean pool, dropout and two linear layers.

    One output per graph, a logit: positive means "nonmutagen" (label 1). ``edge_weight`` is
    optional (the gradient explainers use it as a differentiable edge mask).
    """

    def __init__(self, in_features: int, hidden: int = 64):
        super().__init__()
        self.gc1 = GCNConv(in_features, hidden)
        self.gc2 = GCNConv(hidden, hidden)
        self.gc3 = GCNConv(hidden, hidden)
        self.gc4 = GCNConv(hidden, hidden)
        self.pre_head = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 1)  # binary classification: one logit

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        x = F.relu(self.gc1(x, edge_index, edge_weight))
        x = F.relu(self.gc2(x, edge_index, edge_weight))
        x = F.relu(self.gc3(x, edge_index, edge_weight))
        x = F.relu(self.gc4(x, edge_index, edge_weight))
        x = global_mean_pool(x, batch)  # one row per graph
        x = F.dropout(x, p=0.5, training=self.training)
        return self.head(self.pre_head(x))


class SolubilityGN(nn.Module):
    """Encoder, two message-passing blocks (sum aggregation), sum read-out to one number per molecule.

    Built from :mod:`lrp_lib.teach.graph` layers on the features of :mod:`lrp_lib.book.datasets.esol`; all
    layers but the read-out are bias-free, so only the read-out's bias takes relevance away from
    the atoms and bonds.
    """

    def __init__(self, hidden: int = 32, edge_hidden: int = 16, blocks: int = 2):
        super().__init__()
        self.encode = nn.Sequential(
            graph.EdgeLinear(edge_hidden, edge_features=len(EDGE_FEATURES), bias=False), graph.EdgeReLU(),
            graph.NodeLinear(hidden, node_features=len(NODE_FEATURES), bias=False), graph.NodeReLU())
        layers = []
        for _ in range(blocks):
            layers += [
                graph.EdgeLinear(edge_hidden, edge_features=edge_hidden, sender_features=hidden, bias=False),
                graph.EdgeReLU(),
                graph.NodeLinear(hidden, node_features=hidden, incoming_features=edge_hidden, aggregation="sum",
                                 bias=False),
                graph.NodeReLU()]
        self.blocks = nn.Sequential(*layers)
        self.readout = graph.GlobalLinear(1, node_features=hidden, aggregation="sum", bias=True)

    def forward(self, data) -> torch.Tensor:
        return self.readout(self.blocks(self.encode(data))).u.view(-1)  # u: one row per molecule


class HousesGCN(nn.Module):
    """The quick start's model: three ``GCNConv`` layers with ReLU and a linear head, ending in
    ``log_softmax`` as PyG's examples do; :meth:`logits` gives what LRP explains."""

    def __init__(self, features: int = 1, hidden: int = 20, classes: int = 4):
        super().__init__()
        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.conv3 = GCNConv(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def logits(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        x = self.conv3(x, edge_index).relu()
        return self.head(x)

    def forward(self, x, edge_index):
        return self.logits(x, edge_index).log_softmax(-1)
