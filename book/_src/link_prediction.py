# %% [markdown]
# # Explaining a link predictor
#
# A link predictor scores pairs of nodes: is there an edge between $u$ and $v$? Recommenders,
# knowledge-graph completion and interaction prediction all ask it. This page explains one such score
# with `LRPExplainer`: which nodes and edges of the observed graph made the model believe in the link.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This page assumes the [quick start](quickstart.ipynb). After reading it you should be able to
# - give a link predictor's `forward` the candidate pairs as `edge_label_index` and explain one pair
#   with `task_level="edge"` and `index=`;
# - read how a dot-product decoder splits a score between the two end points;
# - check that the relevance stays inside the end points' neighbourhood that the encoder sees.
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
import torch.nn.functional as F
from myst_nb import glue
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.transforms import RandomLinkSplit
from torch_geometric.utils import k_hop_subgraph, negative_sampling, stochastic_blockmodel_graph
from tqdm.auto import tqdm

from lrp_lib import Explainer as CheckedExplainer  # PyG's Explainer, the inputs checked first
from lrp_lib import LRPExplainer
from lrp_lib.book.plotting import BOOK_WIDTH, book_style, draw_graph
from lrp_lib.book.pretrained import load_or_train

book_style()


def seed_everything(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cpu":
    # the small graph gains nothing from threads; and sums in one fixed order
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

# %% [markdown]
# ## A link predictor
#
# The usual PyG recipe for a link predictor: a GCN encoder
# computes an embedding $z_i$ per node over the observed edges, and a dot-product decoder scores a
# candidate edge $(u, v)$ by $z_u \cdot z_v$, a logit of "there is an edge". `LRPExplainer` explains
# one score of such a model as it explains a graph's: the model takes the candidate pairs as
# `edge_label_index` (PyG's name, as in its `link_pred` examples) and returns one score per column,
# the configuration says `task_level="edge"`, and `index` picks the column to explain.
#
# The graph here is generated, so nothing downloads: a stochastic block model of four blocks of 40
# nodes (an edge inside a block with probability 0.12, between blocks 0.005), each node with eight
# features drawn around its block's centre. PyG's `RandomLinkSplit` holds out 10% of the edges for
# validation and 20% for the test, each with as many non-edges; the encoder passes messages over the
# rest.

# %%
seed_everything(0)
blocks = [40, 40, 40, 40]
block_probs = torch.full((4, 4), 0.005).fill_diagonal_(0.12)
block = torch.arange(4).repeat_interleave(torch.tensor(blocks))
sbm = Data(
    x=2 * torch.randn(4, 8)[block] + torch.randn(len(block), 8),
    edge_index=stochastic_blockmodel_graph(blocks, block_probs, directed=False),
    block=block,
)
train_data, val_data, test_data = RandomLinkSplit(
    num_val=0.1, num_test=0.2, is_undirected=True, add_negative_train_samples=False
)(sbm)
print(
    f"blocks {blocks}, edge probability {float(block_probs[0, 0]):.2f} inside a block "
    f"and {float(block_probs[0, 1]):.3f} between blocks"
)
print(
    f"{sbm.num_nodes} nodes, {sbm.edge_index.shape[1] // 2} edges; message passing "
    f"over {train_data.edge_index.shape[1] // 2} (training) and "
    f"{test_data.edge_index.shape[1] // 2} (test time);\n"
    f"{test_data.edge_label_index.shape[1]} test pairs, half of them edges"
)


class LinkGCN(torch.nn.Module):
    """Two GCN layers encode the nodes.

    The score of a pair is the dot product of its two embeddings.
    """

    def __init__(self, features, hidden=32, out=16):
        super().__init__()
        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, out)

    def encode(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    def forward(self, x, edge_index, edge_label_index):
        z = self.encode(x, edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


# %% tags=["train"]
def link_auroc(model, data):
    """AUROC of the scores of data's labelled pairs (edges against non-edges)."""
    model.eval()
    with torch.no_grad():
        return float(
            roc_auc_score(
                data.edge_label, model(data.x, data.edge_index, data.edge_label_index)
            )
        )


def train_link(model, epochs=200):
    """Full-batch Adam; every epoch new non-edges, as many as training edges.

    PyG's link_pred recipe.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in tqdm(range(epochs), desc="training"):
        model.train()
        optimizer.zero_grad()
        negative = negative_sampling(
            train_data.edge_index,
            num_nodes=train_data.num_nodes,
            num_neg_samples=train_data.edge_label_index.shape[1],
        )
        pairs = torch.cat([train_data.edge_label_index, negative], 1)
        labels = torch.cat([train_data.edge_label, torch.zeros(negative.shape[1])])
        loss = F.binary_cross_entropy_with_logits(
            model(train_data.x, train_data.edge_index, pairs), labels
        )
        loss.backward()
        optimizer.step()
    model.eval()
    return {
        "metrics": {
            "last_epoch_train_loss": float(loss.detach()),
            "val_auroc": link_auroc(model, val_data),
            "test_auroc": link_auroc(model, test_data),
        }
    }


seed_everything(0)
link_model = LinkGCN(sbm.num_features)
link_record = load_or_train("link-sbm-gcn", link_model, train_link)
print(
    f"stored test AUROC {link_record['metrics']['test_auroc']:.3f} (validation "
    f"{link_record['metrics']['val_auroc']:.3f})"
)

# %% tags=["remove-cell"]
glue("link_test_auroc", f"{link_record['metrics']['test_auroc']:.3f}", display=False)

# %% [markdown]
# At test time the encoder passes messages over the training and validation edges
# (`test_data.edge_index`) and scores the test pairs. We explain the most confident correct
# prediction among test edges whose two end points both have neighbours, in float64. The
# configuration is the only change from a graph classifier's: `task_level="edge"`,
# `edge_label_index=` passed through to the model, `index=` the column. The explained value is the
# log-odds of the predicted class, here the score itself.

# %%
link64 = copy.deepcopy(link_model).double().eval()
x_link, mp_edges, pairs = (
    test_data.x.double(),
    test_data.edge_index,
    test_data.edge_label_index,
)
with torch.no_grad():
    pair_scores = link64(x_link, mp_edges, pairs)
degree = torch.bincount(mp_edges[0], minlength=test_data.num_nodes)
candidates = (
    (test_data.edge_label == 1)
    & (pair_scores > 0)
    & (degree[pairs[0]] > 0)
    & (degree[pairs[1]] > 0)
)
k_pair = int(torch.where(candidates, pair_scores, -torch.inf).argmax())
u, v = pairs[:, k_pair].tolist()
link_explainer = CheckedExplainer(
    link64,
    algorithm=LRPExplainer(),
    explanation_type="model",
    node_mask_type="object",
    edge_mask_type="object",
    model_config=dict(
        mode="binary_classification", task_level="edge", return_type="raw"
    ),
)
link_e = link_explainer(x_link, mp_edges, edge_label_index=pairs, index=k_pair)
score = float(pair_scores[k_pair])
link_nodes, link_bias = float(link_e.node_relevance.sum()), float(link_e.bias_relevance)
print(
    f"test pair {k_pair}: nodes {u} (block {int(block[u])}) and {v} (block "
    f"{int(block[v])}), score {score:.4f}, P(edge) = "
    f"{torch.sigmoid(torch.tensor(score)).item():.3f}"
)
print(f"relevance of the nodes {link_nodes:8.4f}")
print(f"kept by the biases     {link_bias:8.4f}")
# + 0.0: no -0.0
print(f"nodes + biases - score {round(link_nodes + link_bias - score, 6) + 0.0:8.4f}")
subset, sub_edges, ends, in_hops = k_hop_subgraph(
    [u, v], 2, mp_edges, relabel_nodes=True, num_nodes=test_data.num_nodes
)
outside = torch.ones(test_data.num_nodes, dtype=torch.bool)
outside[subset] = False
print(
    f"2-hop neighbourhood of the two end points: {len(subset)} nodes, "
    f"{int(in_hops.sum())} directed edges;\nlargest |relevance| outside it: nodes "
    f"{float(link_e.node_relevance.view(-1)[outside].abs().max()):.1f}, edges "
    f"{float(link_e.edge_relevance[~in_hops].abs().max()):.1f}"
)
assert abs(link_nodes + link_bias - score) < 1e-4 * max(1.0, abs(score))  # nodes and biases give the score

# %% tags=["remove-cell"]
glue("link_u", f"{u}", display=False)
glue("link_v", f"{v}", display=False)
glue("link_score", f"{score:.2f}", display=False)
glue("link_nodes", f"{link_nodes:.2f}", display=False)
glue("link_bias", f"{link_bias:.2f}", display=False)
glue("link_hood", f"{len(subset)}", display=False)

# %% [markdown]
# The nodes carry {glue:text}`link_nodes` of the score {glue:text}`link_score` and the biases
# {glue:text}`link_bias`; together they give the score, as the printed difference shows. Nothing outside
# the two end points' 2-hop neighbourhood ({glue:text}`link_hood` nodes) gets relevance: two GCN layers
# see no further. The decoder's product $z_u \cdot z_v = \sum_f z_{uf} z_{vf}$ multiplies two
# input-dependent factors, and LRP splits each term uniformly (AttnLRP's rule
# {cite}`achtibat2024attnlrp`, the composite's default for such a product): half of the score goes to $u$'s embedding and half to $v$'s, and each half then
# spreads over that end point's own neighbourhood. The figure draws the neighbourhood, edges and
# nodes coloured by their signed relevance.

# %% tags=["hide-input"]
hood_labels = {i: "" for i in range(len(subset))}
hood_labels[int(ends[0])], hood_labels[int(ends[1])] = "u", "v"
fig, ax = plt.subplots(figsize=(BOOK_WIDTH, 4.2))
draw_graph(
    sub_edges,
    len(subset),
    node_relevance=link_e.node_relevance.view(-1)[subset],
    edge_relevance=link_e.edge_relevance[in_hops],
    labels=hood_labels,
    ax=ax,
    node_size=220,
    edge_width=2.0,
    label="relevance for 'edge u-v' (LRP, z+)",
    title=f"the 2-hop neighbourhood of the test pair u = {u}, v = {v}",
)
fig.tight_layout()
plt.show()

# %% [markdown]
# To explain your own link predictor: give its `forward` the candidate pairs as `edge_label_index`,
# declare `task_level="edge"` with the mode and return type its score has, and pass the pairs and
# `index=` when you call the explainer. `node_relevance` and `edge_relevance` hold the signed
# relevance, `node_mask` and `edge_mask` the $|R| / \max |R|$ that PyG's tools read.
#
#
# ## Summary
#
# - A link predictor is explained per candidate pair: the pairs go to the model as
#   `edge_label_index`, the configuration says `task_level="edge"`, and `index=` picks the pair.
# - The relevance of the nodes and the biases adds up to the explained score, as for a graph
#   classifier.
# - A dot-product decoder multiplies two input-dependent factors; the uniform rule gives each end
#   point's embedding half of every term, which then spreads over that end point's neighbourhood.
# - Nothing outside the end points' $L$-hop neighbourhood gets relevance from an $L$-layer encoder.
#
# ## Exercises
#
# 1. Explain a test pair that is *not* an edge and that the model scores low. Which nodes argue
#    against the link?
# 2. Replace the dot product by an MLP on the concatenated embeddings $[z_u, z_v]$, retrain, and
#    explain the same pair. Do both end points still get about half?
# 3. Explain the pair with `rule="epsilon"` and with `rule="gamma"`: which edges change sign?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
