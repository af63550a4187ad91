"""The walk algebra and the bounded search against the masked backwards of the whole graph.

``WalkModel`` scores walks with :mod:`lrp_lib.explain.walks.algebra` (per-node matrices, per-edge
shares) where the model decomposes; the reference here is the same recorded graph with the algebra
switched off: one masked backward per walk (test_walk_exact checks that backward against a
reference from the definition and against LRPExplainer).  ``top_walks`` is a branch and bound; the
reference scores every walk and sorts.
"""
from __future__ import annotations

import pytest
import torch

from lrp_lib.core.rules import Gamma
from lrp_lib.explain.walks.search import bounded_walks
from lrp_lib.explain.walks import WalkModel, all_walks, top_walks, walk_scores  # noqa: F401

from test_walk_exact import EDGE_INDEX, GINE, KINDS, N, F_IN, JKResidual, make

RULES = ["z", "epsilon", Gamma(0.25, 1e-9)]


def _slow(wm, fn):
    """fn(wm) with the algebra switched off: masked backwards of the recorded graph."""
    alg, wm.algebra = wm.algebra, None
    try:
        return fn(wm)
    finally:
        wm.algebra = alg


def _gine(seed=1):
    torch.manual_seed(seed)
    model = GINE().double().eval()
    attr = torch.randn(EDGE_INDEX.shape[1], 2, dtype=torch.float64)
    return model, torch.randn(N, F_IN, dtype=torch.float64), {"edge_attr": attr}


def _models():
    for kind in KINDS:
        for index in [None, 2]:
            yield kind, index
    yield "gine", None


def _build(kind, index):
    if kind == "gine":
        return _gine()
    model, x = make(kind, node_level=index is not None, bias=True)
    return model, x, {}


@pytest.mark.parametrize("kind,index", list(_models()))
@pytest.mark.parametrize("rule", RULES, ids=["z", "epsilon", "gamma"])
def test_algebra_scores_every_walk_as_the_masked_backward(kind, index, rule):
    model, x, kw = _build(kind, index)
    wm = WalkModel(model, x, EDGE_INDEX, rule, index=index, target=1, **kw)
    assert wm.algebra is not None, wm.slow_reason
    walks = all_walks(wm)
    fast = wm.walk_relevance(walks)
    slow = _slow(wm, lambda w: w.walk_relevance(walks))
    assert torch.allclose(fast, slow, rtol=0, atol=1e-13 * max(1.0, float(slow.abs().max())))
    # marginals: by start node, LRPExplainer's node relevance (the plain backward)
    node = torch.zeros(N, dtype=torch.float64).index_add_(0, walks[:, 0], fast)
    assert torch.allclose(node, wm.node_relevance(), atol=1e-10)
    # weighted and subgraph relevance: the algebra's weighted backward
    w = torch.rand(4, N, dtype=torch.float64)
    assert torch.allclose(wm.weighted_relevance(w), _slow(wm, lambda m: m.weighted_relevance(w)), atol=1e-12)
    prod = w[:, walks].prod(-1)                                     # (4, W)
    assert torch.allclose(wm.weighted_relevance(w), (prod * fast).sum(1), atol=1e-12)


@pytest.mark.parametrize("kind,index", list(_models()))
@pytest.mark.parametrize("rule", RULES, ids=["z", "epsilon", "gamma"])
@pytest.mark.parametrize("signed", [False, True])
def test_top_walks_are_the_top_of_all_walks_scored(kind, index, rule, signed):
    model, x, kw = _build(kind, index)
    wm = WalkModel(model, x, EDGE_INDEX, rule, index=index, target=1, **kw)
    walks = all_walks(wm)
    ref = _slow(wm, lambda w: w.walk_relevance(walks))
    key = ref if signed else ref.abs()
    for k in (1, 3, 10, walks.shape[0] + 5):
        got_w, got_r = bounded_walks(wm, k, signed)
        want = key.sort(descending=True).values[:k]
        assert got_r.shape[0] == min(k, walks.shape[0])
        assert torch.allclose(got_r if signed else got_r.abs(), want, atol=1e-13)
        # each returned walk is a walk of the graph with that relevance
        assert torch.allclose(_slow(wm, lambda m: m.walk_relevance(got_w)), got_r, atol=1e-13)
        assert torch.unique(got_w, dim=0).shape[0] == got_w.shape[0]


def test_top_walks_and_scores_through_the_public_functions():
    model, x, kw = _build("gcn", 2)
    w1, r1 = top_walks(model, x, EDGE_INDEX, 5, "epsilon", index=2, target=1)
    wm = WalkModel(model, x, EDGE_INDEX, "epsilon", index=2, target=1)
    w2, r2 = wm.top_walks(5)
    assert torch.equal(w1, w2) and torch.allclose(r1, r2)
    node, edge = walk_scores(model, x, EDGE_INDEX, 5, "epsilon", index=2, target=1)
    assert float(node.sum()) == pytest.approx(float(wm.depth + 1) * float(wm.top_walks(5, signed=True)[1].sum()))
    assert edge.shape == (EDGE_INDEX.shape[1],)


def test_long_skips_fall_back_to_the_masked_backwards():
    torch.manual_seed(1)
    model = JKResidual().double().eval()
    x = torch.randn(N, F_IN, dtype=torch.float64)
    wm = WalkModel(model, x, EDGE_INDEX, "epsilon", target=1)
    assert wm.algebra is None and "jumping knowledge" in wm.slow_reason
    walks = all_walks(wm)
    ref = wm.walk_relevance(walks)
    _, got = wm.top_walks(4)
    assert torch.allclose(got.abs(), ref.abs().sort(descending=True).values[:4])


def test_bounds_contain_every_walk():
    """The boxes of the prefix vectors: every prefix of every walk lies in its end node's box."""
    model, x, kw = _build("graphconv", None)
    wm = WalkModel(model, x, EDGE_INDEX, "gamma", target=1)
    alg = wm.algebra
    bounds = alg.bounds()
    walks = all_walks(wm)
    L = wm.depth
    # prefix vectors pi_t[j_0..j_t] by the forward recursion of the algebra, per walk
    for w in walks[::7]:
        pi = alg.pi0[w[0]]
        for t in range(1, L + 1):
            lo, hi = bounds[t]
            p = alg.find(t, w[t - 1:t], w[t:t + 1])
            width = alg.pi_width(t)
            eye = torch.eye(width, dtype=pi.dtype)
            cols = [alg.child(t, p, *alg.back(t, w[t:t + 1], eye[b:b + 1]))[0] for b in range(width)]
            pi = torch.stack([c @ pi for c in cols])                     # pi_t = T^T pi_{t-1}
            assert bool((pi >= lo[w[t]] - 1e-12).all() and (pi <= hi[w[t]] + 1e-12).all()), t


class _Edge(torch.nn.Module):
    """EdgeConv: an MLP on [x_i, x_j - x_i], a message that is not elementwise in x_j."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import EdgeConv

        def mlp(i):
            return torch.nn.Sequential(torch.nn.Linear(2 * i, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
        self.c1, self.c2, self.head = EdgeConv(mlp(F_IN)), EdgeConv(mlp(4)), torch.nn.Linear(4, 2)

    def forward(self, x, edge_index, batch=None):
        from torch_geometric.nn import global_add_pool
        x = self.c1(x, edge_index).relu()
        x = self.c2(x, edge_index).relu()
        return self.head(global_add_pool(x, batch))


@pytest.mark.parametrize("build,reason", [(_Edge, "not elementwise")])
def test_models_that_do_not_decompose_fall_back_with_the_reason(build, reason):
    torch.manual_seed(2)
    model = build().double().eval()
    x = torch.randn(N, F_IN, dtype=torch.float64)
    wm = WalkModel(model, x, EDGE_INDEX, "epsilon", target=1)
    assert wm.algebra is None and reason in wm.slow_reason
    walks = all_walks(wm)
    ref = wm.walk_relevance(walks)
    for signed in (False, True):
        _, got = wm.top_walks(6, signed=signed)
        key = ref if signed else ref.abs()
        assert torch.allclose(got if signed else got.abs(), key.sort(descending=True).values[:6])


def test_tied_walks_are_chosen_by_their_nodes_not_by_rounding():
    """A cycle with constant features: walks related by the graph's symmetry tie exactly (up to
    rounding); top_walks takes the tied walks with the smallest node ids, as the enumeration does,
    and the same walks whatever the rounding."""
    from torch_geometric.nn import GCNConv

    from lrp_lib.explain.walks.search import TIE, select
    from lrp_lib.explain.walks import WalkModel, all_walks, top_walks

    torch.manual_seed(0)
    n = 8
    ring = torch.arange(n)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % n]), torch.stack([(ring + 1) % n, ring])], 1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.head = GCNConv(3, 4), GCNConv(4, 4), torch.nn.Linear(4, 1)

        def forward(self, x, edge_index):
            return self.head(self.c2(self.c1(x, edge_index).relu(), edge_index).relu()).sum(0)

    model = Net().double().eval()
    x = torch.ones(n, 3, dtype=torch.float64)
    wm = WalkModel(model, x, edge_index, "z")
    walks = all_walks(wm)
    rel = wm.walk_relevance(walks)
    for k in (1, 5, 12):
        best, best_rel = top_walks(model, x, edge_index, k, rule="z")
        ref, ref_rel = select(walks, rel, k, lambda r: r.abs())
        assert torch.equal(best, ref), k
        torch.testing.assert_close(best_rel, ref_rel)
        # rounding noise far below the tie tolerance does not change the choice
        noisy, _ = select(walks, rel * (1 + 1e-13 * torch.randn_like(rel)), k, lambda r: r.abs())
        assert torch.equal(noisy, ref), k
    # many walks really are tied here, and the first of a tie has the smallest node ids
    top = rel.abs().max()
    tied = walks[(rel.abs() - top).abs() <= TIE * top]
    assert tied.shape[0] > 1
    assert best[0].tolist() == min(tied.tolist())
