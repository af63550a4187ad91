# %% [markdown]
# # Comparing explainers on a graph classifier
#
# Which explainer should you trust with a graph classifier? This page puts LRP beside four other
# ways of scoring the bonds of a molecule for the same prediction: GNNExplainer, which *optimises* a
# soft edge mask {cite}`ying2019gnnexplainer`; gradient saliency {cite}`simonyan2014deep`; and
# Gradient $\times$ Input and Integrated Gradients {cite}`sundararajan2017axiomatic` through Captum
# {cite}`kokhlikyan2020captum`. A sixth method, TracIn {cite}`pruthi2020tracin`, answers a different
# question: which *training molecules* pushed the model towards this prediction. Then all of them are
# scored over every test mutagen, against the chemists' NO$_2$/NH$_2$ alerts {cite}`luo2020pgexplainer`,
# by fidelity, and by cost.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This page assumes [Explaining a graph classifier](05_explaining_gnns.ipynb), whose Mutagenicity GCN
# it explains. After reading it you should be able to
# - explain the same prediction with GNNExplainer, saliency, Gradient $\times$ Input and Integrated
#   Gradients, and say how close LRP-epsilon is to Gradient $\times$ Input on a ReLU network;
# - find the training molecules that support or oppose a prediction with TracIn;
# - compare explainers with ground-truth AUROC, fidelity and cost, and say what each number does
#   and does not tell you.
# ```

# %% tags=["hide-input"]
import warnings

# import-time notes of the libraries (tqdm, deprecations); nothing of ours
warnings.filterwarnings("ignore")

import copy
import random


import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display
from captum.attr import IntegratedGradients, Saliency
from captum.influence import TracInCPFast
from myst_nb import glue
from rdkit.Chem.rdMolDescriptors import CalcMolFormula
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Batch
from torch_geometric.explain import Explainer, GNNExplainer
from torch_geometric.explain.algorithm import CaptumExplainer
from torch_geometric.explain.metric import fidelity

from lrp_lib.book.datasets import mutagenicity
from lrp_lib.book.datasets.mutagenicity import ATOMS, MUTAGEN, book_split, explained_mutagen, to_rdkit
from lrp_lib import LRPExplainer
from lrp_lib.book.plotting import BOOK_WIDTH, bond_values, book_style, draw_molecule
from lrp_lib.book.models import MutagenicityGCN as GCN
from lrp_lib.book.pretrained import load_or_train
from lrp_lib.book.results import load_results, machine_note, results_table

book_style()


def seed_everything(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cpu":
    # the small graphs gain nothing from threads; and sums in one fixed order
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
seed_everything(0)

# %% [markdown]
# ## The data, the model and one mutagen
#
# The data split, the model and its stored weights are those of [Explaining a graph
# classifier](05_explaining_gnns.ipynb) (`load_or_train` loads the weights strictly, so a different
# class would be refused), and so is the picked molecule: the first correctly classified test mutagen
# with a nitro group. All five methods explain the same quantity, the **log-odds of the predicted
# class**: for a mutagen predicted as such that is $-z$, minus the logit, so positive scores are
# evidence *for* "mutagen".

# %%
# a local copy under $LRP_DATA_ROOT if set, else downloaded once to ~/.cache/lrp_lib/data
dataset = mutagenicity()
train_idx, test_idx = book_split(dataset)  # a stratified quarter for the test
train_set, test_set = dataset[train_idx], dataset[test_idx]
print(dataset, f"- train {len(train_set)} graphs, test {len(test_set)} graphs")


def trained_in_explaining_a_graph_classifier(model):
    raise RuntimeError(
        "the Mutagenicity GCN is trained in 'Explaining a graph classifier'; "
        "run that chapter first to train it"
    )


seed_everything(0)
model = GCN(dataset.num_features, hidden=64).to(device)
record = load_or_train("mutagenicity-gcn", model, trained_in_explaining_a_graph_classifier, retrain=False)
model.eval()
print(f"stored test accuracy {record['metrics']['test_accuracy']:.3f}")

# %% tags=["remove-cell"]
glue("test_accuracy", f"{record['metrics']['test_accuracy']:.3f}", display=False)

# %%
# the test mutagens with marked bonds, the model's logits, and the first correctly classified one with a
# nitro group and 14 to 22 atoms
evaluation, logits, pick = explained_mutagen(model, test_set, device)
graph = evaluation[pick].clone().to(device)  # a copy: Data.to moves in place
print(
    f"{len(evaluation)} test mutagens with NO2/NH2 bonds; picked #{pick}: "
    f"{graph.num_nodes} atoms, {graph.edge_index.shape[1]} directed edges, "
    f"{int(graph.edge_gt.sum())} of them marked"
)
print(
    f"logit {logits[pick]:.3f}  ->  P(mutagen) = "
    f"{torch.sigmoid(torch.tensor(-logits[pick])).item():.3f}"
)

# %% tags=["remove-cell"]
glue("n_evaluation", f"{len(evaluation)}", display=False)

# %%
model_config = dict(mode="binary_classification", task_level="graph", return_type="raw")
lrp_explainer = Explainer(
    model,
    algorithm=LRPExplainer(rule="epsilon"),
    explanation_type="model",
    node_mask_type="object",
    edge_mask_type="object",
    model_config=model_config,
)
explanation = lrp_explainer(graph.x, graph.edge_index)
print(
    f"node_relevance {tuple(explanation.node_relevance.shape)}, edge_relevance "
    f"{tuple(explanation.edge_relevance.shape)}, target {explanation.target.tolist()}"
)
explained = -logits[pick]
node_total = explanation.node_relevance.sum().item()
bias_share = float(explanation.bias_relevance)
print(f"explained log-odds of 'mutagen'  {explained:7.3f}")
print(f"relevance of the atoms (nodes)   {node_total:7.3f}")
print(
    f"relevance kept by the biases     {bias_share:7.3f}  (explanation.bias_relevance)"
)
print(f"atoms + biases - log-odds        {round(node_total + bias_share - explained, 3) + 0.0:7.3f}")  # no -0.000

# %% tags=["remove-cell"]
glue("explained_logodds", f"{explained:.2f}", display=False)
glue("node_relevance", f"{node_total:.2f}", display=False)
glue("bias_relevance", f"{bias_share:.2f}", display=False)
glue("bias_direction", "against" if bias_share < 0 else "for", display=False)

# %% [markdown]
# ### GNNExplainer, saliency, Gradient $\times$ Input and Integrated Gradients
#
# GNNExplainer {cite}`ying2019gnnexplainer` learns a soft mask $\sigma(M)$ over the edges that
# keeps the prediction while staying small, by 200 steps of gradient descent on
# $-\log p_{\hat y}(G \odot \sigma(M)) + \alpha \lVert\sigma(M)\rVert_1 + \beta H(\sigma(M))$.
# Two hundred optimisation steps amplify rounding: in float32 the mask can come out slightly different
# on different CPUs, enough to reorder close edges. This page therefore runs it on a float64 copy
# of the model, so that every CPU prints the same mask.
#
# The two gradient methods treat the edge weights as the input: the model accepts `edge_weight`,
# so an all-ones mask $m$ gives the ordinary prediction and the derivative with respect to $m_e$
# says how much edge $e$ matters. Saliency {cite}`simonyan2014deep` takes
# $|\partial f / \partial m_e|$ at $m = \mathbf 1$; Integrated Gradients
# {cite}`sundararajan2017axiomatic` averages the gradient along the path from the empty graph
# $m = \mathbf 0$ to $m = \mathbf 1$ and multiplies by the difference,
#
# $$ \mathrm{IG}_e = (1 - 0) \int_0^1 \frac{\partial f(\alpha \mathbf 1)}{\partial m_e}\, d\alpha , $$
#
# whose sum over edges is $f(\mathbf 1) - f(\mathbf 0)$ (completeness). Captum wants a function of the
# mask; ours evaluates a whole stack of masks in one forward by batching copies of the molecule,
# so IG's 50 steps cost one pass.
#
# Gradient $\times$ Input multiplies each input by the derivative of the explained output with
# respect to it: $x_{jf}\, \partial f / \partial x_{jf}$ for a node feature. It comes from Captum's
# `InputXGradient` through PyG's `CaptumExplainer`, which puts its edge mask, all ones, on the
# *messages* of every layer (PyG's explain mode) rather than on the edge weights that GCN normalises
# by degree, so an edge's score is $\sum_t m^{(t)}_{ji}\, \partial f / \partial m^{(t)}_{ji}$ over its
# messages $m^{(t)}_{ji}$: the very place where LRP's edge relevance lives. `CaptumExplainer` explains
# a binary model's probability (it asks for `return_type="probs"`); to have it explain the logit $z$
# the model is declared a regression, and the sign is flipped for "mutagen" as for LRP.


# %%
def log_odds(graph, edge_masks, target):
    """Log-odds of the target class for each row of `edge_masks`.

    The rows are copies of `graph`, run in one batch.
    """
    k, n, e = edge_masks.shape[0], graph.num_nodes, graph.edge_index.shape[1]
    offsets = (torch.arange(k, device=edge_masks.device) * n).repeat_interleave(e)
    edge_index = graph.edge_index.repeat(1, k) + offsets
    batch = torch.arange(k, device=edge_masks.device).repeat_interleave(n)
    z = model(graph.x.repeat(k, 1), edge_index, batch, edge_masks.reshape(-1)).view(-1)
    return z if int(target) == 1 else -z


def saliency(graph, target):
    mask = torch.ones(
        1, graph.edge_index.shape[1], device=graph.x.device, requires_grad=True
    )
    return Saliency(lambda m: log_odds(graph, m, target)).attribute(mask, abs=True)[0]


def integrated_gradients(graph, target, steps=50):
    mask = torch.ones(
        1, graph.edge_index.shape[1], device=graph.x.device, requires_grad=True
    )
    ig = IntegratedGradients(lambda m: log_odds(graph, m, target))
    return ig.attribute(
        mask, baselines=torch.zeros_like(mask), n_steps=steps, internal_batch_size=steps
    )[0]


def grad_x_input_explainer(net):
    return Explainer(
        net,
        algorithm=CaptumExplainer("InputXGradient"),
        explanation_type="model",
        node_mask_type="attributes",
        edge_mask_type="object",
        model_config=dict(mode="regression", task_level="graph", return_type="raw"),
    )


grad_x_input_of = grad_x_input_explainer(model)


def grad_x_input(graph, target, explainer=grad_x_input_of):
    """Gradient x Input of the log-odds of `target`.

    Returns (x * df/dx summed per atom, m * df/dm per edge).
    """
    e = explainer(graph.x, graph.edge_index)
    sign = 1 if int(target) == 1 else -1
    return sign * e.node_mask.sum(-1).detach(), sign * e.edge_mask.detach()


def gnn_explain(graph, epochs=200, seed=0):
    """GNNExplainer's edge mask, optimised in float64.

    In float32 its 200 Adam steps drift from one CPU to another far enough to reorder
    close edges; in float64 they agree to the printed digits.
    """
    model64 = copy.deepcopy(model).double()
    explainer = Explainer(
        model64,
        algorithm=GNNExplainer(epochs=epochs),
        explanation_type="model",
        node_mask_type=None,
        edge_mask_type="object",
        model_config=model_config,
    )
    default = torch.get_default_dtype()
    # GNNExplainer draws its initial mask in the default dtype
    torch.set_default_dtype(torch.float64)
    try:
        seed_everything(seed)
        return explainer(graph.x.double(), graph.edge_index).edge_mask.float()
    finally:
        torch.set_default_dtype(default)


target = int(explanation.target)
scores = {
    "GNNExplainer": gnn_explain(graph),
    "saliency": saliency(graph, target),
    "Integrated Gradients": integrated_gradients(graph, target),
    "Grad x Input": grad_x_input(graph, target)[1],
    "LRP": explanation.edge_relevance,
}
truth = graph.edge_gt.cpu()
print(f"{'method':22s} {'AUROC vs NO2/NH2':>17s}   top-4 bonds (by score)")
for name, s in scores.items():
    s = s.detach().cpu()
    top = s.argsort(descending=True, stable=True)[:4]
    kinds = graph.x.argmax(-1).cpu()
    bonds = [
        f"{ATOMS[kinds[graph.edge_index[0, e]]]}-{ATOMS[kinds[graph.edge_index[1, e]]]}"
        for e in top.tolist()
    ]
    print(
        f"{name:22s} {roc_auc_score(truth.numpy(), s.numpy()):17.3f}   {' '.join(bonds)}"
    )

# LRP's most relevant bond (both directions summed), in words for the text below
picked_mol = to_rdkit(graph.cpu())
lrp_bonds = bond_values(
    picked_mol, graph.edge_index.cpu(), scores["LRP"].detach().cpu()
)
top_bond = picked_mol.GetBondWithIdx(int(lrp_bonds.argmax()))
ends = sorted([top_bond.GetBeginAtom().GetSymbol(), top_bond.GetEndAtom().GetSymbol()])
top_marked = bool(
    bond_values(picked_mol, graph.edge_index.cpu(), graph.edge_gt.float().cpu(), "max")[
        top_bond.GetIdx()
    ]
)
# the chemistry of that bond: is it part of a nitroso group
# (N=O on a carbon or a nitrogen)?
from rdkit import Chem  # noqa: E402

NITROSO = {
    "an aromatic nitroso group (Ar-N=O)": "c[NX2]=O",
    "an N-nitroso group (N-N=O)": "[#7][NX2]=O",
    "a nitroso group (C-N=O)": "[#6][NX2]=O",
}
bond_atoms = {top_bond.GetBeginAtomIdx(), top_bond.GetEndAtomIdx()}
top_group = next(
    (
        group
        for group, smarts in NITROSO.items()
        if any(
            bond_atoms <= set(m)
            for m in picked_mol.GetSubstructMatches(Chem.MolFromSmarts(smarts))
        )
    ),
    None,
)
print(
    "LRP's top bond lies in a nitroso group:",
    top_group is not None,
    f"({top_group})" if top_group else "",
)

# %% tags=["remove-cell"]
glue(
    "lrp_top_bond_sentence",
    "LRP's most relevant bond in this molecule is a "
    f"{str(top_bond.GetBondType()).lower()} {'-'.join(ends)} bond, which the ground "
    "truth "
    + (
        "marks."
        if top_marked
        else "does not mark (it only knows the bonds of NO₂ and NH₂ groups)"
    )
    + (
        f"; it belongs to {top_group}."
        if top_group and not top_marked
        else "" if top_marked else "."
    ),
    display=False,
)
glue(
    "nitroso_note",
    (
        "Nitroso groups are themselves structural alerts for mutagenicity "
        if top_group and not top_marked
        else ""
    ),
    display=False,
)

# %% [markdown]
# The same scores on the molecule, drawn as chemists draw it (RDKit's 2D depiction; hydrogens are
# atoms of this data set, so they are drawn). `lrp_lib.book.datasets.mutagenicity.to_rdkit` builds the
# molecule from the atom and bond labels, and `lrp_lib.book.plotting.bond_values` adds the scores of a
# bond's two directed edges. The first panel marks the ground-truth bonds in yellow. Each method
# gets its own colour scale, centred at zero, with a colour bar that says what it shows; the LRP and
# Gradient $\times$ Input panels also colour the atoms by their node scores, on the same scale as
# their bonds.

# %% tags=["hide-input"]
cpu_graph = graph.cpu()
mol = to_rdkit(cpu_graph)
marked = np.flatnonzero(
    bond_values(mol, cpu_graph.edge_index, cpu_graph.edge_gt.float(), combine="max")
)
panels = {
    "LRP": (
        "relevance of the log-odds\n(LRP; atoms and bonds)",
        explanation.node_relevance.sum(-1),
    ),
    "Grad x Input": (
        "x * gradient of the log-odds\n(atoms and bonds)",
        grad_x_input(graph, target)[0],
    ),
    "GNNExplainer": ("edge mask (GNNExplainer),\nsum of both directions", None),
    "saliency": ("|gradient| of the log-odds\n(saliency), both directions", None),
    "Integrated Gradients": (
        "attribution of the log-odds\n(Integrated Gradients)",
        None,
    ),
}
fig, axes = plt.subplots(3, 2, figsize=(BOOK_WIDTH, 8.4))
draw_molecule(
    mol,
    marked_bonds=marked,
    ax=axes[0, 0],
    title="ground truth: NO$_2$/NH$_2$ bonds (yellow)",
)
for ax, (name, (label, atoms)) in zip(axes.flat[1:], panels.items()):
    bonds = bond_values(mol, cpu_graph.edge_index, scores[name].detach().cpu())
    draw_molecule(
        mol,
        None if atoms is None else atoms.detach().cpu(),
        bonds,
        ax=ax,
        label=label,
        title=name,
    )
fig.tight_layout()
plt.show()

# %% [markdown]
# Red is evidence for "mutagen" (or, for GNNExplainer's mask and saliency, which are never
# negative, simply a large value), blue evidence against, white none. The methods answer
# different questions -- GNNExplainer: which edges suffice to keep the prediction; saliency: which
# edge weights the output is most *sensitive* to; Gradient $\times$ Input, Integrated Gradients and
# LRP: how the output *splits* over the edges -- and it shows in how concentrated or spread out the
# maps are. {glue:text}`lrp_top_bond_sentence` {glue:text}`nitroso_note`{cite}`kazius2005mutagenicity`,
# so a model may well have learnt it from the data. The LRP and Gradient $\times$ Input panels look
# alike, and the next section says why.
#
# ### LRP-epsilon and Gradient $\times$ Input
#
# For a network of linear maps and ReLUs, LRP-0 (the epsilon rule with $\epsilon = 0$) *is*
# Gradient $\times$ Input {cite}`montavon2019lrp`: a ReLU passes relevance $a\, \partial f / \partial a$
# on unchanged, and the share $x_j w_{jk} / z_k$ of a linear map times $z_k\, \partial f / \partial
# z_k$ is $x_j w_{jk}\, \partial f / \partial z_k$, which summed over $k$ is $x_j\, \partial f /
# \partial x_j$. The biases change neither side: they take their share of the relevance, and the
# gradient does not see them. This GCN is such a network (dropout is off when it explains), so the
# only difference is the stabiliser, $z_k + \epsilon\, \mathrm{sign}(z_k)$ with $\epsilon = 10^{-6}$,
# which matters where a pre-activation $z_k$ is tiny. The cell checks both statements on every test
# mutagen of the evaluation set, on a float64 copy of the model so that the comparison is not
# rounding: the largest difference per molecule, relative to the largest Gradient $\times$ Input of
# that molecule, for atoms and for edges.

# %%
# the same weights in float64
model64 = GCN(dataset.num_features, hidden=64).double().to(device).eval()
model64.load_state_dict(model.state_dict())
grad_x_input_64 = grad_x_input_explainer(model64)


def lrp_64(rule):
    return Explainer(
        model64,
        algorithm=LRPExplainer(rule=rule),
        explanation_type="model",
        node_mask_type="object",
        edge_mask_type="object",
        model_config=model_config,
    )


def largest_difference(lrp, graphs):
    """Max over the graphs of max |LRP - Grad x Input| / max |Grad x Input|.

    For atoms and for edges.
    """
    nodes, edges = [], []
    for g in graphs:
        g = g.clone().to(device)
        g.x = g.x.double()
        e = lrp(g.x, g.edge_index)
        gx_nodes, gx_edges = grad_x_input(g, int(e.target), grad_x_input_64)
        nodes.append(
            float(
                (e.node_relevance.view(-1) - gx_nodes).abs().max()
                / gx_nodes.abs().max()
            )
        )
        edges.append(
            float((e.edge_relevance - gx_edges).abs().max() / gx_edges.abs().max())
        )
    return max(nodes), max(edges)


eps_nodes, eps_edges = largest_difference(lrp_64("epsilon"), evaluation)
zero_nodes, zero_edges = largest_difference(lrp_64("z"), evaluation)
print(f"largest relative difference to Grad x Input over {len(evaluation)} molecules:")
print(
    f"  LRP-epsilon (1e-6): atoms {100 * eps_nodes:.2g}%, edges {100 * eps_edges:.2g}%"
)
print(
    f"  LRP-0:              atoms below 1e-6: {zero_nodes < 1e-6}, edges below 1e-6: "
    f"{zero_edges < 1e-6}"
)

# %% tags=["remove-cell"]
glue("gxi_eps_nodes", f"{100 * eps_nodes:.2g}%", display=False)
glue("gxi_eps_edges", f"{100 * eps_edges:.2g}%", display=False)
glue(
    "gxi_zero_agree",
    "agree" if max(zero_nodes, zero_edges) < 1e-6 else "do not agree",
    display=False,
)

# %% [markdown]
# LRP-epsilon and Gradient $\times$ Input differ by at most {glue:text}`gxi_eps_nodes` of the
# largest atom score and {glue:text}`gxi_eps_edges` of the largest edge score of any molecule, and
# with $\epsilon = 0$ they {glue:text}`gxi_zero_agree` to within $10^{-6}$ (the edge scores pass
# through PyG's float32 edge mask). On this model, then, LRP-epsilon *is* Gradient $\times$
# Input, computed in one relevance backward instead of a gradient; the two part ways where the
# rules do, as with gamma or z+ on the weights
# ([Convolutions and skip connections](03_convolutions_and_skips.ipynb)), or where a model is not piecewise
# linear (attention, gates, a sigmoid inside, see [Which PyG models can be
# explained](coverage.ipynb)). That is why `LRPExplainer`'s default is not epsilon but z+, which
# follows only the positive evidence: over the tasks of [Benchmarking
# explanations](09_benchmarking_explanations.ipynb) it ranks better than epsilon and than Gradient
# $\times$ Input. The comparison below shows both.
# %% [markdown]
# ## Which training molecules support this prediction? TracIn
#
# TracIn {cite}`pruthi2020tracin` scores a training example $z$ by how much the training steps on
# it lowered the loss of the test example $z'$, approximated at saved checkpoints $t$ with their
# learning rates $\eta_t$:
#
# $$ \mathrm{TracIn}(z, z') = \sum_t \eta_t\, \nabla_\theta \ell(z; \theta_t) \cdot \nabla_\theta \ell(z'; \theta_t). $$
#
# *Proponents* have the largest positive scores (their gradient steps helped the test prediction),
# *opponents* the most negative. `TracInCPFast` restricts $\theta$ to the last linear layer, whose
# gradient is the outer product of its input and the gradient of the loss at the output, so it
# needs no per-example backward through the GCN. Captum calls `model(*batch[:-1])` and reads the
# labels from `batch[-1]`, so the training graphs are served as `(x, edge_index, batch, y)` tuples.

# %% [markdown]
# The checkpoints are the state dicts that training stored in the record, so Captum's `checkpoints`
# are simply their positions in `record["checkpoints"]`, and `checkpoints_load_func` loads one into
# the model and returns its learning rate: nothing is written to disk.


# %%
def as_tuple(graphs):
    b = Batch.from_data_list(graphs).to(device)
    return b.x, b.edge_index, b.batch, b.y.float().view(-1, 1)


def load_checkpoint(model, position):
    checkpoint = record["checkpoints"][position]
    model.load_state_dict(checkpoint["state_dict"])
    model.eval()
    return checkpoint["lr"]


def alerts(g):
    """The NO2 / NH2 groups of a graph, from its ground truth.

    They are the N atoms with marked N-O / N-H bonds.
    """
    kinds = g.x.argmax(-1)
    s, d = g.edge_index[:, g.edge_gt.bool()]
    found = []
    for other, group in (("O", "NO₂"), ("H", "NH₂")):
        n = len(
            set(
                s[
                    (kinds[s] == ATOMS.index("N")) & (kinds[d] == ATOMS.index(other))
                ].tolist()
            )
        )
        found += [f"{n} {group}"] if n else []
    return ", ".join(found) if found else "no NO₂/NH₂"


def describe(g):
    """Formula, NO2/NH2 groups, and the nitroso group.

    Nitroso groups are structural alerts the ground truth leaves out; the first group of
    NITROSO that matches is the most specific.
    """
    mol = to_rdkit(g)
    nitroso = [
        group.split(" (")[0]
        for group, smarts in NITROSO.items()
        if mol.HasSubstructMatch(Chem.MolFromSmarts(smarts))
    ][:1]
    return f"{CalcMolFormula(mol)}, {alerts(g)}" + "".join(f", {n}" for n in nitroso)


def label_of(g):
    return "mutagen" if int(g.y) == MUTAGEN else "nonmutagen"


final_state = {k: v.clone() for k, v in model.state_dict().items()}
train_tuples = torch.utils.data.DataLoader(
    list(train_set), batch_size=256, collate_fn=as_tuple
)
positions = list(range(len(record["checkpoints"])))
tracin = TracInCPFast(
    model,
    final_fc_layer=model.head,
    train_dataset=train_tuples,
    checkpoints=positions,
    checkpoints_load_func=load_checkpoint,
    loss_fn=torch.nn.BCEWithLogitsLoss(reduction="sum"),
    batch_size=256,
)
test_input = as_tuple([graph.cpu()])
proponents = tracin.influence(test_input, k=3, proponents=True)
opponents = tracin.influence(test_input, k=3, proponents=False)
model.load_state_dict(final_state)
model.eval()
print(
    "checkpoints: epochs",
    [c["epoch"] for c in record["checkpoints"]],
    "learning rates",
    [f"{c['lr']:.2e}" for c in record["checkpoints"]],
)
for kind, result in (("proponents", proponents), ("opponents", opponents)):
    for idx, score in zip(
        result.indices[0].tolist(), result.influence_scores[0].tolist()
    ):
        g = train_set[idx]
        print(
            f"{kind[:-1]:10s} train #{idx:4d}  score {score * 1e3:8.4f}e-3  "
            f"{label_of(g):10s} {describe(g)}"
        )

# %% [markdown]
# The same scores by hand, as in *A Primer on Explainability for GNNs*, the notebook this page reworks
# (see {ref}`Sources <intro-sources>`): at
# each checkpoint, the gradient of each training loss with respect to the last layer's weights,
# dotted with the test example's, times the learning rate. The top three must agree with Captum's.


# %%
def head_gradients(graphs_tuple):
    """Per-example gradient of the loss w.r.t. head.weight: (dL/dz) * (input of head)."""
    x, edge_index, batch, y = graphs_tuple
    inputs = []
    # the hook returns None: it records the head's input and leaves the output alone
    handle = model.head.register_forward_hook(
        lambda m, i, o: inputs.append(i[0].detach())
    )
    with torch.no_grad():
        z = model(x, edge_index, batch)
    handle.remove()
    # dL/dz for BCE-with-logits, outer product with h
    return (torch.sigmoid(z) - y) * inputs[0]


by_hand = torch.zeros(len(train_set))
for position in positions:
    lr = load_checkpoint(model, position)
    test_grad = head_gradients(test_input)[0]
    train_grads = torch.cat([head_gradients(t) for t in train_tuples])
    by_hand += lr * (train_grads @ test_grad).cpu()
model.load_state_dict(final_state)
model.eval()
print(
    "top-3 proponents agree:",
    by_hand.topk(3).indices.tolist() == proponents.indices[0].tolist(),
)
print(
    "top-3 opponents agree: ",
    (-by_hand).topk(3).indices.tolist() == opponents.indices[0].tolist(),
)


def summary(result):
    """'2 nonmutagens and 1 mutagen' and '#12 (C6H5NO2, 1 NO2), ...' for the text."""
    graphs = [train_set[i] for i in result.indices[0].tolist()]
    counts = {
        k: sum(label_of(g) == k for g in graphs) for k in ("mutagen", "nonmutagen")
    }
    kinds = [
        f"{n} {k}{'s' if n > 1 else ''}"
        for k, n in sorted(counts.items(), key=lambda kv: -kv[1])
        if n
    ]
    labels = (
        f"all {len(graphs)} {kinds[0].split(' ', 1)[1]}"
        if len(kinds) == 1
        else " and ".join(kinds)
    )
    return labels, "; ".join(
        f"#{i}: {describe(g)}" for i, g in zip(result.indices[0].tolist(), graphs)
    )


against_alert = sum(
    label_of(train_set[i]) == "nonmutagen" and "no NO" not in alerts(train_set[i])
    for i in opponents.indices[0].tolist()
)
ratio = abs(opponents.influence_scores[0][0].item()) / abs(
    proponents.influence_scores[0][0].item()
)

# %% tags=["remove-cell"]
for kind, result in (("proponents", proponents), ("opponents", opponents)):
    labels, desc = summary(result)
    glue(f"{kind}_labels", labels, display=False)
    glue(f"{kind}_described", desc, display=False)
glue(
    "opponents_nonmutagen_with_alert",
    [
        "none of the three opponents is",
        "one of the three opponents is",
        "two of the three opponents are",
        "all three opponents are",
    ][against_alert],
    display=False,
)
glue("opponent_proponent_ratio", f"{ratio:.1f}", display=False)

# %% tags=["hide-input"]
# three short title lines per panel, so that neighbouring titles keep apart; images drawn
# near the size they are shown at, so that the atom labels stay legible (about 8 pt)
fig, axes = plt.subplots(3, 3, figsize=(BOOK_WIDTH, 7.8))
for ax in axes[0]:
    ax.set_axis_off()
draw_molecule(
    to_rdkit(cpu_graph),
    marked_bonds=marked,
    ax=axes[0, 1],
    size=(270, 220),
    font_size=15,
    title=f"test molecule ({label_of(cpu_graph)})",
)
for row, (kind, result) in enumerate(
    (("proponent", proponents), ("opponent", opponents)), start=1
):
    for col, (idx, score) in enumerate(
        zip(result.indices[0].tolist(), result.influence_scores[0].tolist())
    ):
        g = train_set[idx]
        m = to_rdkit(g)
        gt = np.flatnonzero(
            bond_values(m, g.edge_index, g.edge_gt.float(), combine="max")
        )
        draw_molecule(
            m,
            marked_bonds=gt,
            ax=axes[row, col],
            size=(270, 220),
            font_size=15,
            title=f"{kind} #{idx}\n{label_of(g)}\nscore {score * 1e3:.2f}e-3",
        )
fig.tight_layout()
plt.show()

# %% [markdown]
# The hand computation agrees with Captum. NO$_2$/NH$_2$ bonds are drawn in yellow. The three
# proponents are {glue:text}`proponents_labels` ({glue:text}`proponents_described`); the three
# opponents are {glue:text}`opponents_labels` ({glue:text}`opponents_described`). A nitroso group,
# on a carbon or on a nitrogen as in the N-nitrosamines, is itself a structural alert for
# mutagenicity {cite}`kazius2005mutagenicity` that the ground truth of this data set does not mark.
#
# A nonmutagen that carries a nitro or amino group of its own is the natural opponent of this
# prediction: training on it pushed the model away from "nitro means mutagen", the chemists' alert
# that the ground truth encodes. Here {glue:text}`opponents_nonmutagen_with_alert` such a molecule;
# any others oppose through other features the model learnt. The strongest opponent's score is
# {glue:text}`opponent_proponent_ratio` times the strongest proponent's in size. TracInCPFast sees a
# training molecule only through the input of the last layer and its loss gradient, summed over
# three checkpoints whose learning rates fall with the cosine schedule, so the scores say which
# training molecules *the last layer* was pulled towards or away from.
# TracIn explains *through the data*: it says nothing about which bonds of the test molecule matter,
# and the bond-level methods say nothing about the training set.
#
# ## The comparison over all test mutagens
#
# Now every test mutagen with an NO$_2$ or NH$_2$ group, the PGExplainer evaluation set
# {cite}`luo2020pgexplainer`. Three numbers per method:
#
# - **ground-truth AUROC**: how well the edge scores rank the NO$_2$/NH$_2$ edges above the others,
#   per molecule (`sklearn.metrics.roc_auc_score`), averaged; 0.5 is chance;
# - **fidelity+** and **fidelity-** (PyG's `torch_geometric.explain.metric.fidelity`,
#   {cite}`amara2022graphframex`), for the hard explanation made of each method's top-$k$ edges,
#   $k$ = the number of ground-truth edges of the molecule: fidelity+ is the fraction of molecules
#   whose prediction *changes* when those edges are removed (higher = the edges were necessary),
#   fidelity- the fraction whose prediction changes when only those edges are kept (lower = they
#   suffice);
# - **milliseconds per explanation**, from the benchmark below.
#
# LRP, saliency, Gradient $\times$ Input and Integrated Gradients are cheap enough to score here, on the
# molecules of this page. LRP-epsilon's edges are ranked by their signed
# `edge_relevance`, as in the figures; one more row ranks them by the mask $|R| / \max |R|$, which
# puts strong evidence *against* the class as high as evidence for it; the last row is
# `LRPExplainer()` with its defaults (the z+ rule and that mask). Fidelity reads the explanation's
# `edge_mask`, which the cell below replaces by each method's hard top-$k$ mask (1 on the $k$ kept
# edges, 0 elsewhere).


# %%
def hard_top_k(scores, k):
    mask = torch.zeros_like(scores, dtype=torch.float)
    mask[scores.detach().argsort(descending=True, stable=True)[:k]] = 1.0
    return mask


edge_only = Explainer(
    model,
    algorithm=LRPExplainer(rule="epsilon"),
    explanation_type="model",
    node_mask_type=None,
    edge_mask_type="object",
    model_config=model_config,
)
default_edges = Explainer(
    model,
    algorithm=LRPExplainer(),
    explanation_type="model",  # z+, |R| / max
    node_mask_type=None,
    edge_mask_type="object",
    model_config=model_config,
)


def evaluate(masks):
    """Mean AUROC and fidelity+/- of the top-k edges over `evaluation`.

    k is the molecule's number of ground-truth edges.
    """
    aurocs, plus, minus = [], [], []
    for g, m in zip(evaluation, masks):
        g = g.clone().to(device)
        aurocs.append(roc_auc_score(g.edge_gt.cpu().numpy(), m.detach().cpu().numpy()))
        # prediction, target and inputs that the metric needs
        e = edge_only(g.x, g.edge_index)
        # masks made on the CPU too
        e.edge_mask = hard_top_k(m.to(device), int(g.edge_gt.sum()))
        fp, fm = fidelity(edge_only, e)
        plus.append(fp)
        minus.append(fm)
    return float(np.mean(aurocs)), float(np.mean(plus)), float(np.mean(minus))


all_graphs = Batch.from_data_list(evaluation).to(device)
lrp_relevance = edge_only(
    all_graphs.x, all_graphs.edge_index, batch=all_graphs.batch
).edge_relevance
lrp_relevance = lrp_relevance.split([g.edge_index.shape[1] for g in evaluation])
default_masks = [
    default_edges(g.x.to(device), g.edge_index.to(device)).edge_mask for g in evaluation
]
targets = [int(z > 0) for z in logits]
live = {
    "LRP (LRPExplainer)": evaluate(lrp_relevance),
    "LRP, |R| (the default edge_mask)": evaluate([r.abs() for r in lrp_relevance]),
    "LRPExplainer() default: z+, |R| mask": evaluate(default_masks),
    "saliency (Captum)": evaluate(
        [saliency(g.clone().to(device), t) for g, t in zip(evaluation, targets)]
    ),
    "Integrated Gradients (Captum, 50 steps)": evaluate(
        [
            integrated_gradients(g.clone().to(device), t)
            for g, t in zip(evaluation, targets)
        ]
    ),
    "Grad x Input (Captum)": evaluate(
        [grad_x_input(g.clone().to(device), t)[1] for g, t in zip(evaluation, targets)]
    ),
    "ground truth itself": evaluate([g.edge_gt.float() for g in evaluation]),
}
sizes = [int(g.edge_gt.sum()) for g in evaluation]
print(
    f"{len(evaluation)} molecules, {sum(z < 0 for z in logits)} of them predicted mutagen"
)
print(
    f"ground-truth edges per molecule: {min(sizes)} to {max(sizes)}, {sizes.count(4)} "
    "molecules with 4"
)

# %% tags=["remove-cell"]
glue("n_predicted_nonmutagen", f"{sum(z > 0 for z in logits)}", display=False)
glue("k_four", f"{sizes.count(4)}", display=False)
glue("k_max", f"{max(sizes)}", display=False)

# %% [markdown]
# ### Cost, and GNNExplainer over all molecules
#
# GNNExplainer needs 200 optimisation steps per molecule, too slow to rerun on every build of the
# book, and timings depend on the machine. Both come from `benchmarks/bench_explainers.py`: the
# script loads the stored model (`load_or_train("mutagenicity-gcn", ...)`, the same
# weights), explains the same molecules with LRP, saliency, Integrated Gradients and GNNExplainer
# through the same APIs, one molecule at a time and interleaved, so that the load of the machine
# falls on all of them alike, runs GNNExplainer as its users do (float32, 200 epochs), and writes
# `benchmarks/results/explainers.json` with a description of the machine. The next cell reads that
# file and prints the one comparison table: quality computed above for LRP, saliency, Gradient
# $\times$ Input and Integrated Gradients, quality of GNNExplainer and all timings from the file.

# %% tags=["hide-input"]
bench = load_results("explainers")
measured, machine = bench["results"], bench["machine"]
timed = measured["methods"]
gnn_name = next(k for k in timed if k.startswith("GNNExplainer"))
# (name in the table, quality (AUROC, fid+, fid-), key of the timing in the file)
rows = [
    ("LRP-epsilon (LRPExplainer)", live["LRP (LRPExplainer)"], "LRP (LRPExplainer)"),
    (
        "LRP-epsilon, the whole set in one batch",
        live["LRP (LRPExplainer)"],
        "LRP (LRPExplainer), whole set in one batch",
    ),
    ("saliency (Captum)", live["saliency (Captum)"], "saliency (Captum)"),
    (
        "Integrated Gradients (50 steps)",
        live["Integrated Gradients (Captum, 50 steps)"],
        "Integrated Gradients (Captum, 50 steps)",
    ),
    ("Grad x Input (Captum)", live["Grad x Input (Captum)"], None),
    ("LRP-epsilon, |R| mask", live["LRP, |R| (the default edge_mask)"], None),
    (
        f"GNNExplainer ({measured['gnnexplainer_epochs']} epochs)*",
        tuple(timed[gnn_name][k] for k in ("auroc", "fidelity_plus", "fidelity_minus")),
        gnn_name,
    ),
    ("ground truth itself", live["ground truth itself"], None),
    (
        "LRPExplainer() default: z+, |R| mask",
        live["LRPExplainer() default: z+, |R| mask"],
        None,
    ),
]
table = [
    {
        "method": name,
        "auroc": a,
        "fid_plus": fp,
        "fid_minus": fm,
        "ms": None if key is None else timed[key]["ms_per_explanation"],
        "speedup": None if key is None else timed[key]["speedup_vs_gnnexplainer"],
    }
    for name, (a, fp, fm), key in rows
]
display(
    results_table(
        table,
        [
            ("method", "method"),
            ("AUROC vs NO2/NH2", "auroc", "{:.3f}"),
            ("fidelity+", "fid_plus", "{:.3f}"),
            ("fidelity-", "fid_minus", "{:.3f}"),
            ("ms per explanation", "ms", "{:.2f}"),
            ("vs GNNExplainer", "speedup", "{:,.0f}x"),
        ],
    )
)
display(
    Markdown(
        "\\* GNNExplainer's quality is read from the benchmark file; every other "
        "quality is computed above. The benchmark does not time Gradient × Input, one "
        "gradient like saliency, nor "
        "the absolute value of LRP's relevance. " + machine_note(bench)
    )
)
# the benchmark's AUROCs of LRP, saliency and IG are the ones computed above
assert all(abs(timed[key]["auroc"] - quality[0]) < 5e-4 for _, quality, key in rows[:4])

ranking = sorted(
    [(rows[i][0].strip(" *"), rows[i][1][0]) for i in (0, 2, 3, 4, 6, 8)],
    key=lambda r: -r[1],
)
glue(
    "default_auroc",
    f"{live['LRPExplainer() default: z+, |R| mask'][0]:.3f}",
    display=False,
)
glue(
    "default_vs_gxi",
    (
        "above"
        if live["LRPExplainer() default: z+, |R| mask"][0]
        > live["Grad x Input (Captum)"][0]
        else "below"
    ),
    display=False,
)
glue("auroc_ranking", ", ".join(f"{n} {a:.3f}" for n, a in ranking), display=False)
glue("auroc_best", ranking[0][0], display=False)
for key, (name, quality, _) in zip(
    ("lrp", "lrp_batch", "saliency", "ig", "gxi", "lrp_abs", "gnnexp", "gt"), rows
):
    glue(f"{key}_fid_plus", f"{quality[1]:.3f}", display=False)
    glue(f"{key}_fid_minus", f"{quality[2]:.3f}", display=False)
glue("lrp_fid_plus_pct", f"{100 * live['LRP (LRPExplainer)'][1]:.0f}%", display=False)
glue("gt_fid_plus_pct", f"{100 * live['ground truth itself'][1]:.0f}%", display=False)
glue(
    "lrp_vs_gt_fid",
    (
        "more"
        if live["LRP (LRPExplainer)"][1] > live["ground truth itself"][1]
        else "less"
    ),
    display=False,
)
ms = {key: timed[key]["ms_per_explanation"] for _, _, key in rows if key}
glue("ms_lrp", f"{ms['LRP (LRPExplainer)']:.1f}", display=False)
glue("ms_gnnexp", f"{ms[gnn_name]:,.0f}", display=False)
glue(
    "speedup_lrp",
    f"{timed['LRP (LRPExplainer)']['speedup_vs_gnnexplainer']:,.0f}",
    display=False,
)
batched = timed['LRP (LRPExplainer), whole set in one batch']
glue("speedup_lrp_batch", f"{batched['speedup_vs_gnnexplainer']:,.0f}", display=False)
lrp_auroc, gxi_auroc = live["LRP (LRPExplainer)"][0], live["Grad x Input (Captum)"][0]
glue("lrp_auroc", f"{lrp_auroc:.3f}", display=False)
glue("gxi_auroc", f"{gxi_auroc:.3f}", display=False)
glue(
    "lrp_abs_auroc", f"{live['LRP, |R| (the default edge_mask)'][0]:.3f}", display=False
)
glue(
    "gxi_vs_lrp",
    (
        "the same AUROC"
        if f"{lrp_auroc:.3f}" == f"{gxi_auroc:.3f}"
        else (
            "AUROCs that differ only in the last digit shown (the stabiliser reorders "
            "a few nearly tied edges)"
            if abs(gxi_auroc - lrp_auroc) < 0.002
            else f"AUROCs {abs(gxi_auroc - lrp_auroc):.3f} apart"
        )
    ),
    display=False,
)
abs_lower = live["LRP, |R| (the default edge_mask)"][0] < lrp_auroc
glue("abs_vs_signed", "lower" if abs_lower else "higher", display=False)
relevance_all = torch.cat(lrp_relevance).cpu()
marked_all = torch.cat([g.edge_gt for g in evaluation]).bool()
share_negative = float(marked_all[relevance_all < 0].float().mean())
share_positive = float(marked_all[relevance_all > 0].float().mean())
glue(
    "abs_reason",
    f"{100 * share_negative:.0f}% of the edges with negative relevance are NO₂/NH₂ "
    f"bonds, against {100 * share_positive:.0f}% of those with positive relevance, so "
    "the absolute value "
    + (
        "ranks more unmarked edges up"
        if share_negative < share_positive
        else "ranks more marked edges up"
    ),
    display=False,
)
glue(
    "bench_machine",
    f"{machine['cpu']} ({machine['cores']} cores, {machine['torch_threads']} torch "
    f"thread; load average {machine['load_average_1min']} when the file was written)",
    display=False,
)

# %% [markdown]
# ### What the numbers say, and what they do not
#
# **Agreement with the chemists.** Ranked by mean ground-truth AUROC: {glue:text}`auroc_ranking`.
# `LRPExplainer()` with its defaults (z+, the mask $|R| / \max |R|$) scores
# {glue:text}`default_auroc`, {glue:text}`default_vs_gxi` Gradient $\times$ Input.
# Gradient $\times$ Input and LRP-epsilon, the same up to $\epsilon$, get {glue:text}`gxi_vs_lrp`
# ({glue:text}`gxi_auroc` and {glue:text}`lrp_auroc`). Ranked by the mask $|R|$,
# LRP-epsilon's AUROC is {glue:text}`lrp_abs_auroc`, {glue:text}`abs_vs_signed` than by the signed
# relevance: {glue:text}`abs_reason`. This is one
# model on one data set; [Benchmarking explanations](09_benchmarking_explanations.ipynb) ranks the
# same kinds of methods over many tasks, seeds and models, and where its order differs from this
# one, it is the broader measurement.
# None comes close to 1, and that is not (only) the explainers' fault: the model was never told
# about nitro groups. Its test accuracy of {glue:text}`test_accuracy` leaves room for other cues,
# and {glue:text}`n_predicted_nonmutagen` of the {glue:text}`n_evaluation` test mutagens are
# predicted "nonmutagen" (their explanations then argue for the other class). The ground truth
# only knows the bonds of NO$_2$ and NH$_2$ groups; a bond the model uses elsewhere in the molecule
# counts against an explainer that finds it.
#
# **What the model needs.** Fidelity asks the model, not the chemists. Removing LRP's top-$k$ edges
# changes {glue:text}`lrp_fid_plus_pct` of the predictions (fidelity+ {glue:text}`lrp_fid_plus`),
# removing the ground-truth bonds {glue:text}`gt_fid_plus_pct` ({glue:text}`gt_fid_plus`): the
# model relies {glue:text}`lrp_vs_gt_fid` on the edges LRP points at than on the NO$_2$/NH$_2$
# bonds. Keeping only $k$ edges (fidelity-) changes many predictions for every method: $k$ is small
# (4 directed edges, one NO$_2$ or NH$_2$ group, for {glue:text}`k_four` of the molecules, at most
# {glue:text}`k_max`), and a molecule reduced to a handful of bonds is far from anything the model
# was trained on. Saliency's top edges are the ones the output is most *sensitive* to, which need
# not be the ones it *uses* (fidelity+ {glue:text}`saliency_fid_plus`). Integrated Gradients starts
# from the empty graph, where a GCN with self-loops still sees every atom, and spreads its
# attribution over that whole path.
#
# **Cost.** One LRP explanation through PyG's `Explainer` takes {glue:text}`ms_lrp` ms on this model
# against {glue:text}`ms_gnnexp` ms for GNNExplainer's 200 optimisation steps: {glue:text}`speedup_lrp`
# times faster. Batched, LRP explains all molecules in one forward and one backward,
# {glue:text}`speedup_lrp_batch` times faster than GNNExplainer. These are wall-clock times measured on
# {glue:text}`bench_machine`, a machine shared with other work; the ratios, measured interleaved in one
# process, are what carries over to another machine. What LRP costs against a gradient (saliency, and
# Integrated Gradients' fifty of them), one graph or molecule at a time and in batches, is on
# [Performance](performance.ipynb).
#
# An explanation shows what *the model* uses. Where that differs from the chemists' alerts, the
# explanation is not wrong; it is telling us something about the model.

# %% [markdown]
# ## Summary
#
# - On a ReLU network LRP-0 is Gradient $\times$ Input, and LRP-epsilon with a small $\epsilon$ is
#   within a fraction of a percent of it; the rules part ways with gradients where z+ or gamma
#   weigh the positive evidence, or where the model is not piecewise linear.
# - GNNExplainer optimises a mask per explanation; the gradient methods and LRP cost one or a few
#   passes, and a batch of molecules is explained in one.
# - TracIn explains through the training data, not through the bonds of the test molecule.
# - Ground-truth AUROC measures agreement with chemists' alerts, fidelity what the model needs; they
#   can disagree, and the methods' costs differ by orders of magnitude.
#
# ## Exercises
#
# 1. Explain the same molecules with `LRPExplainer(rule=Gamma(0.25))` (from `lrp_lib.core.rules`). Does
#    the ground-truth AUROC change? Which bonds change sign?
# 2. Compute fidelity with $k$ = 10% of the edges instead of the ground-truth size. Which method's
#    ranking changes most?
# 3. Our saliency uses the edge-weight mask. Compute the node saliency of the *Primer* notebook,
#    $\sum_f |\partial f / \partial x_{if}|$ and compare it with LRP's node relevance
#    (`node_mask_type="object"`) on the picked molecule.
# 4. TracIn with the last layer only ignores how the GCN layers moved. Use `TracInCP` with
#    `layers=["gc4"]` and compare the proponents.
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
