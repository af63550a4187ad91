# %% [markdown]
# # Benchmarking explanations
#
# How good are LRP's explanations of graph networks? The earlier chapters judged them one task at
# a time: Mutagenicity in [Explaining GNNs](05_explaining_gnns), the infection graphs in
# [Case study: infection](06_case_infection). This chapter puts LRP beside the usual alternatives on
# the standard benchmarks that have a *ground-truth explanation*: the synthetic node-level tasks of
# GNNExplainer {cite}`ying2019gnnexplainer` (BA-Shapes, BA-Community, Tree-Cycles, Tree-Grid), the
# graph-level BA-2Motifs of PGExplainer {cite}`luo2020pgexplainer`, PyG's infection graphs
# {cite}`baldassarre2019explainability`, the four molecular tasks of Sanchez-Lengeling et al.
# {cite}`sanchez2020evaluating` and Mutagenicity {cite}`kazius2005mutagenicity`. Every figure comes
# from one script, `benchmarks/bench_quality.py`, which trains the models, explains the same test
# instances with every method, scores them and writes `benchmarks/results/quality.json`; the
# chapter only reads that file, so it shows the same numbers on every machine.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes `LRPExplainer` from [Explaining GNNs](05_explaining_gnns). After it you can
# - state the ground-truth protocol of each standard benchmark and compute its AUROC;
# - run `benchmarks/bench_quality.py` and read `quality.json`;
# - compare LRP's rules and the quantity it explains with gradients, Integrated Gradients, CAM,
#   GNNExplainer, PGExplainer, GraphMask and GAT attention, in quality and in time per explanation;
# - say why *signed* LRP edge relevance can rank the motif below chance while its magnitude finds
#   it, and which choice of rule and explained quantity makes the sign point at the evidence;
# - say what a ground-truth AUROC does not measure.
# ```

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore")  # import-time notes of the libraries (tqdm, deprecations); nothing of ours

import csv
import os
import random
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display
from myst_nb import glue
from torch_geometric.datasets import ExplainerDataset, InfectionDataset
from torch_geometric.datasets.graph_generator import BAGraph, ERGraph, TreeGraph
from torch_geometric.datasets.motif_generator import CycleMotif, GridMotif, HouseMotif
from torch_geometric.utils import k_hop_subgraph, subgraph

from lrp_lib.plotting import book_style, draw_graph, draw_molecule
from lrp_lib.results import load_results, machine_note, results_table

book_style()


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


seed_all(0)
quality = load_results("quality", repository=globals().get("REPOSITORY"))
tasks = quality["results"]["tasks"]
settings = quality["settings"]
print(f"tasks: {len(tasks)}; seeds per task: {settings['seeds']}; explained instances per task and seed: "
      f"{settings['instances']}")
print(f"GNNExplainer {settings['gnnexplainer_epochs']} epochs, GraphMask {settings['graphmask_epochs']} epochs, "
      f"PGExplainer {settings['pgexplainer_epochs']} epochs of training per task and seed")
glue("seeds", str(settings["seeds"]), display=False)
glue("instances", str(settings["instances"]), display=False)
glue("gnn_epochs", str(settings["gnnexplainer_epochs"]), display=False)
glue("graphmask_epochs", str(settings["graphmask_epochs"]), display=False)

# %% [markdown]
# ## Scoring an explanation against a ground truth
#
# Each benchmark plants a pattern whose presence decides the label: a house attached to a random
# graph, a benzene ring in a molecule, a path from an infected node. The planted pattern is the
# *ground truth*: a 0/1 mask over the edges (or atoms). An explainer gives a score to each edge
# (or atom), and the question is whether the planted ones get the highest scores. The measure is
# the area under the ROC curve,
#
# $$\mathrm{AUROC} = P\big(s_e > s_{e'}\big) + \tfrac12 P\big(s_e = s_{e'}\big),
#   \quad e \text{ in the ground truth},\ e' \text{ not},$$
#
# the probability that a random ground-truth edge outranks a random other edge: 1 is a perfect
# ranking, 0.5 chance, and 0 a perfect ranking *upside down*. AUROC only uses the order of the
# scores, so a signed explanation is scored by its sign: an edge with large negative relevance
# ranks at the bottom. Three protocols, one per task family:
#
# - **node-level tasks** (BA-Shapes, BA-Community, Tree-Cycles, Tree-Grid, Infection): PyG's own
#   BA-Shapes example -- for each explained node, the edges of its 3-hop neighbourhood (all that a
#   3-layer network sees), pooled over the explained nodes of a seed;
# - **BA-2Motifs and Mutagenicity**: edge AUROC per graph, averaged over the graphs;
# - **molecular tasks** {cite}`sanchez2020evaluating`: atom AUROC per molecule of label 1, the best
#   over the alternative ground truths (a molecule can satisfy "a fluoride and a carbonyl" in more
#   than one way), averaged.
#
# The explained instances are correctly classified test instances that have a ground truth, the same
# for every method ({glue:text}`instances` per task and seed, {glue:text}`seeds` seeds; a seed
# generates the data, initialises and trains the model, and picks the instances). Mean and standard
# deviation over the seeds are reported.
#
# A ground-truth AUROC measures agreement with the planted pattern, not faithfulness to the model: a
# model that reaches its accuracy by another route (the degree of a node, the size of a molecule)
# is explained *correctly* by an explanation that points elsewhere, and scored low. So each table
# shows the model's test accuracy beside its task, and the discussion below keeps this in mind.

# %% [markdown]
# ## The tasks
#
# The node-level graphs come from PyG's generators (`ExplainerDataset` with `BAGraph`, `TreeGraph`
# and the `HouseMotif`, `CycleMotif`, `GridMotif` motifs; `InfectionDataset` on an Erdős–Rényi
# graph), exactly as `benchmarks/quality_tasks.py` builds them:
#
# | task | graph | planted pattern | classes | features |
# | --- | --- | --- | --- | --- |
# | BA-Shapes | BA graph, 300 nodes, 5 edges per new node | 80 houses | base, house top / middle / bottom | constant |
# | BA-Community | two BA-Shapes graphs joined by 350 random edges | 80 houses each | 8 (4 per community) | one Gaussian per community |
# | Tree-Cycles | binary tree of depth 8 | 60 six-cycles | tree, cycle | constant |
# | Tree-Grid | binary tree of depth 8 | 80 3 x 3 grids | tree, grid | constant |
# | Infection | ER graph, 400 nodes, p = 0.006 | shortest paths from 40 infected nodes | distance 0..3, further | infected or not |
# | BA-2Motifs | 20-node BA graphs | a house or a five-cycle | house, cycle | constant |
#
# On BA-Community the ground truth is the houses, as in BA-Shapes; the Gaussian features only tell
# the communities apart. On Infection the ground truth of a node is the edges on its shortest paths
# from an infected node (PyG's own `edge_mask` marks the union over all nodes, which is not an
# explanation of one node). The models are three `GCNConv` layers (20 units, ReLU) and a linear
# head; BA-2Motifs and the molecules add a mean pool before the head. With constant features the
# symmetric normalisation of `GCNConv` makes every node of a regular neighbourhood (a cycle, a grid,
# the inside of a tree) look the same, so on Tree-Cycles, Tree-Grid and BA-2Motifs the GCN sums its
# messages instead (`normalize=False`); normalised, it stayed at chance on Tree-Cycles.
#
# One instance of each, with its ground truth in red:

# %%
def house_graph(seed):
    seed_all(seed)
    return ExplainerDataset(graph_generator=BAGraph(num_nodes=300, num_edges=5), motif_generator=HouseMotif(),
                            num_motifs=80)[0]


def tree_graph(motif, count, seed):
    seed_all(seed)
    return ExplainerDataset(graph_generator=TreeGraph(depth=8), motif_generator=motif, num_motifs=count)[0]


def neighbourhood(data, node, hops=2):
    """The `hops`-hop subgraph of `node`: edges relabelled, ground truth, and the node's new index."""
    subset, edge_index, mapping, edge_kept = k_hop_subgraph(node, hops, data.edge_index, relabel_nodes=True,
                                                            num_nodes=data.num_nodes)
    return edge_index, int(subset.numel()), data.edge_mask[edge_kept].float(), int(mapping)


def draw_truth(ax, edge_index, n, truth, centre, title):
    labels = {i: "" for i in range(n)}
    if centre is not None:
        labels[centre] = "*"
    draw_graph(edge_index, n, edge_relevance=truth * 1.0 - (1 - truth) * 0.35, labels=labels, ax=ax,
               colorbar=False, vmax=1.0, node_size=60, edge_width=2.0, title=title)


fig, axes = plt.subplots(2, 3, figsize=(12, 8))
shapes = house_graph(0)
node = int((shapes.y == 1).nonzero()[0])  # a node on the roof of a house
draw_truth(axes[0, 0], *neighbourhood(shapes, node), "BA-Shapes: 2 hops around a house node (*)")
cycles = tree_graph(CycleMotif(6), 60, 0)
node = int((cycles.y > 0).nonzero()[0])
draw_truth(axes[0, 1], *neighbourhood(cycles, node, 3), "Tree-Cycles: 3 hops around a cycle node")
grids = tree_graph(GridMotif(), 80, 0)
node = int((grids.y > 0).nonzero()[0])
draw_truth(axes[0, 2], *neighbourhood(grids, node, 3), "Tree-Grid: 3 hops around a grid node")
seed_all(0)
er = ERGraph(num_nodes=400, edge_prob=0.006)
print(f"Infection: ER graph with {er.num_nodes} nodes and edge probability {er.edge_prob}, 40 infected nodes")
infection = InfectionDataset(graph_generator=er, num_infected_nodes=40, max_path_length=3)[0]
src, dst = infection.edge_index
infected = infection.x[:, 1] > 0.5
node = int(((infection.y == 2) & (torch.bincount(dst, minlength=400) <= 3)).nonzero()[0])
# the edges on a shortest path from an infected node to `node`: distances from the infected ones, and to `node`
far = 10 ** 6
d_inf = torch.where(infected, 0, far)
d_to = torch.full((400,), far)
d_to[node] = 0
for _ in range(4):
    d_inf = torch.minimum(d_inf, torch.full((400,), far).scatter_reduce(0, dst, d_inf[src] + 1, "amin"))
    d_to = torch.minimum(d_to, torch.full((400,), far).scatter_reduce(0, src, d_to[dst] + 1, "amin"))
infection.edge_mask = ((d_inf[src] + 1 == d_inf[dst]) & (d_inf[dst] + d_to[dst] == int(d_inf[node]))).float()
draw_truth(axes[1, 0], *neighbourhood(infection, node, 3), "Infection: a node 2 hops from the infection")
seed_all(0)
two_motifs = [ExplainerDataset(graph_generator=BAGraph(num_nodes=20, num_edges=1), motif_generator=m,
                               num_motifs=1, num_graphs=1)[0] for m in (HouseMotif(), CycleMotif(5))]
for ax, g, name in zip(axes[1, 1:], two_motifs, ["house (class 0)", "five-cycle (class 1)"]):
    draw_truth(ax, g.edge_index, g.num_nodes, g.edge_mask.float(), None, f"BA-2Motifs: {name}")
plt.tight_layout()
plt.show()

# %% [markdown]
# The molecular tasks read the molecules and their ground truths from the data of
# {cite}`sanchez2020evaluating` (`$LRP_DATA_ROOT/graph-attribution`); the label is the one stored
# with the ground truth, which matches the task's rule. One molecule of label 1 per task, the atoms
# of its first ground truth in red (Mutagenicity's NO$_2$ and NH$_2$ bonds are drawn in
# [Explaining GNNs](05_explaining_gnns)):

# %%
FOLDERS = {"Benzene": "benzene", "Fluoride-Carbonyl": "logic7", "Alkane-Carbonyl": "logic8",
           "Amine-Ether-Benzene": "logic10"}
root = Path(os.environ.get("LRP_DATA_ROOT", Path.home() / ".cache" / "lrp-book" / "data")) / "graph-attribution"
if root.is_dir():
    from rdkit import Chem
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
    for ax, (name, folder) in zip(axes, FOLDERS.items()):
        with open(root / folder / f"{folder}_smiles.csv") as f:
            rows = list(csv.DictReader(f))
        truths = np.load(root / folder / "true_raw_attribution_datadicts.npz", allow_pickle=True)["datadict_list"]
        test = np.load(root / folder / f"{folder}_traintest_indices.npz")["test_index"]
        i = next(int(i) for i in test if float(np.asarray(truths[i, 0]["globals"]).reshape(-1)[0]) > 0.5
                 and len(rows[i]["smiles"]) < 40)
        mol = Chem.MolFromSmiles(rows[i]["smiles"])
        gt = np.asarray(truths[i, 0]["nodes"], dtype=float).reshape(mol.GetNumAtoms(), -1)[:, 0]
        draw_molecule(mol, atom_relevance=gt * 1.0 - (1 - gt) * 0.2, ax=ax, vmax=1.0, colorbar=False,
                      title=f"{name} ({gt.shape[0]} atoms, {int(gt.sum())} marked)", font_size=10)
    plt.tight_layout()
    plt.show()
else:
    print("the graph-attribution data is not here: set LRP_DATA_ROOT to draw the molecules")

# %% [markdown]
# ## The methods
#
# All through PyG's `Explainer` where one exists; the gradient methods through Captum
# {cite}`kokhlikyan2020captum` (PyG's `CaptumExplainer`). Edge scores of a gradient method are the
# gradient with respect to an edge mask of ones; CAM {cite}`zhou2016cam,pope2019explainability`
# gives node scores (an edge gets the mean of its two end points), PGExplainer edge scores (an atom
# gets the largest score of its bonds). PGExplainer's training on the explained instances is counted
# in its time per explanation; GraphMask {cite}`schlichtkrull2021graphmask` learns one gate per edge and layer. The GAT {cite}`velickovic2018gat` is a second model trained on the same
# synthetic task; its attention, and LRP of it (the lead's generic mechanism explains GAT since
# commit `08985cb`), explain that model, whose accuracy is shown beside.

# %%
display(results_table([{"key": k, "what": v} for k, v in settings["methods"].items()],
                      [("key in quality.json", "key"), ("method", "what")]))

# %% [markdown]
# ## Results
#
# Three tables, one per task family, each method's AUROC as mean $\pm$ standard deviation over the
# seeds, the model's test accuracy in the first row, and, where the task has one, the AUROC that the
# method's own paper reported in a row of its own marked *published*. Published values are the
# papers' models and protocols, not ours: GNNExplainer's and PGExplainer's from their papers
# {cite}`ying2019gnnexplainer,luo2020pgexplainer`, the molecular ones the GCN medians of
# {cite}`sanchez2020evaluating`. They are anchors, not comparisons.

# %%
NAMES = {"lrp_eps": "LRP epsilon, signed (default)", "lrp_eps_abs": "LRP epsilon, abs",
         "lrp_gamma": "LRP gamma, signed", "lrp_zplus": "LRP z+, signed",
         "lrp_eps_contrast": "LRP epsilon, contrast", "lrp_zplus_contrast": "LRP z+, contrast",
         "lrp_eps_nobias": "LRP epsilon, head bias left out", "saliency": "saliency", "grad_x_input": "Grad x Input",
         "integrated_gradients": "Integrated Gradients", "guided_backprop": "guided backprop", "cam": "CAM",
         "grad_cam": "Grad-CAM", "gnnexplainer": "GNNExplainer", "pgexplainer": "PGExplainer",
         "graphmask": "GraphMask", "gat_attention": "GAT attention (GAT model)",
         "gat_lrp_eps": "LRP epsilon of the GAT, signed", "gat_lrp_eps_abs": "LRP epsilon of the GAT, abs",
         "gat_lrp_zplus_contrast": "LRP z+ contrast of the GAT", "random": "random"}
TITLES = {"ba_shapes": "BA-Shapes", "ba_community": "BA-Community", "tree_cycles": "Tree-Cycles",
          "tree_grid": "Tree-Grid", "infection": "Infection", "ba_2motifs": "BA-2Motifs", "benzene": "Benzene",
          "fluoride_carbonyl": "Fluoride-Carbonyl", "alkane_carbonyl": "Alkane-Carbonyl",
          "amine_ether_benzene": "Amine-Ether-Benzene", "mutagenicity": "Mutagenicity"}
# Published AUROCs (cited, each paper's own models): (method key, task) -> value.
PUBLISHED = {
    ("gnnexplainer", "ba_shapes"): 0.925, ("gnnexplainer", "ba_community"): 0.836,
    ("gnnexplainer", "tree_cycles"): 0.948, ("gnnexplainer", "tree_grid"): 0.875,
    ("gnnexplainer", "ba_2motifs"): 0.742,
    ("pgexplainer", "ba_shapes"): 0.963, ("pgexplainer", "ba_community"): 0.945,
    ("pgexplainer", "tree_cycles"): 0.987, ("pgexplainer", "tree_grid"): 0.907,
    ("pgexplainer", "ba_2motifs"): 0.926,
    ("cam", "benzene"): 0.986, ("integrated_gradients", "benzene"): 0.976, ("grad_x_input", "benzene"): 0.726,
    ("integrated_gradients", "fluoride_carbonyl"): 0.779, ("cam", "fluoride_carbonyl"): 0.727,
    ("cam", "alkane_carbonyl"): 0.913,
}
FAMILIES = {"node-level synthetic tasks": ["ba_shapes", "ba_community", "tree_cycles", "tree_grid", "infection"],
            "graph-level synthetic task": ["ba_2motifs"],
            "molecular tasks": ["benzene", "fluoride_carbonyl", "alkane_carbonyl", "amine_ether_benzene",
                                "mutagenicity"]}


def family_table(names):
    names = [t for t in names if t in tasks]
    methods = [m for m in NAMES if any(m in tasks[t]["methods"] for t in names)]
    rows = [{"method": "model test accuracy (GCN)", **{t: f"{tasks[t]['accuracy']:.3f}" for t in names}}]
    if any(tasks[t].get("gat_accuracy") is not None for t in names):
        rows.append({"method": "model test accuracy (GAT)",
                     **{t: f"{tasks[t]['gat_accuracy']:.3f}" for t in names if tasks[t].get("gat_accuracy") is not None}})
    for m in methods:
        row = {"method": NAMES[m]}
        for t in names:
            r = tasks[t]["methods"].get(m)
            if r is not None:
                row[t] = f"{r['auroc']:.3f} ± {r['auroc_std']:.3f}"
        rows.append(row)
        for t in names:
            if (m, t) in PUBLISHED:
                rows.append({"method": f"{NAMES[m]}: published (own model)",
                             **{u: f"{PUBLISHED[m, u]:.3f}" for u in names if (m, u) in PUBLISHED}})
                break
    return results_table(rows, [("method", "method")] + [(TITLES[t], t) for t in names])


for family, names in FAMILIES.items():
    display(Markdown(f"**AUROC against the ground truth, {family}**"))
    display(family_table(names))
display(Markdown(machine_note(quality)))

# %% [markdown]
# ### Time against quality
#
# The time per explanation is the median wall time of one explanation on one thread, over all
# instances and seeds of a task (PGExplainer's includes its share of training). Each point below is a
# method on one task; LRP's default is ringed.

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
groups = {"synthetic tasks": FAMILIES["node-level synthetic tasks"] + FAMILIES["graph-level synthetic task"],
          "molecular tasks": FAMILIES["molecular tasks"]}
shown = ["lrp_eps", "lrp_eps_abs", "lrp_zplus_contrast", "saliency", "integrated_gradients", "guided_backprop",
         "cam", "gnnexplainer", "pgexplainer", "graphmask", "gat_attention"]
colours = dict(zip(shown, list(plt.cm.tab10.colors) + ["black"]))
for ax, (title, names) in zip(axes, groups.items()):
    for m in shown:
        pts = [(tasks[t]["methods"][m]["ms"], tasks[t]["methods"][m]["auroc"]) for t in names
               if t in tasks and m in tasks[t]["methods"]]
        if not pts:
            continue
        ms, au = zip(*pts)
        ax.scatter(ms, au, color=colours[m], label=NAMES[m], s=45,
                   edgecolors="black" if m == "lrp_eps" else "none", linewidths=1.5)
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds per explanation (log scale)")
    ax.set_title(title)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
axes[0].set_ylabel("AUROC against the ground truth")
legend = {}
for ax in axes:
    for handle, text in zip(*ax.get_legend_handles_labels()):
        legend.setdefault(text, handle)
axes[1].legend(legend.values(), legend.keys(), loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
plt.tight_layout()
plt.show()

# %%
def median_ms(m):
    return float(np.median([tasks[t]["methods"][m]["ms"] for t in tasks if m in tasks[t]["methods"]]))


speed = {m: median_ms(m) for m in ("lrp_eps", "lrp_zplus_contrast", "gnnexplainer", "pgexplainer", "graphmask")}
ratio_gnn = speed["gnnexplainer"] / speed["lrp_eps"]
ratio_pg = speed["pgexplainer"] / speed["lrp_eps"]
print(f"median over tasks of the ms per explanation: LRP {speed['lrp_eps']:.1f}, GNNExplainer "
      f"{speed['gnnexplainer']:.0f}, PGExplainer {speed['pgexplainer']:.0f}, GraphMask {speed['graphmask']:.0f}")
print(f"LRP is {ratio_gnn:.0f}x faster than GNNExplainer and {ratio_pg:.0f}x faster than PGExplainer "
      f"(target: 100x)")
glue("ratio_gnn", f"{ratio_gnn:.0f}", display=False)
glue("ratio_pg", f"{ratio_pg:.0f}", display=False)
glue("speed_target", "met" if min(ratio_gnn, ratio_pg) >= 100 else "missed", display=False)

# %% [markdown]
# LRP costs one forward and one backward pass: its median time per explanation is
# {glue:text}`ratio_gnn` times below GNNExplainer's ({glue:text}`gnn_epochs` optimisation steps per
# explanation here; the published protocol uses 300) and {glue:text}`ratio_pg` times below
# PGExplainer's with its training counted. The target of a hundredfold is
# {glue:text}`speed_target`. The timings are from the machine named under the tables, a shared machine
# under load, so the ratios, which were taken in one process with the methods taking turns instance
# by instance, mean more than the absolute times.

# %% [markdown]
# ## Why signed relevance can miss the house
#
# LRP's default explanation is signed: positive relevance for evidence *for* the explained output,
# negative for evidence against. On BA-Shapes the signed edge relevance of the epsilon rule scores
# {glue:text}`diag_eps_signed`, no better than chance, while its absolute value scores
# {glue:text}`diag_eps_abs`. Three suspects: the biases
# (they take relevance, and the inputs must make up for it with the opposite sign), the rule, and the
# explained quantity (the raw logit of one class of a softmax classifier, which says nothing about the
# other classes). `bench_quality.py` separates them on BA-Shapes: {glue:text}`diag_n` explained motif
# nodes per seed, each LRP variant scored signed and absolute, and signed per class:

# %%
diag = quality["results"]["signed_diagnostics"]
glue("diag_n", str(diag["instances_per_seed"]), display=False)
rows = []
for variant, r in diag["variants"].items():
    rows.append({"variant": variant, "signed": r["signed"], "abs": r["abs"],
                 **{f"c{c}": v for c, v in r["per_class"].items()}})
display(results_table(rows, [("rule, explained quantity", "variant"), ("signed AUROC", "signed", "{:.3f}"),
                             ("abs AUROC", "abs", "{:.3f}"), ("signed: house top (1)", "c1", "{:.3f}"),
                             ("signed: middle (2)", "c2", "{:.3f}"), ("signed: bottom (3)", "c3", "{:.3f}")]))
sums = diag["relevance_sums"]
print(f"epsilon rule, mean per explanation: explained logit {sums['explained_logit']:.2f}, relevance reaching "
      f"the inputs {sums['inputs']:.2f}, taken by the biases {sums['biases']:.2f}")
print(f"  on the motif edges of the subgraph {sums['motif_edges']:.2f}, on its other edges "
      f"{sums['other_subgraph_edges']:.2f}")
v = diag["variants"]
glue("diag_eps_signed", f"{v['epsilon, logit']['signed']:.3f}", display=False)
glue("diag_eps_abs", f"{v['epsilon, logit']['abs']:.3f}", display=False)
glue("diag_eps_c2", f"{v['epsilon, logit']['per_class']['2']:.3f}", display=False)
glue("diag_eps_c1", f"{v['epsilon, logit']['per_class']['1']:.3f}", display=False)
glue("diag_eps_c3", f"{v['epsilon, logit']['per_class']['3']:.3f}", display=False)
glue("diag_nobias", f"{v['epsilon without bias, logit']['signed']:.3f}", display=False)
glue("diag_eps_contrast", f"{v['epsilon, contrast']['signed']:.3f}", display=False)
glue("diag_zplus", f"{v['z+, logit']['signed']:.3f}", display=False)
glue("diag_zplus_contrast", f"{v['z+, contrast']['signed']:.3f}", display=False)
glue("diag_bias_share", f"{sums['biases']:.2f}", display=False)
glue("diag_logit", f"{sums['explained_logit']:.2f}", display=False)
glue("diag_inputs", f"{sums['inputs']:.2f}", display=False)

# %% [markdown]
# What the table says:
#
# - **The sign fails class by class.** The signed AUROC of the epsilon rule is
#   {glue:text}`diag_eps_signed` overall: {glue:text}`diag_eps_c1` for nodes on the roof of a house,
#   {glue:text}`diag_eps_c3` for the bottom nodes and {glue:text}`diag_eps_c2` for the middle nodes,
#   whose house edges carry the most
#   *negative* relevance. The features are constant, so everything the GCN knows comes through the
#   edges, and a negative share means that the house edges feed hidden units whose contribution to the
#   explained logit is negative; the logit is positive all the same because the biases push it up by
#   more (next point). Epsilon-LRP of a ReLU network is, up to $\epsilon$, Gradient $\times$ Input,
#   which hands each contribution, sign included, down to the edges. The magnitude still singles the
#   motif out: the house edges matter most, in whichever direction.
# - **The biases take more than the logit.** Of an explained logit of {glue:text}`diag_logit` on
#   average, the biases take {glue:text}`diag_bias_share` and the inputs get the rest, a total of
#   {glue:text}`diag_inputs`. Leaving the head's bias out of the rule
#   (`EpsilonNoBias` in the benchmark) gives a signed AUROC of {glue:text}`diag_nobias`. `GCNConv`
#   adds its bias outside its linear map, as a constant term that keeps its share, so no rule can
#   leave it out; whether bias-free propagation alone would fix the sign is therefore open here (it
#   needs a library option, or a model trained without biases: exercise 4).
# - **The explained quantity matters together with the rule.** Explaining the contrast
#   $z_c - \frac{1}{K-1}\sum_{k \neq c} z_k$ -- "why this class rather than the others", for two
#   classes the log-odds that `LRPExplainer` already explains for a one-logit binary model -- leaves
#   the epsilon rule at {glue:text}`diag_eps_contrast`. The z+ rule, which passes only positive
#   contributions so that relevance stays positive on the way down, gets
#   {glue:text}`diag_zplus` on the raw logit and {glue:text}`diag_zplus_contrast` on the contrast:
#   the logit of one class also carries the evidence shared with the other house classes, the
#   contrast removes it. The benchmark builds the contrast as a bias-free `nn.Linear` after the
#   model (`bench_quality.Contrast`), which `LRPExplainer` explains like any other layer.
#
# The full tables above show what each choice costs elsewhere: on the molecular tasks, atoms with
# negative relevance are real evidence against the label, and the absolute value ranks them up.

# %% [markdown]
# ## Where LRP wins and where it loses
#
# The issue behind this chapter set two targets: LRP's default at or above the best other method on
# every synthetic task and within 0.02 of it on the molecular ones, and a hundredfold speed-up over
# GNNExplainer and PGExplainer. The next cell checks the first for three LRP variants against the
# best non-LRP method on the same (GCN) model; GAT attention explains another model and is left out.

# %%
TOLERANCE = 0.02  # the target: within this of the best other method on the molecular tasks
print(f"target: at or above the best non-LRP method on the synthetic tasks, within {TOLERANCE} on the molecular ones")
OTHERS = ["saliency", "grad_x_input", "integrated_gradients", "guided_backprop", "cam", "grad_cam",
          "gnnexplainer", "pgexplainer", "graphmask"]
synthetic = groups["synthetic tasks"]
verdict = {}
for m in ("lrp_eps", "lrp_eps_abs", "lrp_zplus_contrast"):
    met, missed = [], []
    for t in tasks:
        if m not in tasks[t]["methods"]:
            continue
        best = max(OTHERS, key=lambda o: tasks[t]["methods"].get(o, {"auroc": -1})["auroc"])
        gap = tasks[t]["methods"][m]["auroc"] - tasks[t]["methods"][best]["auroc"]
        ok = gap >= 0 if t in synthetic else gap >= -TOLERANCE
        (met if ok else missed).append(f"{TITLES[t]} ({gap:+.3f} vs {NAMES[best]})")
    verdict[m] = (met, missed)
    print(f"{NAMES[m]}: target met on {len(met)} of {len(met) + len(missed)} tasks")
    for line in missed:
        print("   missed:", line)
summary = []
for t in tasks:
    r = tasks[t]["methods"]
    best = max(OTHERS, key=lambda o: r.get(o, {"auroc": -1})["auroc"])
    summary.append({"task": TITLES[t], "acc": tasks[t]["accuracy"], "eps": r["lrp_eps"]["auroc"],
                    "abs": r["lrp_eps_abs"]["auroc"], "zc": r.get("lrp_zplus_contrast", {}).get("auroc"),
                    "best": NAMES[best], "best_auroc": r[best]["auroc"]})
display(results_table(summary, [("task", "task"), ("GCN accuracy", "acc", "{:.3f}"),
                                ("LRP default (signed)", "eps", "{:.3f}"), ("LRP abs", "abs", "{:.3f}"),
                                ("LRP z+ contrast", "zc", "{:.3f}"), ("best other method", "best"),
                                ("its AUROC", "best_auroc", "{:.3f}")]))
published_pairs = [(m, t) for (m, t) in PUBLISHED if t in tasks and m in tasks[t]["methods"]]
below = [(m, t) for m, t in published_pairs if tasks[t]["methods"][m]["auroc"] < PUBLISHED[m, t]]
glue("n_published", str(len(published_pairs)), display=False)
glue("n_below_published", str(len(below)), display=False)
for t in ("tree_cycles", "ba_2motifs"):
    if t in tasks:
        r = tasks[t]["methods"]
        best = max((m for m in r if m != "random" and not m.startswith("gat_")), key=lambda m: r[m]["auroc"])
        glue(f"{t}_best", f"{r[best]['auroc']:.3f}", display=False)
        glue(f"{t}_best_name", NAMES[best], display=False)
        glue(f"{t}_acc", f"{tasks[t]['accuracy']:.3f}", display=False)
        glue(f"{t}_lrp_abs", f"{r['lrp_eps_abs']['auroc']:.3f}", display=False)
zplus_wins = [TITLES[t] for t in tasks if tasks[t]["methods"]["lrp_zplus"]["auroc"] > tasks[t]["methods"]["lrp_eps"]["auroc"]]
signed_wins = [TITLES[t] for t in FAMILIES["molecular tasks"] if t in tasks
               and tasks[t]["methods"]["lrp_eps"]["auroc"] > tasks[t]["methods"]["lrp_eps_abs"]["auroc"]]
print(f"z+ (signed) above the epsilon rule (signed) on {len(zplus_wins)} of {len(tasks)} tasks: {', '.join(zplus_wins)}")
print(f"signed above absolute epsilon relevance on {len(signed_wins)} of the molecular tasks: {', '.join(signed_wins)}")
glue("zplus_wins", str(len(zplus_wins)), display=False)
glue("signed_wins", str(len(signed_wins)), display=False)
glue("n_molecular", str(sum(t in tasks for t in FAMILIES["molecular tasks"])), display=False)
glue("met_default", str(len(verdict["lrp_eps"][0])), display=False)
glue("met_abs", str(len(verdict["lrp_eps_abs"][0])), display=False)
glue("met_zc", str(len(verdict["lrp_zplus_contrast"][0])), display=False)
glue("n_tasks", str(len(tasks)), display=False)

# %% [markdown]
# LRP's signed default meets the quality target on {glue:text}`met_default` of the
# {glue:text}`n_tasks` tasks, its absolute value on {glue:text}`met_abs` and z+ on the contrast on
# {glue:text}`met_zc`; the lines above name each miss and the method that beat it. So the quality
# target is missed, and the table says by how much on each task. Among LRP's own choices, the z+
# rule ranks above the epsilon rule on {glue:text}`zplus_wins` of the {glue:text}`n_tasks` tasks,
# often by a wide margin, and loses little where it loses; the contrast helps where several classes
# share the evidence (the house classes of BA-Shapes and BA-Community, the distances of Infection)
# and hurts on every two-class task. On
# {glue:text}`signed_wins` of the {glue:text}`n_molecular` molecular tasks signed relevance ranks
# above its absolute value. How to read the misses:
#
# - **Node tasks with constant features.** Every edge method that reads the model's own computation
#   (LRP, gradients, Integrated Gradients) sees the same thing here: structure acting through
#   normalisation coefficients. The absolute value of a gradient (saliency) and of LRP then rank
#   much alike; the signed variants disagree where the evidence is inhibitory (above).
# - **Methods that optimise a mask** (GNNExplainer, PGExplainer, GraphMask) answer a different
#   question -- which small subgraph keeps the prediction -- at a hundred to thousands of times the
#   cost of one pass. With our reduced budgets ({glue:text}`gnn_epochs` epochs for GNNExplainer,
#   {glue:text}`graphmask_epochs` for GraphMask, PGExplainer trained on the explained instances only)
#   and our models, {glue:text}`n_below_published` of the {glue:text}`n_published` measured figures
#   that have a published counterpart are below it.
# - **Tree-Cycles.** The GCN is accurate ({glue:text}`tree_cycles_acc`), yet the best method reaches
#   only {glue:text}`tree_cycles_best` ({glue:text}`tree_cycles_best_name`). With constant features and
#   summed messages a node can only be told apart by the degrees around it, and the tree edges next
#   to a cycle carry that information as much as the cycle's own edges; a plausible reading, which we
#   have not checked, is that the model's evidence is not the planted cycle alone, and that every
#   method, LRP included, says so.
# - **BA-2Motifs.** The GCN classifies the test graphs almost perfectly ({glue:text}`ba_2motifs_acc`),
#   the best method ({glue:text}`ba_2motifs_best_name`) scores {glue:text}`ba_2motifs_best`, but
#   LRP's edge relevance finds the motif much less well ({glue:text}`ba_2motifs_lrp_abs` for its
#   absolute value). We have not found out why within this benchmark. One lead, from
#   [Relevant walks](08_relevant_walks): there a GIN decided "cycle" by the *absence* of a house,
#   so an explanation of a cycle graph need not point at its cycle; exercise 6 splits the score by
#   class.
# - **Molecules.** Signed relevance is the better ranking when atoms outside the ground truth count
#   *against* the label; CAM and Integrated Gradients are strong there too, as in
#   {cite}`sanchez2020evaluating`.
# - **The model decides.** A low AUROC with a high accuracy (see the accuracy rows) means the model
#   found another route to the label, and a faithful explanation shows that route. The ground truth
#   is the planted pattern, not what the model uses.
# - **The GAT.** With constant features a GAT's attention averages the neighbours, which erases the
#   degrees that the GCN reads, and its accuracy stays low on most synthetic tasks (the GAT rows of
#   the first two tables): its attention and its LRP explain a weak model, and agreeing with the
#   planted motif does not make them right about it.

# %% [markdown]
# ## Summary
#
# - The standard ground-truth benchmarks score an explanation by the AUROC of its edge (or atom)
#   scores against a planted pattern; `benchmarks/bench_quality.py` runs all of them, with the same
#   models, instances and seeds for every method, and writes `quality.json`.
# - AUROC ranks, so the sign of a signed explanation counts. On BA-Shapes LRP's signed edge relevance
#   ranks the house below chance for the middle nodes of the house while its magnitude finds it: the
#   evidence there is inhibitory. The z+ rule on the contrast of the logits makes the sign point at
#   the evidence on BA-Shapes; across all tasks the z+ rule is the better default ranking more often
#   than the epsilon rule, and on molecules signed relevance mostly beats its absolute value.
# - LRP's default does not reach the quality target: mask-optimising methods, Integrated
#   Gradients or CAM beat it on several tasks, and on some (Tree-Cycles) no method gets far from chance
#   although the model is accurate.
# - LRP costs one backward pass, orders of magnitude less than the mask-optimising explainers.
# - A ground-truth AUROC measures agreement with what was planted, not with what the model uses;
#   read it beside the model's accuracy.
#
# ## Exercises
#
# 1. Run `python benchmarks/bench_quality.py --fast --tasks ba_shapes` and compare its figures with
#    the tables. Which methods move most with one seed and four instances, and why?
# 2. Add the log-softmax as the explained quantity: linearised at the prediction it is
#    $z_c - \sum_k p_k z_k$. Write it as a bias-free linear layer whose weights depend on the
#    instance, and compare with the uniform contrast on BA-Shapes.
# 3. Give GNNExplainer 300 epochs (`--slow-epochs 300`) on BA-Shapes. How close does it get to its
#    published figure, and what happens to the speed ratio?
# 4. Train the BA-Shapes GCN without biases (`bias=False` in every layer). Does the signed epsilon
#    relevance of the middle nodes change sign? Why is that not the same experiment as leaving the
#    biases out of the rule?
# 5. On Infection the ground truth is the set of shortest paths. Score with PyG's own `edge_mask`
#    (every edge within three hops of an infected node) instead: which methods gain, and what does
#    that say about a loose ground truth?
# 6. Split the BA-2Motifs AUROC of LRP and of CAM by class (house, cycle). Then score LRP's *node*
#    relevance the way CAM is scored (an edge gets the mean of its end points). Which of the two
#    explains the gap between them?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
