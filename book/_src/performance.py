# %% [markdown]
# # Performance
#
# What does an explanation cost? In `lrp_lib` the relevance of a whole network is one backward pass
# through relevance ops instead of gradient ops, so the natural yardstick is the gradient itself: how
# much longer does the relevance backward take than the plain autograd backward of the same
# computation, and how much more memory does it need? This page collects the answers that the
# scripts in `benchmarks/` measure, for the relevance ops of the chapter
# [Hijacking autograd](01_hijacking_autograd.ipynb), the Graph Network layers, the convolutions and
# skip connections, three implementations of LRP, and the explainers of the chapter
# [Explaining graph neural networks](05_explaining_gnns.ipynb).
#
# Every table and figure on this page is drawn from the results files that the scripts write,
# `benchmarks/results/<name>.json`, and every figure the text names is read from them by a cell. Rerun
# a script and rebuild this page (`python tools/nb.py book/_src/performance.py`) to see your machine's.

# %% tags=["hide-input"]
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from myst_nb import glue

from lrp_lib.book.plotting import BOOK_WIDTH, book_style
from lrp_lib.book.results import load_results, machine_note, results_table

book_style()
REPO = globals().get(
    "REPOSITORY"
)  # defined by the Colab cell; elsewhere the files are found locally
ops_b = load_results("ops", repository=REPO)
graph_b = load_results("graph", repository=REPO)
conv_b = load_results("conv", repository=REPO)
impl_b = load_results("implementations", repository=REPO)
expl_b = load_results("explainers", repository=REPO)
nodes_b = load_results("nodes", repository=REPO)
nodes_gpu_b = load_results("nodes-cuda", repository=REPO)
scaling_b = load_results("scaling", repository=REPO)
profile_b = load_results("profile_explain", repository=REPO)
molecules_b = load_results("molecules", repository=REPO)
scaling_gpu_b = load_results("scaling-cuda", repository=REPO)
molecules_gpu_b = load_results("molecules-cuda", repository=REPO)
memory_b = load_results("explain_memory", repository=REPO)
profile_malloc_b = load_results("profile_explain_malloc", repository=REPO)
benches = [ops_b, graph_b, conv_b, impl_b, expl_b, nodes_b, nodes_gpu_b, scaling_b, profile_b, molecules_b,
           scaling_gpu_b, molecules_gpu_b]


def g(key, value, fmt="{:.2f}"):
    """Glue a value for the text (as formatted text)."""
    glue(key, fmt.format(value) if fmt else value, display=False)

# %% [markdown]
# ## How the figures are measured
#
# - **Side by side.** Each script runs the relevance computation and what it is compared with (the
#   plain gradient of the same computation, another implementation, another explainer) in one
#   process, taking turns run by run, and reports the median of each and their **ratio**. A machine's
#   load changes from second to second; taking turns lets it fall on both sides alike, so the ratios
#   are much steadier than the absolute times, which depend on the machine.
# - **One thread.** The scripts run PyTorch with one intra-op thread unless told otherwise
#   (`--threads`). On a small machine shared with other work, a thread pool's synchronisation adds a
#   scheduling delay to every small operation, and a relevance backward consists of many small
#   element-wise operations: with several threads the comparison would measure the scheduler.
# - **Memory, two ways.** *Saved for backward* counts the distinct storages that autograd keeps between
#   forward and backward (with `torch.autograd.graph.saved_tensors_hooks`; inputs and parameters
#   excluded). *Peak RSS increase* runs one forward and backward in a fresh process and takes the peak
#   resident size (`VmHWM` on Linux) minus the size before the forward, so it counts every temporary
#   as well; this is what runs out first.
# - **Where.** Each results file records the machine, the command and the load average when the run
#   started:

# %% tags=["hide-input"]
results_table([{"benchmark": b["benchmark"], **b["machine"]} for b in benches], [
    ("file", lambda r: f"`{r['benchmark']}.json`"),
    ("date", "date"),
    ("CPU", "cpu"),
    ("cores", "cores", "{}"),
    ("PyTorch threads", "torch_threads", "{}"),
    ("kernels", "cpu_capability"),
    ("load average", "load_average_1min", "{:.1f}"),
])

# %% [markdown]
# The machine's load average is the number of processes that wanted a core, averaged over the last
# minute; above the number of cores, the run shared its core with other work, and single times
# vary by tens of percent. The ratios are the figures to compare.
#
# ## Relevance against gradient at a glance
#
# The figure gathers the ratios of the sections below: for each relevance computation, its time
# (forward and backward, or backward alone where that is what was measured) and its peak memory,
# divided by those of the plain gradient of the same computation. A bar of 1 costs as much as the gradient.

# %% tags=["hide-input"]
ops_rows = {r["case"]: r for r in ops_b["results"]}
graph_rows = {r["measure"]: r for r in graph_b["results"]}
conv_rows = {(r["table"], r["variant"]): r for r in conv_b["results"]}
op_cases = [
    r for r in ops_b["results"] if r.get("group") is None
]  # the sweep and the pass-by-pass account have their own sections
sweep = [r for r in ops_b["results"] if r.get("group") == "width_sweep"]
plain_ops = [r for r in op_cases if r["case"] != "original_eps"]
summary = [
    (
        r["description"].replace(",000,000", "M").replace(",000", "k"),
        r["fwd_bwd_ratio"],
        r["memory_ratio"],
    )
    for r in plain_ops
]
summary.append(
    (
        "Graph Network, 4 blocks (backward)",
        graph_rows["backward_time"]["ratio"],
        graph_rows["peak_rss_increase"]["ratio"],
    )
)
summary += [
    (
        f"residual CNN, {v} rule",
        conv_rows["residual", v]["time_ratio"],
        conv_rows["residual", v]["rss_ratio"],
    )
    for v in ("epsilon", "gamma", "z+")
]

fig, axes = plt.subplots(1, 2, figsize=(BOOK_WIDTH, 3.6), sharey=True)
ypos = np.arange(len(summary))[::-1]
for ax, col, title in [
    (axes[0], 1, "time / gradient's time"),
    (axes[1], 2, "peak memory / gradient's"),
]:
    values = [s[col] for s in summary]
    ax.barh(
        ypos,
        values,
        color=["tab:blue"] * len(plain_ops) + ["tab:green"] + ["tab:orange"] * 3,
    )
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel(title)
    for y, v in zip(ypos, values):
        ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.25)
axes[0].set_yticks(ypos, [s[0] for s in summary], fontsize=8)
fig.suptitle(
    "Relevance against gradient: ops (blue), Graph Network (green), CNN (orange)",
    fontsize=10,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The relevance ops (`lrp_lib.teach.ops`)
#
# `benchmarks/bench_ops.py` compares each op's relevance backward with the plain autograd backward of
# the same computation: `ops.linear_eps` with `torch.nn.functional.linear`, the scatter ops with the
# plain scatters of `lrp_lib.teach.scatter`. *Backward ratio* times only `.backward()`; *fwd+bwd ratio*
# times forward and backward, which is what computing an explanation costs. The memory columns are the
# peak RSS increase of one forward and backward, each in a fresh process. The last row compares the
# epsilon rule of the original notebook *Hijacking autograd for LRP*, which builds the N x in x out
# tensor of contributions, with `linear_eps`, at a size where that tensor still fits.

# %% tags=["hide-input"]
display(Markdown(machine_note(ops_b)))
print(f"float32, median of {ops_b['settings']['repeat']} interleaved runs")
results_table(op_cases, [
    ("case", "description"),
    ("backward ratio", "backward_ratio", "{:.2f}x"),
    ("fwd+bwd ratio", "fwd_bwd_ratio", "{:.2f}x"),
    ("memory ratio", "memory_ratio", "{:.2f}x"),
    ("relevance bwd (ms)", "relevance_backward_ms", "{:.1f}"),
    ("gradient bwd (ms)", "gradient_backward_ms", "{:.1f}"),
])

# %% tags=["hide-input"]
scatters = [r for r in plain_ops if r["case"].startswith("scatter")]
mem = [r["memory_ratio"] for r in plain_ops if r["memory_ratio"] is not None]
g("ops_mem_min", min(mem))
g("ops_mem_max", max(mem))
g("ops_scatter_fb_min", min(r["fwd_bwd_ratio"] for r in scatters))
g("ops_scatter_fb_max", max(r["fwd_bwd_ratio"] for r in scatters))
g("ops_scatter_b_min", min(r["backward_ratio"] for r in scatters))
g("ops_scatter_b_max", max(r["backward_ratio"] for r in scatters))
for case in ("linear_eps", "linear_eps_wide"):
    g(f"ops_{case}_b", ops_rows[case]["backward_ratio"])
    g(f"ops_{case}_fb", ops_rows[case]["fwd_bwd_ratio"])
orig = ops_rows["original_eps"]
g("ops_orig_mem", orig["memory_ratio"], "{:.0f}")
g("ops_orig_time", orig["fwd_bwd_ratio"], "{:.0f}")

# %% [markdown]
# - **Memory.** The relevance ops need {glue:text}`ops_mem_min` to {glue:text}`ops_mem_max` times the
#   gradient's peak memory. `linear_eps` keeps its input, weight and bias, as the gradient of a
#   trainable layer does, and recomputes its output in backward; its temporaries there, the
#   output and the stabilised denominator (reused for the division), hold one block of rows each
#   on the CPU (about 1 MiB), and the result is its only N-row tensor. The original notebook's three-dimensional version needs
#   {glue:text}`ops_orig_mem` times the memory of `linear_eps` and {glue:text}`ops_orig_time` times
#   its time.
# - **Scatter ops.** Forward plus backward, they cost {glue:text}`ops_scatter_fb_min` to
#   {glue:text}`ops_scatter_fb_max` times the plain scatters; backward alone,
#   {glue:text}`ops_scatter_b_min` to {glue:text}`ops_scatter_b_max` times, because the plain backward
#   of a scatter is a single cheap gather, while the relevance backward is that gather plus a
#   multiplication by the inputs (and, for `scatter_mean`, a division by the group sizes).
# - **`linear_eps`.** At 64 features the relevance backward takes {glue:text}`ops_linear_eps_b` times the
#   gradient's ({glue:text}`ops_linear_eps_fb` times forward plus backward); at 512 features
#   {glue:text}`ops_linear_eps_wide_b` times ({glue:text}`ops_linear_eps_wide_fb` times). The gradient of
#   $xW^\top$ with respect to $x$ is one matrix product; the epsilon rule needs two, the recomputed
#   output $z$ (next section) and $sW$, and element-wise passes over the N x out output (the
#   stabiliser $z + \epsilon\,\mathrm{sign}(z)$, the division $R/z$, the product with $x$, a NaN
#   and Inf check). `linear_eps` runs its backward over blocks of rows small enough to stay in the
#   cache, so that the element-wise passes cost little memory traffic; where the time goes is
#   measured pass by pass below. With $\epsilon > 0$ no denominator can be zero, so no zero outputs
#   are counted.
#
# ### `linear_eps` across widths
#
# The same comparison at widths from {glue:text}`sweep_narrowest` to {glue:text}`sweep_widest` features
# (in = out; the table gives the rows at each width, as many as keep the narrow and the wide cases of
# comparable size); the weights are frozen, so the gradient
# is the gradient to the input alone. *Saved bytes* are the bytes autograd keeps for backward
# (the weight left out). The epsilon rule
# $R_x = x \odot \big((R / (z + \epsilon\,\mathrm{sign}(z)))\,W\big)$ needs both $x$ and $z$;
# `linear_eps` keeps $x$ and recomputes $z = xW^\top + b$ in backward (the default,
# `recompute=True`), while `linear_eps(..., recompute=False)` keeps $z$ too and saves that matrix
# product. Both take their turn in the same runs; the last two columns are those of
# `recompute=False`. The gradient to $x$ alone keeps no row at all (its backward is $R\,W$), so the
# saved-bytes ratio is taken against the gradient of a trainable weight, which keeps $x$, as in
# training.

# %% tags=["hide-input"]
print(
    f"float32, median of {ops_b['settings']['repeat']} interleaved runs,"
    f" {ops_b['machine']['torch_threads']} thread(s)"
)
results_table(sweep, [
    ("width", "width", "{}"),
    ("rows", "rows", "{:,}"),
    ("fwd+bwd ratio", "fwd_bwd_ratio", "{:.2f}x"),
    ("backward ratio", "backward_ratio", "{:.2f}x"),
    ("saved bytes ratio", "saved_bytes_ratio", "{:.2f}x"),
    ("z kept: fwd+bwd ratio", "saved_output_fwd_bwd_ratio", "{:.2f}x"),
    ("z kept: saved bytes ratio", "saved_output_saved_bytes_ratio", "{:.2f}x"),
])

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(BOOK_WIDTH * 0.8, 2.8))
widths = [r["width"] for r in sweep]
ax.plot(widths, [r["fwd_bwd_ratio"] for r in sweep], "o-", label="forward + backward")
ax.plot(widths, [r["backward_ratio"] for r in sweep], "s--", label="backward alone")
ax.plot(widths, [r["saved_output_fwd_bwd_ratio"] for r in sweep], "^:", color="tab:gray",
        label="forward + backward, recompute=False")
ax.axhline(1.0, color="black", lw=0.8)
ax.set_xscale("log", base=2)
ax.set_xticks(widths, [str(w) for w in widths])
ax.set_xlabel("features (in = out)")
ax.set_ylabel("linear_eps time / gradient's")
ax.set_ylim(0, max(r["backward_ratio"] for r in sweep) * 1.15)
ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

g("sweep_fb_min", min(r["fwd_bwd_ratio"] for r in sweep))
g("sweep_fb_max", max(r["fwd_bwd_ratio"] for r in sweep))
g("sweep_fb_widest", sweep[-1]["fwd_bwd_ratio"])
g("sweep_widest", sweep[-1]["width"], "{}")
g("sweep_narrowest_fb", sweep[0]["fwd_bwd_ratio"])
g("sweep_narrowest", sweep[0]["width"], "{}")
g("sweep_saved", max(r["saved_bytes_ratio"] for r in sweep))
g("sweep_kept_saved", max(r["saved_output_saved_bytes_ratio"] for r in sweep))
g("sweep_kept_fb_min", min(r["saved_output_fwd_bwd_ratio"] for r in sweep))
g("sweep_kept_fb_max", max(r["saved_output_fwd_bwd_ratio"] for r in sweep))

# %% [markdown]
# Forward plus backward, `linear_eps` takes {glue:text}`sweep_fb_min` to {glue:text}`sweep_fb_max`
# times the gradient's time: {glue:text}`sweep_narrowest_fb` times at {glue:text}`sweep_narrowest`
# features and {glue:text}`sweep_fb_widest` times at {glue:text}`sweep_widest`. The overhead is
# per element of
# the output, not per multiply-add: the stabiliser, the division, the product with $x$ and the NaN and
# Inf check (a read-only `torch.aminmax`) run block by block over the rows, and the recomputation of $z$
# adds a matrix product as large as the gradient's.
#
# The saved bytes are {glue:text}`sweep_saved` times the gradient's at every width: like the
# gradient of a trainable layer, `linear_eps` keeps $x$ alone. With `recompute=False` they are
# {glue:text}`sweep_kept_saved` times, $(\text{in} + \text{out}) / \text{in}$, and forward plus
# backward takes {glue:text}`sweep_kept_fb_min` to {glue:text}`sweep_kept_fb_max` times the
# gradient's time. Keeping $z$ buys one matrix product
# per layer with N x out numbers per layer held from forward to backward: the choice between time and
# memory of gradient checkpointing, for one layer.
#
# ### Where the time of `linear_eps` goes
#
# The same script times each pass of forward plus backward on its own, at N = 100,000 rows and
# 64 -> 64 features, over whole tensors (each pass reading and writing main memory), with the bytes
# it reads and writes. The methods that run a pass are listed beside it; the second table sums them
# per method and sets them beside the measured forward plus backward of the same rounds (wall clock,
# and CPU time of the thread, which other processes on the machine do not stretch). *Bytes to
# memory* is the traffic of `linear_eps` as it runs, in blocks: in backward it reads $x$ and $R$
# (and $z$, when kept) and writes $R_x$. *Matrix products only* is the time of the products and the
# seed alone, divided by the gradient's: what a fused kernel that did every element-wise step inside
# the products would take.

# %% tags=["hide-input"]
floor = [r for r in ops_b["results"] if r.get("group") == "floor"]
floor_passes = [r for r in floor if r["case"] == "linear_eps_floor_pass"]
floor_totals = {r["method"]: r for r in floor if r["case"] == "linear_eps_floor_total"}
print(f"float32, median of {ops_b['settings']['repeat']} interleaved rounds")
display(results_table(floor_passes, [
    ("pass", "pass"),
    ("MB read", lambda r: r["bytes_read"] / 1e6, "{:.1f}"),
    ("MB written", lambda r: r["bytes_written"] / 1e6, "{:.1f}"),
    ("ms", "ms", "{:.2f}"),
    ("run by", lambda r: ", ".join(r["methods"])),
]))
display(results_table(list(floor_totals.values()), [
    ("method", "method"),
    ("passes", "passes", "{}"),
    ("matrix products", "matrix_products", "{}"),
    ("MB, pass by pass", lambda r: r["bytes_moved"] / 1e6, "{:.1f}"),
    ("MB to memory", lambda r: r["bytes_memory"] / 1e6, "{:.1f}"),
    ("measured ratio", "measured_ratio", "{:.2f}x"),
    ("CPU-time ratio", "measured_cpu_ratio", "{:.2f}x"),
    ("matrix products only", "fused_ratio", "{:.2f}x"),
]))
lrp_floor = floor_totals["linear_eps"]
kept_floor = floor_totals["linear_eps_recompute_false"]
grad_floor = floor_totals["gradient"]
g("floor_grad_passes", grad_floor["passes"], "{}")
g("floor_lrp_passes", lrp_floor["passes"], "{}")
g("floor_bytes", lrp_floor["bytes_ratio"])
g("floor_bytes_memory", lrp_floor["bytes_memory_ratio"])
g("floor_fused", lrp_floor["fused_ratio"])
g("floor_cpu", lrp_floor["measured_cpu_ratio"])
g("floor_kept_fused", kept_floor["fused_ratio"])
g("floor_kept_cpu", kept_floor["measured_cpu_ratio"])

# %% [markdown]
# The gradient makes {glue:text}`floor_grad_passes` passes over N-row tensors (the forward and
# backward matrix products and the seed); `linear_eps` makes {glue:text}`floor_lrp_passes`, three of
# them matrix products. Pass by pass over whole tensors they would move {glue:text}`floor_bytes` times
# the gradient's bytes; in blocks, `linear_eps` moves {glue:text}`floor_bytes_memory` times. The
# matrix products alone, timed one by one, take {glue:text}`floor_fused` times the gradient's time:
# the third product, the recomputation of $z$, is work that any implementation keeping only $x$
# does, fused or not, while the element-wise passes cost little once they run on blocks in the
# cache. Measured whole, in CPU time, forward plus backward takes {glue:text}`floor_cpu` times the
# gradient's; single timings on a loaded machine vary by tens of percent (the load average is in
# the table at the top), so the whole and the sum of its parts need not agree. With
# `recompute=False` the products alone take {glue:text}`floor_kept_fused` times and the measured
# forward plus backward {glue:text}`floor_kept_cpu` times.
#
# ## Graph Network layers
#
# `benchmarks/bench_graph.py` runs a Graph Network of four blocks (each block: `EdgeLinear` on edge,
# sender, receiver and global features, ReLU; `NodeLinear` on node, incoming (sum) and global
# features, ReLU; `GlobalLinear` on node, edge (sum) and global features, ReLU) on one random graph,
# float32. The same model runs outside and inside `lrp_lib.teach.relevance()`; the backward starts from the
# global output. The gradient backward also computes the weight gradients, as in training; the
# relevance backward gives the weights none.

# %% tags=["hide-input"]
s = graph_b["settings"]
display(Markdown(machine_note(graph_b)))
print(
    f"{s['blocks']} blocks, {s['nodes']:,} nodes, {s['edges']:,} edges, {s['features']}"
    f" features, median of {s['repeats']} interleaved runs"
)
results_table(
    graph_b["results"],
    [
        ("measure", lambda r: f"{r['label']} ({r['unit']})"),
        (
            "gradient",
            lambda r: r["gradient"],
            lambda v: f"{v:,.2f}" if v < 100 else f"{v:,.0f}",
        ),
        (
            "relevance",
            lambda r: r["relevance"],
            lambda v: f"{v:,.2f}" if v < 100 else f"{v:,.0f}",
        ),
        ("ratio", "ratio", "{:.2f}x"),
    ],
)

# %% tags=["hide-input"]
for key in ("backward_time", "forward_time", "saved_for_backward", "peak_rss_increase"):
    g(f"graph_{key}", graph_rows[key]["ratio"])
peak, kept = (
    graph_rows["peak_rss_increase"]["ratio"],
    graph_rows["saved_for_backward"]["ratio"],
)
g(
    "graph_peak_vs_saved",
    "less than" if peak < kept else "as much as" if peak == kept else "more than",
    None,
)

# %% [markdown]
# The relevance backward takes {glue:text}`graph_backward_time` times the gradient's time, and the
# peak memory of forward and backward is {glue:text}`graph_peak_rss_increase` times the gradient's.
# The bytes kept for backward are {glue:text}`graph_saved_for_backward` times: each linear layer keeps
# its own output $z$ (the denominator of the epsilon rule), which the gradient no longer needs once the
# ReLU has run; that is one edges-by-features tensor per `EdgeLinear`. The peak, which also counts
# the temporaries of forward and backward, grows {glue:text}`graph_peak_vs_saved` the saved bytes.
#
# How: in relevance mode each Graph Network layer is one `torch.autograd.Function`
# (`EdgeLinearRelevance`, `NodeLinearRelevance`, `GlobalLinearRelevance`) whose backward is the
# epsilon rule of the layer as one linear map of all its inputs, $R_a = a \odot (s\,W)$ routed
# through the copies and aggregations, with $s = R / (z + \epsilon\,\mathrm{sign}(z))$. It saves only
# the inputs (alive anyway), the index tensors, its output and, for a max aggregation, the argmax; its
# forward sums the terms in place. With $\epsilon = 0$ it gives exactly the relevance of the layer
# composed from `lrp_lib.teach.ops` (`tests/teach/test_graph.py` checks this for every configuration). That
# composition, the teaching version of the chapter [The autograd trick for graph
# layers](02_graph_layers.ipynb), keeps far more: every proportional `ops.add` keeps both of its
# terms and their sum.
#
# ## Convolutions and skip connections (`lrp_lib.teach.linear_maps`)
#
# `benchmarks/bench_conv.py` uses the residual CNN of the chapter [Convolutions and skip
# connections](03_convolutions_and_skips.ipynb) (a 3x3 convolution to 24 channels, two residual blocks
# with average pooling between them, global average pooling, a dense layer; untrained, seeded,
# float32) on a batch of scikit-learn's 8x8 digits. Each row is forward plus backward from the
# predicted logit: the ordinary network's gradient, or the relevance network with the rule on every
# convolution (epsilon on pooling and the dense layer). The second table compares `lrp_lib`'s epsilon
# rule with `captum.attr.LRP` (epsilon, its default) on the same CNN without skip connections, which
# Captum cannot treat. Captum keeps its activations outside autograd, so it has no *saved* figure.

# %% tags=["hide-input"]
display(Markdown(machine_note(conv_b)))
print(
    f"batch of {conv_b['settings']['batch']} digits, median of"
    f" {conv_b['settings']['repeats']} interleaved runs"
)
conv_columns = [
    ("variant", "variant"),
    ("forward + backward (ms)", "time_ms", "{:.1f}"),
    ("time ratio", "time_ratio", "{:.2f}x"),
    ("saved for backward (KiB)", "saved_kib", "{:,.0f}"),
    ("saved ratio", "saved_ratio", "{:.2f}x"),
    ("peak RSS (MiB)", "peak_rss_mib", "{:.1f}"),
    ("RSS ratio", "rss_ratio", "{:.2f}x"),
]
display(Markdown("**Residual CNN: relevance against the gradient**"))
display(
    results_table(
        [r for r in conv_b["results"] if r["table"] == "residual"], conv_columns
    )
)
display(Markdown("**CNN without skips: `lrp_lib` against Captum**"))
display(
    results_table([r for r in conv_b["results"] if r["table"] == "captum"], conv_columns)
)

# %% tags=["hide-input"]
for v, key in (("epsilon", "eps"), ("gamma", "gamma"), ("z+", "zplus")):
    g(f"conv_{key}_time", conv_rows["residual", v]["time_ratio"])
    g(f"conv_{key}_rss", conv_rows["residual", v]["rss_ratio"])
g("conv_saved", conv_rows["residual", "epsilon"]["saved_ratio"])
captum = conv_rows["captum", "captum LRP"]
g("conv_captum_time", captum["time_ratio"])
g("conv_captum_rss", captum["rss_ratio"])

# %% [markdown]
# - **Time.** The epsilon rule costs {glue:text}`conv_eps_time` times the gradient's time: its backward
#   skips the weight gradients but adds, per layer, the division by the saved output and the product
#   with the input, and every relevance op is a Python autograd function. Gamma
#   ({glue:text}`conv_gamma_time` times) and z+ ({glue:text}`conv_zplus_time` times) also run the map
#   once with the modified weights in backward, as their denominators need.
# - **Memory.** Every relevance op saves its output $z$, the pre-activation, beside its input, which the
#   gradient does not need: autograd keeps {glue:text}`conv_saved` times the bytes. The peak resident
#   memory, which also counts the temporaries of both passes, is {glue:text}`conv_eps_rss` times the
#   gradient's for epsilon and {glue:text}`conv_zplus_rss` times for z+. Both are O(input + output) per
#   layer: no contribution tensor is built (the tests check that a convolution saves exactly its
#   input, weight, bias and output).
# - **Captum.** `captum.attr.LRP` runs two forwards and a backward with hooks and takes
#   {glue:text}`conv_captum_time` times the time of `lrp_lib`'s forward and backward. Its peak memory
#   is {glue:text}`conv_captum_rss` times ours: its backward is the ordinary gradient's with hooks on
#   the tensors, so autograd keeps only what the gradient keeps. The chapter on convolutions shows that
#   both give the same relevance once their conventions are matched.
#
# ## Three implementations of LRP: relprop hooks, JAX/Flax, the autograd trick
#
# `benchmarks/bench_implementations.py` times one relevance pass (forward included) through an MLP of
# bias-free layers with ReLU, for the same input and output relevance, in the three implementations of
# the chapter [Hooks, relprop and JAX](04_hooks_relprop_jax.ipynb), and the plain gradient of the same
# MLP. The process is pinned to one core, so that JAX's own thread pool gets no more than PyTorch's
# single thread. The last column is the largest |float32 - float64| of each result, relative to the
# largest relevance (the epsilon rule with a small epsilon is ill-conditioned where some
# pre-activation is near zero; all implementations are affected alike).

# %% tags=["hide-input"]
s = impl_b["settings"]
display(
    Markdown(
        machine_note(impl_b)
        + f" MLP: {s['layers']} bias-free layers of {s['width']}, ReLU, batch"
        f" {s['batch']:,}, float32, median of {s['repeats']} interleaved runs, JAX"
        f" {s['jax']}."
    )
)
results_table(impl_b["results"], [
    ("implementation", "label"),
    ("time (ms)", "time_ms", "{:,.1f}"),
    ("/ plain gradient", "ratio_to_gradient", "{:.2f}x"),
    ("/ autograd trick", "ratio_to_autograd_trick", "{:.2f}x"),
    ("max deviation from float64", "max_deviation_float64", "{:.1e}"),
])

# %% tags=["hide-input"]
impls = ["autograd trick", "relprop hooks", "JAX/Flax eager", "JAX/Flax jit"]
by = {(r["rule"], r["implementation"]): r for r in impl_b["results"]}
fig, ax = plt.subplots(figsize=(BOOK_WIDTH * 0.8, 2.8))
width = 0.38
for k, (rule, label) in enumerate(
    [("epsilon", "epsilon"), ("alpha1_beta0", r"$\alpha=1, \beta=0$")]
):
    values = [by[rule, name]["ratio_to_gradient"] for name in impls]
    bars = ax.bar(np.arange(len(impls)) + (k - 0.5) * width, values, width, label=label)
    ax.bar_label(bars, fmt="%.2f", fontsize=8)
ax.axhline(1.0, color="black", lw=0.8)
ax.set_xticks(np.arange(len(impls)), impls)
ax.set_ylabel("time / plain gradient's")
ax.legend(title="rule", frameon=False)
ax.set_ylim(0, max(r["ratio_to_gradient"] for r in impl_b["results"]) * 1.2)
fig.tight_layout()
plt.show()

for rule in ("epsilon", "alpha1_beta0"):
    for name in impls:
        g(
            f"impl_{rule}_{name.replace('/', '').replace(' ', '_').lower()}",
            by[rule, name]["ratio_to_gradient"],
        )
devs = [
    r["max_deviation_float64"]
    for r in impl_b["results"]
    if r["max_deviation_float64"] is not None
]
g("impl_max_dev", max(devs), "{:.1e}")

# %% [markdown]
# Relative to the plain gradient, the epsilon rule takes {glue:text}`impl_epsilon_autograd_trick` times
# its time with the autograd trick, {glue:text}`impl_epsilon_relprop_hooks` times with relprop hooks,
# {glue:text}`impl_epsilon_jaxflax_eager` times in eager JAX and {glue:text}`impl_epsilon_jaxflax_jit`
# times in jit-compiled JAX; alpha-beta with $\alpha = 1, \beta = 0$ takes
# {glue:text}`impl_alpha1_beta0_autograd_trick`, {glue:text}`impl_alpha1_beta0_relprop_hooks`,
# {glue:text}`impl_alpha1_beta0_jaxflax_eager` and {glue:text}`impl_alpha1_beta0_jaxflax_jit` times.
# Where the differences come from: `jax.jit` hands the whole pass to XLA, which fuses the clamps,
# divisions and products into a few kernels; relprop hooks run every module's forward a second time,
# and `torch.autograd.grad` builds and walks a fresh graph for every layer (twice per layer for
# alpha-beta); the autograd trick runs one custom backward per op. Alpha-beta needs two linear maps
# per part, positive and negative inputs and weights, where epsilon needs one. The float32 results
# deviate from float64 by at most {glue:text}`impl_max_dev` of the largest relevance.
#
# ## Explainers on Mutagenicity
#
# `benchmarks/bench_explainers.py` loads the trained GCN of the chapter [Explaining graph neural
# networks](05_explaining_gnns.ipynb) and explains every test mutagen that contains an NO2 or NH2
# group with each method through its usual API (PyG's `Explainer`, Captum), one molecule at a time,
# the methods interleaved molecule by molecule so that the load of the machine falls on all alike.
# Ground-truth AUROC is the mean per-molecule `roc_auc_score` of the edge scores against the NO2 and
# NH2 bonds; fidelity is PyG's `fidelity` for each method's top-k edges (k = the number of
# ground-truth edges).

# %% tags=["hide-input"]
res = expl_b["results"]
display(
    Markdown(
        machine_note(expl_b)
        + f" {res['graphs']} molecules, GNNExplainer with {res['gnnexplainer_epochs']}"
        f" epochs, model test accuracy {res['test_accuracy']:.3f}."
    )
)
rows = [{"method": name, **m} for name, m in res["methods"].items()]
rows.append(
    {
        "method": "the ground truth itself",
        "auroc": 1.0,
        "fidelity_plus": res["ground_truth_fidelity_plus"],
        "fidelity_minus": res["ground_truth_fidelity_minus"],
    }
)
results_table(
    rows,
    [
        ("method", "method"),
        (
            "ms per explanation",
            "ms_per_explanation",
            lambda v: f"{v:,.1f}" if v >= 1 else f"{v:.2f}",
        ),
        ("speed-up vs GNNExplainer", "speedup_vs_gnnexplainer", "{:,.0f}x"),
        ("AUROC", "auroc", "{:.3f}"),
        ("fidelity+", "fidelity_plus", "{:.3f}"),
        ("fidelity-", "fidelity_minus", "{:.3f}"),
    ],
)

# %% tags=["hide-input"]
methods = res["methods"]
lrp_name = next(n for n in methods if n.startswith("LRP") and "batch" not in n)
batch_name = next(n for n in methods if n.startswith("LRP") and "batch" in n)
gnn_name = next(n for n in methods if n.startswith("GNNExplainer"))
g("expl_lrp_speedup", methods[lrp_name]["speedup_vs_gnnexplainer"], "{:,.0f}")
g("expl_batch_speedup", methods[batch_name]["speedup_vs_gnnexplainer"], "{:,.0f}")
g("expl_lrp_auroc", methods[lrp_name]["auroc"], "{:.3f}")
g("expl_gnn_auroc", methods[gnn_name]["auroc"], "{:.3f}")
best = max((n for n in methods if "batch" not in n), key=lambda n: methods[n]["auroc"])
g("expl_best_auroc", best, None)

# %% [markdown]
# Per explanation, LRP is {glue:text}`expl_lrp_speedup` times faster than GNNExplainer on the same model
# and molecules, and {glue:text}`expl_batch_speedup` times when it explains the whole set in one batch. Its ground-truth
# AUROC is {glue:text}`expl_lrp_auroc`, against {glue:text}`expl_gnn_auroc` for GNNExplainer; the
# highest of all methods belongs to {glue:text}`expl_best_auroc`. An LRP explanation is one forward with
# relevance ops and one backward; saliency is one plain forward and backward; Integrated Gradients
# runs its steps as one batched pass; GNNExplainer optimises a mask over many forward and backward
# passes. The chapter discusses what the AUROC and fidelity figures say about each explanation.
#
# ## Many nodes of a large graph
#
# `LRPExplainer(per_index=True)` explains each node of `index` on its own, in one call: the targets go
# in chunks onto the disjoint union of their k-hop subgraphs (k = the number of message-passing
# layers), one forward and one backward per chunk, as many targets per chunk as the estimated memory
# of the pass allows and, on the CPU, as keep its largest tensor small enough for the allocator to
# reuse freed memory instead of asking the kernel for fresh pages (the subgraphs' outputs at the
# targets are checked against the full graph's). Each message-passing step runs only
# along the edges into nodes from which a target can still be reached in the steps that remain: the
# first layer along the edges into the nodes at most k - 1 hops from a target, the last along the
# edges into the targets; the edges left out carry no relevance to a target, and a pass whose outputs
# at the targets differ from the full graph's is run again without this pruning. The rows are pruned
# likewise: after l steps the targets read a node tensor only at the nodes at most k - l hops away,
# so a map with weights applied row by row (`F.linear`, `x @ W`) runs on those rows alone where they
# are fewer than half, and gives zeros on the others, which nothing that reaches a target reads.
# `benchmarks/bench_nodes.py` explains many target nodes of a random graph with a GCN, all
# methods through `lrp_lib.Explainer` (PyG's `Explainer` with the inputs checked, whose prediction
# pass `per_index=True` compares with); saliency and GNNExplainer run one call per target, timed on a
# subset (GNNExplainer's time for all targets is extrapolated from it, and labelled so). The two
# rows below the line compare the other way to batch: backward passes of the whole graph.

# %% tags=["hide-input"]
s = nodes_b["settings"]
display(
    Markdown(
        machine_note(nodes_b)
        + f" {s['layers']}-layer GCN ({s['features']} features, {s['hidden']} hidden), "
        f"{s['nodes']:,} nodes, {s['edges']:,} edges, {s['targets']:,} targets, float32."
    )
)
results_table(
    nodes_b["results"],
    [
        ("method", "method"),
        ("targets timed", "targets", "{:,}"),
        ("seconds", "seconds", lambda v: "-" if v is None else f"{v:,.2f}"),
        (
            "CPU seconds",
            lambda r: r.get("cpu_seconds"),
            lambda v: "-" if v is None else f"{v:,.2f}",
        ),
        (
            "nodes per second",
            "nodes_per_second",
            lambda v: "fails" if v is None else f"{v:,.3g}",
        ),
        (
            "note",
            lambda r: r.get("error")
            or (
                "all targets extrapolated: "
                f"{r['seconds_all_targets_extrapolated'] / 3600:,.1f} h"
                if r["extrapolated"]
                else ""
            ),
        ),
    ],
)

# %% tags=["hide-input"]
nodes_rows = {r["key"]: r for r in nodes_b["results"]}
lrp_rate = nodes_rows["lrp"]["nodes_per_second"]
g("nodes_lrp", lrp_rate, "{:,.0f}")
g("nodes_targets", s["targets"], "{:,}")
g("nodes_vs_saliency", lrp_rate / nodes_rows["saliency"]["nodes_per_second"], "{:,.0f}")
g(
    "nodes_vs_loop",
    lrp_rate / nodes_rows["lrp_backward_loop"]["nodes_per_second"],
    "{:,.0f}",
)
g(
    "nodes_gnn_hours",
    nodes_rows["gnnexplainer"]["seconds_all_targets_extrapolated"] / 3600,
    "{:,.1f}",
)
g(
    "nodes_batched",
    "fails" if nodes_rows["lrp_batched_backward"]["error"] else "runs",
    None,
)
g("nodes_cpu_rate", s["targets"] / nodes_rows["lrp"]["cpu_seconds"], "{:,.0f}")
g("nodes_gin", nodes_rows["lrp_gin"]["nodes_per_second"], "{:,.0f}")
g("nodes_gin_cpu", s["targets"] / nodes_rows["lrp_gin"]["cpu_seconds"], "{:,.0f}")
g("nodes_threads", s["threads"], "{}")
gpu_rows = {r["key"]: r for r in nodes_gpu_b["results"]}
g("nodes_gpu", nodes_gpu_b["machine"].get("gpu", "a GPU"), None)
g("nodes_gpu_lrp", gpu_rows["lrp"]["nodes_per_second"], "{:,.0f}")
g("nodes_gpu_saliency", gpu_rows["saliency"]["nodes_per_second"], "{:,.0f}")
g("nodes_gpu_chunk", nodes_gpu_b["settings"]["chunk_size"], "{:,}")
g("nodes_cpu_chunk", s["chunk_size"], "{:,}")
g("nodes_gpu_gin", gpu_rows["lrp_gin"]["nodes_per_second"], "{:,.0f}")

# %% [markdown]
# LRP explains {glue:text}`nodes_lrp` target nodes per second over all {glue:text}`nodes_targets`
# targets: {glue:text}`nodes_vs_saliency` times the rate of Captum saliency, which runs the whole graph forward
# and backward for every target, and {glue:text}`nodes_vs_loop` times that of one relevance backward of
# the whole graph per target. GNNExplainer would need {glue:text}`nodes_gnn_hours` hours for all
# targets (extrapolated). Per CPU second of the process (its {glue:text}`nodes_threads` threads
# together, whatever else the machine ran), LRP explains {glue:text}`nodes_cpu_rate` targets: most of a
# subgraph's nodes lie on its border, where they are needed only as inputs of the first layer; their
# messages are pruned from the later layers and the later layers' weights multiply only the rows near
# the targets, but the elementwise functions (ReLU, the biases) and the relevance of the aggregations
# still cover every row. GCN's normalisation of the messages reads each sender's in-degree, and a
# border node's in-edges lie outside its subgraph: instead of those edges, each border node gets one
# edge from a zero-feature stand-in node, weighted by the number of edges it stands for, which GCN
# receives as its edge weight (`lrp_lib.explain.border_degrees`), so `gcn_norm` sums the same
# degrees, to the bit, from one edge per border node. A model whose layers never read a sender's degree
# (GIN, GAT, SAGE and a few more, by their exact type) is explained on subgraphs without those edges:
# a GIN of the same depth and width, on the same graph and targets, explains
# {glue:text}`nodes_gin` targets per second ({glue:text}`nodes_gin_cpu` per CPU second). On an
# {glue:text}`nodes_gpu`
# (`benchmarks/results/nodes-cuda.json`, `--device cuda`) the same benchmark explains
# {glue:text}`nodes_gpu_lrp` targets per second ({glue:text}`nodes_gpu_gin` for the GIN), against
# {glue:text}`nodes_gpu_saliency` for saliency; there the chunks may hold up to
# {glue:text}`nodes_gpu_chunk` targets (`--chunk-size`, {glue:text}`nodes_cpu_chunk` above) as the
# GPU's free memory allows, and fewer, larger passes launch fewer kernels per target.
# A batched backward of the whole graph
# (`torch.autograd.grad(..., is_grads_batched=True)`) {glue:text}`nodes_batched` here: `vmap` cannot
# batch the relevance ops' backward (the table gives the first error), which divides into a
# preallocated tensor and checks its values (a NaN test, the count of zero outputs) in Python
# conditions on tensors. Even where it would run, it does the work of
# one whole-graph backward per target, while a target's explanation only touches its k-hop
# neighbourhood: the subgraphs are the way that scales.

# %% [markdown]
# ## Cost against graph size
#
# What one explanation costs as the graph grows: `benchmarks/bench_scaling.py` explains the output of
# one node (the logit of the class the model predicts for it) of a 3-layer GCN (the model of the
# section above, random weights) on random graphs with ten edges per node, by the relevance or
# attribution of every input feature, on the whole graph. The floor is the plain input gradient
# (`torch.autograd.grad`, one forward and one backward, no explainer around it). The methods take
# turns within each round, in one process, and each is given as its median time divided by the
# gradient's (the median over the rounds of the ratio within a round).
#
# By default `LRPExplainer` replays: the second explanation of an input signature (the shapes of the
# inputs, the model, the rule) records the torch functions of the model's forward, and the later ones
# run that record without the relevance mode and without the model's own Python, with the same
# relevance (`lrp_lib.explain.replay`; the first explanation of a signature runs in the mode). The
# third also records the ATen operations that its forward and its relevance backward dispatch, and
# the later ones run those as a program, without the rules' Python either (`lrp_lib.explain.compiled`;
# every value a rule read from the data, such as the signs that z+ splits by, is read again and
# compared, and a call where one differs is replayed instead). The program runs simplified: what gives
# the same values on every run (a weight's transpose and positive part, the signs read from it, each
# GCN layer normalising the same edges again) is computed once, when the program is made, and the
# results are the same to the bit (`lrp_lib.explain.compiled.simplify`). From its second run on, the program calls
# each operator through the C function that PyTorch's Python API calls it with (`torch.mm`, `Tensor.mul_`),
# which parses its arguments in generated code, where that function was seen to dispatch that very
# operator on the program's kinds of arguments (`lrp_lib.explain.bindings`); on the CPU, the signs that z+
# reads of a few numbers are read one number at a time. Here the same graph is explained again
# and again, as when the nodes of one graph are explained one by one, so the replay also reuses what
# the record computed from `edge_index` alone (degrees and normalisation). The columns *without
# replay* run every explanation in the mode (`LRPExplainer(replay=False)`), *not compiled* replay
# without the program (`LRPExplainer(compile=False)`).
#
# The first table is the explanation's own cost: `LRPExplainer` called directly, and LRP and Captum's
# saliency through PyG's `Explainer` with `explanation_type="phenomenon"`, which runs no prediction
# pass of its own.

# %% tags=["hide-input"]
sc = scaling_b["settings"]
sc_rows = scaling_b["results"]
display(
    Markdown(
        machine_note(scaling_b)
        + f" {sc['layers']}-layer GCN ({sc['features']} features, {sc['hidden']} hidden,"
        f" {sc['classes']} classes), {sc['edges_per_node']} edges per node, float32;"
        f" Integrated Gradients with {sc['ig_steps']} steps."
    )
)


def sc_ratio(key):
    return lambda r: r["methods"][key]["paired_ratio_to_gradient"]


results_table(
    sc_rows,
    [
        ("nodes", "nodes", "{:,}"),
        ("gradient (ms)", lambda r: r["methods"]["gradient"]["median_seconds"] * 1e3, "{:,.1f}"),
        ("LRP algorithm", sc_ratio("lrp_algorithm"), "{:.2f}x"),
        ("LRP, phenomenon", sc_ratio("lrp_phenomenon"), "{:.2f}x"),
        ("saliency, phenomenon", sc_ratio("saliency_phenomenon"), "{:.2f}x"),
        ("LRP algorithm, not compiled", sc_ratio("lrp_algorithm_replay"), "{:.2f}x"),
        ("LRP algorithm without replay", sc_ratio("lrp_algorithm_mode"), "{:.2f}x"),
    ],
)

# %% [markdown]
# Through `Explainer` with `explanation_type="model"`, where PyG runs a prediction pass (a forward
# without autograd) before each method to pick its target. `lrp_lib.Explainer` takes LRP's prediction
# from the explanation's own forward instead (the model's own pass runs only where two classes are
# within rounding of each other); the table also shows LRP with PyG's pass first
# (`one_pass=False`), LRP without replay, and Captum's saliency and Integrated Gradients
# (`CaptumExplainer`), with LRP's time divided by saliency's:

# %% tags=["hide-input"]
results_table(
    sc_rows,
    [
        ("nodes", "nodes", "{:,}"),
        ("LRP", sc_ratio("lrp"), "{:.2f}x"),
        ("LRP, two passes", sc_ratio("lrp_two_passes"), "{:.2f}x"),
        ("LRP without replay", sc_ratio("lrp_mode"), "{:.2f}x"),
        ("saliency", sc_ratio("saliency"), "{:.2f}x"),
        ("IG", sc_ratio("integrated_gradients"), "{:.1f}x"),
        ("LRP / saliency", "lrp_over_saliency_paired", "{:.2f}x"),
        ("two passes / saliency", "lrp_two_passes_over_saliency_paired", "{:.2f}x"),
        (
            "page faults per gradient",
            lambda r: r["methods"]["gradient"].get("median_page_faults"),
            "{:,.0f}",
        ),
    ],
)

# %% tags=["hide-input"]
sc_nodes = np.array([r["nodes"] for r in sc_rows])
sc_methods = [
    ("gradient", "o-", "black"),
    ("lrp_algorithm", "s-", "tab:blue"),
    ("lrp_algorithm_replay", "s:", "tab:purple"),
    ("lrp_algorithm_mode", "s--", "tab:cyan"),
    ("saliency", "^-", "tab:orange"),
    ("integrated_gradients", "v-", "tab:green"),
]
fig, axes = plt.subplots(1, 2, figsize=(BOOK_WIDTH, 4.0))
for key, style, color in sc_methods:
    label = sc_rows[0]["methods"][key]["label"]
    axes[0].plot(
        sc_nodes,
        [r["methods"][key]["median_seconds"] for r in sc_rows],
        style,
        color=color,
        label=label,
    )
    if key != "gradient":
        axes[1].plot(
            sc_nodes,
            [r["methods"][key]["paired_ratio_to_gradient"] for r in sc_rows],
            style,
            color=color,
        )
for ax in axes:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (ten edges per node)")
axes[0].set_ylabel("seconds per explanation")
axes[1].axhline(1.0, color="black", lw=0.8)
axes[1].set_ylabel("time / gradient's")
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, frameon=False, fontsize=7)
fig.tight_layout(rect=(0, 0.14, 1, 1))
plt.show()

slope = np.polyfit(
    np.log(sc_nodes),
    np.log([r["methods"]["gradient"]["median_seconds"] for r in sc_rows]),
    1,
)[0]
g("sc_slope", slope)
# per node, the smallest graph pays most (a call's fixed cost), and the largest more than 10,000 nodes do
SC_MID = 10_000
sc_per_node = {r["nodes"]: r["methods"]["gradient"]["median_seconds"] / r["nodes"] for r in sc_rows}
assert sc_per_node[sc_rows[0]["nodes"]] == max(sc_per_node.values())
assert sc_per_node[sc_rows[-1]["nodes"]] > sc_per_node[SC_MID]
g("sc_mid", SC_MID, "{:,}")
faulting = [
    r["nodes"]
    for r in sc_rows
    if (r["methods"]["gradient"].get("median_page_faults") or 0) > r["nodes"]
]
g(
    "sc_faults_from",
    f"{faulting[0]:,}" if faulting else f"more than {sc_rows[-1]['nodes']:,}",
    None,
)
g("sc_smallest", sc_rows[0]["nodes"], "{:,}")
g("sc_largest", sc_rows[-1]["nodes"], "{:,}")
g("sc_ig_steps", sc["ig_steps"], "{}")
for key in sc_rows[0]["methods"]:
    ratios = [r["methods"][key]["paired_ratio_to_gradient"] for r in sc_rows]
    fmt = "{:.1f}" if key == "integrated_gradients" else "{:.2f}"
    g(f"sc_{key}_min", min(ratios), fmt)
    g(f"sc_{key}_max", max(ratios), fmt)
for key in ("lrp_over_saliency_paired", "lrp_two_passes_over_saliency_paired", "lrp_mode_over_saliency_paired"):
    g(f"sc_{key}_min", min(r[key] for r in sc_rows))
    g(f"sc_{key}_max", max(r[key] for r in sc_rows))
sc_small = sc_rows[0]["methods"]
g("sc_small_algo", sc_small["lrp_algorithm"]["paired_ratio_to_gradient"])
g("sc_small_mode", sc_small["lrp_algorithm_mode"]["paired_ratio_to_gradient"])
SC_FROM = 700  # the sizes from which the explanation's cost is a share of the gradient's, not Python's
g("sc_from", SC_FROM, "{:,}")
sc_bigger = [r for r in sc_rows if r["nodes"] >= SC_FROM]
g("sc_from700_algo_max", max(r["methods"]["lrp_algorithm"]["paired_ratio_to_gradient"] for r in sc_bigger))
g("sc_from700_algo_min", min(r["methods"]["lrp_algorithm"]["paired_ratio_to_gradient"] for r in sc_bigger))
assert all(r["replayed"]["lrp"] == "compiled" and r["replayed"]["lrp_replay"] == "replayed"
           and r["replayed"]["lrp_mode"] is None for r in sc_rows)
assert all(r["methods"]["lrp_algorithm"]["paired_ratio_to_gradient"]
           < r["methods"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] for r in sc_rows[:3])
g("sc_small_replay", sc_small["lrp_algorithm_replay"]["paired_ratio_to_gradient"])
assert sc_bigger[-1]["methods"]["lrp_algorithm"]["paired_ratio_to_gradient"] < \
    sc_bigger[0]["methods"]["lrp_algorithm"]["paired_ratio_to_gradient"]

# %% [markdown]
# From {glue:text}`sc_smallest` to {glue:text}`sc_largest` nodes, the gradient's time grows with
# the graph with a slope of {glue:text}`sc_slope` on the log-log plot (1 would be proportional). Per
# node, the smallest graph costs most, since a call has a fixed cost, and the largest costs more than
# a graph of {glue:text}`sc_mid` nodes. The last
# column counts the page faults of one gradient call: from {glue:text}`sc_faults_from` nodes on
# there are more of them than nodes, because a tensor of messages is then larger than the C
# allocator's largest threshold for reusing freed memory (32 MiB in glibc), so every call maps it
# afresh from the kernel, which zeroes it page by page; every method pays this alike.
#
# **The explanation's own cost.** Called directly, an LRP explanation costs {glue:text}`sc_small_algo`
# times the gradient on {glue:text}`sc_smallest` nodes ({glue:text}`sc_small_replay` replayed but not
# compiled, {glue:text}`sc_small_mode` without replay) and {glue:text}`sc_from700_algo_min` to
# {glue:text}`sc_from700_algo_max` times from {glue:text}`sc_from` nodes up; replayed but not compiled
# it costs {glue:text}`sc_lrp_algorithm_replay_min` to {glue:text}`sc_lrp_algorithm_replay_max` times
# over all sizes, most on small graphs, where the rules' Python is most of the work; and
# through `Explainer` with `"phenomenon"` {glue:text}`sc_lrp_phenomenon_min` to
# {glue:text}`sc_lrp_phenomenon_max` times, against {glue:text}`sc_saliency_phenomenon_min` to
# {glue:text}`sc_saliency_phenomenon_max` for saliency, which is one gradient. Without replay the
# algorithm costs {glue:text}`sc_lrp_algorithm_mode_min` to {glue:text}`sc_lrp_algorithm_mode_max`
# times the gradient.
#
# **Through `Explainer`.** LRP takes {glue:text}`sc_lrp_over_saliency_paired_min`
# to {glue:text}`sc_lrp_over_saliency_paired_max` times the time of Captum saliency per explanation
# ({glue:text}`sc_lrp_mode_over_saliency_paired_min` to {glue:text}`sc_lrp_mode_over_saliency_paired_max`
# without replay): saliency needs PyG's prediction pass to know its target, LRP reads the prediction
# off its own forward. With the prediction pass first (`one_pass=False`) LRP takes
# {glue:text}`sc_lrp_two_passes_over_saliency_paired_min` to
# {glue:text}`sc_lrp_two_passes_over_saliency_paired_max` times saliency's time. Integrated Gradients with
# {glue:text}`sc_ig_steps` steps costs {glue:text}`sc_integrated_gradients_min` to
# {glue:text}`sc_integrated_gradients_max` times the gradient, since `CaptumExplainer` runs its steps
# one at a time. What LRP still adds to a gradient: the rules' element-wise passes that the sections
# above measure (compiled, they run without Python between them; replayed, each rule is a Python
# `torch.autograd.Function`), and the explanation checks its inputs, splits what the biases kept and
# builds its masks; the next section times these parts.

# %% [markdown]
# ### Where the time goes
#
# `benchmarks/profile_explain.py` times the phases of one explanation of the same model side by
# side, round by round (each phase's median time divided by the gradient's, the median over the rounds
# of the ratio within a round). In the relevance mode: the forward alone, under a function mode that
# only calls each function (the cost of intercepting the calls), under `RelevanceMode` (the calls sent
# to their rules), then with the relevance backward, then the algorithm with its checks and masks,
# then through `Explainer`. Replayed: the recorded forward, with the relevance backward (also with
# the steps computed from `edge_index` alone run again, as on a new graph of the same shape), the
# algorithm, and through `Explainer`.

# %% tags=["hide-input"]
PHASES = [
    ("gradient", "the plain input gradient (forward and backward)"),
    ("forward", "the model's forward, autograd on"),
    ("prediction", "PyG's prediction pass (no autograd)"),
    ("bare_mode_forward", "forward under a mode that only calls each function"),
    ("mode_forward", "forward under RelevanceMode"),
    ("mode_forward_backward", "... and the relevance backward"),
    ("lrp_algorithm", "LRPExplainer(replay=False) called directly"),
    ("lrp", "... through Explainer"),
    ("lrp_two_passes", "... through Explainer(one_pass=False)"),
    ("replay_forward", "the replayed forward"),
    ("replay_forward_backward", "... and the relevance backward"),
    ("replay_all_steps_forward_backward", "... with the steps on edge_index run again"),
    ("lrp_algorithm_replay", "LRPExplainer(compile=False), replaying, called directly"),
    ("lrp_replay", "... through Explainer"),
    ("lrp_replay_two_passes", "... through Explainer(one_pass=False)"),
    ("lrp_algorithm_compiled", "LRPExplainer (compiled) called directly"),
    ("lrp_compiled", "... through Explainer"),
    ("saliency", "Captum saliency through Explainer"),
]
pr_rows = profile_b["results"]
display(Markdown(machine_note(profile_b)))
display(
    results_table(
        [
            {"phase": label, **{r["nodes"]: r["phases"][key]["paired_ratio_to_gradient"] for r in pr_rows},
             "ops": pr_rows[0]["phases"][key]["aten_operations"]}
            for key, label in PHASES
        ],
        [("phase", "phase")]
        + [(f"{r['nodes']:,} nodes", r["nodes"], "{:.2f}x") for r in pr_rows]
        + [(f"operations ({pr_rows[0]['nodes']:,} nodes)", "ops", "{:,}")],
    )
)
small = pr_rows[0]["phases"]


def pr(key):
    return small[key]["paired_ratio_to_gradient"]


g("pr_small", pr_rows[0]["nodes"], "{:,}")
for key in ("bare_mode_forward", "forward", "mode_forward", "prediction", "replay_forward",
            "mode_forward_backward", "replay_forward_backward", "replay_all_steps_forward_backward"):
    g(f"pr_{key}", pr(key))
assert pr("mode_forward") > pr("bare_mode_forward") and pr("replay_forward") < pr("mode_forward")
g("pr_backward_mode", pr("mode_forward_backward") - pr("mode_forward"))
g("pr_backward_replay", pr("replay_forward_backward") - pr("replay_forward"))
g("pr_backward_gradient", pr("gradient") - pr("forward"))
pr_ops = {key: small[key]["aten_operations"] for key, _ in PHASES}
g("pr_ops_gradient", pr_ops["gradient"], "{:,}")
g("pr_ops_replay", pr_ops["lrp_algorithm_replay"], "{:,}")
g("pr_ops_mode", pr_ops["lrp_algorithm"], "{:,}")
g("pr_ops_backward_gradient", pr_ops["gradient"] - pr_ops["forward"], "{:,}")
g("pr_ops_backward_replay", pr_ops["replay_forward_backward"] - pr_ops["replay_forward"], "{:,}")
assert pr_ops["gradient"] < pr_ops["lrp_algorithm_replay"] < pr_ops["lrp_algorithm"]
g("pr_compiled", pr("lrp_algorithm_compiled"))
g("pr_replay_algo", pr("lrp_algorithm_replay"))
g("pr_ops_compiled", pr_ops["lrp_algorithm_compiled"], "{:,}")
assert pr("lrp_algorithm_compiled") < pr("lrp_algorithm_replay")

# %% [markdown]
# On {glue:text}`pr_small` nodes the forward alone takes {glue:text}`pr_forward` of the gradient's
# time, intercepting its calls raises that to {glue:text}`pr_bare_mode_forward`, and sending them to
# their rules to {glue:text}`pr_mode_forward`: on a small graph the Python work per call is most of
# the explanation, and PyG's prediction pass ({glue:text}`pr_prediction`) is another forward on top.
# The replayed forward takes {glue:text}`pr_replay_forward`: it runs neither the mode nor the model's
# Python (PyG's `propagate` machinery), only the recorded torch functions. What remains is the
# backward: the relevance backward adds about {glue:text}`pr_backward_replay` of the gradient's time
# to the replayed forward ({glue:text}`pr_backward_mode` to the mode's), where the gradient's own
# backward takes {glue:text}`pr_backward_gradient`, because each rule is a Python
# `torch.autograd.Function` with element-wise passes that a gradient does not need (the sections
# above measure them op by op). The last column counts the ATen operations that one call dispatches:
# the replayed explanation runs {glue:text}`pr_ops_replay` where the gradient runs
# {glue:text}`pr_ops_gradient` ({glue:text}`pr_ops_mode` in the mode), and its backward alone
# {glue:text}`pr_ops_backward_replay` against the gradient's {glue:text}`pr_ops_backward_gradient`: the
# rules divide by the stabilised output, multiply by the input, learn which signs and zeros are
# present, and count what the biases keep. On a small graph these operations are small, so their
# number and the Python around each weigh more than their arithmetic. Compiled, the same explanation
# runs {glue:text}`pr_ops_compiled` operations as a program, with none of the rules' Python between
# them, and takes {glue:text}`pr_compiled` of the gradient's time, against {glue:text}`pr_replay_algo`
# replayed.

# %% [markdown]
# ### The C allocator
#
# From a few hundred nodes up, part of every method's time above is the C allocator's. glibc gives
# large freed blocks back to the kernel and maps them again on the next call, and the kernel zeroes
# them page by page: the page faults counted in the tables. How many a method pays depends on the
# order and the sizes of its allocations more than on its arithmetic, so the ratios above move between
# runs. Told to keep freed memory, by `MALLOC_TRIM_THRESHOLD_=1000000000` and
# `MALLOC_MMAP_THRESHOLD_=1000000000` in the environment before Python starts (jemalloc and tcmalloc
# behave alike), the same phases take:

# %% tags=["hide-input"]
pm_rows = profile_malloc_b["results"]
PM_PHASES = ["gradient", "replay_forward_backward", "lrp_algorithm_replay", "lrp_algorithm", "lrp_replay",
             "lrp_algorithm_compiled", "saliency"]
display(Markdown(machine_note(profile_malloc_b)))
display(
    results_table(
        [
            {"phase": label, **{r["nodes"]: r["phases"][key]["paired_ratio_to_gradient"] for r in pm_rows}}
            for key, label in PHASES
            if key in PM_PHASES
        ]
        + [
            {"phase": "page faults per LRPExplainer call", **{r["nodes"]: r["phases"]["lrp_algorithm_replay"]["median_page_faults"] for r in pm_rows}}
        ],
        [("phase", "phase")] + [(f"{r['nodes']:,} nodes", r["nodes"], "{:.2f}") for r in pm_rows],
    )
)
pm_big = [r for r in pm_rows if r["nodes"] >= SC_FROM]
pr_big = [r for r in pr_rows if r["nodes"] >= SC_FROM]
g("pm_from", SC_FROM, "{:,}")
g("pm_algo_min", min(r["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] for r in pm_big))
g("pm_algo_max", max(r["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] for r in pm_big))
g("pr_algo_min", min(r["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] for r in pr_big))
g("pr_algo_max", max(r["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] for r in pr_big))
assert {r["nodes"] for r in pm_rows} == {r["nodes"] for r in pr_rows}


def faults(r, key):
    return r["phases"][key]["median_page_faults"]


# the size where the default allocator faulted the most pages for LRP beyond the gradient's
gain = max(pr_big, key=lambda r: faults(r, "lrp_algorithm_replay") - faults(r, "gradient"))
after = next(r for r in pm_big if r["nodes"] == gain["nodes"])
g("pm_gain_nodes", gain["nodes"], "{:,}")
g("pm_gain_faults", faults(gain, "lrp_algorithm_replay"), "{:,.0f}")
g("pm_gain_grad_faults", faults(gain, "gradient"), "{:,.0f}")
g("pm_gain_before", gain["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"])
g("pm_gain_after", after["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"])
assert faults(gain, "lrp_algorithm_replay") > faults(gain, "gradient")
assert after["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] < \
    gain["phases"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"]

# %% [markdown]
# From {glue:text}`pm_from` nodes up, the replaying LRP algorithm then costs {glue:text}`pm_algo_min` to
# {glue:text}`pm_algo_max` times the gradient, against {glue:text}`pr_algo_min` to
# {glue:text}`pr_algo_max` times in the run with the default allocator above. The settings help where
# the default allocator faults pages for LRP's calls and not as many for the gradient's: at
# {glue:text}`pm_gain_nodes` nodes ({glue:text}`pm_gain_faults` page faults per LRP call,
# {glue:text}`pm_gain_grad_faults` per gradient) the ratio goes from {glue:text}`pm_gain_before` to
# {glue:text}`pm_gain_after`; where both fault pages, both get faster. The rest of LRP's cost is the
# relevance rules' own work. On a machine that explains many graphs, setting the two variables (or
# preloading jemalloc) costs nothing but memory that the process keeps.

# %% [markdown]
# ### Memory
#
# The gradient keeps, for each layer, what its backward reads: node rows and the edge weights. A scatter
# split in proportion to its messages reads the messages themselves, one row per edge, and a graph
# has several times more edges than nodes. But where each message is a row of a node tensor times a
# constant (GCN's `edge_weight * x_j`, GraphConv's, the sum aggregation of SAGE), relevance passes
# unchanged through the selection and the product, so the scatter is split as one linear map from
# the node rows, $R_x = x \odot J^\top(R / z)$ with $J^\top$ the gradient's own backward, and only the
# node tensor is kept. Where the edge relevance is recorded (`edge_mask_type="object"`), the messages
# pass a hook that reads each one's share and are kept. `benchmarks/bench_explain_memory.py` measures
# the peak memory of one explanation (in the relevance mode, without replay), each case in a fresh
# process, on the graphs of the previous section:

# %% tags=["hide-input"]
em_rows = memory_b["results"]
display(Markdown(machine_note(memory_b) + " Peak resident memory above the start of the call."))
display(
    results_table(
        em_rows,
        [
            ("nodes", "nodes", "{:,}"),
            ("gradient (MiB)", lambda r: r["cases"]["gradient"]["peak_mib"], "{:,.0f}"),
            ("LRP, nodes (MiB)", lambda r: r["cases"]["lrp"]["peak_mib"], "{:,.0f}"),
            ("/ gradient", lambda r: r["cases"]["lrp"]["ratio_to_gradient"], "{:.2f}x"),
            ("LRP, nodes and edges (MiB)", lambda r: r["cases"]["lrp_edges"]["peak_mib"], "{:,.0f}"),
            ("/ gradient", lambda r: r["cases"]["lrp_edges"]["ratio_to_gradient"], "{:.2f}x"),
        ],
    )
)
for case in ("lrp", "lrp_edges"):
    g(f"em_{case}_min", min(r["cases"][case]["ratio_to_gradient"] for r in em_rows))
    g(f"em_{case}_max", max(r["cases"][case]["ratio_to_gradient"] for r in em_rows))
assert all(r["cases"]["lrp"]["peak_mib"] < r["cases"]["lrp_edges"]["peak_mib"] for r in em_rows)

# %% [markdown]
# With node relevance alone an explanation takes {glue:text}`em_lrp_min` to {glue:text}`em_lrp_max`
# times the gradient's peak memory; recording the edge relevance as well, which keeps every layer's
# messages, {glue:text}`em_lrp_edges_min` to {glue:text}`em_lrp_edges_max` times. For a graph that
# barely fits, ask for the node mask alone, or pass `LRPExplainer(recompute=True)`, which recomputes
# kept messages in backward from the node rows they were selected from.

# %% [markdown]
# ## Molecules, one at a time and in a batch
#
# Most explanations of a molecular model are of small graphs, one after another. `benchmarks/bench_molecules.py`
# explains the molecules of graph-attribution's benzene task with the 3-layer GCN of the molecular tasks
# of the chapter [Benchmarking explanations](09_benchmarking_explanations.ipynb) (64 units, a mean pool,
# random weights), each molecule's logit of its predicted class, by the relevance of every atom feature.
# One molecule at a time, the methods take turns molecule by molecule: Gradient $\times$ Input (one
# forward and one backward, the floor), `LRPExplainer` called directly, and LRP and Captum's saliency
# through `Explainer` with `explanation_type="phenomenon"` (no prediction pass) and `"model"` (a
# prediction pass before saliency; LRP takes the prediction from its own forward). The second table
# explains all of them at once, as one PyG `Batch`: each molecule's relevance
# starts from its own output, in one forward and one backward, against one batched gradient.

# %% tags=["hide-input"]
mo = molecules_b["settings"]
mo_one = molecules_b["results"]["one_at_a_time"]
mo_batch = molecules_b["results"]["batch"]
display(
    Markdown(
        machine_note(molecules_b)
        + f" {mo['molecules']} molecules of {mo['atoms_min']} to {mo['atoms_max']} atoms, {mo['model']}."
    )
)
display(results_table(
    list(mo_one.values()),
    [
        ("one molecule at a time", "label"),
        ("ms per molecule", "median_ms", "{:.2f}"),
        ("time / gradient's", "median_ratio_to_gradient", "{:.2f}x"),
    ],
))
display(results_table(
    [r for r in mo_batch.values() if isinstance(r, dict)],
    [
        ("all molecules in one batch", "label"),
        ("ms", "median_ms", "{:,.1f}"),
        ("ms per molecule", "ms_per_molecule", "{:.3f}"),
        ("time / batched gradient's", "ratio_to_gradient", "{:.2f}x"),
    ],
))
display(results_table(
    [{"how": how, **r} for how, r in molecules_b["results"]["lrp_algorithm_runs"].items()],
    [
        ("LRP algorithm, one at a time: how it ran", "how"),
        ("molecules", "molecules", "{:,}"),
        ("time / gradient's", "median_ratio_to_gradient", "{:.2f}x"),
    ],
))
assert mo_batch["equal_to_one_at_a_time"]
g("mo_count", mo["molecules"], "{:,}")
g("mo_lrp", mo_one["lrp_algorithm"]["median_ratio_to_gradient"])
g("mo_lrp_phen", mo_one["lrp_phenomenon"]["median_ratio_to_gradient"])
g("mo_sal_phen", mo_one["saliency_phenomenon"]["median_ratio_to_gradient"])
g("mo_batch_each", mo_batch["batch_lrp"]["ratio_to_gradient"])
g("mo_batch_total", mo_batch["batch_lrp_total"]["ratio_to_gradient"])
g("mo_speedup", mo_batch["speedup_over_one_at_a_time"], "{:.0f}")
g("mo_batch_per_molecule", mo_batch["batch_lrp"]["ms_per_molecule"], "{:.2f}")
g("mo_lrp_mode", mo_one["lrp_algorithm_mode"]["median_ratio_to_gradient"])
g("mo_batch_mode", mo_batch["batch_lrp_mode"]["ratio_to_gradient"])
mo_ops = molecules_b["results"]["program_operations"]
for k in ("recorded", "run", "recorded_forward", "run_forward"):
    g(f"mo_ops_{k}", mo_ops[k], "{:,}")
assert mo_ops["run"] < mo_ops["recorded"] and mo_ops["run_forward"] < mo_ops["recorded_forward"]
mo_runs = molecules_b["results"]["lrp_algorithm_runs"]
for how, key in (("compiled for any size", "generic"), ("compiled", "compiled"), ("recorded", "recorded"),
                 ("a new signature", "new")):
    run = mo_runs.get(how, {"molecules": 0, "median_ratio_to_gradient": float("nan")})
    g(f"mo_{key}_count", run["molecules"], "{:,}")
    g(f"mo_{key}", run["median_ratio_to_gradient"])
mo_pair = molecules_b["results"]["paired"]
g("mo_paired", mo_pair["median_ratio_to_gradient"])
g("mo_paired_generic", mo_pair["runs"]["compiled for any size"]["median_ratio_to_gradient"])
# taking turns with the gradient alone, the caches keep what the two use: LRP's longer path gains more
assert mo_pair["median_ratio_to_gradient"] < mo_one["lrp_algorithm"]["median_ratio_to_gradient"]
g("mo_lrp_exact", mo_one["lrp_algorithm_exact"]["median_ratio_to_gradient"])
mo_ratio = {how: r["median_ratio_to_gradient"] for how, r in mo_runs.items()}
# most molecules run the program for any size, cheaper than the mode and than recording
assert mo_runs["compiled for any size"]["molecules"] > mo["molecules"] / 2
assert mo_ratio["compiled for any size"] < mo_ratio["a new signature"] < mo_ratio["recorded"]
assert mo_one["lrp_algorithm"]["median_ratio_to_gradient"] < min(
    mo_one["lrp_algorithm_exact"]["median_ratio_to_gradient"], mo_one["lrp_algorithm_mode"]["median_ratio_to_gradient"])
# the per-molecule accounts cost no backward pass of their own, only the row sums of their tally: within
# 1.45 times the cost of accounts="total"
assert mo_batch["batch_lrp"]["ratio_to_gradient"] < 1.45 * mo_batch["batch_lrp_total"]["ratio_to_gradient"]

# %% [markdown]
# One at a time, a molecule's LRP explanation costs {glue:text}`mo_lrp` times its Gradient $\times$ Input
# when the algorithm is called directly ({glue:text}`mo_lrp_mode` without replay) and
# {glue:text}`mo_lrp_phen` times through `Explainer`, against {glue:text}`mo_sal_phen` for Captum's
# saliency: on a graph of twenty atoms almost all of the time is Python and the launching of
# operations, not arithmetic. Among eight methods taking turns, the processor's caches lose what each
# one used before its next turn, which costs LRP's longer Python path more than the gradient's: in a
# pass where only the two take turns, as when a data set is explained with one method, the algorithm
# costs {glue:text}`mo_paired` times the gradient ({glue:text}`mo_paired_generic` on the molecules
# that ran the program for any size). The molecules come in many sizes, and a program recorded for one size
# serves that size alone: with programs per size only (`compile="exact"`) the explanation costs
# {glue:text}`mo_lrp_exact` times the gradient. Once two sizes have programs that differ in nothing but
# their sizes, one program serves every size, reading its sizes from the tensors it runs on
# (`lrp_lib.explain.compiled.generalise`): {glue:text}`mo_generic_count` of the
# {glue:text}`mo_count` molecules ran it, at {glue:text}`mo_generic` times their gradient, and
# {glue:text}`mo_compiled_count` ran the program of their own size ({glue:text}`mo_compiled`: a size's
# own program yields to the simplified program for any size until it is simplified itself, and runs
# where the data takes a branch that the other did not record). The
# early molecules pay for the others: the {glue:text}`mo_new_count` that were the first of their size
# ran in the mode ({glue:text}`mo_new` times their gradient), and the {glue:text}`mo_recorded_count`
# that recorded a forward cost {glue:text}`mo_recorded` times theirs. The program for any size was
# recorded as {glue:text}`mo_ops_recorded` operations ({glue:text}`mo_ops_recorded_forward` of them in
# the forward) and runs {glue:text}`mo_ops_run` ({glue:text}`mo_ops_run_forward`): the later layers
# read the first layer's edge normalisation, and the weights' transposes, positive parts and signs are
# taken once. What is left is the price of a rule's operations each launched from Python, where the
# gradient's backward runs in C++, and of the checks and accounts around them. In one batch the same
# {glue:text}`mo_count` explanations take
# {glue:text}`mo_batch_each` times one batched gradient ({glue:text}`mo_batch_per_molecule` ms per
# molecule, {glue:text}`mo_speedup` times faster than one at a time; {glue:text}`mo_batch_mode` without
# replay), and {glue:text}`mo_batch_total` times with `accounts="total"`: the biases' share is summed
# molecule by molecule as the backward runs, with no pass of its own (one more backward is needed only
# where a rule keeps relevance on the edges, as with an edge mask, or where a molecule loses relevance).
# The batch's relevance equals the molecules'
# relevance explained one at a time (checked by the benchmark). To explain a data set, batch it:
# `explain_dataset` ([Explaining a whole data set](explain_jobs.ipynb)) does so, and `Explainer` takes a
# `Batch` as it is.

# %% [markdown]
# ## The rules as forward modifications
#
# The explanations of `LRPExplainer` above use its default mechanism, in which each rule is a relevance primitive whose backward
# computes relevance, replayed and run as a recorded program. `LRPExplainer(mechanism="forward")` writes each rule
# as a forward that keeps its value and changes its gradient, so that an explanation is one ordinary backward, and
# `compile=True` hands the explanation to `torch.compile` (for node masks, once for graphs of every size). What each
# costs against the gradient, eagerly and
# compiled, with and without edges, and per molecule, is measured by `benchmarks/bench_mechanism.py` and shown in
# the chapter [Rules as forward modifications](forward_rules.ipynb).

# %% [markdown]
# ## On a GPU
#
# The same two benchmarks with `--device cuda`: the model and the tensors on the GPU, every call timed
# from a synchronised start to the end of its last kernel (`benchmarks/results/scaling-cuda.json` and
# `molecules-cuda.json`). On the GPU, LRP's relevance is compared with float32 tolerances rather than
# bit for bit, since the scatter sums there add in no fixed order.

# %% tags=["hide-input"]
gs_rows = scaling_gpu_b["results"]
display(Markdown(machine_note(scaling_gpu_b)))
display(results_table(
    gs_rows,
    [
        ("nodes", "nodes", "{:,}"),
        ("gradient (ms)", lambda r: r["methods"]["gradient"]["median_seconds"] * 1e3, "{:,.2f}"),
        ("LRP algorithm", sc_ratio("lrp_algorithm"), "{:.2f}x"),
        ("replayed, not compiled", sc_ratio("lrp_algorithm_replay"), "{:.2f}x"),
        ("without replay", sc_ratio("lrp_algorithm_mode"), "{:.2f}x"),
        ("saliency, phenomenon", sc_ratio("saliency_phenomenon"), "{:.2f}x"),
        ("LRP / saliency (model)", "lrp_over_saliency_paired", "{:.2f}x"),
    ],
))
gm_one = molecules_gpu_b["results"]["one_at_a_time"]
gm_batch = molecules_gpu_b["results"]["batch"]
display(Markdown(machine_note(molecules_gpu_b)))
display(results_table(
    list(gm_one.values()) + [r for r in gm_batch.values() if isinstance(r, dict)],
    [
        ("molecules", "label"),
        ("ms", "median_ms", "{:.2f}"),
        ("time / gradient's", lambda r: r.get("median_ratio_to_gradient", r.get("ratio_to_gradient")), "{:.2f}x"),
    ],
))
gs_grad_ms = [r["methods"]["gradient"]["median_seconds"] * 1e3 for r in gs_rows]
gs_algo = [r["methods"]["lrp_algorithm"]["paired_ratio_to_gradient"] for r in gs_rows]
g("gs_gpu", scaling_gpu_b["machine"].get("gpu", "a GPU"), None)
g("gs_grad_min", min(gs_grad_ms))
g("gs_grad_max", max(gs_grad_ms[:-1]))
g("gs_flat_until", gs_rows[-2]["nodes"], "{:,}")
g("gs_largest", gs_rows[-1]["nodes"], "{:,}")
g("gs_grad_largest", gs_grad_ms[-1])
g("gs_algo_min", min(gs_algo[:-1]))
g("gs_algo_max", max(gs_algo[:-1]))
g("gs_algo_largest", gs_algo[-1])
g("gs_mode_max", max(r["methods"]["lrp_algorithm_mode"]["paired_ratio_to_gradient"] for r in gs_rows))
gs_replay = [r["methods"]["lrp_algorithm_replay"]["paired_ratio_to_gradient"] for r in gs_rows]
gs_vs_saliency = [r["lrp_over_saliency_paired"] for r in gs_rows]
g("gs_replay_min", min(gs_replay))
g("gs_replay_max", max(gs_replay))
g("gs_sal_min", min(gs_vs_saliency))
g("gs_sal_max", max(gs_vs_saliency))
g("gm_lrp", gm_one["lrp_algorithm"]["median_ratio_to_gradient"])
g("gm_mode", gm_one["lrp_algorithm_mode"]["median_ratio_to_gradient"])
g("gm_sal", gm_one["saliency_phenomenon"]["median_ratio_to_gradient"])
g("gm_batch", gm_batch["batch_lrp"]["ratio_to_gradient"])
g("gm_speedup", gm_batch["speedup_over_one_at_a_time"], "{:.0f}")
g("gm_cpu_speedup_ratio", gm_batch["speedup_over_one_at_a_time"] / mo_batch["speedup_over_one_at_a_time"], "{:.0f}")
# up to the largest graph the gradient's time hardly grows: kernel launches and Python, not arithmetic
assert max(gs_grad_ms[:-1]) < 2 * min(gs_grad_ms) < gs_grad_ms[-1] * 2
assert gs_algo[-1] < min(gs_algo[:-1])
assert all(r["replayed"]["lrp"] == "compiled" and not r["replayed"]["lrp_mode"] for r in gs_rows)
assert all(a < r for a, r in zip(gs_algo, gs_replay)) and max(gs_vs_saliency) < 1
assert gm_batch["equal_to_one_at_a_time"] and gm_batch["speedup_over_one_at_a_time"] > mo_batch["speedup_over_one_at_a_time"]

# %% [markdown]
# On the {glue:text}`gs_gpu` the gradient takes {glue:text}`gs_grad_min` to {glue:text}`gs_grad_max` ms
# from the smallest graph to {glue:text}`gs_flat_until` nodes, about the same time whatever the size:
# its cost is the launching of kernels and the Python around them, not arithmetic, and only at
# {glue:text}`gs_largest` nodes ({glue:text}`gs_grad_largest` ms) does the work itself begin to
# count. An LRP explanation dispatches more operations than a gradient ({glue:text}`pr_ops_replay`
# against {glue:text}`pr_ops_gradient`, counted in the section above), each a kernel launch. Replayed,
# with the rules' Python between the launches of its backward, it costs {glue:text}`gs_replay_min` to
# {glue:text}`gs_replay_max` times the gradient. Compiled, the same operations run as a program with no
# Python between them (the recorder, a dispatch mode, follows the backward into the thread where the
# autograd engine runs a GPU's work), and the explanation costs {glue:text}`gs_algo_min` to
# {glue:text}`gs_algo_max` times the gradient when the algorithm is called directly, falling to
# {glue:text}`gs_algo_largest` at {glue:text}`gs_largest` nodes (at most {glue:text}`gs_mode_max`
# without replay). Through `Explainer`, where Captum's saliency pays for PyG's prediction pass and LRP
# takes its prediction from its own forward, LRP takes {glue:text}`gs_sal_min` to
# {glue:text}`gs_sal_max` times the time of saliency. One molecule at a
# time the explanation costs {glue:text}`gm_lrp` times Gradient $\times$ Input
# ({glue:text}`gm_mode` without replay, {glue:text}`gm_sal` for saliency). On a GPU batching matters
# even more than on a processor: the whole batch explained at once costs {glue:text}`gm_batch` times
# one batched gradient and is {glue:text}`gm_speedup` times faster than the molecules one at a time,
# about {glue:text}`gm_cpu_speedup_ratio` times the speed-up that batching gives on the processor above.

# %% [markdown]
# ## Measuring on your machine
#
# Each script prints its tables and writes its results file; this page and the chapters read the
# files. From the repository root:
#
# ```bash
# python benchmarks/bench_ops.py              # benchmarks/results/ops.json
# python benchmarks/bench_graph.py            # graph.json (about 3 GB of memory per process)
# python benchmarks/bench_conv.py             # conv.json
# python benchmarks/bench_implementations.py  # implementations.json
# python benchmarks/bench_explainers.py       # explainers.json
# python benchmarks/bench_nodes.py            # nodes.json (--fast: a smaller graph, writes nothing)
# python benchmarks/bench_scaling.py          # scaling.json (--fast: three sizes, writes nothing)
# python benchmarks/profile_explain.py        # profile_explain.json
# python benchmarks/bench_explain_memory.py   # explain_memory.json
# python benchmarks/bench_molecules.py        # molecules.json
# python benchmarks/bench_scaling.py --device cuda    # on a GPU: scaling-cuda.json
# python benchmarks/bench_molecules.py --device cuda  # molecules-cuda.json (--graphs: molecules saved without RDKit)
# python benchmarks/bench_nodes.py --device cuda      # nodes-cuda.json
# python tools/nb.py book/_src/performance.py # rebuild this page from the new files
# ```
#
# `--help` lists each script's options (sizes, repeats, `--threads`). On a quiet machine with several
# cores, more threads shorten every time, but the ratios tell what relevance costs compared with the
# gradient.
