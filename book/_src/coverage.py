# %% [markdown]
# # Which PyG models can be explained
#
# `LRPExplainer` is meant for unmodified PyTorch Geometric models: the model you trained, passed as
# it is to PyG's `Explainer`. Which models is that? This page answers with a measurement rather than a
# list of promises. The script `benchmarks/bench_coverage.py` builds every convolution layer in
# `torch_geometric.nn.conv` and the message-passing models of `torch_geometric.nn.models` (the
# `basic_gnn` models GCN, GraphSAGE, GIN, GAT, PNA and EdgeCNN with jumping knowledge and
# normalisation options, and others), plus a residual model, a model with a sigmoid output and
# heterogeneous models, explains each one, and checks every explanation automatically. Everything
# below is read from the file it writes, `benchmarks/results/coverage.json`.

# %% tags=["hide-input"]
import re
import warnings

warnings.filterwarnings(
    "ignore", message="IProgress not found"
)  # tqdm, imported by torch_geometric
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from IPython.display import display
from myst_nb import glue
from torch import nn
from torch_geometric.explain import Explainer
from torch_geometric.nn import GCNConv, global_add_pool

from lrp_lib import LRPExplainer
from lrp_lib.book.results import load_results, results_table
from lrp_lib.core.rules import Epsilon

cov = load_results("coverage")
rows = cov["results"]["rows"]
STATUSES = ("ok", "refused", "wrong", "crash", "skipped")
glue("coverage_tol", f"{cov['results']['tolerance']:.0e}", display=False)

# %% [markdown]
# ## How an explanation is checked
#
# Every layer is built with small sizes (four input features, four hidden channels, a few heads),
# in float64, with **every bias set to zero**, and explained with the z-rule, LRP-0
# (`LRPExplainer(rule=Epsilon(0.0))`), at two task levels on a batch of two small graphs: **graph**
# (layer, ReLU, `global_add_pool`, a linear head; the models pool with `global_mean_pool`) and
# **node** (layer, ReLU, a linear head; one node's output is explained). A layer that takes edge
# features is explained with and without `edge_attr`. Two properties must hold:
#
# 1. **Conservation.** Without biases nothing absorbs relevance, so the relevance of the node features
#    (plus that of `edge_attr`, when the explanation reports it) must add up to the explained output,
#    within {glue:text}`coverage_tol` relative to the output.
# 2. **LRP-0 is input times gradient for piecewise-linear models.** A network of linear maps, sums,
#    ReLUs and max-aggregations without biases is linear on each of the regions cut out by its kinks:
#    there, every layer's output is its Jacobian times its input, and LRP-0's proportional split of
#    each linear map reproduces $x \odot \partial y / \partial x$ layer by layer. So for such a model the
#    node relevance (the explanation's signed `node_relevance`, not its `node_mask`, which holds
#    $|R| / \max |R|$ for PyG's tools) must equal $x \odot \nabla_x y$, computed by plain autograd on the unmodified
#    model, within the same tolerance. Whether a model is piecewise linear is decided automatically:
#    it must be positively homogeneous, $f(a x) = a f(x)$ for $a > 0$ (checked for two values of $a$
#    on the random inputs), and its gradient must not change when the input moves by a tiny random
#    step. The second test separates, for example, AGNN's attention, which depends on cosines only
#    and is therefore homogeneous, from truly piecewise-linear layers.
#
# An explanation that passes both checks is **ok**; one that fails either is **wrong**, with the
# measured error. An explainer that raises `UnsupportedModelError`, `ValueError` or `TypeError` with
# a message has **refused**: no explanation, but no wrong one either. Any other exception is a
# **crash**, a failure of the library. Layers that cannot be built generically (they need node
# positions, a hypergraph, CUDA-only kernels or packages that are not installed) are **skipped**, each
# with its reason.
#
# Here are both checks by hand on a small GCN. Its node relevance sums to the output and equals
# input times gradient; a sigmoid after the same network makes it non-homogeneous, so input times
# gradient no longer conserves the output, while LRP, where the explainer accepts the model, still
# must.

# %%
torch.manual_seed(0)
x = torch.randn(6, 4, dtype=torch.float64)
edge_index = torch.tensor(
    [[0, 1, 1, 2, 3, 4, 4, 5, 5, 0], [1, 0, 2, 1, 4, 3, 5, 4, 0, 5]]
)


class TinyGCN(nn.Module):
    def __init__(self, sigmoid=False):
        super().__init__()
        self.conv, self.head, self.sigmoid = (
            GCNConv(4, 4, bias=False),
            nn.Linear(4, 1, bias=False),
            sigmoid,
        )

    def forward(self, x, edge_index):
        out = self.head(global_add_pool(F.relu(self.conv(x, edge_index)), None))
        return torch.sigmoid(out) if self.sigmoid else out


def input_times_gradient(model):
    leaf = x.clone().requires_grad_(True)
    out = model(leaf, edge_index).sum()
    out.backward()
    return float(out.detach()), leaf.detach() * leaf.grad


for sigmoid in (False, True):
    model = TinyGCN(sigmoid).double().eval()
    y, xg = input_times_gradient(model)
    print(
        f"sigmoid={sigmoid}: x*grad sums to the output: {abs(float(xg.sum()) - y) < 1e-8}"
    )
    explainer = Explainer(
        model,
        algorithm=LRPExplainer(rule=Epsilon(0.0)),
        explanation_type="model",
        node_mask_type="attributes",
        edge_mask_type=None,
        model_config=dict(mode="regression", task_level="graph", return_type="raw"),
    )
    try:
        relevance = explainer(x, edge_index).node_relevance
    except (TypeError, ValueError) as err:
        print(f"  LRPExplainer refuses: {type(err).__name__}")
        continue
    print(
        f"  LRP-0 relevance sums to the output: {abs(float(relevance.sum()) - y) < 1e-8}"
    )
    if not sigmoid:
        print(
            "  LRP-0 relevance equals x*grad:"
            f" {bool((relevance - xg).abs().max() < 1e-8)}"
        )

# %% [markdown]
# `bench_coverage.py` runs these checks through its function `check`, and its tests make sure that
# the checks can fail: an explainer whose relevance is
# doubled, one that returns the bare gradient, input times gradient through a sigmoid, and one that
# spreads the output evenly over the nodes (it conserves, but is not LRP-0 on a piecewise-linear
# model) are all classified *wrong*.
#
# ## The result at a glance

# %% tags=["hide-input"]
def short(reason, width=110):
    reason = reason.split(" Supported: ")[0].replace("UnsupportedModelError: ", "")
    reason = re.sub(r" \(relevance of magnitude [^)]*\)", "", reason)
    return reason if len(reason) <= width else reason[:width - 3] + "..."


count = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
for s in STATUSES:
    glue(f"rows_{s}", str(count[s]), display=False)
glue("rows_total", str(len(rows)), display=False)

layers = {}
for r in rows:
    layers.setdefault(r["layer"], []).append(r)


def verdict(layer_rows):
    statuses = {r["status"] for r in layer_rows}
    if statuses == {"ok"} or statuses == {"skipped"}:
        return statuses.pop()
    for s in ("crash", "wrong", "refused"):
        if s in statuses:
            return s
    return "ok"


per_layer = {name: verdict(lr) for name, lr in layers.items()}
glue("layers_total", str(len(per_layer)), display=False)
for s in STATUSES:
    glue(f"layers_{s}", str(sum(v == s for v in per_layer.values())), display=False)

walk_rows = [r for r in rows if r.get("walks") not in (None, "n/a")]
glue("walks_checked", str(len(walk_rows)), display=False)
for w in ("ok", "refused", "wrong", "crash"):
    glue(f"walks_{w}", str(sum(r["walks"] == w for r in walk_rows)), display=False)
summary = [
    {"status": s, "rows": count[s], "layers": sum(v == s for v in per_layer.values()),
     "walks": sum(r.get("walks") == s for r in rows) if s != "skipped" else None}
    for s in STATUSES
]
display(
    results_table(
        summary,
        [
            ("status", "status"),
            ("explanations (rows)", "rows", "{:d}"),
            ("layers and models (worst row)", "layers", "{:d}"),
            ("walks of the ok rows", "walks", "{:d}"),
        ],
    )
)

# %% [markdown]
# Of the {glue:text}`rows_total` explanations (a layer or model at one task level, with or without
# `edge_attr`), {glue:text}`rows_ok` are ok, {glue:text}`rows_refused` are refused,
# {glue:text}`rows_wrong` are wrong, {glue:text}`rows_crash` crash and {glue:text}`rows_skipped` are
# skipped. Counted per layer or model, where one refused or wrong row counts for the whole layer,
# {glue:text}`layers_ok` of {glue:text}`layers_total` are ok everywhere; of the others, refused
# somewhere: {glue:text}`layers_refused`, wrong somewhere: {glue:text}`layers_wrong`, crashing:
# {glue:text}`layers_crash`; and {glue:text}`layers_skipped` could not be built generically.
#
# `LRPExplainer` runs the unmodified model and sends every torch function on an input-dependent
# tensor to a relevance rule, so it needs no list of layers; what it cannot handle it refuses,
# naming the operation and the module.
#
# In the tables below, *graph* and *node* give the outcome at each task level, without `edge_attr`
# and then with it where the layer takes it (*edge_attr: ok*; a dash: the layer is not built at that
# level; *wrong (warned)*: the explainer issued a warning that relevance was lost; *wrong
# (accounted)*: the explanation reports the missing relevance as a separate number, such as the
# share of constant terms inside the model); *walks* is the outcome of the relevant walks of the same
# model (below); *piecewise linear* says whether the explanation was also compared with input times
# gradient; *reason* is the first message of a refused, wrong or crashed row.
#
# **Walks.** Every ok explanation is checked once more through `lrp_lib.explain.walks` (GNN-LRP, see
# [Relevant walks](08_relevant_walks.ipynb)): all walks of the same model under the same rule are
# enumerated, each gets its relevance, and the walks are summed by their start node; the sums must
# equal `LRPExplainer`'s node relevance within {glue:text}`coverage_tol` (relative). At the graph level the
# walks explain the batch's first graph on its own, beside `LRPExplainer`'s explanation of that
# graph alone. On a heterogeneous graph a walk is a sequence of typed nodes, each step along an edge
# of one edge type (the relations of one layer make one step), and the sums are compared per node
# type. Of the {glue:text}`walks_checked` ok explanations, the walks of {glue:text}`walks_ok` agree,
# {glue:text}`walks_refused` are refused, {glue:text}`walks_wrong` are wrong and
# {glue:text}`walks_crash` crash. A walk is refused where it is not
# defined: where relevance moves between nodes outside message passing (a normalisation over all the
# nodes of a graph, attention over all nodes after the last layer of a node-level model), or where a
# layer passes messages into another node set (pooling, a readout node). The reason names the layer.

# %% tags=["hide-input"]
LEVELS = ("graph", "node")
WALK_ORDER = ("crash", "wrong", "refused", "n/a", "ok")


def cell(lr, level):
    """The outcome at one task level: without edge_attr, then with it (where the layer takes it)."""
    parts = []
    for ea in (False, True):
        hit = [r for r in lr if r["level"] == level and r["edge_attr"] == ea]
        if not hit:
            continue
        r = hit[0]
        notes = (
            []
            if r["status"] != "wrong"
            else ["accounted"] * bool(r.get("accounted")) + ["warned"] * bool(r.get("warnings"))
        )
        text = r["status"] + (f" ({', '.join(notes)})" if notes else "")
        parts.append(f"edge_attr: {text}" if ea else text)
    return " · ".join(parts) or None


def walks_verdict(lr):
    """The walks of a layer's ok rows: the worst outcome, or None where none was checked."""
    found = {r.get("walks") for r in lr if r.get("walks")}
    return next((w for w in WALK_ORDER if w in found), None)


def layer_table(family):
    out = []
    for name, lr in layers.items():
        if lr[0]["family"] != family or per_layer[name] == "skipped":
            continue
        kwargs = lr[0]["kwargs"]
        setting = "" if not kwargs else f" {kwargs}" if kwargs.startswith("(") else f" ({kwargs})"
        entry = {"layer": f"`{name}`" + setting}
        for level in LEVELS:
            entry[level] = cell(lr, level)
        entry["walks"] = walks_verdict(lr)
        pl = {r.get("piecewise_linear") for r in lr if r["status"] in ("ok", "wrong")}
        entry["piecewise linear"] = ("yes" if pl == {True} else "no" if pl == {False} else
                                     "partly" if pl - {None} else None)
        bad = [r for r in lr if r["status"] in ("refused", "wrong", "crash")]
        bad_walks = [r for r in lr if r.get("walks") in ("refused", "wrong", "crash")]
        entry["reason"] = (short(bad[0]["reason"], 150) if bad else
                           "walks: " + short(bad_walks[0]["walks_reason"], 150) if bad_walks else "")
        out.append(entry)
    glue(f"{family}_total", str(len(out)), display=False)
    glue(f"{family}_ok", str(sum(per_layer[n] == "ok" for n, lr in layers.items()
                                 if lr[0]["family"] == family)), display=False)
    return results_table(out, [("layer (constructor arguments)", "layer"), ("graph", "graph"),
                               ("node", "node"), ("walks", "walks"),
                               ("piecewise linear", "piecewise linear"), ("reason", "reason")])


tables = {
    family: layer_table(family)
    for family in ("conv", "aggregation", "primitive", "attention", "model", "hetero")
}

# %% [markdown]
# ## Convolution layers
#
# The layers built from linear maps, gathers of neighbour features, sums, means and maxima over
# neighbours, normalisation coefficients that depend on the graph only, and elementwise
# nonlinearities: GCN and its relatives (Chebyshev, TAG, SG, SSG, APPNP, ARMA, LightGCN's LGConv,
# MixHop), GraphSAGE, GIN and GINE, GraphConv, PNA's several aggregators, EdgeConv's pairwise messages,
# NNConv's edge-conditioned weights (a product of an edge network's output and the neighbour
# features) and the rest. {glue:text}`conv_ok` of the {glue:text}`conv_total` built here are ok at
# every task level.

# %% tags=["hide-input"]
display(tables["conv"])

# %% [markdown]
# ## Aggregations, readouts and layer options
#
# The same layers with other choices: every aggregation that PyG names by a string (mean, max, min,
# product, standard deviation, variance, softmax, power mean, median; on `SimpleConv`, which has no
# weights), an LSTM and a list of aggregations in GraphSAGE, GraphSAGE with projection and
# normalised output, GAT averaging its heads, GIN with a non-zero epsilon, layers called with
# `edge_weight`, and graph-level readouts other than a sum (a maximum, gated attention, Set2Set's
# LSTM, sorting the top nodes, several aggregations at once). {glue:text}`aggregation_ok` of the
# {glue:text}`aggregation_total` are ok at every task level.

# %% tags=["hide-input"]
display(tables["aggregation"])

# %% [markdown]
# ## Single operations
#
# To see which operation a failing layer trips on, the script also puts single operations after one
# GCN layer: a residual sum, a concatenation, products (a square, sigmoid gates, the `1 - z` gate of
# GRU cells), elementwise functions, softmax used as a value rather than as attention weights,
# normalisations, a maximum over features, a self-attention over all nodes and a division.
# {glue:text}`primitive_ok` of the {glue:text}`primitive_total` are ok at both task levels.

# %% tags=["hide-input"]
display(tables["primitive"])

# %% [markdown]
# ## Attention and gated layers
#
# These layers weigh messages by scores computed from the features themselves: a softmax over each
# node's incoming edges (GAT, GATv2, Transformer, SuperGAT, RGAT, HEAT, AGNN's cosine attention,
# DNA), soft assignments (FeaSt), sigmoid or tanh gates (ResGated, CGConv, FAConv) and a global
# multi-head attention (GPS). None of them is piecewise linear, so only conservation is checked.
# {glue:text}`attention_ok` of the {glue:text}`attention_total` are ok at every task level.

# %% tags=["hide-input"]
display(tables["attention"])

# %% [markdown]
# ## Models, with jumping knowledge and normalisation
#
# PyG's ready-made models stack several layers with activations between them and add options:
# `jk="cat"`, `"max"` or `"lstm"` combines the outputs of all layers (concatenation, an elementwise
# maximum, or an LSTM-based attention over the layers), and `norm=` inserts batch, layer or graph
# normalisation after each layer. Batch normalisation in eval mode is a fixed affine map (linear
# here, with its bias zero and the running mean of a fresh layer); layer and graph normalisation
# divide by a standard deviation computed from the features, so they are not piecewise linear. The table also holds a residual model
# (`x + conv(x)`, twice), the sigmoid output of the example above, and other models from
# `torch_geometric.nn.models` that pass messages. {glue:text}`model_ok` of the
# {glue:text}`model_total` are ok at every task level.

# %% tags=["hide-input"]
display(tables["model"])

# %% [markdown]
# ## Heterogeneous models
#
# A heterogeneous model takes a dictionary of node feature matrices and one of edge indices: a
# homogeneous model converted with `to_hetero` (one copy of each layer per edge type, summed per
# node type), `HeteroConv` with a different layer per edge type, and the natively heterogeneous
# HGT and HAN layers. Here two node types with four and three features and three edge types; the
# explained output is one node of the first type, or the sum over both types of their pooled
# outputs, and conservation is over the relevance of both types. {glue:text}`hetero_ok` of the
# {glue:text}`hetero_total` are ok at every task level. `LRPExplainer` returns a `HeteroExplanation`
# with the signed relevance per node type (`node_relevance`) and per edge type (`edge_relevance`),
# and beside each the mask PyG's tools read ($|R| / \max |R|$ over all types). The edge relevance needs each
# layer's messages to belong to input edges: a layer passes them along one of the input's `edge_index`
# tensors, along one edge type's edges with self-loops added (a `GCNConv` inside `HeteroConv`; the loops'
# relevance stays with their nodes), or, as HGT does, along all edge types joined into one index, each
# shifted by its node types' offsets (checked block by block against the input's).

# %% tags=["hide-input"]
display(tables["hetero"])

# %% [markdown]
# ## What is refused or fails
#
# Every layer or model with at least one row that is not ok, with the first message. A refusal names
# the operation and the module where relevance could not go on; a crash is a bug of the library. A
# wrong row is the worst outcome: the explainer returned relevance of the inputs that does not add
# up to the output. Marked *accounted*, the explanation says where the rest went, in numbers it
# reports besides the masks (the share of constant terms inside the model, which take part of a sum
# as a bias does, or relevance that an operation's rule does not conserve); marked *warned*, a
# warning says that relevance was lost; otherwise nothing says so. The single operations above show which operation such a layer trips on.
# Each refused or crashed row is explained once more without edge relevance (`edge_mask_type=None`);
# *node relevance alone* is the outcome of that second try.

# %% tags=["hide-input"]
failing = [
    {
        "layer": f"`{name}`",
        "outcome": per_layer[name],
        "rows": ", ".join(
            f"{r['level']}{' + edge_attr' if r['edge_attr'] else ''}: {r['status']}"
            for r in lr
            if r["status"] != "ok"
        ),
        "alone": ", ".join(
            sorted(
                {r["without_edge_mask"]["status"] for r in lr if "without_edge_mask" in r}
            )
        ),
        "reason": short(
            next(r["reason"] for r in lr if r["status"] in ("refused", "wrong", "crash")),
            400,
        ),
    }
    for name, lr in layers.items()
    if per_layer[name] in ("refused", "wrong", "crash")
]
display(
    results_table(
        failing,
        [
            ("layer", "layer"),
            ("outcome", "outcome"),
            ("rows", "rows"),
            ("node relevance alone", "alone"),
            ("reason", "reason"),
        ],
    )
)

# %% [markdown]
# ## What was skipped
#
# Every name in `torch_geometric.nn.conv.__all__` and `torch_geometric.nn.models.__all__` is in the
# script's table; what could not be built and explained generically is listed here with the reason,
# rather than left out silently.

# %% tags=["hide-input", "hide-output"]
skipped = [
    {
        "layer": f"`{name}`",
        "family": lr[0]["family"],
        "reason": short(lr[0]["reason"], 140),
    }
    for name, lr in layers.items()
    if per_layer[name] == "skipped"
]
display(
    results_table(skipped, [("name", "layer"), ("kind", "family"), ("reason", "reason")])
)

# %% [markdown]
# ## Reproducing the table
#
# ```bash
# python benchmarks/bench_coverage.py                    # everything, writes benchmarks/results/coverage.json
# python benchmarks/bench_coverage.py --only GATConv,PNA # a few names (see --list), writes nothing
# ```
#
# The script runs in well under three minutes on one CPU thread. Its constructor table (`CONVS`,
# `AGGREGATIONS`, `PRIMITIVE_FNS`, `MODELS`, `HETERO`) is the place to add a layer; a layer that PyG adds to `__all__` and the table
# lacks is reported at the start of the run and fails the benchmark's tests.
