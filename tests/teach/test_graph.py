"""Graph Network layers: the fused relevance rule against the composition of lrp_lib.teach.ops (eps = 0)
and against slow references written from the rules, what it saves for backward, conservation
for every configuration, true gradients outside the relevance mode (gradcheck), the read-out
helper, and the error for each kind of bad input."""
import itertools
import warnings

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch, Data

import lrp_lib
from lrp_lib.teach.graph import (EdgeLinear, EdgeReLU, ElementWise, GlobalLinear, GlobalReLU, NodeLinear, NodeReLU,
                           compose_with_ops, num_graphs, read_relevance, relevance_inputs)
from lrp_lib.teach.ops import LostRelevanceWarning

FX, FE, FU = 3, 2, 4  # node, edge and global feature sizes
SIZES = [(4, 5), (3, 0), (5, 7), (2, 1)]  # (nodes, edges) per graph; graph 1 has no edges


def make_batch(seed=0, sizes=SIZES):
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for n, e in sizes:
        senders = torch.randint(0, n, (e,), generator=g)
        receivers = torch.randint(1, n, (e,), generator=g) if n > 1 else torch.zeros(e, dtype=torch.long)
        graphs.append(Data(
            x=torch.randn(n, FX, generator=g, dtype=torch.float64),
            edge_index=torch.stack([senders, receivers]),  # node 0 of each graph has no incoming edge
            edge_attr=torch.randn(e, FE, generator=g, dtype=torch.float64),
            u=torch.randn(1, FU, generator=g, dtype=torch.float64),
        ))
    return Batch.from_data_list(graphs)


def make_layer(cls, sizes, bias, eps, aggregation=None, out=2, seed=0):
    torch.manual_seed(seed)
    kwargs = dict(sizes, bias=bias, eps=eps)
    if aggregation is not None:
        kwargs["aggregation"] = aggregation
    layer = cls(out, **kwargs).double()
    if bias:  # a bias comparable to the terms, so that its share matters
        nn.init.normal_(layer.bias)
    return layer


ATTR = {EdgeLinear: "edge_attr", NodeLinear: "x", GlobalLinear: "u"}
INPUTS = {
    EdgeLinear: dict(edge_features=FE, sender_features=FX, receiver_features=FX, global_features=FU),
    NodeLinear: dict(node_features=FX, incoming_features=FE, outgoing_features=FE, global_features=FU),
    GlobalLinear: dict(node_features=FX, edge_features=FE, global_features=FU),
}


def configurations():
    """Every non-empty subset of each layer's inputs, with each aggregation where there is one."""
    for cls, full in INPUTS.items():
        keys = list(full)
        for mask in itertools.product([False, True], repeat=len(keys)):
            if not any(mask):
                continue
            sizes = {k: (full[k] if m else None) for k, m in zip(keys, mask)}
            aggregates = (cls is NodeLinear and (sizes["incoming_features"] or sizes["outgoing_features"])) or (
                cls is GlobalLinear and (sizes["node_features"] or sizes["edge_features"]))
            for aggregation in (("sum", "mean", "max") if aggregates else (None,)):
                on = "+".join(k.replace("_features", "") for k in keys if sizes[k])
                yield pytest.param(cls, sizes, aggregation, id=f"{cls.__name__}-{on}-{aggregation}")


def run_relevance(layer, data, rel_out=None, seed=1):
    """Relevance of ``layer`` on leaf copies of ``data``: (input graph, output, R_out)."""
    inp = relevance_inputs(data)
    with lrp_lib.teach.relevance():
        out = getattr(layer(inp), ATTR[type(layer)])
    if rel_out is None:  # R_out = output x positive noise: no relevance is sent to an output of zero
        g = torch.Generator().manual_seed(seed)
        rel_out = out.detach() * (0.5 + torch.rand(out.shape, generator=g, dtype=out.dtype))
    out.backward(rel_out)
    return inp, out, rel_out


# ------------------------------------------------------------------ slow reference
def split(terms, bias, rel, eps):
    """One output z = b + the sum of all contributions (key, c) of all terms.  The epsilon rule of the
    layer as ONE linear map: each contribution c receives c / (z + eps sign z) of ``rel`` (sign(0) = +1);
    the bias keeps b / (z + ...); nothing where z = 0 (lost).  Returns {key: relevance}."""
    z = sum(c for term in terms for _, c in term) + bias
    shares = {}
    if z == 0:
        return shares
    denom = z + eps * (1.0 if z >= 0 else -1.0)
    for term in terms:
        for key, c in term:
            shares[key] = shares.get(key, 0.0) + c / denom * rel
    return shares


def aggregate(values, members, how):
    """Aggregate the rows ``members`` of ``values`` (list of lists) feature by feature."""
    out = []
    for j in range(len(values[0]) if values else 0):
        col = [values[m][j] for m in members]
        if not col:
            out.append(0.0)
        elif how == "sum":
            out.append(sum(col))
        elif how == "mean":
            out.append(sum(col) / len(col))
        else:
            out.append(max(col))
    return out


def distribute(rel_agg, values, members, how, rel_values):
    """Send the relevance of one aggregated vector back to the rows ``members`` of ``values``:
    sum and mean in proportion to the values (x_i / sum), max all to the (last) winner."""
    for j, r in enumerate(rel_agg):
        col = [values[m][j] for m in members]
        if not col or r == 0:
            continue
        if how == "max":
            best = max(col)
            if best != 0:
                winner = max(m for m in members if values[m][j] == best)
                rel_values[winner][j] += r
        else:
            total = sum(col)
            if total != 0:
                for m in members:
                    rel_values[m][j] += values[m][j] / total * r


def reference(layer, data, rel_out):
    """Forward output and input relevance of ``layer``, element by element from the definitions."""
    X, E, U = (data[a].tolist() for a in ("x", "edge_attr", "u"))
    senders, receivers = data.edge_index.tolist()
    batch = data.batch.tolist()
    N, M, G = len(X), len(senders), len(U)
    W = {k: getattr(layer, "W_" + k.replace("_features", "")) for k, v in layer.sizes.items() if v}
    W = {k: w.tolist() for k, w in W.items()}
    b = layer.bias.tolist() if layer.bias is not None else [0.0] * layer.out_features
    R_out = rel_out.tolist()
    R = {"x": [[0.0] * FX for _ in range(N)], "edge_attr": [[0.0] * FE for _ in range(M)],
         "u": [[0.0] * FU for _ in range(G)]}

    def linear_terms(w, vector, tag, row, o):
        return [((tag, row, j), w[o][j] * vector[j]) for j in range(len(vector))]

    out, how = [], layer.aggregation
    incoming = outgoing = nodes = edges = None
    if isinstance(layer, EdgeLinear):
        rows = range(M)
        sources = lambda k: [("edge_features", "edge_attr", k, E[k]), ("sender_features", "x", senders[k], X[senders[k]]),
                             ("receiver_features", "x", receivers[k], X[receivers[k]]),
                             ("global_features", "u", batch[senders[k]], U[batch[senders[k]]])]
    elif isinstance(layer, NodeLinear):
        rows = range(N)
        incoming = [[k for k in range(M) if receivers[k] == i] for i in range(N)]
        outgoing = [[k for k in range(M) if senders[k] == i] for i in range(N)]
        sources = lambda i: [("node_features", "x", i, X[i]), ("incoming_features", "in", i, aggregate(E, incoming[i], how)),
                             ("outgoing_features", "out", i, aggregate(E, outgoing[i], how)),
                             ("global_features", "u", batch[i], U[batch[i]])]
    else:
        rows = range(G)
        nodes = [[i for i in range(N) if batch[i] == g] for g in range(G)]
        edges = [[k for k in range(M) if batch[senders[k]] == g] for g in range(G)]
        sources = lambda g: [("node_features", "nodes", g, aggregate(X, nodes[g], how)),
                             ("edge_features", "edges", g, aggregate(E, edges[g], how)),
                             ("global_features", "u", g, U[g])]
    for r in rows:
        out.append([])
        for o in range(layer.out_features):
            terms = [linear_terms(W[key], vec, tag, row, o) for key, tag, row, vec in sources(r) if key in W]
            out[-1].append(sum(c for t in terms for _, c in t) + b[o])
            for (tag, row, j), share in split(terms, b[o], R_out[r][o], layer.eps).items():
                if tag in R:
                    R[tag][row][j] += share
                else:  # an aggregated vector: pass its relevance on to the edges or nodes
                    rel_agg = [0.0] * (FE if tag in ("in", "out", "edges") else FX)
                    rel_agg[j] = share
                    members = {"in": incoming, "out": outgoing, "edges": edges, "nodes": nodes}[tag][row]
                    values, target = (X, R["x"]) if tag == "nodes" else (E, R["edge_attr"])
                    distribute(rel_agg, values, members, how, target)
    return torch.tensor(out, dtype=torch.float64).view(len(rows), -1), {k: torch.tensor(v, dtype=torch.float64).view(-1, len(v[0]) if v else 0) for k, v in R.items()}


# ------------------------------------------------------------------------- tests
@pytest.mark.parametrize("cls,aggregation", [(EdgeLinear, None)] + [(c, a) for c in (NodeLinear, GlobalLinear)
                                                                   for a in ("sum", "mean", "max")])
@pytest.mark.parametrize("bias", [False, True])
def test_relevance_matches_reference(cls, aggregation, bias):
    data = make_batch()
    layer = make_layer(cls, INPUTS[cls], bias=bias, eps=0.05, aggregation=aggregation)
    rows = {EdgeLinear: data.num_edges, NodeLinear: data.num_nodes, GlobalLinear: data.num_graphs}[cls]
    rel_out = torch.randn(rows, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)  # signed
    inp, out, _ = run_relevance(layer, data, rel_out=rel_out)
    expected_out, expected_rel = reference(layer, data, rel_out)
    torch.testing.assert_close(out.detach(), expected_out)
    for attr in ("x", "edge_attr", "u"):
        got = inp[attr].grad if inp[attr].grad is not None else torch.zeros_like(inp[attr])
        torch.testing.assert_close(got, expected_rel[attr], msg=lambda m: f"{attr}: {m}")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("cls,sizes,aggregation", list(configurations()))
def test_fused_rule_equals_composition_of_ops(cls, sizes, aggregation, bias):
    """With eps = 0 the one-function rule of a layer gives exactly the relevance of the layer built
    from ops (linear_eps per term, index_select, scatters, a chain of ops.add), bias share included."""
    data = make_batch(seed=4)  # an edgeless graph, and node 0 of every graph without incoming edges
    layer = make_layer(cls, sizes, bias=bias, eps=0.0, aggregation=aggregation)
    attr = ATTR[cls]
    rows = {"edge_attr": data.num_edges, "x": data.num_nodes, "u": data.num_graphs}[attr]
    rel_out = torch.randn(rows, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)  # signed
    results = []
    for build in (lambda d: layer(d), lambda d: compose_with_ops(layer, d)):
        layer.zero_grad(set_to_none=True)
        inp = relevance_inputs(data)
        with lrp_lib.teach.relevance():
            out = getattr(build(inp), attr)
        with warnings.catch_warnings(record=True) as caught:  # a node without edges of a kind: output 0
            warnings.simplefilter("always", LostRelevanceWarning)
            out.backward(rel_out)
        grads = [inp[a].grad if inp[a].grad is not None else torch.zeros_like(inp[a]) for a in ("x", "edge_attr", "u")]
        results.append((type(out.grad_fn).__name__, out.detach(), grads, layer.bias.grad if bias else None,
                        any(issubclass(w.category, LostRelevanceWarning) for w in caught)))
    (fused_fn, fused_out, fused, fused_bias, fused_lost), (composed_fn, composed_out, composed, composed_bias,
                                                           composed_lost) = results
    assert fused_lost == composed_lost == bool((fused_out == 0).any())
    assert fused_fn == f"{cls.__name__}RelevanceBackward" and composed_fn != fused_fn
    assert torch.equal(fused_out, composed_out)
    assert any(g.abs().sum() > 0 for g in fused)
    for attr_name, got, expected in zip(("x", "edge_attr", "u"), fused, composed):
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=0, msg=lambda m: f"{attr_name}: {m}")
    if bias:
        torch.testing.assert_close(fused_bias, composed_bias, atol=1e-10, rtol=0)
        assert fused_bias.abs().sum() > 1e-3


@pytest.mark.parametrize("cls,aggregation", [(EdgeLinear, None), (NodeLinear, "sum"), (NodeLinear, "max"),
                                             (GlobalLinear, "mean"), (GlobalLinear, "max")])
def test_fused_rule_saves_no_intermediate(cls, aggregation):
    """In relevance mode a layer keeps for backward only its inputs, weights, bias, index tensors
    (and their gathers), its own output and, for max, the argmax: no E x F term of the sum."""
    data = relevance_inputs(make_batch())
    layer = make_layer(cls, INPUTS[cls], bias=True, eps=1e-6, aggregation=aggregation)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with lrp_lib.teach.relevance():
            out = getattr(layer(data), ATTR[cls])
    allowed = {t.untyped_storage().data_ptr() for t in [data.x, data.edge_attr, data.u, out, *layer.parameters()]}
    floats = [t for t in saved if t.is_floating_point()]
    assert floats and all(t.untyped_storage().data_ptr() in allowed for t in floats)
    assert len([t for t in floats if t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()]) == 1
    assert all(t.dtype == torch.long and t.dim() <= 2 for t in saved if not t.is_floating_point())
    assert len(saved) <= 3 + 3 * len(INPUTS[cls]) + 2


def test_fused_rule_second_backward_and_lost_relevance():
    data = make_batch()
    layer = make_layer(NodeLinear, dict(node_features=FX, incoming_features=FE), bias=False, eps=0.0)
    inp = relevance_inputs(data)
    with lrp_lib.teach.relevance():
        out = layer(inp).x
    rel_out = out.detach().clone()
    out.backward(rel_out, retain_graph=True)
    first = inp.x.grad.clone(), inp.edge_attr.grad.clone()
    inp.x.grad = inp.edge_attr.grad = None
    out.backward(rel_out)  # nothing saved was modified by the first backward
    assert torch.equal(first[0], inp.x.grad) and torch.equal(first[1], inp.edge_attr.grad)
    assert torch.equal(rel_out, out.detach())  # nor was the relevance passed in
    only_in = make_layer(NodeLinear, dict(incoming_features=FE), bias=False, eps=0.0)
    inp = relevance_inputs(data)
    with lrp_lib.teach.relevance():
        out = only_in(inp).x  # node 0 of each graph has no incoming edge: its output is 0
    with pytest.warns(LostRelevanceWarning, match="NodeLinear: relevance of total magnitude"):
        out.backward(torch.ones_like(out))
    lost = int((out.detach() == 0).sum())
    assert lost >= 4 * 2  # two output features of node 0 in each of the four graphs
    assert read_relevance(inp).totals()["total"] == pytest.approx(out.numel() - lost, abs=1e-9)


@pytest.mark.parametrize("cls,sizes,aggregation", list(configurations()))
def test_conservation_every_configuration(cls, sizes, aggregation):
    data = make_batch(seed=2)
    layer = make_layer(cls, sizes, bias=False, eps=0.0, aggregation=aggregation)
    inp, out, rel_out = run_relevance(layer, data)
    rel = read_relevance(inp)
    assert abs(rel.totals()["total"] - float(rel_out.sum())) < 1e-6
    # relevance stays inside each graph: per graph, inputs receive what its outputs held
    attr = ATTR[cls]
    groups = {"x": data.batch, "edge_attr": data.batch[data.edge_index[0]], "u": torch.arange(data.num_graphs)}[attr]
    per_graph_out = torch.zeros(data.num_graphs, dtype=torch.float64).index_add(0, groups, rel_out.sum(1))
    torch.testing.assert_close(rel.per_graph(), per_graph_out, atol=1e-9, rtol=0)
    assert rel.per_graph()[1] == pytest.approx(per_graph_out[1])  # the edgeless graph too


def test_bias_takes_its_proportional_share():
    data = make_batch()
    for cls, agg in ((EdgeLinear, None), (NodeLinear, "mean"), (GlobalLinear, "max")):
        layer = make_layer(cls, INPUTS[cls], bias=True, eps=0.0, aggregation=agg)
        inp, out, rel_out = run_relevance(layer, data)
        # share of the bias in output (r, o): b_o / z_ro * R_ro, summed over rows
        expected = (layer.bias.detach() / out.detach() * rel_out).sum(0)
        torch.testing.assert_close(layer.bias.grad, expected)
        total_in = read_relevance(inp).totals()["total"]
        assert total_in + float(layer.bias.grad.sum()) == pytest.approx(float(rel_out.sum()), abs=1e-9)
        assert abs(float(layer.bias.grad.sum())) > 1e-3  # the bias really took a share


@pytest.mark.parametrize("cls,aggregation", [(EdgeLinear, None), (NodeLinear, "sum"), (NodeLinear, "mean"),
                                             (NodeLinear, "max"), (GlobalLinear, "sum"), (GlobalLinear, "mean"),
                                             (GlobalLinear, "max")])
def test_forward_identical_and_true_gradient_outside(cls, aggregation):
    data = make_batch()
    layer = make_layer(cls, INPUTS[cls], bias=True, eps=1e-6, aggregation=aggregation)
    attr = ATTR[cls]
    outside = getattr(layer(data), attr)
    with lrp_lib.teach.relevance():
        inside = getattr(layer(data), attr)
    assert torch.equal(outside, inside)
    assert "Relevance" not in type(outside.grad_fn).__name__ and "Relevance" in type(inside.grad_fn).__name__
    names = [n for n, _ in layer.named_parameters()]

    def f(x, e, u, *params):
        d = data.clone()
        d.x, d.edge_attr, d.u = x, e, u
        return getattr(torch.func.functional_call(layer, dict(zip(names, params)), (d,)), attr)

    inputs = [data.x.clone().requires_grad_(), data.edge_attr.clone().requires_grad_(), data.u.clone().requires_grad_()]
    inputs += [p.detach().clone().requires_grad_() for p in layer.parameters()]
    assert torch.autograd.gradcheck(f, tuple(inputs))


def test_sequential_gn_shared_block_conserves():
    """Encoder, three applications of ONE hidden block, decoder: relevance conserved end to end."""
    torch.manual_seed(0)
    encoder = nn.Sequential(EdgeLinear(8, edge_features=FE, bias=False, eps=0), EdgeReLU(),
                            NodeLinear(8, node_features=FX, bias=False, eps=0), NodeReLU(),
                            GlobalLinear(8, global_features=FU, bias=False, eps=0), GlobalReLU())
    hidden = nn.Sequential(EdgeLinear(8, edge_features=8, sender_features=8, global_features=8, bias=False, eps=0),
                           EdgeReLU(),
                           NodeLinear(8, node_features=8, incoming_features=8, global_features=8, aggregation="max",
                                      bias=False, eps=0), NodeReLU(),
                           GlobalLinear(8, node_features=8, edge_features=8, aggregation="sum", bias=False, eps=0),
                           GlobalReLU())
    decoder = GlobalLinear(1, global_features=8, bias=False, eps=0)
    model = nn.Sequential(encoder, hidden, hidden, hidden, decoder).double()
    data = relevance_inputs(make_batch(seed=5))
    with lrp_lib.teach.relevance():
        out = model(data).u
    out.backward(out.detach())
    rel = read_relevance(data)
    assert rel.totals()["total"] == pytest.approx(float(out.detach().sum()), abs=1e-9)
    torch.testing.assert_close(rel.per_graph(), out.detach().view(-1), atol=1e-9, rtol=0)
    assert rel.totals()["nodes"] != 0 and rel.totals()["edges"] != 0


def test_elementwise_layers():
    data = make_batch()
    for cls, attr in ((EdgeReLU, "edge_attr"), (NodeReLU, "x"), (GlobalReLU, "u")):
        inp = relevance_inputs(data)
        with lrp_lib.teach.relevance():
            out = cls()(inp)
        assert torch.equal(out[attr], data[attr].clamp(min=0))
        keep = out[attr].detach() > 0
        out[attr].backward(out[attr].detach())  # R = output: nothing sent to inactive units
        torch.testing.assert_close(inp[attr].grad, torch.where(keep, data[attr], torch.zeros_like(data[attr])))
    tanh = ElementWise("x", torch.tanh)
    assert torch.equal(tanh(data).x, torch.tanh(data.x))
    with lrp_lib.teach.relevance(), pytest.raises(RuntimeError, match="has no relevance_fn"):
        tanh(data)
    with pytest.raises(ValueError, match="attribute must be one of"):
        ElementWise("pos", torch.tanh)
    with pytest.raises(ValueError, match="applies to u but the graph has no u"):
        GlobalReLU()(Data(x=torch.zeros(2, 1)))


def test_lost_relevance_warns():
    data = make_batch()
    inp = relevance_inputs(data)
    with lrp_lib.teach.relevance():
        out = NodeReLU()(inp).x
    with pytest.warns(LostRelevanceWarning, match="relu"):
        out.backward(torch.ones_like(out))  # inactive units cannot pass on their relevance


def test_returns_new_graph_with_one_attribute_replaced():
    data = make_batch()
    before = {k: data[k] for k in ("x", "edge_attr", "u", "edge_index", "batch")}
    out = make_layer(NodeLinear, INPUTS[NodeLinear], bias=True, eps=1e-6)(data)
    assert out is not data and type(out) is type(data) and out.num_graphs == data.num_graphs
    assert out.x.shape == (data.num_nodes, 2)
    for k, v in before.items():
        assert data[k] is v  # input untouched
        if k != "x":
            assert out[k] is v  # the rest shared, not copied


def test_single_graph_without_batch_and_num_graphs():
    d = make_batch(sizes=[(4, 5)]).to_data_list()[0]
    assert d.get("batch") is None and num_graphs(d) == 1
    out = make_layer(GlobalLinear, dict(node_features=FX, edge_features=FE), bias=False, eps=0)(d)
    assert out.u.shape == (1, 2)
    torch.testing.assert_close(out.u, make_layer(GlobalLinear, dict(node_features=FX, edge_features=FE),
                                                 bias=False, eps=0)(make_batch(sizes=[(4, 5)])).u)


def test_read_relevance_values():
    data = make_batch()
    layer = make_layer(EdgeLinear, INPUTS[EdgeLinear], bias=False, eps=0)
    inp, out, rel_out = run_relevance(layer, data)
    rel = read_relevance(inp)
    torch.testing.assert_close(rel.node, inp.x.grad.sum(1))
    torch.testing.assert_close(rel.edge, inp.edge_attr.grad.sum(1))
    torch.testing.assert_close(rel.graph, inp.u.grad.sum(1))
    assert rel.num_graphs == 4 and rel.edge_graph.tolist() == data.batch[data.edge_index[0]].tolist()
    t = rel.totals()
    assert t["nodes"] == pytest.approx(float(inp.x.grad.sum())) and t["total"] == pytest.approx(
        t["nodes"] + t["edges"] + t["globals"])
    # only x requires grad: edges and globals are None and count 0
    only_x = relevance_inputs(data, attributes=("x",))
    with lrp_lib.teach.relevance():
        o = make_layer(NodeLinear, dict(node_features=FX), bias=False, eps=0)(only_x).x
    o.backward(o.detach())
    r = read_relevance(only_x)
    assert r.edge is None and r.graph is None and r.totals()["edges"] == 0.0
    assert r.totals()["total"] == pytest.approx(float(o.sum()))


# ---------------------------------------------------------------------- bad input
def test_bad_input_errors():
    data = make_batch()
    edge = make_layer(EdgeLinear, INPUTS[EdgeLinear], bias=True, eps=1e-6)
    no_u = data.clone()
    del no_u.u
    with pytest.raises(ValueError, match=r"EdgeLinear is configured to read u .*size 4.* but the graph has no u"):
        edge(no_u)
    no_e = data.clone()
    del no_e.edge_attr
    with pytest.raises(ValueError, match="NodeLinear is configured to read edge_attr"):
        make_layer(NodeLinear, INPUTS[NodeLinear], bias=True, eps=1e-6)(no_e)
    wide = data.clone()
    wide.x = torch.zeros(data.num_nodes, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"EdgeLinear expects x with 3 features, but x has 5 \(shape \(14, 5\)\)"):
        edge(wide)
    short = data.clone()
    short.edge_attr = data.edge_attr[:-1]
    with pytest.raises(ValueError, match=r"edge_attr has 12 rows but the graph has 13 edges"):
        edge(short)
    few_u = data.clone()
    few_u.u = data.u[:2]
    with pytest.raises(ValueError, match=r"batch refers to graph 3 but u has 2 rows"):
        edge(few_u)
    bad_index = data.clone()
    bad_index.edge_index = data.edge_index.clone()
    bad_index.edge_index[1, 0] = 99
    with pytest.raises(IndexError, match=r"edge_index refers to nodes 0..99 but the graph has 14 nodes"):
        edge(bad_index)
    no_index = Data(x=data.x, edge_attr=data.edge_attr)
    with pytest.raises(ValueError, match="NodeLinear needs edge_index"):
        make_layer(NodeLinear, dict(incoming_features=FE), bias=False, eps=0)(no_index)
    ints = data.clone()
    ints.x = torch.zeros(data.num_nodes, FX, dtype=torch.long)
    with pytest.raises(TypeError, match="x must be a floating point tensor, got torch.int64"):
        edge(ints)
    with pytest.raises(TypeError, match="expects a torch_geometric Data or Batch, got Tensor"):
        edge(data.x)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        NodeLinear(2, incoming_features=2, aggregation="min")
    with pytest.raises(ValueError, match="GlobalLinear needs at least one input"):
        GlobalLinear(2)
    with pytest.raises(ValueError, match="edge_features must be a positive int or None, got 0"):
        EdgeLinear(2, edge_features=0)
    with pytest.raises(ValueError, match="out_features must be a positive int"):
        EdgeLinear(None, edge_features=2)
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        EdgeLinear(2, edge_features=2, eps=-1)
    with pytest.raises(ValueError, match="none of x, edge_attr, u requires grad"):
        read_relevance(data)
    inp = relevance_inputs(data)
    out = edge(inp)
    with pytest.raises(ValueError, match="edge_attr is not a leaf tensor"):
        read_relevance(out)


def test_read_relevance_of_a_graph_without_edges_but_with_edge_features():
    d = Data(x=torch.rand(2, 3, dtype=torch.float64), edge_index=torch.zeros(2, 0, dtype=torch.long),
             edge_attr=torch.rand(0, 2, dtype=torch.float64), u=torch.rand(1, 2, dtype=torch.float64))
    net = NodeLinear(1, node_features=3, incoming_features=2, bias=False, eps=0.0).double()
    inp = relevance_inputs(d)
    with lrp_lib.teach.relevance():
        out = net(inp).x
    out.backward(out.detach())
    rel = read_relevance(inp)
    assert rel.edge.shape == (0,)
    assert torch.allclose(rel.node, out.detach().view(-1))
