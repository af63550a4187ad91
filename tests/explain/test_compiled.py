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
from torch_geometric.nn import GCNConv

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_zoo_relevance as zoo  # noqa: E402
import replay_zoo as rz  # noqa: E402
from make_zoo_relevance import RULES, bc  # noqa: E402

from lrp_lib.explain import compiled, replay  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402


@pytest.fixture(autouse=True)
def record_on_the_first_call(monkeypatch):
    monkeypatch.setattr(replay, "RECORD_ON", 1)


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
