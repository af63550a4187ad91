"""The rules as forward modifications (lrp_lib.explain.mode.forward, ``LRPExplainer()``): every case of the coverage
zoo against the relevance primitives, an independent implementation of the same rules (their values, written
down before they were removed: ``make_primitive_reference.py``),
input times gradient of the unmodified model where LRP-0 equals it, per_index, a blocked operation refused with
its amount, no autograd node but PyTorch's own, and torch.compile over a captured explanation."""
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch_geometric.explain import HeteroExplanation
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from lrp_lib.core.composites import get_composite
from lrp_lib.explain.explainer import Explainer, LRPExplainer, UnsupportedModelError
from lrp_lib.explain.mode.forward import ForwardMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_primitive_reference as reference  # noqa: E402
import make_zoo_relevance as zoo  # noqa: E402
from rule_references import autograd_nodes, python_nodes  # noqa: E402

bc = zoo.bc
#: the zoo's cases under epsilon and alpha-beta (z+ and LRP-0 against the values stored before the forward rules
#: existed: tests/explain/test_coverage_reference.py; gamma on every layer in tests/core/test_modify.py)
KEYS = [(spec, level, ea, rule) for spec, level, ea in zoo.ZOO for rule in reference.RULES]
PRIMITIVES = torch.load(reference.PATH, weights_only=True)["records"]
#: cases where the primitives and the forward rules put the same lost relevance in different accounts: relevance that reaches an
#: output equal to zero (PDNConv's edge weights, a sigmoid of 0 = 0.5 into a linear map with output 0) was counted
#: as kept by the primitives' tally and is lost for the forward rules, which is what ``relevance_residual``
#: stands for; node, edge and edge_attr relevance are the same
SPLIT_DIFFERS = {("PDNConv", "graph", True)}


def test_the_stored_primitives_cover_the_zoo():
    assert sorted(PRIMITIVES) == sorted(reference.key(*k) for k in KEYS)
    explained = [r for r in PRIMITIVES.values() if r is not None and "tensors" in r]
    assert len(explained) > 200 and all("node_relevance" in r["tensors"] or any(
        k.endswith(":node_relevance") for k in r["tensors"]) for r in explained)


@pytest.mark.parametrize("spec,level,ea,rule", KEYS, ids=[reference.key(*k) for k in KEYS])
def test_zoo_equals_the_primitives(spec, level, ea, rule):
    want = PRIMITIVES[reference.key(spec, level, ea, rule)]
    got = reference.explain(spec, level, ea, rule)
    if want is None:
        assert got is None
        return
    assert ("error" in got) == ("error" in want) and got.get("error") == want.get("error")
    if "error" in want:
        return
    if rule != "alpha2beta1":  # alpha-beta's primitives warned per map where a part of one sign was missing and
        assert got["warnings"] == want["warnings"]  # its share dropped; the forward rules cannot see the
    assert got["tensors"].keys() == want["tensors"].keys()  # relevance in the forward: the same values, no warning
    split = (spec.name, level, ea) in SPLIT_DIFFERS
    for key, w in want["tensors"].items():
        g = got["tensors"][key]
        if split and key in ("bias_relevance", "relevance_residual"):
            continue
        scale = max(1.0, float(w.abs().max()) if w.numel() else 1.0)
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10 * scale, msg=key)
    if split:  # the same total, accounted otherwise (see SPLIT_DIFFERS)
        total = lambda t: t["bias_relevance"] + t["relevance_residual"]  # noqa: E731
        torch.testing.assert_close(total(got["tensors"]), total(want["tensors"]), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------- small models
class Net(nn.Module):
    def __init__(self, kind, features=6, hidden=8, classes=3):
        super().__init__()
        make = {"gcn": lambda a, b: GCNConv(a, b), "sage": lambda a, b: SAGEConv(a, b),
                "gin": lambda a, b: GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))),
                "gat": lambda a, b: GATConv(a, b, heads=2, concat=False)}[kind]
        self.conv1, self.conv2, self.lin = make(features, hidden), make(hidden, hidden), nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        return self.lin(self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu())


def _graph(n=40, features=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=g, dtype=dtype), torch.randint(0, n, (2, 4 * n), generator=g)


def _model(kind, biases=True, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    model = Net(kind).to(dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.2) if biases else p.zero_()
    return model


def _explainer(model, **options):
    return Explainer(model, algorithm=LRPExplainer(mask="relevance", **options), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin"])
def test_lrp0_is_input_times_gradient(kind):
    """On a bias-free ReLU network LRP-0 is input times the gradient of the unmodified model (a reference
    from the definition, by plain autograd): node relevance, and edge relevance as the gradient of a mask
    of ones multiplied onto every layer's messages (PyG's own edge-mask injection, ``set_masks``)."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    model = _model(kind, biases=False)
    x, edge_index = _graph()
    e = _explainer(model, rule="z")(x, edge_index, index=5)
    target = int(model(x, edge_index)[5].argmax())
    leaf = x.clone().requires_grad_(True)
    mask = torch.ones(edge_index.shape[1], dtype=x.dtype, requires_grad=True)
    set_masks(model, mask, edge_index, apply_sigmoid=False)
    try:
        model(leaf, edge_index)[5, target].backward()
    finally:
        clear_masks(model)
    torch.testing.assert_close(e.node_relevance, leaf * leaf.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(e.edge_relevance, mask.grad, rtol=1e-10, atol=1e-12)
    assert abs(float(e.bias_relevance)) < 1e-12 and abs(float(e.relevance_residual)) < 1e-12


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
@pytest.mark.parametrize("rule", ["zplus", "epsilon", "gamma", "alpha2beta1"])
def test_per_index_and_its_accounts_are_each_target_alone(kind, rule):
    """per_index=True (the targets' subgraphs explained together, the accounts read per target): each target's
    slice is the explanation of that target alone on the whole graph, its node and edge relevance and its
    bias_relevance and relevance_residual."""
    model = _model(kind)
    x, edge_index = _graph()
    index = torch.tensor([0, 3, 3, 17, 39])
    with warnings.catch_warnings():  # (alpha-beta loses relevance at units without a part of one sign)
        warnings.simplefilter("ignore")
        got = _explainer(model, rule=rule, per_index=True)(x, edge_index, index=index)
        alone = [_explainer(model, rule=rule, replay=False)(x, edge_index, index=int(i)) for i in index]
    nodes, edges = got.node_relevance_per_index.to_dense(), got.edge_relevance_per_index.to_dense()
    for i, want in enumerate(alone):
        torch.testing.assert_close(nodes[i], want.node_relevance, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(edges[i], want.edge_relevance, rtol=1e-10, atol=1e-12)
        for key in ("bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key][i], want[key].reshape(()), rtol=1e-9, atol=1e-11, msg=key)


def test_an_operation_without_a_rule_is_refused_with_its_amount():
    class Cumulative(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(6, 4)

        def forward(self, x, edge_index):
            return torch.logcumsumexp(self.conv(x, edge_index), dim=1)

    model = Cumulative().double().eval()
    x, edge_index = _graph()
    with pytest.raises(UnsupportedModelError, match=r"logcumsumexp in the model's own forward.*magnitude [0-9.]+"):
        _explainer(model)(x, edge_index, index=2)


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_only_pytorch_nodes(kind):
    """The explanation's autograd graph holds PyTorch's own nodes only: no Python autograd Function."""
    model = _model(kind)
    x, edge_index = _graph()
    leaf = x.clone().requires_grad_(True)
    mode = ForwardMode(get_composite("zplus"), model)
    with torch.enable_grad(), mode:
        mode.mark(leaf)
        out = model(leaf, edge_index)
    assert len(autograd_nodes(out)) > 20
    assert not python_nodes(out)

    class Twice(torch.autograd.Function):  # (the check can fail: it sees a Python autograd Function)
        @staticmethod
        def forward(ctx, t):
            return 2 * t

        @staticmethod
        def backward(ctx, g):
            return 2 * g
    assert python_nodes(Twice.apply(out))


@pytest.mark.parametrize("spec,level,ea", zoo.ZOO, ids=[f"{s.name}|{lv}|{e}" for s, lv, e in zoo.ZOO])
def test_every_zoo_model_gets_pytorchs_own_autograd_nodes_only(spec, level, ea):
    """Every model of the coverage zoo run under ForwardMode (z+, marked node features and edge_attr): the graph
    behind its output holds no Python autograd Function."""
    case = zoo.built(spec, level, ea)
    if case is None:
        pytest.skip("the unmodified model does not run on the zoo's inputs")
    model, inputs = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = ForwardMode(get_composite("zplus"), model)
        x = inputs["x"]
        leaves = {k: v.clone().requires_grad_(True) for k, v in x.items()} if isinstance(x, dict) else \
            x.clone().requires_grad_(True)
        kwargs = bc._kwargs(inputs)
        if "edge_attr" in kwargs and kwargs["edge_attr"].is_floating_point():
            kwargs["edge_attr"] = kwargs["edge_attr"].clone().requires_grad_(True)
        with torch.enable_grad(), mode:
            mode.mark(list(leaves.values()) if isinstance(leaves, dict) else leaves)
            mode.mark(kwargs.get("edge_attr"))
            forward = model(leaves, inputs["edge_index"], **kwargs)
    assert forward.requires_grad and not python_nodes(forward)


def test_threads_do_not_disturb_each_other():
    """Two threads explaining different models at once get what each gets alone."""
    import threading
    models = [_model("gcn", seed=1), _model("gat", seed=2)]
    x, edge_index = _graph()
    alone = [_explainer(m)(x, edge_index, index=4).node_relevance for m in models]
    results = [None, None]

    def work(i):
        for _ in range(5):
            results[i] = _explainer(models[i])(x, edge_index, index=4).node_relevance

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, alone):
        assert torch.equal(got, want)


# ------------------------------------------------------------- captured and compiled
@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_compiled_explanation_traces_without_a_graph_break(kind):
    """The explanation's forward captured once per graph (the graph part folded into constants) and compiled with
    torch.compile(fullgraph=True) gives the eager explanation's node, edge and bias relevance to float32 rounding.
    (The test compiles with the aot_eager backend, which traces as inductor does and compiles in a fraction of
    the time; benchmarks/bench_mechanism.py uses inductor.)"""
    from lrp_lib.explain.capture import CompiledExplanation, capture
    torch._dynamo.reset()
    model = _model(kind, dtype=torch.float32)
    x, edge_index = _graph(dtype=torch.float32)
    target = model(x, edge_index).argmax(-1)
    e = CompiledExplanation(model, x, edge_index, "zplus", True, backend="aot_eager")
    weight = torch.zeros(x.shape[0], 3)
    weight[7, target[7]] = 1.0

    def explain(x_, w):
        _, head, leaves = e.forward(x_)
        return e.backward(head, leaves, w * head.detach())

    (node, attr), edges, kept = explain(x, weight)
    assert attr is None
    want = Explainer(model, algorithm=LRPExplainer(mask="relevance"), explanation_type="phenomenon",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))(
        x, edge_index, target=target, index=7)
    torch.testing.assert_close(node, want.node_relevance, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(edges, want.edge_relevance, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(kept, want.bias_relevance, rtol=1e-4, atol=1e-6)
    (again, _), *_ = explain(x * 2, weight)  # a second call runs the compiled graph on other features
    assert not torch.allclose(again, node)
    # the graph part is folded: every operation left reads an input (no degree or normalisation is recomputed)
    graph, _ = capture(model, x, edge_index, "zplus")
    variable = set()
    for n in graph.graph.nodes:
        if n.op == "placeholder" or any(a in variable for a in n.all_input_nodes):
            variable.add(n)
    constant = [str(n.target) for n in graph.graph.nodes if n.op == "call_function" and n not in variable]
    assert constant and set(constant) == {"aten.expand.default"}  # (a kept index, broadcast over the features)
    assert len([n for n in graph.graph.nodes if n.op == "get_attr"]) > 2
    # an index that PyG's scatter broadcasts over the features is kept as one column, not one copy per feature
    indices = [b for b in graph.buffers() if not b.is_floating_point()]
    assert indices and max(b.numel() for b in indices) <= 2 * (edge_index.shape[1] + x.shape[0])  # (E + N) x 6 if copied


def test_lrp_explainer_compile_true(monkeypatch):
    """LRPExplainer(compile=True) with an edge mask: a graph's first explanation runs eagerly (a graph explained
    once is not worth a compilation), its second compiles the explanation of that graph, which the next nodes of
    the same graph reuse; each gives the eager explanation (node, edge, bias, residual).  A new edge_index or a
    changed parameter makes a new one.  (Compiled with the aot_eager backend: inductor's code generation takes
    several seconds a graph here; benchmarks/bench_mechanism.py uses it.)"""
    from lrp_lib.explain import capture
    monkeypatch.setattr(capture, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    model = _model("gcn", dtype=torch.float32)
    x, edge_index = _graph(dtype=torch.float32)
    eager, compiled = (_explainer(model, compile=c) for c in (False, True))
    algorithm = compiled.algorithm
    reasons = []
    for index in (3, 11, 5):
        want, got = eager(x, edge_index, index=index), compiled(x, edge_index, index=index)
        for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-6, msg=key)
        reasons.append(got.replay_reason)
    assert reasons == ["first call on this graph (compiled from the second)"] + ["torch.compile"] * 2
    assert len(algorithm.captures) == 1
    other = edge_index.clone()
    for _ in range(2):
        compiled(x, other, index=3)
    assert len(algorithm.captures) == 2
    with torch.no_grad():
        model.lin.weight.mul_(2.0)
    compiled(x, edge_index, index=3)
    doubled = compiled(x, edge_index, index=3)
    assert doubled.replay_reason == "torch.compile"
    torch.testing.assert_close(doubled.node_relevance, eager(x, edge_index, index=3).node_relevance, rtol=1e-4,
                               atol=1e-6)
    # a parameter replaced by a new object (not changed in place) makes a new one too
    model.lin.weight = torch.nn.Parameter(model.lin.weight.detach() * 0.5)
    halved = compiled(x, edge_index, index=3)
    torch.testing.assert_close(halved.node_relevance, eager(x, edge_index, index=3).node_relevance, rtol=1e-4,
                               atol=1e-6)
    # the cache holds the graph it is keyed by: a later edge_index cannot take a cached one's identity
    import gc
    import weakref
    other = edge_index.flip(0)
    compiled(x, other, index=3)
    alive = weakref.ref(other)
    del other
    gc.collect()
    assert alive() is not None
    with pytest.raises(TypeError, match="compile must be True or False"):
        LRPExplainer(compile="exact")


def _node_explainer(model, **options):
    return Explainer(model, algorithm=LRPExplainer(mask="relevance", **options),
                     explanation_type="phenomenon", node_mask_type="attributes",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_compile_true_compiles_once_for_graphs_of_every_size(kind, monkeypatch):
    """compile=True without an edge mask: the explanation is captured once with symbolic sizes (edge_index an input
    of the graph, not a constant) and compiled with dynamic shapes, so graphs of other sizes (nodes and edges) run
    the same compiled graph, with the eager explanation's node relevance and accounts (float32 rounding).  The
    captured graph reads no edge_index of its own: a graph with other edges gets its own relevance."""
    from lrp_lib.explain import capture
    monkeypatch.setattr(capture, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    model = _model(kind, dtype=torch.float32)
    eager, compiled = _node_explainer(model, replay=False), _node_explainer(model, compile=True)
    for n, seed in ((40, 0), (23, 1), (57, 2), (23, 3)):
        x, edge_index = _graph(n, seed=seed, dtype=torch.float32)
        target = model(x, edge_index).argmax(-1)
        want = eager(x, edge_index, target=target, index=n // 2)
        got = compiled(x, edge_index, target=target, index=n // 2)
        for key in ("node_relevance", "bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5, msg=key)
        assert got.replay_reason == "torch.compile for any graph"
    assert len(compiled.algorithm.captures) == 1



def test_graphs_explained_once_are_captured_for_any_graph_after_a_few():
    """The default (replay, no compile), node masks, a new graph on every call (molecules one at a time): the first
    ANY_GRAPH_AFTER - 1 graphs run eagerly, from the next on one capture with symbolic sizes, run as it is, serves
    graphs of every size with the eager explanation's relevance and accounts to the bit; a graph explained again
    gets its own capture (its graph part folded); new parameters count again."""
    from lrp_lib.explain.capture import AnyGraphExplanation
    from lrp_lib.explain.capture.cache import ANY_GRAPH_AFTER
    model = _model("gcn")
    eager, default = _node_explainer(model, replay=False), _node_explainer(model)
    # (the captured graph's node count equals its feature count: not specialised to it)
    graphs = [_graph(6 if i == ANY_GRAPH_AFTER - 1 else 20 + 3 * i, seed=i) for i in range(ANY_GRAPH_AFTER + 3)]
    reasons = []
    for x, edge_index in graphs:
        target = model(x, edge_index).argmax(-1)
        want, got = (e(x, edge_index, target=target, index=5) for e in (eager, default))
        for key in ("node_relevance", "bias_relevance", "relevance_residual"):
            assert torch.equal(got[key], want[key]), key
        reasons.append(got.replay_reason)
    assert reasons == ["first call on this graph (captured from the second)"] * (ANY_GRAPH_AFTER - 1) + \
        ["captured for any graph"] * 4
    entries = [v for v in default.algorithm.captures.captured.values() if isinstance(v, list)]
    assert len(entries) == 1 and len(entries[0]) == 1  # one capture for every size
    assert isinstance(entries[0][0], AnyGraphExplanation) and not entries[0][0].probe
    x, edge_index = graphs[-1]  # explained before: captured per graph at its second call
    assert default(x, edge_index, target=model(x, edge_index).argmax(-1), index=5).replay_reason == "captured"
    with torch.no_grad():  # new parameters: graphs are counted again
        model.lin.weight.mul_(2.0)
    x, edge_index = _graph(31, seed=99)
    got = default(x, edge_index, target=model(x, edge_index).argmax(-1), index=5)
    assert got.replay_reason == "first call on this graph (captured from the second)"

def test_graphs_of_a_data_set_share_one_capture_for_any_graph(monkeypatch):
    """Graphs as a data set holds them, views into one storage (node features and edges at an offset into it, the
    edges as the transpose of an (E, 2) tensor): one capture for any graph serves them all, node and edge masks,
    with the eager explanation's relevance to the bit.  A model whose Python reads its node count into an int is
    captured for any graph at most as often as the cache has room, and then explained per graph."""
    from lrp_lib.explain.capture import AnyGraphExplanation, cache
    monkeypatch.setattr(cache, "ANY_GRAPH_AFTER", 1)
    model = _model("gcn")
    graphs = [_graph(20 + 3 * i, seed=i) for i in range(6)]
    xs, edges = torch.cat([x for x, _ in graphs]), torch.cat([e.t() for _, e in graphs])
    starts = torch.tensor([0] + [x.shape[0] for x, _ in graphs]).cumsum(0).tolist()
    e_starts = torch.tensor([0] + [e.shape[1] for _, e in graphs]).cumsum(0).tolist()
    views = [(xs[starts[i]:starts[i + 1]], edges[e_starts[i]:e_starts[i + 1]].t()) for i in range(len(graphs))]
    assert all(x.storage_offset() > 0 and e.storage_offset() > 0 for x, e in views[1:])
    eager, default = _explainer(model, replay=False), _explainer(model)
    for x, edge_index in views:
        want, got = eager(x, edge_index, index=5), default(x, edge_index, index=5)
        for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
            assert torch.equal(got[key], want[key]), key
        assert got.replay_reason == "captured for any graph"
    entries = [v for v in default.algorithm.captures.captured.values() if isinstance(v, list)]
    assert len(entries) == 1 and len(entries[0]) == 1 and isinstance(entries[0][0], AnyGraphExplanation)

    class Counted(nn.Module):  # (its node count read into an int: each capture fits graphs of that size only)
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x, edge_index):
            return self.inner(x, edge_index) * (int(x.shape[0]) / x.shape[0])
    counted = Counted().eval()
    captures = []
    monkeypatch.setattr(cache, "AnyGraphExplanation",
                        lambda *a, **k: captures.append(1) or AnyGraphExplanation(*a, **k))
    default = _explainer(counted)
    reasons = [default(x, edge_index, index=5).replay_reason for x, edge_index in views]
    size = default.algorithm.captures.size
    assert len(captures) == size and reasons[:size] == ["captured for any graph"] * size
    assert reasons[size:] == [f"not captured for any graph: {size} captures fit no later graph; first call on this "
                              "graph (captured from the second)"] * (len(views) - size)


class _Pooled(Net):  # a graph-level model over a batch: PyG's mean pool reads int(batch.max()) + 1 graphs
    def forward(self, x, edge_index, batch=None):
        from torch_geometric.nn import global_mean_pool
        return self.lin(global_mean_pool(self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu(), batch))


def _batch(sizes, seed=0):
    from torch_geometric.data import Batch, Data
    return Batch.from_data_list([Data(*_graph(n, seed=seed + i)) for i, n in enumerate(sizes)])


def _graph_explainer(model, **options):
    return Explainer(model, algorithm=LRPExplainer(mask="relevance", **options), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))


def test_batches_with_one_account_are_captured_for_any_graph(monkeypatch):
    """A batch of graphs explained with one account (accounts="total"), its model reading how many graphs the batch
    vector names (PyG's pool: int(batch.max()) + 1): captured for any graph with that number held as a constant
    and checked on every later batch, so that batches of three graphs of other sizes share one capture and a
    batch of four gets its own; explained again, a batch is captured per graph.  Node and edge relevance and
    both accounts equal the eager explanation's to the bit."""
    from lrp_lib.explain.capture import cache
    monkeypatch.setattr(cache, "ANY_GRAPH_AFTER", 1)
    torch.manual_seed(0)
    model = _Pooled("gcn").double().eval()
    eager, default = (_graph_explainer(model, accounts="total", **o) for o in ({"replay": False}, {}))
    reasons = []
    batches = [_batch(sizes, seed=sum(sizes)) for sizes in ((8, 12, 5), (20, 7, 9), (6, 6, 30), (4, 9, 11, 7))]
    for data in batches + batches[-1:]:
        want, got = (e(data.x, data.edge_index, batch=data.batch) for e in (eager, default))
        for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
            assert torch.equal(got[key], want[key]), key
        reasons.append(got.replay_reason)
    assert reasons == ["captured for any graph"] * 4 + ["captured"]
    entries = [v for v in default.algorithm.captures.captured.values() if isinstance(v, list)]
    assert len(entries) == 1 and len(entries[0]) == 2  # three graphs, then four


def test_a_batch_of_one_graph_has_its_account_as_a_graph_alone(monkeypatch):
    """A loader of batch size one (``batch`` all zeros) with an account per graph, the default: explained as the
    graph alone, so captured for any graph, with the relevance and the one account (shape (1,)) that the same graph
    gets as the first of a batch of two explained eagerly (the batch's path, per graph)."""
    from lrp_lib.explain.capture import cache
    monkeypatch.setattr(cache, "ANY_GRAPH_AFTER", 1)
    torch.manual_seed(0)
    model = _Pooled("gcn").double().eval()
    eager, default = _graph_explainer(model, replay=False), _graph_explainer(model)
    for n, seed in ((12, 1), (25, 2)):
        one, two = _batch([n], seed=seed), _batch([n, 9], seed=seed)
        got = default(one.x, one.edge_index, batch=one.batch)
        want = eager(two.x, two.edge_index, batch=two.batch)
        assert got.replay_reason == "captured for any graph"
        assert got.bias_relevance.shape == got.relevance_residual.shape == (1,)
        for key, rows in (("node_relevance", n), ("edge_relevance", one.num_edges)):
            torch.testing.assert_close(got[key], want[key][:rows], rtol=1e-12, atol=1e-12, msg=key)
        for key in ("bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key], want[key][:1], rtol=1e-12, atol=1e-12, msg=key)


ANY_GRAPH = [(spec, level, ea) for spec, level, ea in zoo.ZOO if level == "node"]


ZOO_CASES = [(spec, level, ea) for spec, level, ea in zoo.ZOO]


@pytest.mark.parametrize("spec,level,ea", ZOO_CASES, ids=[f"{s.name}|{lv}|{e}" for s, lv, e in ZOO_CASES])
def test_zoo_second_explanation_captured_equals_eager(spec, level, ea):
    """Every case of the coverage zoo explained twice with node and edge masks (the default, replay on): the
    second explanation, run by the captured graph where it is captured (edge relevance from the gradient at each
    layer's messages, outputs of the captured graph), equals the first, eager one to 1e-9 in node, edge and
    ``edge_attr`` relevance and both accounts; where it is not captured, its reason says why."""
    case = zoo.built(spec, level, ea)
    if case is None:
        pytest.skip("the unmodified model does not run on the zoo's inputs")
    model, inputs = case
    explainer = Explainer(model, algorithm=LRPExplainer(mask="relevance"), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="regression", task_level=level, return_type="raw"))
    index = None if level == "graph" else bc.NODE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            first = explainer(inputs["x"], inputs["edge_index"], index=index, **bc._kwargs(inputs))
        except (UnsupportedModelError, ValueError, TypeError) as error:
            with pytest.raises(type(error)):
                explainer(inputs["x"], inputs["edge_index"], index=index, **bc._kwargs(inputs))
            return
        second = explainer(inputs["x"], inputs["edge_index"], index=index, **bc._kwargs(inputs))
    stores = [("", first, second)] + ([(t, first[t], second[t]) for t in first.node_types + first.edge_types]
                                      if isinstance(first, HeteroExplanation) else [])
    for name, want, got in stores:
        for key in ("node_relevance", "edge_relevance", "edge_attr_relevance", "bias_relevance", "relevance_residual"):
            if key in want.keys() and isinstance(want[key], torch.Tensor):  # (a hetero store's tensors, per type)
                w, g = (t.to_dense() if t.is_sparse else t for t in (want[key], got[key]))
                scale = max(1.0, float(w.abs().max()) if w.numel() else 1.0)
                torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9 * scale, msg=f"{name} {key}")
    reason = getattr(second, "replay_reason", None)
    assert reason is None or reason == "captured" or not reason.startswith("first call"), reason


def _zoo_graphs(spec, level, ea=False):
    """A homogeneous zoo case's model and its graph and (where the model takes no other graph input than
    ``edge_attr``) a smaller one, its first nodes, as ``(x, edge_index, other inputs)``; skipped where the case does
    not run."""
    from torch_geometric.utils import subgraph
    case = zoo.built(spec, level, ea)
    if case is None:
        pytest.skip("the unmodified model does not run on the zoo's inputs")
    model, inputs = case
    if isinstance(inputs["x"], dict):
        pytest.skip("heterogeneous graphs are not captured")
    kwargs = bc._kwargs(inputs)
    x, edge_index = inputs["x"], inputs["edge_index"]
    keep = max(bc.NODE + 2, x.shape[0] - 3)
    graphs = [(x, edge_index, kwargs)]
    if set(kwargs) <= {"edge_attr"}:
        edges, attr = subgraph(torch.arange(keep), edge_index, kwargs.get("edge_attr"), num_nodes=x.shape[0])
        graphs.append((x[:keep], edges, {} if attr is None else {"edge_attr": attr}))
    return model, graphs


@pytest.mark.parametrize("spec,level,ea", ANY_GRAPH, ids=[f"{s.name}|{lv}|{e}" for s, lv, e in ANY_GRAPH])
def test_zoo_captured_for_any_graph_equals_eager(spec, level, ea, monkeypatch):
    """Every node-level case of the coverage zoo, explained with compile=True (the captured graph run as it is:
    torch.compile is replaced by the identity here, so that what is tested is the capture with symbolic sizes): on
    the zoo's graph and on a smaller one (its first nodes), node and ``edge_attr`` relevance and accounts equal the
    eager explanation to 1e-9, or the case is not captured and says why."""
    model, graphs = _zoo_graphs(spec, level, ea)
    monkeypatch.setattr(torch, "compile", lambda graph, **options: graph)

    def make(**options):
        return Explainer(model, algorithm=LRPExplainer(mask="relevance", **options),
                         explanation_type="model", node_mask_type="attributes",
                         model_config=dict(mode="regression", task_level=level, return_type="raw"))
    eager, compiled = make(replay=False), make(compile=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for features, edges, kwargs in graphs:
            try:
                want = eager(features, edges, index=bc.NODE, **kwargs)
            except (UnsupportedModelError, ValueError, TypeError) as error:
                with pytest.raises(type(error)):
                    compiled(features, edges, index=bc.NODE, **kwargs)
                return
            got = compiled(features, edges, index=bc.NODE, **kwargs)
            if got.replay_reason != "torch.compile for any graph":
                assert got.replay_reason.startswith("not captured")
            for key in ("node_relevance", "bias_relevance", "relevance_residual") + \
                    (("edge_attr_relevance",) if ea else ()):
                scale = max(1.0, float(want[key].abs().max()))
                torch.testing.assert_close(got[key], want[key], rtol=1e-9, atol=1e-9 * scale, msg=key)


EDGES_ANY_GRAPH = list(zoo.ZOO)


@pytest.mark.parametrize("spec,level,ea", EDGES_ANY_GRAPH, ids=[f"{s.name}|{lv}|{e}" for s, lv, e in EDGES_ANY_GRAPH])
def test_zoo_edges_captured_for_any_graph_equal_eager(spec, level, ea, monkeypatch):
    """Every case of the coverage zoo, node and edge masks, the default (replay, no compile),
    captured for any graph from the first graph on: on the zoo's graph and on a smaller one (its first nodes), node,
    edge and ``edge_attr`` relevance and both accounts equal the eager explanation to 1e-9, or the case says why it
    is not captured so.  Edge relevance is read by hooks on each layer's messages, their input edges computed in the
    captured graph."""
    from lrp_lib.explain.capture import cache
    model, graphs = _zoo_graphs(spec, level, ea)
    monkeypatch.setattr(cache, "ANY_GRAPH_AFTER", 1)

    def make(**options):
        return Explainer(model, algorithm=LRPExplainer(mask="relevance", **options), explanation_type="model",
                         node_mask_type="attributes", edge_mask_type="object",
                         model_config=dict(mode="regression", task_level=level, return_type="raw"))
    eager, default = make(replay=False), make()
    index = None if level == "graph" else bc.NODE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for features, edges, kwargs in graphs:
            try:
                want = eager(features, edges, index=index, **kwargs)
            except (UnsupportedModelError, ValueError, TypeError) as error:
                with pytest.raises(type(error)):
                    default(features, edges, index=index, **kwargs)
                return
            got = default(features, edges, index=index, **kwargs)
            reason = getattr(got, "replay_reason", None)  # (None: a batch with an account per graph, not captured)
            assert reason in (None, "captured for any graph") or "not captured" in reason, reason
            for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual") + \
                    (("edge_attr_relevance",) if ea else ()):
                scale = max(1.0, float(want[key].abs().max()))
                torch.testing.assert_close(got[key], want[key], rtol=1e-9, atol=1e-9 * scale, msg=key)


def test_edges_laid_out_otherwise_than_when_captured_are_explained_eagerly(monkeypatch):
    """A layer whose edges depend on the data (the input's edges sorted by source): captured for any graph on a
    graph whose edges are already sorted, where the layer's edges are the input's in order; a later graph whose
    edges are not sorted is explained eagerly (its edges matched by value), with the eager explanation's edge
    relevance to the bit, and says so."""
    from lrp_lib.explain.capture import cache
    monkeypatch.setattr(cache, "ANY_GRAPH_AFTER", 1)

    class Sorted(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.lin = GCNConv(6, 8, add_self_loops=False, normalize=False), nn.Linear(8, 3)

        def forward(self, x, edge_index):
            return self.lin(self.conv(x, edge_index[:, edge_index[0].argsort(stable=True)]).relu())
    torch.manual_seed(0)
    model = Sorted().double().eval()
    eager, default = _explainer(model, replay=False), _explainer(model)
    x, edge_index = _graph(30, seed=1)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    reasons = []
    for edges in (edge_index[:, edge_index[0].argsort(stable=True)], edge_index):
        want, got = eager(x, edges, index=4), default(x, edges, index=4)
        for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
            assert torch.equal(got[key], want[key]), key
        reasons.append(got.replay_reason)
    assert reasons == ["captured for any graph", "edges laid out otherwise than when captured for any graph: eager"]
    assert want.edge_relevance.abs().sum() > 0

def test_compile_true_from_a_graph_with_as_many_nodes_as_features_compiles_once(monkeypatch):
    """compile=True, node masks, a graph-level model with a mean pool (a mean divides by a count made of sizes),
    whose first graph has as many nodes as features: torch.compile traces the capture without specialising the
    node count to the feature count, so one compilation serves every later size, with the eager explanation's
    relevance and accounts."""
    from torch_geometric.nn import global_mean_pool
    from lrp_lib.explain import capture

    class Pooled(Net):
        def forward(self, x, edge_index):
            return self.lin(global_mean_pool(self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu(), None))
    monkeypatch.setattr(capture, "BACKEND", "aot_eager")
    torch.manual_seed(0)
    model = Pooled("gcn").eval()
    make = lambda **o: Explainer(model, algorithm=LRPExplainer(mask="relevance", **o), explanation_type="phenomenon",
                                 node_mask_type="attributes", model_config=dict(
                                     mode="multiclass_classification", task_level="graph", return_type="raw"))
    eager, compiled = make(replay=False), make(compile=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for n in (6, 11, 23, 9):  # (6 features)
        x, edge_index = _graph(n, seed=n, dtype=torch.float32)
        target = model(x, edge_index).argmax(-1)
        want, got = eager(x, edge_index, target=target), compiled(x, edge_index, target=target)
        assert got.replay_reason == "torch.compile for any graph"
        for key in ("node_relevance", "bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-5, msg=key)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1

def test_a_size_condition_in_the_model_gets_a_capture_per_side():
    """A model whose Python branches on a size (more than 30 nodes) is captured for any graph on the side of the
    condition it saw; a graph on the other side gets a capture of its own (PyTorch's guards on the symbolic
    sizes), and each explanation follows its own branch."""
    class BySize(Net):
        def forward(self, x, edge_index):
            h = self.conv1(x, edge_index).relu()
            if x.shape[0] > 30:
                h = h * 3
            return self.lin(self.conv2(h, edge_index).relu())
    torch.manual_seed(0)
    model = BySize("gcn").eval()
    eager, captured = _node_explainer(model, replay=False), _node_explainer(model, compile=True)
    from lrp_lib.explain import capture
    backend, capture.BACKEND = capture.BACKEND, "aot_eager"
    try:
        for n in (40, 20, 50, 10):
            x, edge_index = _graph(n, dtype=torch.float32)
            target = model(x, edge_index).argmax(-1)
            want = eager(x, edge_index, target=target, index=3)
            got = captured(x, edge_index, target=target, index=3)
            torch.testing.assert_close(got.node_relevance, want.node_relevance, rtol=1e-4, atol=1e-5)
    finally:
        capture.BACKEND = backend
    assert len(captured.algorithm.captures) == 2


def test_a_capture_leaves_no_traced_tensor_behind():
    """Capturing with symbolic sizes traces with fake tensors; none may stay in a cache of the library's (the
    stabiliser's constants), or the next eager explanation would compute on it."""
    from lrp_lib.explain.capture import capture_any_graph
    model = _model("gcn", dtype=torch.float32)
    x, edge_index = _graph(dtype=torch.float32)
    capture_any_graph(model, x, edge_index, "epsilon")
    e = _node_explainer(model, rule="epsilon", replay=False)(x, edge_index, target=model(x, edge_index).argmax(-1),
                                                              index=3)
    assert type(e.node_relevance) is torch.Tensor and type(e.bias_relevance) is torch.Tensor
    assert torch.isfinite(e.node_relevance).all()


@pytest.mark.parametrize("kind", ["gcn", "sage", "gin", "gat"])
def test_the_second_explanation_of_a_graph_runs_its_captured_graph(kind):
    """Replay on (the default): the first explanation of a graph runs eagerly, the second
    captures the explanation's forward (make_fx, its graph part folded) and runs it, as do later ones, with the
    eager explanation's node, edge and bias relevance and residual (float64, to rounding); new node features of
    the same shape reuse the capture, a changed parameter or buffer captures again."""
    model = _model(kind)
    x, edge_index = _graph()
    eager, default = _explainer(model, replay=False), _explainer(model)
    reasons = []
    for features, index in ((x, 3), (x, 11), (x * 2 - 1, 5), (x, 7)):
        want, got = eager(features, edge_index, index=index), default(features, edge_index, index=index)
        for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
            torch.testing.assert_close(got[key], want[key], rtol=1e-9, atol=1e-12, msg=key)
        reasons.append(got.replay_reason)
    assert reasons == ["first call on this graph (captured from the second)"] + ["captured"] * 3
    assert len(default.algorithm.captures) == 1
    with torch.no_grad():
        model.lin.weight.mul_(-1.5)
    for reason in ("first call on this graph (captured from the second)", "captured"):
        flipped = default(x, edge_index, index=3)
        torch.testing.assert_close(flipped.node_relevance, eager(x, edge_index, index=3).node_relevance, rtol=1e-9,
                                   atol=1e-12)
        assert flipped.replay_reason == reason
    assert len(default.algorithm.captures) == 2


class _BondModel(nn.Module):
    """Two layers that read bond features (GINE's sum of a neighbour's features and a projected bond, GAT's
    attention with edge features), a sum readout and a linear head."""

    def __init__(self, features=6, edge_dim=3, hidden=8):
        super().__init__()
        from torch_geometric.nn import GINEConv
        mlp = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.gine, self.gat = GINEConv(mlp, edge_dim=edge_dim), GATConv(hidden, hidden, edge_dim=edge_dim)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x, edge_index, edge_attr):
        h = self.gat(self.gine(x, edge_index, edge_attr).relu(), edge_index, edge_attr).relu()
        return self.head(h.sum(0, keepdim=True))


@pytest.mark.parametrize("compile", [False, True])
def test_edge_attr_is_an_input_of_the_captured_graph(compile, monkeypatch):
    """A model that reads bond features, explained with node and edge masks: ``edge_attr`` is an input of the
    captured graph, not a constant.  On one graph with new ``edge_attr`` values on every call (captured from the
    second call; ``compile=True``: captured for any graph, torch.compile replaced by the identity), and on graphs
    explained once each (captured for any graph), node, edge and ``edge_attr`` relevance and the
    accounts equal the eager explanation's to 1e-12 (float64)."""
    from lrp_lib.explain.capture import cache
    monkeypatch.setattr(cache, "ANY_GRAPH_AFTER", 2)
    monkeypatch.setattr(torch, "compile", lambda graph, **options: graph)
    torch.manual_seed(0)
    model = _BondModel().double().eval()
    x, edge_index = _graph(n=12)
    g = torch.Generator().manual_seed(1)
    config = dict(mode="regression", task_level="graph", return_type="raw")
    eager, default = (Explainer(model, algorithm=LRPExplainer(mask="relevance", **options), explanation_type="model",
                                node_mask_type="attributes", edge_mask_type=None if compile else "object",
                                model_config=config) for options in ({"replay": False}, {"compile": compile}))
    keys = ["node_relevance", "edge_attr_relevance", "bias_relevance", "relevance_residual"] + \
        ([] if compile else ["edge_relevance"])
    reasons = []
    graphs = [(x, edge_index)] * 3 + [_graph(n=n, seed=n) for n in (9, 14, 11)]
    for features, edges in graphs:
        attr = torch.randn(edges.shape[1], 3, generator=g, dtype=torch.float64)
        want, got = eager(features, edges, edge_attr=attr), default(features, edges, edge_attr=attr)
        assert want.edge_attr_relevance.abs().sum() > 0
        for key in keys:
            torch.testing.assert_close(got[key], want[key], rtol=1e-12, atol=1e-12, msg=key)
        reasons.append(got.replay_reason)
    if compile:
        assert reasons == ["torch.compile for any graph"] * 6
    else:
        assert reasons == ["first call on this graph (captured from the second)"] + ["captured"] * 2 + \
            ["captured for any graph"] * 3


def test_a_forward_that_reads_its_input_is_not_captured():
    """A model whose Python reads an input-dependent value (a branch on x) cannot be captured (make_fx refuses the
    read): it runs eagerly on every call, and each explanation follows the branch its own input takes.  A model
    with a forward hook is not captured either (a captured graph would not run the hook)."""
    class Branching(Net):
        def forward(self, x, edge_index):
            h = self.conv1(x, edge_index).relu()
            if bool(h.sum() > 0):  # data-dependent control flow
                h = h * 2
            return self.lin(self.conv2(h, edge_index).relu())
    torch.manual_seed(0)
    model = Branching("gcn").double().eval()
    x, edge_index = _graph()
    eager, default = _explainer(model, replay=False), _explainer(model)
    for features in (x, x, -x.abs() * 0):
        got, want = default(features, edge_index, index=3), eager(features, edge_index, index=3)
        torch.testing.assert_close(got.node_relevance, want.node_relevance)
    assert got.replay_reason.startswith("not captured: ")
    plain = _model("gcn")
    calls = []
    plain.lin.register_forward_hook(lambda m, a, o: calls.append(1))
    hooked = _explainer(plain)
    for _ in range(3):
        e = hooked(x, edge_index, index=3)
    assert e.replay_reason.startswith("not captured: module 'lin' has hooks") and len(calls) == 3  # (one forward each)


def test_the_edge_hooks_read_of_the_messages_is_not_reported_as_a_detach_in_the_model():
    """With edge masks, the hooks on the messages keep a detached view of them; the lost-relevance warning of a
    model that detaches half its hidden channels names that detach only, not one in the message-passing layer."""
    class Cut(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = GCNConv(3, 8), nn.Linear(8, 2)

        def forward(self, x, edge_index):
            h = torch.relu(self.conv(x, edge_index))
            return self.head(torch.cat([h[:, :4], h[:, 4:].detach()], dim=1))

    torch.manual_seed(0)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    explainer = Explainer(Cut().eval(), algorithm=LRPExplainer(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explainer(x, edge_index, index=1)
    messages = [str(w.message) for w in caught if "did not reach x" in str(w.message)]
    assert len(messages) == 1 and "detach in the model's own forward (Cut)" in messages[0], messages
    assert "GCNConv" not in messages[0]


def _dense_gat(conv: GATConv, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    """PyG's GATConv (bias-free, concatenated heads), written densely from its definition: ``adj[i, j]`` when j
    sends to i (self-loops included), the attention a softmax over each node's senders; the product of an
    attention weight and a message passes half the gradient to each (the uniform rule, AttnLRP)."""
    n, H, C = x.shape[0], conv.heads, conv.out_channels
    h = (x @ conv.lin.weight.T).view(n, H, C)
    a_src, a_dst = (h * conv.att_src).sum(-1), (h * conv.att_dst).sum(-1)               # (n, H)
    e = torch.nn.functional.leaky_relu(a_src.T[:, None, :] + a_dst.T[:, :, None], conv.negative_slope)
    alpha = torch.softmax(e.masked_fill(~adj, float("-inf")), -1)                      # (H, i, j)
    product = alpha[..., None] * h.permute(1, 0, 2)[:, None]                           # (H, i, j, C)
    product = 0.5 * product + 0.5 * product.detach()
    return product.sum(2).permute(1, 0, 2).reshape(n, H * C)


def test_gat_with_uniform_attention_is_attnlrp_through_pygs_softmax():
    """Under ``Composite(attention="uniform")`` relevance goes through the attention weights, into PyG's
    ``softmax``, which subtracts each group's maximum (a detached copy) before ``exp``.  The softmax gets
    AttnLRP's rule, input times gradient: under LRP-0 the node relevance of a bias-free two-layer GAT is input
    times gradient of the dense GAT above, and nothing is lost (what the softmax keeps is counted)."""
    from lrp_lib.core.composites import Composite
    torch.manual_seed(0)
    n = 7
    pairs = torch.tensor([(j, i) for i in range(n) for j in range(n) if i != j and (i * 3 + j) % 4 != 0]).T
    conv1, conv2 = GATConv(4, 3, heads=2, bias=False).double(), GATConv(6, 2, bias=False).double()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = conv1, conv2

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    x = torch.randn(n, 4, dtype=torch.float64)
    adj = torch.eye(n, dtype=torch.bool)
    adj[pairs[1], pairs[0]] = True
    leaf = x.clone().requires_grad_(True)
    out = _dense_gat(conv2, _dense_gat(conv1, leaf, adj).relu(), adj)
    model = Net().eval()
    assert torch.allclose(out, model(x, pairs))
    (grad,) = torch.autograd.grad(out[3, 1], leaf)
    explainer = Explainer(model, algorithm=LRPExplainer(composite=Composite("z", epsilon=0.0, attention="uniform"),
                                                        mask="relevance", replay=False),
                          explanation_type="phenomenon", node_mask_type="attributes",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    got = explainer(x, pairs, target=torch.full((n,), 1), index=3)
    assert torch.allclose(got.node_mask, x * grad, rtol=1e-9, atol=1e-12)
    assert abs(float(got.relevance_residual)) < 1e-12
    kept = float(out[3, 1]) - float(got.node_mask.sum())
    assert abs(kept) > 1e-3 and abs(float(got.bias_relevance) - kept) < 1e-9  # AttnLRP's softmax does not conserve


def test_a_buffer_an_input_dependent_operation_writes_into_is_made_on_every_call():
    """fold_constants runs the graph part once, but a buffer that an input-dependent operation writes into in place
    (a scatter into zeros whose size the model read from the data) is made again on every call, so that the
    folded graph gives the unfolded graph's output on every call, not a sum over the calls."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from lrp_lib.explain.capture import fold_constants
    index = torch.tensor([0, 2, 2, 1])

    def scatter(x):
        return torch.zeros(3, dtype=x.dtype).scatter_add_(0, index, x) * 2
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    graph = fold_constants(make_fx(scatter)(x), [x])
    for _ in range(3):
        assert torch.equal(graph(x), torch.tensor([2.0, 8.0, 10.0]))


@pytest.mark.parametrize("edges", [False, True])
def test_a_capture_for_any_graph_computes_what_every_layer_recomputes_once(edges, monkeypatch):
    """Captured for any graph, a GCN's graph part (self-loops, degrees, normalisation), which PyG recomputes in every
    layer, is computed once: the functional graph has one ``pow`` (the degrees' inverse square root) where the
    capture without the pass has one per layer.  Captured on a graph with as many nodes as features, on graphs of
    other sizes its outputs, node and edge relevance and accounts equal those of the graph without the pass to the
    bit."""
    from lrp_lib.explain import capture as module
    from lrp_lib.explain.capture import AnyGraphExplanation

    def pows(explanation):
        return sum("pow" in str(n.target) for n in explanation.compiled.graph.nodes)
    model = _model("gcn")
    x, edge_index = _graph(n=6)  # (as many nodes as features: each size still its own symbol)
    deduplicated = AnyGraphExplanation(model, x, edge_index, compile=False, edges=edges)
    monkeypatch.setattr(module, "deduplicated", lambda graph, args: graph)
    reference = AnyGraphExplanation(model, x, edge_index, compile=False, edges=edges)
    layers = sum(isinstance(m, GCNConv) for m in model.modules())
    assert (pows(deduplicated), pows(reference)) == (1, layers) and layers > 1
    for n, seed in ((23, 1), (57, 2)):
        x, edge_index = _graph(n, seed=seed)
        results = []
        for explanation in (deduplicated, reference):
            out, head, leaves = explanation.forward(x, edge_index, {})
            start = torch.zeros_like(head)
            start[3, 0] = head[3, 0].detach()
            (node, _), edge, kept = explanation.backward(head, leaves, start)
            results.append([out, node, kept] + ([edge] if edges else []))
        for got, want in zip(*results):
            assert torch.equal(got, want)


def test_deduplicated_keeps_a_graph_whose_float_outputs_would_merge():
    """The pass removes an operation that repeats another (one ``sin`` of two), but keeps the graph as it is where
    two of its float outputs would become one (edge hooks on each would count the relevance twice)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from lrp_lib.explain.capture import deduplicated
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    with torch.enable_grad():
        graph = make_fx(lambda t: (t.sin() * t.sin(),))(x)
        twice = make_fx(lambda t: (t.sin(), t.sin()))(x)
        once = deduplicated(graph, [x])
        assert [str(n.target) for n in once.graph.nodes].count("aten.sin.default") == 1
        assert torch.equal(once(x)[0], graph(x)[0])
        assert deduplicated(twice, [x]) is twice


@pytest.mark.parametrize("edges", [False, True])
def test_a_graph_run_as_it_is_calls_the_python_bindings_with_the_same_results(edges, monkeypatch):
    """A captured graph run as it is (not compiled) calls every ATen operation through PyTorch's Python binding of
    the same name (``torch.mul`` for ``aten.mul.Tensor``), and gives the ATen graph's outputs and input gradients
    to the bit; a graph whose outputs would change (here: a random operation, two draws) keeps its ATen calls."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from lrp_lib.explain import capture as module
    from lrp_lib.explain.capture import _leaves, capture, python_bindings
    model = _model("gcn")
    x, edge_index = _graph()
    bound, _ = capture(model, x, edge_index, "zplus", edges, probe=False)
    calls = [n.target for n in bound.graph.nodes if n.op == "call_function"]
    assert calls and not any(isinstance(t, torch._ops.OpOverload) for t in calls)
    monkeypatch.setattr(module, "python_bindings", lambda graph, inputs: graph)
    reference, _ = capture(model, x, edge_index, "zplus", edges, probe=False)  # (the same graph, left in ATen)
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in reference.graph.nodes if n.op == "call_function")
    results = []
    for graph in (bound, reference):
        leaves = _leaves(x, None)
        with torch.enable_grad():
            out, head, *messages = graph(*leaves)
        grads = torch.autograd.grad(head[:, 0].sum(), leaves[:2], allow_unused=True)
        results.append([out, head, *grads])
    for got, want in zip(*results):
        assert (got is None and want is None) or torch.equal(got, want)

    graph = make_fx(lambda t: torch.rand_like(t) + t)(torch.zeros(3))
    kept = python_bindings(graph, [torch.zeros(3)])
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in kept.graph.nodes if n.op == "call_function")
