# %% [markdown]
# # Explaining a graph classifier
#
# A graph classifier says "mutagenic". Why? Which atoms and bonds made it say so? For molecules we
# happen to know part of the chemists' answer: aromatic nitro groups (NO$_2$) and amines (NH$_2$)
# are classic structural alerts for mutagenicity {cite}`kazius2005mutagenicity`. That makes the
# Mutagenicity data set a test bench for explainers: we can ask which bonds an explanation blames
# and compare with the NO$_2$/NH$_2$ bonds {cite}`luo2020pgexplainer`.
#
# This chapter trains a plain graph convolutional network {cite}`kipf2017gcn` with PyTorch
# Geometric {cite}`fey2019pyg` and explains its predictions with LRP: the autograd trick of
# [Hijacking autograd for LRP](01_hijacking_autograd.ipynb) packaged as a PyG explainer algorithm,
# `lrp_lib.explain.explainer.LRPExplainer`, that works on the model *as it is*. How LRP compares
# with GNNExplainer, saliency, Gradient $\times$ Input, Integrated Gradients and TracIn on the same
# model is the subject of [Comparing explainers](comparing_explainers.ipynb).
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes the [quick start](quickstart.ipynb) and some familiarity with PyTorch
# Geometric's `Data`, `DataLoader` and message passing. After reading it you should be able to
# - load Mutagenicity with its NO2/NH2 ground truth aligned to PyG's edges;
# - explain a stock PyG model with `Explainer(model, algorithm=LRPExplainer(), ...)`, read the
#   signed node and edge relevance (`node_relevance`, `edge_relevance`) and what the biases kept,
#   and know what the masks that PyG's own tools read (`node_mask`, `edge_mask`) hold instead;
# - explain any model through composites, with attention and layers of your own;
# - explain a classifier that ends in `log_softmax`.
#
# A link predictor is explained on its own page, [Explaining a link predictor](link_prediction.ipynb).
# ```

# %% tags=["hide-input"]
import warnings

# import-time notes of the libraries (tqdm, deprecations); nothing of ours
warnings.filterwarnings("ignore")

import inspect
import io
import random


import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from myst_nb import glue
from torch_geometric.data import Batch
from torch_geometric.explain import Explainer
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from lrp_lib.book.datasets import mutagenicity
from lrp_lib.book.datasets.mutagenicity import ATOMS, MUTAGEN, book_split, explained_mutagen, to_rdkit
from lrp_lib import LRPExplainer
from lrp_lib.book.plotting import BOOK_WIDTH, bond_values, book_style, draw_molecule
from lrp_lib.book.pretrained import load_or_train

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
# ## The data: Mutagenicity with its ground truth
#
# Mutagenicity {cite}`kazius2005mutagenicity` holds 4,337 molecules labelled mutagen (label 0) or
# nonmutagen (label 1). Atoms are nodes with a one-hot element type (14 elements), bonds are pairs
# of directed edges. `lrp_lib.book.datasets.mutagenicity` loads it through PyG's `TUDataset` and adds
# the ground truth of the PGExplainer paper {cite}`luo2020pgexplainer` as `edge_gt`: 1 on the edges
# of NO$_2$ and NH$_2$ groups. The ground truth is a file with one line per edge of the raw edge
# list; PyG drops self-loops and re-sorts the edges when it reads the data, so the loader runs the
# ground truth through the same two steps and checks that the result lines up edge for edge.

# %%
# a local copy under $LRP_DATA_ROOT if set, else downloaded once to ~/.cache/lrp_lib/data
dataset = mutagenicity()
labels = dataset._data.y.tolist()
print(dataset, "-", labels.count(MUTAGEN), "mutagens,", labels.count(1), "nonmutagens")
print("node features:", dataset.num_features, "one-hot atom types:", " ".join(ATOMS))

train_idx, test_idx = book_split(dataset)  # a stratified quarter for the test
train_set, test_set = dataset[train_idx], dataset[test_idx]
print(f"train {len(train_set)} graphs, test {len(test_set)} graphs (stratified)")

# %% [markdown]
# Every marked edge should join a nitrogen to an oxygen or a hydrogen; a misaligned ground truth
# would mark random bonds. Counting the element pairs on marked edges checks the alignment.

# %%
data = dataset._data
node_offset = dataset.slices["x"][
    torch.repeat_interleave(
        torch.arange(len(dataset)), dataset.slices["edge_index"].diff()
    )
]
atom = data.x.argmax(-1)
src, dst = data.edge_index + node_offset
marked = data.edge_gt.bool()
pairs = {}
for a, b in zip(atom[src[marked]].tolist(), atom[dst[marked]].tolist()):
    pairs[f"{ATOMS[a]}-{ATOMS[b]}"] = pairs.get(f"{ATOMS[a]}-{ATOMS[b]}", 0) + 1
print(int(marked.sum()), "marked directed edges:", dict(sorted(pairs.items())))

# %% [markdown]
# ## The model
#
# The classifier is four `GCNConv` layers with ReLU, a global mean pool, dropout and two linear
# layers, written as anyone would write it in PyG. The single output is a logit: positive means
# "nonmutagen" (label 1), negative "mutagen". The model takes an optional `edge_weight`, which the
# gradient methods of [Comparing explainers](comparing_explainers.ipynb) use as a differentiable edge mask. The class lives in `lrp_lib.book.models`, so
# that later pages and the benchmarks load the weights trained here into the very same
# architecture; the cell prints its code.

# %%
from lrp_lib.book.models import MutagenicityGCN as GCN

print(inspect.getsource(GCN))


# %% [markdown]
# Training is a plain PyTorch loop: Adam with a cosine learning-rate schedule and a checkpoint every
# 10 epochs (TracIn needs them, with the learning rate of each: [Comparing
# explainers](comparing_explainers.ipynb)). The chapter trains 64 hidden
# units for 30 epochs, where the original notebook *A Primer on Explainability for GNNs* used 256
# units and 100 epochs: a quarter of the width and under a third of the epochs keep training and
# the explainer comparison within minutes on a laptop CPU, and the smaller model is accurate
# enough to be worth explaining.
#
# The book stores the trained weights, the checkpoints and the training history in
# `lrp_lib/book/weights/mutagenicity-gcn.pt` and loads them, so that every reader's CPU shows the same
# numbers (training itself drifts in the last digits from one CPU to another). Setting
# `LRP_BOOK_RETRAIN=1` trains from scratch instead, with a progress bar.


# %% tags=["train"]
def accuracy(model, graphs):
    model.eval()
    correct = 0
    with torch.no_grad():
        # a generator of its own leaves the global RNG alone
        for b in DataLoader(graphs, batch_size=512, generator=torch.Generator()):
            b = b.to(device)
            correct += int(
                ((model(b.x, b.edge_index, b.batch).view(-1) > 0).long() == b.y).sum()
            )
    return correct / len(graphs)


def train_gcn(model, epochs=30, every=10):
    """Adam (lr 5e-3) with cosine annealing.

    A checkpoint (weights + learning rate) every `every` epochs.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loader = DataLoader(
        train_set,
        batch_size=128,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    checkpoints, history = [], []
    for epoch in tqdm(range(1, epochs + 1), desc="training"):
        model.train()
        total = 0.0
        for b in loader:
            b = b.to(device)
            optimizer.zero_grad()
            loss = F.binary_cross_entropy_with_logits(
                model(b.x, b.edge_index, b.batch).view(-1), b.y.float()
            )
            loss.backward()
            optimizer.step()
            total += float(loss) * b.num_graphs
        lr = optimizer.param_groups[0]["lr"]
        schedule.step()
        if epoch % every == 0:
            checkpoints.append(
                {
                    "epoch": epoch,
                    "lr": lr,
                    "state_dict": {
                        k: v.detach().clone() for k, v in model.state_dict().items()
                    },
                }
            )
            history.append(
                {
                    "epoch": epoch,
                    "train_loss": total / len(train_set),
                    "test_accuracy": accuracy(model, test_set),
                }
            )
    model.eval()
    return {
        "metrics": {
            "last_epoch_train_loss": total / len(train_set),
            "test_accuracy": accuracy(model, test_set),
        },
        "checkpoints": checkpoints,
        "history": history,
    }


seed_everything(0)
model = GCN(dataset.num_features, hidden=64).to(device)
record = load_or_train("mutagenicity-gcn", model, train_gcn)
for h in record["history"]:
    print(
        f"epoch {h['epoch']:2d}: train loss {h['train_loss']:.3f}, test accuracy "
        f"{h['test_accuracy']:.3f}"
    )
test_accuracy = accuracy(model, test_set)
print(f"test accuracy of the trained model: {test_accuracy:.3f}")

# %% tags=["remove-cell"]
glue("test_accuracy", f"{test_accuracy:.3f}", display=False)

# %% [markdown]
# ## One mutagen, explained
#
# We pick a test mutagen with a nitro group that the model classifies correctly, and explain it.
# The explained quantity is the **log-odds of the predicted class**. For a mutagen predicted as such that is $-z$, minus the logit, so positive
# scores are evidence *for* "mutagen".


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

# %% [markdown]
# ### LRP through PyG's `Explainer`
#
# `LRPExplainer` is a `torch_geometric.explain.ExplainerAlgorithm`, so it plugs into PyG's
# `Explainer` like GNNExplainer does. It runs the model's own `forward`, unchanged, inside a
# `torch.overrides.TorchFunctionMode` (`lrp_lib.explain.mode.forward`) that sees every torch function the model
# calls on tensors that depend on the input, and computes each one so that it keeps its value but its
# gradient becomes an LRP rule ([Rules as forward modifications](forward_rules.ipynb) derives each one): one
# ordinary backward then leaves every input's relevance as input times gradient. Nothing is patched: the
# mode lives on the calling thread only. A `GCNConv` runs, in PyG's order, a linear map
# $h_j = W x_j$, messages $\hat a_{ij} h_j$ and their sum $z_i = \sum_{j \in \mathcal N(i) \cup \{i\}}
# \hat a_{ij} h_j$, then adds its bias $b$, with $\hat a_{ij} = 1 / \sqrt{\hat d_i \hat d_j}$. The
# weight gets the epsilon rule, a message is a product with a constant so it keeps its relevance,
# and the sum and the bias split relevance in proportion to their terms. Composed, the relevance of
# input feature $f$ of node $j$ is
#
# $$ R_{jf} = \sum_{i,k} \frac{\hat a_{ij}\, x_{jf}\, w_{kf}}{z_{ik} + b_k}\, R_{ik} $$
#
# up to the stabiliser $\epsilon$: the whole layer's epsilon rule. The relevance of the messages of
# edge $j \to i$, summed over features and over the four layers, is the edge's relevance (a hook on
# each message-passing layer records it). The relevance starts from the explained output: $\pm z$,
# the log-odds of the predicted class.
#
# The explanation holds this signed relevance as `node_relevance` (one number per atom here,
# `node_mask_type="object"`) and `edge_relevance` (one per directed edge); it is what this chapter
# adds up, colours and ranks. Its `node_mask` and `edge_mask` hold something else, $|R| / \max |R|$,
# the form PyG's own tools expect (a section below shows the difference).

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
# The molecule as chemists draw it, atoms and bonds coloured by their relevance for "mutagen" (a
# bond's relevance is the sum over its two directed edges; red for, blue against), beside the
# ground truth's NO$_2$/NH$_2$ bonds in yellow.

# %% tags=["hide-input"]
cpu_graph = graph.cpu()
picked_mol = to_rdkit(cpu_graph)
fig, (left, right) = plt.subplots(1, 2, figsize=(BOOK_WIDTH, 3.2))
draw_molecule(
    picked_mol,
    marked_bonds=np.flatnonzero(
        bond_values(picked_mol, cpu_graph.edge_index, cpu_graph.edge_gt.float(), combine="max")
    ),
    ax=left,
    title="ground truth: NO$_2$/NH$_2$ bonds (yellow)",
)
draw_molecule(
    picked_mol,
    explanation.node_relevance.sum(-1).detach().cpu(),
    bond_values(picked_mol, cpu_graph.edge_index, explanation.edge_relevance.detach().cpu()),
    ax=right,
    label="relevance of the log-odds\n(LRP; atoms and bonds)",
    title="LRP",
)
fig.tight_layout()
plt.show()

# %% [markdown]
# The atoms' relevance does not add up to the explained log-odds. The epsilon rule writes every
# layer's pre-activation as a sum of terms, $z = \sum_j x_j w_j + b$, and gives each term its share
# $x_j w_j / z$ (or $b / z$) of the relevance; the bias terms of the four GCN layers and the two
# linear layers are not inputs, so their share leaves the graph. The explainer adds up what they
# kept, `explanation.bias_relevance`, so the atoms and the biases together account for the whole
# log-odds (the last line is zero up to the stabiliser). For a bias-free model the atoms alone do.
#
# On this molecule the atoms carry {glue:text}`node_relevance` of relevance for "mutagen", the
# model's log-odds are {glue:text}`explained_logodds`, and the biases take the difference,
# {glue:text}`bias_relevance`: evidence {glue:text}`bias_direction` the explained class. Read it as
# the model's built-in offset, what the biases add at every layer whichever atoms are present.
# Where it is negative, the atoms' evidence has to outweigh it, and an atom map alone overstates
# how sure the model is: its colour scale says how much each atom argues, not what probability
# follows. Over all test mutagens with a ground truth:

# %%
test_mutagens = Batch.from_data_list(evaluation).to(device)
node_level = lrp_explainer(
    test_mutagens.x, test_mutagens.edge_index, batch=test_mutagens.batch
)
per_graph_nodes = (
    torch.zeros(len(evaluation), device=device)
    .index_add_(0, test_mutagens.batch, node_level.node_relevance.sum(-1))
    .cpu()
)
per_graph_logodds = node_level.prediction.view(-1).cpu() * torch.where(
    node_level.target.view(-1).cpu() == 1, 1, -1
)
biases = per_graph_logodds - per_graph_nodes
print(
    f"{len(evaluation)} molecules: bias relevance median {biases.median():.2f}, "
    f"negative for {int((biases < 0).sum())};\natoms' relevance larger in size than "
    f"the log-odds for {int((per_graph_nodes.abs() > per_graph_logodds.abs()).sum())}"
)

# %% tags=["remove-cell"]
glue("bias_median", f"{biases.median():.2f}", display=False)
glue("bias_negative", f"{int((biases < 0).sum())}", display=False)

# %% [markdown]
# The biases' share has median {glue:text}`bias_median` and is negative for
# {glue:text}`bias_negative` of the {glue:text}`n_evaluation` molecules: compare atom relevance
# between molecules and methods, but do not read it as a decomposition of the probability.
#
# A graph is never explained in isolation by accident: explaining a whole batch does one forward
# and one backward for all graphs, and gives the same relevance as one graph at a time, because
# graphs in a batch exchange no messages.

# %%
batch = Batch.from_data_list(evaluation[:8]).to(device)
together = lrp_explainer(batch.x, batch.edge_index, batch=batch.batch)
one_by_one = torch.cat(
    [
        lrp_explainer(g.x.to(device), g.edge_index.to(device)).edge_relevance
        for g in evaluation[:8]
    ]
)
print(
    "batched == one by one:",
    torch.allclose(together.edge_relevance, one_by_one, rtol=1e-4, atol=1e-6),
)

# %% [markdown]
# ### Any model: composites, attention, your own layers
#
# Because the rules attach to torch operations and not to a list of layers, the same explainer
# explains a model it has never seen. Which rule each weight gets is a *composite*
# (`lrp_lib.core.composites.Composite`, after Zennit's): a mapping from module types or name patterns to
# rules, plus the two choices that are not per weight. A weight the composite names no rule for gets the
# explainer's default rule (z+ in `LRPExplainer`), so naming one layer changes no other. The rest is
# fixed by the operation: proportional splits for sums, means and aggregations; the winner for max; the identity for
# elementwise functions (ReLU, tanh, a sigmoid head); half each for a product of two input-dependent
# factors (AttnLRP's uniform rule, {cite}`achtibat2024attnlrp`); and attention weights held constant
# (CP-LRP, {cite}`ali2022xai`), so that relevance flows through the values, not the scores. Layer
# norm passes relevance through its normalisation; batch norm in eval mode is the linear map it is.
#
# Below, an untrained model that the chapter's GCN never was: a `GATConv` with four heads, a
# `BatchNorm1d`, a residual sum and a `GraphConv`, in float64. The attention layer's weights get gamma,
# chosen by name; every other weight keeps the default, z+, as the composite's `rules_of` lists. Atoms plus
# biases again give the explained logit.

# %%
from torch_geometric.nn import (  # noqa: E402
    BatchNorm,
    GATConv,
    GraphConv,
    global_add_pool,
)

from lrp_lib.core.composites import Composite  # noqa: E402
from lrp_lib.core.rules import Gamma  # noqa: E402


class AnyModel(torch.nn.Module):
    def __init__(self, features, hidden=16):
        super().__init__()
        self.att = GATConv(features, hidden // 4, heads=4)
        self.norm = BatchNorm(hidden)
        self.conv = GraphConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, batch=None):
        h = self.norm(self.att(x, edge_index)).relu()
        h = h + self.conv(h, edge_index).tanh()  # a residual sum around a tanh
        return self.head(global_add_pool(h, batch))


torch.manual_seed(0)
other = AnyModel(graph.num_node_features).double().eval()
composite = Composite(rules={"att*": Gamma(0.25)})
any_explainer = Explainer(
    other,
    algorithm=LRPExplainer(composite=composite),
    explanation_type="model",
    node_mask_type="object",
    edge_mask_type="object",
    model_config=model_config,
)
rules = any_explainer.algorithm.composite.rules_of(other)  # the rule of every weight
for name, rule in rules.items():
    print(f"{name}: {rule}")
g64 = graph.to("cpu")
e = any_explainer(g64.x.double(), g64.edge_index)
value = float(e.prediction) * (1 if int(e.target) == 1 else -1)
print(
    f"explained log-odds {value:.4f} = atoms {float(e.node_relevance.sum()):.4f} + "
    f"biases {float(e.bias_relevance):.4f}"
)
print(
    f"edges with relevance: {int((e.edge_relevance != 0).sum())} of "
    f"{g64.edge_index.shape[1]}"
)

# %% [markdown]
# Many PyG examples end their classifier in `log_softmax` (or `softmax`, or a `sigmoid`) and train it
# with `nll_loss`. Such a model is declared as what it returns, `return_type="log_probs"`, and
# explained from the input of that last function, its logits, as the LRP literature does: the
# probabilities of the classes are coupled and saturate, the logits are what the layers below
# computed. The explanation says which output it explained. Below, the same layers with a two-class
# head ending in `log_softmax`; the atoms and the biases add up to the logit of the predicted class.


# %%
class LogSoftmaxModel(AnyModel):
    """AnyModel's layers with a two-class head, ending in log_softmax."""

    def __init__(self, features, hidden=16):
        super().__init__(features, hidden)
        self.head = torch.nn.Linear(hidden, 2)

    def forward(self, x, edge_index, batch=None):
        return super().forward(x, edge_index, batch).log_softmax(-1)


torch.manual_seed(0)
log_model = LogSoftmaxModel(graph.num_node_features).double().eval()
log_explainer = Explainer(
    log_model,
    algorithm=LRPExplainer(),
    explanation_type="model",
    node_mask_type="object",
    model_config=dict(
        mode="multiclass_classification", task_level="graph", return_type="log_probs"
    ),
)
e = log_explainer(g64.x.double(), g64.edge_index)
with torch.no_grad():
    # the logits, before log_softmax
    class_logits = AnyModel.forward(log_model, g64.x.double(), g64.edge_index).view(-1)
print(f"explained output: {e.explained_output}")
print(
    f"logit of class {int(e.target)} {float(class_logits[int(e.target)]):.4f} = atoms "
    f"{float(e.node_relevance.sum()):.4f} + biases {float(e.bias_relevance):.4f}"
)

# %% [markdown]
# What the mechanism cannot propagate through, it refuses, naming the operation and the module: a
# custom `torch.autograd.Function` (its backward would pass a gradient), or attention with learnt
# extra keys (`add_bias_kv`), which no rule covers. The page [Which PyG models can be
# explained](coverage.ipynb) runs the check over every convolution and model of PyG.

# %% [markdown]
# ### The masks PyG's tools read
#
# PyG's own tools expect an importance in $[0, 1]$, as GNNExplainer's masks are:
# `visualize_feature_importance` draws bars from zero up, `threshold` keeps the largest entries,
# `fidelity` multiplies the mask into the input. So an LRP explanation's `node_mask` and `edge_mask`
# hold $|R| / \max |R|$ by default (`LRPExplainer(mask="abs")`; `"positive"` keeps only the evidence
# for the class, `"relevance"` the signed values), while `node_relevance` and `edge_relevance` keep
# the sign. Below, the picked molecule explained per feature (`node_mask_type="attributes"`, one
# feature per element), passed to PyG's `visualize_feature_importance` as it is, beside the same
# explanation's signed `node_relevance` summed per element, in the same order.

# %%
lrp_features = Explainer(
    model,
    algorithm=LRPExplainer(rule="epsilon"),
    explanation_type="model",
    node_mask_type="attributes",
    edge_mask_type="object",
    model_config=model_config,
)
features = lrp_features(graph.x, graph.edge_index)
present = sorted(set(graph.x.argmax(-1).tolist()))
print(
    f"node_mask in [{float(features.node_mask.min()):.0f}, "
    f"{float(features.node_mask.max()):.0f}], node_relevance in "
    f"[{float(features.node_relevance.min()):.2f}, "
    f"{float(features.node_relevance.max()):.2f}]"
)
k = int(graph.edge_gt.sum())
kept = features.threshold(threshold_type="topk", value=k).edge_mask.nonzero().view(-1)
kept_relevance = features.edge_relevance[kept]
print(
    f"threshold(threshold_type='topk', value={k}) keeps edges {kept.tolist()},\n"
    f"signed relevance {[round(float(r), 3) for r in kept_relevance]}"
)
signed_per_element = features.node_relevance.sum(0).cpu()
against = [ATOMS[f] for f in present if signed_per_element[f] < 0]
kept_negative = int((kept_relevance < 0).sum())

# %% tags=["remove-cell"]
glue("mask_against", " and ".join(against) if against else "none", display=False)
glue("mask_against_verb", "argue" if len(against) != 1 else "argues", display=False)
glue("topk_k", f"{k}", display=False)
glue(
    "topk_sentence",
    (
        "all of them carry positive relevance here, so on this molecule the mask's top "
        "edges are also the strongest evidence for the class"
        if kept_negative == 0
        else f"{kept_negative} of them carry negative relevance: evidence against the "
        "class that the mask ranks as important"
    ),
    display=False,
)

# %% tags=["hide-input"]
png = io.BytesIO()
# PyG's own plot, 10 x 7 inches: large type to be read when shrunk
with plt.rc_context(
    {
        "font.size": 30,
        "axes.titlesize": 30,
        "axes.labelsize": 30,
        "xtick.labelsize": 24,
        "ytick.labelsize": 30,
    }
):
    features.visualize_feature_importance(
        path=png, feat_labels=ATOMS, top_k=len(present)
    )
png.seek(0)
# PyG's order: largest first
order = sorted(present, key=lambda f: -float(features.node_mask[:, f].sum()))
fig, (left, right) = plt.subplots(
    1, 2, figsize=(BOOK_WIDTH, 3.0), gridspec_kw=dict(width_ratios=[1.4, 1])
)
left.imshow(plt.imread(png))
left.set_axis_off()
left.set_title(
    "node_mask (|R| / max |R|) summed over the atoms,\nin PyG's visualize_feature_importance", fontsize=9
)
values = [float(signed_per_element[f]) for f in order]
bars = right.barh(
    [ATOMS[f] for f in order],
    values,
    color=["tab:red" if v > 0 else "tab:blue" for v in values],
)
right.bar_label(bars, labels=[f"{v:+.2f}" for v in values], fontsize=8, padding=2)
right.axvline(0, color="black", linewidth=0.8)
right.invert_yaxis()
right.set_xlim(min(values + [0]) * 1.7, max(values + [0]) * 1.45)
right.set_xlabel("relevance for 'mutagen'")
right.set_title("node_relevance (signed),\nsummed per element", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# PyG's bars say how much each element's atoms matter, all of it counted as importance; the signed
# bars say which way: here {glue:text}`mask_against` {glue:text}`mask_against_verb` *against*
# "mutagen", which PyG's plot draws as importance pointing the same way as the evidence for it.
# `threshold` reads the mask too:
# the top {glue:text}`topk_k` edges it keeps are the edges of largest $|R|$, and
# {glue:text}`topk_sentence`. Hand `node_mask` and `edge_mask` to PyG's plots, thresholds and
# metrics; read evidence for and against, and add it up, from `node_relevance` and
# `edge_relevance`.

# %% [markdown]
# ## Summary
#
# - `LRPExplainer` brings LRP to unmodified PyG models through PyG's own `Explainer`: one ordinary
#   backward gives node and edge relevance, a batch is explained in one pass, a composite chooses the
#   rule of each weight, `bias_relevance` says what the biases kept, and what cannot be propagated
#   raises an error that names it.
# - Edge relevance is what each edge's messages carry, summed over layers, and signed;
#   `node_mask` and `edge_mask` hold $|R| / \max |R|$, which PyG's plots, thresholds and metrics read.
# - A probability head is explained from its logits; a link predictor per candidate pair
#   ([Explaining a link predictor](link_prediction.ipynb)); other explainers on the same model:
#   [Comparing explainers](comparing_explainers.ipynb).
# - Further: LRP for graph networks was introduced by {cite}`baldassarre2019explainability`;
#   GNN-LRP {cite}`schnake2022higher` goes beyond single edges and scores whole walks through the
#   graph, which shows how messages combine over layers.
#
# ## Exercises
#
# 1. Explain the picked molecule with `LRPExplainer(rule="gamma")` and with `rule="zplus"`. Which
#    bonds change sign, and which keep their rank?
# 2. Replace `global_mean_pool` by `global_max_pool` in the model, retrain, and compare the LRP edge
#    maps. Where does the max pool send the relevance?
# 3. Add a custom `torch.autograd.Function` (say, one that doubles its input) to the model's
#    `forward` and run `LRPExplainer`. Read the error: why is refusing better than returning a
#    relevance map? Then write the doubling as `2 * x` and explain again.
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
