"""lrp_lib.teach.graph_relevance: reading relevance per node, edge and graph."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from lrp_lib.teach.graph import NodeLinear
from lrp_lib.teach.graph_relevance import GraphRelevance, read_relevance, relevance_inputs, relevance_pass


def test_totals_and_per_graph_by_hand():
    r = GraphRelevance(node=torch.tensor([1.0, 2.0, 3.0]), edge=torch.tensor([0.5, -1.0]),
                       graph=torch.tensor([10.0, 20.0]), node_graph=torch.tensor([0, 1, 1]),
                       edge_graph=torch.tensor([1, 0]), num_graphs=2)
    assert r.totals() == {"nodes": 6.0, "edges": -0.5, "globals": 30.0, "total": 35.5}
    assert r.per_graph().tolist() == [1.0 - 1.0 + 10.0, 2.0 + 3.0 + 0.5 + 20.0]


def test_relevance_pass_conserves_per_graph():
    torch.manual_seed(0)
    graphs = [Data(x=torch.rand(n, 3, dtype=torch.float64), edge_index=torch.tensor([[0, 1], [1, 0]]),
                   edge_attr=torch.rand(2, 2, dtype=torch.float64)) for n in (2, 3)]
    data = Batch.from_data_list(graphs)
    layer = NodeLinear(1, node_features=3, incoming_features=2, bias=False, eps=0.0).double()
    out, read = relevance_pass(layer, data)
    out.x.backward(out.x.detach())
    rel = read()
    assert data.x.grad is None  # the caller's graph is untouched: the pass worked on leaves of a copy
    per_graph = torch.zeros(2, dtype=torch.float64).index_add(0, data.batch, out.x.detach().view(-1))
    torch.testing.assert_close(rel.per_graph(), per_graph)


def test_inputs_are_fresh_leaves_and_bad_attributes_refused():
    data = Data(x=torch.rand(2, 1), edge_index=torch.tensor([[0], [1]]))
    inp = relevance_inputs(data, attributes=("x",))
    assert inp.x.requires_grad and inp.x.is_leaf and not data.x.requires_grad
    with pytest.raises(ValueError, match="attributes may contain"):
        relevance_inputs(data, attributes=("pos",))
    with pytest.raises(ValueError, match="none of x, edge_attr, u requires grad"):
        read_relevance(data)
