"""lrp_lib.explain.jobs.batches: which way a batch is explained, and the rows it gives."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from lrp_lib.explain.jobs.batches import (GraphBatch, PyGBatch, backend_of, batch_explainer, relevance_pass_of,
                                         resolve_target, rows_of)


def test_a_model_with_its_own_relevance_entry_point_takes_the_graph_backend():
    from lrp_lib.teach import graph
    layer = graph.NodeReLU()
    assert backend_of(torch.nn.Sequential(layer)) == "graph"
    assert backend_of(torch.nn.Sequential(torch.nn.Linear(2, 2))) == "pyg"
    assert relevance_pass_of(torch.nn.Sequential(layer)) is graph.relevance_pass
    assert isinstance(batch_explainer(torch.nn.Sequential(layer), "regression", None), GraphBatch)


def test_rows_of_checks_the_output_shape():
    assert rows_of(torch.ones(3, 1), "regression", 3).shape == (3,)
    assert rows_of(torch.ones(3, 4), "multiclass_classification", 3).shape == (3, 4)
    with pytest.raises(ValueError, match="one output row per graph"):
        rows_of(torch.ones(5, 1), "regression", 3)
    with pytest.raises(ValueError, match="use mode='multiclass_classification' for several columns"):
        rows_of(torch.ones(3, 2), "binary_classification", 3)
    with pytest.raises(TypeError, match="returns a tensor"):
        rows_of((torch.ones(3),), "regression", 3)


def test_targets():
    batch = Batch.from_data_list([Data(x=torch.ones(1, 1), y=torch.tensor([2])),
                                  Data(x=torch.ones(1, 1), y=torch.tensor([0]))])
    assert resolve_target("label", batch, 2, "cpu", None).tolist() == [2, 0]
    assert resolve_target(1, batch, 2, "cpu", None).tolist() == [1, 1]
    assert resolve_target("prediction", batch, 2, "cpu", lambda: torch.tensor([5, 6])).tolist() == [5, 6]


class Sum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1, bias=False)

    def forward(self, x, edge_index, batch=None):
        from torch_geometric.nn import global_add_pool
        return self.lin(global_add_pool(x, batch))


def test_pyg_batch_rows_conserve_per_graph():
    torch.manual_seed(0)
    model = Sum().double().eval()
    graphs = [Data(x=torch.rand(n, 2, dtype=torch.float64), edge_index=torch.zeros(2, 0, dtype=torch.long))
              for n in (2, 3)]
    batch = Batch.from_data_list(graphs)
    explain = batch_explainer(model, "regression", None)
    assert isinstance(explain, PyGBatch)
    target, value, bias, node, edge = explain(batch, "prediction")
    assert target.tolist() == [-1, -1] and edge.numel() == 0
    torch.testing.assert_close(value, model(batch.x, batch.edge_index, batch.batch).view(-1).detach())
    # a bias-free linear model: the nodes hold each graph's output, up to the stabiliser
    per_graph = torch.zeros(2, dtype=torch.float64).index_add(0, batch.batch, node)
    torch.testing.assert_close(per_graph, value, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(bias, value - per_graph)
