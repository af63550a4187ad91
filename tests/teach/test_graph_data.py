"""lrp_lib.teach.graph_data: each check of a graph names the layer that asked and the attribute."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from lrp_lib.teach.graph_data import (batch_of, check_batch_vs_graphs, check_graph, check_rows, edge_index_of,
                                      features, node_count, num_graphs, replace_attribute)


def graph(n=4, **extra):
    return Data(x=torch.rand(n, 3), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), **extra)


def test_features_checked_and_returned():
    g = graph()
    assert features(g, "x", 3, "L") is g.x
    with pytest.raises(ValueError, match=r"L expects x with 5 features, but x has 3 \(shape \(4, 3\)\)"):
        features(g, "x", 5, "L")
    with pytest.raises(ValueError, match=r"L is configured to read u \(global features of size 2\) but the graph"):
        features(g, "u", 2, "L")
    with pytest.raises(TypeError, match="L: x must be a floating point tensor, got torch.int64"):
        features(Data(x=torch.ones(2, 3, dtype=torch.long)), "x", 3, "L")
    with pytest.raises(ValueError, match=r"L: x must be 2-D \(rows x features\), got shape \(4,\)"):
        features(Data(x=torch.rand(4)), "x", 1, "L")
    with pytest.raises(ValueError, match="L: x contains 1 NaN"):
        features(Data(x=torch.tensor([[float("nan")]])), "x", 1, "L")


def test_edge_index_and_node_count():
    g = graph()
    assert edge_index_of(g, "L", 4) is g.edge_index or torch.equal(edge_index_of(g, "L", 4), g.edge_index)
    with pytest.raises(IndexError, match="L: edge_index refers to nodes 0..3 but the graph has 3 nodes"):
        edge_index_of(g, "L", 3)
    with pytest.raises(ValueError, match="L needs edge_index"):
        edge_index_of(Data(x=torch.rand(2, 1)), "L", 2)
    assert node_count(g) == 4 and node_count(Data(num_nodes=7)) == 7 and node_count(Data()) == 0


def test_batch_and_graph_count():
    g = graph()
    assert batch_of(g, "L", 4, None).tolist() == [0, 0, 0, 0] and num_graphs(g) == 1
    b = Batch.from_data_list([graph(4), graph(4)])
    assert batch_of(b, "L", 8, None).tolist() == [0] * 4 + [1] * 4 and num_graphs(b) == 2
    assert num_graphs(Data(x=torch.rand(2, 1), u=torch.rand(5, 1))) == 5  # the rows of u win
    assert num_graphs(Data(x=torch.rand(3, 1), batch=torch.tensor([0, 2, 2]))) == 3
    with pytest.raises(ValueError, match="L: batch has 3 entries but the graph has 4 nodes"):
        batch_of(graph(batch=torch.tensor([0, 0, 1])), "L", 4, None)
    with pytest.raises(ValueError, match="L: batch puts the two ends of 1 edge"):  # graphs sharing an edge
        batch_of(graph(batch=torch.tensor([0, 0, 1, 1])), "L", 4, None)
    with pytest.raises(TypeError, match="L: batch must be a 1-D torch.long tensor"):
        batch_of(graph(batch=torch.zeros(4)), "L", 4, None)
    with pytest.raises(ValueError, match="L: batch refers to graph 2 but u has 2 rows"):
        check_batch_vs_graphs(torch.tensor([0, 2]), 2, "L")


def test_rows_graph_and_replace():
    with pytest.raises(ValueError, match="L: edge_attr has 2 rows but the graph has 3 edges"):
        check_rows(torch.rand(2, 1), "edge_attr", 3, "edges", "L")
    with pytest.raises(TypeError, match="L expects a torch_geometric Data or Batch, got Tensor"):
        check_graph(torch.rand(2), "L")
    g = graph()
    new_x = torch.zeros(4, 2)
    out = replace_attribute(g, "x", new_x)
    assert out.x is new_x and g.x is not new_x and out.edge_index is g.edge_index  # shallow copy
