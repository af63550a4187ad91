# %% [markdown]
# # Which rule, and when
#
# `LRPExplainer()` works without a single choice. When its explanation does not look right for your
# model, three arguments change it: the **rule** that splits relevance over each weight, the
# **explained quantity** that relevance starts from, and the **mask** that PyG's tools read. This
# page says what each does, shows them side by side on the quick start's model, and then reads the
# benchmark of [Benchmarking explanations](09_benchmarking_explanations.ipynb) for the answer per
# kind of model and task.
#
# ```{admonition} Audience & Objectives
# :class: tip
# For readers who have run the [quick start](quickstart.ipynb). After this page you can
# - state what the epsilon, gamma, z+ and alpha-beta rules do to one linear map, and which one
#   conserves what;
# - switch rule, explained quantity and mask in one argument each, or give each layer its own rule;
# - pick a configuration for your kind of model and task from measured evidence.
# ```

# %% tags=["hide-input"]
import warnings

# tqdm's notebook notice, via PyG
warnings.filterwarnings("ignore", message="IProgress not found")

import numpy as np
import torch
from IPython.display import Markdown, display
from myst_nb import glue
from sklearn.metrics import roc_auc_score
from torch_geometric.utils import k_hop_subgraph

from lrp_lib import Composite, Explainer, LRPExplainer
from lrp_lib.book.datasets import ba_houses
from lrp_lib.book.models import HousesGCN
from lrp_lib.book.plotting import book_style
from lrp_lib.book.pretrained import load_or_train
from lrp_lib.book.quality import TASK_TITLES, choice_rows, decision_rows, method_name
from lrp_lib.book.results import load_results, machine_note, results_table
from lrp_lib.explain.explainer import DEFAULTS

book_style()
torch.set_num_threads(1)

# %% [markdown]
# ## The default
#
# `LRPExplainer()` uses the same settings for every task level (node-level models, link prediction and
# graph-level models): the {glue:text}`default_rule` rule, explaining the {glue:text}`default_explained`
# with an {glue:text}`default_mask` mask. This is the configuration with the best mean rank over the
# benchmark's tasks of each level, a selection rule fixed before the benchmark ran (the
# benchmark chapter shows {ref}`the ranking <quality-default>`). It also comes first when ground truth
# and faithfulness count equally, by a second rule declared before a fresh run of both benchmarks on new
# seeds ({ref}`one default for both views <quality-both-views>`).

# %% tags=["hide-input"]
print("LRPExplainer() at every task level:", ", ".join(f"{k}={v!r}" for k, v in DEFAULTS.items()))
for key, value in DEFAULTS.items():
    glue(f"default_{key}", value, display=False)

# %% [markdown]
# ## The rules on one linear map
#
# Each rule answers one question: how should the relevance $R_k$ of an output
# $z_k = \sum_j x_j w_{jk} + b_k$ be split among the contributions $x_j w_{jk}$? The library
# declares each rule once, in `lrp_lib.core.rules`, with its formula in its docstring.
#
# | rule | `rule=` | splits $R_k$ in proportion to | what it means |
# |---|---|---|---|
# | LRP-0 / epsilon | `"z"`, `"epsilon"` | $x_j w_{jk}$, over $z_k + \epsilon\,\mathrm{sign}(z_k)$ | signed contributions; on a bias-free ReLU network it is Gradient $\times$ Input |
# | gamma | `"gamma"` | $x_j (w_{jk} + \gamma w_{jk}^+)$ | favours positive contributions; $\gamma = 0$ is epsilon |
# | z+ | `"zplus"` | $(x_j w_{jk})^+$ | positive contributions only; relevance stays positive after a ReLU |
# | alpha-beta | `AlphaBeta(2, 1)` | $\alpha (x_j w_{jk})^+$ minus $\beta (x_j w_{jk})^-$ | positive and negative parts split apart, $\alpha - \beta = 1$ |
#
# Maps without weights (sums, mean aggregation, pooling) always split in proportion to their terms,
# and attention weights are held constant, whatever the rule; [Explaining a graph
# classifier](05_explaining_gnns.ipynb) shows composites, which give each module or each
# message-passing layer its own rule.
#
# ## The three choices on one model
#
# The quick start's GCN classifies the nodes of a graph with planted houses; the ground truth of a
# house node is the house's edges. Every correctly classified house node of the test set is
# explained below with each rule, and each explanation's edges are ranked by the mask against that
# ground truth (edge AUROC within the node's three-hop neighbourhood, what its three layers see).
# The last column checks conservation on every one of those nodes: the node relevance plus the bias
# share adds up to the explained output.

# %% tags=["hide-input"]
# The quick start's data and model, with its stored weights.
data, train_nodes, test_nodes = ba_houses()


def not_trained(model):
    raise RuntimeError("the quick start trains this model (LRP_BOOK_RETRAIN=1 there)")


model = HousesGCN(features=1, hidden=20, classes=4)
# stored by the quick start, which trains it; here it is only loaded
load_or_train("quickstart-ba-houses-gcn", model, not_trained, retrain=False)
model.eval()
with torch.no_grad():
    logits = model.logits(data.x, data.edge_index)
predicted = logits.argmax(-1)
house_nodes = [int(v) for v in test_nodes
               if predicted[v] == data.y[v] and data.y[v] > 0]
print(f"{len(house_nodes)} correctly classified house nodes in the test set")

# %% tags=["hide-input"]
def explain_with(**settings):
    return Explainer(
        model,
        algorithm=LRPExplainer(**settings),
        explanation_type="model",
        node_mask_type="attributes",
        edge_mask_type="object",
        model_config=dict(mode="multiclass_classification", task_level="node",
                          return_type="log_probs"),
    )


def score(explainer, nodes):
    """Mean edge AUROC against the houses, and the largest conservation gap."""
    aurocs, gaps = [], []
    contrast = explainer.algorithm.explained == "contrast"
    for v in nodes:
        e = explainer(data.x, data.edge_index, index=v)
        _, _, _, seen = k_hop_subgraph(v, 3, data.edge_index, num_nodes=data.num_nodes)
        truth = data.in_house[seen]
        if 0 < int(truth.sum()) < len(truth):
            aurocs.append(roc_auc_score(truth.numpy(), e.edge_mask[seen].numpy()))
        c = int(e.target[v])
        explained = float(logits[v, c])
        if contrast:  # z_c minus the mean of the other logits
            explained -= float((logits[v].sum() - logits[v, c]) / (logits.shape[1] - 1))
        total = float(e.node_relevance.sum() + e.bias_relevance)
        gaps.append(abs(total - explained))
    return float(np.mean(aurocs)), max(gaps)


CHOICES = [
    ("default", {}),
    ("rule epsilon", dict(rule="epsilon")),
    ("rule gamma", dict(rule="gamma")),
    ("z+ in the convs, epsilon in the head",
     dict(composite=Composite("zplus", rules={"head": "epsilon"}))),
    ("per-layer gamma 3 -> 0", dict(rule="gamma_sgnn")),
    ("explained contrast", dict(explained="contrast")),
    ("mask positive", dict(mask="positive")),
    ("mask relevance (signed)", dict(mask="relevance")),
]
TOLERANCE = 1e-4  # float32 sums of a few hundred terms, and epsilon's share
rows = []
for label, settings in CHOICES:
    auroc, gap = score(explain_with(**settings), house_nodes)
    rows.append({"choice": label, "auroc": auroc, "gap": gap,
                 "conserves": "yes" if gap < TOLERANCE else f"no ({gap:.1e})"})
display(results_table(rows, [("LRPExplainer(...)", "choice"),
                             ("edge AUROC, mean", "auroc", "{:.3f}"),
                             (f"conserves to {TOLERANCE:.0e}", "conserves")]))
by = {r["choice"]: r for r in rows}
aurocs = [r["auroc"] for r in rows]
assert all(r["gap"] < TOLERANCE for r in rows)
assert by["rule epsilon"]["auroc"] > by["default"]["auroc"]

# %% tags=["remove-cell"]
glue("toy_default", f"{by['default']['auroc']:.3f}", display=False)
glue("toy_eps", f"{by['rule epsilon']['auroc']:.3f}", display=False)
glue("toy_min", f"{min(aurocs):.3f}", display=False)
glue("toy_max", f"{max(aurocs):.3f}", display=False)
glue("toy_gap", f"{TOLERANCE:.0e}", display=False)

# %% [markdown]
# On this model every configuration ranks the house edges near the top (mean edge AUROC from
# {glue:text}`toy_min` to {glue:text}`toy_max`), and the epsilon rule is slightly ahead of the
# default ({glue:text}`toy_eps` against {glue:text}`toy_default`). Each conserves the output it
# explains, the logit or the contrast, to within {glue:text}`toy_gap`. An easy task separates the
# rules little; the benchmark has {glue:text}`n_tasks` tasks, harder ones among them.
#
# ## What the benchmark says
#
# The benchmark chapter scores {glue:text}`n_configs` LRP configurations (every composite, with
# either explained quantity and each mask) beside the common explainers on
# {glue:text}`n_tasks` ground-truth tasks, each under the protocol of the paper whose numbers it
# quotes. The table gives, per kind of model and task, the best LRP configuration and the best method
# of any kind by mean AUROC over those tasks, and how the level's default does there. Two composites
# carry the name of their source: *gamma 3->0 (sGNN)* is sGNN-LRP's schedule, $\gamma$ from 3 at the
# first message-passing layer down to 0 at the last, and *gamma 2,1 (DIG)* that of the GNN-LRP code in
# the DIG library, $\gamma = 2$ at the first layer and 1 elsewhere.

# %% tags=["hide-input"]
quality = load_results("quality")
tasks = quality["results"]["tasks"]
GROUPS = [
    ("node classification, GCN (BA-Shapes, BA-Community, Tree-Cycles, Tree-Grid)", "node",
     ["ba_shapes", "ba_community", "tree_cycles", "tree_grid"]),
    ("node classification, GCN, informative features (Infection)", "node",
     ["infection"]),
    ("graph classification, GIN with sum read-out (BA-2Motifs)", "graph",
     ["ba_2motifs"]),
    ("graph classification, GCN with max + mean read-out (Mutagenicity)", "graph",
     ["mutagenicity"]),
    ("graph classification, GCN with mean read-out (molecules)", "graph",
     ["benzene", "fluoride_carbonyl", "alkane_carbonyl", "amine_ether_benzene"]),
]
decision = decision_rows(tasks, quality["results"]["summary"], GROUPS)
display(results_table(decision, [
    ("model and task", "kind"),
    ("best LRP configuration", "lrp"),
    ("AUROC", "lrp_a", "{:.3f}"),
    ("best method", "any"),
    ("AUROC", "any_a", "{:.3f}"),
    ("default's AUROC", "default_a", "{:.3f}"),
]))
display(Markdown(machine_note(quality)))
order = [t for t in TASK_TITLES if t in tasks]
n_configs = sum(m.startswith("lrp_") for m in quality["settings"]["methods"])

# %% tags=["remove-cell"]
glue("n_tasks", str(len(order)), display=False)
glue("n_configs", str(n_configs), display=False)

# %% [markdown]
# (quality-choices)=
# The two choices besides the rule, task by task: the best LRP AUROC with each mask and with each
# explained quantity (over all composites).

# %% tags=["hide-input"]
choices = choice_rows(tasks, order)
display(results_table(choices, [
    ("task", "task"),
    ("mask abs", "abs", "{:.3f}"),
    ("mask positive", "positive", "{:.3f}"),
    ("mask relevance", "relevance", "{:.3f}"),
    ("explained logit", "logit", "{:.3f}"),
    ("explained contrast", "contrast", "{:.3f}"),
]))
shown = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in choices]  # as printed
n_abs_best = sum(r["abs"] >= max(r["positive"], r["relevance"]) for r in shown)
n_signed_best = sum(r["relevance"] > r["abs"] for r in shown)
n_contrast_better = sum(r["contrast"] > r["logit"] for r in shown)
n_contrast_tied = sum(r["contrast"] == r["logit"] for r in shown)

# %% tags=["remove-cell"]
glue("n_abs_best", str(n_abs_best), display=False)
glue("n_signed_best", str(n_signed_best), display=False)
glue("n_contrast_better", str(n_contrast_better), display=False)
glue("n_contrast_tied", str(n_contrast_tied), display=False)

# %% [markdown]
# The absolute mask is the best (or tied) on {glue:text}`n_abs_best` of the {glue:text}`n_tasks`
# tasks and the signed relevance beats it on {glue:text}`n_signed_best`; explaining the contrast
# beats the logit on {glue:text}`n_contrast_better` and ties it, to the three decimals shown, on
# {glue:text}`n_contrast_tied`.
#
# Ground truth asks whether an explanation finds the planted motif; the deletion test asks whether it ranks
# first what the model uses: remove the top-ranked edges a tenth at a time and follow the explained class's
# probability (the area under that curve, lower is more faithful). Per kind of model, the most faithful method
# and the default, by mean area over the same tasks:

# %% tags=["hide-input"]
faith_file = load_results("faithfulness")
faith = faith_file["results"]
faith_rows = []
for label, level, names in GROUPS:
    names = [t for t in names if t in faith]
    default = "lrp_{rule}_{explained}_{mask}".format(**DEFAULTS)
    area = {}
    for m in faith[names[0]]["methods"]:
        values = [faith[t]["methods"].get(m, {}).get("edges_deletion_probability") for t in names]
        if m not in ("random", "ground_truth") and all(v is not None for v in values):
            area[m] = float(np.mean([v["mean"] for v in values]))
    best = min(area, key=area.get)
    faith_rows.append({"kind": label, "best": method_name(best), "best_a": area[best],
                       "default_a": area[default], "gap": area[default] - area[best]})
display(results_table(faith_rows, [
    ("model and task", "kind"), ("most faithful method", "best"), ("its area", "best_a", "{:.3f}"),
    ("default's area", "default_a", "{:.3f}"), ("default minus best", "gap", "{:+.3f}"),
]))
display(Markdown(machine_note(faith_file)))
CLOSE = 0.01

# %% tags=["remove-cell"]
glue("faith_close", CLOSE, display=False)
glue("n_faith_close", str(sum(r["gap"] <= CLOSE for r in faith_rows)), display=False)
glue("n_faith_groups", str(len(faith_rows)), display=False)

# %% [markdown]
# By this second view the default is within {glue:text}`faith_close` of the most faithful method on {glue:text}`n_faith_close` of
# the {glue:text}`n_faith_groups` kinds of model: where you want the ranking that removes the model's evidence
# fastest, rather than the one that finds a planted motif, take the method the table names for your kind of
# model. Where the default loses on ground truth, the benchmark chapter shows
# {ref}`whether the model uses the motif at all <quality-losses>`.
#
# ## How to choose
#
# - **Which rule.** Start with the default. The rules differ in how they treat negative
#   contributions inside the message-passing layers: epsilon keeps them (and is Gradient $\times$
#   Input on a bias-free ReLU network), gamma and z+ damp or drop them, which on the benchmark's
#   tasks ranks the planted motifs higher. For per-layer rules, such as the gamma schedules of the
#   walk literature, pass a `Composite`; the benchmark chapter gives {ref}`the task-by-task cost of
#   each <quality-heatmap>`.
# - **Which quantity.** Explaining the contrast $z_c - \frac{1}{K-1}\sum_{k\ne c} z_k$ of a classifier with
#   $K$ classes (for two
#   classes, the log-odds) rather than the logit asks why this class rather than the others. It
#   makes the largest difference on BA-2Motifs (better) and on Alkane-Carbonyl (worse) in the
#   table above, and next to none on the node-level tasks.
# - **Which mask.** `node_mask` and `edge_mask` are what PyG's plots, thresholds and metrics read.
#   AUROC ranks, so a signed mask ranks strong *negative* evidence last; the absolute mask ranks it
#   with the positive evidence, the positive mask ties it with the irrelevant. Which is right
#   depends on whether the pattern you look for acts for or against the explained class. The signed
#   relevance is on every explanation anyway, as `node_relevance` and `edge_relevance`.
# - **Which method.** Where a mask-optimising explainer (PGExplainer) wins, it answers another
#   question -- which small subgraph keeps the prediction -- at many times the cost; where the model
#   does not use the motif, no method should find it. The benchmark chapter shows
#   {ref}`where LRP loses <quality-losses>` and {ref}`each baseline beside its published number
#   <quality-published>`.
#
# ## Summary
#
# - One argument each: `rule=` (or `composite=`), `explained=`, `mask=`.
# - The default is the configuration that ranked best per task level over the benchmark's tasks;
#   the signed relevance is always there beside the masks.
# - Check any choice on your own model against what you know, as the table on the quick start's
#   model does, before trusting it on what you don't.
#
# ## Exercises
#
# 1. Add `Composite(layers=["zplus", "gamma", "epsilon"])` (one rule per message-passing layer) to
#    the choices above. Where does it land?
# 2. Give the default a graph-level model from [Explaining a graph
#    classifier](05_explaining_gnns.ipynb) and compare `explained="contrast"` with the logit on a few
#    mutagens.
# 3. Which of the rules above would you expect to conserve exactly on a bias-free model, and which
#    only up to the stabiliser? Check with `bias_relevance`.
