# %% [markdown]
# # What lrp_lib refuses
#
# An explanation is read by someone who trusts it. A heat map computed from a NaN feature, from an
# `edge_index` that points past the last node, or from a batch whose graphs share edges still looks
# like a heat map: nothing on it says that it is wrong. A clear error costs the reader a minute; a
# wrong explanation can cost a wrong conclusion. So every public entry point of `lrp_lib` checks
# what it is given and refuses, with a message that names the argument and says how to fix it,
# whatever it cannot explain correctly.
#
# The script `benchmarks/bad_inputs.py` keeps a catalogue of bad or unusual inputs, the kind a new
# user passes: NaN and Inf features, transposed or out-of-range `edge_index`, integer features,
# empty graphs, inconsistent batches, invalid targets and rule parameters, a `.detach()` inside the
# model, int32 indices. It calls the public entry points with each (`LRPExplainer` through PyG's
# `Explainer` on GCN, GIN, GraphConv and GraphSAGE models, the relevance ops, the rules and the Graph
# Network layers) and sorts the outcome automatically:
#
# - **clear error**: an exception (or, where a partial result is returned, a warning) whose message
#   names the argument at fault;
# - **works**: a result that passes the case's check, against a reference or by conservation of
#   relevance;
# - **silently wrong**: a result with NaN or Inf, or one that fails the check, with no such message;
# - **obscure crash**: any other exception, typically from deep inside torch or PyG.
#
# The same script was run on the library before its inputs were checked; both runs are stored in
# `benchmarks/results/bad_inputs.json`, and everything below is read from that file.

# %% tags=["hide-input"]
from IPython.display import Markdown, display
from myst_nb import glue

from lrp_lib.results import load_results, results_table

REPO = globals().get("REPOSITORY")  # defined by the Colab cell; elsewhere the file is found locally
bad = load_results("bad_inputs", repository=REPO)["results"]
before, after = bad["before"], bad["after"]
CLASSES = ("clear error", "works", "silently wrong", "obscure crash")
glue("cases", str(len(after["cases"])), display=False)
for label, run in (("before", before), ("after", after)):
    for k in CLASSES:
        glue(f"{label}_{k.replace(' ', '_')}", str(run["counts"][k]), display=False)

# %% [markdown]
# ## Before and after
#
# Of the {glue:text}`cases` cases, the library before the checks gave
# {glue:text}`before_clear_error` clear errors and {glue:text}`before_works` correct results, but
# {glue:text}`before_silently_wrong` results were silently wrong and {glue:text}`before_obscure_crash`
# calls crashed with a message that does not name the problem. Now {glue:text}`after_clear_error`
# are clear errors, {glue:text}`after_works` work, {glue:text}`after_silently_wrong` are silently
# wrong and {glue:text}`after_obscure_crash` crash obscurely.

# %% tags=["hide-input"]
display(results_table(
    [{"outcome": k, "before": before["counts"][k], "after": after["counts"][k]} for k in CLASSES],
    [("outcome", "outcome", None), ("before the checks", "before", "{:d}"), ("now", "after", "{:d}")]))

# %% [markdown]
# Some of the cases that work now were refused before: PyG accepts an `edge_index` of dtype
# `torch.int32`, and so does `lrp_lib` now. A `.detach()` inside the model is not an error, since the
# rest of the output can still be explained, but the relevance that it keeps from the inputs is
# reported with its amount in a `LostRelevanceWarning`.
#
# ## Checking the inputs before PyG's prediction pass
#
# PyG's `Explainer` runs the unmodified model once, to get the prediction, before it calls the
# explanation algorithm. A bad input fails in that pass, inside PyG's message passing, before
# `LRPExplainer` sees it. Two ways to get the error that names the argument instead:
#
# ```python
# from lrp_lib.explain import Explainer, LRPExplainer, check_inputs
#
# check_inputs(model, data.x, data.edge_index, batch=data.batch)   # before PyG's Explainer, or
# explainer = Explainer(model, algorithm=LRPExplainer(), ...)      # PyG's Explainer that checks first
# ```
#
# `lrp_lib.explain.Explainer` is PyG's class with the check added before the prediction pass, and it
# restores the model's training flag when the explanation fails (PyG's leaves the model in eval
# mode). The catalogue calls it where the library provides it.
#
# ## Every case
#
# What each case gets now, and what it got before the checks; the message is cut after its first
# words.

# %% tags=["hide-input"]
old = {(c["entry"], c["case"]): c["outcome"] for c in before["cases"]}


def start(message, width=60):
    message = message.replace("|", "/").replace("`", "'")
    return message if len(message) <= width else message[:width - 1] + "…"


display(results_table(
    [dict(case=c["case"], entry=c["entry"].replace("Explainer(LRPExplainer) on ", "Explainer, "),
          now=c["outcome"], before=old.get((c["entry"], c["case"]), "-"),
          message=f"`{start(c['message'])}`" if c["message"] else "")
     for c in after["cases"]],
    [("case", "case", None), ("entry point", "entry", None), ("now", "now", None),
     ("before", "before", None), ("message (start)", "message", None)]))

# %% [markdown]
# ## Summary
#
# - A wrong explanation looks like a right one, so `lrp_lib` refuses what it cannot explain, with a
#   message that names the argument and the fix.
# - The checks live in one module, `lrp_lib.validation`, used by every entry point, so an epsilon,
#   an `edge_index` or a batch is checked the same way everywhere.
# - With PyG's `Explainer`, call `check_inputs` first or use `lrp_lib.explain.Explainer`.
# - `tests/test_validation.py` runs every case of the catalogue, so a change that makes one of them
#   silently wrong again fails the tests.
