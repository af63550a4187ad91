"""``LRPExplainer(replay=True)`` (:mod:`lrp_lib.explain.replay`): a replayed explanation is the mode's,
value for value, on every case of the coverage zoo; the guards send what the plan does not hold back
to the mode, and say so."""
import gc
import sys
import threading
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.nn import GATConv, GCNConv

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_zoo as rz  # noqa: E402

from lrp_lib.explain import replay  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402

@pytest.fixture(autouse=True)
def record_on_the_first_call(monkeypatch):
    """The tests below record on a signature's first explanation (the default waits for the second:
    ``test_a_signature_is_recorded_on_its_second_explanation``)."""
    monkeypatch.setattr(replay, "RECORD_ON", 1)


#: zoo layers whose forward cannot be written as a plan (and why): they are explained by the mode
NOT_REPLAYABLE = {"HEATConv": "slice"}  # slices x[ptr[i]:ptr[i + 1]] with tensor bounds
KEYS = dict(rz.keys())


@pytest.mark.parametrize("key", sorted(KEYS))
def test_the_zoo_by_replay_is_the_zoo_by_the_mode(key):
    """Recorded on the case's inputs, replayed on perturbed ones: the same tensors (fingerprints of
    ``torch.equal`` values: node, edge and edge_attr relevance, bias_relevance, relevance_residual,
    masks), warnings and errors as the mode on the perturbed inputs."""
    result = rz.replay_case(*KEYS[key])
    if result is None:
        return  # the zoo skips it: the unmodified model fails
    got, want, replayed, reason = result
    assert got == want
    if "error" in want or KEYS[key][0].family == "hetero":
        return
    layer = key.split("|")[0]
    if layer in NOT_REPLAYABLE:
        assert not replayed and NOT_REPLAYABLE[layer] in reason
    else:
        assert replayed, reason


# ------------------------------------------------------------------ small models
class Net(nn.Module):
    def __init__(self, conv=GCNConv, features=4, hidden=6):
        super().__init__()
        self.conv1, self.conv2 = conv(features, hidden), conv(hidden, hidden)
        self.lin = nn.Linear(hidden, 3)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        return self.lin(F.relu(self.conv2(x, edge_index)))


class Branching(Net):
    """Control flow on the data: the sign of a sum decides the activation."""

    def forward(self, x, edge_index):
        h = self.conv1(x, edge_index)
        h = F.relu(h) if h.sum() > 0 else torch.tanh(h)
        return self.lin(F.relu(self.conv2(h, edge_index)))


def explainers(model, edges=True, rule="epsilon"):
    def make(flag):
        return Explainer(model, algorithm=LRPExplainer(rule=rule, mask="relevance", replay=flag),
                         explanation_type="model", node_mask_type="attributes",
                         edge_mask_type="object" if edges else None,
                         model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    return make(True), make(False)


def graph(n=12, e=30, seed=0, features=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=g), torch.randint(0, n, (2, e), generator=g)


def assert_same(a, b):
    for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual", "node_mask",
                "edge_mask"):
        if key in b.keys():
            assert torch.equal(a[key], b[key]), key


def model(conv=GCNConv, cls=Net):
    torch.manual_seed(0)
    m = cls(conv).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.uniform_(-0.3, 0.3)
    return m


def test_a_second_explanation_replays_and_equals_the_mode():
    m = model()
    fast, slow = explainers(m)
    x, ei = graph()
    first = fast(x, ei, index=3)
    assert (first.replayed, first.replay_reason) == (False, "recorded")
    for scale in (1.0, -2.0, 0.5):
        got, want = fast(x * scale + 0.1, ei, index=3), slow(x * scale + 0.1, ei, index=3)
        assert got.replayed and got.replay_reason == "replayed"
        assert_same(got, want)


def test_data_dependent_control_flow_falls_back_and_says_so():
    m = model(cls=Branching)
    fast, slow = explainers(m)
    x, ei = graph()
    with torch.no_grad():
        sums = [float(m.conv1(s * x, ei).sum()) for s in (100.0, -100.0, -200.0)]
    assert sums[0] * sums[1] < 0 and sums[1] * sums[2] > 0  # two branches, then the second again
    fast(100 * x, ei, index=3)  # recorded on one branch
    got = fast(-100 * x, ei, index=3)  # the other: the plan's recorded bool no longer holds
    assert not got.replayed and "did not hold" in got.replay_reason and "__bool__" in got.replay_reason
    assert_same(got, slow(-100 * x, ei, index=3))
    again = fast(-200 * x, ei, index=3)  # recorded again on that branch: replays
    assert again.replayed
    assert_same(again, slow(-200 * x, ei, index=3))


@pytest.mark.parametrize("change", ["in place", "replaced", "training"])
def test_a_changed_model_invalidates_the_plan(change):
    m = model()
    fast, slow = explainers(m, edges=False)
    x, ei = graph()
    fast(x, ei, index=1)
    assert fast(x, ei, index=1).replayed
    if change == "in place":
        with torch.no_grad():
            m.lin.weight.mul_(2.0)
    elif change == "replaced":
        m.lin.weight = nn.Parameter(m.lin.weight.detach() * 2.0)
    plan = next(iter(replay.plans_of(m).values()))
    if change == "training":
        m.conv1.train()
        with pytest.raises(replay.Stale, match="training"):
            replay.replay(plan, m, replay.ReplayMode("epsilon", m), None, [x.requires_grad_(), ei], [x])
        return
    got = fast(x, ei, index=1)
    assert not got.replayed and "parameters" in got.replay_reason
    assert_same(got, slow(x, ei, index=1))


def tamper(plan, i, step):
    """Step ``i`` of ``plan`` replaced by ``step`` (also in the steps run on the recorded graph)."""
    old, plan.steps[i] = plan.steps[i], step
    plan.live_steps = [step if s is old else s for s in plan.live_steps]


def test_the_graph_part_is_kept_only_for_the_same_graph():
    """On the recorded edges (the same values, also in another tensor) the steps on edge_index alone
    are not run again; other edges of the same shape, or the recorded tensor changed in place, run
    them: the mode's relevance each time."""
    m = model()
    fast, slow = explainers(m)
    x, ei = graph(n=15, e=40)
    fast(x, ei, index=4)
    plan = next(iter(replay.plans_of(m).values()))
    assert plan.cached_env is not None and 0 < len(plan.live_steps) < len(plan.steps) / 2
    other = ei.flip(1).contiguous()
    for xs, es in ((x + 1, ei.clone()), (x - 1, other), (x * 2, ei)):
        got = fast(xs, es, index=4)
        assert got.replayed
        assert_same(got, slow(xs, es, index=4))
    ei[0, :5] = (ei[0, :5] + 1) % 15  # the recorded tensor itself, changed in place
    got = fast(x, ei, index=4)
    assert got.replayed
    assert_same(got, slow(x, ei, index=4))


class ScaledByAParameter(nn.Module):
    """A step on a parameter alone (``scale.exp()``) beside the steps on edge_index."""

    def __init__(self, conv=GCNConv):
        super().__init__()
        self.conv, self.lin = conv(4, 6), nn.Linear(6, 3)
        self.scale = nn.Parameter(torch.rand(6) + 0.5)

    def forward(self, x, edge_index):
        return self.lin(F.relu(self.conv(x, edge_index)) * self.scale.exp())


def test_a_parameter_changed_through_data_is_read_again():
    """``p.data`` changes a parameter without its version counter: the replay, which keeps the results of
    the steps on the graph, must not keep those of a step on the parameter.  (Keeping ``scale.exp()``
    gave relevance off by 0.18 here.)"""
    m = model(cls=ScaledByAParameter)
    fast, slow = explainers(m)
    x, ei = graph(n=10, e=30)
    fast(x, ei, index=2)
    plan = next(iter(replay.plans_of(m).values()))
    assert plan.cached_env is not None and len(plan.live_steps) < len(plan.steps)  # the graph part is kept
    for factor in (-3.0, 0.5):
        m.scale.data.mul_(factor)  # no version bump
        got = fast(x, ei, index=2)
        assert got.replayed
        assert_same(got, slow(x, ei, index=2))


def test_a_wrong_plan_is_caught():
    """A recorded value changed: the guard refuses the plan.  A recorded function changed (no guard
    can see that): the replayed relevance differs from the mode's, which the comparisons here detect."""
    m = model(cls=Branching)
    fast, slow = explainers(m)
    x, ei = graph()
    fast(x, ei, index=3)
    plans = replay.plans_of(m)
    key, plan = next(iter(plans.items()))
    reads = [i for i, s in enumerate(plan.steps) if s[5] is None and isinstance(s[6], bool)]
    assert reads, "the plan re-checks the bool that decides the branch"
    i = reads[0]
    tamper(plan, i, (*plan.steps[i][:6], not plan.steps[i][6], plan.steps[i][7]))
    got = fast(x, ei, index=3)
    assert not got.replayed and "did not hold" in got.replay_reason
    plan = plans[key]  # recorded again: now a wrong function in place of relu
    relus = [i for i, s in enumerate(plan.steps) if getattr(s[1], "__name__", "") == "relu"]
    assert relus

    def relu(t, inplace=False):  # a wrong function under relu's name (and so relu's rule)
        return F.leaky_relu(t, 0.5)
    tamper(plan, relus[0], (plan.steps[relus[0]][0], relu, *plan.steps[relus[0]][2:]))
    got, want = fast(x, ei, index=3), slow(x, ei, index=3)
    assert got.replayed and not torch.equal(got.node_relevance, want.node_relevance)


def test_a_step_that_fails_falls_back_to_the_mode():
    m = model()
    fast, slow = explainers(m)
    x, ei = graph()
    fast(x, ei, index=3)
    plan = next(iter(replay.plans_of(m).values()))
    i = next(i for i, s in enumerate(plan.steps) if getattr(s[1], "__name__", "") == "relu")

    def relu(t, inplace=False):
        raise RuntimeError("a step that cannot run")
    tamper(plan, i, (plan.steps[i][0], relu, *plan.steps[i][2:]))
    got = fast(x, ei, index=3)
    assert not got.replayed and "replay failed (RuntimeError: a step that cannot run)" in got.replay_reason
    assert_same(got, slow(x, ei, index=3))
    assert fast(x, ei, index=3).replayed  # recorded again


def test_plans_do_not_keep_the_model_alive():
    m = model()
    fast, _ = explainers(m, edges=False)
    x, ei = graph()
    fast(x, ei, index=0)
    assert len(replay.plans_of(m)) == 1
    alive = weakref.ref(m)
    del m, fast, _
    gc.collect()
    assert alive() is None


def test_plans_per_model_are_bounded():
    m = model()
    fast, slow = explainers(m, edges=False)
    for n in range(3, 5 + replay.MAX_PLANS):
        x, ei = graph(n=n, e=2 * n)
        fast(x, ei, index=0)
    plans = replay.plans_of(m)
    assert len(plans) == replay.MAX_PLANS
    got = fast(x * 2, ei, index=0)  # the latest signature is kept
    assert got.replayed
    assert_same(got, slow(x * 2, ei, index=0))


def test_threads_replay_the_same_plan():
    m = model(GATConv)
    fast, slow = explainers(m)
    x, ei = graph()
    fast(x, ei, index=2)
    inputs = [x + 0.1 * k for k in range(8)]
    results = [None] * len(inputs)

    def work(k):
        results[k] = fast(inputs[k], ei, index=2)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, got in enumerate(results):
        assert got.replayed
        assert_same(got, slow(inputs[k], ei, index=2))


def test_a_model_with_hooks_is_not_replayed():
    """A replay runs no Python of the model: a model whose modules have hooks is explained by the mode."""
    m = model()
    fast, slow = explainers(m, edges=False)
    x, ei = graph()
    seen = []
    handle = m.lin.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    for _ in range(2):
        got = fast(x, ei, index=0)
        assert not got.replayed and "hooks" in got.replay_reason
    assert len(seen) == 2  # the explanation's forward (which gives the prediction too), twice
    handle.remove()
    fast(x, ei, index=0)
    assert fast(x, ei, index=0).replayed


@pytest.mark.parametrize("kind", ["message_forward", "propagate_forward_pre", "aggregate_forward"])
def test_a_message_passing_hook_is_seen_on_every_layer(kind):
    """PyG's message-passing hooks run Python in the forward too: a hook on any layer, registered after
    the plan (and its program) were made, sends the explanation back to the mode, which runs it."""
    m = model()
    fast, slow = explainers(m, edges=False)
    x, ei = graph()
    for _ in range(3):
        fast(x, ei, index=0)
    assert fast(x, ei, index=0).replayed
    seen = []
    handle = getattr(m.conv2, f"register_{kind}_hook")(lambda *args: seen.append(1))
    got = fast(x, ei, index=0)
    assert not got.replayed and f"'conv2' has {kind}_hooks" in got.replay_reason and seen
    assert_same(got, slow(x, ei, index=0))
    handle.remove()
    assert fast(x, ei, index=0).replayed


def test_model_state_walks_the_modules_in_order_and_sees_their_hooks():
    """model_state walks the modules as ``model.modules()`` does (a shared module once, a None child
    skipped), and its last entry says whether any hook would run Python: a module hook, a global one,
    a message-passing hook."""
    from lrp_lib.explain.record import hooked, model_state
    shared = nn.Linear(3, 3)
    m = nn.Sequential(shared, nn.Sequential(nn.ReLU(), shared, nn.BatchNorm1d(3)), GCNConv(3, 3))
    m.add_module("empty", None)
    m[1][2].eval()
    tensors, flags, hooks = model_state(m)
    assert flags == tuple(x.training for x in m.modules()) and not hooks and hooked(m) is None
    assert tensors == tuple((id(t), t._version) for x in m.modules()
                            for t in (*x._parameters.values(), *x._buffers.values()) if t is not None)
    handle = m[1][0].register_forward_pre_hook(lambda *a: None)
    assert model_state(m)[2] and hooked(m) == "module '1.0' has hooks"
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert model_state(m)[2] and hooked(m) == "global module hooks are registered"
    finally:
        handle.remove()
    handle = m[2].register_aggregate_forward_hook(lambda *a: None)
    assert model_state(m)[2] and hooked(m) == "module '2' has aggregate_forward_hooks"
    handle.remove()
    assert not model_state(m)[2]
    with torch.no_grad():
        shared.weight.add_(1.0)
    assert model_state(m)[0] != tensors  # a parameter written in place: another version


def test_replay_must_be_a_bool():
    with pytest.raises(TypeError, match="replay"):
        LRPExplainer(replay="yes")


@pytest.mark.parametrize("conv", [GCNConv, GATConv])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 30), e=st.integers(1, 90), seed=st.integers(0, 2 ** 16), rule=st.sampled_from(
    ["epsilon", "zplus", "gamma"]))
def test_random_graphs_replay_as_the_mode(conv, n, e, seed, rule):
    """Recorded on one graph, explained on another of the same size (other features and edges): the
    mode's relevance, replayed where the plan holds; new features on the same edges always replay."""
    m = model(conv)
    fast, slow = explainers(m, rule=rule)
    x, ei = graph(n, e, seed)
    x2, ei2 = graph(n, e, seed + 1)
    fast(x, ei, index=n - 1)
    for xs, es in ((x2, ei2), (x2 * 3, ei2)):
        got = fast(xs, es, index=n - 1)
        assert_same(got, slow(xs, es, index=n - 1))
    assert got.replayed, got.replay_reason


def test_a_signature_is_recorded_on_its_second_explanation(monkeypatch):
    """By default the first explanation of a signature runs in the mode and records nothing, the second
    records, the third replays; explanations whose signature never repeats never record."""
    monkeypatch.setattr(replay, "RECORD_ON", 2)
    assert replay.RECORD_ON == 2 and replay.MAX_SEEN >= 1
    torch.manual_seed(0)
    model = Net().eval()
    fast = Explainer(model, algorithm=LRPExplainer(mask="relevance"), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    ei = torch.randint(0, 12, (2, 40), generator=torch.Generator().manual_seed(1))
    x = torch.randn(12, 4, generator=torch.Generator().manual_seed(2))
    seen = [fast(x, ei, index=3) for _ in range(3)]
    assert [(e.replayed, e.replay_reason.split(":")[0]) for e in seen] == [
        (False, "a new signature"), (False, "recorded"), (True, "replayed")]
    for e in seen[1:]:
        assert torch.equal(e.node_relevance, seen[0].node_relevance)
        assert torch.equal(e.edge_relevance, seen[0].edge_relevance)
    # graphs of new sizes, each explained once: nothing recorded for them
    recorded = len(replay.plans_of(model))
    for n in range(13, 20):
        got = fast(torch.randn(n, 4), torch.randint(0, n, (2, 3 * n)), index=0)
        assert not got.replayed and got.replay_reason.startswith("a new signature")
    assert len(replay.plans_of(model)) == recorded


def test_explainers_built_alike_share_their_plans():
    """Two explainers with equal composites (each its own object) replay the plans the other recorded,
    with the relevance of the mode; an explainer with another rule records its own."""
    m = model()
    first, slow = explainers(m)
    second, _ = explainers(m)
    other, other_slow = explainers(m, rule="zplus")
    x, ei = graph()
    assert first(x, ei, index=3).replay_reason == "recorded"
    got = second(x, ei, index=3)
    assert got.replayed and got.replay_reason == "replayed"
    assert_same(got, slow(x, ei, index=3))
    own = other(x, ei, index=3)
    assert (own.replayed, own.replay_reason) == (False, "recorded")
    assert_same(other(x, ei, index=3), other_slow(x, ei, index=3))
