# %% [markdown]
# # Convolutions and skip connections
#
# The first chapter gave every operation an autograd function whose backward is an LRP rule, and
# wrote the rule for a dense layer as a division and one matrix product in the backward. Image networks and most graph networks
# are made of other linear maps too: convolutions, pooling, and the identity paths of residual
# networks {cite}`he2016resnet`. Writing a new autograd function for each would be tedious and
# error-prone. This chapter shows that **one** function is enough for every linear map, because
# the LRP rules only ever need the map itself and its vector-Jacobian product (VJP), which autograd
# already knows how to compute for any layer. It then turns to skip connections, where the most
# natural code, a plain `+`, silently counts relevance twice.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes you have read "Hijacking autograd for LRP" and know what a 2-D convolution
# computes. After reading it you should be able to
# - say what the gradient of a convolution with respect to its input is, and why the LRP rules for
#   a convolution need nothing more;
# - state the epsilon, gamma, alpha-beta and z+ rules and compute them with one VJP each, for any
#   linear map (the rules in `lrp_lib.core.rules`, applied by `lrp_lib.teach.linear_maps`);
# - explain why a plain `+` on a skip connection double counts relevance and fix it with `ops.add`;
# - explain a residual CNN trained on handwritten digits and read the heatmaps of different rules;
# - check an LRP implementation against Captum, knowing Captum's conventions.
# ```

# %% tags=["hide-input"]
import random
import textwrap
import warnings

import matplotlib.pyplot as plt
from IPython.display import Markdown, display
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lrp_lib.teach import ops
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.book.plotting import BOOK_WIDTH, book_style
from lrp_lib.book.pretrained import load_or_train
from lrp_lib.teach.residual import ResidualBlock

warnings.filterwarnings(
    "ignore", message="IProgress not found"
)  # tqdm.auto without ipywidgets
from tqdm.auto import trange  # noqa: E402  (progress bar when retraining)

with (
    warnings.catch_warnings()
):  # captum imports tqdm.auto, which warns without ipywidgets
    warnings.simplefilter("ignore")
    from captum.attr import LRP
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
torch.set_num_threads(
    1
)  # the layers here are tiny: threads only add overhead (and make runs differ)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
book_style()


def show(t, decimals=4):
    """A tensor as a rounded numpy array (on the CPU, without grad)."""
    return (
        np.round(t.detach().cpu().double().numpy(), decimals) + 0.0
    )  # + 0.0 turns -0.0 into 0.0


# %% [markdown]
# ## The gradient in a convolution
#
# A 2-D convolution with kernel $w$ (stride 1, padding $p$) computes
#
# $$ z_{o,\,u,v} = \sum_{c} \sum_{a,b} x_{c,\,u+a-p,\,v+b-p}\; w_{o,c,a,b} + b_o . $$
#
# Every output is a sum of *contributions* $x \cdot w$, exactly like a dense layer; the only
# difference is that each weight is shared by all positions and each input feeds only the outputs
# whose window covers it. Its gradients follow: $\partial L/\partial w$ sums, over all positions,
# input times output gradient, and $\partial L/\partial x$ is a *transposed* convolution of the
# output gradient with the kernel (flipped). Here with the set-up of the original notebook
# (*Gradient in conv, LRP in backward, skip connection emulation*, see the introduction): a 4x4 input of ones, a
# random 3x3 kernel, padding 1, and an output gradient of ones.

# %%
x = torch.ones(1, 1, 4, 4, device=device, requires_grad=True)
w = torch.rand(1, 1, 3, 3, device=device, requires_grad=True)
c = F.conv2d(x, w, padding=1)
c.backward(torch.ones_like(c))
print("w grad (how many windows each kernel entry sees):\n", show(w.grad))
print("x grad (sum of the kernel entries that touch each pixel):\n", show(x.grad))
# the input gradient: the kernel behind the backward of a convolution, callable alone
same = torch.nn.grad.conv2d_input(x.shape, w.detach(), torch.ones_like(c), padding=1)
print("equals torch.nn.grad.conv2d_input:", torch.allclose(same, x.grad))

# %% [markdown]
# With an input of ones, the weight gradient only counts windows: the corner kernel entries meet
# the image in 9 of the 16 positions, the centre in all 16. The input gradient of a corner pixel
# sums the 4 kernel entries that reach it.
#
# That input gradient is the vector-Jacobian product $J^\top v$ of the convolution, and it is all
# LRP needs. For any linear map $z = Jx + b$ the proportional rule gives input $j$ the share
#
# $$ R_j = \sum_k \frac{x_j J_{kj}}{z_k} R_k = x_j \left[ J^\top \frac{R}{z} \right]_j , $$
#
# one element-wise division, **one VJP**, one element-wise product. Nothing of the size
# inputs $\times$ outputs is ever built, and the memory is that of the input and the output.
#
# ## The z-rule in backward
#
# The original notebook wrote this rule as an autograd function that takes the layer as an argument. Its
# backward recomputes the forward with autograd switched on and backpropagates $R/z$ through it,
# which computes the VJP. We rebuild it here, because it is the whole idea in ten lines.

# %%
class ZRuleFunction(torch.autograd.Function):
    """The original notebook's generic z-rule: forward is ``func(input, *args)``,
    backward is
    ``x * J^T (R / z)``, the VJP taken by autograd on a recomputed forward."""

    @staticmethod
    def forward(ctx, func, input, *args):
        ctx.func, ctx.args = func, args
        ctx.save_for_backward(input)
        return func(input, *args)

    @staticmethod
    def backward(ctx, rel_out):
        (input,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = input.detach().requires_grad_(True)
            z = ctx.func(leaf, *ctx.args)                     # the forward, a second time
            (vjp,) = torch.autograd.grad(z, leaf, rel_out / z)  # J^T (R / z)
        return (None, leaf.detach() * vjp) + (None,) * len(ctx.args)


x = (
    torch.tensor([[-1.0, -1.0, 1.0, 1.0]] * 4, device=device)
    .view(1, 1, 4, 4)
    .requires_grad_()
)
w = torch.ones(1, 1, 3, 3, device=device)
f = ZRuleFunction.apply(F.conv2d, x, w, None, 1, 1)
print("f:\n", show(f))
f.sum().backward()  # R = 1 for every output
print("x relevance:\n", show(x.grad))
print("total:", round(float(x.grad.sum()), 4), "= number of outputs:", f.numel())

# %% [markdown]
# The numbers are the original notebook's: the corner pixel feeds the outputs $-4, -2, -6, -3$ with
# contribution $-1$ each, so it receives $\frac{-1}{-4} + \frac{-1}{-2} + \frac{-1}{-6} +
# \frac{-1}{-3} = 1.25$. The relevance is all positive although half the pixels are negative:
# each negative pixel is responsible for a negative output with the same sign, and the rule
# hands relevance in proportion to that responsibility. The 16 units of relevance are conserved.
#
# `lrp_lib.teach.linear_maps.conv2d` does the same with torch's argument conventions, and more cheaply: it
# keeps the output of the forward (no second forward) and calls the convolution's input-gradient
# kernel directly for the VJP. The result is the same.

# %%
x2 = x.detach().clone().requires_grad_()
f2 = linear_maps.conv2d(x2, w, padding=1, rule="z")
f2.sum().backward()
print(
    "same output:",
    torch.equal(f2, f),
    " same relevance:",
    torch.allclose(x2.grad, x.grad),
)

# %% [markdown]
# ## Rules for any linear map
#
# Different rules pick different contributions to split by. Writing $t^+ = \max(t, 0)$,
# $t^- = \min(t, 0)$ and $z_k$ for the output (bias included) {cite}`montavon2019lrp,bach2015pixel`:
#
# | rule | `lrp_lib.core.rules` | $R_j = \sum_k \ldots R_k$ |
# | --- | --- | --- |
# | epsilon (z-rule for $\epsilon = 0$) | `Epsilon(eps)`, `"epsilon"`, `"z"` | $\dfrac{x_j w_{jk}}{z_k + \epsilon\,\mathrm{sign}(z_k)}$ |
# | gamma | `Gamma(gamma, eps)`, `"gamma"` | $\dfrac{x_j (w_{jk} + \gamma w_{jk}^+)}{\sum_{j'} x_{j'} (w_{j'k} + \gamma w_{j'k}^+) + b_k + \gamma b_k^+}$ |
# | alpha-beta, $\alpha - \beta = 1$ | `AlphaBeta(alpha, beta)`, `"alpha2beta1"` | $\alpha \dfrac{(x_j w_{jk})^+}{z_k^+} - \beta \dfrac{(x_j w_{jk})^-}{z_k^-}$ |
# | z+ | `ZPlus()`, `"zplus"` | $\dfrac{(x_j w_{jk})^+}{z_k^+}$ |
#
# with $z_k^\pm = \sum_j (x_j w_{jk})^\pm + b_k^\pm$ (the bias is the contribution of a constant
# input 1). Each is one VJP: epsilon uses the saved output; gamma runs the map once with the
# weights $w + \gamma w^+$ to get its denominator and takes that map's VJP; z+ and alpha-beta use
# $(xw)^+ = x^+ w^+ + x^- w^-$, so each part is the same map applied to clamped inputs and
# weights (one term only when $x \ge 0$, as after a ReLU) {cite}`montavon2017dtd`.
#
# On that example the rules disagree in an instructive way. z+ only follows positive
# contributions: with a kernel of ones those come from the positive pixels, so the negative half of
# the image gets nothing. Alpha-beta adds back the negative contributions with a negative sign.

# %%
for rule in [rules.Epsilon(0.0), rules.ZPlus(), rules.AlphaBeta(2, 1)]:
    xr = x.detach().clone().requires_grad_()
    out = linear_maps.conv2d(xr, w, padding=1, rule=rule)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out.sum().backward()
    print(
        f"{rule!r}: first row {show(xr.grad[0, 0, 0], 3)}, total"
        f" {float(xr.grad.sum()):.3f}"
    )
    for warning in caught:
        print(
            textwrap.fill(
                f"warning: {warning.message}",
                90,
                initial_indent="   ",
                subsequent_indent="     ",
            )
        )

# %% [markdown]
# The outputs of the first column ($-4, -6, -6, -4$) are made of negative contributions only: z+
# has nothing to split them by. `ZPlus` then falls back to the z-rule for those outputs alone, so
# their 4 units of relevance go to the negative pixels that made them and the total stays 16 (the
# first two pixels of the first row get relevance only through that fallback). Alpha-beta, as
# defined, has no such fallback: it loses the same 4 units in its positive part (with a warning)
# and, for the outputs of the last column, which have no negative contribution, its negative part:
# $2 \cdot 12 - 1 \cdot 12 = 12$.
# These rules are meant for layers that see both signs of weights, after a ReLU; the conservation
# tests run them on such layers.
#
# The same function serves every linear map: `linear_maps.linear`, `linear_maps.conv1d`, `linear_maps.conv2d`
# (with stride, padding, dilation, groups), `linear_maps.conv3d`, `linear_maps.avg_pool2d`, and
# `linear_maps.linear_map(x, fn, ...)` for a map you only have as a function (autograd then takes the VJP
# by rerunning `fn`). The tests check each rule on each map against the rule's definition written
# out contribution by contribution.
#
# ## Skip connections
#
# A residual block computes $y = x + g(x)$. The original notebook emulated one with the z-rule convolution as
# the branch $g$, an input of ones and a kernel of ones, and backpropagated $R = 1$ per output,
# once with the skip and once without:

# %%
w = torch.ones(1, 1, 3, 3, device=device)
for label, with_skip in [("branch only  g(x)", False), ("plain  g(x) + x", True)]:
    x = torch.ones(1, 1, 4, 4, device=device, requires_grad=True)
    g = linear_maps.conv2d(x, w, padding=1, rule="z")
    (g + x if with_skip else g).backward(torch.ones(1, 1, 4, 4, device=device))
    print(
        f"{label}: corner {float(x.grad[0, 0, 0, 0]):.4f}, total"
        f" {float(x.grad.sum()):.4f} (R given: 16)"
    )

# %% [markdown]
# With the plain `+`, the corner pixel gets $1.6944 = 0.6944 + 1$: its full relevance through the
# branch **and** one more unit through the skip. The gradient of a sum is 1 with respect to each
# term, so autograd hands the *whole* $R$ to both paths; the total doubles from 16 to 32. This is
# right for a gradient and wrong for relevance. `ops.add` splits $R$ between the two terms in
# proportion to their values, $R_g = \frac{g}{g + x} R$ and $R_x = \frac{x}{g + x} R$:

# %%
x = torch.ones(1, 1, 4, 4, device=device, requires_grad=True)
y = ops.add(linear_maps.conv2d(x, w, padding=1, rule="z"), x)
y.backward(torch.ones_like(y))
print("with ops.add:\n", show(x.grad), "\ntotal", round(float(x.grad.sum()), 4))

# %% [markdown]
# The total is 16 again. The corner pixel's output is $4 + 1 = 5$: it keeps $1/5$ through the skip
# and its branch share is split by the z-rule as before. The rule for users is short: **write every
# skip connection as `ops.add(branch, skip)`**. `lrp_lib.teach.residual.ResidualBlock` does so: `block(x)`
# is the ordinary block $\mathrm{relu}(x + \mathrm{conv}_2(\mathrm{relu}(\mathrm{conv}_1(x))))$ for
# training, and `block(x, rule=...)` the same weights through relevance ops.
#
# ## A residual CNN on handwritten digits
#
# Scikit-learn ships the UCI handwritten digits {cite}`alpaydin1998digits`: 1,797 grey images of
# 8x8 pixels (no download). We scale the pixels to $[0, 1]$, hold out a quarter for testing, and
# train a small residual network: a 3x3 convolution to 24 channels, a residual block at 8x8,
# average pooling to 4x4, a second residual block, global average pooling and a dense layer.

# %% tags=["train"]
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

digits = load_digits()
images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
labels = torch.tensor(digits.target)
x_train, x_test, y_train, y_test = train_test_split(
    images, labels, test_size=0.25, random_state=0, stratify=labels
)
print("train", tuple(x_train.shape), " test", tuple(x_test.shape))


class ResidualCNN(nn.Module):
    """stem conv -> residual block (8x8) -> avg pool -> residual block (4x4)
    -> global avg pool -> dense.

    ``forward(x)`` is the ordinary network.  ``forward(x, rule)`` runs the same weights
    through
    relevance ops: ``rule`` for every convolution, the epsilon rule for pooling and the
    dense layer.
    """

    def __init__(self, channels=24, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(1, channels, 3, padding=1)
        self.block1, self.block2 = ResidualBlock(channels), ResidualBlock(channels)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x, rule=None):
        if rule is None:
            h = self.block1(torch.relu(self.stem(x)))
            h = self.block2(F.avg_pool2d(h, 2))
            return self.fc(F.avg_pool2d(h, 4).flatten(1))
        eps = rules.Epsilon(1e-6)
        h = ops.relu(
            linear_maps.conv2d(x, self.stem.weight, self.stem.bias, padding=1, rule=rule)
        )
        h = self.block1(h, rule=rule)
        h = self.block2(linear_maps.avg_pool2d(h, 2, rule=eps), rule=rule)
        return linear_maps.linear(
            linear_maps.avg_pool2d(h, 4, rule=eps).flatten(1),
            self.fc.weight,
            self.fc.bias,
            rule=eps,
        )


def train_cnn(model, epochs=20, batch=32):
    """Adam with a one-cycle learning rate, mini-batches of 32 in a seeded order."""
    steps = epochs * ((len(x_train) + batch - 1) // batch)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=steps)
    order = torch.Generator().manual_seed(0)
    for epoch in trange(epochs, desc="training"):
        model.train()
        perm = torch.randperm(len(x_train), generator=order)
        total = 0.0
        for i in range(0, len(x_train), batch):
            idx = perm[i:i + batch]
            loss = F.cross_entropy(
                model(x_train[idx].to(device)), y_train[idx].to(device)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            total += float(loss) * len(idx)
    return {
        "metrics": {
            "last_epoch_train_loss": total / len(x_train),
            "test_accuracy": test_accuracy(model),
        }
    }


def test_accuracy(model):
    model.eval()
    with torch.no_grad():
        return float((model(x_test.to(device)).argmax(1).cpu() == y_test).float().mean())


torch.manual_seed(0)
model = ResidualCNN().to(device)
record = load_or_train("digits-residual-cnn", model, train_cnn)
print(
    f"training loss in the last epoch: {record['metrics']['last_epoch_train_loss']:.3f} "
    f"({record['source']} weights)"
)
accuracy = test_accuracy(model)
print(f"test accuracy: {accuracy:.2f}  (at least 0.95: {accuracy >= 0.95})")

# %% [markdown]
# The relevance version of the network computes the same function; only its backward differs.

# %%
with torch.no_grad():
    same = torch.allclose(
        model(x_test.to(device), rule="epsilon"), model(x_test.to(device)), atol=1e-5
    )
print("relevance network gives the same logits:", same)

# %% [markdown]
# ## Heatmaps
#
# We explain the predicted class of a few test digits: the relevance starts as the predicted logit
# on its own output, $R = z_c$ (zero for the other classes), and runs back to the pixels. Beside the
# three rules we show the plain gradient of the logit and gradient $\times$ input. Red is positive
# evidence for the class, blue negative; each map is divided by its own largest absolute value, so
# that all share one colour scale from $-1$ to $1$.

# %%
def explain(model, x, rule):
    """Pixel relevance of the predicted class under ``rule`` (None: the gradient)."""
    leaf = x.clone().to(device).requires_grad_(True)
    out = model(leaf, rule=rule)
    target = out.argmax(1)
    if rule is None:  # the gradient of the predicted logit
        out.gather(1, target[:, None]).sum().backward()
    else:             # relevance: start from the predicted logit itself
        out.backward(out.detach() * F.one_hot(target, out.shape[1]))
    return (
        leaf.grad.detach().cpu(),
        out.detach().gather(1, target[:, None]).squeeze(1).cpu(),
        target.cpu(),
    )


sample = x_test[[0, 1, 3, 7, 12, 20]]
maps = {}
gradient, logit, predicted = explain(model, sample, None)
maps["gradient"] = gradient
maps["gradient x input"] = gradient * sample
for name, rule in [
    ("epsilon", rules.Epsilon(1e-6)),
    ("gamma (0.25)", rules.Gamma(0.25)),
    ("z+", rules.ZPlus()),
]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        maps[name], _, _ = explain(model, sample, rule)
    for warning in caught:
        print(textwrap.fill(f"{name}: {warning.message}", 90, subsequent_indent="    "))
print("predicted:", predicted.tolist(), " true:", y_test[[0, 1, 3, 7, 12, 20]].tolist())

# %% tags=["hide-input"]
shown = range(
    4
)  # the first four digits of the sample; each map scaled by its own largest |value|
fig, axes = plt.subplots(
    len(shown),
    len(maps) + 1,
    figsize=(BOOK_WIDTH, 1.3 * len(shown) + 0.9),
    gridspec_kw={"hspace": 0.08, "wspace": 0.06},
)
for i in shown:
    axes[i, 0].imshow(sample[i, 0], cmap="gray_r")
    axes[i, 0].set_ylabel(f"predicted {int(predicted[i])}")
    for j, (name, m) in enumerate(maps.items(), start=1):
        limit = float(m[i].abs().max()) or 1.0
        image = axes[i, j].imshow(m[i, 0] / limit, cmap="bwr", vmin=-1, vmax=1)
        if i == 0:  # two short lines, so that neighbouring titles do not overlap
            axes[i, j].set_title(
                name.replace(" x ", "\nx ").replace(" (", "\n("), fontsize=9
            )
axes[0, 0].set_title("digit", fontsize=9)
for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
bar = fig.colorbar(
    image, ax=axes[:, 1:], orientation="horizontal", fraction=0.05, pad=0.03, aspect=40
)
bar.set_label("pixel relevance of the predicted logit (gradient: its derivative),\n"
              "divided by the largest |value| of its map")
plt.show()

# %% [markdown]
# What the maps show:
#
# - **The gradient** is nonzero on blank pixels as much as on ink: it says where a change of the
#   input *would* change the logit, not what the present strokes contribute. Gradient $\times$ input
#   keeps only the inked pixels, but inherits the gradient's noisy signs.
# - **Epsilon** is the relevance closest to gradient $\times$ input (for a network of ReLUs and linear
#   maps with $\epsilon = 0$ and no biases they coincide), hence also signed and fragmented.
# - **Gamma** favours positive contributions at every convolution: the maps become smoother and
#   mostly positive, concentrated on the strokes that make the digit what it is.
# - **z+** follows positive contributions only in the convolutions: all relevance on the strokes is
#   positive, and blank pixels (input 0) get exactly nothing, since a pixel's share is proportional
#   to its value.
#
# Every map assigns no relevance to blank pixels except the gradient's: the LRP rules multiply by
# the input. How much of the logit reaches the pixels? The biases take their shares on the way:

# %%
for name in ["epsilon", "gamma (0.25)", "z+"]:
    ratio = maps[name].sum((1, 2, 3)) / logit
    print(f"{name:13s} pixel relevance / logit: {show(ratio, 2)}")

# %% [markdown]
# The ratios differ from 1 because every convolution and the dense layer have a bias, whose share
# of each output leaves the explanation (a negative bias share makes the pixels' total larger); for a bias-free network the tests check that the sum is
# exactly the logit for the z, gamma, z+ and alpha-beta rules, residual blocks included.
#
# ## Cross-check against Captum
#
# Captum {cite}`kokhlikyan2020captum` implements LRP with module hooks. Reading its source
# (`captum/attr/_core/lrp.py` and `captum/attr/_utils/lrp_rules.py`) gives its conventions:
#
# - the epsilon rule (`EpsilonRule`, the default for `Conv2d`, `Linear`, `AvgPool2d`) divides the
#   output relevance by $z + \epsilon\,\mathrm{sign}(z)$ with $\epsilon = 10^{-9}$ and
#   $\mathrm{sign}(0) = 1$, where $z$ is the layer's **output including the bias**, then multiplies
#   the VJP by the layer's input: our `Epsilon(1e-9)`, bias treated the same way;
# - it starts from relevance 1 on the target logit and multiplies the result by that logit, which
#   for these linear rules equals starting from $R = z_c$, as we do;
# - ReLU passes relevance unchanged (the next layer multiplies by the ReLU's output, zero where
#   inactive, so this equals our `ops.relu`);
# - it only supports networks of modules it knows and each module used once; a `+` in `forward` is
#   an ordinary gradient, so it cannot treat skip connections. The comparison is therefore on the
#   same CNN **without** its skips: the trained weights, with the identity paths removed.

# %%
class PlainCNN(nn.Module):
    """The residual CNN's layers without the skips, as modules Captum knows."""

    def __init__(self, residual):
        super().__init__()
        convs = [
            residual.stem,
            residual.block1.conv1,
            residual.block1.conv2,
            residual.block2.conv1,
            residual.block2.conv2,
        ]
        self.convs = nn.ModuleList(
            [nn.Conv2d(c.in_channels, c.out_channels, 3, padding=1) for c in convs]
        )
        self.relus = nn.ModuleList([nn.ReLU() for _ in convs])
        self.pool1, self.pool2 = nn.AvgPool2d(2), nn.AvgPool2d(4)
        self.fc = nn.Linear(residual.fc.in_features, residual.fc.out_features)
        with torch.no_grad():
            for mine, theirs in zip(list(self.convs) + [self.fc], convs + [residual.fc]):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)

    def forward(self, x, rule=None):
        conv = (
            (lambda i, h: self.relus[i](self.convs[i](h)))
            if rule is None
            else (
                lambda i, h: ops.relu(
                    linear_maps.conv2d(
                        h, self.convs[i].weight, self.convs[i].bias, padding=1, rule=rule
                    )
                )
            )
        )
        pool = (
            (lambda p, h: p(h))
            if rule is None
            else (lambda p, h: linear_maps.avg_pool2d(h, p.kernel_size, rule=rule))
        )
        h = conv(2, conv(1, conv(0, x)))
        h = conv(4, conv(3, pool(self.pool1, h)))
        h = pool(self.pool2, h).flatten(1)
        return (
            self.fc(h)
            if rule is None
            else linear_maps.linear(h, self.fc.weight, self.fc.bias, rule=rule)
        )


plain = PlainCNN(model).double().cpu().eval()
x64 = x_test[:64].double()
target = plain(x64).argmax(1)
captum_relevance = (
    LRP(plain).attribute(x64.clone().requires_grad_(True), target=target).detach()
)
leaf = x64.clone().requires_grad_(True)
out = plain(leaf, rule=rules.Epsilon(1e-9))
out.backward(out.detach() * F.one_hot(target, 10))
difference = float((leaf.grad - captum_relevance).abs().max())
print(f"largest relevance: {float(captum_relevance.abs().max()):.3f}")
print(
    f"max |lrp_lib - captum| over 64 digits (float64): below 1e-10: {difference < 1e-10}"
)

# %% [markdown]
# They agree to rounding error, as they do on another CNN in the library's tests (to $10^{-5}$ in
# float64). The rules differ in one corner: where an output is exactly 0, `lrp_lib`
# drops its relevance and warns (`LostRelevanceWarning`), while Captum divides by $\epsilon$.
#
# ## Cost
#
# `benchmarks/bench_conv.py` times this residual CNN (24 channels, untrained, float32) on a batch
# of 256 digits: forward and backward of the relevance network against the ordinary network's
# gradient, and `lrp_lib` against Captum on the CNN without skips, side by side in one process
# (median of repeated runs, one thread). It also counts the bytes autograd keeps for the backward
# and the peak memory of each variant in a fresh process. The tables are read from its results file:

# %% tags=["hide-input"]
from myst_nb import glue
from lrp_lib.book.results import load_results, machine_note, results_table

conv_bench = load_results("conv")
display(Markdown(machine_note(conv_bench)))
columns = [
    ("variant", "variant"),
    ("forward + backward (ms)", "time_ms", "{:.1f}"),
    ("time ratio", "time_ratio", "{:.2f}x"),
    ("saved for backward (KiB)", "saved_kib", "{:,.0f}"),
    ("saved ratio", "saved_ratio", "{:.2f}x"),
    ("peak RSS (MiB)", "peak_rss_mib", "{:.1f}"),
    ("RSS ratio", "rss_ratio", "{:.2f}x"),
]
conv_rows = {(r["table"], r["variant"]): r for r in conv_bench["results"]}
display(Markdown("**Residual CNN: relevance against the gradient**"))
display(
    results_table([r for r in conv_bench["results"] if r["table"] == "residual"], columns)
)
display(Markdown("**CNN without skips: `lrp_lib` against Captum**"))
display(
    results_table([r for r in conv_bench["results"] if r["table"] == "captum"], columns)
)

eps, captum = conv_rows["residual", "epsilon"], conv_rows["captum", "captum LRP"]
glue("conv_eps_time", f"{eps['time_ratio']:.2f}", display=False)
glue(
    "conv_gamma_time",
    f"{conv_rows['residual', 'gamma']['time_ratio']:.2f}",
    display=False,
)
glue("conv_zplus_time", f"{conv_rows['residual', 'z+']['time_ratio']:.2f}", display=False)
glue("conv_saved", f"{eps['saved_ratio']:.2f}", display=False)
glue("conv_rss", f"{eps['rss_ratio']:.2f}", display=False)
glue("captum_time", f"{captum['time_ratio']:.2f}", display=False)
glue(
    "captum_faster_or_slower",
    "slower" if captum["time_ratio"] > 1 else "faster",
    display=False,
)
glue("captum_rss", f"{captum['rss_ratio']:.2f}", display=False)

# %% [markdown]
# Here the epsilon rule took {glue:text}`conv_eps_time` times the gradient's time: its backward
# skips the weight gradients but adds the division by $z$ and the product with $x$ for every layer,
# and the relevance ops are Python autograd functions. Gamma ({glue:text}`conv_gamma_time` times) and
# z+ ({glue:text}`conv_zplus_time` times) add one forward of the modified map per layer. Autograd
# keeps {glue:text}`conv_saved` times the bytes, because each relevance op saves its output $z$ (the
# pre-activation, which the gradient does not need) beside its input; the peak memory is
# {glue:text}`conv_rss` times the gradient's. Captum's `attribute` runs two forwards and one
# backward with hooks, and took {glue:text}`captum_time` times as long as `lrp_lib`
# ({glue:text}`captum_faster_or_slower`); its peak memory is {glue:text}`captum_rss` times ours, since
# its backward is the ordinary gradient's with hooks on the tensors, so autograd keeps only what the
# gradient keeps.
#
# ## Summary
#
# - A convolution, like a dense layer, is a sum of contributions $x \cdot w$; its input gradient is
#   the VJP $J^\top v$, and every LRP rule here is $x \odot J^\top(R/z)$ for a suitable map and
#   denominator: one VJP per rule (per part for alpha-beta), memory O(input + output).
# - `lrp_lib.teach.linear_maps` applies the epsilon/z, gamma, alpha-beta and z+ rules of `lrp_lib.core.rules`
#   to `linear`, `conv1d/2d/3d`,
#   `avg_pool2d` and any linear map, with torch's argument conventions.
# - A plain `+` on a skip connection gives the whole relevance to both paths and double counts it;
#   `ops.add` splits it in proportion and conserves it. Residual networks need nothing else.
# - On digits, the rules give visibly different explanations: epsilon is close to gradient $\times$
#   input, gamma and z+ are smoother and positive on the strokes.
# - `lrp_lib`'s epsilon rule equals Captum's LRP to rounding error once the conventions (epsilon
#   $10^{-9}$, bias inside $z$, start from the logit) are matched.
#
# ## Exercises
#
# 1. Show that for a bias-free network of ReLUs and linear maps, the epsilon rule with $\epsilon=0$
#    equals gradient $\times$ input. Check it numerically on the digits network with biases set to 0.
# 2. Explain the digits with `rules.AlphaBeta(2, 1)` for the convolutions. Where does negative
#    relevance appear, and how does the sum compare with the logit?
# 3. `rules.Gamma` with a very large $\gamma$ approaches z+ for non-negative inputs. Verify it on one
#    convolution and find a $\gamma$ beyond which the two agree to $10^{-3}$.
# 4. Replace `ops.add` in `ResidualBlock` by a rule that gives the skip path a fixed fraction of
#    the relevance (as some implementations do). Is relevance still conserved? What changes in the
#    heatmaps?
# 5. Write `linear_maps.max_pool2d` with the winner-takes-all rule and compare it with average pooling in
#    the digits network.
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
