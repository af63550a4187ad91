"""lrp_lib.book.datasets.houses and models.HousesGCN: the quick start's graph and model, as its page
prints them."""
import torch

from lrp_lib.book.datasets import ba_houses
from lrp_lib.book.models import HousesGCN
from lrp_lib.book.pretrained import load_or_train


def test_the_graph_and_split_of_the_quick_start():
    data, train, test = ba_houses()
    assert (data.num_nodes, data.num_edges, len(data.y.unique())) == (700, 3972, 4)  # as the page prints
    assert len(train) == 560 and len(test) == 140 and len(set(train.tolist()) | set(test.tolist())) == 700
    assert int(data.in_house.sum()) == 80 * 12  # six undirected edges per house
    again, train2, _ = ba_houses()
    assert torch.equal(again.edge_index, data.edge_index) and torch.equal(train2, train)


def test_the_stored_weights_load_into_the_class():
    data, _, test = ba_houses()
    model = HousesGCN()

    def not_trained(model):
        raise AssertionError("the stored weights must load")

    load_or_train("quickstart-ba-houses-gcn", model, not_trained, retrain=False)
    with torch.no_grad():
        predicted = model(data.x, data.edge_index).argmax(-1)
        assert torch.allclose(model(data.x, data.edge_index).exp().sum(-1), torch.ones(700))
    accuracy = float((predicted[test] == data.y[test]).float().mean())
    assert round(accuracy, 3) == 0.957  # the quick start's "test accuracy 0.957"
