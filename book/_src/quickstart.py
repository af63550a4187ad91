# %% [markdown]
# # Quick start: explain your own PyG model
#
# You have a trained PyTorch Geometric model and want to know which nodes and edges a prediction
# rests on. This page does it in five minutes: a small {term}`GCN`, one explanation through PyG's own
# `Explainer`, what the explanation holds, and which rule to choose. The chapters after it explain
# how it works.
#
# ## A model to explain
#
# Any PyG model will do; here, a three-layer GCN that classifies the nodes of a generated graph
# (PyG's `ExplainerDataset`: a Barabási-Albert graph with 80 five-node "houses" attached, each node
# labelled by its place in a house, or 0 off the houses). It ends in `log_softmax`, as PyG's examples
# do.

# %% tags=["hide-input"]
import warnings

# tqdm's notebook notice, via PyG
warnings.filterwarnings("ignore", message="IProgress not found")

import matplotlib.pyplot as plt
import networkx as nx
import torch
import torch.nn.functional as F
from myst_nb import glue
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.datasets import ExplainerDataset
from torch_geometric.datasets.graph_generator import BAGraph
from torch_geometric.nn import GCNConv
from torch_geometric.utils import k_hop_subgraph

from lrp_lib.book.plotting import BOOK_WIDTH, book_style, draw_graph
from lrp_lib.book.pretrained import load_or_train

book_style()
# a small graph gains nothing from threads; and sums in one fixed order
torch.set_num_threads(1)

# %%
# seeds Python's, NumPy's and torch's generators (PyG's graph generator uses NumPy)
seed_everything(0)
generated = ExplainerDataset(graph_generator=BAGraph(num_nodes=300, num_edges=5),
                             motif_generator="house", num_motifs=80)[0]
data = Data(
    x=torch.ones(generated.num_nodes, 1),
    edge_index=generated.edge_index,
    y=generated.y,
    in_house=generated.edge_mask.bool(),  # the ground truth
)
order = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
train_nodes, test_nodes = order[:560], order[560:]


class GCN(torch.nn.Module):
    def __init__(self, features, hidden, classes):
        super().__init__()
        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.conv3 = GCNConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def logits(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        x = self.conv3(x, edge_index).relu()
        return self.head(x)

    def forward(self, x, edge_index):
        return self.logits(x, edge_index).log_softmax(-1)


print(f"{data.num_nodes} nodes, {data.num_edges} directed edges, "
      f"{len(data.y.unique())} classes")

# %% [markdown]
# Training takes a few seconds; the book loads the stored weights instead, so that your numbers match
# the page's on any CPU (set `LRP_BOOK_RETRAIN=1` to train from scratch).

# %% tags=["train"]
def accuracy(model, nodes):
    with torch.no_grad():
        prediction = model(data.x, data.edge_index).argmax(-1)
    return float((prediction[nodes] == data.y[nodes]).float().mean())


def train(model, epochs=500):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        loss = F.nll_loss(
            model(data.x, data.edge_index)[train_nodes], data.y[train_nodes]
        )
        loss.backward()
        optimizer.step()
    model.eval()
    return {"metrics": {"last_epoch_train_loss": float(loss.detach()),
                        "test_accuracy": accuracy(model, test_nodes)}}


torch.manual_seed(0)
model = GCN(1, 20, 4)
record = load_or_train("quickstart-ba-houses-gcn", model, train)
print(f"test accuracy {accuracy(model, test_nodes):.3f}")

# %% [markdown]
# ## Explain a prediction
#
# `lrp_lib.Explainer` is PyG's `Explainer` (it also checks the inputs first, so a transposed
# `edge_index` gets an error that names it); `LRPExplainer` is the algorithm. Every argument is
# PyG's usual one. The model's `log_softmax` is declared as `return_type="log_probs"`; LRP explains
# the {term}`logits <logit>` below it.

# %%
from lrp_lib import Explainer, LRPExplainer

explainer = Explainer(
    model,
    algorithm=LRPExplainer(),
    explanation_type="model",
    node_mask_type="attributes",
    edge_mask_type="object",
    model_config=dict(mode="multiclass_classification", task_level="node",
                      return_type="log_probs"),
)

with torch.no_grad():
    predicted = model(data.x, data.edge_index).argmax(-1)
correct = test_nodes[predicted[test_nodes] == data.y[test_nodes]]
node = int(correct[data.y[correct] == 3][0])  # a correctly classified node of a house
explanation = explainer(data.x, data.edge_index, index=node)
print(f"node {node}: class {int(explanation.target[node])} explained, "
      f"from {explanation.explained_output}")
print("rule of every weight (the default):", explainer.algorithm.rule)

# %% tags=["remove-cell"]
from lrp_lib.explain.explainer import DEFAULTS  # noqa: E402

glue("qs_rule", {"zplus": "z+"}.get(DEFAULTS["rule"], DEFAULTS["rule"]),
     display=False)  # (the rule's name in prose; "zplus" selects it)
assert DEFAULTS["rule"] == "zplus" and type(explainer.algorithm.rule).__name__ == "ZPlus"  # the glossary entry

# %% [markdown]
# ## What the explanation holds
#
# Two kinds of numbers, for two uses.
#
# - **`node_mask`, `edge_mask`**: $|R| / \max |R|$, in $[0, 1]$, the form PyG's own tools read
#   (plots, `threshold`, `get_explanation_subgraph`, the metrics), as they read the masks of PyG's other
#   explainers, such as GNNExplainer, which learns its masks by optimisation.
# - **`node_relevance`, `edge_relevance`**: the signed relevance $R$, positive for evidence for the
#   class, negative against it. The node relevance *conserves* the explained logit: it adds up to
#   it, together with `bias_relevance`, what the model's biases contributed.

# %%
with torch.no_grad():
    explained = float(
        model.logits(data.x, data.edge_index)[node, explanation.target[node]]
    )
nodes_sum = float(explanation.node_relevance.sum())
bias = float(explanation.bias_relevance)
print(f"node_mask in [{float(explanation.node_mask.min()):.0f}, "
      f"{float(explanation.node_mask.max()):.0f}], "
      f"edge_mask in [{float(explanation.edge_mask.min()):.0f}, "
      f"{float(explanation.edge_mask.max()):.0f}]")
print(f"node_relevance.sum() {nodes_sum:8.4f}")
print(f"+ bias_relevance     {bias:8.4f}")
print(f"= {nodes_sum + bias:.4f}; the explained logit {explained:.4f}")

# %% tags=["remove-cell"]
glue("qs_logit", f"{explained:.2f}", display=False)
glue("qs_nodes", f"{nodes_sum:.2f}", display=False)
glue("qs_bias", f"{bias:.2f}", display=False)

# %% [markdown]
# The nodes carry {glue:text}`qs_nodes` of the logit {glue:text}`qs_logit` and the biases
# {glue:text}`qs_bias`. (How much the biases hold varies from node to node; here every feature is
# 1, so the nodes differ only in where they sit in the graph.) PyG's tools read the masks as they
# read any explainer's: keep the twelve edges with the largest relevance (a house has six edges,
# twelve directed ones) and count how many lie in a house. The figure draws what the model's three
# layers see around the node, coloured by the signed relevance.

# %%
top = explanation.threshold(threshold_type="topk", value=12)
kept = top.edge_mask > 0
print(
    f"{int(kept.sum())} edges kept, {int(data.in_house[kept].sum())} of them in a house"
)

# %% tags=["hide-input"]
subset, sub_edges, (v,), in_hood = k_hop_subgraph(
    node, 3, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes
)
pos = nx.spring_layout(nx.Graph(sub_edges.t().tolist()), seed=0)
fig, ax = plt.subplots(figsize=(BOOK_WIDTH, 4.2))
draw_graph(
    sub_edges,
    len(subset),
    node_relevance=explanation.node_relevance.sum(-1)[subset],
    edge_relevance=explanation.edge_relevance[in_hood],
    labels=False,
    pos=pos,
    ax=ax,
    node_size=120,
    edge_width=1.5,
    label="relevance (signed)",
    title=f"node {node} (ringed) and the nodes its three layers see",
)
ax.scatter(*pos[int(v)], s=420, facecolors="none", edgecolors="black", linewidths=1.5)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Other tasks, other heads
#
# - **Link prediction**: give the model's `forward` the candidate pairs as `edge_label_index`,
#   declare `task_level="edge"`, and call `explainer(x, edge_index, edge_label_index=pairs, index=k)`
#   to explain pair `k` ([Explaining a link predictor](link_prediction.ipynb) does it).
# - **Probability heads**: a model ending in `log_softmax`, `softmax` or `sigmoid` is declared as
#   what it returns (`return_type="log_probs"` or `"probs"`) and explained from its logits, as above.
# - **Graph classification**: `task_level="graph"`, and pass `batch=` for a batch of graphs.
#
# ## Many explanations
#
# - **Many nodes of one graph**: `LRPExplainer(per_index=True)` explains each node of `index` on its
#   own, in chunks over the nodes' {term}`k-hop subgraphs <k-hop subgraph>`, in one call.
# - **A data set of graphs**: explain a `Batch`: each graph's relevance starts from its own output, in
#   one forward and one backward for the whole batch; `explain_dataset` runs a whole data set to files
#   ([Explaining a whole data set](explain_jobs.ipynb)).
# - **The same graph again**: from the second explanation of a graph on, `LRPExplainer` runs the
#   explanation as it recorded it (a {term}`capture`), without the model's Python, for the same relevance;
#   `explanation.replay_reason` says whether it did, and `replay=False` turns it off. Many graphs explained
#   once each, such as molecules, soon share one capture for every size. With
#   `LRPExplainer(compile=True)` the explanation is compiled by PyTorch's compiler: that takes seconds,
#   once per model for graphs of every size (with an edge mask, once per graph, at its second
#   explanation), and pays where many explanations follow
#   ([Performance](performance.ipynb) measures it).
# - **Fewer passes per call**: with `explanation_type="model"`, `lrp_lib.Explainer` takes the
#   prediction and the target of a classifier from the explanation's own forward instead of running
#   PyG's prediction pass first (`one_pass=False` runs it), and `LRPExplainer(accounts="total")` keeps
#   one `bias_relevance` and one `relevance_residual` (what {term}`conservation` leaves over) for the whole
#   call instead of one per graph of a batch.
# - **On a GPU**: on a small graph every operation costs the fixed price of starting it on the GPU (a
#   kernel launch), whatever its size, so explain
#   graphs in batches rather than one at a time. What each choice costs: [Performance](performance.ipynb).
#
# ## Which rule?
#
# Start with the default, `LRPExplainer()`: the {glue:text}`qs_rule` rule ({term}`z+`) on the logit,
# masks of $|R|$, the choice that ranked best per task level over the tasks of
# [Benchmarking explanations](09_benchmarking_explanations.ipynb). Other choices are one
# argument away: `rule="epsilon"` ({term}`epsilon`), `"gamma"` ({term}`gamma`), `"z"` ({term}`LRP-0`)
# or `"gamma_sgnn"` (a {term}`composite`), a `Composite` with a rule per layer, `explained="contrast"`
# (the {term}`explained output`). The [glossary](glossary.md) defines each term. Which one wins for which kind of model and task, measured against
# ground truth: [Which rule, and when](choosing_a_rule.ipynb).
