"""The quick start's graph: PyG's ``ExplainerDataset`` with 80 five-node houses on a Barabási-Albert
graph of 300 nodes, every feature 1, generated with the seeds the quick start uses."""
from __future__ import annotations

import torch
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.datasets import ExplainerDataset
from torch_geometric.datasets.graph_generator import BAGraph

__all__ = ["ba_houses"]


def ba_houses() -> tuple[Data, torch.Tensor, torch.Tensor]:
    """``(data, train_nodes, test_nodes)``: the graph (``x`` all ones, ``y`` the place in a house,
    0 off the houses, ``in_house`` the ground truth of each edge), and the quick start's split
    (560 training nodes, the rest for testing). Seeds Python's, NumPy's and torch's generators."""
    seed_everything(0)
    generated = ExplainerDataset(graph_generator=BAGraph(num_nodes=300, num_edges=5),
                                 motif_generator="house", num_motifs=80)[0]
    data = Data(x=torch.ones(generated.num_nodes, 1), edge_index=generated.edge_index, y=generated.y,
                in_house=generated.edge_mask.bool())
    order = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
    return data, order[:560], order[560:]
