"""lrp_lib.explain.inputs: what the explainers accept, and the errors for what they do not."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from torch import nn
from torch_geometric.nn import GCNConv
from torch_geometric.utils import to_edge_index

from lrp_lib.explain.explainer import Explainer, LRPExplainer, UnsupportedModelError
from lrp_lib.explain.inputs import uncompiled
from lrp_lib.explain.tensors import explain_tensor
from lrp_lib.explain.walks import walk_relevance

CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(6, 8), GCNConv(8, 3)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _graph():
    g = torch.Generator().manual_seed(0)
    return torch.randn(20, 6, generator=g), torch.randint(0, 20, (2, 60), generator=g)


def _explain(model, x, edge_index):
    return Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object", model_config=CONFIG)(x, edge_index, index=4)


def test_a_compiled_model_is_explained_as_the_model():
    """torch.compile(model): the explanation is the uncompiled model's, edges included (a compiled program runs
    no message hooks: run as it is, its edges would get no relevance), and the model's training flag is restored
    as PyG's Explainer leaves it."""
    torch.manual_seed(0)
    model = GCN().eval()
    x, edge_index = _graph()
    compiled = torch.compile(model, backend="aot_eager")
    assert uncompiled(compiled) is model
    want, got = _explain(model, x, edge_index), _explain(compiled, x, edge_index)
    assert float(got.edge_mask.abs().sum()) > 0
    torch.testing.assert_close(got.node_mask, want.node_mask)
    torch.testing.assert_close(got.edge_mask, want.edge_mask)
    torch.testing.assert_close(got.bias_relevance, want.bias_relevance)
    j = int(edge_index[0, edge_index[1] == 4][0])
    walks = torch.tensor([[4, 4, 4], [j, 4, 4], [j, j, 4]])  # (GCN's self-loops are edges of every step)
    torch.testing.assert_close(walk_relevance(compiled, x, edge_index, walks, index=4, target=0),
                               walk_relevance(model, x, edge_index, walks, index=4, target=0))


def test_a_compiled_model_without_a_graph():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)).eval()
    x = torch.randn(4, 5)
    got = explain_tensor(torch.compile(mlp, backend="aot_eager"), x)
    torch.testing.assert_close(got.relevance, explain_tensor(mlp, x).relevance)


@pytest.mark.parametrize("how", ["torch.compile", "Module.compile"])
def test_a_submodule_compiled_in_place_is_refused_with_its_name(how):
    torch.manual_seed(0)
    model = GCN().eval()
    x, edge_index = _graph()
    if how == "torch.compile":
        model.conv1 = torch.compile(model.conv1, backend="aot_eager")
    else:
        model.conv1.compile(backend="aot_eager")
    with pytest.raises(UnsupportedModelError, match="submodule 'conv1' was compiled"):
        _explain(model, x, edge_index)
    with pytest.raises(UnsupportedModelError, match="submodule 'conv1' was compiled"):
        walk_relevance(model, x, edge_index, torch.tensor([[4, 4, 4]]), index=4, target=0)


# ------------------------------------------------------------- mistakes that get an error or a warning
def _explainer(model, level="node", mode="multiclass_classification", **options):
    return Explainer(model, algorithm=LRPExplainer(**options), explanation_type="model", node_mask_type="attributes",
                     edge_mask_type="object", model_config=dict(mode=mode, task_level=level, return_type="raw"))


def test_a_graph_level_declaration_for_a_node_level_model_names_both():
    torch.manual_seed(0)
    model = GCN().eval()
    x, edge_index = _graph()
    for one_pass in (True, False):  # (the target from the explanation's own forward, or from PyG's pass)
        explainer = _explainer(model, "graph")
        explainer.one_pass = one_pass
        with pytest.raises(ValueError, match=r"task_level='graph', but the model returns 20 output rows, one per "
                                             r"node, not one per graph \(1\)"):
            explainer(x, edge_index)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_features_of_another_dtype_than_the_weights_are_named(dtype):
    torch.manual_seed(0)
    model = GCN().eval()
    x, edge_index = _graph()
    with pytest.raises(TypeError, match=rf"x is {dtype} but the model's weights are torch.float32: convert the "
                                        rf"input \(x.to\(torch.float32\)\)"):
        _explainer(model)(x.to(dtype), edge_index, index=2)


def test_a_model_in_training_mode_is_explained_in_eval_mode_with_a_warning():
    """The explanation of a model left in training mode (dropout on) equals the eval-mode one, with a warning
    saying so, and the model is back in training mode afterwards."""
    class Dropping(GCN):
        def forward(self, x, edge_index):
            return self.conv2(torch.nn.functional.dropout(self.conv1(x, edge_index).relu(), 0.5, self.training),
                              edge_index)
    torch.manual_seed(0)
    model = Dropping().eval()
    x, edge_index = _graph()
    want = _explainer(model)(x, edge_index, index=2)
    model.train()
    for one_pass in (True, False):
        explainer = _explainer(model)
        explainer.one_pass = one_pass
        with pytest.warns(UserWarning, match="the model is in training mode: it is explained in eval mode") as seen:
            got = explainer(x, edge_index, index=2)
        assert len([w for w in seen if "training mode" in str(w.message)]) == 1
        assert model.training
        torch.testing.assert_close(got.node_relevance, want.node_relevance)


def test_edge_attr_that_gets_no_relevance_by_design_says_so():
    """A GAT with edge_dim reads edge_attr only in its attention scores, held constant under attention='cp' (the
    default): its edge_attr relevance is zero, with a warning that says why; under attention='uniform' the
    scores take half of each product, and edge_attr gets relevance (and no warning)."""
    import warnings

    from torch_geometric.nn import GATConv

    from lrp_lib.core.composites import Composite

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.att, self.conv = GATConv(6, 4, heads=2, edge_dim=3), GCNConv(8, 3)

        def forward(self, x, edge_index, edge_attr):
            return self.conv(self.att(x, edge_index, edge_attr=edge_attr).relu(), edge_index)
    torch.manual_seed(0)
    model = GAT().eval()
    x, edge_index = _graph()
    edge_attr = torch.randn(edge_index.shape[1], 3, generator=torch.Generator().manual_seed(2))
    with pytest.warns(UserWarning, match="edge_attr_relevance is zero everywhere"):
        held = _explainer(model)(x, edge_index, edge_attr=edge_attr, index=2)
    assert not held.edge_attr_relevance.any()
    with warnings.catch_warnings(record=True) as seen:  # (PyG's softmax detaches its maximum: some is lost)
        warnings.simplefilter("always")
        uniform = _explainer(model, composite=Composite(attention="uniform"))(x, edge_index, edge_attr=edge_attr,
                                                                              index=2)
    assert not [w for w in seen if "edge_attr_relevance is zero" in str(w.message)]
    assert uniform.edge_attr_relevance.abs().sum() > 0


def test_one_link_as_a_1d_pair_is_explained_as_a_2x1_edge_label_index():
    """PyG's link-prediction example passes one link as edge_label_index of shape (2,): the model then returns a
    single value, explained as the (2, 1) form's single row."""
    class Link(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(6, 8), GCNConv(8, 8)

        def forward(self, x, edge_index, edge_label_index):
            z = self.conv2(self.conv1(x, edge_index).relu(), edge_index)
            return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(dim=-1)
    torch.manual_seed(0)
    model = Link().eval()
    x, edge_index = _graph()
    explain = _explainer(model, "edge", "binary_classification")
    pair = explain(x, edge_index, edge_label_index=torch.tensor([3, 7]))
    column = explain(x, edge_index, edge_label_index=torch.tensor([[3], [7]]))
    assert pair.prediction.dim() == 0
    torch.testing.assert_close(pair.node_relevance, column.node_relevance)
    torch.testing.assert_close(pair.edge_relevance, column.edge_relevance)
    logit = float(model(x, edge_index, torch.tensor([3, 7])))
    sign = 1.0 if int(pair.target) == 1 else -1.0
    torch.testing.assert_close(float(pair.node_relevance.sum() + pair.bias_relevance), sign * logit, rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(IndexError, match="edge_label_index refers to nodes 3..70"):
        explain(x, edge_index, edge_label_index=torch.tensor([3, 70]))


def test_a_batch_whose_graphs_share_edges_is_refused_only_for_per_graph_accounts():
    """Node-level: a batch with edges between its graphs (as PyG's explain fixtures build) is explained as one
    graph; graph-level with one account per graph: refused naming the first shared edge."""
    from torch_geometric.nn import global_add_pool

    class Pooled(GCN):
        def forward(self, x, edge_index, batch=None):
            return global_add_pool(super().forward(x, edge_index), batch)
    torch.manual_seed(0)
    x, edge_index = _graph()
    batch = torch.arange(20) // 10
    assert bool((batch[edge_index[0]] != batch[edge_index[1]]).any())
    model = GCN().eval()

    class NodeWithBatch(GCN):
        def forward(self, x, edge_index, batch=None):
            return super().forward(x, edge_index)
    node = NodeWithBatch().eval()
    node.load_state_dict(model.state_dict())
    with_batch = _explainer(node)(x, edge_index, index=2, batch=batch)
    torch.testing.assert_close(with_batch.node_relevance, _explainer(model)(x, edge_index, index=2).node_relevance)
    pooled = Pooled().eval()
    with pytest.raises(ValueError, match=r"batch puts the two ends of \d+ edge\(s\) in different graphs"):
        _explainer(pooled, "graph")(x, edge_index, batch=batch)


# ------------------------------------------------------------- a sparse adjacency in place of edge_index
def _adjacency(edge_index, n, layout, dtype=torch.float64, values=None):
    """PyG's adj_t of ``edge_index`` (row = receiver) in ``layout``."""
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor, to_torch_csr_tensor
    make = {"coo": to_torch_coo_tensor, "csr": to_torch_csr_tensor, "csc": to_torch_csc_tensor}[layout]
    values = torch.ones(edge_index.shape[1], dtype=dtype) if values is None else values
    return make(edge_index.flip(0), values, size=(n, n))


class _TwoLayers(nn.Module):
    def __init__(self, conv, features=5, hidden=7, classes=3, pool=False):
        super().__init__()
        self.c1, self.c2, self.pool = conv(features, hidden), conv(hidden, classes), pool

    def forward(self, x, edge_index):
        out = self.c2(self.c1(x, edge_index).relu(), edge_index)
        return out.sum(0, keepdim=True) if self.pool else out


def _convs():
    from torch_geometric.nn import GINConv, GraphConv, SAGEConv
    return {"gcn": GCNConv, "sage-mean": SAGEConv, "sage-max": lambda a, b: SAGEConv(a, b, aggr="max"),
            "graph-sum": GraphConv, "gin": lambda a, b: GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU()))}


@pytest.mark.filterwarnings("ignore:Converting sparse tensor:UserWarning")
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
@settings(max_examples=16, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 12), density=st.floats(0.0, 0.6),
       conv=st.sampled_from(sorted(_convs())), layout=st.sampled_from(["coo", "csr", "csc"]),
       rule=st.sampled_from(["epsilon", "zplus", "gamma"]), level=st.sampled_from(["node", "graph"]),
       edges=st.booleans())
def test_a_sparse_adjacency_gives_the_relevance_of_its_edges(seed, n, density, conv, layout, rule, level, edges):
    """A model called with PyG's adj_t (its aggregation one sparse product) is explained as with the same
    edges as edge_index (a gather and a scatter of messages): the same node relevance, bias relevance and
    residual, in float64, for sum, mean and max aggregations and every layout PyG takes; with an edge mask, the
    same edge relevance, one per stored entry in the order of PyG's to_edge_index(adj_t), and the explanation's
    edge_index those edges."""
    if conv == "gcn" and layout == "csc":
        return  # (PyG's gcn_norm takes no CSC matrix: the model itself fails)
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    pairs = torch.rand(n, n, generator=g) < density
    pairs.fill_diagonal_(False)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    model = _TwoLayers(_convs()[conv], pool=level == "graph").double().eval()
    adj = _adjacency(pairs.nonzero().t(), n, layout)
    edge_index = to_edge_index(adj)[0].flip(0)  # (the order of the adjacency's entries)
    config = dict(mode="multiclass_classification", task_level=level, return_type="raw")
    explainer = Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="phenomenon",
                          node_mask_type="attributes", edge_mask_type="object" if edges else None,
                          model_config=config)
    target = torch.full((n if level == "node" else 1,), 1)
    index = 0 if level == "node" else None
    want = explainer(x, edge_index, target=target, index=index)
    got = explainer(x, adj, target=target, index=index)
    for key in ("node_relevance", "bias_relevance", "relevance_residual") + (("edge_relevance",) if edges else ()):
        torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12, msg=key)
    assert got.replay_reason == "a sparse adjacency: not captured"
    if edges:
        assert torch.equal(got.edge_index, edge_index) and got.adj_t is adj and got.validate_masks()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
def test_the_edges_of_a_weighted_adjacency():
    """A weighted adj_t gives the edge relevance of the same edges with the values as edge_weight where the
    layer's messages take them (GCN); a layer whose messages take no weight (GIN: its sparse product weighs what
    its messages would not) is refused with its name.  PyG's own Explainer takes the explanation too (its edges
    counted by num_edges)."""
    from torch_geometric.explain import Explainer as PyGExplainer
    from torch_geometric.nn import GINConv
    g = torch.Generator().manual_seed(3)
    edge_index = torch.tensor([[0, 1, 2, 3, 1, 0], [1, 2, 3, 0, 3, 2]])
    values = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    adj = _adjacency(edge_index, 4, "csr", values=values)
    edges, weights = to_edge_index(adj)
    config = dict(mode="multiclass_classification", task_level="node", return_type="raw")

    def explain(model, *args, kind=Explainer, **kwargs):
        return kind(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                    edge_mask_type="object", model_config=config)(*args, index=1, **kwargs)

    class Weighted(_TwoLayers):
        def forward(self, x, edge_index, edge_weight=None):
            return self.c2(self.c1(x, edge_index, edge_weight).relu(), edge_index, edge_weight)

    torch.manual_seed(0)
    gcn = Weighted(GCNConv).double().eval()
    want = explain(gcn, x, edges.flip(0), edge_weight=weights)
    for kind in (Explainer, PyGExplainer):
        got = explain(gcn, x, adj, kind=kind)
        torch.testing.assert_close(got.edge_relevance, want.edge_relevance, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(got.node_relevance, want.node_relevance, rtol=1e-10, atol=1e-12)
    assert got.num_edges == 6 and got.edge_index is adj  # (PyG's own: the adjacency kept as given)
    gin = _TwoLayers(lambda a, b: GINConv(nn.Linear(a, b))).double().eval()
    with pytest.raises(UnsupportedModelError, match=r"messages of GINConv take no edge weight while the "
                                                    r"adjacency's values are not all one"):
        explain(gin, x, adj)
    assert explain(gin, x, _adjacency(edge_index, 4, "csr")).edge_mask.shape == (6,)  # (values one: the same)


def _more_convs():
    from torch_geometric.nn import GATConv, GATv2Conv, LEConv, ResGatedGraphConv, SGConv, TAGConv, TransformerConv
    return {"gat": lambda a, b: GATConv(a, b, heads=2, concat=False), "gatv2": GATv2Conv, "transformer": TransformerConv,
            "le": LEConv, "resgated": ResGatedGraphConv, "sg": SGConv, "tag": TAGConv}


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
@pytest.mark.parametrize("conv", sorted(_more_convs()))
def test_edge_masks_along_an_adjacency_on_more_layers(conv):
    """Attention layers (which add self-loops to the adjacency themselves), gated, local-extremum and
    multi-hop layers: an adj_t gives the node and edge relevance of the same edges as edge_index; and in a batch
    of two graphs, the same per-graph accounts."""
    from torch_geometric.nn import global_add_pool
    g = torch.Generator().manual_seed(1)
    edge_index = torch.tensor([[0, 1, 2, 3, 1, 4, 5, 6, 5], [1, 2, 3, 0, 3, 5, 6, 4, 4]])
    x = torch.randn(7, 5, generator=g, dtype=torch.float64)
    adj = _adjacency(edge_index, 7, "csr")
    edges = to_edge_index(adj)[0].flip(0)
    torch.manual_seed(0)
    model = _TwoLayers(_more_convs()[conv]).double().eval()

    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x, edge_index, batch):
            return global_add_pool(self.inner(x, edge_index), batch)

    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    for net, level, kwargs in ((model, "node", dict(index=2)), (Pooled().eval(), "graph", dict(batch=batch))):
        explainer = Explainer(net, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                              edge_mask_type="object", model_config=dict(
                                  mode="multiclass_classification", task_level=level, return_type="raw"))
        want, got = explainer(x, edges, **kwargs), explainer(x, adj, **kwargs)
        assert bool(want.edge_relevance.any())
        for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12, msg=key)
        assert got.bias_relevance.shape == ((2,) if level == "graph" else ())


def test_a_sparse_adjacency_is_checked_and_what_it_cannot_give_is_refused():
    """A bad adjacency names edge_index; per_index and edge weights beside an adjacency are refused
    with the way to pass the edges."""
    x, edge_index = torch.randn(4, 5), torch.tensor([[0, 1, 2], [1, 2, 3]])
    model = _TwoLayers(GCNConv).eval()
    node = dict(mode="multiclass_classification", task_level="node", return_type="raw")

    def explain(adj, algorithm=None, **kwargs):
        explainer = Explainer(model, algorithm=algorithm or LRPExplainer(), explanation_type="model",
                              node_mask_type="attributes", model_config=node,
                              edge_mask_type=kwargs.pop("edge_mask_type", None))
        return explainer(x, adj, index=0, **kwargs)

    adj = _adjacency(edge_index, 4, "csr", torch.float32)
    with pytest.raises(ValueError, match=r"edge_index is a sparse adjacency of shape \(5, 5\).*must have shape \(4, 4\)"):
        explain(_adjacency(edge_index, 5, "csr", torch.float32))
    with pytest.raises(ValueError, match=r"edge_index's values contains 1 NaN"):
        explain(_adjacency(edge_index, 4, "coo", values=torch.tensor([1.0, float("nan"), 1.0])))
    with pytest.raises(ValueError, match=r"per_index=True with a sparse adjacency"):
        explain(adj, algorithm=LRPExplainer(per_index=True))
    with pytest.raises(ValueError, match=r"edge_weight with a sparse adjacency as edge_index"):
        explain(adj, edge_weight=torch.ones(3))
    assert explain(adj).node_mask.shape == x.shape
