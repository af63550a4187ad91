# %% [markdown]
# # Hijacking autograd for LRP
#
# A gradient tells us how the output would *change* if an input moved a little. An explanation
# often wants something else: how much of the output each input is *responsible for*.
# Layer-wise Relevance Propagation (LRP) {cite}`bach2015pixel,montavon2019lrp` answers the second
# question by walking the network backwards, layer by layer, and at every layer handing each
# output's "relevance" to the inputs that produced it, in proportion to their contribution. The
# total is conserved on the way, so at the end the input relevances add up to the output we
# started from.
#
# Walking a network backwards layer by layer is exactly what autograd does when it computes a
# gradient. This chapter hijacks that machinery: for every operation we write a
# `torch.autograd.Function` whose forward is the ordinary operation and whose **backward is an LRP
# rule**. Build the network from such operations, call `.backward(R)` once, and the input
# relevances are waiting in `.grad`. No hooks, no second traversal, no bookkeeping of which layer
# fed which: autograd already knows the graph, including the scatters and gathers of a graph
# neural network.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes you know PyTorch tensors and what `.backward()` computes. After reading it
# you should be able to
# - state the proportional (LRP-0) and epsilon rules and the conservation property they give;
# - write a `torch.autograd.Function` whose backward propagates relevance instead of gradient;
# - predict where relevance is conserved, where a bias absorbs it, and where it is lost;
# - use the ops of `lrp_lib.teach.ops` (`add`, `sum`, `scatter_add`, `scatter_mean`, `scatter_max`,
#   `linear_eps`, `index_select`, `cat`, `repeat_tensor`, `relu`) to explain a composed computation.
# ```
#
# ## The rule in one line
#
# Take one output $z$ that is a sum of contributions, $z = \sum_i z_i$ (for a linear layer
# $z_i = x_i w_i$, for an addition the two terms). If $z$ has received relevance $R_z$, LRP gives
# contribution $i$ the share
#
# $$ R_i = \frac{z_i}{z}\, R_z , \qquad \text{so that} \qquad \sum_i R_i = R_z \quad (z \neq 0). $$
#
# This is the basic rule, LRP-0 {cite}`montavon2019lrp`. Summing over all outputs of a layer
# gives the layer-wise conservation $\sum_i R_i = \sum_k R_k$, and chaining layers gives
# conservation from the network's output down to its input. Two things can break the equality,
# and this chapter shows both with numbers:
#
# - **a bias** is a contribution that is not an input, so its share leaves the explanation;
# - **an output of zero** cannot be split in proportion to anything: its relevance is lost.
#
# The *epsilon rule* replaces $z$ by $z + \epsilon\,\mathrm{sign}(z)$ in the denominator. The
# stabiliser absorbs a little relevance and keeps weak, noisy outputs from producing huge
# shares {cite}`montavon2019lrp`.
#
# How does this fit into autograd? Backward receives, for each output, a tensor of the output's
# shape (normally $\partial L/\partial z$) and must return one tensor per input. Nothing forces that
# tensor to be a gradient. If we pass $R_z$ in and return $R_i$, then `.backward(R)` runs the LRP
# recursion, and autograd's own bookkeeping takes care of fan-out (an input used twice receives
# the sum of both relevances, exactly as it would receive the sum of two gradients).

# %%
import textwrap
import warnings

import numpy as np
import torch

from lrp_lib.teach import ops

torch.manual_seed(0)
np.set_printoptions(
    formatter={"float_kind": "{:5.2f}".format, "int_kind": "{:5d}".format}, linewidth=150
)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def leaf(values):
    """A float tensor on the chapter's device that collects .grad."""
    return torch.tensor(values, dtype=torch.float, device=device, requires_grad=True)


def show(t):
    """Values of a tensor as a numpy array on the CPU (the same output on any device)."""
    return t.detach().cpu().numpy()


# %% [markdown]
# Throughout, the relevance we send into an output is $1$ where the output is non-zero and $0$
# where it is zero. Sending relevance into a zero output would only lose it (see
# [Lost relevance](sec-lost-relevance) below); the original notebooks this chapter reworks
# (*Hijacking autograd for LRP* and *Autograd trick for graph layers*, see the introduction) mask it
# the same way, and so the numbers here can be compared with theirs.

# %%
def unit_relevance(out):
    """R = 1 on every non-zero output, 0 on the zero ones."""
    return torch.ones_like(out) * (out != 0)


# %% [markdown]
# ## Addition
#
# The gradient of $c = a + b$ with respect to either term is one: both terms receive the whole
# upstream signal.

# %%
a, b = leaf([1, 2, 3, 1]), leaf([0, 1, 2, 4])
c = a + b
c.backward(unit_relevance(c))
print(show(a), "+", show(b), "---->", show(c))
print(show(a.grad), " ", show(b.grad), "<----", show(unit_relevance(c)))

# %% [markdown]
# For relevance we want the split $R_a = \frac{a}{a+b} R_c$ and $R_b = \frac{b}{a+b} R_c$. Written
# as an autograd function the whole op is a few lines; here it is once, in full, to show the
# pattern (`lrp_lib.teach.ops.add` is the same with argument checks and broadcasting):

# %%
class AddRelevance(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        out = a + b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, rel_out):
        a, b, out = ctx.saved_tensors
        # R / z, 0 where z = 0
        share = torch.where(out != 0, rel_out / out, torch.zeros_like(out))
        return share * a, share * b


a, b = leaf([1, 2, 3, 1]), leaf([0, 1, 2, 4])
c = AddRelevance.apply(a, b)
c.backward(unit_relevance(c))
print(show(a), "+", show(b), "---->", show(c))
print(show(a.grad), " ", show(b.grad), "<----", show(unit_relevance(c)))
print(
    "conserved:",
    np.isclose(show(a.grad).sum() + show(b.grad).sum(), show(unit_relevance(c)).sum()),
)

# %% [markdown]
# The library version also handles broadcasting both ways: when a bias vector is added to a batch,
# the bias receives the sum of its shares over the batch, and a scalar receives the sum over
# everything. The total is still conserved:

# %%
x = leaf([[1, 2], [3, -4]])
bias = leaf([1, 2])
y = ops.add(x, bias)
y.backward(unit_relevance(y))
print("x relevance\n", show(x.grad))
print("bias relevance", show(bias.grad))
print(
    "total in  ",
    round(float(x.grad.sum() + bias.grad.sum()), 4),
    " total out",
    float(unit_relevance(y).sum()),
)

# %% [markdown]
# ## Sum
#
# A sum over a dimension is the same rule with many terms:
# $R_{x_i} = \frac{x_i}{\sum_j x_j} R_{\text{out}}$ inside each reduced group. The gradient, again,
# is just the upstream signal copied to every term:

# %%
a = leaf([[1, 2, 3, 1], [-6, -2, -1, -1]])
out = a.sum(dim=0)
out.backward(unit_relevance(out))
print(show(a), "---->", show(out))
print(show(a.grad), "<----", show(unit_relevance(out)))

# %% [markdown]
# With relevance, column 0 sums to $1 - 6 = -5$. The negative term carries most of the output, so
# it receives most of the relevance ($-6/-5 = 1.2$), and the positive term receives a *negative*
# share ($1/-5 = -0.2$): it worked against the output. Columns 1 and 3 sum to zero; their relevance
# was masked to zero beforehand, so nothing is lost.

# %%
for kwargs in [dict(dim=0), dict(dim=0, keepdim=True), dict(dim=1)]:
    a = leaf([[1, 2, 3, 1], [-6, -2, -1, -1]])
    out = ops.sum(a, **kwargs)
    out.backward(unit_relevance(out))
    print(kwargs)
    print(show(a), "---->", show(out))
    print(show(a.grad), "<----", show(unit_relevance(out)))
    print(
        "in",
        round(float(a.grad.sum()), 4),
        "out",
        float(unit_relevance(out).sum()),
        end="\n\n",
    )

# %% [markdown]
# ## Scatter operations
#
# Graph networks aggregate messages with *scatter* operations: the entries of `src` are grouped by
# an `index` (for instance, the receiving node of each edge) and each group is reduced to one
# output. `lrp_lib` implements them on PyTorch's own `scatter_add` / `scatter_reduce`, with the
# argument conventions of `torch_scatter` (`src, index, dim, dim_size`), so no compiled extension
# is needed.
#
# ### Scatter add
#
# A segment sum is a sum per group, so its rule is the sum's rule per group:
# $R_{i} = \frac{x_i}{\sum_{k: \text{idx}_k = \text{idx}_i} x_k} R_{\text{idx}_i}$.

# %%
from lrp_lib.teach import scatter

src = leaf([1, 1, 1, 1, 2, 6, 1, 1, -2])
index = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2], device=device)
out = scatter.scatter_add(src, index, dim=0)  # the plain op: its gradient
out.backward(unit_relevance(out))
print(show(index))
print(show(src), "---->", show(out))
print(show(src.grad), "<----", show(unit_relevance(out)))

src = leaf([1, 1, 1, 1, 2, 6, 1, 1, -2])
out = ops.scatter_add(src, index, dim=0)  # the relevance op
out.backward(unit_relevance(out))
print(show(src), "---->", show(out))
print(show(src.grad), "<----", show(unit_relevance(out)))

# %% [markdown]
# Group 2 sums to $1 + 1 - 2 = 0$: it gets no relevance, and its members none either.
#
# ### Scatter mean
#
# The mean $\frac1n \sum_k x_k$ is a sum of the terms $x_k / n$, so each term's share is
# $\frac{x_i/n}{\text{mean}} = \frac{x_i}{\sum_k x_k}$: the mean splits relevance exactly like the
# sum. The gradient, by contrast, is $1/n$ for every member.

# %%
src = leaf([1, 1, 1, 1, 2, 8, 1, 1, -2])
out = scatter.scatter_mean(src, index, dim=0)
out.backward(unit_relevance(out))
print(show(src), "---->", show(out))
print(show(src.grad), "<----", show(unit_relevance(out)))

src = leaf([1, 1, 1, 1, 2, 8, 1, 1, -2])
out = ops.scatter_mean(src, index, dim=0)
out.backward(unit_relevance(out))
print(show(src), "---->", show(out))
print(show(src.grad), "<----", show(unit_relevance(out)))

# %% [markdown]
# ### Scatter max
#
# The maximum of a group is produced by one member alone, so it takes all the relevance
# ("winner takes all"). `scatter_max` returns `(out, argmax)` like torch_scatter; among equal
# maxima the last one wins, and an empty group has `out = 0` and `argmax = src.size(dim)`. The
# gradient goes to the same winners:

# %%
src = leaf([1, 1, 1, 1, 2, 8, 1, 1, -2])
out, argmax = scatter.scatter_max(src, index, dim=0)
out.backward(unit_relevance(out))
print(show(src), "---->", show(out))
print("argmax", show(argmax))
print(show(src.grad), "<----", show(unit_relevance(out)))

# %% [markdown]
# With relevance, here with $R = 3$ per group, group 2 empty and group 3 made of zeros:

# %%
src = leaf([1, 1, 1, 1, 2, 8, 0, 0, 0])
index_with_gap = torch.tensor([0, 0, 0, 0, 1, 1, 3, 3, 3], device=device)
out, argmax = ops.scatter_max(src, index_with_gap, dim=0)
rel = torch.full_like(out, 3) * (out != 0)
out.backward(rel)
print(show(src), "---->", show(out))
print("argmax", show(argmax))
print(show(src.grad), "<----", show(rel))

# %% [markdown]
# ## Linear layer and the epsilon rule
#
# For $z_k = \sum_j x_j w_{kj} + b_k$ the epsilon rule reads
#
# $$ R_{x_j} = \sum_k \frac{x_j w_{kj}}{z_k + \epsilon\,\mathrm{sign}(z_k)} R_k
#            = x_j \sum_k w_{kj}\, \underbrace{\frac{R_k}{z_k + \epsilon\,\mathrm{sign}(z_k)}}_{s_k} . $$
#
# The second form is the one to implement. The original notebook built the full $N \times
# \text{in} \times \text{out}$ tensor of contributions $x_j w_{kj}$ in forward and kept it for
# backward; for a batch of 100,000 rows and 64 x 64 features that is 1.6 GB in float32, where the
# inputs and outputs take 51 MB. Factored, backward needs only the saved input, weight and output,
# one division ($s = R / (z + \epsilon\,\mathrm{sign}\,z)$) and one matrix product ($s W$): memory
# $O(N(\text{in} + \text{out}))$, the same as the gradient's. (The [Performance](performance.ipynb)
# page measures both.)
#
# It also added $\epsilon$ to a *saved* tensor in place during backward, so a second backward
# over the same graph (`retain_graph=True`) divided by $z + 2\epsilon$. `linear_eps` never modifies
# what it saved.
#
# First the gradient, for comparison: it is the weight column, whatever the input.

# %%
weight = torch.tensor([[1, 2, -1], [0, 0, 1]], dtype=torch.float, device=device)
bias = torch.tensor([0, 1], dtype=torch.float, device=device)
x = leaf([[4, 8, 0]])
y = x @ weight.t() + bias
y.backward(unit_relevance(y))
print(show(x), "---->", show(y))
print(show(x.grad), "<----", show(unit_relevance(y)))

# %% [markdown]
# Without a bias the relevance is conserved: output 0 is $20 = 4 + 16 + 0$, so the inputs receive
# $4/20$, $16/20$ and $0$.

# %%
def explain_linear(weight, bias, x_values, eps=1e-6):
    weight = torch.tensor(weight, dtype=torch.float, device=device)
    bias = None if bias is None else torch.tensor(bias, dtype=torch.float, device=device)
    print(
        "W",
        show(weight),
        *(["b", show(bias)] if bias is not None else []),
        sep="\n",
        end="\n\n",
    )
    x = leaf(x_values)
    y = ops.linear_eps(x, weight, bias, eps=eps)
    y.backward(unit_relevance(y))
    print(show(x), "---->", show(y))
    print(show(x.grad).round(2), "<----", show(unit_relevance(y)))


explain_linear([[1, 2, -1], [0, 0, 1]], None, [[4, 8, 0]])

# %% [markdown]
# ### A bias absorbs relevance
#
# Now output 1 is $0 \cdot 1 + b_1 = 1$: all of it comes from the bias, so all of its relevance
# goes to the bias, and the inputs receive exactly what they received before. The explanation sums
# to 1 while we sent in 2.

# %%
explain_linear([[1, 2, -1], [0, 0, 1]], [0, 1], [[4, 8, 0]])

# %% [markdown]
# The same happens however large the bias is. With $b_1 = 100$ the output is 100 and, again, none
# of it reaches the inputs. This can look odd ("a neuron with output 100 contributes nothing?"), but
# it is what the rule says: the input $x_2 = 0$ did not contribute to that output, the constant did.

# %%
explain_linear([[1, 2, -1], [0, 0, 1]], [0, 100], [[4, 8, 0]])

# %% [markdown]
# ### Zeros in the input and in the weights
#
# A zero input contributes $x_j w_{kj} = 0$ whatever its weight, and a zero weight contributes
# nothing whatever the input: either way the share is zero.

# %%
explain_linear([[1, -1]], None, [[4, 0]])
print()
explain_linear([[1, 0, 2]], None, [[4, 1, 3]])

# %% [markdown]
# ### What epsilon does
#
# The stabiliser only matters when $|z_k|$ is not large compared to $\epsilon$. Here is one output
# made of two nearly cancelling contributions, $z = 5 - 4.9 = 0.1$, with growing $\epsilon$: the
# shares shrink and the remainder is absorbed, the price for not amplifying a weak, cancelling
# output into two large opposite relevances.

# %%
for eps in [0.0, 0.01, 0.1, 1.0]:
    x = leaf([[5.0, 4.9]])
    y = ops.linear_eps(x, torch.tensor([[1.0, -1.0]], device=device), eps=eps)
    y.backward(torch.ones_like(y))
    print(
        f"eps={eps:<5} relevance {show(x.grad).round(2)}  total {float(x.grad.sum()):.3f}"
    )

# %% [markdown]
# ## Copying ops: index select, cat, repeat
#
# Some ops only move or copy values. A copy carries the relevance of its original, and when an
# input is copied several times its copies' relevances add up. That is exactly what the gradient
# of these ops does, so for them relevance and gradient coincide; `lrp_lib` still provides them as
# relevance ops so that a network can be built from `lrp_lib.teach.ops` alone, with the argument checks.
#
# `index_select` gathers entries (in a graph network: the features of each edge's sender):

# %%
src = leaf([1, 1, 1, 1, 2, 6, 0, 1, -2])
gather_index = torch.tensor([2, 4, 6, 8, 8], device=device)
out = ops.index_select(src, 0, gather_index)
rel = torch.full_like(out, 3) * (out != 0)
out.backward(rel)
print(" " * 61, show(gather_index))
print(show(src), "---->", show(out))
print(show(src.grad), "<----", show(rel))

# %% [markdown]
# Entry 8 was selected twice and receives $3 + 3 = 6$. `cat` hands each input back the relevance
# of its own slice:

# %%
a, b = leaf([1, 2, 0]), leaf([-1, -2, 0])
c = ops.cat([a, b], dim=0)
rel = torch.full_like(c, 3) * (c != 0)
c.backward(rel)
print(show(a), ":", show(b), "---->", show(c))
print(show(a.grad), " ", show(b.grad), "<----", show(rel))

# %% [markdown]
# `repeat_tensor` repeats entry $j$ `repeats[j]` times (in a graph network: broadcasting a graph's
# global features to its nodes); the copies sum their relevance back:

# %%
a = leaf([7, 2, 0])
repeats = torch.tensor([3, 0, 2], device=device)
out = ops.repeat_tensor(a, repeats, dim=0)
out.backward(unit_relevance(out))
print(show(repeats))
print(show(a), "---->", show(out))
print(show(a.grad), "<----", show(unit_relevance(out)))

# %% [markdown]
# ## ReLU
#
# Relevance passes through an active unit unchanged and stops at an inactive one, whose output is
# zero. LRP treats element-wise activations this way because an activation does not mix inputs:
# the relevance of a unit belongs to the unit's input. (For ReLU this is also its gradient.)

# %%
h = leaf([-1.5, 0.0, 2.0, 0.5])
out = ops.relu(h)
out.backward(unit_relevance(out))
print(show(h), "---->", show(out))
print(show(h.grad), "<----", show(unit_relevance(out)))

# %% [markdown]
# (sec-lost-relevance)=
# ## Lost relevance
#
# Every rule above divides by the output. When an output is exactly zero and still receives
# relevance, there is nothing to divide by: the relevance cannot be split and is dropped. `lrp_lib`
# drops it, never produces a `nan` or an `inf`, and issues a `LostRelevanceWarning` that says how
# much was lost. Here we send $R = 1$ into *every* output of the scatter from before, including
# group 2, whose members sum to zero:

# %%
src = leaf([1, 1, 1, 1, 2, 6, 1, 1, -2])
out = ops.scatter_add(src, index, dim=0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out.backward(torch.ones_like(out))
for w in caught:
    print(
        textwrap.fill(f"{w.category.__name__}: {w.message}", 90, subsequent_indent="    ")
    )
print(
    "relevance in:",
    float(torch.ones_like(out).sum()),
    " relevance of the inputs:",
    round(float(src.grad.sum()), 4),
)

# %% [markdown]
# In a trained network this is rare for sums of many real-valued terms, but common after a ReLU
# (a dead unit outputs exactly zero) and for empty groups of a scatter (a node without incoming
# edges). Where the warning appears, the explanation's total is smaller than the output; the
# conservation checks below tell you how much smaller.
#
# ## Putting things together
#
# A small computation built only from `lrp_lib.teach.ops`: two vectors are added, the sum is aggregated
# into three groups, two linear maps read the groups, and their outputs are added. One
# `.backward()` walks all of it. Epsilon is $10^{-6}$, small against every output here.

# %%
a = leaf([[1, 2, 3, 1, 0]])
b = leaf([[0, 1, 2, 4, 5]])
c = ops.add(a, b)
print(show(a), "+", show(b), "---->", show(c), end="\n\n")

group = torch.tensor([0, 0, 1, 1, 2], device=device)
d = ops.scatter_add(c, group, dim=1)
print(show(group))
print(show(c), "---->", show(d), end="\n\n")

weight_u = torch.tensor([[1, 0, 2], [0, 5, 1]], dtype=torch.float, device=device)
u = ops.linear_eps(d, weight_u)
print(show(weight_u))
print(show(d), "---->", show(u), end="\n\n")

weight_v = torch.tensor([[0, 1, -1], [-4, -2, -3]], dtype=torch.float, device=device)
v = ops.linear_eps(d, weight_v)
print(show(weight_v))
print(show(d), "---->", show(v), end="\n\n")

z = ops.add(u, v)
print(show(u), "+", show(v), "---->", show(z), end="\n\n")

rel_out = unit_relevance(z)
z.backward(rel_out)
print(show(a.grad), " ", show(b.grad), "<----", show(rel_out))
print(
    f"  {float(a.grad.sum()):.4f}  +  {float(b.grad.sum()):.4f}  == "
    f" {float(rel_out.sum()):.4f}"
)

# %% [markdown]
# The total is conserved: $0.3684 + 1.6316 = 2$. Individual relevances can be negative: output 1 of
# the final sum is $4 = 55 - 51$, two large opposite terms, and the input feeding the negative
# weights of `weight_v` receives negative relevance.
#
# Autograd recorded the relevance backward as a graph of our functions. Walking it from the output
# shows the structure: `d` fans out into both linear maps, so its backward node appears twice, and
# autograd sums the relevance arriving along the two paths, exactly as it would sum gradients.

# %%
def backward_graph(fn, depth=0):
    """Print the names of the backward nodes below ``fn`` (no memory addresses)."""
    if fn is None:
        return
    label = type(fn).__name__
    if label == "AccumulateGrad":
        label += f"  (leaf {show(fn.variable)})"
    print("  " * depth + "- " + label)
    for next_fn, _ in fn.next_functions:
        backward_graph(next_fn, depth + 1)


backward_graph(z.grad_fn)

# %% [markdown]
# ## Summary
#
# - LRP redistributes an output's relevance onto the terms that produced it, in proportion to their
#   contribution: $R_i = \frac{z_i}{z} R_z$. Each rule is local to one operation, so each can be the
#   backward of a `torch.autograd.Function`, and `.backward(R)` then computes the whole explanation.
# - Conservation holds through every op here as long as no output is zero, no bias takes a share
#   and $\epsilon$ is 0. A bias's share leaves the explanation, $\epsilon$ absorbs a share of its own;
#   relevance sent into a zero output is lost, and `lrp_lib` warns when that happens.
# - Scatter add and scatter mean split relevance the same way (by the members' values); scatter max
#   gives it all to the winner; copies (index select, cat, repeat) sum their relevance back, which is
#   their gradient.
# - The epsilon rule for linear layers costs one division and one matrix product in the backward, and
#   the same memory as the gradient; a careful implementation keeps the backward repeatable.
#
# ## Exercises
#
# 1. Write `MulRelevance` for the element-wise product $c = a \cdot b$ where $b$ is a constant
#    (a gate or an edge weight). Where should the relevance of $c$ go? Check conservation.
# 2. Replace the mask in `unit_relevance` by plain ones in the composed example. Which outputs lose
#    relevance, and does `LostRelevanceWarning` report the right amount?
# 3. The original notebook's epsilon rule materialises the contributions $x_j w_{kj}$.
#    Estimate its memory for a batch of 1,024 images through a 4096 x 4096 layer, and compare with
#    `linear_eps`.
# 4. `scatter_max` breaks ties by giving everything to the last maximal element. Propose a rule
#    that splits the relevance evenly among ties and implement it as an autograd function.
# 5. Take a bias-free network of `linear_eps` layers with $\epsilon = 0$ and `relu` between them.
#    Show that relevance is conserved exactly whenever the starting relevance is zero on every
#    output that is zero (as `unit_relevance` does). Why does a hidden unit whose pre-activation is
#    zero, or negative, never receive relevance from the layer above? Give an example where the
#    condition fails and say how much relevance is lost. Which step of your proof breaks once the
#    layers have biases?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
