"""Composites: which rule each weight gets, and the named composites."""
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv

from lrp_lib.composites import Composite, get_composite
from lrp_lib.function_mode import RelevanceMode
from lrp_lib.rules import Epsilon, Gamma, ZPlus


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
    mode = RelevanceMode(c, net)
    assert mode.rule_for(net.conv1.lin.weight)[0] == Gamma(0.5)
    assert mode.rule_for(net.head.weight)[0] == ZPlus()
    assert mode.rule_for(net.conv2.lin.weight)[0] == Epsilon()
    assert mode.rule_for(net.head.weight.t())[0] == ZPlus()  # a view of a weight is that weight
    assert mode.rule_for(torch.ones(2, 2))[0] is None          # data, not a weight


def test_named_composites():
    assert get_composite("z").linear == Epsilon(0.0) and get_composite("z").epsilon == 0.0
    assert get_composite("gamma").linear == Gamma()
    assert get_composite(Epsilon(0.1)).epsilon == 0.1
    c = Composite()
    assert get_composite(c) is c and c.attention == "cp"


def test_bad_composites_are_refused_naming_the_argument():
    with pytest.raises(TypeError, match="rules keys"):
        Composite(rules={3: "epsilon"})
    with pytest.raises(ValueError, match="attention"):
        Composite(attention="softmax")
    with pytest.raises(ValueError, match="rule 'nope'"):
        Composite(linear="nope")
    with pytest.raises(ValueError, match="epsilon"):
        Composite(epsilon=-1.0)
