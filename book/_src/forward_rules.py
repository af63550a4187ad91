# %% [markdown]
# # Rules as forward modifications
#
# The first chapter made relevance flow backwards by giving every operation an autograd function whose
# backward *is* an LRP rule. This chapter turns the idea around. Instead of replacing the backward, it
# changes the *forward* so that PyTorch's ordinary backward computes relevance: each operation keeps its
# value, but its gradient becomes the rule's. One plain `.backward()` then gives every tensor
# $t$ its relevance as $t \odot \partial f / \partial t$, input times gradient, the form of the
# efficient mode of LXT, the LRP library for transformers {cite}`achtibat2024attnlrp`. Nothing in the explanation is a Python autograd function, so
# PyTorch's compiler can take the whole explanation over. This is how `LRPExplainer()` runs every rule; the
# relevance functions of the first chapters stay as the reference it is checked against.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes "Hijacking autograd for LRP" and "Convolutions and skip connections". After
# reading it you should be able to
# - derive, for each LRP rule, the gradient that makes input times gradient equal the rule;
# - write a rule as a forward that keeps its value (`lrp_lib.core.modify.keep_value`);
# - check the forward form against the relevance functions of the first chapters, cell by cell;
# - explain a PyG model with one ordinary backward, and say when capturing and `compile=True` pay.
# ```

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets
import numpy as np  # noqa: E402
import torch
import torch.nn.functional as F
from IPython.display import Markdown, display
from myst_nb import glue

from lrp_lib import Explainer, LRPExplainer
from lrp_lib.book.datasets.mutagenicity import mutagenicity
from lrp_lib.book.models import MutagenicityGCN
from lrp_lib.book.pretrained import load_record
from lrp_lib.book.results import load_results, machine_note, results_table
from lrp_lib.core import modify, rules
from lrp_lib.teach import linear_maps, ops

torch.manual_seed(0)
torch.set_num_threads(1)


def show(t, decimals=4):
    """A tensor as a rounded numpy array (+ 0.0 turns -0.0 into 0.0)."""
    return np.round(t.detach().double().numpy(), decimals) + 0.0


# %% [markdown]
# ## Relevance is input times gradient
#
# Every rule of this book gives an input $x$ of an operation the relevance $R_x = x \odot v$, for some
# vector $v$ computed from the relevance of the output. Suppose that at the output $z$ of an operation the
# relevance is $R = z \odot g$, with $g$ the gradient arriving there. If the operation's backward sends
# $v$ to $x$ instead of the true gradient, then $x \odot \mathrm{grad}_x = R_x$ again, and the property
# holds one operation further back. So a rule is a statement about a gradient:
#
# | rule | relevance of the input | gradient the forward must produce |
# | --- | --- | --- |
# | epsilon on $z = Wx + b$ | $x \odot W^\top \frac{R}{z + \epsilon\,\mathrm{sign}(z)}$ | $W^\top\!\big(g \odot \frac{z}{z + \epsilon\,\mathrm{sign}(z)}\big)$: scale $g$ at $z$ |
# | gamma | epsilon on $W + \gamma W^+$ | the gradient of $z' = (W + \gamma W^+) x$, scaled by $z / z'$ |
# | z+ | $x^+ \odot W^{+\top}\frac{R}{z^+} + x^- \odot W^{-\top}\frac{R}{z^+}$ | the gradient of $z^+$, scaled by $z / z^+$; LRP-0 where $z^+ = 0$ |
# | alpha-beta | $\alpha$ times the positive part less $\beta$ times the negative | the two parts' gradients, scaled by $\alpha z / z^+$ and $-\beta z / z^-$ |
# | identity ($y = f(x)$ elementwise) | $R_x = R_y$ | $g \odot y / x$ (for ReLU and products by constants this is the gradient already) |
# | uniform ($y = a \odot b$) | $R_a = R_b = R / 2$ | half the gradient |
# | held constant ($a / b$, attention) | $R_b = 0$ | none into $b$: `b.detach()` |
#
# The one tool needed is a tensor with the value of one tensor and the gradient of another. Because
# `t - t.detach()` is exactly zero, `value.detach() + (t - t.detach()) * c` has `value`'s value to the bit
# and the gradient of `t * c`; `lrp_lib.core.modify.keep_value` writes it as one `addcmul`.

# %%
z = torch.tensor([3.0, -2.0, 0.5], requires_grad=True)
t = z * 10.0  # some other computation of z
y = modify.keep_value(z, t, torch.tensor([0.5, 1.0, 2.0]))
print("value kept to the bit:", torch.equal(y.detach(), z.detach()))
y.sum().backward()
print("gradient:", show(z.grad))  # 10 * c

# %% [markdown]
# ## The first chapter's layer, forwards
#
# [Hijacking autograd for LRP](01_hijacking_autograd.ipynb) explained `x = [4, 8, 0]` through one linear unit with weights `[1, 2, -1]` and found the
# relevance `[4, 16, 0]`, summing to the output 20. The forward form gets it from an ordinary backward:
# compute $z$, keep its value, scale its gradient by $z / (z + \epsilon\,\mathrm{sign}(z))$, start the
# backward with $g = R / z$ at the output, and multiply the input by its gradient.

# %%
x = torch.tensor([[4.0, 8.0, 0.0]], requires_grad=True)
w = torch.tensor([[1.0, 2.0, -1.0]])
out = F.linear(x, w)
y = rules.Epsilon().modify(F.linear, x, w, None, out)
y.backward(modify.share_of(out, out))  # R = out at the output: the gradient R / z = 1
forward_relevance = x.detach() * x.grad

x1 = x.detach().clone().requires_grad_(True)
y1 = ops.linear_eps(x1, w)
y1.backward(y1)  # the first chapter's op: the backward computes relevance
print("forward form:       ", show(forward_relevance))
print("first chapter's op:", show(x1.grad))
assert torch.allclose(forward_relevance, x1.grad)

# %% [markdown]
# ## Every rule of the linear maps, cell by cell
#
# [Convolutions and skip connections](03_convolutions_and_skips.ipynb) applied each rule to any linear map through one autograd function
# (`lrp_lib.teach.linear_maps`), whose backward applies the rule's formula (`lrp_lib.teach.backward_rules`).
# The forward form of each rule is its `modify` method in `lrp_lib.core.rules`, which takes the map itself,
# any function `fn(x, weight, bias)`. On a dense layer with signed inputs and a bias, and on a convolution,
# the two forms agree for every rule:

# %%
gen = torch.Generator().manual_seed(0)
xs = torch.randn(5, 12, generator=gen, dtype=torch.float64)
W = torch.randn(4, 12, generator=gen, dtype=torch.float64)
b = torch.randn(4, generator=gen, dtype=torch.float64)
images = torch.randn(2, 3, 6, 6, generator=gen, dtype=torch.float64)
kernel = torch.randn(4, 3, 3, 3, generator=gen, dtype=torch.float64)
g_dense = torch.randn(5, 4, generator=gen, dtype=torch.float64)


def forward_form(rule, fn, inputs, weight, bias, g):
    leaf = inputs.clone().requires_grad_(True)
    out = fn(leaf, weight, bias)
    rule.modify(fn, leaf, weight, bias, out).backward(g)
    return (leaf * leaf.grad).detach(), (out * g).detach()


def linear_maps_form(rule, apply, inputs, R):
    leaf = inputs.clone().requires_grad_(True)
    apply(leaf).backward(R)
    return leaf.grad


conv = lambda t, k, c: F.conv2d(t, k, c, padding=1)  # noqa: E731
rows = []
warnings.simplefilter("ignore")  # (alpha-beta loses relevance at units without a part of one sign: both forms warn)
for rule in [rules.Epsilon(0.0), rules.Epsilon(0.25), rules.Gamma(0.25), rules.ZPlus(), rules.AlphaBeta(2, 1)]:
    rel, R = forward_form(rule, F.linear, xs, W, b, g_dense)
    dense = float((rel - linear_maps_form(rule, lambda t: linear_maps.linear(t, W, b, rule=rule), xs, R)).abs().max())
    g_conv = torch.randn(2, 4, 6, 6, generator=gen, dtype=torch.float64)
    rel, R = forward_form(rule, conv, images, kernel, None, g_conv)
    conv_diff = float((rel - linear_maps_form(rule, lambda t: linear_maps.conv2d(t, kernel, padding=1, rule=rule),
                                           images, R)).abs().max())
    rows.append({"rule": repr(rule), "dense": dense < 1e-12, "conv": conv_diff < 1e-12})
warnings.resetwarnings()
display(results_table(rows, [("rule", "rule", None), ("dense layer: agree within 1e-12", "dense", None),
                             ("convolution: agree within 1e-12", "conv", None)]))
assert all(r["dense"] and r["conv"] for r in rows)

# %% [markdown]
# ## A graph network, forwards
#
# `LRPExplainer()` runs the model's own `forward` under an interception (a `TorchFunctionMode` that gives
# every torch function on input-dependent tensors its rule), and each rule is emitted as a forward
# modification. The backward is PyTorch's own. The relevance of the biases and stabilisers is read from one
# scalar probe `p`, a one: each operation that can keep relevance adds the zero `(p - p.detach()) * y` to its
# output `y` and subtracts the same of its input, so that the gradient of `p` totals what those operations
# received less what they passed on. Each edge's relevance comes from a hook on every layer's messages:
# messages times their gradient.
#
# On one linear map with a bias under z+, the probe's gradient is the biases' share that the rule's formula
# gives, $\sum_k R_k\, b_k^+ / z_k^+$ for non-negative inputs, and also what the map received less what its
# input got:

# %%
gen = torch.Generator().manual_seed(3)
x_map = torch.rand(5, 6, generator=gen, dtype=torch.float64)  # non-negative, as after a ReLU
W_map, b_map = torch.randn(4, 6, generator=gen, dtype=torch.float64), torch.randn(4, generator=gen, dtype=torch.float64)
g_map = torch.randn(5, 4, generator=gen, dtype=torch.float64)
p = torch.ones((), dtype=torch.float64, requires_grad=True)
leaf = x_map.clone().requires_grad_(True)
x_in = leaf - (p - p.detach()) * leaf.detach()
y = rules.ZPlus().modify(F.linear, x_in, W_map, b_map, F.linear(x_in, W_map, b_map))
y = y + (p - p.detach()) * y.detach()
y.backward(g_map)
R_out, R_in = y.detach() * g_map, leaf.detach() * leaf.grad
z_pos = F.linear(x_map, W_map.clamp(min=0), b_map.clamp(min=0))
assert bool((z_pos > 0).all())
shares = {"the rule's formula": float((R_out * b_map.clamp(min=0) / z_pos).sum()),
          "received less passed on": float(R_out.sum() - R_in.sum())}
for name, value in shares.items():
    print(f"probe's gradient {float(p.grad):.10f}; {name} {value:.10f}")
    assert abs(float(p.grad) - value) < 1e-12

# %% [markdown]
#
# A check that needs no LRP code at all: with the biases set to zero, LRP-0 on a ReLU network is input times
# the gradient of the unmodified model, and the relevance of an edge is the gradient with respect to a mask
# of ones multiplied onto its messages in every layer (PyG's own edge-mask injection, `set_masks`). On a
# molecule of Mutagenicity, with the GCN trained in "Explaining a graph classifier" and its biases zeroed:

# %%
import copy  # noqa: E402

from torch_geometric.explain.algorithm.utils import clear_masks, set_masks  # noqa: E402

dataset = mutagenicity()
model = MutagenicityGCN(dataset.num_features, hidden=64)
model.load_state_dict(load_record("mutagenicity-gcn")["state_dict"])
model.eval()
molecule = dataset[10]
RAW = dict(mode="regression", task_level="graph", return_type="raw")

bias_free = copy.deepcopy(model).double()
with torch.no_grad():
    for name, parameter in bias_free.named_parameters():
        if name.endswith("bias"):
            parameter.zero_()
x = molecule.x.double()
lrp0 = Explainer(bias_free, algorithm=LRPExplainer(rule="z"), explanation_type="model",
                 node_mask_type="attributes", edge_mask_type="object", model_config=RAW)(x, molecule.edge_index)

leaf = x.clone().requires_grad_(True)
edge_ones = torch.ones(molecule.num_edges, dtype=torch.float64, requires_grad=True)
set_masks(bias_free, edge_ones, molecule.edge_index, apply_sigmoid=False)
try:
    bias_free(leaf, molecule.edge_index).sum().backward()
finally:
    clear_masks(bias_free)
checks = {"node relevance against input x gradient": (lrp0.node_relevance, leaf.detach() * leaf.grad),
          "edge relevance against the edge mask's gradient": (lrp0.edge_relevance, edge_ones.grad)}
for name, (got, want) in checks.items():
    difference = float((got - want).abs().max())
    print(f"{name}: largest difference {'below 1e-12' if difference < 1e-12 else difference}")
    assert difference < 1e-12

# %% [markdown]
# With the trained biases and the library's default rule (z+), the explanation is no longer a gradient, but
# it still accounts for the whole logit: the atoms' relevance plus what the biases kept is the model's output.
# The autograd graph behind the explanation, {glue:text}`fw_nodes` nodes, holds only PyTorch's own operations,
# no Python autograd function:

# %%
from lrp_lib.core.composites import get_composite  # noqa: E402
from lrp_lib.explain.mode.forward import ForwardMode  # noqa: E402

explanation = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                        edge_mask_type="object", model_config=RAW)(molecule.x, molecule.edge_index)
logit = float(model(molecule.x, molecule.edge_index).detach())
total = float(explanation.node_relevance.sum() + explanation.bias_relevance)
print(f"logit {logit:.5f}, atoms' relevance + biases' {total:.5f}")
assert abs(total - logit) < 1e-4 * (1 + abs(logit))

mode = ForwardMode(get_composite("zplus"), model)
leaf = molecule.x.clone().requires_grad_(True)
with torch.enable_grad(), mode:
    mode.mark(leaf)
    out = model(leaf, molecule.edge_index)
seen, stack, python = set(), [out.grad_fn], 0
while stack:
    node = stack.pop()
    if node is None or node in seen:
        continue
    seen.add(node)
    python += isinstance(node, torch.autograd.function.BackwardCFunction)
    stack.extend(n for n, _ in node.next_functions)
print(f"{len(seen)} autograd nodes, {python} of them Python autograd functions")
assert python == 0 and len(seen) > 20

# %% tags=["remove-input"]
glue("fw_nodes", len(seen), display=False)
from lrp_lib.explain.capture.cache import ANY_GRAPH_AFTER  # noqa: E402
glue("fw_eager_graphs", ANY_GRAPH_AFTER - 1, display=False)  # graphs explained once, eagerly, before the capture

# %% [markdown]
# ## What it buys: PyTorch's own tools
#
# Because no rule reads tensor data into Python, the modified forward on one graph is an ordinary PyTorch
# program, and PyTorch's tools take it over. `lrp_lib.explain.capture` records it with `make_fx` as a graph
# of ATen operations, runs the part that depends on `edge_index` alone (self-loops, degrees,
# normalisation) once and keeps its results as constants. `LRPExplainer()` does this at the second
# explanation of a graph and runs the captured graph from then on, without the model's Python or the
# rules': the case of a node classifier whose nodes are explained one after another. A model whose own
# Python reads an input-dependent value (a branch on `x`) cannot be captured, as `make_fx` refuses the
# read; it is explained eagerly every time. With `compile=True` the captured graph goes to
# `torch.compile(fullgraph=True)`. For node masks the forward is captured once with symbolic sizes:
# `edge_index` is an input of the captured graph, whose graph part runs on every call, and one compilation
# with dynamic shapes serves graphs of every size, such as the molecules of a data set. With an edge mask it
# is captured and compiled per graph, at the graph's second explanation: a graph explained once runs eagerly,
# as a compilation of its own would not pay. Without `compile`, graphs explained once each get the same
# capture with symbolic sizes, run as it is, once a model has explained {glue:text}`fw_eager_graphs` of them
# eagerly; with an edge mask, the captured graph also finds the input edge of each layer's message. The trained
# GCN over the first molecules of Mutagenicity, each explained once with node and edge masks, against the same
# explanations run eagerly:

# %%
from collections import Counter  # noqa: E402


def molecule_explainer(**options):
    return Explainer(model, algorithm=LRPExplainer(**options), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object", model_config=RAW)


shared, every_time = molecule_explainer(), molecule_explainer(replay=False)
reasons, largest = Counter(), 0.0
for m in dataset[:ANY_GRAPH_AFTER + 8]:
    got, want = shared(m.x, m.edge_index), every_time(m.x, m.edge_index)
    reasons[got.replay_reason] += 1
    for key in ("node_relevance", "edge_relevance", "bias_relevance"):
        largest = max(largest, float((got[key] - want[key]).abs().max()))
for reason, count in reasons.items():
    print(f"{count} molecules: {reason}")
print(f"largest difference from the eager explanations: {'below 1e-6' if largest < 1e-6 else largest}")
assert reasons["captured for any graph"] == 9 and sum(reasons.values()) == ANY_GRAPH_AFTER + 8
assert largest < 1e-6

# %% [markdown]
# What an explanation costs against a gradient is on the [Performance](performance.ipynb) page. Here, the
# three ways the forward rules run side by side: eagerly on every call (`replay=False`, what the first
# explanation of a graph costs), captured (the default, from the second explanation of a graph), and
# compiled. The cost of one node's explanation of a 3-layer GCN (64 hidden units, 8 edges per node) divided by
# that of the plain input gradient, measured by `benchmarks/bench_mechanism.py` with the methods taking turns
# in one process:

# %% tags=["hide-input"]
bench = load_results("mechanism")
graphs = bench["results"]["graphs"]
display(results_table(graphs, [
    ("nodes", "nodes", "{:,}"),
    ("eager", lambda r: r["ratio_to_gradient"]["forward_eager"], "{:.2f}x"),
    ("captured", lambda r: r["ratio_to_gradient"]["forward"], "{:.2f}x"),
    ("compiled", lambda r: r["ratio_to_gradient"]["compiled"], "{:.2f}x"),
    ("by hand", lambda r: r["ratio_to_gradient"]["by_hand"], "{:.2f}x"),
    ("eager, edges", lambda r: r["ratio_to_gradient"]["forward_eager_edges"], "{:.2f}x"),
    ("captured, edges", lambda r: r["ratio_to_gradient"]["forward_edges"], "{:.2f}x"),
    ("compiled, edges", lambda r: r["ratio_to_gradient"]["compiled_edges"], "{:.2f}x"),
]))
display(Markdown(machine_note(bench)))
big = [r for r in graphs if r["nodes"] >= 700]
glue("fw_from", f"{big[0]['nodes']:,}", display=False)
for key in ("forward_eager", "forward", "compiled", "by_hand"):
    glue(f"fw_{key}_min", min(r["ratio_to_gradient"][key] for r in big), display=False)
    glue(f"fw_{key}_max", max(r["ratio_to_gradient"][key] for r in big), display=False)
largest = graphs[-1]
glue("fw_largest", f"{largest['nodes']:,}", display=False)
glue("fw_largest_eager", largest["ratio_to_gradient"]["forward_eager"], display=False)
glue("fw_largest_captured", largest["ratio_to_gradient"]["forward"], display=False)
smallest = graphs[0]
glue("fw_smallest", f"{smallest['nodes']:,}", display=False)
glue("fw_smallest_eager", smallest["ratio_to_gradient"]["forward_eager"], display=False)
glue("fw_smallest_captured", smallest["ratio_to_gradient"]["forward"], display=False)
gap = [r["ratio_to_gradient"]["forward_eager"] - r["ratio_to_gradient"]["forward"] for r in (smallest, largest)]
assert gap[0] > 0 and gap[1] < gap[0]  # the text: the fixed cost of the Python weighs less on the largest graph
# the text: compiled below both other forms
assert all(r["ratio_to_gradient"]["compiled"] < min(r["ratio_to_gradient"]["forward"],
                                                      r["ratio_to_gradient"]["forward_eager"]) for r in big)
glue("fw_smallest_by_hand", smallest["ratio_to_gradient"]["by_hand"], display=False)
by_hand_difference = max(r["by_hand_difference"] for r in graphs)
assert by_hand_difference < 1e-10
glue("fw_by_hand_difference", f"{by_hand_difference:.0e}", display=False)
captured_over_hand = [r["ratio_to_gradient"]["forward"] / r["ratio_to_gradient"]["by_hand"] for r in big]
glue("fw_captured_over_hand_min", min(captured_over_hand), display=False)
glue("fw_captured_over_hand_max", max(captured_over_hand), display=False)
# the text: by hand, z+ costs more than the gradient on every graph, and on the smallest graph the captured
# explanation costs more than the hand-written one
assert all(r["ratio_to_gradient"]["by_hand"] > 1 for r in graphs)
assert smallest["ratio_to_gradient"]["forward"] > smallest["ratio_to_gradient"]["by_hand"]

# %% [markdown]
# From {glue:text}`fw_from` nodes up, an eager explanation costs {glue:text}`fw_forward_eager_min:.2f` to
# {glue:text}`fw_forward_eager_max:.2f` times the gradient, a captured one, without the interception's Python,
# {glue:text}`fw_forward_min:.2f` to {glue:text}`fw_forward_max:.2f` times. The Python is a fixed cost per call,
# so the gap between the two narrows as the graph grows: {glue:text}`fw_smallest_eager:.2f` against
# {glue:text}`fw_smallest_captured:.2f` on {glue:text}`fw_smallest` nodes, {glue:text}`fw_largest_eager:.2f`
# against {glue:text}`fw_largest_captured:.2f` on {glue:text}`fw_largest`. Compiled, its elementwise work fused, an explanation costs
# {glue:text}`fw_compiled_min:.2f` to {glue:text}`fw_compiled_max:.2f` times the gradient. A rule that splits
# by sign (z+, the default) computes the positive and the negative contributions beside the value, and its
# backward goes through each of them, in every form.
#
# How much of that is the rule's own arithmetic? The *by hand* column is the same node relevance written for
# this one GCN without the library (`by_hand` in the benchmark): each layer one matrix product with the weights
# $W$ and $W^+$ stacked, $z$ and $z^+$ combined with constant weights, PyG's own `propagate` for the messages,
# $\epsilon$ on the aggregation and the bias sum as the default composite puts it, and nothing else: no
# interception, no accounts, no checks. In float64 its relevance differs from `LRPExplainer()`'s by at most
# {glue:text}`fw_by_hand_difference` of the largest relevance. It costs more than the gradient on every graph
# measured, {glue:text}`fw_by_hand_min:.2f` to {glue:text}`fw_by_hand_max:.2f` times from {glue:text}`fw_from`
# nodes up, and there the captured explanation, with its bias relevance, accounts and checks on top, costs
# {glue:text}`fw_captured_over_hand_min:.2f` to {glue:text}`fw_captured_over_hand_max:.2f` times the
# hand-written one. Run eagerly, z+'s own arithmetic costs more than a gradient; fusing its elementwise passes,
# as the compiled form does, is what brings it down. On the smallest graph the hand-written rule costs
# {glue:text}`fw_smallest_by_hand:.2f` times the gradient and the captured explanation
# {glue:text}`fw_smallest_captured:.2f` times: at that size the difference is the library's fixed work per call.
#
# ## Summary
#
# - With the relevance of every tensor read as $t \odot \partial f/\partial t$, each LRP rule is a change
#   of one operation's gradient; the forward keeps its value (`keep_value`), so the model computes what it
#   always computes.
# - Each rule of `lrp_lib.core.rules` is declared once, with its formula, as a forward modification (`modify`)
#   of any linear map; chapter 3's backward form of the same formula agrees with it on dense layers,
#   convolutions and a trained GCN.
# - `LRPExplainer()` explains any PyG model with one ordinary backward; node, edge and
#   bias relevance come from the inputs' gradients, hooks on the messages and one scalar probe.
# - An explanation made of PyTorch operations is PyTorch's to run: the second explanation of a graph
#   captures it with `make_fx`, and `compile=True` hands it to `torch.compile`, once for graphs of every size
#   (node masks) or once per graph explained again (edge masks).
#
# ## Exercises
#
# 1. Write the gamma rule's forward by hand for the first chapter's layer with $\gamma = 1$ and check it against
#    chapter 3's `linear_maps.linear(x, w, rule=rules.Gamma(1.0))`.
# 2. `modify.HOMOGENEOUS` lists the functions whose gradient is already the identity rule. Show that
#    `relu6` cannot be among them: find an input where $f(x)/x$ differs from $f'(x)$.
# 3. Explain a GAT with `Composite(attention="cp")`. Where does the relevance of the
#    attention coefficients go, and how does the forward express it?
# 4. The z+ rule falls back to LRP-0 for a unit without a positive contribution. Build a unit where that
#    happens and check, with `modify.keep_value`, that its input gets $x \odot W^\top (R / z)$.
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
