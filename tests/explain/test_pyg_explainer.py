"""``lrp_lib.Explainer`` (:mod:`lrp_lib.explain.pyg_explainer`): PyG's ``Explainer`` with the inputs
checked before its prediction pass, the training flag restored after a failure, and ``one_pass``;
one class under its three import paths."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.explain import Explainer as PyGExplainer
from torch_geometric.nn import GCNConv

import lrp_lib
from lrp_lib.explain import explainer as explainer_module
from lrp_lib.explain.explainer import LRPExplainer
from lrp_lib.explain.pyg_explainer import Explainer

CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.lin = GCNConv(3, 8), nn.Linear(8, 2)

    def forward(self, x, edge_index):
        return self.lin(F.relu(self.conv(x, edge_index)))


def graph():
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, 3, generator=g), torch.randint(0, 6, (2, 14), generator=g)


def test_one_class_under_its_three_import_paths():
    assert lrp_lib.Explainer is Explainer is explainer_module.Explainer
    assert issubclass(Explainer, PyGExplainer)


def test_a_bad_input_is_named_before_the_prediction_pass():
    model, (x, ei) = Net().eval(), graph()
    ex = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                   model_config=CONFIG)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(IndexError, match="edge_index refers to nodes 0..9 but the graph has 6 nodes"):
        ex(x, torch.tensor([[0, 1], [2, 9]]), index=0)  # node 9 of 6
    assert not calls  # refused before PyG's prediction pass ran the model


def test_the_training_flag_is_restored_when_the_explanation_fails():
    model, (x, ei) = Net().train(), graph()
    ex = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                   model_config=CONFIG)
    with pytest.raises(IndexError, match=r"index selects rows 99..99 but the model gives 6 output row"):
        ex(x, ei, index=99)
    assert model.training


def test_one_pass_gives_the_same_explanation_with_one_forward_fewer():
    model, (x, ei) = Net().eval(), graph()

    def make(one_pass):
        return Explainer(model, algorithm=LRPExplainer(replay=False), explanation_type="model",
                         node_mask_type="attributes", edge_mask_type="object", model_config=CONFIG,
                         one_pass=one_pass)
    forwards = []
    hook = model.register_forward_hook(lambda *a: forwards.append(1))
    two = make(False)(x, ei, index=2)
    n_two = len(forwards)
    one = make(True)(x, ei, index=2)
    hook.remove()
    assert len(forwards) - n_two == n_two - 1  # one forward fewer
    assert torch.equal(one.node_relevance, two.node_relevance) and torch.equal(one.edge_mask, two.edge_mask)
    torch.testing.assert_close(one.prediction, two.prediction)
    with pytest.raises(TypeError, match="one_pass must be None, True or False"):
        make("yes")
    assert make(None).one_pass is None


def test_a_composite_naming_one_layer_leaves_the_others_on_the_default_rule():
    """LRPExplainer(composite=Composite(rules={"conv1.*": "gamma"})): conv2 keeps z+ (the default), as with
    the default named; with epsilon named for the rest, the relevance differs.  The explainer's repr lists the
    rule of every weight."""
    from lrp_lib.core.composites import Composite

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(4, 8), GCNConv(8, 3)

        def forward(self, x, edge_index):
            return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)
    torch.manual_seed(0)
    model = GCN().eval()
    g = torch.Generator().manual_seed(1)
    x, edge_index = torch.randn(12, 4, generator=g), torch.randint(0, 12, (2, 40), generator=g)

    def explain(composite):
        explainer = Explainer(model, algorithm=LRPExplainer(composite=composite), explanation_type="model",
                              node_mask_type="attributes", model_config=CONFIG)
        return explainer, explainer(x, edge_index, index=3).node_relevance
    explainer, got = explain(Composite(rules={"conv1.*": "gamma"}))
    torch.testing.assert_close(got, explain(Composite(linear="zplus", rules={"conv1.*": "gamma"}))[1], rtol=0, atol=0)
    assert not torch.allclose(got, explain(Composite(linear="epsilon", rules={"conv1.*": "gamma"}))[1])
    text = repr(explainer)
    assert "rule=ZPlus()" in text and "'conv1.lin': Gamma(gamma=0.25" in text and "'conv2.lin': ZPlus()" in text
