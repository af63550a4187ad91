# %% [markdown]
# # Performance
#
# What does an explanation cost? It is one forward and one backward pass, so the yardstick is the plain
# gradient of the same output: how much longer does it take, and how much more memory does it need? The tables
# below come from the scripts in `benchmarks/`.
#
# ```{admonition} Audience & Objectives
# :class: tip
# For readers who explain many graphs, or large ones, and want to plan time and memory. After reading it
# you should be able to
# - say what one explanation costs against a gradient, with node masks, with edge masks, and per molecule;
# - decide when `LRPExplainer(compile=True)` pays for its compile time;
# - compare LRP's cost with saliency, Integrated Gradients and GNNExplainer's;
# - measure the same on your own machine.
# ```

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Markdown, display  # noqa: E402
from myst_nb import glue  # noqa: E402

from lrp_lib.book.plotting import BOOK_WIDTH, book_style  # noqa: E402
from lrp_lib.book.results import load_results, machine_note, results_table  # noqa: E402
from lrp_lib.explain.capture.cache import ANY_GRAPH_AFTER  # noqa: E402

book_style()
mech_b = load_results("mechanism")
mol_b = load_results("mechanism-molecules")
scaling_b = load_results("scaling")
memory_b = load_results("explain_memory")
nodes_b = load_results("nodes")
ops_b = load_results("ops")
graph_b = load_results("graph")
conv_b = load_results("conv")
benches = [mech_b, mol_b, load_results("edge_attr"), scaling_b, memory_b, nodes_b, ops_b, graph_b, conv_b]


def g(key, value, fmt="{:.2f}"):
    """Glue a value for the text (as formatted text)."""
    glue(key, fmt.format(value) if fmt else value, display=False)

# %% [markdown]
# ## How the figures are measured
#
# Each script runs the explanation and what it is compared with in one process, taking turns call by call
# after a few warm-up calls, on one PyTorch thread unless told otherwise (`--threads`), and reports the median
# of each and their **ratio**: taking turns lets the machine's load fall on both sides alike, so the ratios are
# much steadier than the absolute times. Each results file records the machine, the date and the load average
# when it was written:

# %% tags=["hide-input"]
results_table([{"benchmark": b["benchmark"], **b["machine"]} for b in benches], [
    ("file", lambda r: f"`{r['benchmark']}.json`"),
    ("date", "date"),
    ("CPU", "cpu"),
    ("cores", "cores", "{}"),
    ("PyTorch threads", "torch_threads", "{}"),
    ("load average", "load_average_1min", "{:.1f}"),
])

# %% [markdown]
# ## One explanation against a gradient
#
# `benchmarks/bench_mechanism.py` explains the output of one node of a 3-layer GCN (32 input features, 64
# hidden units, random weights) on random graphs with eight edges per node, through PyG's `Explainer` with
# the target given (`explanation_type="phenomenon"`, so no prediction pass is timed), and divides each time
# by that of the plain input gradient, `torch.autograd.grad(out[i, c], x)`. The columns:
#
# - **default**: `LRPExplainer()`. From the second explanation of a graph on, its forward is captured and run
#   without the model's or the rules' Python: the case of many nodes of one graph explained one by one.
# - **first call**: the same with `replay=False`, every call run eagerly under the rules: what the first
#   explanation of each new graph costs.
# - **compiled**: `LRPExplainer(compile=True)`, timed after its compilation.
# - **PyG's gradient with an edge mask**: PyG's own `set_masks` puts a mask of ones on every layer's messages,
#   as PyG's explainers do, and the gradient is taken with respect to `x` and the mask. It is the floor for
#   edge masks.

# %% tags=["hide-input"]
mech_rows = mech_b["results"]["graphs"]
processes = {r["processes"] for r in mech_rows}
assert len(processes) == 1
g("mech_processes", processes.pop(), "{}")
spread = max((high - low) / r["ratio_to_gradient"][k] for r in mech_rows for k, (low, high) in r["ratio_range"].items())
g("mech_spread", spread, "{:.0%}")


def ratio(key):
    return lambda r: r["ratio_to_gradient"][key]


display(Markdown("**Node masks** (`node_mask_type=\"attributes\"`): time divided by the gradient's"))
display(results_table(mech_rows, [
    ("nodes", "nodes", "{:,}"),
    ("default", ratio("forward"), "{:.2f}x"),
    ("first call", ratio("forward_eager"), "{:.2f}x"),
    ("compiled", ratio("compiled"), "{:.2f}x"),
]))
display(Markdown("**Node and edge masks** (`edge_mask_type=\"object\"` as well)"))
display(results_table(mech_rows, [
    ("nodes", "nodes", "{:,}"),
    ("default", ratio("forward_edges"), "{:.2f}x"),
    ("first call", ratio("forward_eager_edges"), "{:.2f}x"),
    ("compiled", ratio("compiled_edges"), "{:.2f}x"),
    ("PyG's gradient with an edge mask", ratio("gradient_edge_mask"), "{:.2f}x"),
]))
display(Markdown(machine_note(mech_b)))
big = [r for r in mech_rows if r["nodes"] >= 700]
small = mech_rows[0]
assert small["nodes"] < 700 <= big[0]["nodes"]
g("mech_small", small["nodes"], "{:,}")
g("mech_from", big[0]["nodes"], "{:,}")
for key in ("forward", "forward_eager", "compiled", "forward_edges", "compiled_edges", "gradient_edge_mask"):
    g(f"mech_{key}_min", min(r["ratio_to_gradient"][key] for r in big))
    g(f"mech_{key}_max", max(r["ratio_to_gradient"][key] for r in big))
    g(f"mech_{key}_small", small["ratio_to_gradient"][key])
g("mech_compile_min", min(min(r["compile_seconds"].values()) for r in mech_rows), "{:.0f}")
g("mech_compile_max", max(max(r["compile_seconds"].values()) for r in mech_rows), "{:.0f}")
compiled_edges_below = all(r["ratio_to_gradient"]["compiled_edges"] < r["ratio_to_gradient"]["gradient_edge_mask"]
                           for r in mech_rows)
g("mech_compiled_edges_below", "below" if compiled_edges_below else "not always below", None)
below = [r["nodes"] for r in mech_rows if r["ratio_to_gradient"]["forward"] < 1]
g("mech_default_below", "here on " + " and ".join(f"{n:,}" for n in below) + " nodes" if below
  else "on none of the graphs measured here", None)

# %% [markdown]
# Each size was timed in {glue:text}`mech_processes` fresh processes, one after another, the methods taking turns
# in each; a ratio above is the median of the processes' ratios. From one process to the next the ratios moved
# by up to {glue:text}`mech_spread` of their median (the largest spread of any method at any size), so read
# differences smaller than that as the same cost.
#
# From {glue:text}`mech_from` nodes up, the default explanation of the node masks costs
# {glue:text}`mech_forward_min` to {glue:text}`mech_forward_max` times the gradient, and the first
# explanation of a graph {glue:text}`mech_forward_eager_min` to {glue:text}`mech_forward_eager_max` times.
# Compiled, it costs {glue:text}`mech_compiled_min` to {glue:text}`mech_compiled_max` times: the compiler
# fuses the rules' elementwise work into the matrix products' neighbours, where the eager gradient runs every
# operation on its own. With the edge masks the default costs {glue:text}`mech_forward_edges_min` to
# {glue:text}`mech_forward_edges_max` times the gradient, PyG's own gradient with an edge mask
# {glue:text}`mech_gradient_edge_mask_min` to {glue:text}`mech_gradient_edge_mask_max` times, and the compiled
# explanation, {glue:text}`mech_compiled_edges_min` to {glue:text}`mech_compiled_edges_max` times, is
# {glue:text}`mech_compiled_edges_below` PyG's at every size. On {glue:text}`mech_small` nodes, where a call's
# fixed cost dominates, the default costs {glue:text}`mech_forward_small` times the gradient, the first call
# {glue:text}`mech_forward_eager_small` times, and the compiled one {glue:text}`mech_compiled_small` times.
#
# What the rules themselves cost is on [Rules as forward modifications](forward_rules.ipynb). A captured
# explanation also saves work: the part of each layer that depends on `edge_index` alone (self-loops,
# degrees, normalisation) is computed once per graph, where the gradient recomputes it on every call. Where
# that saving outweighs the rules' work the default costs less than the gradient: {glue:text}`mech_default_below`.
#
# **When compiling pays.** Compiling took {glue:text}`mech_compile_min` to {glue:text}`mech_compile_max`
# seconds here, with PyTorch's on-disk compile cache already filled by earlier compilations (a first
# compilation on a machine takes longer). For node masks one compilation serves every graph of every size while the model's
# parameters stay the same; with an edge mask it serves one graph. So compile when many explanations follow:
# the molecules of a data set, the nodes of a large graph.

# %% [markdown]
# ## Molecules, one at a time and in a batch
#
# The same script explains molecules of graph-attribution's benzene task with the molecular tasks' 3-layer
# GCN of [Benchmarking explanations](09_benchmarking_explanations.ipynb) (random weights), each molecule's
# predicted logit, against Gradient $\times$ Input of the same logit: one molecule at a time, the methods taking
# turns molecule by molecule (the median over the molecules of each one's ratio), and all of them as one PyG
# `Batch`, each molecule's relevance starting from its own output. After a model's first
# {glue:text}`mol_eager_graphs` molecules, explained eagerly, one capture serves every size, run as it is or
# compiled (`compile=True`). A data loader's full batches with one account each share one capture too (last row,
# against the same batches' batched Gradient $\times$ Input).

# %% tags=["hide-input"]
mol = mol_b["results"]
one = mol["median_ratio_to_gradient"]
batch = mol["batch"]
display(results_table([
    {"how": "one at a time, default", "ratio": one["forward"], "ms": mol["median_ms"]["forward"]},
    {"how": "one at a time, compiled", "ratio": one["compiled"], "ms": mol["median_ms"]["compiled"]},
    {"how": "one at a time, default, node and edge masks", "ratio": one["forward_edges"],
     "ms": mol["median_ms"]["forward_edges"]},
    {"how": "one at a time, PyG's gradient with an edge mask", "ratio": one["gradient_edge_mask"],
     "ms": mol["median_ms"]["gradient_edge_mask"]},
    {"how": "one at a time as a loader of batch size one gives them (`batch` given)", "ratio": one["forward_loader"],
     "ms": mol["median_ms"]["forward_loader"]},
    {"how": "one batch, default (an account per molecule)", "ratio": batch["ratio_to_gradient"]["lrp"],
     "ms": batch["ms_per_molecule"]["lrp"]},
    {"how": "one batch, one account for the batch", "ratio": batch["ratio_to_gradient"]["lrp_total"],
     "ms": batch["ms_per_molecule"]["lrp_total"]},
    {"how": "one batch, Gradient x Input", "ratio": 1.0, "ms": batch["ms_per_molecule"]["gradient"]},
    {"how": f"batches of {batch['loader']['molecules_per_batch']}, one account each", "ratio":
     batch["loader"]["ratio_to_gradient"], "ms": batch["loader"]["ms_per_molecule"]},
], [
    ("molecules", "how"),
    ("time / Gradient x Input's", "ratio", "{:.2f}x"),
    ("ms per molecule", "ms", "{:.3f}"),
]))
display(Markdown(machine_note(mol_b) + f" {mol['molecules']} molecules."))
assert mol["compiled_replay_reasons"] == ["torch.compile for any graph"]
assert mol["default_replay_reasons"] == mol["edges_replay_reasons"] == mol["loader_replay_reasons"] == \
    batch["loader"]["replay_reasons"] == ["captured for any graph"]
g("mol_count", mol["molecules"], "{:,}")
g("mol_eager_graphs", ANY_GRAPH_AFTER - 1, "{}")  # graphs explained once, eagerly, before the capture
g("mol_default", one["forward"])
g("mol_compiled", one["compiled"])
g("mol_compile_s", mol["compile_seconds"], "{:.0f}")
g("mol_batch", batch["ratio_to_gradient"]["lrp"])
g("mol_batch_ms", batch["ms_per_molecule"]["lrp"], "{:.3f}")
g("mol_one_ms", mol["median_ms"]["forward"], "{:.2f}")
assert batch["ms_per_molecule"]["lrp"] < mol["median_ms"]["forward"]  # a batch: less per molecule

# %% [markdown]
# One at a time, a molecule's explanation costs {glue:text}`mol_default` times its Gradient $\times$ Input
# (median over {glue:text}`mol_count` molecules, each explained once). Compiled once ({glue:text}`mol_compile_s` seconds), it costs {glue:text}`mol_compiled`
# times. Explaining the molecules as one batch is the cheaper way when they are all at hand: the whole batch
# costs {glue:text}`mol_batch` times one batched Gradient $\times$ Input, {glue:text}`mol_batch_ms` ms per
# molecule against {glue:text}`mol_one_ms` ms one at a time (median), with each molecule's own `bias_relevance`
# and `relevance_residual`.
#
# ### Molecules with bond features
#
# `benchmarks/bench_edge_attr.py` explains ESOL's molecules one at a time with a model that reads bond features
# as `edge_attr` (three `GINEConv` layers, random weights), whose relevance, `edge_attr_relevance`, comes from the
# same backward, against the gradient with respect to both inputs:

# %% tags=["hide-input"]
ea_b = load_results("edge_attr")
ea = ea_b["results"]
assert ea["replay_reasons"]["default"] == ["captured for any graph"]
assert ea["replay_reasons"]["compiled"] == ["torch.compile for any graph"]
assert ea["largest_difference_from_eager"] < 1e-4
display(results_table([{"how": how, "ratio": ea["median_ratio_to_gradient"][key]} for how, key in (
    ("default (captured once for every molecule)", "default"), ("first call (eager)", "eager"),
    (f"compiled (once, {ea['compile_seconds']:.0f} s)", "compiled"))],
    [("GINE, one molecule at a time", "how"), ("time / gradient", "ratio", "{:.2f}x")]))
display(Markdown(machine_note(ea_b) + f" {ea['molecules']} molecules."))

# %% [markdown]
# ## Against other explainers
#
# `benchmarks/bench_scaling.py` explains one node's predicted class of a 3-layer GCN (32 hidden units, ten
# edges per node) through PyG's `Explainer` with `explanation_type="model"`, as a user would: PyG runs a
# prediction pass before a method that needs its target, while `lrp_lib.Explainer` takes LRP's prediction from
# the explanation's own forward. Beside it, Captum's saliency and Integrated Gradients through PyG's
# `CaptumExplainer`, each divided by the time of the plain gradient:

# %% tags=["hide-input"]
sc_rows = scaling_b["results"]
sc = scaling_b["settings"]


def sc_ratio(key):
    return lambda r: r["methods"][key]["paired_ratio_to_gradient"]


display(results_table(sc_rows, [
    ("nodes", "nodes", "{:,}"),
    ("LRP", sc_ratio("lrp"), "{:.2f}x"),
    ("LRP, first call", sc_ratio("lrp_mode"), "{:.2f}x"),
    ("saliency", sc_ratio("saliency"), "{:.2f}x"),
    (f"Integrated Gradients ({sc['ig_steps']} steps)", sc_ratio("integrated_gradients"), "{:.1f}x"),
    ("LRP / saliency", "lrp_over_saliency_paired", "{:.2f}x"),
]))
display(Markdown(machine_note(scaling_b)))
assert all(r["replayed"]["lrp"] == "captured" and r["replayed"]["lrp_mode"] is None for r in sc_rows)
g("sc_lrp_sal_min", min(r["lrp_over_saliency_paired"] for r in sc_rows))
g("sc_lrp_sal_max", max(r["lrp_over_saliency_paired"] for r in sc_rows))
g("sc_ig_min", min(r["methods"]["integrated_gradients"]["paired_ratio_to_gradient"] for r in sc_rows), "{:.1f}")
g("sc_ig_max", max(r["methods"]["integrated_gradients"]["paired_ratio_to_gradient"] for r in sc_rows), "{:.1f}")

fig, ax = plt.subplots(figsize=(BOOK_WIDTH, 3.2))
sc_nodes = np.array([r["nodes"] for r in sc_rows])
for key, style, color, label in [("lrp", "s-", "tab:blue", "LRP"), ("lrp_mode", "s--", "tab:cyan", "LRP, first call"),
                                 ("saliency", "^-", "tab:orange", "saliency"),
                                 ("integrated_gradients", "v-", "tab:green", "Integrated Gradients")]:
    ax.plot(sc_nodes, [r["methods"][key]["paired_ratio_to_gradient"] for r in sc_rows], style, color=color,
            label=label)
ax.axhline(1.0, color="black", lw=0.8)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("nodes (ten edges per node)")
ax.set_ylabel("time / gradient's")
ax.legend(frameon=False, fontsize=8, ncol=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# Through `Explainer`, an LRP explanation takes {glue:text}`sc_lrp_sal_min` to {glue:text}`sc_lrp_sal_max`
# times the time of saliency, which is one gradient after PyG's prediction pass. Integrated Gradients costs
# {glue:text}`sc_ig_min` to {glue:text}`sc_ig_max` times the gradient, as `CaptumExplainer` runs its steps one
# at a time.
#
# On Mutagenicity, [Comparing explainers](comparing_explainers.ipynb) times LRP against saliency,
# Integrated Gradients and GNNExplainer on its trained model, beside what each explanation finds
# (`benchmarks/bench_explainers.py`).
#
# ## Many targets of one large graph
#
# `LRPExplainer(per_index=True)` explains each node of `index` on its own, in one call, in chunks of targets
# over their k-hop subgraphs. `benchmarks/bench_nodes.py` explains many targets of a random graph with a GCN;
# saliency and GNNExplainer run one call per target, timed on a subset.

# %% tags=["hide-input"]
s = nodes_b["settings"]
display(Markdown(machine_note(nodes_b) + f" {s['layers']}-layer GCN ({s['features']} features, {s['hidden']} "
                 f"hidden), {s['nodes']:,} nodes, {s['edges']:,} edges, {s['targets']:,} targets, float32."))
display(results_table([r for r in nodes_b["results"] if r["key"] in ("lrp", "lrp_gin", "saliency", "gnnexplainer")], [
    ("method", "method"),
    ("targets timed", "targets", "{:,}"),
    ("seconds", "seconds", lambda v: "-" if v is None else f"{v:,.2f}"),
    ("targets per second", "nodes_per_second", lambda v: "fails" if v is None else f"{v:,.3g}"),
]))
nodes_rows = {r["key"]: r for r in nodes_b["results"]}
g("nodes_lrp", nodes_rows["lrp"]["nodes_per_second"], "{:,.0f}")
g("nodes_vs_saliency", nodes_rows["lrp"]["nodes_per_second"] / nodes_rows["saliency"]["nodes_per_second"], "{:,.0f}")
g("nodes_gnn_hours", nodes_rows["gnnexplainer"]["seconds_all_targets_extrapolated"] / 3600, "{:,.1f}")

# %% [markdown]
# LRP explains {glue:text}`nodes_lrp` targets per second, {glue:text}`nodes_vs_saliency` times the rate of
# saliency, which runs the whole graph forward and backward for every target; GNNExplainer would need
# {glue:text}`nodes_gnn_hours` hours for all of them.
#
# ## Memory
#
# `benchmarks/bench_explain_memory.py` measures one explanation's peak memory (its graph's first call; median of
# three fresh processes) on the GCN compared with other explainers, ten edges per node:

# %% tags=["hide-input"]
em_rows = memory_b["results"]
display(Markdown(machine_note(memory_b)))
display(results_table(em_rows, [
    ("nodes", "nodes", "{:,}"),
    ("gradient (MiB)", lambda r: r["cases"]["gradient"]["peak_mib"], "{:,.0f}"),
    ("LRP, nodes", lambda r: r["cases"]["lrp"]["ratio_to_gradient"], "{:.2f}x"),
    ("LRP, nodes and edges", lambda r: r["cases"]["lrp_edges"]["ratio_to_gradient"], "{:.2f}x"),
]))
for case in ("lrp", "lrp_edges"):
    g(f"em_{case}_min", min(r["cases"][case]["ratio_to_gradient"] for r in em_rows))
    g(f"em_{case}_max", max(r["cases"][case]["ratio_to_gradient"] for r in em_rows))
assert all(r["cases"]["lrp"]["peak_mib"] < r["cases"]["lrp_edges"]["peak_mib"] for r in em_rows)

# %% [markdown]
# With node masks alone an explanation takes {glue:text}`em_lrp_min` to {glue:text}`em_lrp_max` times the
# gradient's peak memory. The edge masks keep every layer's messages for their hooks:
# {glue:text}`em_lrp_edges_min` to {glue:text}`em_lrp_edges_max` times. For a graph that barely fits, ask for
# the node mask alone.
#
# ## The teaching implementations
#
# The relevance ops that the chapters of *How it works* build by hand (`lrp_lib.teach`) are timed in those chapters, each
# against the plain gradient of the same computation. At a glance, forward and backward together, and the peak
# memory:

# %% tags=["hide-input"]
graph_rows = {r["measure"]: r for r in graph_b["results"]}
conv_rows = {(r["table"], r["variant"]): r for r in conv_b["results"]}
plain_ops = [r for r in ops_b["results"] if r.get("group") is None and r["case"] != "original_eps"]
summary = [(r["description"].replace(",000,000", "M").replace(",000", "k"), r["fwd_bwd_ratio"], r["memory_ratio"])
           for r in plain_ops]
summary.append(("Graph Network, 4 blocks (backward)", graph_rows["backward_time"]["ratio"],
                graph_rows["peak_rss_increase"]["ratio"]))
summary += [(f"residual CNN, {v} rule", conv_rows["residual", v]["time_ratio"], conv_rows["residual", v]["rss_ratio"])
            for v in ("epsilon", "gamma", "z+")]
fig, axes = plt.subplots(1, 2, figsize=(BOOK_WIDTH, 3.6), sharey=True)
ypos = np.arange(len(summary))[::-1]
for ax, col, title in [(axes[0], 1, "time / gradient's"), (axes[1], 2, "peak memory / gradient's")]:
    values = [s_[col] for s_ in summary]
    ax.barh(ypos, values, color=["tab:blue"] * len(plain_ops) + ["tab:green"] + ["tab:orange"] * 3)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel(title)
    for y, v in zip(ypos, values):
        ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.25)
axes[0].set_yticks(ypos, [s_[0] for s_ in summary], fontsize=8)
fig.suptitle("Relevance against gradient: ops (blue), Graph Network (green), CNN (orange)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Measuring on your machine
#
# Each script prints its tables and writes its results file, which this page reads. From the repository
# root:
#
# ```bash
# python benchmarks/bench_mechanism.py        # one explanation: mechanism.json; molecules: mechanism-molecules.json
# python benchmarks/bench_edge_attr.py        # molecules with bond features: edge_attr.json
# python benchmarks/bench_scaling.py          # against saliency and IG: scaling.json
# python benchmarks/bench_nodes.py            # many targets: nodes.json (--fast: a smaller graph)
# python benchmarks/bench_explain_memory.py   # memory: explain_memory.json
# python benchmarks/bench_mechanism.py --device cuda   # on a GPU: mechanism-cuda.json
# ```
#
# `--help` lists each script's options (sizes, repeats, `--threads`).
#
# ## Summary
#
# - An explanation is one forward and one backward; from the second call on a graph it runs captured, and
#   graphs explained once each share one capture.
# - `compile=True` makes an explanation cheaper than the eager gradient on large graphs, and one compilation
#   serves graphs of every size (with an edge mask, one per graph explained again); it pays where many
#   explanations follow.
# - Molecules cost least as one batch, each with its own accounts.
# - Edge masks cost memory: the messages are kept for their hooks.
