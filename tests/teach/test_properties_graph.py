"""Properties of the lrp_lib.teach.graph layers (EdgeLinear -> NodeLinear -> GlobalLinear -> read-out,
with or without ReLUs, any inputs and aggregations) run inside ``lrp_lib.teach.relevance()``, over
generated graphs and batches with node, edge and global features, in float32 and float64.

Tolerances are relative to the explanation's size (``scale``): 1e-9 in float64, 1e-4 in float32.
"""
import math
import warnings
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from lrp_lib.teach import graph as G
from lrp_lib.teach import relevance
from property_strategies import DTYPES, FEATURES, TOL, batch_of, graph_specs, permutations, scale

EDGE_F, GLOBAL_F = 2, 2
dtypes = st.sampled_from(list(DTYPES.values()))


@dataclass(frozen=True)
class NetSpec:
    edge_inputs: tuple
    node_inputs: tuple
    global_inputs: tuple
    node_aggregation: str
    global_aggregation: str
    hidden: int
    out: int
    relu: bool
    bias: bool
    eps: float
    seed: int

    def build(self, dtype=torch.float64, eps=None):
        eps = self.eps if eps is None else eps
        torch.manual_seed(self.seed)
        h = self.hidden
        edge_sizes = dict(edge=EDGE_F, sender=FEATURES, receiver=FEATURES, global_=GLOBAL_F)
        edge = G.EdgeLinear(h, **{f"{k.rstrip('_')}_features": edge_sizes[k] for k in self.edge_inputs},
                            bias=self.bias, eps=eps)
        node_sizes = dict(node=FEATURES, incoming=h, outgoing=h, global_=GLOBAL_F)
        node = G.NodeLinear(h, **{f"{k.rstrip('_')}_features": node_sizes[k] for k in self.node_inputs},
                            aggregation=self.node_aggregation, bias=self.bias, eps=eps)
        global_sizes = dict(node=h, edge=h, global_=GLOBAL_F)
        glob = G.GlobalLinear(h, **{f"{k.rstrip('_')}_features": global_sizes[k] for k in self.global_inputs},
                              aggregation=self.global_aggregation, bias=self.bias, eps=eps)
        head = G.GlobalLinear(self.out, global_features=h, bias=self.bias, eps=eps)
        layers = [edge, G.EdgeReLU(), node, G.NodeReLU(), glob, G.GlobalReLU(), head] if self.relu else \
            [edge, node, glob, head]
        return nn.Sequential(*layers).to(dtype)


def subsets(items):
    return st.lists(st.sampled_from(items), min_size=1, max_size=len(items), unique=True).map(tuple)


@st.composite
def net_specs(draw, bias=None, aggregations=("sum", "mean", "max"), eps=None):
    return NetSpec(
        edge_inputs=draw(subsets(["edge", "sender", "receiver", "global_"])),
        node_inputs=draw(subsets(["node", "incoming", "outgoing", "global_"])),
        global_inputs=draw(subsets(["node", "edge", "global_"])),
        node_aggregation=draw(st.sampled_from(list(aggregations))),
        global_aggregation=draw(st.sampled_from(list(aggregations))),
        hidden=draw(st.integers(1, 4)), out=draw(st.integers(1, 2)), relu=draw(st.booleans()),
        bias=draw(st.booleans()) if bias is None else bias,
        eps=draw(st.sampled_from([0.0, 1e-6, 0.1])) if eps is None else eps,
        seed=draw(st.integers(0, 2**31 - 1)))


def graph_data(specs, dtype):
    return batch_of(specs, dtype, edge_features=EDGE_F, globals_=GLOBAL_F)


def explain(net, data):
    """Relevance of every output of the read-out: (per-graph input relevance, inputs whose .grad
    holds it, bias relevance, outputs).  The per-graph sums are taken here from the gradients,
    not with ``read_relevance`` (see test_read_relevance_reads_every_graph)."""
    net.zero_grad(set_to_none=True)
    inputs = G.relevance_inputs(data)
    with relevance():
        out = net(inputs).u
    out.backward(out.detach())
    biases = sum(float(m.bias.grad.sum()) for m in net
                 if getattr(m, "bias", None) is not None and m.bias.grad is not None)
    return per_graph(inputs), inputs, biases, out.detach()


def grad(t):
    """``t.grad``, or zeros where no relevance reached ``t`` (the model does not read it)."""
    return t.grad if t.grad is not None else torch.zeros_like(t)


def per_graph(inputs):
    """Relevance of each graph's nodes, edges (by their sender) and globals, from the .grad's."""
    batch = inputs.batch
    total = torch.zeros(inputs.u.shape[0], dtype=inputs.x.dtype)
    total.index_add_(0, batch, grad(inputs.x).sum(-1))
    total.index_add_(0, batch[inputs.edge_index[0]], grad(inputs.edge_attr).sum(-1))
    return total + grad(inputs.u).sum(-1)


def close(actual, expected, tol):
    gap = (actual - expected).abs()
    worst = float(gap.max()) if gap.numel() else 0.0
    assert worst <= tol, f"max |difference| {worst:.3g} > tolerance {tol:.3g}\nactual {actual}\nexpected {expected}"


# ------------------------------------------------------------------ conservation
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), net=net_specs(bias=False, eps=0.0), dtype=dtypes)
def test_bias_free_lrp0_conserves_each_graphs_output(specs, net, dtype):
    """Node + edge-feature + global relevance of each graph = the sum of its outputs."""
    rel, inputs, _, out = explain(net.build(dtype), graph_data(specs, dtype))
    close(rel, out.sum(-1), TOL[dtype] * scale(grad(inputs.x), grad(inputs.edge_attr), grad(inputs.u), out))


@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), net=net_specs(bias=True, eps=0.0), dtype=dtypes)
def test_with_biases_inputs_plus_bias_relevance_conserve_the_output(specs, net, dtype):
    """With biases the bias of every layer keeps its share (``layer.bias.grad``, summed over the
    graphs); inputs + biases = the sum of the outputs."""
    model = net.build(dtype)
    rel, inputs, biases, out = explain(model, graph_data(specs, dtype))
    size = scale(grad(inputs.x), grad(inputs.edge_attr), grad(inputs.u), out,
                 *[m.bias.grad for m in model if getattr(m, "bias", None) is not None])
    close(rel.sum().double() + biases, out.sum().double(), TOL[dtype] * size)


@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), net=net_specs(), dtype=dtypes)
def test_read_relevance_reads_every_graph(specs, net, dtype):
    """``read_relevance(inputs)`` sums what the .grad's hold, for any graph (edgeless ones too)."""
    rel, inputs, _, _ = explain(net.build(dtype), graph_data(specs, dtype))
    read = G.read_relevance(inputs)
    tol = TOL[dtype] * scale(grad(inputs.x), grad(inputs.edge_attr), grad(inputs.u))
    close(read.node, grad(inputs.x).sum(-1), tol)
    close(read.edge, grad(inputs.edge_attr).sum(-1), tol)
    close(read.graph, grad(inputs.u).sum(-1), tol)
    close(read.per_graph(), rel, tol)
    assert read.num_graphs == len(specs)


# ------------------------------------------------------------------ batching invariance
@given(specs=st.lists(graph_specs(), min_size=2, max_size=4), net=net_specs(), dtype=dtypes)
def test_a_batch_is_explained_as_its_graphs_one_by_one(specs, net, dtype):
    """Per-input relevance of a Batch = that of each graph alone; bias relevance adds up."""
    model = net.build(dtype)
    _, together, bias_together, _ = explain(model, graph_data(specs, dtype))
    singles = []
    bias_singles = 0.0
    for s in specs:
        model.zero_grad()
        _, inputs, b, _ = explain(model, graph_data([s], dtype))
        singles.append(inputs)
        bias_singles += b
    for name in ("x", "edge_attr", "u"):
        expected = torch.cat([grad(getattr(s, name)) for s in singles])
        close(grad(getattr(together, name)), expected, TOL[dtype] * scale(expected))
    assert abs(bias_together - bias_singles) <= TOL[dtype] * (1 + abs(bias_singles))


# ------------------------------------------------------------------ permutation equivariance
@given(spec=graph_specs(unique_edges=True), net=net_specs(aggregations=("sum", "mean")), data=st.data(),
       dtype=dtypes)
def test_relabelling_nodes_permutes_node_and_edge_relevance(spec, net, data, dtype):
    """New node j is old node perm[j], the edges listed in a new order.  Sum and mean only: a
    max gives all relevance to its winner and an exact tie (from a symmetry of the graph, or a
    repeated edge) goes to the later element by definition, so it follows the order."""
    model = net.build(dtype)
    d = graph_data([spec], dtype)
    perm = data.draw(permutations(spec.nodes), label="node permutation")
    order = data.draw(permutations(len(spec.edges)), label="edge order")
    moved = d.clone()
    moved.x = d.x[perm]
    moved.edge_index = torch.argsort(perm)[d.edge_index][:, order]
    moved.edge_attr = d.edge_attr[order]
    _, before, _, _ = explain(model, d)
    _, after, _, _ = explain(model, moved)
    tol = TOL[dtype] * scale(grad(before.x), grad(before.edge_attr), grad(before.u))
    close(grad(after.x), grad(before.x)[perm], tol)
    close(grad(after.edge_attr), grad(before.edge_attr)[order], tol)
    close(grad(after.u), grad(before.u), tol)


# ------------------------------------------------------------------ dtype agreement
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), net=net_specs(aggregations=("sum", "mean")))
def test_float32_agrees_with_float64(specs, net):
    """Same weights and features (float64 = float32 cast) agree to 1e-3 of the explanation's
    size: float32 rounds at ~6e-8 relative and the rules divide by z + eps sign(z), amplifying it
    by |terms| / |z|; 1e-3 leaves ~1e4 of headroom for that, while a dtype bug moves relevance by
    a share of the whole.  No max aggregation: near-ties may pick another winner in float32."""
    m32, m64 = net.build(torch.float32), net.build(torch.float32).double()
    d32 = graph_data(specs, torch.float32)
    d64 = d32.clone()
    for name in ("x", "edge_attr", "u"):
        setattr(d64, name, getattr(d32, name).double())
    _, a, _, _ = explain(m32, d32)
    _, b, _, _ = explain(m64, d64)
    tol = 1e-3 * scale(grad(b.x), grad(b.edge_attr), grad(b.u))
    for name in ("x", "edge_attr", "u"):
        assert grad(getattr(a, name)).dtype == torch.float32
        close(grad(getattr(a, name)).double(), grad(getattr(b, name)), tol)


# ------------------------------------------------------------------ LRP-0 = x * grad
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), net=net_specs(bias=False, eps=0.0), dtype=dtypes)
def test_lrp0_equals_input_times_gradient_on_bias_free_layers(specs, net, dtype):
    """Bias-free layers with ReLUs and sum/mean/max aggregations are piecewise linear and
    positively homogeneous: LRP-0 = input * gradient for x, edge_attr and u."""
    model = net.build(dtype)
    data = graph_data(specs, dtype)
    _, lrp, _, _ = explain(model, data)
    plain = G.relevance_inputs(data)
    model(plain).u.sum().backward()
    tol = TOL[dtype] * scale(grad(lrp.x), grad(lrp.edge_attr), grad(lrp.u))
    for name in ("x", "edge_attr", "u"):
        t = getattr(plain, name)
        close(grad(getattr(lrp, name)), t.detach() * grad(t), tol)


# ------------------------------------------------------------------ epsilon limit
@given(specs=st.lists(graph_specs(), min_size=1, max_size=3), net=net_specs())
def test_epsilon_tends_to_lrp0(specs, net):
    """Float64, same weights: the layers' eps -> 0 tends to eps = 0, to first order."""
    data = graph_data(specs, torch.float64)

    def relevance_at(eps):
        _, inputs, b, _ = explain(net.build(torch.float64, eps=eps), data)
        return torch.cat([grad(inputs.x).view(-1), grad(inputs.edge_attr).view(-1), grad(inputs.u).view(-1),
                          torch.tensor([b], dtype=torch.float64)])

    zero = relevance_at(0.0)
    size = scale(zero)
    gaps = {eps: float((relevance_at(eps) - zero).abs().max()) for eps in (1e-8, 1e-12)}
    assert gaps[1e-12] <= 1e-8 * size, gaps
    assert gaps[1e-12] <= 1e-3 * gaps[1e-8] + 1e-12 * size, gaps


# ------------------------------------------------------------------ bad input
@given(specs=st.lists(graph_specs(min_edges=1), min_size=1, max_size=3), net=net_specs(),
       bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
       where=st.sampled_from(["x", "edge_attr", "u"]), data=st.data(), dtype=dtypes)
def test_a_bad_input_never_gives_a_silent_nan(specs, net, bad, where, data, dtype):
    """NaN or Inf in node, edge or global features: the layers raise, or the relevance is finite.
    Warnings are recorded, not raised: a warning next to a NaN relevance is still a NaN."""
    d = graph_data(specs, dtype)
    t = getattr(d, where)
    t.view(-1)[data.draw(st.integers(0, t.numel() - 1), label="entry")] = bad
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            _, inputs, biases, _ = explain(net.build(dtype), d)
        except Exception:  # noqa: BLE001 -- an error of any kind is not a silent NaN
            return
    for name in ("x", "edge_attr", "u"):
        assert bool(torch.isfinite(grad(getattr(inputs, name))).all()), f"relevance of {name} is not finite"
    assert math.isfinite(biases), "bias relevance is not finite"
