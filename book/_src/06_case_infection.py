# %% [markdown]
# # Case study: infection
#
# An explanation method is hard to judge on real data: we rarely know *why* the true answer is
# what it is, so we cannot tell a good explanation from a plausible-looking one. Baldassarre and
# Azizpour {cite}`baldassarre2019explainability` built a synthetic task where we do know. People
# (nodes) are sick, immune or neither; contacts (directed edges) are in person or virtual. A node
# is infected if it is sick, or if a sick person met it in person and it is not immune. For every
# infected node that was not sick to begin with, the *cause* is known exactly: its sick
# in-neighbours and the in-person contacts from them.
#
# This chapter trains the paper's graph network on that task, explains its predictions with four
# methods (LRP, the plain gradient, guided backprop and GNNExplainer) and scores each against the
# known causes, then looks at three small hand-made cases where the methods disagree.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes the graph-network layers of `lrp_lib.teach.graph` and the relevance mode
# (`with lrp_lib.teach.relevance():`) from [The autograd trick for graph
# layers](02_graph_layers.ipynb). After reading it you should be able to
# - generate the infection data set and read its ground-truth explanations;
# - build and train a graph network on `lrp_lib.teach.graph` layers with ordinary gradients, and explain
#   the same model with LRP by switching the mode;
# - explain many nodes of one graph in a single backward pass by batching copies of the graph;
# - compute sensitivity, guided backprop and GNNExplainer explanations of the same model, and
#   plug an `lrp_lib.teach.graph` model into PyG's `Explainer`;
# - score explanations against ground truth with AUROC, and say what each method gets wrong.
# ```

# %% tags=["hide-input"]
import copy
import random
import textwrap
import warnings

warnings.filterwarnings(
    "ignore", message="IProgress not found"
)  # tqdm's notebook notice, via PyG

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize
from myst_nb import glue
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.explain import Explainer, GNNExplainer
from torch_geometric.loader import DataLoader
from torch_geometric.nn import MessagePassing
from tqdm.auto import trange

import lrp_lib
from lrp_lib.teach import graph
from lrp_lib.book.datasets import infection
from lrp_lib.book.datasets.infection import explained_nodes, ground_truth, infection_graph
from lrp_lib.teach.guided_backprop import guided_backprop
from lrp_lib.book.plotting import BOOK_WIDTH, book_style, draw_graph
from lrp_lib.book.pretrained import load_or_train

book_style()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)

# %% [markdown]
# ## The data
#
# Each graph starts as a Barabási-Albert graph {cite}`barabasi1999emergence` with $m = 2$ (new
# nodes attach to two existing ones, preferring well-connected nodes), made directed by turning
# each undirected edge into two, after which 30% of the directed edges are removed at random.
# Node features are $x_v = [\mathrm{sick}, \mathrm{immune}, \text{noise}, \text{noise}]$ with
# $\pm 1$ flags and $U(-1, 1)$ noise; edge features are $e_k = [\mathrm{virtual}, \text{noise}]$.
# The label of node $v$ is
#
# $$ y_v = \mathrm{sick}_v \;\lor\; \Big(\lnot\,\mathrm{immune}_v \;\land\; \exists\, s \to v:\;
#    \mathrm{sick}_s \land \lnot\,\mathrm{virtual}_{s \to v}\Big). $$
#
# The ground truth of an infected, non-sick node $v$ is the set of edges $s \to v$ that satisfy
# the condition, and their senders $s$. Sick and immune nodes are placed at random; the original code
# of Baldassarre and Azizpour {cite}`baldassarre2019explainability` put them on the lowest node ids, which in a Barabási-Albert graph are the hubs, so a model
# could have learned "hubs are sick" instead of reading the features.
#
# `lrp_lib.book.datasets.infection` generates the graphs reproducibly (its `seed` argument fixes the
# random numbers). Each graph carries boolean masks
# `sick`, `immune`, `virtual` and `gt_edge_mask` next to the features, so the ground truth
# survives batching.

# %%
train_set = infection(1000, min_nodes=10, max_nodes=30, seed=0)
test_set = infection(200, min_nodes=10, max_nodes=30, seed=1)

def describe(graphs):
    b = Batch.from_data_list(graphs)
    return (
        f"{len(graphs)} graphs, {b.num_nodes} nodes, {b.num_edges} edges;\n       sick"
        f" {b.sick.float().mean():.3f}, immune {b.immune.float().mean():.3f}, infected"
        f" {b.y.mean():.3f}, virtual edges {b.virtual.float().mean():.3f},\n      "
        f" explained nodes {len(explained_nodes(b))}"
    )

print("train:", describe(train_set))
print("test: ", describe(test_set))
g = test_set[0]
print(
    textwrap.fill(
        "one test graph: " + ", ".join(f"{key} {list(value.shape)}" for key, value in g),
        width=90,
        subsequent_indent="    ",
    )
)

# %% [markdown]
# ## The model
#
# The paper's network has three parts, all bias-free except the read-out so that relevance is
# not absorbed along the way:
#
# 1. an **encoder** that maps edge features to 4 numbers ($e_k \mapsto \mathrm{ReLU}(W e_k)$) and
#    node features to 8 ($x_v \mapsto \mathrm{ReLU}(W x_v)$), each on its own;
# 2. **one message-passing block**: a message per edge from the edge and its sender,
#    $m_k = \mathrm{ReLU}(W_e e_k + W_s x_{s(k)})$, then a node update from the node and the
#    aggregated incoming messages, $h_v = \mathrm{ReLU}(W_x x_v + W_{in} \max_{k: r(k) = v} m_k)$;
# 3. a **node read-out**, the logit $\ell_v = w^\top h_v + b$.
#
# One hop is all the task needs, and the max aggregation fits "is there at least one sick
# in-person contact". The layers come from `lrp_lib.teach.graph`; the only addition is an optional
# `edge_weight` that scales the messages before they are aggregated, which GNNExplainer will need
# below.

# %%
class InfectionGN(nn.Module):
    """Encoder, one message-passing block (sum, mean or max aggregation),
    node read-out."""

    def __init__(self, aggregation="max"):
        super().__init__()
        self.encode = nn.Sequential(
            graph.EdgeLinear(4, edge_features=2, bias=False), graph.EdgeReLU(),
            graph.NodeLinear(8, node_features=4, bias=False), graph.NodeReLU())
        self.message = nn.Sequential(
            graph.EdgeLinear(8, edge_features=4, sender_features=8, bias=False),
            graph.EdgeReLU(),
        )
        self.update = nn.Sequential(
            graph.NodeLinear(
                8,
                node_features=8,
                incoming_features=8,
                aggregation=aggregation,
                bias=False,
            ),
            graph.NodeReLU(),
        )
        self.readout = graph.NodeLinear(1, node_features=8, bias=True)

    def forward(self, data, edge_weight=None):
        data = self.message(self.encode(data))
        if (
            edge_weight is not None
        ):  # scale each message (used by GNNExplainer's edge mask)
            data = data.clone()
            data.edge_attr = data.edge_attr * edge_weight.view(-1, 1)
        return self.readout(self.update(data)).x.view(-1)  # one logit per node


model = InfectionGN("max").to(device)
print(model)

# %% [markdown]
# Training uses ordinary gradients: outside `lrp_lib.teach.relevance()` the layers are plain torch
# operations. Ten epochs of Adam on 1,000 graphs take a few seconds on a CPU. As in every chapter,
# `load_or_train` loads the weights the book stores (so that the outputs below are the same on
# every machine) and trains from scratch only when `LRP_BOOK_RETRAIN=1` is set.

# %% tags=["train"]
def train_infection(model, epochs=10):
    """Adam on the training graphs with ordinary gradients; returns the first and
    last epoch's loss."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(
        train_set, batch_size=50, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    losses = []
    for epoch in trange(epochs, desc="training"):
        total = 0.0
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(model(batch), batch.y)
            loss.backward()
            optimizer.step()
            total += loss.item() * batch.num_graphs
        losses.append(total / len(train_set))
    model.eval()
    test = Batch.from_data_list(test_set).to(device)
    with torch.no_grad():
        logits = model(test).cpu()
    return {
        "metrics": {
            "first_epoch_loss": losses[0],
            "last_epoch_loss": losses[-1],
            "test_accuracy": ((logits > 0).float() == test.y.cpu()).float().mean().item(),
            "test_auroc": roc_auc_score(test.y.cpu(), logits),
        }
    }


record = load_or_train("infection-gn", model, train_infection)
for p in model.parameters():
    p.requires_grad_(False)
loss_first, loss_last = (
    record["metrics"]["first_epoch_loss"],
    record["metrics"]["last_epoch_loss"],
)
print(
    f"mean training loss: epoch 1 {loss_first:.2f}, epoch 10 "
    + ("< 0.01" if loss_last < 0.01 else f"{loss_last:.2f}")
)

test_batch = Batch.from_data_list(test_set).to(device)
with torch.no_grad():
    logits = model(test_batch).cpu()
y_test = test_batch.y.cpu()
average_precision = average_precision_score(y_test, logits)
accuracy = ((logits > 0).float() == y_test).float().mean().item()
print(f"held-out node average precision: {average_precision:.4f}")
print(f"held-out node accuracy: {accuracy:.4f}")

# %% tags=["remove-cell"]
glue("inf_ap", f"{average_precision:.3f}", display=False)
glue("inf_accuracy", f"{accuracy:.3f}", display=False)

# %% [markdown]
# The held-out average precision is {glue:text}`inf_ap` and the accuracy {glue:text}`inf_accuracy`.
# A perfect score says the model computes the rule; it does not say *how*. A model could, for
# example, look at the sick in-neighbour over a virtual edge too and still be right most of the
# time. That is what the explanations are for.
#
# ## Four explanations of one prediction
#
# We explain the logit $\ell_v$ of one node $v$, and score each node and edge of its graph.
#
# - **LRP.** Run the forward pass inside `lrp_lib.teach.relevance()`, start the backward pass from
#   $R = \ell_v$ at node $v$ (zero elsewhere), and read the relevance of each input feature from
#   `.grad`. A node's (edge's) score is the sum over its features. The relevances add up to
#   $\ell_v$ minus the read-out bias's share (conservation, up to the tiny share the stabiliser
#   $\epsilon$ of the epsilon rule absorbs); positive relevance speaks for "infected", negative
#   against.
# - **Sensitivity analysis** {cite}`baehrens2010explain,simonyan2014deep`: the gradient
#   $\partial \ell_v / \partial x$; a node's score is the squared norm of the gradient of its
#   features, $\lVert \partial \ell_v / \partial x_u \rVert^2$, as in the paper. It says which
#   inputs would change the output if moved, not which ones produced it.
# - **Guided backprop** {cite}`springenberg2015striving`: the gradient with the negative signals
#   dropped at every ReLU, $\partial_{in} = [x > 0] \max(\partial_{out}, 0)$; scored like the
#   gradient. Inside a `with guided_backprop(model):` block, `lrp_lib.teach.guided_backprop`
#   applies this rule (`lrp_lib.teach.guided.GuidedReLU`) to the model's ReLU layers through
#   forward hooks, removed when the block ends.
# - **GNNExplainer** {cite}`ying2019gnnexplainer`: learns a soft mask over edges (and here over
#   nodes) that keeps the prediction while being small; the mask values are the scores.
#
# The first three are one backward pass each. To explain *many* nodes of one graph at once we
# batch $k$ copies of the graph, one per node to explain, and start the backward pass from node
# $v_j$ in copy $j$: the copies share nothing, so relevance (or gradient) never crosses from one to
# another, and one backward pass gives all $k$ explanations.

# %%
def backward_scores(model, data, nodes, method):
    """Node and edge scores (k x N, k x E) explaining the logits of `nodes` of one
    graph `data`."""
    k, n, e = len(nodes), data.num_nodes, data.num_edges
    copies = graph.relevance_inputs(
        Batch.from_data_list([data] * k).to(device), ("x", "edge_attr")
    )
    target = torch.as_tensor(nodes, device=device) + torch.arange(k, device=device) * n
    if method == "lrp":
        with lrp_lib.teach.relevance():
            out = model(copies)
        start = torch.zeros_like(out).index_copy(
            0, target, out[target].detach()
        )  # R = logit at v
    else:
        if method == "guided backprop":
            with guided_backprop(model):
                out = model(copies)
        else:
            out = model(copies)
        start = torch.zeros_like(out).index_fill(0, target, 1.0)  # d logit_v / d inputs
    out.backward(start)
    if method == "lrp":
        node, edge = copies.x.grad.sum(-1), copies.edge_attr.grad.sum(-1)
    else:
        node, edge = copies.x.grad.pow(2).sum(-1), copies.edge_attr.grad.pow(2).sum(-1)
    return node.view(k, n).cpu(), edge.view(k, e).cpu()

# %% [markdown]
# GNNExplainer comes from PyG's `torch_geometric.explain`. Its `Explainer` calls the model as
# `model(x, edge_index, **kwargs)` and expects node-level outputs, so a small wrapper rebuilds the
# `Data` object. The edge mask is the subtle part: PyG does not pass the mask to the model.
# Instead `set_masks` looks for `MessagePassing` modules inside the model, stores the mask on
# each (`module._edge_mask`) and sets `module.explain = True`; PyG's own layers then multiply every
# message by `sigmoid(mask)`. `lrp_lib.teach.graph` layers are not `MessagePassing` modules, so the
# wrapper carries an empty `MessagePassing` whose only job is to receive the mask, and hands
# `sigmoid(mask)` to the model's `edge_weight`, which scales the messages $m_k$ before the max.
# Without it GNNExplainer's edge mask would never touch the computation.

# %%
class PyGNodeModel(nn.Module):
    """`forward(x, edge_index, edge_attr)` for PyG's Explainer; applies its edge mask
    to the messages."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.mask_slot = MessagePassing()  # PyG's set_masks stores the edge mask here

    def forward(self, x, edge_index, edge_attr):
        weight = None
        if self.mask_slot.explain and self.mask_slot._edge_mask is not None:
            weight = self.mask_slot._edge_mask
            weight = weight.sigmoid() if self.mask_slot._apply_sigmoid else weight
        out = self.model(
            Data(x=x, edge_index=edge_index, edge_attr=edge_attr), edge_weight=weight
        )
        return out.view(-1, 1)


model64 = copy.deepcopy(
    model
).double()  # GNNExplainer optimises: in float64 its masks agree on every CPU
explainer = Explainer(
    PyGNodeModel(model64), algorithm=GNNExplainer(epochs=100, lr=0.01),
    explanation_type="model", node_mask_type="object", edge_mask_type="object",
    model_config=dict(mode="binary_classification", task_level="node", return_type="raw"))


def gnnexplainer_scores(data, node):
    """GNNExplainer's node and edge masks for the logit of `node`, optimised in
    float64."""
    torch.manual_seed(0)  # the masks start random
    data = data.clone().to(device)  # a copy: keep the stored graph on the CPU
    default = torch.get_default_dtype()
    torch.set_default_dtype(
        torch.float64
    )  # PyG creates the mask parameters in the default dtype
    try:
        explanation = explainer(data.x.double(), data.edge_index, index=int(node),
                                edge_attr=data.edge_attr.double())
    finally:
        torch.set_default_dtype(default)
    return (
        explanation.node_mask.view(-1).float().cpu(),
        explanation.edge_mask.float().cpu(),
    )

# %% [markdown]
# Before scoring, a check that LRP does what it promises on this model: for every infected node
# of a held-out graph, the relevance of all inputs adds up to the logit minus the share of the
# read-out bias. The read-out receives $R = \ell_v$ and its bias keeps $b\,\ell_v / (\ell_v +
# \epsilon\,\mathrm{sign}(\ell_v))$, which is $b$ to the printed digits; every other layer is
# bias-free, so what the inputs do not receive should be exactly that.

# %%
g = test_set[0]
nodes = explained_nodes(g).tolist()
node_rel, edge_rel = backward_scores(model, g, nodes, "lrp")
with torch.no_grad():
    logit = model(g.clone().to(device)).cpu()[nodes]
print(f"read-out bias b = {model.readout.bias.item():.3f}")
for v, r_nodes, r_edges, l in zip(nodes, node_rel, edge_rel, logit):
    print(
        f"node {v:2d}: logit {l:7.3f} = relevance on nodes {r_nodes.sum():7.3f} + on"
        f" edges {r_edges.sum():6.3f} + the rest {l - r_nodes.sum() - r_edges.sum():6.3f}"
    )

# %% [markdown]
# ## Scoring against the ground truth
#
# For each infected, non-sick node $v$ of {glue:text}`inf_graphs` held-out graphs we ask two questions, each answered
# by an area under the ROC curve (AUROC; 1 = every true cause scores above every non-cause,
# 0.5 = chance):
#
# - **edges:** among the edges into $v$, do the ground-truth edges score highest?
# - **nodes:** among $v$ and its in-neighbours, do the sick sources score highest?
#
# The candidates are the model's receptive field (one hop): everything farther away gets no
# score from any method, and counting it would only inflate the numbers. The edge AUROC is
# undefined when every edge into $v$ is a cause; such nodes are left out of the edge column. The
# gradient methods are one batched backward pass per graph; GNNExplainer optimises a mask per
# node (about a second each on a CPU), so it runs on the first {glue:text}`inf_gnnexplainer_budget` nodes only.

# %%
methods = ["lrp", "sensitivity", "guided backprop", "gnnexplainer"]
auroc = {m: {"nodes": [], "edges": []} for m in methods}
gnnexplainer_budget = 20
n_graphs = 40
for data in test_set[:n_graphs]:
    nodes = explained_nodes(data).tolist()
    if not nodes:
        continue
    scores = {m: backward_scores(model, data, nodes, m) for m in methods[:3]}
    for j, v in enumerate(nodes):
        true_nodes, true_edges = ground_truth(data, v)
        into_v = data.edge_index[1] == v
        field = torch.zeros(data.num_nodes, dtype=torch.bool)
        field[data.edge_index[0, into_v]] = True
        field[v] = True
        for m in methods:
            if m == "gnnexplainer":
                if len(auroc[m]["nodes"]) >= gnnexplainer_budget:
                    continue
                node_s, edge_s = gnnexplainer_scores(data, v)
            else:
                node_s, edge_s = scores[m][0][j], scores[m][1][j]
            auroc[m]["nodes"].append(roc_auc_score(true_nodes[field], node_s[field]))
            if not true_edges[into_v].all():
                auroc[m]["edges"].append(
                    roc_auc_score(true_edges[into_v], edge_s[into_v])
                )

print(
    f"{'method':16s} {'node AUROC':>11s} {'edge AUROC':>11s} {'nodes':>6s}"
    f" {'edge cases':>11s}"
)
for m in methods:
    a = auroc[m]
    print(f"{m:16s} {np.mean(a['nodes']):11.3f} {np.mean(a['edges']):11.3f} "
          f"{len(a['nodes']):6d} {len(a['edges']):11d}")
mean_auroc = {
    (m, part): float(np.mean(auroc[m][part]))
    for m in methods
    for part in ("nodes", "edges")
}

# %% tags=["remove-cell"]
for (m, part), value in mean_auroc.items():
    glue(f"inf_auroc_{m.replace(' ', '_')}_{part}", f"{value:.3f}", display=False)
glue("inf_graphs", f"{n_graphs}", display=False)
glue("inf_gnnexplainer_budget", f"{gnnexplainer_budget}", display=False)

# %% [markdown]
# LRP finds the causes: the sick in-person contacts get the highest node *and* edge scores (node
# AUROC {glue:text}`inf_auroc_lrp_nodes`, edge AUROC {glue:text}`inf_auroc_lrp_edges`). The two
# gradient methods find the right edges (edge AUROC {glue:text}`inf_auroc_sensitivity_edges` for
# the gradient, {glue:text}`inf_auroc_guided_backprop_edges` for guided backprop): the encoder maps
# a virtual edge's features to zero, and a healthy sender's message hardly matters, so their
# gradients are small. They miss the right nodes (node AUROC
# {glue:text}`inf_auroc_sensitivity_nodes` and {glue:text}`inf_auroc_guided_backprop_nodes`): a
# gradient measures what would change the output, and the logit is sensitive to nodes that are not
# the cause, $v$'s own immune flag first of all. That is a correct answer to the question a gradient
# asks, but it is not the cause of the infection. GNNExplainer's masks are noisier (node AUROC
# {glue:text}`inf_auroc_gnnexplainer_nodes`, edge AUROC {glue:text}`inf_auroc_gnnexplainer_edges`):
# its objective only asks for a small set of edges that keeps the prediction, and with a sick,
# in-person contact and some healthy ones, several masks do.
#
# ## Three small cases
#
# The paper looks at hand-made graphs where a method can go wrong. In each, node 3 is the node we
# explain; "S" marks sick nodes, "I" immune ones, dashed edges are virtual. In the figure after
# the scores, each method (row) has one colour scale for the three cases, and its colour bar says
# what it shows: LRP's signed relevance of node 3's logit, the squared (guided) gradients of that
# logit, or GNNExplainer's mask values.
#
# 1. **Virtual contact**: node 3 receives from a sick node over a virtual edge (0), from a sick
#    node in person (1) and from a healthy node (2). It is infected because of 1 only.
# 2. **Immune**: node 3 is immune; a sick node (0) and two healthy ones (1, 2) meet it in person.
#    It is not infected, and the reason is its own immunity.
# 3. **Two sick contacts**: nodes 0 and 1 are both sick and meet 3 in person. Either alone would
#    infect it.

# %%
def case(sick, immune, senders, virtual):
    edge_index = torch.tensor([senders, [3] * len(senders)])
    return infection_graph(4, edge_index, sick=sick, immune=immune, virtual=virtual,
                           generator=np.random.default_rng(0))

cases = {
    "virtual contact": case(
        [True, True, False, False], [False] * 4, [0, 1, 2], [True, False, False]
    ),
    "immune": case(
        [True, False, False, False],
        [False, False, False, True],
        [0, 1, 2],
        [False, False, False],
    ),
    "two sick contacts": case(
        [True, True, False, False], [False] * 4, [0, 1, 2], [False, False, False]
    ),
}
for name, data in cases.items():
    with torch.no_grad():
        p = torch.sigmoid(model(data.clone().to(device))).cpu()
    print(
        f"{name:18s} label of node 3: {int(data.y[3])}, predicted probability {p[3]:.3f}"
    )

# %%
case_scores = {}
for name, data in cases.items():
    print(name, "(scores of nodes 0, 1, 2, 3 | of the edges into 3, by sender)")
    for m in methods:
        if m == "gnnexplainer":
            node_s, edge_s = gnnexplainer_scores(data, 3)
        else:
            node_s, edge_s = (s[0] for s in backward_scores(model, data, [3], m))
        case_scores[name, m] = node_s, edge_s
        print(f"  {m:16s}" + "".join(f"{v:8.2f}" for v in node_s.tolist()) + "  |"
              + "".join(f"{v:8.2f}" for v in edge_s.tolist()))
immune_nodes, immune_edges = case_scores["immune", "lrp"]

# %% tags=["remove-cell"]
glue("inf_immune_self", f"{immune_nodes[3]:.1f}", display=False)
glue("inf_immune_contact", f"{immune_nodes[0] + immune_edges[0]:.1f}", display=False)
glue("inf_immune_total", f"{immune_nodes.sum() + immune_edges.sum():.1f}", display=False)

# %% tags=["hide-input"]
pos = {0: (-1.0, 1.0), 1: (-1.0, 0.0), 2: (-1.0, -1.0), 3: (0.6, 0.0)}


def node_labels(data):
    return [
        f"{v}{'S' if data.sick[v] else ''}{'I' if data.immune[v] else ''}"
        for v in range(data.num_nodes)
    ]


# One colour scale per method (row), shared by the three cases. The gradient methods and
# GNNExplainer give scores >= 0: their colour bars show the upper half of the scale only.
upper = plt.get_cmap("RdBu_r")(np.linspace(0.5, 1.0, 128))
half_cmap = ListedColormap(upper)
nonnegative_cmap = ListedColormap(np.vstack([np.repeat(upper[:1], 128, axis=0), upper]))
score_label = {
    "lrp": "LRP relevance of\nnode 3's logit",
    "sensitivity": "squared gradient of\nnode 3's logit",
    "guided backprop": "squared guided gradient\nof node 3's logit",
    "gnnexplainer": "GNNExplainer mask\n(nodes and edges)",
}
fig, axes = plt.subplots(len(methods), len(cases), figsize=(BOOK_WIDTH, 9.6))
for row, m in enumerate(methods):
    vmax = (
        max(float(torch.cat(case_scores[name, m]).abs().max()) for name in cases) or 1.0
    )
    signed = m == "lrp"
    for col, (name, data) in enumerate(cases.items()):
        node_s, edge_s = case_scores[name, m]
        ax = axes[row, col]
        draw_graph(
            data,
            node_relevance=node_s,
            edge_relevance=edge_s,
            labels=False,
            pos=pos,
            ax=ax,
            vmax=vmax,
            cmap="RdBu_r" if signed else nonnegative_cmap,
            colorbar=False,
            node_size=520,
            edge_width=2.5,
        )
        for v, text in enumerate(node_labels(data)):  # white text on dark nodes
            ax.text(*pos[v], text, ha="center", va="center", fontsize=9,
                    color="white" if abs(float(node_s[v])) > 0.6 * vmax else "black")
        for k in range(data.num_edges):  # a dashed line along each virtual edge
            if data.virtual[k]:
                s = int(data.edge_index[0, k])
                ax.plot(
                    [pos[s][0], pos[3][0]],
                    [pos[s][1], pos[3][1]],
                    ls="--",
                    color="black",
                    lw=0.8,
                    zorder=0.5,
                )
        ax.set_xlim(-1.35, 0.95)
        ax.set_ylim(-1.35, 1.35)
        if row == 0:
            ax.set_title(name)
        if col == 0:
            ax.text(
                -0.08,
                0.5,
                {"lrp": "LRP", "gnnexplainer": "GNNExplainer"}.get(m, m),
                transform=ax.transAxes,
                rotation=90,
                ha="right",
                va="center",
            )
    mappable = ScalarMappable(Normalize(-vmax, vmax), "RdBu_r") if signed else \
        ScalarMappable(Normalize(0.0, vmax), half_cmap)
    fig.colorbar(
        mappable, ax=list(axes[row]), label=score_label[m], shrink=0.85, pad=0.02
    )
plt.show()

# %% [markdown]
# What the cases show:
#
# - **Virtual contact.** LRP gives the positive relevance to the cause: node 1 and its in-person
#   edge. The virtual edge gets none: the encoder maps a virtual edge's features to zero, so
#   nothing of that edge's message comes from the edge itself. The message still carries its
#   sick sender's features, and LRP rates them, and node 3's own features, as evidence *against*
#   infection (negative). The gradient ranks node 3 above the cause. Guided backprop ranks the
#   healthy node 2 highest among the nodes: dropping negative signals at every ReLU keeps
#   whatever passes through positive weights, related to the output or not.
# - **Immune.** The logit is negative, and LRP says why: the strongly negative relevance of node 3,
#   the immune one ({glue:text}`inf_immune_self`), outweighs the positive relevance of the sick
#   contact and its edge ({glue:text}`inf_immune_contact` together); all nodes and edges sum to
#   {glue:text}`inf_immune_total`. The
#   gradient finds node 3 too, but as a magnitude; it cannot tell the sick contact (for) from the
#   immunity (against). Guided backprop misses the immunity entirely: its evidence is negative,
#   and negative signals are exactly what it discards.
# - **Two sick contacts.** Both contacts would suffice. With the max aggregation each message
#   feature has one winner, and here contact 1 wins most of them, so LRP gives it most of the
#   relevance; contact 0 keeps a small positive share on its edge. GNNExplainer keeps contact 0
#   and gives contact 1 exactly zero. Its objective asks for a *small* sufficient explanation, and
#   PyG's implementation reports zero for every node and edge whose mask got a zero gradient in
#   the first optimisation step; under a max, a message that loses every feature in that step
#   (here, to contact 0's randomly scaled message) is shut out for good. The ground truth's
#   "both" is the full cause; each method shows part of it.
#
# The first point is a claim about the model, and easy to check over all held-out edges: the
# edge encoder $\mathrm{ReLU}(W e_k)$ is exactly zero for every virtual edge and for no in-person
# one. The model has learned to silence virtual edges at the very first layer, which is
# why LRP and both gradient methods give a virtual edge's features no score at all.
# GNNExplainer's mask scales the whole message, sender part included, so it can still give one.

# %%
with torch.no_grad():
    encoded = model.encode[1](model.encode[0](test_batch)).edge_attr.cpu()
all_zero = (encoded == 0).all(1)
virtual = test_batch.virtual.cpu()
print(
    "edge encodings that are all zero: virtual edges"
    f" {all_zero[virtual].float().mean():.3f}, in-person edges"
    f" {all_zero[~virtual].float().mean():.3f}"
)

# %% [markdown]
# ## Summary
#
# - The infection data set has exact ground-truth explanations: for each infected non-sick node,
#   its sick in-person contacts. `lrp_lib.book.datasets.infection` generates it reproducibly, with the
#   sick and immune nodes placed at random rather than on the hubs.
# - A graph network built from `lrp_lib.teach.graph` layers trains with ordinary gradients and is
#   explained with LRP by switching the mode; nothing in the model changes.
# - Batching copies of a graph explains many of its nodes in one backward pass.
# - Against the ground truth, LRP ranks the true causes highest for both nodes and edges. The
#   gradient and guided backprop find the causal edges but not the causal nodes, because they
#   measure sensitivity, not contribution. GNNExplainer is slower
#   (an optimisation per node) and noisier here.
# - Signed relevance separates evidence for the prediction from evidence against it (the immune
#   case), which squared gradients cannot, and which guided backprop throws away.
#
# ## Exercises
#
# 1. Train `InfectionGN("sum")`. Does it still reach the held-out average precision of the max model
#    ({glue:text}`inf_ap`)? How does the
#    LRP explanation of the "two sick contacts" case change, and why?
# 2. Score the methods by *signed* gradients instead of squared ones. Which AUROC changes, and
#    what does that say about the sign of $\partial \ell_v / \partial x_v$?
# 3. Add a bias to the message layer and retrain. How much relevance does the bias absorb on the
#    held-out nodes, and does the node AUROC of LRP change?
# 4. Generate a data set with the sick nodes on the lowest ids, as in the original code of
#    {cite}`baldassarre2019explainability`, train on
#    it and test on randomly placed sick nodes. Does the model still reach the same precision?
# 5. Give GNNExplainer more epochs and a larger edge-size penalty
#    (`GNNExplainer(epochs=300, edge_size=0.05)`). Does its edge AUROC approach LRP's?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
