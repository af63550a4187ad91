# %% [markdown]
# # Hooks, relprop and JAX: three ways to implement LRP
#
# The first chapter implemented LRP by *hijacking autograd*: every operation is a
# `torch.autograd.Function` whose backward is a relevance rule, and one `.backward(R)` computes the
# whole explanation. That is not the only way, and not the most common one. Much published LRP code,
# for example the code behind "Transformer Interpretability Beyond Attention Visualization"
# {cite}`chefer2021transformer`, uses **forward hooks and `relprop` methods**: every module remembers
# its input during the forward pass and has a method that turns the relevance of its output into the
# relevance of its input; the model calls these methods in reverse order. And in **JAX**
# {cite}`jax2018github` there are no hooks and no stored graph at all, so the same idea becomes a pure
# function built on `jax.vjp`, here with Flax modules {cite}`flax2020github`.
#
# This chapter reworks one of the original notebooks behind this book, on the hook-based relprop
# style and its port to JAX (see *Sources* in the introduction; below, "the original notebook"). It
# builds all three implementations on that notebook's examples, checks where they agree to $10^{-6}$,
# shows where they differ *by design*, and compares what each costs.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes the first chapter (relevance rules as autograd functions) and a reading
# knowledge of `torch.nn.Module`. JAX is explained as it comes. After reading it you should be able to
# - write a `relprop` method for a module from one vector-Jacobian product and a safe division;
# - port it to JAX / Flax with `jax.vjp`;
# - state the alpha-beta rule and how it differs from the epsilon rule;
# - explain who walks the graph backwards in each design, what a tensor used twice (fan-out) needs in
#   each, and what each design costs.
# ```

# %% tags=["hide-input"]
import os
import textwrap
import warnings

os.environ.setdefault(
    "JAX_PLATFORMS", "cpu"
)  # JAX on the CPU: no "no GPU/TPU found" message
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import logging

logging.getLogger("absl").setLevel(logging.ERROR)
logging.getLogger("jax").setLevel(logging.ERROR)

# %%
import jax
from IPython.display import Markdown, display
from myst_nb import glue
import jax.numpy as jnp
import numpy as np
import torch

from lrp_lib.teach import jax_lrp, ops
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.teach import relprop as rp
from lrp_lib.teach.ops import LostRelevanceWarning

jax.config.update(
    "jax_enable_x64", True
)  # float64 in JAX too, so that 1e-6 comparisons are meaningful
torch.manual_seed(0)
np.set_printoptions(precision=4, suppress=True, linewidth=120)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def show(t):
    """A tensor or JAX array as a rounded NumPy array (CPU), -0.0 printed as 0.0."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().numpy()
    return np.round(np.asarray(t, dtype=np.float64), 4) + 0.0

# %% [markdown]
# ## The relprop recipe
#
# Every rule of the first chapter has the same shape. A module computes $Z = f(X)$, linear in $X$
# (or linear in each of its inputs, like a product of two matrices). The relevance $R$ of the output
# is split over the terms $X_j \,\partial Z_k / \partial X_j$ that made each output:
#
# $$ R_{X_j} = \sum_k X_j \frac{\partial Z_k}{\partial X_j} \frac{R_k}{Z_k}
#    = X_j \,\big[J_f(X)^\top S\big]_j, \qquad S = R \oslash Z . $$
#
# So one relevance step is a division $S = R \oslash Z$, one **vector-Jacobian product** $C = J^\top S$
# (what backpropagation computes), and a product $X \odot C$. The hook-based style spells this out
# in every module:
#
# ```python
# def relprop(self, R):
#     Z = self.forward(self.X)                         # self.X was stored by a forward hook
#     S = safe_divide(R, Z)                            # R / Z, 0 where Z == 0
#     C = torch.autograd.grad(Z, self.X, S)            # J^T S
#     return self.X * C[0]
# ```
#
# `lrp_lib.teach.relprop` holds these modules (`MatMul`, `Add`, `IndexSelect`, `Clone`, `ReLU`, `Linear`,
# `Sequential`), and `lrp_lib.teach.jax_lrp` the JAX / Flax port. `safe_divide(a, b, eps)` returns
# $a / (b + \epsilon\,\mathrm{sign}(b))$ where $b \ne 0$ and $0$ where $b = 0$ (relevance that
# reaches a zero output is lost, and a `LostRelevanceWarning` says so, as in `lrp_lib.teach.ops`).
# The original notebook's version added $+10^{-9}$ on both sides of zero; that changes nothing
# printed here.
#
# ## The original notebook's examples, three times
#
# Two small matrices, and the relevance $R$ that puts all of it on the first output:

# %%
A = torch.ones(2, 2)
B = torch.tensor([[-2.0, 1.0], [1.0, -2.0]])
R = torch.tensor([[1.0, 0.0], [0.0, 0.0]])

mm = rp.MatMul()
print("A @ B =\n", show(mm([A, B])))
R_A, R_B = mm.relprop(R)
print("R_A =\n", show(R_A), "\nR_B =\n", show(R_B))

# %% [markdown]
# $Z_{00} = A_{00}B_{00} + A_{01}B_{10} = -2 + 1 = -1$: the first term gets $\frac{-2}{-1} = 2$, the
# second $\frac{1}{-1} = -1$. Each *term* is counted once for $A$ and once for $B$, so both factors
# receive the whole relevance: a product of two variable matrices doubles the total. The same in JAX:
# a Flax module without parameters is called directly, and `relprop` gets the inputs passed in again
# (there are no hooks to remember them).

# %%
Aj, Bj, Rj = jnp.asarray(A.numpy()), jnp.asarray(B.numpy()), jnp.asarray(R.numpy())
jR_A, jR_B = jax_lrp.MatMul().relprop(Rj, Aj, Bj)
print("JAX R_A =\n", show(jR_A), "\nJAX R_B =\n", show(jR_B))

# %% [markdown]
# And the autograd trick: `ops.linear_eps(x, weight)` computes `x @ weight.T`, so $A B$ is
# `linear_eps(A, B.T)`. In `lrp_lib` a weight is not an input to explain, so only $A$ receives
# relevance, and it is the same:

# %%
a = A.clone().to(device).requires_grad_()
ops.linear_eps(a, B.T.to(device), eps=0.0).backward(R.to(device))
print("lrp_lib R_A =\n", show(a.grad))

# %% [markdown]
# ### Addition: where the designs differ on purpose
#
# The original notebook's `Add` first splits each output proportionally, $r_a = \frac{a}{a+b}R$,
# $r_b = \frac{b}{a+b}R$, exactly like `ops.add`, and then **normalises**: it rescales each input's
# whole map so that the two totals are in the ratio of their magnitudes and add up to $\sum R$,
#
# $$ R_a = r_a\, \frac{|\Sigma r_a|}{|\Sigma r_a| + |\Sigma r_b|}\,\frac{\Sigma R}{\Sigma r_a}, \qquad
#    R_b = r_b\, \frac{|\Sigma r_b|}{|\Sigma r_a| + |\Sigma r_b|}\,\frac{\Sigma R}{\Sigma r_b}. $$
#
# This is how Chefer et al. keep relevance positive and conserved across the skip connections of a
# transformer {cite}`chefer2021transformer`.

# %%
add = rp.Add()
print("A + B =\n", show(add([A, B])))
R_a, R_b = add.relprop(R)
print("normalised (relprop):   R_a", show(R_a[0]), " R_b", show(R_b[0]), " (first rows)")
jR_a, jR_b = jax_lrp.Add().relprop(Rj, Aj, Bj)
print("normalised (JAX):       R_a", show(jR_a[0]), " R_b", show(jR_b[0]))
a, b = A.clone().to(device).requires_grad_(), B.clone().to(device).requires_grad_()
ops.add(a, b).backward(R.to(device))
print("proportional (lrp_lib): R_a", show(a.grad[0]), " R_b", show(b.grad[0]))

# %% [markdown]
# $A_{00} + B_{00} = 1 - 2 = -1$: the proportional split gives $A$ the share $\frac{1}{-1} = -1$ and
# $B$ the share $\frac{-2}{-1} = 2$. Normalisation keeps the totals' magnitudes $1 : 2$ but makes
# both positive: $\frac13$ and $\frac23$ (the numbers the original notebook printed). Both rules conserve the total
# here. They part ways in two places, shown below: where an output is zero, the proportional split
# loses that output's relevance while the normalisation moves it onto the rest of the map; and the
# normalising sums run over the **whole tensor, batch included**, so one sample's relevance changes
# another's.

# %%
a = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
b = torch.tensor([[-1.0, 1.0], [1.0, 1.0]])  # a + b = 0 at [0, 0]
R2 = torch.ones(2, 2)
both = rp.Add()
both([a, b])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", LostRelevanceWarning)
    Ra, Rb = both.relprop(R2)
print(textwrap.fill(f"warning: {caught[0].message}", 90, subsequent_indent="    "))
print(
    "normalised, batch of 2:  total",
    round(float(Ra.sum() + Rb.sum()), 4),
    " sample 1: R_a",
    show(Ra[1]),
    "R_b",
    show(Rb[1]),
)
alone = rp.Add()
alone([a[1:], b[1:]])
Ra1, Rb1 = alone.relprop(R2[1:])
print("normalised, sample 1 alone:                R_a", show(Ra1[0]), "R_b", show(Rb1[0]))

# %% [markdown]
# The total is back to 4 although the element-wise split lost one unit at $[0, 0]$, and sample 1
# receives different relevance depending on whether sample 0 is in the batch. The JAX port does the
# same (the tests check it to $10^{-12}$). `lrp_lib.teach.ops.add` keeps the element-wise split, which
# never mixes samples; for skip connections see the chapter on convolutions and skip connections.
#
# ### Copies: index select and clone
#
# Selecting columns copies values; each copy sends its relevance back to the original:

# %%
pool = rp.IndexSelect()
print("B[:, [0]] =", show(pool(B, 1, torch.zeros(1, dtype=torch.int32))).ravel())
print("relprop:  ", show(pool.relprop(torch.tensor([[1.0], [0.0]]))).tolist())
print(
    "JAX:      ",
    show(
        jax_lrp.IndexSelect().relprop(
            jnp.array([[1.0], [0.0]]), Bj, 1, jnp.zeros(1, dtype=jnp.int32)
        )
    ).tolist(),
)
b = B.clone().to(device).requires_grad_()
ops.index_select(b, 1, torch.zeros(1, dtype=torch.long, device=device)).backward(
    torch.tensor([[1.0], [0.0]], device=device)
)
print("lrp_lib:  ", show(b.grad).tolist())

# %% [markdown]
# A tensor used twice is the interesting case. Autograd sums the gradient arriving along the two
# paths; the relprop walk is written by hand, so it needs a module that marks the fan-out and adds the
# relevance of the copies: `Clone`.

# %%
clone = rp.Clone()
copies = clone(B, 2)
R_copies = [
    torch.tensor([[0.5, 0.5], [0.0, 0.0]]),
    torch.tensor([[0.0, 0.25], [0.25, 0.5]]),
]
print("Clone.relprop:\n", show(clone.relprop(R_copies)))
b = B.clone().to(device).requires_grad_()
everything = torch.arange(2, device=device)
uses = [
    ops.index_select(b, 0, everything),
    ops.index_select(b, 0, everything),
]  # b used twice
torch.autograd.backward(uses, [r.to(device) for r in R_copies])
print("autograd's own fan-out (lrp_lib):\n", show(b.grad))

# %% [markdown]
# In JAX, as the original notebook noted, no module is needed at all: the walk is ordinary Python, and
# where a value was used twice it adds the two relevances with `+`.
#
# ### A dense layer with the alpha-beta rule
#
# The epsilon rule splits each output over *all* contributions $x_j w_{kj}$, positive and negative.
# The **alpha-beta rule** {cite}`bach2015pixel,montavon2019lrp` splits the positive and the negative
# ones separately and weights them:
#
# $$ R_{x_j} = \sum_k \Big(\alpha \frac{(x_j w_{kj})^+}{\sum_i (x_i w_{ki})^+}
#    - \beta \frac{(x_j w_{kj})^-}{\sum_i (x_i w_{ki})^-}\Big) R_k, \qquad \alpha - \beta = 1 . $$
#
# With $\alpha = 1, \beta = 0$ only the positive contributions receive relevance (the $z^+$ rule).
# The sums need no contribution tensor: since $(xw)^+ = x^+ w^+ + x^- w^-$, the positive part is two
# linear maps of clamped inputs and weights, and each share is again a vector-Jacobian product.
#
# The original notebook applied a Flax `Dense(2)` layer to $x = (1, \dots, 1) \in \mathbb{R}^{20}$
# and printed the relevance for $R = (1, 0)$. With $x = 1$ every contribution is a weight, so the
# answer can be checked by hand: each positive weight $w_{j1}$ of the first output gets
# $w_{j1} / \sum_i w_{i1}^+$, the negative ones nothing. Below, the same layer with a kernel written
# out (a key of `jax.random` draws different numbers in different JAX versions), and that check.

# %%
first_column = np.array([0.15, 0.47, 0.18, -0.16, -0.12, -0.41, 0.05, -0.22, 0.02, -0.39,
                         -0.38, 0.32, 0.01, -0.34, -0.14, -0.02, 0.10, -0.10, -0.36, 0.0])
second_column = np.linspace(-0.3, 0.3, 20)  # does not matter for R = (1, 0)
kernel = jnp.array(np.stack([first_column, second_column], axis=1))  # (in, out), as Flax
dense = jax_lrp.Dense(2, use_bias=False)
x20 = jnp.ones((1, 20))
bound = dense.bind({"params": {"kernel": kernel}})
R20 = bound.relprop(jnp.array([[1.0, 0.0]]), x20, rule="alpha_beta", alpha=1.0)
print(show(R20[0]).reshape(2, 10))  # the 20 inputs in two rows of ten
by_hand = np.clip(first_column, 0, None) / np.clip(first_column, 0, None).sum()
print(
    "equals w+ / sum(w+) (to 1e-6):",
    bool(np.abs(np.asarray(R20[0]) - by_hand).max() < 1e-6),
)
print("total:", round(float(R20.sum()), 4))

# %% tags=["remove-cell"]
glue("ab_w0", f"{first_column[0]:.2f}", display=False)
glue("ab_wsum", f"{np.clip(first_column, 0, None).sum():.2f}", display=False)
glue("ab_r0", f"{by_hand[0]:.4f}", display=False)

# %% [markdown]
# The first weight, {glue:text}`ab_w0`, gets {glue:text}`ab_w0` / {glue:text}`ab_wsum` =
# {glue:text}`ab_r0` of the relevance; the negative weights get none. The same layer in
# the two PyTorch implementations, `rp.Linear` and the autograd op `linear_maps.linear` with
# `rules.AlphaBeta(1, 0)` from the chapter on convolutions:

# %%
W20 = torch.tensor(np.asarray(kernel).T, dtype=torch.float64)  # torch's (out, in) layout
lin = rp.Linear(20, 2, bias=False, dtype=torch.float64)
with torch.no_grad():
    lin.weight.copy_(W20)
lin(torch.ones(1, 20, dtype=torch.float64))
by_hooks = lin.relprop(
    torch.tensor([[1.0, 0.0]], dtype=torch.float64), rule="alpha_beta", alpha=1.0
)
x = torch.ones(1, 20, dtype=torch.float64, device=device, requires_grad=True)
linear_maps.linear(x, W20.to(device), rule=rules.AlphaBeta(alpha=1.0, beta=0.0)).backward(
    torch.tensor([[1.0, 0.0]], dtype=torch.float64, device=device))
print(
    "relprop hooks == JAX:  ",
    bool(np.abs(by_hooks.numpy() - np.asarray(R20)).max() < 1e-6),
)
print(
    "autograd trick == JAX: ",
    bool(np.abs(x.grad.cpu().numpy() - np.asarray(R20)).max() < 1e-6),
)

# %% [markdown]
# ## A small MLP, three ways
#
# Now a whole network: three bias-free linear layers $6 \to 8 \to 8 \to 3$ with ReLU between them,
# seeded random weights, a batch of 4, float64 everywhere, and the relevance of the winning class as
# the starting point. The same weights go into the three implementations (Flax stores the kernel as
# `(in, out)`, PyTorch the weight as `(out, in)`).

# %%
gen = torch.Generator().manual_seed(0)
sizes = [6, 8, 8, 3]
weights = [
    torch.randn(o, i, generator=gen, dtype=torch.float64) / i**0.5
    for i, o in zip(sizes[:-1], sizes[1:])
]
x = torch.randn(4, 6, generator=gen, dtype=torch.float64)

# 1. relprop modules: a Sequential that walks itself backwards
layers = []
for k, W in enumerate(weights):
    layer = rp.Linear(W.shape[1], W.shape[0], bias=False, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(W)
    layers += [layer] + ([rp.ReLU()] if k < len(weights) - 1 else [])
net = rp.Sequential(*layers)
with torch.no_grad():
    out = net(x)  # the hooks store every layer's input
R_out = out * (out == out.max(dim=1, keepdim=True).values)

# 2. Flax: an MLP module whose relprop runs the forward again to collect the inputs
mlp = jax_lrp.MLP(features=sizes[1:], use_bias=False)
params = {
    "params": {
        f"layers_{2 * k}": {"kernel": jnp.asarray(W.T.numpy())}
        for k, W in enumerate(weights)
    }
}
xj, Rj = jnp.asarray(x.numpy()), jnp.asarray(R_out.numpy())


# 3. the autograd trick
def autograd_trick(rule):
    leaf = x.clone().to(device).requires_grad_()
    h = leaf
    for k, W in enumerate(weights):
        W = W.to(device)
        h = (
            ops.linear_eps(h, W, eps=1e-9)
            if rule == "epsilon"
            else linear_maps.linear(h, W, rule=rules.AlphaBeta(1.0, 0.0))
        )
        h = ops.relu(h) if k < len(weights) - 1 else h
    h.backward(R_out.to(device))
    return leaf.grad.cpu()


for rule, kwargs in [
    ("epsilon", dict(rule="epsilon", eps=1e-9)),
    ("alpha=1, beta=0", dict(rule="alpha_beta", alpha=1.0, beta=0.0)),
]:
    by_hooks = net.relprop(R_out, **kwargs)
    by_jax = torch.from_numpy(
        np.array(mlp.apply(params, Rj, xj, method=jax_lrp.MLP.relprop, **kwargs))
    )
    by_trick = autograd_trick("epsilon" if rule == "epsilon" else "alpha_beta")
    print(
        f"{rule}: max |hooks - trick| < 1e-6:"
        f" {bool((by_hooks - by_trick).abs().max() < 1e-6)}, max |JAX - trick| < 1e-6:"
        f" {bool((by_jax - by_trick).abs().max() < 1e-6)}"
    )
    print(f"    total in {float(by_trick.sum()):.4f}, total out {float(R_out.sum()):.4f}")
    print(show(by_trick))

# %% [markdown]
# The three agree to $10^{-6}$ (in fact to about $10^{-9}$: the relprop `ReLU` divides by
# $z + 10^{-9}$) for both rules, and both rules conserve the total in this bias-free network. The two
# rules give **different explanations of the same prediction by design**: the epsilon rule hands
# negative relevance to inputs that pushed against the winning class; $\alpha = 1, \beta = 0$ only
# credits positive contributions, so every input relevance has the sign of the sample's $R$.
#
# Two smaller differences by design, worth knowing before you compare numbers across code bases:
#
# - **The bias in alpha-beta.** `rp.Linear` and `jax_lrp.Dense` leave the bias out of $z^\pm$, like the
#   original notebook and Chefer et al.'s code; `lrp_lib.core.rules.AlphaBeta` counts it as the contribution of a constant
#   input 1 (as Zennit does {cite}`anders2021zennit`), so its share leaves the explanation. Without
#   a bias they agree, as above.
# - **JAX's float32 by default.** Without `jax_enable_x64`, JAX computes in float32 and the epsilon
#   rule with a tiny $\epsilon$ amplifies rounding where some $z_k$ is close to zero; the benchmark
#   below measures, on a wide MLP, how far each implementation's float32 result lies from float64.
#
# ## Three designs compared
#
# | | relprop hooks (`lrp_lib.teach.relprop`) | JAX / Flax (`lrp_lib.teach.jax_lrp`) | autograd trick (`lrp_lib.teach.ops`, `lrp_lib.core.rules`) |
# | --- | --- | --- | --- |
# | what is stored in the forward | every module's input (a forward hook) | nothing: `relprop` gets the inputs again, or runs the forward again (`MLP.relprop`) | what each op's backward needs (`ctx.save_for_backward`) |
# | who walks the graph backwards | the model, by hand: `Sequential.relprop` or a hand-written `relprop` calling the modules in reverse | the model, by hand, in Python (traced once under `jax.jit`) | autograd: one `.backward(R)` |
# | a tensor used twice | needs a `Clone` module, whose `relprop` adds the copies' relevance | a `+` in the hand-written walk | nothing: autograd sums the relevance of the two uses |
# | cost of one step | a second forward of the module plus a `torch.autograd.grad` call | a forward and a VJP; `jit` fuses the whole pass | one custom backward, no second forward |
# | every op of the model must be | a relprop module (a plain `torch.relu` breaks the walk) | a module with `relprop` | an `lrp_lib` op (a plain op silently passes the *gradient*) |
#
# The last row is the price of each design's convenience: the relprop walk fails loudly when a module
# lacks `relprop`, while the autograd trick silently mixes gradient into the relevance when a plain
# operation slips in.
#
# What does each design cost? `benchmarks/bench_implementations.py` times one relevance pass
# (forward included) through a larger MLP, bias-free layers with ReLU, for the same input and output
# relevance in each implementation, float32 on one CPU core. The implementations take turns, one run
# of each in turn, so that a change in the machine's load falls on all of them alike, and the table
# gives the median of each and its ratios to the plain gradient and to the autograd trick. The
# Performance page shows the same results; the line above the table says where they were measured.

# %% tags=["hide-input"]
from myst_nb import glue

from lrp_lib.book.results import load_results, machine_note, results_table

impl = load_results("implementations")
display(Markdown(machine_note(impl)))
settings = impl["settings"]
print(
    f"MLP: {settings['layers']} bias-free layers of {settings['width']}, ReLU, batch"
    f" {settings['batch']:,}, float32, median of {settings['repeats']} interleaved runs"
)
trick_ms = {r["rule"]: r["time_ms"] for r in impl["results"] if r["implementation"] == "autograd trick"}
rows = [dict(r, to_trick=r["time_ms"] / trick_ms[r["rule"]] if r["rule"] in trick_ms else None)
        for r in impl["results"]]  # each rule against the autograd trick with the same rule
results_table(rows, [
    ("implementation", "label"),
    ("time (ms)", "time_ms", ",.1f"),
    ("/ plain gradient", "ratio_to_gradient", "{:.2f}x"),
    ("/ autograd trick, same rule", "to_trick", "{:.2f}x"),
    ("max deviation from float64", "max_deviation_float64", ".1e"),
])

# %% tags=["hide-input"]
by = {(r["rule"], r["implementation"]): r for r in impl["results"]}
for rule in ("epsilon", "alpha1_beta0"):
    for name in ("relprop hooks", "JAX/Flax eager", "JAX/Flax jit"):
        key = f"impl_{rule}_{name.split()[0].replace('/', '').lower()}_{name.split()[-1]}"
        glue(key, f"{by[rule, name]['time_ms'] / by[rule, 'autograd trick']['time_ms']:.2f}x", display=False)
    glue(
        f"impl_{rule}_trick_vs_gradient",
        f"{by[rule, 'autograd trick']['ratio_to_gradient']:.2f}x",
        display=False,
    )
deviations = [
    r["max_deviation_float64"]
    for r in impl["results"]
    if r["max_deviation_float64"] is not None
]
glue("impl_max_deviation", f"{max(deviations):.1e}", display=False)
eps_rows = [r for r in impl["results"] if r["rule"] == "epsilon"]
glue(
    "impl_eps_fastest",
    min(eps_rows, key=lambda r: r["time_ms"])["implementation"],
    display=False,
)
glue(
    "impl_eps_slowest",
    max(eps_rows, key=lambda r: r["time_ms"])["implementation"],
    display=False,
)

# %% [markdown]
# The last column is the largest deviation of the float32 result from the same rule in float64,
# relative to the largest relevance (here at most {glue:text}`impl_max_deviation`). Measured against
# the autograd trick, with the epsilon rule, the relprop hooks take {glue:text}`impl_epsilon_relprop_hooks`
# its time, eager JAX {glue:text}`impl_epsilon_jaxflax_eager` and jit-compiled JAX
# {glue:text}`impl_epsilon_jaxflax_jit`; with $\alpha = 1, \beta = 0$ the same ratios are
# {glue:text}`impl_alpha1_beta0_relprop_hooks`, {glue:text}`impl_alpha1_beta0_jaxflax_eager` and
# {glue:text}`impl_alpha1_beta0_jaxflax_jit`. Of the epsilon implementations, the fastest is
# {glue:text}`impl_eps_fastest` and the slowest {glue:text}`impl_eps_slowest`. Where the costs come
# from: `jax.jit` hands the whole pass to XLA, which fuses the clamps, divisions and products into a
# few kernels; the relprop hooks run every module's forward a second time, and `torch.autograd.grad`
# builds and walks a fresh graph for every layer (twice per layer for alpha-beta); the autograd trick
# runs one custom backward per op, itself a few element-wise passes beside the matrix product, which
# is why it costs {glue:text}`impl_epsilon_trick_vs_gradient` the plain gradient with the epsilon
# rule. The ratios are taken side by side in one process, but on a busy machine single runs still
# vary; read them to one digit.
#
# ## Summary
#
# - One LRP step for a module linear in its input is $R_X = X \odot J^\top(R \oslash Z)$: a division
#   and a vector-Jacobian product. `torch.autograd.grad`, `jax.vjp` and a custom autograd backward are
#   three ways to get that product.
# - The relprop style stores inputs with forward hooks and walks the model backwards by hand; fan-out
#   needs an explicit `Clone`. The JAX port is the same walk as pure functions, which `jax.jit` compiles
#   into one fast program. The autograd trick lets autograd do the walk and the fan-out.
# - On the original notebook's examples and on an MLP with random weights the three agree to $10^{-6}$ for the epsilon rule and
#   for alpha-beta with $\alpha = 1, \beta = 0$. They differ by design in the normalised `Add`
#   (conserves the total, even what a zero output would lose, but mixes the samples of a batch) and in
#   whether alpha-beta counts the bias.
#
# ## Exercises
#
# 1. Write a relprop module `Sum(dim)` and its JAX twin, and check them against `ops.sum`.
# 2. Change `rp.Add` so that the normalisation runs per sample (sum over all but the first dimension).
#    Does it still conserve the total? Does sample 1 above still depend on sample 0?
# 3. JAX has its own version of the autograd trick: `jax.custom_vjp`. Write `linear_eps` as a function
#    with a custom VJP whose backward is the epsilon rule, and check that `jax.vjp` of a two-layer MLP
#    built from it gives the same relevance as `jax_lrp.MLP.relprop`.
# 4. Insert a plain `torch.relu` (not `rp.ReLU`) into the relprop `Sequential`, and a plain `torch.relu`
#    into the autograd-trick MLP. What happens in each case, and which failure is easier to notice?
# 5. The relprop `Linear` runs the layer's forward a second time in `relprop`. Estimate from the
#    benchmark table how much of its extra cost that explains.
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
