"""Models without a graph (lrp_lib.explain.tensors.explain_tensor): an MLP and a CNN with max and average pooling
against Captum's LRP (an independent implementation of the epsilon rule) and Zennit's (epsilon and z+), a
transformer block against the relevance primitives' values, with its relevance accounted, input times gradient
where LRP-0 equals it,
and the errors for bad input."""
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from lrp_lib.core.composites import get_composite
from lrp_lib.core.rules import Epsilon
from lrp_lib.explain.mode.function_mode import UnsupportedModelError
from lrp_lib.explain.tensors import explain_tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_primitive_reference as reference  # noqa: E402


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(12, 16), nn.Linear(16, 16), nn.Linear(16, 5)
        self.relu1, self.relu2 = nn.ReLU(), nn.ReLU()

    def forward(self, x):
        return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(2, 6, 3, padding=1), nn.Conv2d(6, 8, 3, padding=1)
        self.relu1, self.relu2 = nn.ReLU(), nn.ReLU()
        self.maxpool, self.avgpool = nn.MaxPool2d(2), nn.AvgPool2d(2)
        self.fc = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x):
        h = self.maxpool(self.relu1(self.conv1(x)))
        h = self.avgpool(self.relu2(self.conv2(h)))
        return self.fc(h.flatten(1))


def _captum(model, x, target):
    captum_lrp = pytest.importorskip("captum.attr").LRP
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # captum's notes about hooks
        return captum_lrp(model).attribute(x.clone().requires_grad_(True), target=target).detach()


@pytest.mark.parametrize("net,shape", [(MLP, (6, 12)), (CNN, (5, 2, 8, 8))], ids=["mlp", "cnn"])
def test_equals_captum_lrp_epsilon(net, shape):
    """Captum's LRP: the epsilon rule with eps = 1e-9 on linear maps, convolutions and average pooling, the
    maximum's winner taking a max pool's relevance, the bias inside z, from the target's logit.  (Captum applies
    the epsilon rule to the max pool as well, so its winner gets R z / (z + eps): up to eps / z less, a few 1e-6
    of the relevance where a pooled value is small; lrp_lib passes all of it.)"""
    torch.manual_seed(0)
    model = net().double().eval()
    x = torch.rand(*shape, dtype=torch.float64)
    target = torch.arange(shape[0]) % 4
    got = explain_tensor(model, x, target, rule=Epsilon(1e-9))
    want = _captum(model, x, target)
    torch.testing.assert_close(got.relevance, want, rtol=1e-5, atol=1e-8)
    assert float(want.abs().sum()) > 0.1
    logits = model(x).gather(1, target[:, None]).squeeze(1).detach()
    torch.testing.assert_close(got.explained, logits)
    total = float(got.relevance.sum()) + got.bias_relevance + got.relevance_residual
    assert total == pytest.approx(float(logits.sum()), rel=1e-9)


@pytest.fixture
def zennit(monkeypatch):
    """Zennit (requirements-nodeps.txt).  Its package imports torchvision's ResNet blocks (for its ResNet
    canonizers, not used here) and torchvision is not installed (PyPI offers it only with a newer torch): while
    Zennit is imported, two empty classes stand for those blocks, and the stand-in is gone after the test."""
    if "zennit" not in sys.modules and "torchvision" not in sys.modules:
        tv, models, resnet = (types.ModuleType(n) for n in ("torchvision", "torchvision.models",
                                                            "torchvision.models.resnet"))
        resnet.Bottleneck = type("Bottleneck", (nn.Module,), {})
        resnet.BasicBlock = type("BasicBlock", (nn.Module,), {})
        tv.models, models.resnet = models, resnet
        for name, module in (("torchvision", tv), ("torchvision.models", models),
                             ("torchvision.models.resnet", resnet)):
            monkeypatch.setitem(sys.modules, name, module)
    return pytest.importorskip("zennit")


@pytest.mark.parametrize("rule", ["epsilon", "zplus"])
@pytest.mark.parametrize("net,shape", [(MLP, (6, 12)), (CNN, (5, 2, 8, 8))], ids=["mlp", "cnn"])
def test_equals_zennit(zennit, net, shape, rule):
    """Zennit's Epsilon(1e-6) and ZPlus on every linear map and convolution, Norm on the average pool (the
    proportional split), the max pool passing the gradient to its winner, from the target's logit: the same
    relevance, with signed inputs (Zennit's ZPlus without its stabiliser, as lrp_lib's z+ has none).  (Its
    Gamma is the generalised rule, which puts gamma on the negative weights of a negative output; lrp_lib's
    Gamma is the rule of its docstring, gamma on the positive weights.)"""
    from zennit.attribution import Gradient
    from zennit.composites import LayerMapComposite
    from zennit.rules import Epsilon as ZennitEpsilon, Norm, ZPlus as ZennitZPlus
    torch.manual_seed(0)
    model = net().double().eval()
    x = torch.randn(*shape, dtype=torch.float64)
    target = torch.arange(shape[0]) % 4
    # (z+ without Zennit's stabiliser, as lrp_lib's: the positive contributions' sum itself, 1 where it is 0)
    zennit_rule = ZennitEpsilon(1e-6) if rule == "epsilon" else ZennitZPlus(stabilizer=lambda z: z.where(z != 0, 1.0))
    composite = LayerMapComposite([(nn.Linear, zennit_rule), (nn.Conv2d, zennit_rule), (nn.AvgPool2d, Norm())])
    with Gradient(model, composite) as attributor:
        _, want = attributor(x, lambda out: torch.zeros_like(out).scatter(1, target[:, None],
                                                                          out.gather(1, target[:, None])))
    got = explain_tensor(model, x, target, rule=rule)
    assert float(want.abs().sum()) > 1e-3
    torch.testing.assert_close(got.relevance, want, rtol=1e-9, atol=1e-14)


def test_lrp0_of_a_bias_free_relu_network_is_input_times_gradient():
    torch.manual_seed(1)
    model = CNN().double().eval()
    for m in model.modules():
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
    x = torch.randn(3, 2, 8, 8, dtype=torch.float64)
    got = explain_tensor(model, x, 2, rule="z")
    leaf = x.clone().requires_grad_(True)
    model(leaf)[:, 2].sum().backward()
    torch.testing.assert_close(got.relevance, leaf * leaf.grad, rtol=1e-10, atol=1e-12)
    assert abs(got.relevance_residual) < 1e-10 and abs(got.bias_relevance) < 1e-10


@pytest.mark.parametrize("rule", ["epsilon", "zplus"])
def test_a_transformer_block_gives_the_primitives_relevance(rule):
    """nn.TransformerEncoderLayer (attention written out: the softmax by AttnLRP's rule, the attention weights
    held constant, layer norm by the identity through the normalisation): the forward rules give the relevance
    the relevance primitives gave (written down before they were removed: make_primitive_reference.py), and
    relevance, kept amounts and residual add up to the explained value."""
    want = torch.load(reference.PATH, weights_only=True)["transformer"][rule]
    got = reference.transformer(rule)
    assert float(want["relevance"].abs().sum()) > 0.1
    torch.testing.assert_close(got.relevance, want["relevance"], rtol=1e-9, atol=1e-12)
    assert got.bias_relevance == pytest.approx(want["bias_relevance"], abs=1e-9)
    torch.testing.assert_close(got.explained, want["explained"])
    total = float(got.relevance.sum()) + got.bias_relevance + got.relevance_residual
    assert total == pytest.approx(float(got.explained.sum()), rel=1e-9)


def test_an_output_that_is_not_per_class_is_explained_as_it_is():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1), nn.Flatten(0)).double().eval()
    x = torch.rand(5, 4, dtype=torch.float64)
    got = explain_tensor(model, x)
    torch.testing.assert_close(got.explained, model(x).detach())
    with pytest.raises(ValueError, match="target is for an output of shape \\(N, C\\).*pass target=None"):
        explain_tensor(model, x, target=0)


def test_bad_input_names_the_argument():
    model = MLP().eval()
    x = torch.rand(2, 12)
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got torch.int64"):
        explain_tensor(model, torch.ones(2, 12, dtype=torch.long))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        explain_tensor(lambda t: t, x)
    with pytest.raises(ValueError, match=r"x contains 1 NaN and 0 Inf value\(s\) \(the first at \(1, 2\)\)"):
        explain_tensor(model, torch.where(torch.arange(24).view(2, 12) == 14, float("nan"), x))
    with pytest.raises(ValueError, match=r"target holds labels outside \[0, 4\]"):
        explain_tensor(model, x, torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="one label per row of the output \\(2\\), got 3"):
        explain_tensor(model, x, torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="target must be an int or an integer tensor"):
        explain_tensor(model, x, torch.tensor([0.0, 1.0]))
    with pytest.raises(UnsupportedModelError, match="in training mode"):
        explain_tensor(nn.Sequential(nn.Linear(12, 5), nn.Dropout(0.5)).train(), x)
    with pytest.raises(ValueError, match="pass either rule or composite, not both"):
        explain_tensor(model, x, rule="z", composite=get_composite("epsilon"))

    class Detached(nn.Module):
        def forward(self, t):
            return model(t).detach()

    with pytest.raises(ValueError, match="does not depend on x through autograd"):
        explain_tensor(Detached(), x)

    class Sorted(nn.Module):
        def forward(self, t):
            return torch.special.erfcx(t)

    with pytest.raises(UnsupportedModelError, match="erfcx.*magnitude"):
        explain_tensor(nn.Sequential(MLP(), Sorted()).eval(), x)


class _DetachedHalf(nn.Module):
    """A bias-free ReLU network whose second layer reads half of its hidden units through a detach."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 6, bias=False), nn.Linear(6, 3, bias=False)

    def forward(self, x):
        h = self.a(x).relu()
        return self.b(torch.cat([h[:, :3], h.detach()[:, 3:]], 1))


def test_relevance_lost_at_a_detach_is_reported_with_its_amount_and_nan_is_refused():
    """What the detached half carries does not reach x: the residual, with a LostRelevanceWarning giving its amount
    (LRP-0 reference: the output of the half that is not detached); NaN weights are refused, not explained."""
    from lrp_lib.explain.accounting import LostRelevanceWarning

    torch.manual_seed(0)
    model, x = _DetachedHalf().double().eval(), torch.rand(5, 4, dtype=torch.float64)
    out = model(x).detach()
    target = out.argmax(1)
    h = model.a(x).relu().detach()
    reached = float((h[:, :3] @ model.b.weight[:, :3].detach().t()).gather(1, target.view(-1, 1)).sum())
    lost = float(out.gather(1, target.view(-1, 1)).sum()) - reached
    assert abs(lost) > 1e-3
    with pytest.warns(LostRelevanceWarning, match=rf"relevance {lost:.4g} "):
        got = explain_tensor(model, x, rule="z")
    assert got.relevance_residual == pytest.approx(lost, rel=1e-9)
    assert float(got.relevance.sum()) == pytest.approx(reached, rel=1e-9)
    with torch.no_grad():
        model.b.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="the relevance is NaN or Inf"):
        explain_tensor(model, x, rule="z")
