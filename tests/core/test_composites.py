"""Composites: which rule each weight gets, and the named composites."""
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv

from lrp_lib.core.composites import Composite, get_composite
from lrp_lib.explain.mode.forward import ForwardMode
from lrp_lib.core.rules import Epsilon, Gamma, ZBox, ZPlus


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(3, 4)
        self.conv2 = GCNConv(4, 4)
        self.head = nn.Linear(4, 1)


def test_names_before_types_and_the_default_for_the_rest():
    net = Net()
    c = Composite(linear="epsilon", rules={nn.Linear: "zplus", "conv1.*": Gamma(0.5)})
    names = dict(net.named_modules())
    assert c.rule_for("conv1.lin", names["conv1.lin"]) == Gamma(0.5)  # name pattern wins over the type
    assert c.rule_for("conv2.lin", names["conv2.lin"]) == Epsilon()    # PyG's Linear is not an nn.Linear
    assert c.rule_for("head", names["head"]) == ZPlus()
    assert c.rule_for("conv2", names["conv2"]) == Epsilon()


def test_the_mode_gives_each_weight_its_modules_rule():
    net = Net()
    c = Composite(rules={"conv1.*": Gamma(0.5), nn.Linear: ZPlus()})
    mode = ForwardMode(c, net)
    assert mode.rule_for(net.conv1.lin.weight) == Gamma(0.5)
    assert mode.rule_for(net.head.weight) == ZPlus()
    assert mode.rule_for(net.conv2.lin.weight) == Epsilon()
    assert mode.rule_for(net.head.weight.t()) == ZPlus()  # a view of a weight is that weight
    assert mode.rule_for(torch.ones(2, 2)) is None          # data, not a weight


def test_named_composites():
    assert get_composite("z").linear == Epsilon(0.0) and get_composite("z").epsilon == 0.0
    assert get_composite("gamma").linear == Gamma()
    assert get_composite(Epsilon(0.1)).epsilon == 0.1
    c = Composite(linear="gamma")
    assert get_composite(c) is c and c.attention == "cp"


def test_a_composite_leaves_its_default_rule_to_what_runs_it():
    """Composite(rules=...) names the rules of some modules; the others get the default of what runs it
    (get_composite's ``default``, epsilon unless given; LRPExplainer: z+), never one the composite picked."""
    net = Net()
    names = dict(net.named_modules())
    c = Composite(rules={"conv1.*": "gamma"})
    assert c.linear is None
    with pytest.raises(ValueError, match="with_default"):
        c.rule_for("conv2.lin", names["conv2.lin"])
    assert get_composite(c).rule_for("conv2.lin", names["conv2.lin"]) == Epsilon()
    resolved = get_composite(c, default="zplus")
    assert resolved is not c and c.linear is None
    assert resolved.rule_for("conv2.lin", names["conv2.lin"]) == ZPlus()
    assert resolved.rule_for("conv1.lin", names["conv1.lin"]) == Gamma()
    assert resolved.rules_of(net) == {"conv1.lin": Gamma(), "conv2.lin": ZPlus(), "head": ZPlus()}
    named = Composite(linear="epsilon", rules={"conv1.*": "gamma"})
    assert named.with_default("zplus") is named
    assert Composite().key() != Composite(linear="epsilon").key()


def test_bad_composites_are_refused_naming_the_argument():
    with pytest.raises(TypeError, match="rules keys"):
        Composite(rules={3: "epsilon"})
    with pytest.raises(ValueError, match="attention"):
        Composite(attention="softmax")
    with pytest.raises(ValueError, match="rule 'nope'"):
        Composite(linear="nope")
    with pytest.raises(ValueError, match="epsilon"):
        Composite(epsilon=-1.0)


def test_bias_false_sends_all_relevance_to_the_inputs():
    """Composite(bias=False): the biases take no share, so on a piecewise-linear model with biases the
    input relevance sums to the output (under the z rule) and equals the bias-free split by hand."""
    from torch_geometric.explain import Explainer

    from lrp_lib.explain.explainer import LRPExplainer

    class WithBiases(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(3, 4)
            self.lin = nn.Linear(4, 1)

        def forward(self, x, edge_index):
            return self.lin(self.conv(x, edge_index).relu().sum(0, keepdim=True))

    torch.manual_seed(0)
    model = WithBiases().double().eval()
    with torch.no_grad():
        model.conv.bias.uniform_(0.1, 0.5)
    x = torch.rand(5, 3, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    cfg = dict(mode="regression", task_level="graph", return_type="raw")
    keep = Explainer(model, algorithm=LRPExplainer(composite=Composite("z", epsilon=0.0)), explanation_type="model",
                     node_mask_type="attributes", model_config=cfg)(x, ei)
    drop = Explainer(model, algorithm=LRPExplainer(composite=Composite("z", epsilon=0.0, bias=False)),
                     explanation_type="model", node_mask_type="attributes", model_config=cfg)(x, ei)
    out = float(model(x, ei))
    assert float(keep.node_relevance.sum() + keep.bias_relevance) == pytest.approx(out)
    assert abs(float(keep.bias_relevance)) > 1e-3
    assert float(drop.node_relevance.sum()) == pytest.approx(out) and abs(float(drop.bias_relevance)) < 1e-12


def test_contrast_starts_from_the_class_against_the_others():
    from torch_geometric.explain import Explainer

    from lrp_lib.explain.explainer import LRPExplainer

    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 5, bias=False), nn.ReLU(), nn.Linear(5, 3, bias=False)).double()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x, edge_index):
            return self.body(x)

    x = torch.rand(4, 3, dtype=torch.float64)
    ei = torch.tensor([[0, 1], [1, 2]])
    cfg = dict(mode="multiclass_classification", task_level="node", return_type="raw")
    e = Explainer(Net(), algorithm=LRPExplainer("z", explained="contrast"), explanation_type="model",
                  node_mask_type="attributes", model_config=cfg)(x, ei, index=2)
    z = model(x)[2].detach()
    c = int(z.argmax())  # explanation_type="model" explains the predicted class
    assert float(e.node_relevance.sum()) == pytest.approx(float(z[c] - (z.sum() - z[c]) / 2))
    with pytest.raises(ValueError, match="explained must be"):
        LRPExplainer(explained="probability")


class Deep(nn.Module):
    """Three GCN layers and a head: the depth schedules' test model."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([GCNConv(3, 6), GCNConv(6, 6), GCNConv(6, 6)])
        self.head = nn.Linear(6, 2)

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = torch.relu(conv(x, edge_index))
        return self.head(x)


def _deep_explanation(rule=None, composite=None):
    from torch_geometric.explain import Explainer

    from lrp_lib.explain.explainer import LRPExplainer
    torch.manual_seed(4)
    model = Deep().double().eval()
    x = torch.rand(7, 3, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 0, 6], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 5, 6, 0]])
    algorithm = LRPExplainer(rule=rule) if composite is None else LRPExplainer(composite=composite)
    ex = Explainer(model, algorithm=algorithm, explanation_type="model", node_mask_type="attributes",
                   edge_mask_type="object",
                   model_config=dict(mode="multiclass_classification", task_level="node",
                                     return_type="raw"))
    return ex(x, edge_index, index=2)


@pytest.mark.parametrize("name, by_name", [
    ("gamma_sgnn", Composite(linear=Epsilon(), rules={"convs.0*": Gamma(3.0), "convs.1*": Gamma(1.5),
                                                      "convs.2*": Gamma(0.0)})),
    ("gamma_dig", Composite(linear=Gamma(1.0), rules={"convs.0*": Gamma(2.0)})),
    ("layered", Composite(linear=Epsilon(0.1), rules={"convs.0*": ZBox(), "convs.1*": Gamma(0.25),
                                                      "convs.2*": Gamma(0.25)})),
])
def test_depth_schedules_equal_the_same_rules_given_by_name(name, by_name):
    scheduled = _deep_explanation(rule=name)
    named = _deep_explanation(composite=by_name)
    torch.testing.assert_close(scheduled.node_relevance, named.node_relevance, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(scheduled.edge_relevance, named.edge_relevance, rtol=1e-12, atol=1e-12)
    plain = _deep_explanation(rule="epsilon")
    assert float((scheduled.node_relevance - plain.node_relevance).abs().max()) > 1e-3  # the schedule matters


def test_layers_reach_a_convs_submodules_and_count_message_passing_layers_only():
    from torch_geometric.nn import GINConv

    class GIN(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = nn.Linear(3, 4)
            self.convs = nn.ModuleList(GINConv(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)))
                                       for _ in range(2))
            self.head = nn.Linear(4, 1)

    net = GIN()
    mode = ForwardMode(Composite(linear=ZPlus(), layers=[Gamma(2.0), Gamma(1.0)]), net)
    assert mode.rule_for(net.convs[0].nn[0].weight) == Gamma(2.0)
    assert mode.rule_for(net.convs[0].nn[2].weight) == Gamma(2.0)
    assert mode.rule_for(net.convs[1].nn[0].weight) == Gamma(1.0)
    assert mode.rule_for(net.pre.weight) == ZPlus() and mode.rule_for(net.head.weight) == ZPlus()
    seen = []
    mode = ForwardMode(Composite(layers=lambda i, n: seen.append((i, n)) or Gamma(float(i))), net)
    assert mode.rule_for(net.convs[1].nn[2].weight) == Gamma(1.0) and (1, 2) in seen
    short = ForwardMode(Composite(linear=ZPlus(), layers=[Gamma(2.0)]), net)
    assert short.rule_for(net.convs[1].nn[0].weight) == ZPlus()  # past the sequence's end: ``linear``


def test_named_schedules_and_bad_layers():
    assert get_composite("gamma_sgnn").rule_for("c", nn.Linear(1, 1), (1, 3)) == Gamma(1.5)
    assert get_composite("gamma_sgnn").rule_for("c", nn.Linear(1, 1), (2, 3)) == Gamma(0.0)
    assert get_composite("gamma_sgnn").rule_for("head", nn.Linear(1, 1)) == Epsilon()
    assert get_composite("gamma_dig").rule_for("c", nn.Linear(1, 1), (0, 3)) == Gamma(2.0)
    assert get_composite("gamma_dig").rule_for("head", nn.Linear(1, 1)) == Gamma(1.0)
    assert get_composite("layered").rule_for("c", nn.Linear(1, 1), (0, 3)) == ZBox()
    with pytest.raises(TypeError, match="layers must be a sequence of rules or a function"):
        Composite(layers="gamma")
    with pytest.raises(ValueError, match="rule 'nope'"):
        Composite(layers=["nope"])


def test_the_key_is_equal_for_composites_built_alike_and_differs_otherwise():
    from lrp_lib.core.rules import Epsilon, Gamma, ZBox
    assert get_composite("zplus").key() == get_composite("zplus").key()
    assert get_composite("gamma_sgnn").key() == get_composite("gamma_sgnn").key()
    assert Composite(rules={"conv1.*": "gamma"}).key() == Composite(rules={"conv1.*": Gamma()}).key()
    assert hash(get_composite("layered").key()) is not None
    keys = [Composite().key(), Composite(linear=Epsilon(0.1)).key(), Composite(linear="gamma").key(),
            Composite(linear=Gamma(0.5)).key(), Composite(epsilon=0.0).key(), Composite(attention="uniform").key(),
            Composite(bias=False).key(), Composite(layers=["zplus"]).key(), Composite(rules={nn.Linear: "z"}).key(),
            Composite(rules={"lin": "z"}).key(), get_composite("zplus").key()]
    assert len(set(keys)) == len(keys)
    low = torch.zeros(3)
    assert Composite(linear=ZBox(low=low)).key() == Composite(linear=ZBox(low=low)).key()
    assert Composite(linear=ZBox(low=low)).key() != Composite(linear=ZBox(low=torch.zeros(3))).key()
