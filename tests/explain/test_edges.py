"""Which message of a layer is which input edge (:mod:`lrp_lib.explain.mode.edges`): the usual layout, found with
tensor operations alone (so that a graph captured for any graph finds it too), against the definition."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.utils import add_remaining_self_loops, add_self_loops, remove_self_loops

from lrp_lib.explain.mode.edges import message_hook, usual_layout


@st.composite
def graphs(draw):
    """An input ``edge_index`` with repeated edges and self-loops (some repeated), and its node count."""
    n = draw(st.integers(1, 9))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    loops = draw(st.lists(st.integers(0, n - 1), max_size=4))
    edges = pairs + [(j, j) for j in loops] + pairs[:2]
    order = draw(st.permutations(range(len(edges))))
    ref = torch.tensor([edges[i] for i in order], dtype=torch.long).reshape(-1, 2).t().contiguous()
    return ref, n


def expected_ids(ref: torch.Tensor, edges: torch.Tensor) -> list:
    """From the definition: the input's non-loop edges in order, then a loop at each node j, whose input edge is
    the input's last loop at j (-1 if it has none)."""
    kept = [i for i in range(ref.shape[1]) if ref[0, i] != ref[1, i]]
    last_loop = {int(ref[0, i]): i for i in range(ref.shape[1]) if ref[0, i] == ref[1, i]}
    return kept + [last_loop.get(j, -1) for j in range(edges.shape[1] - len(kept))]


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_usual_layout_finds_the_input_edge_of_pygs_self_loop_layouts(graph):
    """PyG's add_remaining_self_loops, and add_self_loops on a graph without loops: every layer edge gets the
    input edge the definition gives it, and the layout is reported as the usual one; the same edges in another
    order are reported as not laid out so, as are add_self_loops' edges where the input has loops (kept among
    the edges: matched by value instead)."""
    ref, n = graph
    if bool((ref[0] == ref[1]).any()):
        assert not bool(usual_layout(ref, add_self_loops(ref, num_nodes=n)[0])[1])
    for edges in (add_remaining_self_loops(ref, num_nodes=n)[0],
                  add_self_loops(remove_self_loops(ref)[0], num_nodes=n)[0]):
        ids, usual = usual_layout(ref, edges)
        assert bool(usual)
        assert ids.tolist() == expected_ids(ref, edges)
        known = ids >= 0
        assert torch.equal(ref[:, ids[known]], edges[:, known])
        assert bool((edges[0, ~known] == edges[1, ~known]).all())  # (-1: only loops the layer added)
        shuffled = edges.flip(1)
        if ref.numel() and not torch.equal(shuffled, edges):  # (no input edges: any order is right)
            assert not bool(usual_layout(ref, shuffled)[1]), (ref, shuffled)


@pytest.mark.parametrize("n", [0, 3])
def test_usual_layout_without_input_edges_gives_every_layer_edge_none(n):
    """No input edges: a layer's edges (its own loops) belong to none."""
    ref = torch.zeros(2, 0, dtype=torch.long)
    ids, usual = usual_layout(ref, torch.arange(n).repeat(2, 1))
    assert ids.tolist() == [-1] * n and bool(usual)


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("edges", [3, 5000, 40_000])
def test_message_hook_adds_each_messages_relevance_at_its_input_edge(edges, dim):
    """The hook's record against the definition, sum over the features of message times gradient added at each
    input edge (a loop the layer added, id -1, left out), to the bit: on few messages, and on as many as are
    multiplied by blocks of rows (40,000 x 64 entries: two blocks of 2^20 and a partial one)."""
    g = torch.Generator().manual_seed(edges)
    messages = torch.randn(edges, 64, generator=g, requires_grad=True)
    grad = torch.randn(edges, 64, generator=g)
    ids = torch.randint(-1, 7, (edges,), generator=g)
    record = torch.zeros(7, dtype=torch.float64)
    layout = (lambda t: t.t()) if dim else (lambda t: t)  # the edge dimension second: (F, E) messages
    leaf = messages.detach().clone().requires_grad_(True)
    out = layout(leaf)
    out.register_hook(message_hook(record, out, ids, dim))
    out.backward(layout(grad))
    keep = ids >= 0
    expected = torch.zeros(7, dtype=torch.float64).index_add_(0, ids[keep], (messages * grad).sum(1)[keep].double())
    assert torch.equal(record, expected)
