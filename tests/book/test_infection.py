"""Infection data set: the labels follow the rule on every node (checked node by node from the
definition), the ground truth agrees with the labels, graphs are reproducible from the seed, and
bad arguments raise clear errors."""
import pytest
import torch
from torch_geometric.data import Batch

from lrp_lib.book.datasets import infection
from lrp_lib.book.datasets.infection import explained_nodes, ground_truth, infection_graph


@pytest.fixture(scope="module")
def graphs():
    return infection(60, min_nodes=10, max_nodes=30, seed=3)


def infected_by_definition(g, v):
    """Node v is infected if sick, or not immune with a sick in-neighbour over a non-virtual edge."""
    if g.x[v, 0] == 1:
        return True
    if g.x[v, 1] == 1:
        return False
    for e in range(g.edge_index.shape[1]):
        s, r = int(g.edge_index[0, e]), int(g.edge_index[1, e])
        if r == v and g.x[s, 0] == 1 and g.edge_attr[e, 0] == -1:
            return True
    return False


def test_labels_follow_the_rule_on_every_node(graphs):
    counts = torch.zeros(3)
    for g in graphs:
        for v in range(g.num_nodes):
            assert bool(g.y[v]) == infected_by_definition(g, v), (g, v)
        counts += torch.tensor([g.sick.sum(), (g.y.bool() & ~g.sick).sum(), (~g.y.bool() & g.immune).sum()])
    # the data set exercises every case: sick, infected through an edge, immune and spared
    assert (counts > 10).all(), counts


def test_features_encode_the_masks(graphs):
    for g in graphs:
        assert g.x.shape == (g.num_nodes, 4) and g.edge_attr.shape == (g.edge_index.shape[1], 2)
        torch.testing.assert_close(g.x[:, 0], g.sick.float() * 2 - 1)
        torch.testing.assert_close(g.x[:, 1], g.immune.float() * 2 - 1)
        torch.testing.assert_close(g.edge_attr[:, 0], g.virtual.float() * 2 - 1)
        for noise in (g.x[:, 2:], g.edge_attr[:, 1]):
            assert noise.abs().max() < 1 and noise.std() > 0.3  # U(-1, 1)
        assert not bool((g.sick & g.immune).any())
        assert int(g.sick.sum()) >= 1


def test_ground_truth_agrees_with_labels(graphs):
    for g in graphs:
        explained = set(explained_nodes(g).tolist())
        assert explained == {v for v in range(g.num_nodes) if g.y[v] == 1 and not g.sick[v]}
        total = torch.zeros_like(g.gt_edge_mask)
        for v in explained:
            node_mask, edge_mask = ground_truth(g, v)
            assert edge_mask.any()  # infected and not sick: someone infected it
            assert (g.edge_index[1, edge_mask] == v).all()
            assert g.sick[g.edge_index[0, edge_mask]].all() and not g.virtual[edge_mask].any()
            # every sick in-neighbour over a non-virtual edge is a cause, and nothing else
            expected = {int(g.edge_index[0, e]) for e in range(g.edge_index.shape[1])
                        if g.edge_index[1, e] == v and g.sick[g.edge_index[0, e]] and not g.virtual[e]}
            assert set(node_mask.nonzero().view(-1).tolist()) == expected
            total |= edge_mask
        # no ground-truth edge points at a sick, immune or healthy node
        assert torch.equal(total, g.gt_edge_mask)


def test_ground_truth_survives_batching(graphs):
    batch = Batch.from_data_list(graphs[:5])
    g = graphs[2]
    offset = sum(h.num_nodes for h in graphs[:2])
    v = int(explained_nodes(g)[0])
    node_mask, edge_mask = ground_truth(batch, v + offset)
    ref_nodes, ref_edges = ground_truth(g, v)
    e0 = sum(h.edge_index.shape[1] for h in graphs[:2])
    assert torch.equal(edge_mask[e0:e0 + g.edge_index.shape[1]], ref_edges) and int(edge_mask.sum()) == int(ref_edges.sum())
    assert torch.equal(node_mask[offset:offset + g.num_nodes], ref_nodes)


def test_structure_sizes_and_fractions(graphs):
    for g in graphs:
        n, ei = g.num_nodes, g.edge_index
        assert 10 <= n <= 30
        # BA with m = 2 has 2 (n - 2) undirected edges -> 4 (n - 2) directed; 30% are removed
        full = 4 * (n - 2)
        assert ei.shape[1] == full - round(0.3 * full)
        assert not bool((ei[0] == ei[1]).any())
        assert len({tuple(e) for e in ei.T.tolist()}) == ei.shape[1]
        assert int(g.sick.sum()) <= max(1, int(0.1 * n)) and int(g.immune.sum()) <= int(0.3 * n)
        assert int(g.virtual.sum()) <= int(0.3 * ei.shape[1])
    assert {g.num_nodes for g in graphs} >= {10, 30} or len({g.num_nodes for g in graphs}) > 10


def test_sick_nodes_are_not_the_hubs():
    # the original put sick nodes on the lowest ids (the hubs of a BA graph); here they are uniform
    gs = infection(200, min_nodes=20, max_nodes=20, max_sick=0.1, seed=0)
    ids = torch.cat([g.sick.nonzero().view(-1) for g in gs]).float()
    assert abs(ids.mean().item() - 9.5) < 1.0


def test_reproducible_from_seed():
    a, b, c = (infection(5, seed=s) for s in (7, 7, 8))
    for g, h in zip(a, b):
        for key in g.keys():
            assert torch.equal(g[key], h[key]), key
    assert any(g.num_nodes != h.num_nodes or not torch.equal(g.x, h.x) for g, h in zip(a, c))


def test_configurable_fractions():
    none = infection(10, max_immune=0.0, max_virtual=0.0, removed_edges=0.0, seed=1)
    for g in none:
        assert not g.immune.any() and not g.virtual.any()
        assert g.edge_index.shape[1] == 4 * (g.num_nodes - 2)
        # without immunity or virtual edges every out-neighbour of a sick node is infected
        assert bool(g.y[g.edge_index[1, g.sick[g.edge_index[0]]]].all())
    assert all(not g.sick.any() and not g.y.any() for g in infection(3, max_sick=0.0, seed=1))
    assert infection(0) == []


def test_hand_made_graph():
    # 0 -> 2 (sick, real), 1 -> 2 (sick, virtual), 0 -> 3 (sick, but 3 is immune), 1 -> 4 (virtual only)
    g = infection_graph(5, torch.tensor([[0, 1, 0, 1], [2, 2, 3, 4]]),
                        sick=[True, True, False, False, False], immune=[False, False, False, True, False],
                        virtual=[False, True, False, True])
    assert g.y.tolist() == [1, 1, 1, 0, 0]
    assert g.gt_edge_mask.tolist() == [True, False, False, False]
    node_mask, _ = ground_truth(g, 2)
    assert node_mask.tolist() == [True, False, False, False, False]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(max_sick=1.5), ValueError, r"max_sick must be a fraction in \[0, 1\], got 1.5"),
    (dict(max_immune=-0.1), ValueError, "max_immune must be a fraction"),
    (dict(max_virtual=2), ValueError, "max_virtual must be a fraction"),
    (dict(removed_edges=1.01), ValueError, "removed_edges must be a fraction"),
    (dict(max_sick=0.6, max_immune=0.5), ValueError, r"max_sick \+ max_immune must be at most 1"),
    (dict(min_nodes=20, max_nodes=10), ValueError, r"min_nodes \(20\) must not be greater than max_nodes \(10\)"),
    (dict(min_nodes=2), ValueError, "min_nodes must be at least 3"),
    (dict(min_nodes=5.0), TypeError, "min_nodes must be an int"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        infection(2, **kwargs)


def test_bad_count_and_ground_truth_queries():
    with pytest.raises(ValueError, match="num_graphs must be at least 0"):
        infection(-1)
    g = infection_graph(3, torch.tensor([[0], [1]]), sick=[True, False, False], immune=[False, False, True],
                        virtual=[False])
    with pytest.raises(ValueError, match="node 0 is not infected-and-not-sick"):
        ground_truth(g, 0)
    with pytest.raises(ValueError, match="node 2 is not infected-and-not-sick"):
        ground_truth(g, 2)
    with pytest.raises(IndexError, match=r"node must be an int in \[0, 3\)"):
        ground_truth(g, 3)
    with pytest.raises(ValueError, match="a node cannot be both sick and immune"):
        infection_graph(2, torch.tensor([[0], [1]]), sick=[True, False], immune=[True, False], virtual=[False])
    with pytest.raises(IndexError, match=r"edge_index refers to nodes outside \[0, 2\)"):
        infection_graph(2, torch.tensor([[0], [2]]), sick=[True, False], immune=[False, False], virtual=[False])


def train_and_explain(seed):
    """Train a small graph network on infection graphs from `seed`, return its weights and LRP."""
    import lrp_lib
    from lrp_lib.teach import graph
    from torch_geometric.loader import DataLoader

    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        graph.EdgeLinear(4, edge_features=2, sender_features=4, bias=False), graph.EdgeReLU(),
        graph.NodeLinear(4, node_features=4, incoming_features=4, aggregation="max", bias=False), graph.NodeReLU(),
        graph.NodeLinear(1, node_features=4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(infection(40, seed=seed), batch_size=10, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    for _ in range(2):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch).x.view(-1)
            torch.nn.functional.binary_cross_entropy_with_logits(out, batch.y).backward()
            optimizer.step()
    g = graph.relevance_inputs(infection(1, seed=seed + 100)[0], ("x", "edge_attr"))
    with lrp_lib.teach.relevance():
        out = model(g).x.view(-1)
    v = int(explained_nodes(g)[0]) if len(explained_nodes(g)) else 0
    out.backward(torch.zeros_like(out).index_fill(0, torch.tensor([v]), 1.0) * out.detach())
    return [p.detach().clone() for p in model.parameters()], g.x.grad, g.edge_attr.grad, out[v].item()


def test_training_and_explanations_reproducible_from_seed():
    params_a, rx_a, re_a, logit = train_and_explain(5)
    params_b, rx_b, re_b, _ = train_and_explain(5)
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))
    assert torch.equal(rx_a, rx_b) and torch.equal(re_a, re_b)
    # conservation: the inputs carry the logit minus the read-out bias (the only bias), R = logit
    bias = float(params_a[-1])
    assert rx_a.abs().sum() > 0
    assert float(rx_a.sum() + re_a.sum()) == pytest.approx(logit - bias, abs=1e-4)
    params_c, rx_c, _, _ = train_and_explain(6)
    assert not all(torch.equal(a, c) for a, c in zip(params_a, params_c))
