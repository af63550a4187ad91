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


def test_bias_false_sends_all_relevance_to_the_inputs():
    """Composite(bias=False): the biases take no share, so on a piecewise-linear model with biases the
    input relevance sums to the output (under the z rule) and equals the bias-free split by hand."""
    from torch_geometric.explain import Explainer

    from lrp_lib.explain import LRPExplainer

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
    assert float(keep.node_mask.sum() + keep.bias_relevance) == pytest.approx(out)
    assert abs(float(keep.bias_relevance)) > 1e-3
    assert float(drop.node_mask.sum()) == pytest.approx(out) and abs(float(drop.bias_relevance)) < 1e-12


def test_contrast_starts_from_the_class_against_the_others():
    from torch_geometric.explain import Explainer

    from lrp_lib.explain import LRPExplainer

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
    assert float(e.node_mask.sum()) == pytest.approx(float(z[c] - (z.sum() - z[c]) / 2))
    with pytest.raises(ValueError, match="explained must be"):
        LRPExplainer(explained="probability")
