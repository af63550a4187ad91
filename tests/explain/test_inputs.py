"""lrp_lib.explain.inputs: what the explainers accept, and the errors for what they do not."""
import pytest
import torch
from torch import nn
from torch_geometric.nn import GCNConv

from lrp_lib.explain.explainer import Explainer, LRPExplainer, UnsupportedModelError
from lrp_lib.explain.inputs import uncompiled
from lrp_lib.explain.tensors import explain_tensor
from lrp_lib.explain.walks import walk_relevance

CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(6, 8), GCNConv(8, 3)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _graph():
    g = torch.Generator().manual_seed(0)
    return torch.randn(20, 6, generator=g), torch.randint(0, 20, (2, 60), generator=g)


def _explain(model, mechanism, x, edge_index):
    return Explainer(model, algorithm=LRPExplainer(mechanism=mechanism), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object", model_config=CONFIG)(x, edge_index, index=4)


@pytest.mark.parametrize("mechanism", ["functions", "forward"])
def test_a_compiled_model_is_explained_as_the_model(mechanism):
    """torch.compile(model): the explanation is the uncompiled model's, edges included (a compiled program runs
    no message hooks: run as it is, its edges would get no relevance), and the model's training flag is restored
    as PyG's Explainer leaves it."""
    torch.manual_seed(0)
    model = GCN().eval()
    x, edge_index = _graph()
    compiled = torch.compile(model, backend="aot_eager")
    assert uncompiled(compiled) is model
    want, got = _explain(model, mechanism, x, edge_index), _explain(compiled, mechanism, x, edge_index)
    assert float(got.edge_mask.abs().sum()) > 0
    torch.testing.assert_close(got.node_mask, want.node_mask)
    torch.testing.assert_close(got.edge_mask, want.edge_mask)
    torch.testing.assert_close(got.bias_relevance, want.bias_relevance)
    j = int(edge_index[0, edge_index[1] == 4][0])
    walks = torch.tensor([[4, 4, 4], [j, 4, 4], [j, j, 4]])  # (GCN's self-loops are edges of every step)
    torch.testing.assert_close(walk_relevance(compiled, x, edge_index, walks, index=4, target=0),
                               walk_relevance(model, x, edge_index, walks, index=4, target=0))


def test_a_compiled_model_without_a_graph():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)).eval()
    x = torch.randn(4, 5)
    got = explain_tensor(torch.compile(mlp, backend="aot_eager"), x)
    torch.testing.assert_close(got.relevance, explain_tensor(mlp, x).relevance)


@pytest.mark.parametrize("how", ["torch.compile", "Module.compile"])
def test_a_submodule_compiled_in_place_is_refused_with_its_name(how):
    torch.manual_seed(0)
    model = GCN().eval()
    x, edge_index = _graph()
    if how == "torch.compile":
        model.conv1 = torch.compile(model.conv1, backend="aot_eager")
    else:
        model.conv1.compile(backend="aot_eager")
    with pytest.raises(UnsupportedModelError, match="submodule 'conv1' was compiled"):
        _explain(model, "forward", x, edge_index)
    with pytest.raises(UnsupportedModelError, match="submodule 'conv1' was compiled"):
        walk_relevance(model, x, edge_index, torch.tensor([[4, 4, 4]]), index=4, target=0)
