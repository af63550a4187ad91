# %% [markdown]
# # The autograd trick for graph layers
#
# The previous chapter gave every elementary operation (a sum, a scatter, a linear map, a copy)
# a backward that propagates relevance instead of gradient. A graph neural network is made of
# nothing else: messages are *copies* of node features onto edges, aggregation is a *scatter*,
# updates are *linear maps* and *sums*. So if we build graph layers from those ops, one
# `.backward()` explains a whole graph network, however its nodes, edges and global features
# are wired, and we never write a layer-specific LRP rule.
#
# This chapter builds the three layers of a Graph Network {cite}`battaglia2018relational` on
# PyTorch Geometric data {cite}`fey2019pyg`, runs the *same* layer objects in two modes
# (ordinary gradients for training, relevance for explaining), checks that relevance is
# conserved in every configuration, and explains a deep network with a shared block, in the
# spirit of {cite}`baldassarre2019explainability`.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes the relevance ops of the previous chapter and a first acquaintance with
# message passing (PyG's `Data`, `edge_index`, `batch`). After it you should be able to
# - write the edge, node and global updates of a Graph Network and say which copies and
#   aggregations each contains;
# - switch a model between gradient and relevance with `with lrp_lib.teach.relevance():`, and explain
#   why the forward values do not change;
# - read the relevance of every node, edge and graph after one backward pass, and check
#   conservation per group and per graph;
# - predict how much relevance a bias takes, and where a max aggregation sends it.
# ```

# %% tags=["hide-input"]
import copy
import random
import warnings

# tqdm, imported by torch_geometric
warnings.filterwarnings("ignore", message="IProgress not found")

import matplotlib.pyplot as plt
from tqdm.auto import trange
import numpy as np
import torch
from torch import nn
from torch_geometric.data import Batch, Data

import lrp_lib
from lrp_lib.teach.graph import (
    EdgeLinear,
    EdgeReLU,
    GlobalLinear,
    GlobalReLU,
    NodeLinear,
    NodeReLU,
    read_relevance,
    relevance_inputs,
)
# the teaching version of a layer, built from lrp_lib.teach.ops
from lrp_lib.teach.graph import compose_with_ops
from lrp_lib.book.plotting import BOOK_WIDTH, book_style, draw_graph
from lrp_lib.book.pretrained import load_or_train

warnings.filterwarnings("ignore", category=DeprecationWarning)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
np.set_printoptions(precision=3, suppress=True, floatmode="fixed")
book_style()


def backward_graph(fn, names=None, depth=0):
    """The names of the backward nodes below ``fn``, one per line, indented by depth.
    A leaf (``AccumulateGrad``) is labelled with its name in ``names`` ({tensor: name}),
    if given.
    """
    if fn is None:
        return "  " * depth + "None"
    label = type(fn).__name__
    if names is not None and hasattr(fn, "variable"):
        label += " (" + next((n for t, n in names.items() if t is fn.variable), "?") + ")"
    lines = ["  " * depth + label]
    for child, _ in fn.next_functions:
        lines.append(backward_graph(child, names, depth + 1))
    return "\n".join(lines)


def leaf_names(layer, data):
    """{tensor: name} for the parameters of ``layer`` and the features of ``data``."""
    names = {p: n for n, p in layer.named_parameters()}
    names.update({data[a]: a for a in ("x", "edge_attr", "u") if data.get(a) is not None})
    return names


# %% [markdown]
# ## Graph Network layers
#
# A graph carries three kinds of features: one vector per node, $x_i$; one per directed edge,
# $e_k$, from its sender $s(k)$ to its receiver $r(k)$; and one per graph, $u$. PyG stores them as
# `x` ($N \times F_x$), `edge_attr` ($E \times F_e$) and `u` (one row per graph), with
# `edge_index[0]` the senders and `edge_index[1]` the receivers, and, for a batch of several
# graphs, `batch[i]` the graph of node $i$. These are the names of PyG's `MetaLayer`.
#
# A Graph Network block updates edges, then nodes, then globals. With linear update functions (the
# layers `EdgeLinear`, `NodeLinear` and `GlobalLinear`, one line each):
#
# $$
# \begin{aligned}
# e'_k &= W_e e_k + W_s x_{s(k)} + W_r x_{r(k)} + W_u u_{g(k)} + b\\
# x'_i &= W_x x_i + W_{in} \operatorname{agg}_{k:\,r(k)=i} e_k + W_{out} \operatorname{agg}_{k:\,s(k)=i} e_k + W_u u_{g(i)} + b\\
# u'_g &= W_x \operatorname{agg}_{i \in g} x_i + W_e \operatorname{agg}_{k \in g} e_k + W_u u_g + b
# \end{aligned}
# $$
#
# where $\operatorname{agg}$ is a sum, a mean or a max, and every term is optional. Look at what
# each term is made of: $x_{s(k)}$ is a **copy** of a node's features onto each of its edges
# (`index_select`), $u_{g(k)}$ a copy of the globals onto every edge of the graph,
# $\operatorname{agg}$ a **scatter**, $W\cdot$ a **linear map**, and the whole right-hand side a
# **sum** of terms. Each has its relevance rule from the previous chapter:
#
# - the sum gives term $t$ of output $z = \sum_t z_t + b$ the share $R_t = \frac{z_t}{z} R_z$ (and the bias $\frac{b}{z} R_z$);
# - the linear map passes $R_t$ on by the epsilon rule, $R_j = \frac{a_j w_j}{z_t + \epsilon\,\mathrm{sign}(z_t)} R_t$;
# - a copy sums the relevance of its copies: a node used by five edges collects from all five;
# - a sum or mean aggregation splits in proportion to the aggregated values, a max gives all to the winner.
#
# Chaining them, with $\epsilon = 0$, the relevance of input feature $j$ of term $t$ is simply
# $\frac{a_j w_{j}}{z} R_z$: each input's contribution to the output over the output, whatever term
# it came through. That is LRP-0 applied to the whole update at once.
#
# Composing the ops is how we *teach* a layer, and it is what `compose_with_ops(layer, data)`
# builds. The library itself takes the last observation literally: inside the relevance mode each
# layer is **one** autograd function (`EdgeLinearRelevance`, `NodeLinearRelevance`,
# `GlobalLinearRelevance`) whose backward is the epsilon rule of the whole update seen as one
# linear map of all its inputs. With $s = R_z / (z + \epsilon\,\mathrm{sign}(z))$ per output unit,
# an input group receives its features times the transposed map applied to $s$, e.g.
# $R_e = e \odot (s\, W_e)$ for the edge term and $R_x = x \odot (\sum_{k:\,s(k)=i} s_k)\, W_s$ for
# the sender term (copies sum their $s$ first); an aggregation passes $s\,W$ back to each
# aggregated row (divided by the group size for a mean, to the winner only for a max), and the
# bias keeps $b\, s$. The function saves only the inputs, the index tensors and its own output
# (plus the argmax of a max), where the composition keeps every term of the sum: the same
# relevance at $\epsilon = 0$ (the tests check it for every configuration to $10^{-10}$) for a
# fraction of the memory. With $\epsilon > 0$ the stabiliser acts once, on the whole $z$, as in
# the epsilon rule of an ordinary linear layer.
#
# So `lrp_lib.teach.graph` implements each layer twice over the same parameters: from plain torch
# operations (and `lrp_lib.teach.scatter`) outside the relevance mode, as one relevance function inside it.
#
# ## An example graph
#
# Four nodes with 5 features, three edges with 3 features, 7 global features: the graph of the
# chapter's source notebook, as a PyG `Data`.

# %%
graph = Data(
    x=torch.rand(4, 5),
    edge_attr=torch.rand(3, 3),
    u=torch.rand(1, 7),
    edge_index=torch.tensor([[0, 2, 3],    # senders
                             [1, 0, 0]]),  # receivers
).to(device)
print(graph)

# %% [markdown]
# ## One model, two modes
#
# A layer reads `lrp_lib.teach.is_relevance_mode()` in its forward. Here is the same `EdgeLinear`,
# reading the edge and the global features, called outside and inside `with lrp_lib.teach.relevance():`.
# We print the names of the backward nodes that autograd recorded.

# %%
edge_layer = EdgeLinear(1, edge_features=3, global_features=7, bias=False).to(device)
# a copy whose x, edge_attr and u are leaves that require grad
inp = relevance_inputs(graph)

out_gradient = edge_layer(inp)
with lrp_lib.teach.relevance():
    out_relevance = edge_layer(inp)

names = leaf_names(edge_layer, inp)
print("outside the context:")
print(backward_graph(out_gradient.edge_attr.grad_fn, names))
print("\ninside the context:")
print(backward_graph(out_relevance.edge_attr.grad_fn, names))
print(
    "\nsame forward values:", torch.equal(out_gradient.edge_attr, out_relevance.edge_attr)
)

# %% [markdown]
# Outside, autograd records its own `MmBackward0`, `IndexSelectBackward0` and `AddBackward0`:
# `.backward()` gives true gradients and the layer trains like any `nn.Module`. Inside, the whole
# layer is recorded as one `EdgeLinearRelevanceBackward` node over the leaves it reads (the edge
# and global features, and the two weights, which receive no relevance; `None` is the index that
# copies the globals onto the edges). The forward values are identical, bit for bit. The mode is read during the *forward* pass: the
# backward can be called after the `with` block, and it is the recorded functions that decide
# what flows.
#
# The layer returned a new graph with `edge_attr` replaced; everything else is the same tensor
# objects as in the input, so relevance arriving at `out.x` would reach `inp.x` directly.
#
# ## Pushing relevance through every configuration
#
# We start each backward pass from the output itself, $R_{out} = z$ (the usual LRP start), and
# read the relevance with `read_relevance`, which sums `.grad` over the features per node, edge
# and graph, and totals it per group. The helper below prints one line per configuration: the
# relevance we started from, what reached nodes, edges and globals, the bias's share, and whether
# the input total equals the output total.
# A configuration names the inputs the layer reads: *send* and *recv* are the features of an edge's
# sender and receiver node, *in* and *out* a node's aggregated incoming and outgoing edges.

# %% tags=["hide-input"]
ATTR = {EdgeLinear: "edge_attr", NodeLinear: "x", GlobalLinear: "u"}


def explain(layer, data):
    """Relevance of one layer on ``data``, starting from its output: per-group totals."""
    layer.zero_grad(set_to_none=True)
    inp = relevance_inputs(data)
    with lrp_lib.teach.relevance():
        out = getattr(layer(inp), ATTR[type(layer)])
    out.backward(out.detach())
    totals = read_relevance(inp).totals()
    totals["out"] = float(out.detach().sum())
    totals["bias"] = float(layer.bias.grad.sum()) if layer.bias is not None else 0.0
    return totals


def report(layers, data):
    print(
        f"{'configuration':36s} {'R out':>7s} {'nodes':>7s} {'edges':>7s} {'globals':>7s}"
        f" {'bias':>7s}  conserved"
    )
    for name, layer in layers.items():
        t = explain(layer.to(device), data)
        ok = abs(t["total"] + t["bias"] - t["out"]) < 1e-4 * max(1.0, abs(t["out"]))
        print(
            f"{name:36s} {t['out']:7.3f} {t['nodes']:7.3f} {t['edges']:7.3f}"
            f" {t['globals']:7.3f} {t['bias']:7.3f}  {'yes' if ok else 'NO'}"
        )


# %% [markdown]
# ### EdgeLinear

# %%
torch.manual_seed(1)
report(
    {
        "edge": EdgeLinear(1, edge_features=3, bias=False),
        "edge + global": EdgeLinear(1, edge_features=3, global_features=7, bias=False),
        "edge + send + global": EdgeLinear(
            1, edge_features=3, sender_features=5, global_features=7, bias=False
        ),
        "edge + send + recv + global": EdgeLinear(1, 3, 5, 5, 7, bias=False),
        "edge + send + recv + global, bias": EdgeLinear(1, 3, 5, 5, 7, bias=True),
    },
    graph,
)

# %% [markdown]
# Without a bias the input relevance adds up to the output relevance in every configuration; it
# only moves between groups as inputs are switched on. Node 1 is never a sender, so with
# `sender_features` it receives nothing through that term. With the bias switched on, the bias
# takes its share $\frac{b}{z} R_z$ and the inputs get what is left: "conserved" counts the bias
# in. The teaching version of the full layer, built from ops, shows where each share travels:

# %%
full = EdgeLinear(1, 3, 5, 5, 7, bias=True, eps=0.0).to(device)
inp = relevance_inputs(graph)
with lrp_lib.teach.relevance():
    composed = compose_with_ops(full, inp).edge_attr
print(backward_graph(composed.grad_fn, leaf_names(full, inp)))

# %% [markdown]
# Read from the top: the last `AddRelevance` splits between the bias and everything before; each
# earlier `AddRelevance` splits off one term; each term is a `LinearEpsRelevance` of a leaf,
# behind an `IndexSelectRelevance` when it was copied onto the edges (sender, receiver, global).
# The `None` entries are the index arguments, which receive no relevance. The library's layer
# replaces this whole tree by one node and gives the same relevance (here with $\epsilon = 0$,
# where the two definitions coincide):

# %%
composed.backward(composed.detach())
by_ops = [inp[a].grad.clone() for a in ("x", "edge_attr", "u")] + [full.bias.grad.clone()]
full.zero_grad(set_to_none=True)
inp = relevance_inputs(graph)
with lrp_lib.teach.relevance():
    fused = full(inp).edge_attr
print(backward_graph(fused.grad_fn, leaf_names(full, inp)))
fused.backward(fused.detach())
by_layer = [inp[a].grad for a in ("x", "edge_attr", "u")] + [full.bias.grad]
difference = max(float((a - b).abs().max()) for a, b in zip(by_ops, by_layer))
print("composed ops and one function agree (float32, within 1e-6):", difference < 1e-6)

# %% [markdown]
# ### NodeLinear
#
# Incoming and outgoing edges are aggregated before their weight matrix, with each of the three
# aggregations.

# %%
torch.manual_seed(2)
report(
    {
        "node": NodeLinear(1, node_features=5, bias=False),
        "node + global": NodeLinear(1, node_features=5, global_features=7, bias=False),
        "node + in + global, sum": NodeLinear(
            1, 5, 3, None, 7, aggregation="sum", bias=False
        ),
        "node + in + out + global, sum": NodeLinear(
            1, 5, 3, 3, 7, aggregation="sum", bias=False
        ),
        "node + in + out + global, max": NodeLinear(
            1, 5, 3, 3, 7, aggregation="max", bias=False
        ),
        "node + in + out + global, mean": NodeLinear(
            1, 5, 3, 3, 7, aggregation="mean", bias=False
        ),
        "node + in + out + global, sum, bias": NodeLinear(
            1, 5, 3, 3, 7, aggregation="sum", bias=True
        ),
    },
    graph,
)

# %% [markdown]
# Node 0 receives two edges and nodes 2, 3 none, so their incoming aggregate is zero and that
# term is silent for them: an empty aggregation contributes nothing and receives nothing. With
# `max` only the winning edge of each feature receives relevance; with `sum` and `mean` every
# edge gets its proportional part (the two split the same way: a mean is a sum of the terms
# $e_k / n$).
#
# ### GlobalLinear
#
# Nodes and edges are aggregated per graph (edges by the graph of their sender).

# %%
torch.manual_seed(3)
report(
    {
        "global": GlobalLinear(1, global_features=7, bias=False),
        "node + global, sum": GlobalLinear(
            1, node_features=5, global_features=7, aggregation="sum", bias=False
        ),
        "node + edge + global, sum": GlobalLinear(
            1, 5, 3, 7, aggregation="sum", bias=False
        ),
        "node + edge + global, max": GlobalLinear(
            1, 5, 3, 7, aggregation="max", bias=False
        ),
        "node + edge + global, mean": GlobalLinear(
            1, 5, 3, 7, aggregation="mean", bias=False
        ),
        "node + edge + global, sum, bias": GlobalLinear(
            1, 5, 3, 7, aggregation="sum", bias=True
        ),
    },
    graph,
)

# %% [markdown]
# ## Batches, and a graph without edges
#
# PyG batches several graphs into one big disconnected graph; `batch` tells which node belongs
# to which graph and `u` has one row per graph. Relevance never crosses from one graph to
# another, because no operation mixes graphs. `per_graph()` adds up each graph's nodes, edges
# and globals, and it should equal the relevance of that graph's outputs. The second graph
# below has no edges at all.

# %%
torch.manual_seed(4)
small = [
    Data(
        x=torch.rand(n, 5),
        edge_attr=torch.rand(len(s), 3),
        u=torch.rand(1, 7),
        edge_index=torch.tensor([s, r], dtype=torch.long).view(2, -1),
    )
    for n, s, r in [
        (4, [0, 2, 3], [1, 0, 0]),
        (3, [], []),
        (5, [0, 1, 2, 3, 4], [1, 2, 3, 4, 0]),
    ]
]
batch = Batch.from_data_list(small).to(device)
layer = GlobalLinear(2, 5, 3, 7, aggregation="sum", bias=False).to(device)
inp = relevance_inputs(batch)
with lrp_lib.teach.relevance():
    out = layer(inp).u
out.backward(out.detach())
rel = read_relevance(inp)
print("relevance of each graph's outputs:", out.detach().sum(1).cpu().numpy())
print("relevance reaching each graph:    ", rel.per_graph().cpu().numpy())
print(
    "edge relevance of the edgeless graph:", rel.edge[rel.edge_graph == 1].cpu().numpy()
)

# %% [markdown]
# ## Training and explaining one deep Graph Network
#
# Now a deep model, as in the source notebook: an encoder, **one** hidden block applied three
# times (the same weights at every step, like the recurrent core of an encode-process-decode
# model {cite}`battaglia2018relational`), and a decoder to one number per graph. Every piece is an
# ordinary `nn.Module`, so we first train it with ordinary gradients: the task is to predict, for
# random graphs, the sum over edges of the product of their sender's and receiver's first
# feature, a quantity that needs edges, both endpoints and aggregation.

# %% tags=["train"]
def block(f_in_edge, f_in_node, f_in_global, f, aggregation):
    return nn.Sequential(
        EdgeLinear(
            f,
            edge_features=f_in_edge,
            sender_features=f_in_node,
            receiver_features=f_in_node,
            global_features=f_in_global,
        ),
        EdgeReLU(),
        NodeLinear(
            f,
            node_features=f_in_node,
            incoming_features=f,
            global_features=f_in_global,
            aggregation=aggregation,
        ),
        NodeReLU(),
        GlobalLinear(
            f,
            node_features=f,
            edge_features=f,
            global_features=f_in_global,
            aggregation="sum",
        ),
        GlobalReLU(),
    )


class DeepGN(nn.Module):
    def __init__(self, f=16):
        super().__init__()
        self.encoder = block(3, 5, 7, f, "sum")
        self.hidden = block(f, f, f, f, "max")          # one block, used three times
        self.decoder = GlobalLinear(
            1, node_features=f, edge_features=f, global_features=f, aggregation="sum"
        )

    def forward(self, data):
        data = self.encoder(data)
        for _ in range(3):
            data = self.hidden(data)
        return self.decoder(data)


def random_graph(gen):
    n = int(torch.randint(3, 9, (1,), generator=gen))
    m = int(torch.randint(0, 2 * n, (1,), generator=gen))
    edge_index = torch.randint(0, n, (2, m), generator=gen)
    x = torch.rand(n, 5, generator=gen)
    target = (x[edge_index[0], 0] * x[edge_index[1], 0]).sum().view(1, 1)
    return Data(
        x=x,
        edge_attr=torch.rand(m, 3, generator=gen),
        u=torch.rand(1, 7, generator=gen),
        edge_index=edge_index,
        y=target,
    )


def train_deep_gn(model, steps=101):
    """Full-batch Adam on the 256 training graphs, with ordinary gradients
    (outside the context)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in trange(steps, desc="training"):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(train).u, train.y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {
        "metrics": {
            "first_step_loss": losses[0],
            "middle_step_loss": losses[steps // 2],
            "last_step_loss": losses[-1],
        }
    }


gen = torch.Generator().manual_seed(0)
train = Batch.from_data_list([random_graph(gen) for _ in range(256)]).to(device)
torch.manual_seed(0)
model = DeepGN().to(device)
record = load_or_train("graph-layers-deep-gn", model, train_deep_gn)
m = record["metrics"]
print(
    f"mean squared error at steps 0, 50, 100: {m['first_step_loss']:.3f},"
    f" {m['middle_step_loss']:.3f}, {m['last_step_loss']:.3f}  ({record['source']}"
    " weights)"
)
print(f"target variance {train.y.var().item():.3f}")

# %% [markdown]
# The loss falls well below the variance of the target: the model has learned something about
# edges and their endpoints. Now we explain one of its predictions on the example graph. The
# model and its weights are unchanged; only the context differs. To check conservation to the
# last digit we explain a float64 copy with the stabiliser set to $\epsilon = 0$ (in float32
# with the default $\epsilon = 10^{-6}$ the totals agree to about $10^{-4}$).

# %%
exact = copy.deepcopy(model).double()
graph64 = graph.clone().apply(lambda t: t.double() if t.is_floating_point() else t)
for m in exact.modules():
    if isinstance(m, (EdgeLinear, NodeLinear, GlobalLinear)):
        m.eps = 0.0
inp = relevance_inputs(graph64)
with lrp_lib.teach.relevance():
    prediction = exact(inp).u
prediction.backward(prediction.detach())
rel = read_relevance(inp)
bias_share = sum(
    float(p.grad.sum()) for name, p in exact.named_parameters() if name.endswith("bias")
)
t = rel.totals()
print(f"prediction {prediction.item():.4f}")
print(
    f"nodes {t['nodes']:.4f}  edges {t['edges']:.4f}  globals {t['globals']:.4f}  biases"
    f" {bias_share:.4f}"
)
print(
    f"inputs + biases = {t['total'] + bias_share:.4f}, equal to the prediction within"
    f" 1e-12: {abs(t['total'] + bias_share - prediction.item()) < 1e-12}"
)
print("node relevance:", rel.node.cpu().numpy())
print("edge relevance:", rel.edge.cpu().numpy())

# %% [markdown]
# The relevance of the prediction is fully accounted for: what the inputs received plus what the
# biases of all thirteen linear-layer applications took adds up to the prediction, through ReLUs, max
# aggregations and a block applied three times. The shared block needs no special care: each
# application is recorded separately by autograd, and relevance flows back through the three
# copies in turn. (The biases of the hidden block accumulate their share over the three
# applications in the same `.grad`.)
#
# Switch the biases off (a different function now, but the same wiring) and the inputs receive
# everything:

# %%
for m in exact.modules():
    if isinstance(m, (EdgeLinear, NodeLinear, GlobalLinear)):
        m.bias = None
inp = relevance_inputs(graph64)
with lrp_lib.teach.relevance():
    out = exact(inp).u
out.backward(out.detach())
t = read_relevance(inp).totals()
print(
    f"output {out.item():.4f}   inputs {t['total']:.4f}   equal within 1e-12:"
    f" {abs(out.item() - t['total']) < 1e-12}"
)

# %% [markdown]
# ## Drawing the explanation
#
# `lrp_lib.book.plotting.draw_graph` draws a graph with networkx and matplotlib, nodes and edges
# coloured by relevance on a diverging colormap centred at zero (red: evidence for the output,
# blue: against, white: none). Nodes and edges share one scale.

# %%
inp = relevance_inputs(graph)
with lrp_lib.teach.relevance():
    prediction = model(inp).u
prediction.backward(prediction.detach())
rel = read_relevance(inp)
fig, ax = plt.subplots(figsize=(5, 4))
pos = {0: (0.0, 0.0), 1: (1.0, 0.6), 2: (-1.0, 0.6), 3: (0.0, -1.0)}
draw_graph(graph.cpu(), node_relevance=rel.node, edge_relevance=rel.edge, pos=pos, ax=ax,
           label="relevance of the prediction (LRP, summed over features)",
           title=f"prediction {prediction.item():.3f}")
plt.show()

# %% [markdown]
# The target depends on each edge's two endpoints, and the picture shows where the model puts
# the responsibility for this graph: node 0, which receives both edges $2 \to 0$ and $3 \to 0$
# (and sends $0 \to 1$), collects relevance through all three, and nodes 2 and 3 through their
# edge. The edge features themselves were noise for the task; whatever relevance they hold is the
# model's use of that noise, and a colour close to white says it is small. Node relevance here is
# the sum over a node's five features: a node can be red overall while one of its features
# argues against the output.
#
# ## What it costs
#
# Built from ops, a layer's relevance rules need the values of the forward pass (each term of a
# sum, each output of a linear map): an `EdgeLinear` with four inputs keeps about seven
# edges-by-features tensors for its backward where the gradient keeps one. That is why the library
# fuses each layer into one function, which keeps only its output beyond what is alive anyway. The
# benchmark `benchmarks/bench_graph.py` measures a four-block Graph Network with 64 features on one
# graph of 100,000 nodes and 1,000,000 edges on the CPU, the relevance mode against the gradient
# of the same model, side by side in one process. Its results file is read here; the
# [Performance](performance.ipynb) page has the details.

# %% tags=["hide-input"]
from myst_nb import glue
from IPython.display import Markdown, display
from lrp_lib.book.results import load_results, machine_note, results_table

graph_bench = load_results("graph")
display(Markdown(machine_note(graph_bench)))
ratio = {row["measure"]: row["ratio"] for row in graph_bench["results"]}
glue("graph_backward_ratio", f"{ratio['backward_time']:.2f}", display=False)
glue("graph_forward_ratio", f"{ratio['forward_time']:.2f}", display=False)
glue("graph_saved_ratio", f"{ratio['saved_for_backward']:.2f}", display=False)
glue("graph_peak_ratio", f"{ratio['peak_rss_increase']:.2f}", display=False)
results_table(
    graph_bench["results"],
    [
        ("measure", "label"),
        ("unit", "unit"),
        ("gradient", "gradient", "{:,.1f}"),
        ("relevance", "relevance", "{:,.1f}"),
        ("relevance / gradient", "ratio", "{:.2f}x"),
    ],
)

# %% [markdown]
# Measured so, the relevance backward took {glue:text}`graph_backward_ratio` times as long as the
# gradient backward, and the peak memory of forward and backward together was
# {glue:text}`graph_peak_ratio` times the gradient's. Between forward and backward autograd keeps
# {glue:text}`graph_saved_ratio` times the bytes, because each layer keeps its output $z$, the
# denominator of the rule, which the gradient does not need. Composed from ops instead, every layer
# would also keep each term of its sum.
#
# The forward row points the other way: the relevance forward took
# {glue:text}`graph_forward_ratio` times as long as the gradient's, although both compute the
# same values. Relevance is not cheaper here; the two forwards are built differently. The fused
# function runs with autograd off and adds each term into one output tensor in place. The
# gradient path is a chain of ordinary differentiable operations that autograd records, and each
# `+` of it returns a new edges-by-features tensor, fresh memory that the operating system has to
# hand out and fill with zeros first. The cell below counts, in one block of the benchmark's model
# on a small graph, the torch calls that return a new tensor of the edges' shape: the gradient
# forward makes {glue:text}`fresh_gradient` of them, the relevance forward
# {glue:text}`fresh_relevance`; the difference is the additions. In the benchmark each such tensor
# holds {glue:text}`edge_tensor_mib` MiB. The forward row measures that allocation, not a cost of
# the gradient or a saving of relevance: with in-place additions the two forwards would be alike.

# %% tags=["hide-input"]
from torch.overrides import TorchFunctionMode  # noqa: E402


class NewEdgeTensors(TorchFunctionMode):
    """Counts the torch calls that return a new float tensor of the edges' shape."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.calls = tuple(shape), []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        inputs = [a.untyped_storage().data_ptr() for a in tensors]
        if (
            isinstance(out, torch.Tensor)
            and tuple(out.shape) == self.shape
            and out.is_floating_point()
            and out.untyped_storage().data_ptr() not in inputs  # not in place, not a view
        ):
            self.calls.append(getattr(func, "__name__", str(func)))
        return out


f = 8
torch.manual_seed(0)
# the benchmark's block (benchmarks/bench_graph.py), with 8 features
one_block = nn.Sequential(
    EdgeLinear(
        f, edge_features=f, sender_features=f, receiver_features=f, global_features=f
    ),
    EdgeReLU(),
    NodeLinear(
        f, node_features=f, incoming_features=f, global_features=f, aggregation="sum"
    ),
    NodeReLU(),
    GlobalLinear(
        f, node_features=f, edge_features=f, global_features=f, aggregation="sum"
    ),
    GlobalReLU(),
)
small = Data(
    x=torch.randn(30, f, requires_grad=True),
    edge_attr=torch.randn(100, f, requires_grad=True),
    edge_index=torch.randint(0, 30, (2, 100)),
    u=torch.randn(1, f, requires_grad=True),
)
fresh = {}
for mode in ("gradient", "relevance"):
    counter = NewEdgeTensors(small.edge_attr.shape)
    with lrp_lib.teach.relevance(mode == "relevance"), counter:
        one_block(small)
    fresh[mode] = counter.calls
    print(f"{mode} forward: {len(counter.calls)} new edges-by-features tensors, from")
    print("   ", ", ".join(counter.calls))
glue("fresh_gradient", str(len(fresh["gradient"])), display=False)
glue("fresh_relevance", str(len(fresh["relevance"])), display=False)
settings = graph_bench["settings"]
edge_tensor = settings["edges"] * settings["features"] * 4  # float32: 4 bytes
glue("edge_tensor_mib", f"{edge_tensor / 2**20:,.0f}", display=False)

# %% [markdown]
# ## Summary
#
# - A Graph Network layer is a sum of linear maps of copied and aggregated features. Building it
#   from relevance ops makes one backward pass an LRP explanation of nodes, edges and globals at
#   once, for any wiring, with no layer-specific rule.
# - Composing ops is the teaching version; the library fuses each layer into one relevance function,
#   the epsilon rule of the whole update as one linear map. At $\epsilon = 0$ both give the same
#   relevance, but the fused function keeps only its inputs and output for the backward.
# - The same layer objects train with true gradients and explain with relevance: the mode is chosen
#   by `with lrp_lib.teach.relevance():` during the forward pass, and the forward values are identical.
# - Without biases, relevance is conserved exactly (up to the epsilon stabiliser), per group and
#   per graph, through aggregations, ReLUs and a block applied several times. A bias takes the
#   share $b/z$ of each output's relevance.
# - Copies sum relevance (a node used by many edges collects from all of them); sum and mean
#   aggregations split in proportion, max gives everything to the winner; empty aggregations
#   (a node without incoming edges, a graph without edges) contribute and receive nothing.
#
# ## Exercises
#
# 1. Prove that, with $\epsilon = 0$, chaining the proportional rule of the sum and the LRP-0 rule
#    of each weight matrix gives input feature $j$ of term $t$ the relevance $a_j w_j R_z / z$,
#    the same as treating the whole update as one linear layer over the concatenated inputs.
# 2. In the `NodeLinear` table, the `max` and `sum` rows send different amounts to the edges. Using
#    `backward_graph` on `compose_with_ops(layer, data)`, find the op responsible and explain, for
#    one node, which edge wins.
# 3. Set `eps=0.1` in an `EdgeLinear` without a bias. How much relevance is lost, and which outputs
#    lose the most? Relate it to the size of $z$. Then compare with `compose_with_ops`, where the
#    stabiliser acts on every term $z_t$ instead: which loses more, and why?
# 4. Add a `NodeLinear` that reads only `incoming_features` to a graph whose node 3 has no incoming
#    edge, start the backward from `torch.ones_like(out)`, and explain the `LostRelevanceWarning`.
# 5. Write an element-wise layer `ElementWise("x", torch.tanh, relevance_fn=...)` whose relevance
#    passes through unchanged (like the ReLU rule), and check conservation through it.
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
