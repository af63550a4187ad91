# %% [markdown]
# # Explaining a whole data set
#
# LRP's promise is that an explanation costs one forward and one backward pass. The chapters
# explain a handful of molecules; a screening campaign, an audit of a model or a study of what a
# model learned across a data set needs the relevance of *every* graph, written somewhere it can be
# queried later. `lrp_lib.explain_dataset` (and the command `lrp-explain`) does that as a job: it
# streams batches through a PyG `DataLoader`, explains each batch with one forward and one
# backward pass, and writes one row per graph to Parquet files. A job that is killed can be
# rerun and continues where it stopped, and the same command runs under `torchrun` on several
# processes, GPUs or machines. It writes Parquet with pyarrow (`pip install "lrp_lib[jobs]"` brings it).
#
# ```{admonition} Audience & Objectives
# :class: tip
# This page assumes the chapter [Explaining a graph classifier](05_explaining_gnns.ipynb). After
# reading it you should be able to
# - explain a whole data set with `explain_dataset` or `lrp-explain` and read the rows back;
# - say what each column holds, including the bias relevance;
# - resume a job that stopped, and shard one across processes with `torchrun`;
# - say what such a job costs against a plain gradient pass over the same data.
# ```

# %% tags=["remove-cell"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook notice, via PyG

# %% tags=["hide-input"]
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from IPython.display import Markdown, display
from myst_nb import glue
from torch_geometric.nn import GCNConv, global_mean_pool

import lrp_lib
from lrp_lib.book.datasets import mutagenicity
from lrp_lib.book.pretrained import load_or_train
from lrp_lib.book.results import load_results, machine_note, results_table


# %% [markdown]
# ## A job on Mutagenicity
#
# The model is the GCN of the chapter [Explaining a graph classifier](05_explaining_gnns.ipynb),
# loaded from its stored weights: four `GCNConv` layers, a mean pool and one logit per molecule
# (positive: nonmutagen).

# %%
from lrp_lib.book.models import (
    MutagenicityGCN as GCN,
)  # the class of 'Explaining a graph classifier', in the library

def stored_only(model):
    raise RuntimeError("this page explains the stored model of 'Explaining a graph classifier'; "
                       "run that chapter first to train it")


dataset = mutagenicity()
model = GCN(dataset.num_features, hidden=64)
load_or_train("mutagenicity-gcn", model, stored_only, retrain=False)
print(f"{len(dataset)} molecules; the stored model of 'Explaining a graph classifier'")

# %% [markdown]
# One call explains the first molecules of the data set, batch by batch, and writes them to a folder.
# `mode` says what the output is; `target="prediction"` (the default) explains the class the model
# predicts, `target="label"` the class in `data.y`, and an integer a fixed class. In a terminal the
# job shows a progress bar on stderr; here it is switched off.

# %%
work = Path(tempfile.mkdtemp())
summary = lrp_lib.explain_dataset(
    model,
    dataset[:100],
    work / "mutagenicity",
    mode="binary_classification",
    batch_size=32,
    progress=False,
)
print({k: v for k, v in summary.items() if k != "out"})
files = sorted(p.name for p in (work / "mutagenicity").iterdir())
print(len(files), "files:", ", ".join(files[:2]), "...", files[-1])

# %% [markdown]
# Each batch is one Parquet file with one row group, and the manifest records which batches are
# done. `lrp_lib.read_explanations` reads them back as one `pyarrow.Table`, sorted by graph id and
# checked for duplicates (`.to_pandas()` turns it into a pandas data frame, and any Parquet reader, such as
# pandas, Polars, DuckDB or Spark, reads the folder directly):

# %%
rows = lrp_lib.read_explanations(work / "mutagenicity")
print(rows.schema)
first = rows.slice(0, 1).to_pylist()[0]
print(
    f"graph {first['graph_id']}: class {first['target']} explained, value"
    f" {first['explained_value']:.3f}, {len(first['node_relevance'])} atoms,"
    f" {len(first['edge_relevance'])} directed bonds"
)
print(
    f"atom relevance sums to {sum(first['node_relevance']):.3f}, bias relevance"
    f" {first['bias_relevance']:.3f}"
)

# %% [markdown]
# The columns:
#
# - `graph_id`: the graph's index in the data set;
# - `target`: the class explained (`-1` for a regression);
# - `explained_value`: the output that relevance starts from. For this binary model it is the
#   log-odds of the explained class, $+z$ for class 1 and $-z$ for class 0, as in
#   `LRPExplainer`; for a multiclass model the logit of the class, for a regression the prediction;
# - `node_relevance`: one number per atom, the relevance of its features summed;
# - `edge_relevance`: one number per directed edge. For a PyG model it is the relevance that the
#   edge's messages carry over all layers: it flows on into the nodes, so it is *part of* the node
#   relevance. For a model of `lrp_lib.teach.graph` layers
#   ([Case study: solubility](07_case_solubility.ipynb)) it is the relevance of the edge's own
#   input features, beside the nodes;
# - `bias_relevance`: the explained value minus the relevance of the inputs (the node sum for a PyG
#   model; nodes, edges and global features for an `lrp_lib.teach.graph` model). It is what the biases
#   kept, plus the share that the stabiliser $\epsilon$ absorbed.
#
# One backward pass explains a whole batch because the graphs of a batch exchange no messages. For a
# binary or regression model the job does not even need PyG's prediction pass: it explains the raw
# logit and flips the sign of the rows whose predicted class is 0. LRP's backward pass is linear in
# the relevance it starts from, and negating a floating-point number is exact, so this is exactly
# the explanation of class 0. (A multiclass model explaining its own prediction needs the
# prediction first, one extra forward pass without gradients.)
#
# ## Stopping and resuming
#
# Every part file is written to a temporary name and then renamed, which is atomic: a part file either
# holds its whole batch or does not exist. The manifest is written the same way after each part. A
# job killed at any moment (a pre-empted cloud machine, a time limit, Ctrl-C) is resumed by running
# the same call again; it skips the batches the manifest records and explains the rest, so no graph
# is lost or written twice. Here a data set that fails in the middle of the job stands for the crash:

# %%
class FailsAt(torch.utils.data.Dataset):
    """The first 100 molecules; reading molecule `bad` raises (a stand-in for a crash)."""

    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i == self.bad:
            raise RuntimeError(f"crash while reading molecule {i}")
        return dataset[i]


job = dict(mode="binary_classification", batch_size=32, progress=False)
try:
    lrp_lib.explain_dataset(model, FailsAt(70), work / "resumed", **job)
except RuntimeError as err:
    print("first run:", err)
print(
    "rows written before the crash:", lrp_lib.read_explanations(work / "resumed").num_rows
)
summary = lrp_lib.explain_dataset(model, FailsAt(None), work / "resumed", **job)
print(f"second run: {summary['skipped']} batches skipped, {summary['written']} written")
print(
    "same rows as the uninterrupted job:",
    lrp_lib.read_explanations(work / "resumed").equals(
        lrp_lib.read_explanations(work / "mutagenicity")
    ),
)

# %% [markdown]
# The arguments that shape the rows (the number of graphs, `batch_size`, `mode`, `target`, `rule`)
# are recorded in the manifest; resuming with a different one is refused with a message that names
# it, instead of mixing two jobs in one folder. A job killed with `SIGKILL` in the middle of a run
# and resumed writes exactly what an uninterrupted run writes; the library's tests check it.
#
# ## The command line, and many processes
#
# The same job from a shell. The model and the data set are named as `module:function` or
# `file.py:function` (a function without arguments that returns them); the benchmark script
# provides both for this page's model:
#
# ```bash
# lrp-explain --model benchmarks/bench_jobs.py:mutagenicity_model \
#     --dataset benchmarks/bench_jobs.py:mutagenicity_dataset \
#     --out mutagenicity-lrp/ --mode binary_classification --batch-size 256
# ```
#
# `python -m lrp_lib.explain.jobs` is the same command. When one process is not enough, `torchrun` starts
# several; each becomes one rank of a `torch.distributed` process group (gloo on the CPU, NCCL on
# GPUs, where rank $r$ uses the GPU `LOCAL_RANK`):
#
# ```bash
# torchrun --nproc_per_node 4 -m lrp_lib.explain.jobs --model ... --dataset ... --out mutagenicity-lrp/ ...
# # several machines: the same command on each, with --nnodes, --node_rank and --master_addr
# torchrun --nnodes 2 --node_rank 0 --master_addr host0 --nproc_per_node 8 -m lrp_lib.explain.jobs ...
# ```
#
# With `batch_size` $s$, batch $b$ holds the graphs $bs, \dots, (b + 1)s - 1$, whatever the number of
# processes, and rank $r$ of $w$ explains the batches with $b \bmod w = r$, writing its own part
# files and its own manifest `manifest-rank<r>.json` into the shared folder. So the union of the
# ranks' rows is the single-process output (the tests check this with two processes on the CPU), bit
# for bit when each process uses as many threads as the single one did (`torchrun` starts each with
# one thread; `--threads` sets it), and a job started on one machine may be resumed on eight. On several machines, `--out`
# must be a folder that all of them see (a network file system); otherwise copy the folders
# together afterwards, since no two ranks write the same file.
#
# ## What it costs
#
# `benchmarks/bench_jobs.py` runs the whole job on every molecule of Mutagenicity (the GCN above,
# explained by `LRPExplainer`) and of ESOL (the `lrp_lib.teach.graph` network of the chapter
# [Solubility](07_case_solubility.ipynb), explained in relevance mode), loading the batches,
# explaining them and writing the Parquet files. For comparison it runs the same batches through a
# plain forward pass and through a forward and backward pass for the input gradient, the least that
# any gradient-based explanation costs.

# %% tags=["hide-input"]
COLUMNS = [
    ("data set", "dataset", None), ("molecules", "molecules", "{:,d}"),
    ("job, molecules/s", "job_molecules_per_s", "{:,.0f}"),
    ("gradient, molecules/s", "gradient_molecules_per_s", "{:,.0f}"),
    ("forward, molecules/s", "forward_molecules_per_s", "{:,.0f}"),
    ("job / gradient", "job_over_gradient", "{:.2f}x"),
    ("Parquet", "parquet_bytes", lambda b: f"{b / 1e6:.1f} MB")]
jobs_b = load_results("jobs")
display(Markdown(machine_note(jobs_b)))
display(results_table(jobs_b["results"]["rows"], COLUMNS))
by_name = {r["dataset"]: r for r in jobs_b["results"]["rows"]}
for key, name in (("mutag", "Mutagenicity"), ("esol", "ESOL")):
    r = by_name[name]
    glue(f"jobs_{key}_rate", f"{r['job_molecules_per_s']:,.0f}", display=False)
    glue(f"jobs_{key}_ratio", f"{r['job_over_gradient']:.1f}", display=False)
    glue(f"jobs_{key}_molecules", f"{r['molecules']:,d}", display=False)
    glue(f"jobs_{key}_seconds", f"{r['job_s']:.1f}", display=False)
glue("jobs_threads", str(jobs_b["machine"]["torch_threads"]), display=False)

# %% [markdown]
# All {glue:text}`jobs_mutag_molecules` molecules of Mutagenicity take
# {glue:text}`jobs_mutag_seconds` seconds ({glue:text}`jobs_mutag_rate` molecules per second), and
# the {glue:text}`jobs_esol_molecules` of ESOL {glue:text}`jobs_esol_seconds` seconds
# ({glue:text}`jobs_esol_rate` per second), on {glue:text}`jobs_threads` CPU thread(s). The job takes
# {glue:text}`jobs_mutag_ratio` and {glue:text}`jobs_esol_ratio` times as long as the input gradient
# over the same batches. The gap is the relevance backward itself, whose ops cost more than the
# gradient's (the Performance page measures them one by one), and per batch the explainer's checks of
# the inputs and of the model's autograd graph, which `LRPExplainer` runs on every call, and the
# Parquet writing. Either way a data set of this size is explained in seconds, where an
# optimisation-based explainer such as GNNExplainer spends a forward and a backward pass on every
# step of its optimisation, hundreds of steps for *each* molecule.

# %% [markdown]
# On a GPU (`python benchmarks/bench_jobs.py --device cuda`), with the batches still read and put
# together on the CPU:

# %% tags=["hide-input"]
gpu_b = load_results("jobs_gpu")
display(Markdown(machine_note(gpu_b)))
display(results_table(gpu_b["results"]["rows"], COLUMNS))
gpu_by_name = {r["dataset"]: r for r in gpu_b["results"]["rows"]}
glue(
    "jobs_gpu_mutag_rate",
    f"{gpu_by_name['Mutagenicity']['job_molecules_per_s']:,.0f}",
    display=False,
)
glue(
    "jobs_gpu_mutag_forward",
    f"{gpu_by_name['Mutagenicity']['forward_molecules_per_s']:,.0f}",
    display=False,
)
glue("jobs_gpu_name", gpu_b["machine"].get("gpu", "a GPU"), display=False)

# %% [markdown]
# On the {glue:text}`jobs_gpu_name` the job explains {glue:text}`jobs_gpu_mutag_rate` molecules of
# Mutagenicity per second. Molecules are small, so a batch gives the GPU little work, while reading
# the graphs and collating them into batches stays on the CPU (one thread here), as does
# writing the rows: a plain forward pass over the same batches reaches
# {glue:text}`jobs_gpu_mutag_forward` molecules per second there. Larger batches (`--batch-size`) and
# several processes per GPU under `torchrun` are the levers to try.
#
# ## Summary
#
# - `lrp_lib.explain_dataset(model, dataset, out, mode=...)` and `lrp-explain` explain every graph of a
#   data set with one forward and one backward pass per batch and write one Parquet row per graph:
#   node and edge relevance, the explained value and the bias relevance.
# - A job is resumable: atomic part files and manifests let a rerun skip what is written, so a
#   killed job loses and duplicates nothing.
# - Under `torchrun` the ranks take disjoint batches and write their own files; the union equals
#   the single-process output.
#
# ## Exercises
#
# 1. Explain ESOL with `lrp-explain` (the functions `esol_model` and `esol_dataset` of
#    `benchmarks/bench_jobs.py`, `--mode regression`) and find the ten molecules whose bias
#    relevance is the largest share of the prediction. What do they have in common?
# 2. Run the Mutagenicity job under `torchrun --nproc_per_node 2`, kill one rank, and resume with a
#    single process. Check with `read_explanations` that no molecule is missing or doubled.
# 3. With the rows of the whole of Mutagenicity, compare the atoms' relevance of the molecules that
#    the model calls mutagens with the NO$_2$ and NH$_2$ ground truth of
#    [Explaining a graph classifier](05_explaining_gnns.ipynb), data set wide.
