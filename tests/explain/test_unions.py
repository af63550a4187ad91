"""The k-hop subgraphs of many targets as one union (:mod:`lrp_lib.explain.subgraphs.unions`), against a
breadth-first search per target written from the definition; and the memory estimate of a pass
over it (:func:`lrp_lib.explain.subgraphs.pass_bytes`)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lrp_lib.explain.subgraphs import EDGE_BYTES, pass_bytes
from lrp_lib.explain.subgraphs.unions import k_hop_union, union_graph, with_border


def csr(edge_index, n):
    dst = edge_index[1]
    counts = torch.bincount(dst, minlength=n)
    return torch.argsort(dst, stable=True), torch.cumsum(counts, 0) - counts, counts


def reference(edge_index, target, hops):
    """{node: distance} upstream of ``target`` within ``hops``, by one BFS over the edge list."""
    dist, frontier = {target: 0}, {target}
    for d in range(1, hops + 1):
        frontier = {s for s, r in edge_index.t().tolist() if r in frontier and s not in dist}
        dist.update({s: d for s in frontier})
    return dist


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), per_node=st.integers(0, 4), hops=st.integers(0, 4), targets=st.integers(1, 5),
       seed=st.integers(0, 2**16))
def test_the_union_is_each_targets_bfs(n, per_node, hops, targets, seed):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, n * per_node), generator=g)
    index = torch.randint(0, n, (targets,), generator=g)
    u = k_hop_union(index, hops, edge_index[0], *csr(edge_index, n), n)
    assert torch.equal(u.keys, torch.sort(u.keys).values)
    for b, t in enumerate(index.tolist()):
        dist = reference(edge_index, t, hops)
        mine = (u.keys // n) == b
        assert {int(k) % n: int(d) for k, d in zip(u.keys[mine], u.depth[mine])} == dist
        inner = sorted(e for e, r in enumerate(edge_index[1].tolist()) if dist.get(r, hops) < hops)
        border = sorted(e for e, r in enumerate(edge_index[1].tolist()) if dist.get(r, -1) == hops)
        assert sorted(u.edge_id[u.edge_graph == b].tolist()) == inner
        assert sorted(u.border_id[u.border_graph == b].tolist()) == border
    for graph, ids, receiver in ((u.edge_graph, u.edge_id, u.edge_receiver),
                                 (u.border_graph, u.border_id, u.border_receiver)):
        assert torch.equal(u.keys[receiver], graph * n + edge_index[1][ids])
    assert torch.equal(u.edge_depth, u.depth[u.edge_receiver])


@pytest.mark.parametrize("keep", [True, False])
def test_the_union_graph_keeps_the_degrees_and_the_loops(keep):
    border = "all" if keep else "none"
    g = torch.Generator().manual_seed(3)
    n = 40
    edge_index = torch.randint(0, n, (2, 160), generator=g)
    edge_index[:, :5] = torch.arange(5).repeat(2, 1)  # self-loops, some of them at the border
    index = torch.tensor([0, 9, 9, 31])
    x = torch.randn(n, 3, generator=g)
    u = k_hop_union(index, 2, edge_index[0], *csr(edge_index, n), n)
    sub_x, sub_edges, _, rows, _, real, edge_b, edge_e, depth, groups = \
        union_graph(x, {}, None, index, 0, u, edge_index[0], edge_index[1], n, border)[:10]
    m = u.keys.numel()
    assert torch.equal(u.keys[rows], torch.arange(4) * n + index) and torch.equal(groups[:m], u.keys // n)
    assert torch.equal(sub_x[:m], x[u.keys % n])
    # each union edge is its full-graph edge; the border's (kept) from the stand-in of its subgraph,
    # a self-loop from its node
    senders, receivers = sub_edges
    assert torch.equal(u.keys[receivers], edge_b * n + edge_index[1][edge_e])
    inside = senders < m
    assert torch.equal(u.keys[senders[inside]], edge_b[inside] * n + edge_index[0][edge_e[inside]])
    assert torch.equal(senders[~inside], m + edge_b[~inside])
    assert torch.equal(real, torch.arange(sub_edges.shape[1]) < u.edge_id.numel())
    loops = edge_index[0][edge_e] == edge_index[1][edge_e]
    assert torch.equal(senders[loops], receivers[loops])
    degree = torch.bincount(receivers, minlength=sub_x.shape[0])[:m]
    full = torch.bincount(edge_index[1], minlength=n)[u.keys % n]
    closer = u.depth < 2
    assert torch.equal(degree[closer], full[closer])
    if keep:  # every node keeps its in-degree; the stand-ins receive nothing and are deepest
        assert torch.equal(degree, full) and sub_x.shape[0] == m + 4
        assert bool((depth[m:] > 2).all()) and not bool(sub_x[m:].any())
    else:
        assert sub_x.shape[0] == m and not bool(degree[~closer].any())


def test_the_memory_estimate_counts_each_steps_messages_on_its_edges():
    g = torch.Generator().manual_seed(0)
    n = 50
    edge_index = torch.randint(0, n, (2, 300), generator=g)
    u = k_hop_union(torch.tensor([1, 2, 3]), 3, edge_index[0], *csr(edge_index, n), n)
    per_node, per_message = 100.0, [10.0, 20.0, 40.0]
    inner, border = u.edge_id.numel(), u.border_id.numel()
    into = [int((u.edge_depth <= d).sum()) for d in range(3)]  # edges into nodes within d hops
    assert pass_bytes(per_node, per_message, u, 3, 3, border_edges=border, layered=False) == \
        100 * (u.keys.numel() + 3) + (EDGE_BYTES + 70) * (inner + border)
    assert pass_bytes(per_node, per_message, u, 3, 3, border_edges=None, layered=False) == \
        100 * u.keys.numel() + (EDGE_BYTES + 70) * inner
    assert pass_bytes(per_node, per_message, u, 3, 3, border_edges=border, layered=True) == \
        100 * (u.keys.numel() + 3) + EDGE_BYTES * (inner + border) + 10 * into[2] + 20 * into[1] + 40 * into[0]
    # a fourth step (more than hops): not pruned, on every edge
    assert pass_bytes(per_node, per_message + [5.0], u, 3, 3, border_edges=None, layered=True) == \
        100 * u.keys.numel() + EDGE_BYTES * inner + 10 * into[2] + 20 * into[1] + 40 * into[0] + 5 * inner


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), per_node=st.integers(0, 4), hops=st.integers(0, 3), targets=st.integers(1, 4),
       loops=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_the_border_added_later_is_the_border_found_at_once(n, per_node, hops, targets, loops, seed):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, n * per_node + loops), generator=g)
    edge_index[1, :loops] = edge_index[0, :loops]  # self-loops
    index = torch.randint(0, n, (targets,), generator=g)
    csr_ = csr(edge_index, n)
    at_once = k_hop_union(index, hops, edge_index[0], *csr_, n)
    bare = k_hop_union(index, hops, edge_index[0], *csr_, n, border=False)
    assert bare.border_id.numel() == 0
    later = with_border(bare, hops, *csr_, n)
    for a, b in zip(at_once, later):
        assert torch.equal(a, b)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), per_node=st.integers(0, 4), hops=st.integers(0, 3), targets=st.integers(1, 4),
       loops=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_a_counted_border_gives_every_node_its_in_degree(n, per_node, hops, targets, loops, seed):
    """border="counted": the multiplicities summed per receiver are each node's full in-degree, its
    self-loops summed apart; the edges into nodes closer than the border are those of "all", in the
    same order; the counted edges are never real."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, n * per_node + loops), generator=g)
    edge_index[1, :loops] = edge_index[0, :loops]
    src, dst = edge_index
    index = torch.randint(0, n, (targets,), generator=g)
    csr_ = csr(edge_index, n)
    u = k_hop_union(index, hops, src, *csr_, n)
    x = torch.randn(n, 2, generator=g)
    own = torch.bincount(dst[src == dst], minlength=n)
    counted = union_graph(x, {}, None, index, 0, u, src, dst, n, "counted", hops=hops, loops=own, counts=csr_[2])
    every = union_graph(x, {}, None, index, 0, u, src, dst, n, "all")
    m = u.keys.numel()
    senders, receivers = counted.edge_index
    weight = counted.multiplicity
    assert weight.shape == (senders.numel(),) and bool((weight > 0).all())
    loop = senders == receivers
    degree = torch.zeros(m + targets, dtype=torch.long).index_add_(0, receivers, weight)[:m]
    looped = torch.zeros(m + targets, dtype=torch.long).index_add_(0, receivers[loop], weight[loop])[:m]
    node = u.keys % n
    assert torch.equal(degree, csr_[2][node]) and torch.equal(looped, own[node])
    inner = u.edge_id.numel()
    assert torch.equal(counted.edge_index[:, :inner], every.edge_index[:, :inner])
    assert torch.equal(counted.real, torch.arange(senders.numel()) < inner)
    assert bool((u.depth[receivers[inner:]] == hops).all())  # counted edges go into the outermost nodes only
    assert bool((senders[inner:][~loop[inner:]] >= m).all())  # from the stand-ins
    for name in ("x", "rows", "depth", "groups"):
        assert torch.equal(getattr(counted, name), getattr(every, name))
    with pytest.raises(ValueError, match="hops, loops and counts"):
        union_graph(x, {}, None, index, 0, u, src, dst, n, "counted")
    with pytest.raises(ValueError, match="border must be"):
        union_graph(x, {}, None, index, 0, u, src, dst, n, "some")
    with pytest.raises(ValueError, match="no edge-level kwargs"):
        union_graph(x, {"edge_weight": torch.ones(src.numel())}, None, index, 0, u, src, dst, n, "counted",
                    hops=hops, loops=own, counts=csr_[2])
