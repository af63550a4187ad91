"""Where the default loses on ground truth: does the model use the planted motif, and does LRP find what it uses?

    python benchmarks/bench_losses.py [--seeds 5] [--instances 8] [--tasks ...] [--no-write]

On the tasks where ``bench_quality.py``'s default (z+, the target's logit, |R|) trails the best non-LRP method by
more than 0.01 of ground-truth AUROC (read from ``results/quality.json``; ``--tasks`` to choose), the same models
(the stored weights of ``quality_tasks.build_task``) and the same instances as ``bench_faithfulness.py``, and per
instance, with the motif :math:`M` the ground truth's nodes (a node task's: the end points of its true edges in the
explained node's computation graph; a molecule's: its true atoms) and :math:`z` the explained logit:

* ``motif_logit``: the logit with only the motif's node features kept (all others zeroed, the graph unchanged),
  as a share of the logit, :math:`(z(x_M) - z(0)) / (z(x) - z(0))`: how much of the prediction the motif's
  features alone produce;
* ``top_logit`` of a method: the same with only that method's top :math:`|M|` nodes kept (as many as the motif
  has; ties in a seeded order): the default, the task's winner on ground truth, and Grad x Input;
* ``motif_relevance``: the default's relevance on the motif as a share of the nodes' relevance,
  :math:`\\sum_{v \\in M} R_v / \\sum_v R_v` (signed), and ``motif_abs``: the same with :math:`|R_v|`;
* ``winner_motif``: the winner's scores on the motif as a share of all its scores (scores are non-negative).

Instances whose logit does not move when all features are zeroed (:math:`|z(x) - z(0)| <` ``MIN_SPAN``) are left
out of the logit shares (counted).  Each number is the mean over a seed's instances; the file holds every seed's
mean and the mean over seeds with a 95 % t-interval.  Writes ``benchmarks/results/losses.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_faithfulness as bf  # noqa: E402
import bench_quality as bq  # noqa: E402
import quality_tasks as qt  # noqa: E402
from results_file import write_results  # noqa: E402

DEFAULT = "lrp_zplus_logit_abs"
#: a method compared on every task besides the default and the task's winner
OTHER = "grad_x_input"
#: logits that move less than this when every feature is zeroed give no share
MIN_SPAN = 0.05
KEYS = ("motif_logit", "top_logit_default", "top_logit_winner", "top_logit_other", "motif_relevance", "motif_abs",
        "winner_motif")


def losing_tasks(quality: dict) -> dict:
    """``{task: winner}``: the tasks where the default is not within 0.01 of the best non-LRP method."""
    per_task = quality["results"]["summary"]["overall"]["per_task"]
    return {t: p["best_non_lrp"] for t, p in per_task.items() if not p["within_0.01_of_best_non_lrp"]}


def kept_logit(model, x, edge_index, index, target: int, keep: torch.Tensor) -> float:
    """The logit of ``target`` (at ``index``; None: the graph's one row) with only the nodes ``keep`` (bool)
    holding their features."""
    with torch.no_grad():
        row = model(x * keep.to(x.dtype).unsqueeze(-1), edge_index)
    return float((row[index] if index is not None else row[0])[target])


def logit_share(model, x, edge_index, index, target: int, keep: torch.Tensor) -> float | None:
    """:math:`(z(x_{keep}) - z(0)) / (z(x) - z(0))`, or None where :math:`|z(x) - z(0)| <` :data:`MIN_SPAN`."""
    n = x.shape[0]
    full = kept_logit(model, x, edge_index, index, target, torch.ones(n, dtype=torch.bool))
    empty = kept_logit(model, x, edge_index, index, target, torch.zeros(n, dtype=torch.bool))
    if abs(full - empty) < MIN_SPAN:
        return None
    return (kept_logit(model, x, edge_index, index, target, keep) - empty) / (full - empty)


def top_nodes(scores: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """The ``k`` highest-scoring nodes (bool), ties in the seeded order of :func:`bench_faithfulness.ranking`."""
    keep = torch.zeros(scores.numel(), dtype=torch.bool)
    keep[bf.ranking(scores, seed)[:k]] = True
    return keep


def share(values: torch.Tensor, motif: torch.Tensor) -> float | None:
    """:math:`\\sum_{v \\in M} s_v / \\sum_v s_v`, or None where the total is zero."""
    total = float(values.double().sum())
    return None if total == 0 else float(values.double()[motif].sum()) / total


def instance_row(task, meth, inst, n: int, seed: int, winner: str) -> dict:
    """The measures of one instance (module docstring); None for a share that is not defined."""
    x, ei, kw, _, eids = meth.inputs(inst)
    index, target = kw.get("index"), int(meth.target_of(inst))
    motif = bf.truth_scores(task, inst, eids, x, ei)[0] > 0
    k = int(motif.sum())
    order_seed = seed * 1_000_003 + n
    model = task.model
    relevance = meth.explain_lrp("zplus", "logit", inst)[0]["relevance"][0]
    default = meth.explain_lrp("zplus", "logit", inst)[0]["abs"][0]
    cache: dict = {}
    scores = {name: bf.scores_of(meth, name, inst, ei, cache)[0] for name in (winner, OTHER)}
    row = {"motif_size": k, "nodes": x.shape[0],
           "motif_logit": logit_share(model, x, ei, index, target, motif),
           "top_logit_default": logit_share(model, x, ei, index, target, top_nodes(default, k, order_seed)),
           "motif_relevance": share(relevance, motif), "motif_abs": share(relevance.abs(), motif)}
    for key, name in (("winner", winner), ("other", OTHER)):
        s = scores[name]
        row[f"top_logit_{key}"] = None if s is None else logit_share(model, x, ei, index, target,
                                                                     top_nodes(s, k, order_seed))
    w = scores[winner]
    row["winner_motif"] = None if w is None else share(w.clamp(min=0), motif)
    return row


def run_task(name: str, winner: str, seeds: int, instances: int, log=print) -> dict:
    settings = bq.EXPLAINER_SETTINGS.get(name, bq.PYG_DEFAULTS)
    per_seed: dict = {k: [] for k in KEYS}
    skipped, seconds = 0, 0.0
    for seed in range(seeds):
        start = time.perf_counter()
        task = qt.build_task(name, seed, instances)
        names = [m for m in (DEFAULT, winner, OTHER) if bq.applicable(task, m)]
        meth = bq.Methods(task, seed, names, settings)
        meth._lift = lambda node, edge, eids: (node, edge)  # scores on the instance's own graph
        meth.n_instances = len(task.instances)
        if winner == "pgexplainer":
            torch.manual_seed(seed)
            meth.train_pg(task.train_pool or task.instances)
        rows = []
        for n, inst in enumerate(task.instances):
            torch.manual_seed(seed)
            rows.append(instance_row(task, meth, inst, n, seed, winner))
        skipped += sum(r["motif_logit"] is None for r in rows)
        for key in KEYS:
            values = [r[key] for r in rows if r[key] is not None]
            if values:
                per_seed[key].append(float(np.mean(values)))
        seconds += time.perf_counter() - start
        log(f"  {name} seed {seed}: {len(rows)} instances, {time.perf_counter() - start:.0f} s")
    out = {"winner": winner, "other": OTHER, "seeds": seeds, "skipped_flat_logit": skipped,
           "seconds": round(seconds, 1)}
    for key, values in per_seed.items():
        if values:
            mean, lo, hi = bq.t_interval(values)
            out[key] = {"mean": round(mean, 4), "ci95": None if np.isnan(lo) else [round(lo, 4), round(hi, 4)],
                        "per_seed": [round(v, 4) for v in values]}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--instances", type=int, default=8)
    p.add_argument("--tasks", nargs="*", default=None, help="tasks (default: where the default loses)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    quality = json.loads((Path(__file__).resolve().parent / "results" / "quality.json").read_text())
    losing = losing_tasks(quality)
    per_task = quality["results"]["summary"]["overall"]["per_task"]
    tasks = {t: per_task[t]["best_non_lrp"] for t in args.tasks} if args.tasks else losing
    results = {}
    for name, winner in tasks.items():
        print(f"{name} (winner {winner})", flush=True)
        results[name] = run_task(name, winner, args.seeds, args.instances)
        print({k: v["mean"] for k, v in results[name].items() if isinstance(v, dict)}, flush=True)
    if not args.no_write:
        print(write_results("losses", results, vars(args)))


if __name__ == "__main__":
    main()
