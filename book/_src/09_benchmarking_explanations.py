# %% [markdown]
# # Benchmarking explanations
#
# How good are LRP's explanations of graph networks, next to the methods the literature compares
# against? Earlier chapters judged them one task at a time (Mutagenicity in
# [Explaining a graph classifier](05_explaining_gnns), the infection graphs in [Case study: infection](06_case_infection),
# walks in [Relevant walks](08_relevant_walks)). This chapter scores them on the standard benchmarks
# that plant a *ground-truth explanation*, each under the protocol of the paper whose numbers it
# quotes, so that a baseline can be checked against its published figure before anything is
# concluded about LRP. The ground-truth numbers come from one benchmark, `benchmarks/bench_quality.py`,
# which generates the data, trains the models and explains the protocol's instances with every method;
# the later sections name the benchmarks they read.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes `LRPExplainer` from [Explaining a graph classifier](05_explaining_gnns) and the walks of
# [Relevant walks](08_relevant_walks). After it you can
# - state the protocol behind each published explanation-AUROC (instances, pooling, ground truth) and
#   why the same method gets different numbers under different protocols;
# - check a baseline against its published number before comparing anything with it;
# - read a task x method table with 95 % intervals over seeds, and random under each protocol;
# - choose an LRP rule, explained quantity and mask for your model and task from the evidence.
# ```

# %% tags=["hide-input"]
import textwrap
import warnings

warnings.filterwarnings("ignore")  # import-time notes of the libraries; nothing of ours

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from myst_nb import glue

from lrp_lib.book.plotting import BOOK_WIDTH, book_style
from lrp_lib.book.quality import METHOD_NAMES, TASK_TITLES, method_name
from lrp_lib.book.results import load_results, machine_note, results_table

book_style()
quality = load_results("quality")
tasks = quality["results"]["tasks"]
summary = quality["results"]["summary"]
settings = quality["settings"]

TITLES, BASE, name = TASK_TITLES, METHOD_NAMES, method_name


def ci(row, i):
    """The low (i = 0) or high (i = 1) end of a row's 95 % interval, clipped to [0, 1], the range of an AUROC.

    None with one seed.
    """
    return min(max(row["ci95"][i], 0.0), 1.0) if row.get("ci95") else None


order = [t for t in TITLES if t in tasks]
#: What each protocol scores, in a few words (the protocols table below describes each in full).
PROTOCOL = {"lineage_node": "edges, pooled", "infection": "path edges, pooled", "xiong_node": "nodes, per graph",
            "mutag_pooled": "bonds, pooled", "graph_attribution": "atoms, per molecule"}
print(
    f"{len(order)} tasks, {settings['seeds']} seeds each, "
    f"{len(settings['methods'])} methods"
)
instances = ", ".join(f"{TITLES[t]} {tasks[t]['instances_per_seed'][0]}" for t in order)
print(textwrap.fill(f"explained instances per seed: {instances}", width=88))
glue("n_tasks", str(len(order)), display=False)
glue("n_seeds", str(settings["seeds"]), display=False)
glue("n_methods", str(len(settings["methods"])), display=False)
glue(
    "n_lrp_configs",
    str(sum(m.startswith("lrp_") for m in settings["methods"])),
    display=False,
)

# %% [markdown]
# (quality-protocols)=
# ## Protocols
#
# An explanation gives each edge (or node, or atom) a score; the benchmark plants a pattern that
# decides the label, and asks whether the planted edges get the highest scores. The measure is the
# area under the ROC curve, the probability that a random ground-truth element outranks a random
# other one (1 perfect, 0.5 chance, 0 a perfect ranking upside down). It only uses the order of the
# scores, so *which* elements are ranked together decides the number as much as the explainer does.
# Published figures come from three traditions, and each task here follows the one its published
# numbers come from:
#
# - **The GNNExplainer / PGExplainer lineage** {cite}`ying2019gnnexplainer,luo2020pgexplainer`, as
#   Holdijk et al. {cite}`holdijk2021re` reproduced it: BA-Shapes, BA-Community, Tree-Cycles and Tree-Grid built as
#   GNNExplainer's generator builds them (a Barabási–Albert graph of 300 nodes or a binary tree of
#   depth 8, 80 houses, 60 six-cycles or 80 3 x 3 grids attached, then a few random edges), the
#   three-layer GCN of that lineage (20 units per layer, each layer's output normalised, the three
#   outputs concatenated before the linear head), and the lineage's explained nodes: every fifth
#   node from 400 to 700 on the BA graphs, every sixth from 511 to 871 on Tree-Cycles, 511 to 800 on
#   Tree-Grid. The edges among a node's 3-hop neighbourhood (its computation graph) are scored and
#   *pooled* over the explained nodes.
# - **Xiong et al.** {cite}`xiong2022sgnnlrp` on BA-2Motifs: their three-layer GIN, balanced test
#   graphs, *node* AUROC per graph against the five motif nodes, averaged over graphs (edge AUROC is
#   reported beside it).
# - **Mutagenicity** in the PGExplainer lineage: only mutagens that contain an NO$_2$ or NH$_2$
#   group, the ground truth being the bonds inside it, edge AUROC pooled over those molecules, with
#   the lineage's graph GCN (max and mean pool).
# - **Sanchez-Lengeling et al.** {cite}`sanchez2020evaluating` on their four molecular tasks: atom
#   AUROC per molecule of label 1, the *best* over the alternative ground truths, averaged.
# - **Infection** {cite}`baldassarre2019explainability` keeps the protocol of
#   [Case study: infection](06_case_infection): the edges on the shortest paths from an infected node.
#
# The protocols, the models and their accuracy (on held-out data, and on the explained instances)
# as the results file records them:

# %% tags=["hide-cell"]
rows = [{"protocol": PROTOCOL.get(k, k), "description": v} for k, v in settings["protocols"].items()]
display(
    results_table(rows, [("protocol", "protocol"), ("what is scored", "description")])
)
rows = []
for t in order:
    per = tasks[t]["metrics_per_seed"]
    rows.append(
        {
            "task": TITLES[t],
            "protocol": tasks[t]["protocol"],
            "model": tasks[t]["model"],
            "test": np.mean([m["test_accuracy"] for m in per]),
            "explained": np.mean([m["explained_accuracy"] for m in per]),
            "n": sum(tasks[t]["instances_per_seed"]),
        }
    )
display(
    results_table(
        rows,
        [
            ("task", "task"),
            ("protocol", "protocol"),
            ("model", "model"),
            ("test accuracy", "test", "{:.3f}"),
            ("accuracy on the explained instances", "explained", "{:.3f}"),
            ("instances over all seeds", "n", "{}"),
        ],
    )
)
display(
    results_table(
        [{"k": k, "v": v} for k, v in settings["models"].items()],
        [("models", "k"), ("architecture and training", "v")],
    )
)

# %% [markdown]
# A seed fixes the generated data, the model's initialisation and training, and the explainers'
# randomness; every (task, method) is reported as the mean over {glue:text}`n_seeds` seeds with a
# 95 % Student-t interval over them, clipped to [0, 1], the range of an AUROC. Node-level methods run
# on the 4-hop subgraph of the explained node: a three-layer GCN's output at a node depends only on
# that subgraph (the fourth hop supplies the degrees that GCN's normalisation needs), which the script
# checks node by node.
#
# Accuracy matters for reading the rest: an explanation can only find the planted motif if the
# model uses it {cite}`faber2021comparing`. The explained
# instances of the lineage are taken as the protocol lists them, correct or not, so their accuracy
# is printed beside the test accuracy.
#
# ## The methods
#
# LRP is run in every combination of a rule composite, the explained quantity and the mask, each a
# method of its own ({glue:text}`n_lrp_configs` in all); the three masks are transforms of one
# explanation (`lrp_lib.explain.explainer.relevance_mask`), so they share one call and one time:

# %% tags=["hide-cell"]
lrp = settings["lrp"]
rows = [
    {"part": "composite (rule=)", "key": k, "what": v}
    for k, v in lrp["composites"].items()
]
rows += [{"part": "explained=", "key": k, "what": v} for k, v in lrp["explained"].items()]
rows += [{"part": "mask=", "key": k, "what": v} for k, v in lrp["masks"].items()]
display(results_table(rows, [("choice", "part"), ("value", "key"), ("meaning", "what")]))
others = {k: v for k, v in settings["methods"].items() if not k.startswith("lrp_")}
display(
    results_table(
        [{"k": name(k), "v": v} for k, v in others.items()],
        [("other method", "k"), ("what", "v")],
    )
)
dropped = settings["dropped_methods"]
display(
    results_table(
        [{"k": k, "v": v} for k, v in dropped.items()], [("left out", "k"), ("why", "v")]
    )
)

# %% [markdown]
# GNNExplainer and PGExplainer run with the settings of Holdijk et al.'s replication configurations
# for the lineage tasks, BA-2Motifs and Mutagenicity (epochs, learning rate, the size and entropy
# coefficients, PGExplainer's temperature schedule and sampling bias), and with PyG's documented
# defaults elsewhere; the gradient methods are Captum's {cite}`kokhlikyan2020captum`; CAM and
# Grad-CAM {cite}`zhou2016cam,pope2019explainability` read the model's read-out. The settings used,
# per task:

# %% tags=["hide-cell"]
rows = []
for t in order:
    s = tasks[t]["explainer_settings"]
    rows.append(
        {
            "task": TITLES[t],
            "gnn": ", ".join(f"{k} {v}" for k, v in s["gnn"].items()),
            "pg": ", ".join(f"{k} {v}" for k, v in s["pg"].items()),
        }
    )
display(
    results_table(
        rows,
        [("task", "task"), ("GNNExplainer", "gnn"), ("PGExplainer (training)", "pg")],
    )
)

# %% [markdown]
# (quality-heatmap)=
# ## Results
#
# The mean AUROC of the main methods (rows) on every task (columns): the LRP configurations chosen below (the
# overall choice is `LRPExplainer()`'s default), epsilon with the $|R|$ mask, signed epsilon (LRP-0 up to its
# stabiliser), sGNN-LRP's gamma schedule, and the best LRP configuration of each task (a different one per
# column), then the other methods. The full tables, with every LRP configuration,
# the 95 % intervals and the time per explanation, are folded under the figure.

# %% tags=["hide-input"]
overall, node_sel, graph_sel = (
    summary["overall"],
    summary["node_level"],
    summary["graph_level"],
)
lrp_shown = []
for key in [
    overall["winner"],
    node_sel["winner"] if node_sel else None,
    graph_sel["winner"] if graph_sel else None,
    "lrp_epsilon_logit_abs",
    "lrp_epsilon_logit_relevance",
    "lrp_gamma_sgnn_logit_relevance",
]:
    if key and key not in lrp_shown:
        lrp_shown.append(key)
main = (
    lrp_shown
    + ["lrp_best"]
    + [m for m in BASE if any(m in tasks[t]["methods"] for t in order)]
)
grid = np.full((len(order), len(main)), np.nan)
for i, t in enumerate(order):
    for j, m in enumerate(main):
        # the best of all LRP configurations on this task (a different one per task)
        if m == "lrp_best":
            grid[i, j] = max(
                v["auroc"] for k, v in tasks[t]["methods"].items() if k.startswith("lrp_")
            )
        elif m in tasks[t]["methods"]:
            grid[i, j] = tasks[t]["methods"][m]["auroc"]
# methods down, tasks across: one row per method, so that the figure fits the page's width
fig, ax = plt.subplots(figsize=(BOOK_WIDTH, 1.6 + 0.3 * len(main)))
im = ax.imshow(grid.T, cmap="viridis", vmin=0.3, vmax=1.0, aspect="auto")
for i in range(len(order)):
    for j in range(len(main)):
        if not np.isnan(grid[i, j]):
            ax.text(
                i,
                j,
                f"{grid[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if grid[i, j] < 0.75 else "black",
            )
ax.set_yticks(
    range(len(main)),
    [name(m) if m != "lrp_best" else "LRP, best configuration per task" for m in main],
    fontsize=8,
)
ax.set_xticks(
    range(len(order)),
    [f"{TITLES[t]} ({PROTOCOL[tasks[t]['protocol']]})" for t in order],
    rotation=50,
    ha="right",
    rotation_mode="anchor",
    fontsize=8,
)
fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02, label="mean AUROC over seeds")
ax.set_title("Ground-truth AUROC, each task under its own protocol")
plt.tight_layout()
plt.show()


# %% tags=["hide-cell"]
def full_table(t):
    rows = []
    for m, r in sorted(tasks[t]["methods"].items(), key=lambda kv: -kv[1]["auroc"]):
        pub = "; ".join(f"{p['value']:.3f}" for p in r.get("published", []))
        row = {
            "method": name(m),
            "auroc": r["auroc"],
            "lo": ci(r, 0),
            "hi": ci(r, 1),
            "ms": r["ms"],
            "published": pub or None,
        }
        if "edge_auroc" in r:
            row["edge"] = r["edge_auroc"]["auroc"]
        rows.append(row)
    cols = [
        ("method", "method"),
        ("AUROC", "auroc", "{:.3f}"),
        ("95 % low", "lo", "{:.3f}"),
        ("95 % high", "hi", "{:.3f}"),
    ]
    if any("edge" in r for r in rows):
        cols.append(("edge AUROC", "edge", "{:.3f}"))
    cols += [("ms per explanation", "ms", "{:.1f}"), ("published", "published")]
    return results_table(rows, cols)


for t in order:
    display(
        Markdown(
            f"**{TITLES[t]}** ({PROTOCOL[tasks[t]['protocol']]}; "
            f"test accuracy {tasks[t]['accuracy']:.3f})"
        )
    )
    display(full_table(t))
display(Markdown(machine_note(quality)))

# %% [markdown]
# (quality-random)=
# ## Random under each protocol
#
# Chance is 0.5 only for some protocols. Pooling over instances keeps it there; taking the *best*
# of several alternative ground truths per molecule lifts it, and per-graph averages of small graphs
# scatter it. The random row of every task, with its interval:

# %% tags=["hide-input"]
rows = []
for t in order:
    r = tasks[t]["methods"]["random"]
    best = max(
        (m for m in tasks[t]["methods"] if m != "random"),
        key=lambda m: tasks[t]["methods"][m]["auroc"],
    )
    rows.append(
        {
            "task": TITLES[t],
            "protocol": PROTOCOL[tasks[t]["protocol"]],
            "random": r["auroc"],
            "lo": ci(r, 0),
            "hi": ci(r, 1),
            "best": name(best),
            "best_auroc": tasks[t]["methods"][best]["auroc"],
            "gap": tasks[t]["methods"][best]["auroc"] - r["auroc"],
        }
    )
display(
    results_table(
        rows,
        [
            ("task", "task"),
            ("protocol", "protocol"),
            ("random", "random", "{:.3f}"),
            ("95 % low", "lo", "{:.3f}"),
            ("95 % high", "hi", "{:.3f}"),
            ("best method", "best"),
            ("its AUROC", "best_auroc", "{:.3f}"),
            ("best - random", "gap", "{:+.3f}"),
        ],
    )
)
gaps = [r["gap"] for r in rows]
attr = [r["random"] for r in rows if r["protocol"] == PROTOCOL["graph_attribution"]]
if attr:
    glue("random_attr_lo", f"{min(attr):.3f}", display=False)
    glue("random_attr_hi", f"{max(attr):.3f}", display=False)

# %% tags=["remove-cell"]
glue("min_gap", f"{min(gaps):.3f}", display=False)
glue("min_gap_task", rows[int(np.argmin(gaps))]["task"], display=False)
glue(
    "gap_sentence",
    (
        "so every task separates a method that finds the motif from one that does not by "
        "more than 0.15."
        if min(gaps) > 0.15
        else "so not every task separates methods by more than 0.15: "
        "the rows below that margin rank explainers by little more than noise."
    ),
    display=False,
)

# %% [markdown]
# On every task the best method is {glue:text}`min_gap` or more above random (the smallest margin is on
# {glue:text}`min_gap_task`); {glue:text}`gap_sentence` On the molecular tasks random scores between {glue:text}`random_attr_lo` and
# {glue:text}`random_attr_hi`: the best-of-alternatives rule lifts chance where a molecule satisfies
# the task's rule in several ways.
#
# (quality-published)=
# ## The baselines against their published numbers
#
# Before comparing LRP with a baseline, the baseline should reproduce its own paper under the same
# protocol. Every published number the results file carries, beside ours (mean and 95 % interval
# over seeds) and the difference; the fifth column says whether ours comes within
# {glue:text}`tol_published` of it and, where it does not, why (*another protocol*: the published figure was not measured the way ours
# is). The sources are listed below the table.


# %% tags=["hide-input"]
def why_not(t, m, p):
    """The reason a published number is not reproduced.

    A key of the list below the table.
    """
    if not p["same_protocol"]:
        return "another protocol"
    if t == "ba_2motifs":
        return "Xiong's training and scoring"
    if t in ("benzene", "fluoride_carbonyl", "alkane_carbonyl", "amine_ether_benzene"):
        return "median of a sweep"
    # do the original code's settings reproduce the figure on this task?
    if m.startswith("gnnexplainer"):
        orig = tasks[t]["methods"].get("gnnexplainer_orig", {}).get("published", [])
        if any(q["value"] == p["value"] and q["within_0.05"] for q in orig):
            return "GNNExplainer's optimisation"
        return "another model"
    if m == "pgexplainer":
        flat = sum(v == 0.5 for v in tasks[t]["methods"][m]["auroc_per_seed"])
        return "PGExplainer's training" + (
            f" (a constant mask on {flat} of the seeds)" if flat else ""
        )
    return "another model"


def interval(q):
    """Our mean and its 95 % interval over seeds, in one cell."""
    if ci(q, 0) is None:
        return f"{q['auroc']:.3f}"
    return f"{q['auroc']:.3f} ({ci(q, 0):.3f} to {ci(q, 1):.3f})"


rows, sources = [], []
for t in order:
    for m, r in tasks[t]["methods"].items():
        for p in r.get("published", []):
            edge = p.get("compared_with") == "edge_auroc"
            q = r["edge_auroc"] if edge else r
            source = p["source"] + (f" ({p['note']})" if p["note"] else "")
            if source not in sources:
                sources.append(source)
            ok, same = p["within_0.05"], p["same_protocol"]
            verdict = "yes" if ok else f"no: {why_not(t, m, p)}"
            if ok and not same:
                verdict += " (another protocol)"
            rows.append(
                {
                    "task": TITLES[t],
                    "method": name(m) + (" (edge AUROC)" if edge else ""),
                    "ours": interval(q),
                    "published": f"{p['value']:.3f} ({p['difference']:+.3f})",
                    "ok": "yes" if ok else "no",
                    "same": "yes" if same else "no",
                    "verdict": verdict,
                    "source": f"[{sources.index(source) + 1}]",
                }
            )
# seven columns, the sources listed below: the table fits the text column
display(
    results_table(
        rows,
        [
            ("task", "task"),
            ("method", "method"),
            ("ours (95 % interval)", "ours"),
            ("published (ours - published)", "published"),
            ("within 0.05 (why not: see below)", "verdict"),
            ("source", "source"),
        ],
    )
)
display(
    Markdown(
        "Sources of the published numbers:\n\n"
        + "\n".join(f"{i}. {source}" for i, source in enumerate(sources, start=1))
    )
)
same = [r for r in rows if r["same"] == "yes"]
elsewhere = []
for t in order:
    for m, ps in tasks[t].get("published_elsewhere", {}).items():
        for p in ps:
            elsewhere.append(
                {
                    "task": TITLES[t],
                    "method": m,
                    "value": p["value"],
                    "source": p["source"],
                    "note": p["note"],
                }
            )
display(
    Markdown(
        "Published numbers of methods not run here (the best known figure on the task):"
    )
)
display(
    results_table(
        elsewhere,
        [
            ("task", "task"),
            ("method", "method"),
            ("published", "value", "{:.3f}"),
            ("source", "source"),
            ("note", "note"),
        ],
    )
)

# %% tags=["remove-cell"]
glue("n_anchor", str(len(same)), display=False)
glue("n_anchor_ok", str(sum(r["ok"] == "yes" for r in same)), display=False)
glue("tol_published", "0.05", display=False)

# %% [markdown]
# {glue:text}`n_anchor_ok` of the {glue:text}`n_anchor` published numbers measured under our
# protocol are reproduced within {glue:text}`tol_published`. The reasons for those that are not:
#
# - **PGExplainer's training.** PGExplainer's paper figures were not reproducible from the paper
#   alone {cite}`holdijk2021re`, and on Tree-Cycles the paper and a re-implementation under the same
#   protocol (MixupExplainer {cite}`zhang2023mixupexplainer`) are themselves far apart: an explainer that is *trained* per model
#   and seed varies from run to run, as its wide intervals here show. Ours trains on at most sixty of
#   the protocol's instances per seed, with the replication's epochs and coefficients; on some seeds
#   its training ends in a constant mask, which ranks nothing (an AUROC of exactly one half).
# - **GNNExplainer's optimisation.** The replication's configurations use learning rates far below
#   the original code's, so in a hundred epochs the edge mask moves little from its random start;
#   the rows *GNNExplainer (original settings)* run the original learning rate and coefficients on
#   the same instances. Where that row reproduces the paper and the replication's settings do not,
#   the settings are the reason.
# - **Another model.** Where neither GNNExplainer's settings reproduce the paper, and on Tree-Cycles
#   for the gradient, the published figure explains another trained model of the task: the protocol
#   is the same, the model and its training data are not. On Tree-Cycles and Tree-Grid every method
#   here, LRP included, stays below the published figures of the task.
# - **Xiong's training and scoring.** On BA-2Motifs their GIN was trained with SGD one graph at a
#   time, their GNNExplainer is their own dense-mask variant, and their baselines are scored through
#   a greedy node *ordering* of the explanation rather than its node scores. Our GINs, the same
#   architecture trained with Adam in batches, reach the same accuracy but not the same explanations
#   on every seed ({ref}`per seed below <quality-seeds>`).
# - **Median of a sweep.** The molecular figures are medians over Sanchez-Lengeling et al.'s sweep of
#   GCN hyperparameters; ours is one GCN per seed.
# - **Another protocol.** Luo et al.'s BA-2Motifs figures are edge AUROCs of a GCN; they sit beside
#   our edge AUROC of a GIN for orientation only.
#
# The methods of the second table are not run here; their figures come from their papers (MixupExplainer
# {cite}`zhang2023mixupexplainer`, ProxyExplainer {cite}`chen2024proxyexplainer`).
#
# (quality-seeds)=
# ### One task, five models
#
# Faber et al. {cite}`faber2021comparing` warn that a model may reach its accuracy without the planted motif. BA-2Motifs
# shows how much the *model* decides: the GINs of the different seeds classify the test graphs
# equally well, yet the same explainer finds the motif on one seed's model and not on another's.

# %% tags=["hide-cell"]
t = "ba_2motifs"
if t in tasks:
    meth = tasks[t]["methods"]
    best_lrp = max(
        (m for m in meth if m.startswith("lrp_")), key=lambda m: meth[m]["auroc"]
    )
    picks = [best_lrp] + [
        m
        for m in ("sgnn_greedy", "saliency", "cam", "gnnexplainer", "pgexplainer")
        if m in meth
    ]
    rows = []
    for i, metrics in enumerate(tasks[t]["metrics_per_seed"]):
        rows.append(
            {
                "seed": i,
                "acc": metrics["test_accuracy"],
                **{
                    m: meth[m]["auroc_per_seed"][i]
                    for m in picks
                    if len(meth[m]["auroc_per_seed"]) > i
                },
            }
        )
    display(
        results_table(
            rows,
            [("seed", "seed", "{}"), ("test accuracy", "acc", "{:.3f}")]
            + [(name(m), m, "{:.3f}") for m in picks],
        )
    )
    spread = [
        max(meth[m]["auroc_per_seed"]) - min(meth[m]["auroc_per_seed"]) for m in picks
    ]
    glue("seed_spread", f"{max(spread):.2f}", display=False)

# %% [markdown]
# The AUROC of one method moves by up to {glue:text}`seed_spread` between seeds whose models are
# nearly equally accurate, more than most differences between methods on one model: the interval over seeds
# is part of the result, and a single published model is one draw.
#
# (quality-default)=
# ## Choosing LRP's default
#
# The rule was declared before the run, as printed below. It is applied over all tasks, and over the
# node-level and the graph-level tasks alone, since a library can pick its default from the model's
# configuration (`task_level`).

# %% tags=["hide-input"]
print(textwrap.fill(summary["rule"], width=88))
rows = []
for label, sel in (
    ("all tasks", overall),
    ("node-level tasks", node_sel),
    ("graph-level tasks", graph_sel),
):
    if sel:
        rows.append(
            {
                "tasks": label,
                "winner": name(sel["winner"]),
                "rank": sel["winner_mean_rank"],
                "n": len(sel["tasks"]),
                "ms": sel["configurations"][sel["winner"]]["ms"],
            }
        )
display(
    results_table(
        rows,
        [
            ("selection over", "tasks"),
            ("default", "winner"),
            ("mean rank", "rank", "{:.2f}"),
            ("tasks", "n", "{}"),
            ("median ms", "ms", "{:.1f}"),
        ],
    )
)
top = list(overall["configurations"].items())[:8]
display(
    results_table(
        [{"c": name(k), "r": v["mean_rank"], "ms": v["ms"]} for k, v in top],
        [
            ("best LRP configurations, all tasks", "c"),
            ("mean rank", "r", "{:.2f}"),
            ("median ms", "ms", "{:.1f}"),
        ],
    )
)

# %% tags=["hide-cell"]
nl = overall["non_lrp_mean_rank"]
display(
    results_table(
        [{"m": name(k), "r": v} for k, v in sorted(nl.items(), key=lambda kv: kv[1])],
        [("other methods", "m"), ("mean rank over the tasks they run on", "r", "{:.2f}")],
    )
)

# %% tags=["remove-cell"]
glue("winner", name(overall["winner"]), display=False)
glue("winner_rank", f"{overall['winner_mean_rank']:.2f}", display=False)
levels = {"over the node-level tasks alone": node_sel, "over the graph-level tasks alone": graph_sel}
if all(s and s["winner"] == overall["winner"] for s in levels.values()):
    glue("level_winners", "the same configuration wins over the node-level and over the graph-level tasks "
         "alone", display=False)
else:
    glue("level_winners", "; ".join(f"{k} {name(s['winner']) if s else '-'}" for k, s in levels.items()),
         display=False)
glue("n_rankers", str(len(tasks[order[0]]["methods"])), display=False)

# %% [markdown]
# Over all tasks the default is **{glue:text}`winner`** (mean rank {glue:text}`winner_rank`), and
# {glue:text}`level_winners`. How the overall winner fares on each task, against the best method
# that is not LRP and against Grad x Input (LRP-0 of a bias-free ReLU network *is* Grad x Input, so
# a rule that does not beat it adds nothing):

# %% tags=["hide-input"]
rows = []
for t in order:
    p = overall["per_task"][t]
    rows.append(
        {
            "task": TITLES[t],
            "w": p["winner_auroc"],
            "best": name(p["best_non_lrp"]),
            "b": p["best_non_lrp_auroc"],
            "close": "yes" if p["within_0.01_of_best_non_lrp"] else "no",
            "gxi": "yes" if p["better_than_grad_x_input"] else "no",
            "top": name(p["best_method"]),
        }
    )
display(
    results_table(
        rows,
        [
            ("task", "task"),
            ("default's AUROC", "w", "{:.3f}"),
            ("best non-LRP method", "best"),
            ("its AUROC", "b", "{:.3f}"),
            ("default within 0.01", "close"),
            ("default > Grad x Input", "gxi"),
            ("best method overall", "top"),
        ],
    )
)
losses = [r for r in rows if r["close"] == "no"]

# %% tags=["remove-cell"]
glue("n_close", str(sum(r["close"] == "yes" for r in rows)), display=False)
glue("n_gxi", str(sum(r["gxi"] == "yes" for r in rows)), display=False)
glue("tol_best", "0.01", display=False)
glue("n_losses", str(len(losses)), display=False)

# %% [markdown]
# The default is within {glue:text}`tol_best` of the best non-LRP method (or above it) on
# {glue:text}`n_close` of the {glue:text}`n_tasks` tasks, and above Grad x Input on
# {glue:text}`n_gxi`.
#
# (quality-losses)=
# ## Where LRP loses
#
# On {glue:text}`n_losses` tasks the default trails the best non-LRP method by more than
# {glue:text}`tol_best`. For each of them: the winner, the best LRP configuration *of that task*
# (a different rule may close the gap), and the margins (folded below):

# %% tags=["hide-cell"]
rows = []
for t in order:
    p = overall["per_task"][t]
    if p["within_0.01_of_best_non_lrp"]:
        continue
    meth = tasks[t]["methods"]
    best_lrp = max(
        (m for m in meth if m.startswith("lrp_")), key=lambda m: meth[m]["auroc"]
    )
    rows.append(
        {
            "task": TITLES[t],
            "winner": name(p["best_non_lrp"]),
            "wa": p["best_non_lrp_auroc"],
            "d": p["winner_auroc"] - p["best_non_lrp_auroc"],
            "bl": name(best_lrp),
            "bla": meth[best_lrp]["auroc"],
            "acc": tasks[t]["accuracy"],
        }
    )
display(
    results_table(
        rows,
        [
            ("task", "task"),
            ("wins there", "winner"),
            ("its AUROC", "wa", "{:.3f}"),
            ("default - winner", "d", "{:+.3f}"),
            ("best LRP configuration there", "bl"),
            ("its AUROC", "bla", "{:.3f}"),
            ("model test accuracy", "acc", "{:.3f}"),
        ],
    )
)
winners = sorted({r["winner"] for r in rows})

# %% tags=["remove-cell"]
glue(
    "loss_sentence",
    (
        "; ".join(f"{r['task']}: {r['winner']} (the default {r['d']:+.3f})" for r in rows)
        + "."
        if rows
        else "none."
    ),
    display=False,
)
glue("loss_winners", ", ".join(winners) if winners else "none", display=False)

# %% [markdown]
# The tasks and the method that beats the default there: {glue:text}`loss_sentence` The methods that
# win there are {glue:text}`loss_winners`. Where PGExplainer wins, it is an explainer *trained* on
# sixty of the protocol's nodes of that very model per seed; where the best LRP configuration of the
# task differs from the default, the choice of rule closes part of the gap, at no extra cost.
#
# ### Why: does the model use the motif?
#
# A ground-truth AUROC rewards an explanation for ranking the planted motif first. If the model computes its
# prediction from more than the motif, an explanation of the model ranks other nodes among the motif's. One
# way to tell: keep only some nodes' features (zero the others, the graph unchanged) and see how much of the
# explained logit comes back, as a share of what all the features give. `benchmarks/bench_losses.py` does this
# on the tasks above, with the same models and instances as the faithfulness benchmark below, for the motif's
# nodes alone and for the top nodes of each explanation, as many as the motif has:

# %% tags=["hide-input"]
losses = load_results("losses")
lrows = []
for t, r in losses["results"].items():
    seeds = len(r["motif_logit"]["per_seed"])
    above_motif = sum(d > m for d, m in zip(r["top_logit_default"]["per_seed"], r["motif_logit"]["per_seed"]))
    above_winner = sum(d > w for d, w in zip(r["top_logit_default"]["per_seed"], r["top_logit_winner"]["per_seed"]))
    lrows.append({"t": t, "task": TITLES[t], "winner": name(r["winner"]), "seeds": seeds,
                  "motif": r["motif_logit"]["mean"], "default": r["top_logit_default"]["mean"],
                  "win": r["top_logit_winner"]["mean"], "above_motif": above_motif, "above_winner": above_winner,
                  "rel": r["motif_abs"]["mean"], "win_rel": r["winner_motif"]["mean"]})
display(results_table(lrows, [
    ("task (winner)", lambda r: f"{r['task']} ({r['winner']})"),
    ("motif alone", "motif", "{:.2f}"), ("default's top", "default", "{:.2f}"), ("winner's top", "win", "{:.2f}"),
    ("seeds, default above motif", lambda r: f"{r['above_motif']} of {r['seeds']}"),
    ("seeds, default above winner", lambda r: f"{r['above_winner']} of {r['seeds']}"),
]))
display(Markdown(machine_note(losses)))
more_than_motif = [r for r in lrows if r["above_motif"] == r["seeds"]]
motif_used = [r for r in lrows if 2 * r["above_motif"] < r["seeds"]]
glue("loss_n", len(lrows), display=False)
more_names = [r["task"] for r in more_than_motif]
glue("loss_more", more_names[0] if len(more_names) == 1 else ", ".join(more_names[:-1]) + " and " + more_names[-1],
     display=False)
glue("loss_more_n", len(more_than_motif), display=False)
glue("loss_more_beats_winner", ", ".join(f"{r['task']} ({r['above_winner']} of {r['seeds']} seeds)"
                                         for r in more_than_motif), display=False)
glue("loss_used", ", ".join(f"{r['task']} ({r['seeds'] - r['above_motif']} of {r['seeds']} seeds; the "
                            f"default puts {r['rel']:.2f} of its relevance on the motif, {r['winner']} "
                            f"{r['win_rel']:.2f})" for r in motif_used) or "none", display=False)
assert more_than_motif and motif_used  # the text names both kinds of task
# the text: there the winner concentrates more on the motif, and its top nodes bring back more on most seeds
assert all(r["rel"] < r["win_rel"] and 2 * r["above_winner"] < r["seeds"] for r in motif_used)

# %% [markdown]
# The columns are the share of the explained logit that comes back, averaged over the instances of a seed and
# then over the seeds; the seed counts compare the default with the motif and with the winner seed by seed. On
# {glue:text}`loss_more` the default's top nodes bring back more of the logit than the motif itself on every
# seed: the model there computes its prediction from more than the planted motif, and an explanation that
# follows the model ranks some other nodes above motif nodes, which costs it ground-truth AUROC. On the same
# tasks the default's top nodes bring back more than the winner's on {glue:text}`loss_more_beats_winner`.
# Where the motif alone brings back more than the default's top nodes on most seeds,
# {glue:text}`loss_used`, the model does use the motif, and the winner concentrates on it more than
# first-order relevance does: there the default is the weaker explanation by both measures.
#
# (quality-second-truth)=
# ## Nodes or edges
#
# Each protocol scores one kind of element: edges on the node tasks and Mutagenicity, nodes on
# BA-2Motifs, atoms on the molecules. Where the data define the other kind, the fresh run of both
# benchmarks ({glue:text}`sel_fresh_seeds` new seeds, below) scores it too: the nodes at the ends of
# the motif's edges (pooled as the edges are), the motif's edges on BA-2Motifs, and on the molecules
# the bonds between two atoms of one ground-truth alternative. A method without scores of that kind
# gets them from its other scores: an edge the mean of its end points, a node its largest incoming edge.

# %% tags=["hide-cell"]
fresh_quality = load_results("confirmatory/quality")
DEFAULT = overall["winner"]  # the default chosen above by ground truth
SECOND = {"node_auroc": "nodes", "edge_auroc": "edges", "bond_auroc": "bonds"}
FIRST = {"lineage_node": "edges", "infection": "edges", "xiong_node": "nodes", "mutag_pooled": "bonds",
         "graph_attribution": "atoms"}
LRP_FAMILY = ("lrp_", "sgnn_", "top_walks")
rows = []
for t in order:
    r = fresh_quality["results"]["tasks"].get(t)
    if r is None:
        continue
    ms = r["methods"]
    key = next((k for k in SECOND if k in ms[DEFAULT]), None)
    others = {m: v for m, v in ms.items() if not m.startswith(LRP_FAMILY) and m != "random"}
    best = max(others, key=lambda m: others[m]["auroc"])
    row = {"task": TITLES[t], "first": FIRST[r["protocol"]], "d1": ms[DEFAULT]["auroc"], "b1": best,
           "v1": others[best]["auroc"]}
    if key is not None:
        best2 = max((m for m in others if key in others[m]), key=lambda m: others[m][key]["auroc"])
        kind = "atoms" if r["level"] == "graph" and key == "node_auroc" else SECOND[key]
        row.update({"second": kind, "d2": ms[DEFAULT][key]["auroc"], "b2": best2, "v2": others[best2][key]["auroc"]})
    rows.append(row)
display(
    results_table(
        [dict(r, b1=name(r["b1"]), b2=name(r["b2"]) if "b2" in r else None) for r in rows],
        [
            ("task", "task"),
            ("protocol scores", "first"),
            ("default", "d1", "{:.3f}"),
            ("best other method", "b1"),
            ("its AUROC", "v1", "{:.3f}"),
            ("other truth", "second"),
            ("default", "d2", "{:.3f}"),
            ("best other method", "b2"),
            ("its AUROC", "v2", "{:.3f}"),
        ],
    )
)

# %% tags=["remove-cell"]
close_first = sum(r["d1"] >= r["v1"] - 0.01 for r in rows)
close_second = sum(r["d2"] >= r["v2"] - 0.01 for r in rows if "d2" in r)
glue("second_n", len(rows), display=False)
glue("second_n_other", sum("d2" in r for r in rows), display=False)
glue("second_close_first", close_first, display=False)
glue("second_close_second", close_second, display=False)

# %% [markdown]
# On this run the default is within {glue:text}`tol_best` of the best non-LRP method, or above it, on
# {glue:text}`second_close_first` of the {glue:text}`second_n` tasks by the protocols' own ground truth,
# and on {glue:text}`second_close_second` of the {glue:text}`second_n_other` by the other one.

# %% [markdown]
# (quality-time)=
# ## Time per explanation
#
# The median wall time of one explanation on one thread, over the instances and seeds of each task
# and then the median over tasks (PGExplainer's includes its share of training; the three masks of an
# LRP configuration share one call). The figures are those of the benchmark run (machine below).

# %% tags=["hide-cell"]
rows = []
for m in [overall["winner"], "lrp_epsilon_logit_abs"] + [
    k for k in BASE if k != "random"
]:
    ms = [tasks[t]["methods"][m]["ms"] for t in order if m in tasks[t]["methods"]]
    if ms and m not in [r["key"] for r in rows]:
        rows.append({"key": m, "m": name(m), "ms": float(np.median(ms)), "n": len(ms)})
display(
    results_table(
        rows,
        [
            ("method", "m"),
            ("median ms per explanation", "ms", "{:.1f}"),
            ("tasks", "n", "{}"),
        ],
    )
)
display(Markdown(machine_note(quality)))
t_lrp = next(r["ms"] for r in rows if r["key"] == overall["winner"])
pg = next((r for r in rows if r["key"] == "pgexplainer"), None)

# %% tags=["remove-cell"]
glue("ratio_pgexplainer", f"{pg['ms'] / t_lrp:.0f}", display=False)

# %% [markdown]
# One LRP explanation costs one forward and one backward pass; PGExplainer takes about
# {glue:text}`ratio_pgexplainer` times as long on these tasks once its training is shared out over the
# explained instances. What GNNExplainer costs beside LRP is measured on one model in
# [Comparing explainers](comparing_explainers.ipynb), and what LRP costs against a gradient (saliency,
# Integrated Gradients) in [Performance](performance.ipynb).
#
# (quality-faithfulness)=
# ## Do the explanations follow the model?
#
# A ground-truth AUROC asks whether an explanation finds the motif planted in the data. A model can
# predict well without using all of the motif, or by using more than it, and LRP's claim is a different
# one: that the relevance shows what the model computed. The deletion test measures that claim directly.
# Rank the edges by an explanation, remove the top tenth of them, then two tenths and so on, and follow
# the model's probability for the explained class: the faster it falls, the more of what the model used
# the ranking put first. The area under that curve is the score, lower being more faithful. The same is
# done with the nodes, whose features are set to zero.
# `benchmarks/bench_faithfulness.py` runs it on the tasks, models, seeds and explainers above, with
# insertion curves (only the top edges kept), the logit's curves and PyG's fidelity beside it; the ground
# truth ranked first and a random ranking are reference rows.

# %% tags=["hide-input"]
faith = load_results("faithfulness")
ftasks = faith["results"]
forder = [t for t in order if t in ftasks]
SHOWN = {
    "lrp_zplus_logit_abs": ("LRP default (z+, |R|)", "o"),
    "lrp_epsilon_logit_relevance": ("LRP epsilon, signed R", "s"),
    "grad_x_input": ("Grad x Input", "^"),
    "integrated_gradients": ("Integrated Gradients", "v"),
    "gnnexplainer": ("GNNExplainer", "D"),
    "pgexplainer": ("PGExplainer", "P"),
    "random": ("random", "x"),
    "ground_truth": ("ground truth first", "*"),
}


def deletion(task, method, on):
    row = ftasks[task]["methods"].get(method, {}).get(f"{on}_deletion_probability")
    return None if row is None else row["mean"]


fig, axes = plt.subplots(1, 2, figsize=(6.7, 4.8), sharey=True)
for ax, on, title in zip(axes, ("edges", "nodes"), ("edges removed", "node features zeroed")):
    for i, (key, (label, marker)) in enumerate(SHOWN.items()):
        ys = [j + (i - len(SHOWN) / 2) * 0.07 for j in range(len(forder))]
        xs = [deletion(t, key, on) for t in forder]
        pts = [(x, y) for x, y in zip(xs, ys) if x is not None]
        ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, s=22, label=label)
    ax.set_title(f"deletion area, {title}", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(axis="x", alpha=0.3)
axes[0].set_yticks(range(len(forder)), [TITLES[t] for t in forder])
axes[0].invert_yaxis()
fig.supxlabel("area under the probability (lower: more faithful)", fontsize=8, y=0.1)
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False)
fig.tight_layout(rect=(0, 0.1, 1, 1))
plt.show()
display(Markdown(machine_note(faith)))

methods_run = [m for m in faith["settings"]["methods"] if m not in ("random", "ground_truth")]


def most_faithful(task, on):
    scored = [(deletion(task, m, on), m) for m in methods_run if deletion(task, m, on) is not None]
    return min(scored)[1]


for on in ("edges", "nodes"):
    best = [most_faithful(t, on) for t in forder]
    glue(f"faith_{on}_lrp", sum(b.startswith("lrp_") for b in best), display=False)
    glue(f"faith_{on}_default", sum(
        deletion(t, "lrp_zplus_logit_abs", on) <= deletion(t, b, on) + 0.01 for t, b in zip(forder, best)),
        display=False)
    signed = sum(deletion(t, "lrp_epsilon_logit_relevance", on) < deletion(t, "lrp_zplus_logit_abs", on)
                 for t in forder)
    assert signed > len(forder) / 2  # the summary: the signed relevance deletes faster on most tasks
    glue(f"faith_{on}_signed_beats_default", signed, display=False)
glue("faith_n_tasks", len(forder), display=False)
glue("faith_seeds", faith["settings"]["seeds"], display=False)
glue("faith_instances", faith["settings"]["instances"], display=False)

# %% [markdown]
# With the edges removed, some LRP configuration is the most faithful method on
# {glue:text}`faith_edges_lrp` of the {glue:text}`faith_n_tasks` tasks, and the default is within
# {glue:text}`tol_best` of the most faithful on {glue:text}`faith_edges_default`; with the node features
# zeroed, the counts are {glue:text}`faith_nodes_lrp` and {glue:text}`faith_nodes_default`. The default
# was chosen by ground truth, and by this second view it is seldom the best ranking: the signed epsilon
# relevance deletes faster than it on {glue:text}`faith_edges_signed_beats_default` tasks (edges) and
# {glue:text}`faith_nodes_signed_beats_default` (nodes). The figures come from {glue:text}`faith_seeds`
# seeds with {glue:text}`faith_instances` instances each; the results file holds every configuration,
# the logit's curves and the insertion curves.
#
# (quality-both-views)=
# ### One default for both views
#
# A default has to serve both views, so the rule that combines them was written down before a second,
# fresh run of both benchmarks on {glue:text}`sel_fresh_seeds` new seeds: new graphs and molecules, new
# models, new randomness in the explainers. The first run proposes a configuration and the fresh run
# decides. The rule and the decision, as `benchmarks/select_default.py` states them:

# %% tags=["hide-input"]
selection = load_results("selection")
print(textwrap.fill(selection["settings"]["rule"], width=88))
print()
print(textwrap.fill(selection["settings"]["decision"].replace(
    "TOLERANCE", f"{selection['settings']['tolerance']} of a rank"), width=88))

runs = selection["results"]["runs"]
proposing, fresh = runs[0], runs[-1]
decision = selection["results"]["decision"]


def seeds_label(run):
    return f"seeds {run['first_seed']} to {run['first_seed'] + run['seeds'] - 1}"


shown = list(dict.fromkeys(proposing["order"][:4] + fresh["order"][:4] + [decision["current_default"]]))
rows = []
for m in sorted(shown, key=lambda m: fresh["configurations"][m]["score"]):
    row = {"c": name(m)}
    for key, run in (("p", proposing), ("f", fresh)):
        c = run["configurations"][m]
        row.update({f"{key}_truth": c["truth_rank"], f"{key}_faith": c["faithfulness_rank"],
                    f"{key}_score": c["score"]})
    rows.append(row)
display(
    results_table(
        rows,
        [
            ("LRP configuration", "c"),
            *[(f"{seeds_label(run)}: {view}", f"{key}_{col}", "{:.2f}")
              for key, run in (("p", proposing), ("f", fresh))
              for view, col in (("truth", "truth"), ("faithfulness", "faith"), ("score", "score"))],
        ],
    )
)

# %% tags=["remove-cell"]
glue("sel_fresh_seeds", fresh["seeds"], display=False)
glue("sel_proposed", name(proposing["winner"]), display=False)
glue("sel_fresh_winner", name(fresh["winner"]), display=False)
glue("sel_behind", f"{decision['default_behind_winner']:.2f}", display=False)
glue("sel_tolerance", f"{decision['tolerance']}", display=False)
glue("sel_default", name(decision["default"]), display=False)
glue("sel_verdict", "stays the default" if decision["confirmed"] else "gives way to it", display=False)
glue("sel_n_tasks", len(fresh["tasks"]), display=False)
assert decision["default"] == "lrp_zplus_logit_abs"  # the text and lrp_lib's DEFAULTS name z+, logit, |R|

# %% [markdown]
# Ranks are among all the methods both benchmarks ran, averaged over the {glue:text}`sel_n_tasks` tasks
# (lower is better); the score is the mean of the two views. The first run proposes
# **{glue:text}`sel_proposed`**. On the fresh seeds the best score is **{glue:text}`sel_fresh_winner`**'s,
# and the proposed configuration is {glue:text}`sel_behind` of a rank behind it, against a tolerance of
# {glue:text}`sel_tolerance` declared beforehand, so it {glue:text}`sel_verdict`: the default is
# **{glue:text}`sel_default`**.
#
# ### GraphXAI's unfaithfulness, two ways
#
# GraphXAI {cite}`agarwal2023evaluating` scores faithfulness on graph classifiers by one number, the
# graph explanation unfaithfulness $\mathrm{GEF} = 1 - e^{-\mathrm{KL}}$: the divergence between the
# model's prediction and its prediction with a quarter of the graph's nodes chosen by the explanation,
# lower being more faithful. Its paper compares the prediction with the prediction on the explanation,
# the top quarter of the nodes alone. Its code, which produced the published numbers, zeroes the
# features of the top quarter instead, and measures the divergence the other way round; so under it a
# ranking whose top nodes the model does not use scores best. The benchmark computes both, on every
# graph task, with the same models, instances and methods as above, and places GraphXAI's published
# numbers (their own GIN models, the same Benzene and Fluoride-Carbonyl molecules) beside the code's.

# %% tags=["hide-input"]
GEF_SHOWN = ["lrp_zplus_logit_abs", "lrp_epsilon_logit_relevance", "grad_x_input", "integrated_gradients",
             "gnnexplainer", "pgexplainer", "random", "ground_truth"]
gtasks = [t for t in forder if ftasks[t]["level"] == "graph"]
published_gef = faith["settings"]["published_gef"]


def gef(task, method, kind):
    row = ftasks[task]["methods"].get(method, {}).get(f"nodes_gef_{kind}")
    return None if row is None else row["mean"]


fig, axes = plt.subplots(1, 2, figsize=(6.7, 4.0), sharey=True)
for ax, kind, title in zip(axes, ("paper", "code"), ("as defined: top quarter kept", "as coded: top quarter zeroed")):
    for i, key in enumerate(GEF_SHOWN):
        label, marker = SHOWN[key]
        ys = [j + (i - len(GEF_SHOWN) / 2) * 0.08 for j in range(len(gtasks))]
        pts = [(gef(t, key, kind), y) for t, y in zip(gtasks, ys) if gef(t, key, kind) is not None]
        ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, s=22, label=label)
    ax.set_title(f"GEF, {title}", fontsize=9)
    ax.set_xlabel("GEF (lower: more faithful)" if kind == "paper" else "GEF as coded", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(-0.03, 1.03)
for j, t in enumerate(gtasks):  # the published numbers, beside the code's
    if published_gef.get(t):
        axes[1].text(max(published_gef[t].values()) + 0.04, j + 0.42, "published", fontsize=7, va="center")
    for key, value in published_gef.get(t, {}).items():
        if key in SHOWN:
            marker = SHOWN[key][1]
            style = dict(c="0.3") if marker == "x" else dict(facecolors="none", edgecolors="0.3")
            axes[1].scatter([value], [j + 0.42], marker=marker, s=30, linewidths=0.8, **style)
axes[0].set_yticks(range(len(gtasks)), [TITLES[t] for t in gtasks])
axes[0].invert_yaxis()
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False)
fig.tight_layout(rect=(0, 0.12, 1, 1))
plt.show()

others = [m for m in methods_run if not m.startswith("lrp_")]


def gef_best_other(task, kind):
    values = [gef(task, m, kind) for m in others if gef(task, m, kind) is not None]
    return min(values)


default_vs_ig = [t for t in gtasks
                 if gef(t, "lrp_zplus_logit_abs", "paper") <= gef(t, "integrated_gradients", "paper") + 0.01]
glue("gef_n_graph", len(gtasks), display=False)
glue("gef_default_le_ig", len(default_vs_ig), display=False)
glue("gef_default_best_other", sum(gef(t, "lrp_zplus_logit_abs", "paper") <= gef_best_other(t, "paper") + 0.01
                                   for t in gtasks), display=False)
truth_worse = [t for t in gtasks if gef(t, "ground_truth", "code") > gef(t, "random", "code")]
assert len(truth_worse) > len(gtasks) / 2  # the text: under the code, the ground truth mostly scores worse
glue("gef_truth_worse_code", len(truth_worse), display=False)
glue("gef_benzene_random_code", f"{gef('benzene', 'random', 'code'):.3f}", display=False)
for t in ("benzene", "fluoride_carbonyl"):
    glue(f"gef_{t}_ig_code", f"{gef(t, 'integrated_gradients', 'code'):.3f}", display=False)
    glue(f"gef_{t}_ig_published", f"{published_gef[t]['integrated_gradients']:.3f}", display=False)
    glue(f"gef_{t}_default_code", f"{gef(t, 'lrp_zplus_logit_abs', 'code'):.3f}", display=False)
    glue(f"gef_{t}_default_paper", f"{gef(t, 'lrp_zplus_logit_abs', 'paper'):.3f}", display=False)
    glue(f"gef_{t}_ig_paper", f"{gef(t, 'integrated_gradients', 'paper'):.3f}", display=False)

# %% [markdown]
# As defined, with only the top quarter of the nodes kept, the default is within {glue:text}`tol_best`
# of Integrated Gradients, or below it, on {glue:text}`gef_default_le_ig` of the
# {glue:text}`gef_n_graph` graph tasks, and of the best method other than LRP on
# {glue:text}`gef_default_best_other`. On Benzene it scores {glue:text}`gef_benzene_default_paper`
# (Integrated Gradients {glue:text}`gef_benzene_ig_paper`): the top quarter of the atoms alone keeps the
# prediction.
#
# As coded, with the top quarter zeroed, a ranking scores better the less its top nodes matter to the
# model: the ground truth ranked first scores worse than a random ranking on
# {glue:text}`gef_truth_worse_code` of the {glue:text}`gef_n_graph` tasks, and on Benzene random scores
# {glue:text}`gef_benzene_random_code`. Under the code, Integrated Gradients scores
# {glue:text}`gef_benzene_ig_code` on Benzene and {glue:text}`gef_fluoride_carbonyl_ig_code` on
# Fluoride-Carbonyl with the book's models, against the published {glue:text}`gef_benzene_ig_published`
# and {glue:text}`gef_fluoride_carbonyl_ig_published` with GraphXAI's (open markers in the right panel);
# the default scores {glue:text}`gef_benzene_default_code` and
# {glue:text}`gef_fluoride_carbonyl_default_code`. A low number under the code says that removing the
# explanation's top nodes barely moves the prediction, which is not what faithfulness asks, so the
# published numbers are not a bar to meet; the definition's version is.
#
# (quality-decision)=
# ## Which rule, which quantity, which method
#
# What these results mean for your own model (the best LRP configuration and the best method for
# each kind of model and task, which mask and which explained quantity) is worked out on its own
# page, [Which rule, and when](choosing_a_rule.ipynb), from this chapter's results file.
#
# The full tables, every method on every task and seed with its intervals, are in the results files:

# %% tags=["remove-input"]
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from lrp_lib.book.results import REPOSITORY_ENV, raw_url  # noqa: E402

config = next((p / "_config.yml" for p in (Path.cwd(), *Path.cwd().parents) if (p / "_config.yml").is_file()), None)
repository = os.environ.get(REPOSITORY_ENV) or yaml.safe_load(config.read_text())["repository"]["url"]
FILES = {"quality": "ground truth", "faithfulness": "faithfulness", "losses": "where the default loses",
         "selection": "the default by both views", "confirmatory/quality": "ground truth, fresh seeds",
         "confirmatory/faithfulness": "faithfulness, fresh seeds"}
display(Markdown("\n".join(f"- [{name}.json]({raw_url(repository, name)}): {what}" for name, what in FILES.items())))

# %% [markdown]
# ## Summary
#
# - Explanation AUROCs are protocol-bound: pooled or per graph, nodes or edges, best-of-alternatives
#   or not, and which instances are explained, each moves the number and the random baseline.
# - The baselines here are checked against their published numbers under the same protocol before
#   LRP is compared with them; the table above says which reproduce and why the others do not.
# - The default LRP configuration is chosen by a rule declared before the run (best mean rank over
#   tasks): {glue:text}`winner` over all tasks, and {glue:text}`level_winners`. Where it loses by more than
#   {glue:text}`tol_best`, the winner is {glue:text}`loss_winners`.
# - One LRP explanation costs a forward and a backward pass.
# - Faithfulness is a second view: how fast the model's prediction falls when the top-ranked edges or nodes
#   are removed. By it the default, chosen by ground truth, is seldom the best ranking, and the signed
#   epsilon relevance deletes faster on most tasks.
# - Both views together, by a rule written down before a fresh run on new seeds, keep
#   {glue:text}`sel_default` as the default.
# - GraphXAI's unfaithfulness, as its paper defines it, keeps only an explanation's top nodes; the code
#   behind its published numbers zeroes them instead, and under that code a random ranking beats the
#   ground truth on {glue:text}`gef_truth_worse_code` of the {glue:text}`gef_n_graph` graph tasks.
#
# ## Exercises
#
# 1. Run `python benchmarks/bench_quality.py --fast --tasks ba_shapes` and compare with the full
#    table. Which methods move most with one seed and four instances?
# 2. Score BA-Shapes per node instead of pooled (mean of per-node AUROCs). Which methods gain, and
#    why does pooling punish an explainer whose scale varies from node to node?
# 3. Give GNNExplainer 300 epochs and learning rate 0.01 on BA-Shapes (the original settings). How
#    close does it come to its paper, and at what cost per explanation?
# 4. On BA-2Motifs, turn LRP's node relevance into a greedy node ordering as Xiong et al. score their
#    baselines. Does the ordering or the rule make the difference?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
