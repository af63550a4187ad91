"""Compiled explanations (:mod:`lrp_lib.explain.compiled`): a replayed explanation's ATen operations
run as a program give the mode's relevance, value for value, on the coverage zoo and on new inputs;
the guards send what the program does not hold back to the replay."""
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import (GATConv, GCNConv, GINConv, GraphConv, SAGEConv, global_add_pool, global_max_pool,
                                global_mean_pool)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_zoo_relevance as zoo  # noqa: E402
import replay_zoo as rz  # noqa: E402
from make_zoo_relevance import RULES, bc  # noqa: E402

from lrp_lib.explain import compiled, replay  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402


@pytest.fixture(autouse=True)
def record_on_the_first_call(monkeypatch):
    """Plans recorded on the first call, and programs simplified from their first run (the tests of the
    program as recorded set SIMPLIFY_AFTER themselves)."""
    monkeypatch.setattr(replay, "RECORD_ON", 1)
    monkeypatch.setattr(compiled, "SIMPLIFY_AFTER", 0)


@pytest.fixture
def runs(monkeypatch):
    """The number of explanations that ran as a program."""
    count = [0]
    real = compiled.run

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        count[0] += 1
        return out
    monkeypatch.setattr(compiled, "run", counted)
    return count


def explainer(model, level, rule, replay_):
    return Explainer(model, algorithm=LRPExplainer(rule=RULES[rule], mask="relevance", replay=replay_,
                                                   accounts="total"),
                     explanation_type="model", node_mask_type="attributes", edge_mask_type=None,
                     model_config=dict(mode="regression", task_level=level, return_type="raw"))


KEYS = dict(rz.keys())


@pytest.mark.parametrize("key", sorted(KEYS))
def test_the_zoo_compiled_is_the_zoo_by_the_mode(key, runs):
    """Recorded and compiled on the case's inputs, run as a program on perturbed ones: the same node
    relevance, accounts and masks as the mode on the perturbed inputs, bit for bit."""
    spec, level, edge_attr, rule = KEYS[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, inputs = bc.build_case(spec, level, edge_attr)
            bc.reference(model, inputs, level)
        except Exception:  # noqa: BLE001 - the zoo skips it
            return
        fast, mode = explainer(model, level, rule, True), explainer(model, level, rule, False)
        try:
            rz.call(fast, inputs, level)  # records the plan
            rz.call(fast, inputs, level)  # replays it, compiles the program
        except Exception:  # noqa: BLE001 - the mode refuses it too (compared below)
            pass
        new = rz.perturbed(inputs)
        before = runs[0]
        # twice: where the graph's own inputs changed (edge weights), the first falls back and compiles again
        got = [zoo._run(lambda: rz.call(fast, new, level)) for _ in range(2)]
    want = zoo._run(lambda: rz.call(mode, new, level))
    assert got[0] == want and got[1] == want  # every tensor's fingerprint (torch.equal values), warnings, errors
    if "error" not in want and spec.family != "hetero" and spec.name not in ("HEATConv",):
        plans = list(replay.plans_of(model).values())
        refused = [getattr(p, "program_refused", None) for p in plans]
        assert runs[0] > before or any(refused), refused


class Net(nn.Module):
    def __init__(self, features=4, hidden=6):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, hidden)
        self.lin = nn.Linear(hidden, 3)

    def forward(self, x, edge_index):
        return self.lin(self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu())


def graph(seed=0, nodes=12, edges=40):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(nodes, 4, generator=g), torch.randint(0, nodes, (2, edges), generator=g)


def node_explainer(model, **options):
    return Explainer(model, algorithm=LRPExplainer(**options), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type=None,
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))


def compiled_setup(rule="zplus", evaluating=False):
    """A model, a graph and two explainers (the defaults, and without replay), the first with a compiled
    program (RECORD_ON is 1 here: the first call records the plan, the second the program)."""
    torch.manual_seed(0)
    model = Net().train(not evaluating)
    x, ei = graph()
    fast, mode = node_explainer(model, rule=rule), node_explainer(model, rule=rule, replay=False)
    fast(x, ei, index=2)
    fast(x, ei, index=2)
    plan = next(iter(replay.plans_of(model).values()))
    assert plan.program is not None
    return model, x, ei, fast, mode, plan


def test_new_values_and_targets_run_the_program(runs):
    """Other features, other explained nodes and targets: the program's relevance is the mode's (the
    start relevance is computed between the program's forward and backward)."""
    model, x, ei, fast, mode, _ = compiled_setup()
    for seed, index in ((1, 2), (2, 5), (3, 7)):
        x2 = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed))
        got, want = fast(x2, ei, index=index), mode(x2, ei, index=index)
        assert got.replayed and torch.equal(got.node_relevance, want.node_relevance)
        assert torch.equal(got.bias_relevance, want.bias_relevance)
        assert torch.equal(got.target, want.target)
    assert runs[0] == 3


def test_a_changed_sign_falls_back_to_the_replay(runs):
    """z+ on inputs of both signs splits them; compiled where the inputs are all positive, the program
    reads the signs again, and inputs with negative entries go back to the replay, with the mode's
    relevance."""
    model, x, ei, fast, mode, plan = compiled_setup()
    x2 = x - 0.5  # entries of both signs
    got, want = fast(x2, ei, index=2), mode(x2, ei, index=2)
    assert runs[0] == 0 and got.replayed and torch.equal(got.node_relevance, want.node_relevance)
    assert plan.program_failures == 1 and plan.program is not None  # compiled again, for these signs
    for failures in range(2, compiled.MAX_FAILURES + 2):  # the signs alternate: a failure on every call
        t = x if failures % 2 == 0 else x2
        got, want = fast(t, ei, index=2), mode(t, ei, index=2)
        assert runs[0] == 0 and torch.equal(got.node_relevance, want.node_relevance)
        assert plan.program_failures == failures
    assert plan.program is None  # more failures than MAX_FAILURES and no run: no longer compiled
    assert fast(x, ei, index=2).replay_reason == "replayed" and plan.program is None


def test_a_program_that_mostly_holds_is_compiled_again(runs):
    """Failures among many runs (a choice that changes on one input in many) do not stop the compiling."""
    model, x, ei, fast, _, plan = compiled_setup()
    for _ in range(4):
        for _ in range(2 * compiled.RUNS_PER_FAILURE):
            assert fast(x, ei, index=2).replay_reason == "compiled"
        assert fast(x - 0.5, ei, index=2).replay_reason == "replayed"  # a failure, then compiled for these signs
        assert fast(x, ei, index=2).replay_reason == "replayed"  # and back: another failure, compiled again
    assert plan.program is not None and plan.program_failures == 8 > compiled.MAX_FAILURES


def test_a_parameter_changed_through_data_is_read_again(runs):
    model, x, ei, fast, mode, _ = compiled_setup()
    with torch.no_grad():
        model.lin.weight.data.mul_(-2.0)  # no version change
    got, want = fast(x, ei, index=2), mode(x, ei, index=2)
    assert runs[0] == 1 and torch.equal(got.node_relevance, want.node_relevance)


def test_a_program_runs_only_with_autocast_as_when_recorded(runs):
    """Recorded without autocast, the program holds no casts: under autocast the explanation is replayed
    (with the casts), as the mode would run it."""
    model, x, ei, fast, mode, plan = compiled_setup(evaluating=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = fast(x, ei, index=2), mode(x, ei, index=2)
    assert got.replay_reason != "compiled" and runs[0] == 0
    assert torch.equal(got.node_relevance, want.node_relevance)


def test_no_program_where_the_accounts_are_per_graph_or_edges_are_explained(runs):
    torch.manual_seed(0)
    model = Net()
    x, ei = graph()
    edges = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                      edge_mask_type="object",
                      model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    for _ in range(4):
        assert edges(x, ei, index=2).replayed in (False, True)
    assert runs[0] == 0 and all(getattr(p, "program", None) is None for p in replay.plans_of(model).values())


def test_threads_explain_with_one_program(runs):
    """Eight threads explain with the same program at once (the model in eval mode: a model in
    training mode has its flag switched by each thread's explainer, which the program's guard sees)."""
    model, x, ei, fast, mode, _ = compiled_setup(evaluating=True)
    inputs = [torch.rand(x.shape, generator=torch.Generator().manual_seed(s)) for s in range(8)]
    want = [mode(t, ei, index=2).node_relevance for t in inputs]
    got = [None] * len(inputs)

    def work(i):
        for _ in range(5):
            got[i] = fast(inputs[i], ei, index=2).node_relevance
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert runs[0] == 5 * len(inputs)


_PROPERTY_MODEL = {}


def _compiled_pair(rule):
    """One model and its two explainers per rule, compiled once on positive features."""
    if rule not in _PROPERTY_MODEL:
        torch.manual_seed(3)
        model = Net().eval()
        x, ei = graph(seed=4)
        fast, mode = node_explainer(model, rule=rule), node_explainer(model, rule=rule, replay=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                fast(x, ei, index=2)
        _PROPERTY_MODEL[rule] = (model, ei, fast, mode)
    return _PROPERTY_MODEL[rule]


@given(seed=st.integers(0, 2**31 - 1), shift=st.sampled_from([0.0, 0.5, 1.0]), scale=st.floats(0.01, 100.0),
       index=st.integers(0, 11), rule=st.sampled_from(["zplus", "epsilon", "gamma", "alpha2beta1"]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_compiled_or_not_the_relevance_is_the_modes(runs, seed, shift, scale, index, rule):
    """Whatever the features (their signs, their scale) and the explained node, the explanation, run as
    the program or sent back to the replay by a guard, equals the mode's bit for bit."""
    replay.RECORD_ON = 1
    model, ei, fast, mode = _compiled_pair(rule)
    x = (torch.rand(12, 4, generator=torch.Generator().manual_seed(seed)) - shift) * scale
    def warned(explain):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = explain(x, ei, index=index)
        return out, sorted(str(w.message) for w in caught)
    (got, got_warnings), (want, want_warnings) = warned(fast), warned(mode)
    assert got.replayed and got_warnings == want_warnings  # (alpha-beta loses relevance at zero outputs: warned)
    for key in ("node_relevance", "bias_relevance", "relevance_residual", "node_mask", "target"):
        assert torch.equal(got[key], want[key]), key


def test_on_every_device_the_program_gives_the_modes_relevance(device, runs):
    """On a GPU the backward runs in the autograd engine's thread for the device: the recorder is carried
    there, so the program holds the backward's operations and the rules' reads.  Its relevance is the
    mode's (bit for bit on the CPU; to float32 rounding on a GPU, whose scatter sums add in no fixed
    order), and features of other signs, which z+ splits otherwise, go back to the replay."""
    torch.manual_seed(0)
    model = Net().to(device).eval()
    x, ei = (t.to(device) for t in graph())
    fast, mode = node_explainer(model), node_explainer(model, replay=False)
    fast(x, ei, index=2)
    fast(x, ei, index=2)
    plan = next(iter(replay.plans_of(model).values()))
    assert plan.program is not None, plan.program_refused
    tol = dict(rtol=0, atol=0) if device.type == "cpu" else dict(rtol=1e-5, atol=1e-7)
    for seed, index in ((1, 2), (2, 5)):
        x2 = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed)).to(device)
        got, want = fast(x2, ei, index=index), mode(x2, ei, index=index)
        assert got.replay_reason == "compiled"
        torch.testing.assert_close(got.node_relevance, want.node_relevance, **tol)
        torch.testing.assert_close(got.bias_relevance, want.bias_relevance, **tol)
    assert runs[0] == 2
    got, want = fast(x - 0.5, ei, index=2), mode(x - 0.5, ei, index=2)  # the signs read again: replayed
    assert runs[0] == 2 and got.replay_reason == "replayed" and plan.program_failures == 1
    torch.testing.assert_close(got.node_relevance, want.node_relevance, **tol)


def test_a_backward_in_several_threads_is_not_compiled():
    """Operations or reads of the backward seen in two threads (tensors on two devices, each with its own
    thread in the autograd engine) have no fixed order: no program."""
    recorder = compiled.Recorder(nn.Linear(1, 1), [])
    x = torch.ones(3)
    recorder.declare(x)
    with recorder:
        y, signs = x * 2, x.sign()
    recorder.begin_backward(torch.ones(()))
    with recorder:
        g = y * 3
    worker = threading.Thread(target=lambda: recorder.on_read(signs, signs.tolist()))
    worker.start()
    worker.join()
    with pytest.raises(compiled.NotCompiled, match="several threads"):
        recorder.finish(y, y, [g], [], set(), None)


class Pooled(nn.Module):
    def __init__(self, features=4, hidden=6):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, hidden)
        self.lin = nn.Linear(hidden, 2)

    def forward(self, x, edge_index, batch=None):
        h = self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu()
        return self.lin(h.mean(0, keepdim=True) if batch is None else global_mean_pool(h, batch))


def test_one_graph_with_an_account_per_graph_is_compiled(runs):
    """A graph-level explanation of one graph (no ``batch``) has one account, as ``accounts="total"``:
    it runs as a program, with the mode's relevance and per-graph accounts (shape ``[1]``) bit for bit,
    on graphs of the recorded size with other features and edges; a batch of two is not compiled."""
    torch.manual_seed(0)
    model = Pooled().eval()

    def graph_explainer(**options):
        return Explainer(model, algorithm=LRPExplainer(**options), explanation_type="phenomenon",
                         node_mask_type="attributes", edge_mask_type=None,
                         model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))
    fast, mode = graph_explainer(), graph_explainer(replay=False)

    def loopless(seed):  # (a self-loop more or less is another plan: GCN adds the missing ones)
        x, ei = graph(seed=seed)
        return x, torch.stack([ei[0], (ei[0] + 1 + ei[1] % 11) % 12])
    target = torch.tensor([1])
    for seed in (0, 0, 1):  # recorded, then compiled on the same graph (which it holds and checks),
        x, ei = loopless(seed)  # then compiled again for another graph
        fast(x, ei, target=target)
    for seed in (2, 3, 4):
        x2, ei2 = loopless(seed)
        got, want = fast(x2, ei2, target=target), mode(x2, ei2, target=target)
        assert got.replay_reason == "compiled"
        assert torch.equal(got.node_relevance, want.node_relevance)
        assert got.bias_relevance.shape == (1,) and torch.equal(got.bias_relevance, want.bias_relevance)
        assert torch.equal(got.relevance_residual, want.relevance_residual)
    assert runs[0] == 3
    two = Batch.from_data_list([Data(x=x, edge_index=ei), Data(x=x2, edge_index=ei2)])
    for _ in range(3):
        e = fast(two.x, two.edge_index, batch=two.batch, target=torch.tensor([1, 0]))
    assert e.replay_reason == "replayed" and runs[0] == 3


# Generic programs: one program for graphs of any size (compiled.generalise)

def molecule(nodes, edges, seed):
    """A graph of ``nodes`` nodes and ``edges`` edges without self-loops."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, nodes, (edges,), generator=g)
    dst = (src + 1 + torch.randint(0, nodes - 1, (edges,), generator=g)) % nodes
    return torch.rand(nodes, 4, generator=g), torch.stack([src, dst])


class PoolNet(nn.Module):
    """Two message-passing layers and a pool: the model of one molecule at a time."""
    def __init__(self, conv="gcn", pool="mean"):
        super().__init__()
        make = {"gcn": lambda i, o: GCNConv(i, o), "gat": lambda i, o: GATConv(i, o, heads=2, concat=False),
                "gin": lambda i, o: GINConv(nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o))),
                "sage": lambda i, o: SAGEConv(i, o), "graph": lambda i, o: GraphConv(i, o)}[conv]
        self.conv1, self.conv2, self.lin = make(4, 6), make(6, 6), nn.Linear(6, 2)
        self.pool = {"mean": global_mean_pool, "max": global_max_pool, "add": global_add_pool}[pool]

    def forward(self, x, edge_index, batch=None):
        h = self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu()
        return self.lin(self.pool(h, batch))


def graph_explainers(model, rule="zplus"):
    def make(**options):
        return Explainer(model, algorithm=LRPExplainer(rule=RULES[rule], **options), explanation_type="phenomenon",
                         node_mask_type="attributes", edge_mask_type=None,
                         model_config=dict(mode="multiclass_classification", task_level="graph",
                                           return_type="raw"))
    return make(), make(replay=False)


def assert_same_explanation(got, want):
    for name in ("node_relevance", "bias_relevance", "relevance_residual"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name


def warm_up_two_sizes(fast, sizes=((10, 21), (13, 27))):
    """Each size explained three times (recorded, compiled, run): two programs of one family."""
    for seed, (nodes, edges) in enumerate(sizes):
        for k in range(3):
            fast(*molecule(nodes, edges, 10 * seed + k), target=torch.tensor([1]))


@pytest.mark.parametrize("conv", ["gcn", "gat", "gin", "sage", "graph"])
@pytest.mark.parametrize("pool", ["mean", "max", "add"])
def test_a_generic_program_explains_graphs_of_other_sizes(conv, pool):
    """Two sizes compiled make one program for any size: graphs of sizes never seen run it ("compiled for
    any size") and get the mode's relevance and accounts bit for bit; where z+ finds other signs in a
    layer's input than when recorded (a unit without positive input), the guard sends the graph back."""
    torch.manual_seed(0)
    model = PoolNet(conv, pool).eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    assert fam.generic is not None, fam.refused
    ran = []
    for seed, (nodes, edges) in enumerate([(7, 16), (25, 53), (18, 40), (30, 70)]):
        x, ei = molecule(nodes, edges, 100 + seed)
        got, want = fast(x, ei, target=torch.tensor([1])), mode(x, ei, target=torch.tensor([1]))
        ran.append(got.replay_reason == "compiled for any size")
        assert_same_explanation(got, want)
    assert fam.runs == sum(ran) >= 2 and fam.failures == 4 - sum(ran)
    if conv in ("gcn", "gin"):
        assert all(ran)


def test_a_generic_program_is_not_run_where_a_size_is_0_or_1_or_two_sizes_are_equal():
    """A graph of one node, one edge, or as many edges as nodes is explained as without a generic program
    (its model could take other branches there), with the mode's relevance."""
    torch.manual_seed(0)
    model = PoolNet().eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    one_edge = (torch.rand(2, 4), torch.tensor([[0], [1]]))
    no_edge = (torch.rand(3, 4), torch.zeros(2, 0, dtype=torch.long))
    for x, ei in (one_edge, no_edge, molecule(9, 9, 1)):
        got, want = fast(x, ei, target=torch.tensor([0])), mode(x, ei, target=torch.tensor([0]))
        assert not got.replay_reason.startswith("compiled")
        assert_same_explanation(got, want)
    assert fam.runs == 0


def test_a_generic_program_checks_the_sizes_the_data_decides():
    """GCN adds the self-loops a graph lacks: the count of those it has (0 in the recorded graphs) is the
    size of a data-dependent result, compared on every run, so a graph with self-loops falls back."""
    torch.manual_seed(0)
    model = PoolNet().eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    x, ei = molecule(11, 30, 5)
    ei[1, :3] = ei[0, :3]  # three self-loops
    got, want = fast(x, ei, target=torch.tensor([1])), mode(x, ei, target=torch.tensor([1]))
    assert got.replay_reason != "compiled for any size" and fam.failures == 1
    assert_same_explanation(got, want)


class Sliced(nn.Module):
    """A model whose forward uses a number that is no tensor's size (the node count plus one)."""
    def __init__(self):
        super().__init__()
        self.conv, self.lin = GCNConv(4, 6), nn.Linear(6, 2)

    def forward(self, x, edge_index):
        h = self.conv(x, edge_index).relu()
        return self.lin(torch.cat([h, h])[: x.shape[0] + 1].mean(0, keepdim=True))


def test_programs_with_a_number_that_is_no_size_are_not_generalised():
    """A size that differs between two programs must be read from a tensor of the program; one that
    cannot be (here the node count plus one) leaves the family without a generic program."""
    torch.manual_seed(0)
    model = Sliced().eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    assert fam.generic is None and "is not the size of a tensor" in fam.refused
    x, ei = molecule(17, 40, 3)
    assert_same_explanation(fast(x, ei, target=torch.tensor([1])), mode(x, ei, target=torch.tensor([1])))


def test_sizes_in_the_same_ratio_are_not_generalised():
    """Two programs whose graphs have edges and nodes in the same ratio (twice as many edges as nodes
    in both) could not tell a number that is the edge count from twice the node count."""
    torch.manual_seed(0)
    model = PoolNet().eval()
    fast, _ = graph_explainers(model)
    warm_up_two_sizes(fast, sizes=((10, 20), (13, 26)))
    (fam,) = compiled.families_of(model).values()
    assert fam.generic is None and "same ratio" in fam.refused


_GENERIC = {}


@given(nodes=st.integers(2, 40), edges=st.integers(2, 120), seed=st.integers(0, 2**31 - 1),
       rule=st.sampled_from(["zplus", "epsilon", "gamma", "alpha2beta1"]), shift=st.sampled_from([0.0, 0.3]),
       scale=st.floats(0.01, 100.0))
@settings(max_examples=60, deadline=None)
def test_generic_or_not_the_relevance_is_the_modes(nodes, edges, seed, rule, shift, scale):
    """Any graph, any rule, features of any scale and sign: the explanation equals the mode's bit for bit,
    whether the generic program ran it or a guard sent it back (a model whose generic program failed too
    often, and was dropped, is made again)."""
    model = _GENERIC.get(rule, (None,))[0]
    family = None if model is None else next(iter(compiled.families_of(model).values()), None)
    if model is None or family is not None and family.generic is None:  # (alpha-beta makes no program)
        torch.manual_seed(1)
        model = PoolNet().eval()
        fast, mode = graph_explainers(model, rule)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warm_up_two_sizes(fast)
        _GENERIC[rule] = (model, fast, mode)
    model, fast, mode = _GENERIC[rule]
    x, ei = molecule(nodes, edges, seed)
    x = (x - shift) * scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, want = fast(x, ei, target=torch.tensor([seed % 2])), mode(x, ei, target=torch.tensor([seed % 2]))
    assert_same_explanation(got, want)


def test_compile_exact_runs_no_generic_program_and_a_bad_value_is_named():
    """``compile="exact"`` keeps the programs per signature and runs no generic one; another value of
    ``compile`` is refused with an error naming it."""
    torch.manual_seed(0)
    model = PoolNet().eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    exact = Explainer(model, algorithm=LRPExplainer(compile="exact"), explanation_type="phenomenon",
                      node_mask_type="attributes", edge_mask_type=None,
                      model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))
    x, ei = molecule(17, 40, 3)
    got = exact(x, ei, target=torch.tensor([1]))
    assert not got.replay_reason.startswith("compiled")
    assert_same_explanation(got, mode(x, ei, target=torch.tensor([1])))
    assert exact(*molecule(10, 21, 7), target=torch.tensor([1])).replay_reason == "compiled"  # its own size
    assert fast(x, ei, target=torch.tensor([1])).replay_reason == "compiled for any size"
    with pytest.raises(ValueError, match="compile must be True, False, 'exact' or None .*, got 'yes'"):
        LRPExplainer(compile="yes")


def test_on_every_device_a_generic_program_gives_the_modes_relevance(device):
    """A generic program on the device of its model: the mode's relevance for graphs of new sizes (bit for
    bit on the CPU, to float32 rounding on a GPU)."""
    torch.manual_seed(0)
    model = PoolNet().to(device).eval()
    fast, mode = graph_explainers(model)
    target = torch.tensor([1], device=device)
    for seed, (nodes, edges) in enumerate(((10, 21), (13, 27))):
        for k in range(3):
            fast(*(t.to(device) for t in molecule(nodes, edges, 10 * seed + k)), target=target)
    tol = dict(rtol=0, atol=0) if device.type == "cpu" else dict(rtol=1e-5, atol=1e-7)
    for seed, (nodes, edges) in enumerate([(7, 16), (25, 53)]):
        x, ei = (t.to(device) for t in molecule(nodes, edges, 100 + seed))
        got, want = fast(x, ei, target=target), mode(x, ei, target=target)
        assert got.replay_reason == "compiled for any size"
        for name in ("node_relevance", "bias_relevance", "relevance_residual"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), **tol)


# simplify: work that gives the same values on every run is done once


def program_of(fn, x: torch.Tensor, constants=()):
    """The program of ``fn(x)`` (its ATen operations, all in the forward segment), and its simplified form."""
    rec = compiled.Recorder(nn.Module(), list(constants))
    rec.declare(x)
    with torch.no_grad(), rec:
        out = fn(x)
    rec.begin_backward(torch.zeros(()))
    p = rec.finish(out, out, [out], [], set(), None)
    return p, compiled.simplify(p)


def run_program(p, x):
    return compiled.run(p, nn.Module(), [x], lambda out, head: torch.zeros(()))[0]


def test_simplify_does_constant_work_once_and_repeated_work_once(monkeypatch):
    """Steps on constants alone run once (the transpose and positive part of a weight, the signs read
    from it); a step repeated on the same values reads the first result, also after a tensor written in
    place went through the same writes (two normalisations of the same edges); what no result needs goes."""
    w = torch.randn(5, 3)

    def fn(x):
        wt = w.t().clamp(min=0)
        assert not bool((w.sign() > 1).any())  # a value read from a constant
        norms = []
        for _ in range(3):  # the same normalisation three times, each written in place
            d = x.new_zeros(x.shape[0])
            d.add_(x.sum(-1)).abs_().add_(1.0)
            norms.append(d.rsqrt())
        unused = x * 3  # noqa: F841 - needed by nothing
        return (x @ wt) * norms[0][:, None] + (x @ wt) * norms[2][:, None]

    monkeypatch.setattr(compiled, "SIMPLIFY_AFTER", 10 ** 9)  # p runs as recorded
    x = torch.randn(4, 3)
    p, q = program_of(fn, x, [w])
    names = [str(compiled._OVERLOADS[s[1]]) for s in q.steps]
    assert len(p.steps) >= 25 and names == [
        "aten.new_zeros.default", "aten.sum.dim_IntList", "aten.add_.Tensor", "aten.abs_.default", "aten.add_.Tensor",
        "aten.rsqrt.default", "aten.mm.default", "aten.unsqueeze.default", "aten.mul.Tensor", "aten.add.Tensor"], names
    assert "aten.clamp.default" not in names and "aten.sign.default" not in names
    for seed in range(3):
        x = torch.randn(4, 3)
        assert torch.equal(run_program(q, x), fn(x)) and torch.equal(run_program(p, x), fn(x))


def test_simplify_keeps_what_a_write_in_place_makes_different():
    """Two clones of one tensor are not one tensor when one is then written in place, nor when a view of
    it is; nor are two reads of a tensor on either side of a write through its view."""
    def fn(x):
        a, b = x.clone(), x.clone()
        b.add_(1.0)
        c = x.clone()
        c.view(-1)[0] = 5.0  # (c written through its view)
        d = x.clone()
        y = x.clone()
        before = y * 2
        y.view(-1).mul_(3.0)
        after = y * 2
        return a + b + c + d + before + after

    x = torch.randn(3, 2)
    p, q = program_of(fn, x)
    for x in (torch.randn(3, 2), torch.randn(3, 2)):
        assert torch.equal(run_program(q, x), fn(x))
    names = [str(compiled._OVERLOADS[s[1]]) for s in q.steps]
    assert names.count("aten.clone.default") == 4, names  # a and d are one; b, c and y are their own


def start_of_class_1(out, head):
    """The start relevance of class 1's logit (what ``compiled.run`` takes between its segments)."""
    return torch.where(torch.arange(head.numel()).view(head.shape) == 1, head, torch.zeros_like(head))


def test_a_simplified_program_is_the_program_on_the_zoo_of_sizes(monkeypatch):
    """A GCN's program for any size: the simplified one runs fewer operations (the later layers' edge
    normalisation is the first layer's; the weights' transposes and positive parts are made once) and
    gives the same relevance to the bit."""
    torch.manual_seed(0)
    model = PoolNet("gcn", "mean").eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    p = fam.generic
    q = compiled.simplify(p)
    monkeypatch.setattr(compiled, "SIMPLIFY_AFTER", 10 ** 9)  # p runs as recorded
    assert len(q.steps) <= 0.75 * len(p.steps) and q.split < p.split
    x, ei = molecule(20, 44, 7)
    start = start_of_class_1
    a, b = compiled.run(p, model, [x, ei], start), compiled.run(q, model, [x, ei], start)
    assert p.fast is None and torch.equal(a[0], b[0]) and torch.equal(a[3][0], b[3][0])
    assert torch.equal(a[3][0], mode(x, ei, target=torch.tensor([1])).node_relevance)


def test_a_program_is_simplified_once_it_has_run_a_few_times(monkeypatch):
    """Simplifying costs about as much as a few explanations: a program runs as recorded at first, and
    simplified (the same relevance) from its run SIMPLIFY_AFTER + 1 on."""
    monkeypatch.setattr(compiled, "SIMPLIFY_AFTER", 2)
    torch.manual_seed(0)
    model = PoolNet("gcn", "mean").eval()
    fast, mode = graph_explainers(model)
    x, ei = molecule(12, 26, 3)
    for _ in range(2):  # records the plan, then the program
        fast(x, ei, target=torch.tensor([1]))
    (plan,) = replay.plans_of(model).values()
    for k in range(4):
        got = fast(x, ei, target=torch.tensor([1]))
        assert got.replay_reason == "compiled" and (plan.program.fast is None) == (k < 2)
        assert torch.equal(got.node_relevance, mode(x, ei, target=torch.tensor([1])).node_relevance)


def test_a_simplified_program_calls_the_c_bindings_unless_a_torch_function_mode_is_on():
    """From the second run of a simplified program on, each operator that has a C binding calling it is called
    through it (:mod:`lrp_lib.explain.bindings`): the same relevance to the bit.  Under a torch function mode the
    operators are called as recorded, so the mode sees what it saw before."""
    from torch.overrides import TorchFunctionMode

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(func)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = PoolNet("gcn", "mean").eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    x, ei = molecule(17, 36, 5)
    first = fast(x, ei, target=torch.tensor([1]))
    assert first.replay_reason == "compiled for any size"
    q = fam.generic.fast
    start = start_of_class_1
    want = mode(x, ei, target=torch.tensor([1]))
    assert torch.equal(first.node_relevance, want.node_relevance)
    if q.bound is None:  # the run that finds the bindings
        compiled.run(q, model, [x, ei], start)
    assert q.bound is not None
    called = {id(v) for code in q.bound for v in code.__globals__.values()}
    assert id(torch._C._VariableFunctions.mm) in called and id(torch._C.TensorBase.mul_) in called
    runs = []

    def counted(code):
        def segment(env):
            runs.append(code)
            return code(env)
        return segment
    q.bound = tuple(counted(code) for code in q.bound)
    got = compiled.run(q, model, [x, ei], start)
    assert torch.equal(got[3][0], want.node_relevance) and len(runs) == 2
    with Seen() as seen:
        under_mode = compiled.run(q, model, [x, ei], start)
    assert torch.equal(under_mode[3][0], want.node_relevance) and len(runs) == 2
    recorded = [s for s in q.steps if s[1] in compiled._OVERLOADS]
    assert len([f for f in seen.calls if isinstance(f, torch._ops.OpOverload)]) == len(recorded)


def test_a_simplified_program_reads_the_signs_of_z_plus_one_number_at_a_time():
    """z+ reads the signs of its input's and weight's extremes as ``stack``, ``sign`` and ``tolist``; the simplified
    program reads them with an ``item`` each (the weight's signs taken when simplified): the same relevance,
    and an input with other signs (a negative feature) still fails the guard, with the values read."""
    torch.manual_seed(0)
    model = PoolNet("gcn", "mean").eval()
    fast, mode = graph_explainers(model)
    warm_up_two_sizes(fast)
    (fam,) = compiled.families_of(model).values()
    p = fam.generic
    q = compiled.simplify(p)
    names = [getattr(s[1], "__name__", None) for s in q.steps]
    reads = [s for s in q.steps if s[1] is compiled._signs]
    assert reads and "tolist" not in names
    assert len(reads) == sum(getattr(s[1], "__name__", None) == "tolist" for s in p.steps)
    assert any(isinstance(v, float) for s in reads for v in s[2][0])  # a weight's signs, taken now
    signs = [str(compiled._OVERLOADS.get(s[1])) for s in q.steps].count("aten.sign.default")
    assert signs == 0
    start = start_of_class_1
    x, ei = molecule(16, 33, 11)
    assert torch.equal(compiled.run(q, model, [x, ei], start)[3][0],
                       mode(x, ei, target=torch.tensor([1])).node_relevance)
    x[3, 2] = -0.5  # z+ now finds negative input: another branch
    with pytest.raises(compiled.Stale, match=r"_signs read \[-1\.0, 1\.0, -1\.0, 1\.0\]"):
        compiled.run(q, model, [x, ei], start)
    got = fast(x, ei, target=torch.tensor([1]))
    assert got.replay_reason != "compiled for any size"
    assert_same_explanation(got, mode(x, ei, target=torch.tensor([1])))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a GPU"))])
def test_the_signs_read_by_item_are_those_of_stack_sign_tolist(device):
    import math
    values = [-2.5, -0.0, 0.0, 3.0, float("inf"), -float("inf"), 1e-30, float("nan")]
    for dtype in (torch.float32, torch.float64, torch.float16):
        items = [torch.tensor(v, dtype=dtype, device=device) for v in values]
        want = torch.stack(items).sign().tolist()
        mixed = [*items[:3], 1.0, *items[3:], -1.0]  # constants' signs, taken when simplified
        got = compiled._signs(mixed)
        expected = [*want[:3], 1.0, *want[3:], -1.0]
        assert len(got) == len(expected)
        for g_, w in zip(got, expected):
            assert (math.isnan(g_) and math.isnan(w)) or (g_ == w and type(g_) is type(w)), (dtype, got, expected)
