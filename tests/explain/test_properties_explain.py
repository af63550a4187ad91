"""Properties of LRPExplainer (through torch_geometric.explain.Explainer) over generated graphs,
batches and models from the supported zoo (GCNConv, GraphConv, SAGEConv, GINConv; add, mean and
max pools; Linear and ReLU heads), in float32 and float64.

Tolerances are relative to the size of the explanation (``scale``: 1 + the largest sum of
absolute values): 1e-9 in float64 and 1e-4 in float32 where only rounding separates the two
sides.  A lost share (a self-loop, a bias, a GIN root term, a mean's 1/n) is of the order of the
explanation itself, so it cannot hide under these tolerances.
"""
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.explain import Explainer

from lrp_lib.explain.explainer import LRPExplainer
from lrp_lib.core.rules import Epsilon, Gamma
from property_strategies import (CONVS, DTYPES, MAX_FREE, TOL, WEIGHTED, batch_of, graph_specs,
                                 model_specs, permutations, scale)

MODES = ("regression", "binary_classification", "multiclass_classification")
dtypes = st.sampled_from(list(DTYPES.values()))


def explainer(model, rule, mode="regression", task_level="graph"):
    return Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode=mode, task_level=task_level, return_type="raw"))


def explained_value(out, mode):
    """Per row, the value LRPExplainer starts from: the output (regression, all columns summed),
    the log-odds of the predicted class (binary: |z|), the logit of the predicted class."""
    if mode == "regression":
        return out.sum(-1)
    if mode == "binary_classification":
        return torch.where(out > 0, out, -out).view(-1)
    return out.gather(1, out.argmax(1, keepdim=True)).view(-1)


def close(actual, expected, tol):
    """``|actual - expected| <= tol`` element-wise, with the worst entry in the message."""
    gap = (actual - expected).abs()
    worst = float(gap.max()) if gap.numel() else 0.0
    assert worst <= tol, f"max |difference| {worst:.3g} > tolerance {tol:.3g}\nactual {actual}\nexpected {expected}"


def edge_weights(spec, draw_weights, dtype, seed=1):
    """Positive edge weights for the convolutions that take them, else None."""
    if not draw_weights:
        return None
    g = torch.Generator().manual_seed(seed)
    return (0.1 + torch.rand(len(spec.edges), generator=g, dtype=torch.float64)).to(dtype)


# ------------------------------------------------------------------ conservation
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), model=model_specs(bias=False),
       mode=st.sampled_from(MODES), dtype=dtypes)
def test_bias_free_lrp0_conserves_each_graphs_output(specs, model, mode, dtype):
    """Without biases and with LRP-0, each graph's node relevance sums to the explained output
    (these PyG models have no edge features: the edge mask re-counts relevance already in the
    nodes, carried by messages, so it is not added)."""
    if mode == "binary_classification":
        model = type(model)(**{**vars(model), "out": 1})
    net = model.build(dtype)
    batch = batch_of(specs, dtype)
    e = explainer(net, Epsilon(0.0), mode)(batch.x, batch.edge_index, batch=batch.batch)
    out = net(batch.x, batch.edge_index, batch.batch).detach()
    per_graph = torch.zeros(len(specs), dtype=dtype).index_add_(0, batch.batch, e.node_relevance.sum(-1))
    expected = explained_value(out, mode)
    close(per_graph, expected, TOL[dtype] * scale(e.node_relevance, expected))


@given(spec=graph_specs(), model=model_specs(bias=False, pools=(None,)), data=st.data(), dtype=dtypes)
def test_bias_free_lrp0_conserves_a_node_level_output(spec, model, data, dtype):
    net = model.build(dtype)
    x, edge_index, _, _ = spec.tensors(dtype)
    index = data.draw(st.integers(0, spec.nodes - 1), label="index")
    e = explainer(net, Epsilon(0.0), task_level="node")(x, edge_index, index=index)
    expected = net(x, edge_index).detach()[index].sum()
    close(e.node_relevance.sum(), expected, TOL[dtype] * scale(e.node_relevance, expected))


# ------------------------------------------------------------------ batching invariance
RULES = st.sampled_from([Epsilon(), Epsilon(0.0), Epsilon(0.1), Gamma(0.25), Gamma(0.0, eps=0.0)])


@given(specs=st.lists(graph_specs(), min_size=2, max_size=4), model=model_specs(), rule=RULES,
       mode=st.sampled_from(MODES), weighted=st.booleans(), dtype=dtypes)
def test_a_batch_is_explained_as_its_graphs_one_by_one(specs, model, rule, mode, weighted, dtype):
    if mode == "binary_classification":
        model = type(model)(**{**vars(model), "out": 1})
    net = model.build(dtype)
    exp = explainer(net, rule, mode)
    weighted = weighted and model.conv in WEIGHTED
    weights = [edge_weights(s, weighted, dtype, seed=k) for k, s in enumerate(specs)]
    batch = batch_of(specs, dtype)
    kw = dict(edge_weight=torch.cat(weights)) if weighted else {}
    together = exp(batch.x, batch.edge_index, batch=batch.batch, **kw)
    singles = []
    for s, w in zip(specs, weights):
        x, edge_index, _, _ = s.tensors(dtype)
        singles.append(exp(x, edge_index, **(dict(edge_weight=w) if weighted else {})))
    node = torch.cat([s.node_relevance for s in singles])
    edge = torch.cat([s.edge_relevance for s in singles])
    tol = TOL[dtype] * scale(node, edge)
    close(together.node_relevance, node, tol)
    close(together.edge_relevance, edge, tol)
    # the accounts too, graph by graph: what the biases kept and what was lost, as for each graph alone
    bias, residual = (torch.cat([s[key] for s in singles]) for key in ("bias_relevance", "relevance_residual"))
    tol = TOL[dtype] * scale(node, edge, bias, residual)
    close(together.bias_relevance, bias, tol)
    close(together.relevance_residual, residual, tol)
    # and they close each graph's account: node relevance + bias + residual = its explained output
    out = net(batch.x, batch.edge_index, batch.batch, **kw).detach()
    nodes = torch.zeros(len(specs), dtype=dtype).index_add_(0, batch.batch, together.node_relevance.sum(-1))
    close(nodes + together.bias_relevance + together.relevance_residual, explained_value(out, mode), tol)


# ------------------------------------------------------------------ permutation equivariance
@given(spec=graph_specs(unique_edges=True), model=model_specs(convs=MAX_FREE, pools=("add", "mean")), rule=RULES,
       weighted=st.booleans(), data=st.data(), dtype=dtypes)
def test_relabelling_nodes_permutes_node_and_edge_relevance(spec, model, rule, weighted, data, dtype):
    """New node j is old node perm[j]; the edges are also listed in a new order.  No max
    aggregation or pool: a max gives all relevance to one winner and an exact tie goes to the
    later element by definition, and graph symmetries make exact ties (the thorough profile found
    one: nodes 0 <-> 1 under GCN get the same embedding, so the max pool's winner, and with it the
    edge relevance, follows the node order).  Edges are unique, as repeated edges tie too."""
    net = model.build(dtype)
    exp = explainer(net, rule)
    x, edge_index, _, _ = spec.tensors(dtype)
    weighted = weighted and model.conv in WEIGHTED
    w = edge_weights(spec, weighted, dtype)
    perm = data.draw(permutations(spec.nodes), label="node permutation")
    order = data.draw(permutations(len(spec.edges)), label="edge order")
    new_label = torch.argsort(perm)
    before = exp(x, edge_index, **(dict(edge_weight=w) if weighted else {}))
    after = exp(x[perm], new_label[edge_index][:, order], **(dict(edge_weight=w[order]) if weighted else {}))
    tol = TOL[dtype] * scale(before.node_relevance, before.edge_relevance)
    close(after.node_relevance, before.node_relevance[perm], tol)
    close(after.edge_relevance, before.edge_relevance[order], tol)


# ------------------------------------------------------------------ dtype agreement
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3),
       model=model_specs(convs=MAX_FREE, pools=("add", "mean")),
       rule=st.sampled_from([Epsilon(), Epsilon(0.1), Gamma(0.25)]))
def test_float32_agrees_with_float64(specs, model, rule):
    """float32 and float64 on the same numbers (the float64 model and graph are the float32 ones,
    cast) agree to 1e-3 of the explanation's size.  float32 rounds at ~6e-8 relative; the rules
    divide by outputs z + eps sign(z), which amplifies that rounding by |terms| / |z|: 1e-3 leaves
    a factor ~1e4 of headroom for that, while a dtype-dependent bug (a constant cast to float32,
    a stabiliser that depends on the dtype) moves relevance by far more.  Max aggregations and
    pools are left out: when two values are within float32 rounding of each other the winner (who
    takes all the relevance) may differ between the dtypes, which is the rule, not an error."""
    net32, net64 = model.build(torch.float32), model.build(torch.float64)
    b32 = batch_of(specs, torch.float32)
    e32 = explainer(net32, rule)(b32.x, b32.edge_index, batch=b32.batch)
    e64 = explainer(net64, rule)(b32.x.double(), b32.edge_index, batch=b32.batch)
    assert e32.node_relevance.dtype == torch.float32 and e64.node_relevance.dtype == torch.float64
    assert e32.edge_relevance.dtype == torch.float32 and e64.edge_relevance.dtype == torch.float64
    tol = 1e-3 * scale(e64.node_relevance, e64.edge_relevance)
    close(e32.node_relevance.double(), e64.node_relevance, tol)
    close(e32.edge_relevance.double(), e64.edge_relevance, tol)


# ------------------------------------------------------------------ LRP-0 = x * grad
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), model=model_specs(bias=False), dtype=dtypes)
def test_lrp0_equals_input_times_gradient_on_bias_free_models(specs, model, dtype):
    """Every model of the zoo without biases is piecewise linear and positively homogeneous, so
    LRP-0 gives x * df/dx.  Where the convolution takes an edge weight that is the message's
    only factor (GraphConv, GCNConv without normalisation), the edge relevance is
    w * df/dw: each message w_e x_j gets m * df/dm, summed over layers."""
    net = model.build(dtype)
    batch = batch_of(specs, dtype)
    linear_in_w = model.conv.startswith("graphconv") or model.conv == "gcn-unnormalised"
    w = (0.5 + torch.rand(batch.edge_index.shape[1], generator=torch.Generator().manual_seed(3),
                          dtype=torch.float64)).to(dtype) if linear_in_w else None
    kw = dict(edge_weight=w) if linear_in_w else {}
    e = explainer(net, Epsilon(0.0))(batch.x, batch.edge_index, batch=batch.batch, **kw)
    x = batch.x.clone().requires_grad_(True)
    w_leaf = w.clone().requires_grad_(True) if linear_in_w else None
    net(x, batch.edge_index, batch.batch, **(dict(edge_weight=w_leaf) if linear_in_w else {})).sum().backward()
    tol = TOL[dtype] * scale(e.node_relevance, e.edge_relevance)
    close(e.node_relevance, x.detach() * x.grad, tol)
    if linear_in_w:
        close(e.edge_relevance, w * w_leaf.grad, tol)


# ------------------------------------------------------------------ rule limits
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), model=model_specs(), dtype=dtypes)
def test_gamma_zero_is_epsilon(specs, model, dtype):
    """Gamma(0) adds 0 * w+ to the weights: the epsilon rule with the same eps, to rounding."""
    net = model.build(dtype)
    batch = batch_of(specs, dtype)
    for gamma, epsilon in ((Gamma(0.0, eps=0.0), Epsilon(0.0)), (Gamma(0.0), Epsilon())):
        g = explainer(net, gamma)(batch.x, batch.edge_index, batch=batch.batch)
        e = explainer(net, epsilon)(batch.x, batch.edge_index, batch=batch.batch)
        tol = TOL[dtype] * scale(e.node_relevance, e.edge_relevance)
        close(g.node_relevance, e.node_relevance, tol)
        close(g.edge_relevance, e.edge_relevance, tol)


@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), model=model_specs())
def test_epsilon_tends_to_lrp0(specs, model):
    """In float64, Epsilon(eps) -> Epsilon(0) as eps -> 0, to first order in eps: the gap at
    eps = 1e-12 is below 1e-8 of the explanation's size and ~1e-4 of the gap at eps = 1e-8."""
    net = model.build(torch.float64)
    batch = batch_of(specs, torch.float64)

    def masks(eps):
        e = explainer(net, Epsilon(eps))(batch.x, batch.edge_index, batch=batch.batch)
        return torch.cat([e.node_relevance.view(-1), e.edge_relevance.view(-1)])

    zero = masks(0.0)
    size = scale(zero)
    gaps = {eps: float((masks(eps) - zero).abs().max()) if zero.numel() else 0.0 for eps in (1e-8, 1e-12)}
    assert gaps[1e-12] <= 1e-8 * size, gaps
    assert gaps[1e-12] <= 1e-3 * gaps[1e-8] + 1e-12 * size, gaps


# ------------------------------------------------------------------ bad input
BAD_VALUES = st.sampled_from([float("nan"), float("inf"), float("-inf")])


def finite_or_raises(call):
    """Run ``call``: it may raise (a clear error) or return masks; returned masks must be finite.
    Warnings are recorded, not raised: a warning next to a NaN mask is still a NaN mask."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            e = call()
        except Exception:  # noqa: BLE001 -- an error of any kind is not a silent NaN
            return
    for name in ("node_mask", "edge_mask"):
        mask = getattr(e, name, None)
        assert mask is None or bool(torch.isfinite(mask).all()), f"{name} is not finite: {mask}"


@given(spec=graph_specs(min_edges=1), bad=BAD_VALUES,
       where=st.sampled_from(["x", "edge_weight", "negative_gcn_weight"]), data=st.data(), dtype=dtypes)
def test_a_bad_input_never_gives_a_silent_nan(spec, bad, where, data, dtype):
    """NaN or Inf in the node features or the edge weights, or a negative edge weight on a
    normalised GCN (whose degree normalisation then takes the root of a negative number; PyG's
    own output is NaN there): the explainer raises, or returns finite masks."""
    convs = {"x": tuple(CONVS), "edge_weight": WEIGHTED, "negative_gcn_weight": ("gcn", "gcn-improved")}[where]
    model = data.draw(model_specs(convs=convs), label="model")
    net = model.build(dtype)
    x, edge_index, _, _ = spec.tensors(dtype)
    w = None
    if where == "x":
        x.view(-1)[data.draw(st.integers(0, x.numel() - 1), label="entry")] = bad
    else:
        w = edge_weights(spec, True, dtype)
        k = data.draw(st.integers(0, w.numel() - 1), label="edge")
        w[k] = bad if where == "edge_weight" else -w[k] - 1.0
    kw = {} if w is None else dict(edge_weight=w)
    finite_or_raises(lambda: explainer(net, Epsilon())(x, edge_index, **kw))
