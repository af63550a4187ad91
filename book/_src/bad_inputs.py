# %% [markdown]
# # Errors you may meet, and what to do
#
# An explanation is read by someone who trusts it. A heat map computed from a NaN feature, from an
# `edge_index` that points past the last node, or from a batch whose graphs share edges still looks
# like a heat map: nothing on it says that it is wrong. So every public entry point of `lrp_lib`
# checks what it is given and refuses, with a message that names the argument and says how to fix
# it, whatever it cannot explain correctly. This page shows the messages you are most likely to
# meet, what each means and what to do, and then the whole catalogue of bad inputs with the outcome
# of each.
#
# ## The three you are most likely to meet
#
# **A bad input.** A transposed `edge_index`, integer features, a NaN: the message names the
# argument and the fix. PyG's `Explainer` runs the model once before it calls the explanation
# algorithm, so use `lrp_lib.Explainer` (PyG's class, checking the inputs first) to get that message
# rather than an error from deep inside PyG's message passing.

# %% tags=["remove-cell"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook notice, via PyG

# %%
import textwrap

import torch
from torch_geometric.nn import GCNConv

from lrp_lib import Explainer, LRPExplainer


class Model(torch.nn.Module):
    def __init__(self, activation=torch.relu, detach=False):
        super().__init__()
        self.conv = GCNConv(3, 8)
        self.head = torch.nn.Linear(8, 2)
        self.activation, self.detach = activation, detach

    def forward(self, x, edge_index):
        h = self.activation(self.conv(x, edge_index))
        if self.detach:  # half of the hidden channels cut off from x
            h = torch.cat([h[:, :4], h[:, 4:].detach()], dim=1)
        return self.head(h)


def show(kind, message):
    """The message as it reads, wrapped to the page."""
    print(textwrap.fill(f"{kind}: {message}", width=88, subsequent_indent="    "))


def explainer_of(model):
    config = dict(mode="multiclass_classification", task_level="node", return_type="raw")
    return Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=config)


x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
torch.manual_seed(0)
model = Model().eval()
try:
    explainer_of(model)(x, edge_index.t(), index=1)
except ValueError as error:
    show(type(error).__name__, error)

# %% [markdown]
# **An operation without a rule.** `LRPExplainer` runs your model's own `forward` and gives every
# torch function it calls a relevance rule. A function it has no rule for is not guessed at: if
# relevance reaches it, the explanation is refused, naming the function and the module. Rewrite that
# step with supported operations ([Which PyG models can be explained](coverage.ipynb) lists what is
# covered), or explain that model with a gradient method.

# %%
torch.manual_seed(0)
model = Model(activation=torch.special.erf).eval()
try:
    explainer_of(model)(x, edge_index, index=1)
except Exception as error:
    show(type(error).__name__, error)

# %% [markdown]
# **Relevance that does not arrive.** A `.detach()` in the model cuts the path relevance would take
# back to the inputs. The rest of the output can still be explained, so this is a warning, not an
# error, and it says how much was lost. If the detach is not meant, remove it; if it is, read the
# explanation as covering only the part that arrived.

# %%
torch.manual_seed(0)
model = Model(detach=True).eval()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    explainer_of(model)(x, edge_index, index=1)
for w in caught:
    show(w.category.__name__, w.message)
assert [w.category.__name__ for w in caught] == ["LostRelevanceWarning"]

# %% [markdown]
# ## The catalogue
#
# A catalogue of bad or unusual inputs, kept with the library's benchmarks, holds the kind a new
# user passes: NaN and Inf features, transposed or out-of-range `edge_index`, integer features,
# empty graphs, inconsistent batches, invalid targets and rule parameters, a `.detach()` inside the
# model, int32 indices. It calls the public entry points with each (`LRPExplainer` through PyG's
# `Explainer` on GCN, GIN, GraphConv and GraphSAGE models and on a heterogeneous graph, the walk queries'
# `WalkModel`, `explain_tensor` for models without a graph, the relevance ops, the rules and the Graph
# Network layers) and sorts the outcome automatically:
#
# - **clear error**: an exception (or, where a partial result is returned, a warning) whose message
#   names the argument at fault;
# - **works**: a result that passes the case's check, against a reference or by conservation of
#   relevance;
# - **silently wrong**: a result with NaN or Inf, or one that fails the check, with no such message;
# - **obscure crash**: any other exception, typically from deep inside torch or PyG.
#
# Everything below is read from the catalogue's results, and the library's test suite runs the same
# catalogue.

# %% tags=["hide-input"]
from IPython.display import display
from myst_nb import glue

from lrp_lib.book.results import load_results, results_table

# defined by the Colab cell; elsewhere the file is found locally
run = load_results("bad_inputs")["results"]["after"]
CLASSES = ("clear error", "works", "silently wrong", "obscure crash")
glue("cases", str(len(run["cases"])), display=False)
for k in CLASSES:
    glue(k.replace(" ", "_"), str(run["counts"][k]), display=False)
display(results_table([{"outcome": k, "cases": run["counts"][k]} for k in CLASSES],
                      [("outcome", "outcome", None), ("cases", "cases", "{:d}")]))

# %% [markdown]
# Of the {glue:text}`cases` cases, {glue:text}`clear_error` get a clear error and
# {glue:text}`works` work; {glue:text}`silently_wrong` give a silently wrong result and
# {glue:text}`obscure_crash` crash with a message that does not name the problem.
#
# Some unusual inputs simply work: PyG accepts an `edge_index` of dtype `torch.int32`, and so does
# `lrp_lib`. A `.detach()` inside the model is not an error, since the rest of the output can still
# be explained, but the relevance that it keeps from the inputs is reported with its amount in a
# `LostRelevanceWarning`.
#
# Other mistakes are a mismatch between what the model does and what it is declared to do, and each
# has its own message: features of another dtype than the model's weights (the message names both
# dtypes and the conversion); `task_level="graph"` for a model that returns one row per node; a model
# left in training mode, which is explained in eval mode, as PyG's `Explainer` predicts with it, with a
# warning; and `edge_attr` that a GAT reads only in its attention scores, whose relevance is zero by
# design (attention weights are held constant), which a warning says. Two inputs that PyG accepts are
# accepted too: one link given as a pair, an `edge_label_index` of shape (2,), as PyG's own
# link-prediction example passes it; and, for a node-level task, a batch whose graphs share edges,
# explained as the one graph it is (only the per-graph accounts of a graph-level task need graphs
# that share no edge).
#
# ### Checking the inputs before PyG's prediction pass
#
# PyG's `Explainer` runs the unmodified model once, to get the prediction, before it calls the
# explanation algorithm. A bad input fails in that pass, inside PyG's message passing, before
# `LRPExplainer` sees it. Two ways to get the error that names the argument instead:
#
# ```python
# from lrp_lib.explain.explainer import Explainer, LRPExplainer, check_inputs
#
# check_inputs(model, data.x, data.edge_index, batch=data.batch)  # before PyG's Explainer, or
# explainer = Explainer(model, algorithm=LRPExplainer(), ...)     # PyG's Explainer, checking first
# ```
#
# `lrp_lib.explain.explainer.Explainer` (also `lrp_lib.Explainer`) is PyG's class with the check added before
# the prediction pass, and it restores the model's training flag when the explanation fails (PyG's
# leaves the model in eval mode). The catalogue calls it where the library provides it.
#
# ### Every case
#
# Through PyG's `Explainer`, each case runs on the GCN, GIN, GraphConv and GraphSAGE models (some
# only on the models that take the argument); the message is the first model's, cut after its first
# words.

# %% tags=["hide-input"]
def start(message, width=64):
    message = message.replace("|", "/").replace("`", "'").replace("*", "x")
    return message if len(message) <= width else message[:width - 1] + "…"


PREFIX = "Explainer(LRPExplainer) on "
grouped = {}
for c in run["cases"]:
    if c["entry"].startswith(PREFIX):
        grouped.setdefault(c["case"], []).append(c)
rows = []
for case, hits in grouped.items():
    outcomes = sorted({h["outcome"] for h in hits})
    models = [h["entry"][len(PREFIX):] for h in hits]
    rows.append(
        dict(
            case=case,
            models="all four" if len(models) == 4 else ", ".join(models),
            outcome=" / ".join(outcomes),
            message=start(hits[0]["message"]),
        )
    )
display(
    results_table(
        rows,
        [
            ("case", "case"),
            ("models", "models"),
            ("outcome", "outcome"),
            ("message (start)", "message"),
        ],
    )
)

# %% [markdown]
# The other entry points (a heterogeneous graph, the walk queries, `explain_tensor`, the relevance ops,
# the rules and the Graph Network layers) check their arguments the same way, and report the relevance
# that a `.detach()` keeps from the inputs with its amount:

# %% tags=["hide-input"]
display(
    results_table(
        [
            dict(
                entry=f"`{c['entry']}`",
                case=c["case"],
                outcome=c["outcome"],
                message=start(c["message"]),
            )
            for c in run["cases"]
            if not c["entry"].startswith(PREFIX)
        ],
        [
            ("entry point", "entry"),
            ("case", "case"),
            ("outcome", "outcome"),
            ("message (start)", "message"),
        ],
    )
)

# %% [markdown]
# ## Summary
#
# - A wrong explanation looks like a right one, so `lrp_lib` refuses what it cannot explain, with a
#   message that names the argument and the fix.
# - The checks live in one module, `lrp_lib.core.validation`, used by every entry point, so an epsilon,
#   an `edge_index` or a batch is checked the same way everywhere.
# - With PyG's `Explainer`, call `check_inputs` first or use `lrp_lib.explain.explainer.Explainer`.
# - The test suite runs every case of the catalogue, so a change that makes one of them silently wrong
#   fails the tests.
