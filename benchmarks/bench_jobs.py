"""Explaining a whole data set as a job: molecules per second on all of Mutagenicity and ESOL.

    python benchmarks/bench_jobs.py                 # both data sets, writes benchmarks/results/jobs.json
    python benchmarks/bench_jobs.py --quick         # 300 molecules of each, writes nothing
    python benchmarks/bench_jobs.py --device cuda   # on a GPU: writes benchmarks/results/jobs_gpu.json

Runs ``lrp_lib.explain_dataset`` on every molecule of Mutagenicity (4,337 graphs; the GCN of
chapter 5, ``book/_src/05_explaining_gnns.py``, loaded from ``lrp_lib/book/weights/mutagenicity-gcn.pt``,
explained by ``LRPExplainer``) and of ESOL (1,128 graphs; the ``lrp_lib.teach.graph`` network of chapter
7, ``book/_src/07_case_solubility.py``, from ``esol-gn.pt``, explained in relevance mode), into a
fresh folder each time, and times the whole job: loading batches, one forward and one backward per
batch, and writing the Parquet part files and manifests.  Beside it, the same batches run a plain
forward pass without gradients and a forward + backward for the input gradient (what any
gradient explanation costs at least), so the job's figure can be read against the floor.  Each
figure is the median of ``--repeats`` runs, the three measurements interleaved so that the load of a
shared machine falls on all alike.  Loading the data set and the model is not timed.

The model classes below are the chapters' (the stored state dicts are loaded strictly).  The
functions ``mutagenicity_model``, ``mutagenicity_dataset``, ``esol_model`` and ``esol_dataset``
also serve the command line::

    lrp-explain --model benchmarks/bench_jobs.py:mutagenicity_model \\
        --dataset benchmarks/bench_jobs.py:mutagenicity_dataset --out mutagenicity-lrp/ \\
        --mode binary_classification --batch-size 256
    torchrun --nproc_per_node 2 -m lrp_lib.explain.jobs --model ... (the same arguments)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, global_mean_pool

import lrp_lib
from lrp_lib.explain.jobs.batches import backend_of
from lrp_lib.teach import graph
from lrp_lib.book.pretrained import RETRAIN_ENV, load_or_train

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import write_results  # noqa: E402


# ------------------------------------------------------- chapter 5's model
from lrp_lib.book.models import MutagenicityGCN as GCN, SolubilityGN  # noqa: E402  (the chapters' classes)


def _refuse(name, chapter):
    def train(model):
        raise RuntimeError(f"the benchmark explains the stored model {name!r}; build it with {RETRAIN_ENV}=1 "
                           f"python tools/nb.py book/_src/{chapter}.py")
    return train


def mutagenicity_dataset():
    from lrp_lib.book.datasets import mutagenicity
    return mutagenicity()


def mutagenicity_model():
    model = GCN(mutagenicity_dataset().num_features, hidden=64)
    load_or_train("mutagenicity-gcn", model, _refuse("mutagenicity-gcn", "05_explaining_gnns"), retrain=False)
    return model


def esol_dataset():
    from lrp_lib.book.datasets import esol
    return esol()


def esol_model():
    model = SolubilityGN()
    load_or_train("esol-gn", model, _refuse("esol-gn", "07_case_solubility"), retrain=False)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


CASES = {
    "Mutagenicity": dict(model=mutagenicity_model, dataset=mutagenicity_dataset, mode="binary_classification",
                         explained="the Mutagenicity GCN, LRPExplainer (epsilon)"),
    "ESOL": dict(model=esol_model, dataset=esol_dataset, mode="regression",
                 explained="lrp_lib.teach.graph network (the solubility case study), relevance mode"),
}


# ------------------------------------------------------- the floors
def _forward(model, batch, backend):
    if backend == "graph":
        return model(batch)
    return model(batch.x, batch.edge_index, batch=batch.batch)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_pass(model, batches, backend, gradient: bool, device) -> None:
    """Forward (and, with ``gradient``, a backward to the node features) over all batches."""
    for batch in batches:
        batch = batch.to(device)
        if not gradient:
            with torch.no_grad():
                _forward(model, batch, backend)
            continue
        batch = batch.clone()
        batch.x = batch.x.detach().requires_grad_(True)
        out = _forward(model, batch, backend)
        (x_grad,) = torch.autograd.grad(out.sum(), batch.x)


def measure(name, case, batch_size, repeats, limit, device):
    dataset = case["dataset"]()
    if limit:
        dataset = dataset[:limit]
    model = case["model"]().to(device)
    model.eval()
    backend = backend_of(model)
    n = len(dataset)
    atoms = sum(int(g.num_nodes) for g in dataset)
    job, forward, gradient = [], [], []
    bytes_written = 0
    for r in range(repeats + 1):  # the first round warms up and is not counted
        with tempfile.TemporaryDirectory() as out:
            t = time.perf_counter()
            summary = lrp_lib.explain_dataset(model, dataset, out, mode=case["mode"], batch_size=batch_size,
                                              device=device, progress=False)
            _sync(device)
            job_s = time.perf_counter() - t
            assert summary["graphs"] == n, summary
            rows = lrp_lib.read_explanations(out)
            assert rows.column("graph_id").to_pylist() == list(range(n))
            bytes_written = sum(p.stat().st_size for p in Path(out).glob("part-*.parquet"))
        t = time.perf_counter()
        batches = list(DataLoader(dataset, batch_size=batch_size))
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        plain_pass(model, batches, backend, gradient=False, device=device)
        _sync(device)
        fwd_s = time.perf_counter() - t + load_s
        t = time.perf_counter()
        plain_pass(model, batches, backend, gradient=True, device=device)
        _sync(device)
        grad_s = time.perf_counter() - t + load_s
        if r:
            job.append(job_s)
            forward.append(fwd_s)
            gradient.append(grad_s)
        print(f"{name} round {r}: job {n / job_s:,.0f} mol/s, forward {n / fwd_s:,.0f}, "
              f"gradient {n / grad_s:,.0f}", file=sys.stderr)
    job_s, fwd_s, grad_s = (statistics.median(v) for v in (job, forward, gradient))
    return {"dataset": name, "explained": case["explained"], "molecules": n, "atoms": atoms,
            "batch_size": batch_size, "job_s": job_s, "job_molecules_per_s": n / job_s,
            "forward_molecules_per_s": n / fwd_s, "gradient_molecules_per_s": n / grad_s,
            "job_over_gradient": job_s / grad_s, "parquet_bytes": bytes_written}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--quick", action="store_true", help="300 molecules of each, one repeat, no results file")
    p.add_argument("--device", default="cpu", help="cpu (default; results/jobs.json) or cuda (results/jobs_gpu.json)")
    p.add_argument("--datasets", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    names = [n for n in args.datasets.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        p.error(f"--datasets must name some of {', '.join(CASES)}, got {args.datasets!r}")
    limit = 300 if args.quick else None
    repeats = 1 if args.quick else args.repeats
    rows = [measure(name, CASES[name], args.batch_size, repeats, limit, device) for name in names]
    for r in rows:
        print(f"{r['dataset']:>12}: {r['molecules']} molecules, job {r['job_molecules_per_s']:,.0f} mol/s "
              f"({r['job_over_gradient']:.2f}x the input gradient's time), forward {r['forward_molecules_per_s']:,.0f}, "
              f"gradient {r['gradient_molecules_per_s']:,.0f}, Parquet {r['parquet_bytes'] / 1e6:.1f} MB")
    if not args.quick:
        path = write_results("jobs_gpu" if device.type == "cuda" else "jobs", {"rows": rows}, settings=vars(args))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
