r"""Explain a whole data set as a job: stream batches, write relevance to Parquet, resume, shard (the book's
chapter *Explaining a whole data set* shows it at work)::

    explain_dataset(model, dataset, out="explanations/", mode="binary_classification", batch_size=128)
    table = read_explanations("explanations/")          # a pyarrow.Table, one row per graph (:data:`COLUMNS`)

or ``lrp-explain --model my_models:load_gcn --dataset my_data:load_molecules --out explanations/ --mode ...`` (also
``python -m lrp_lib.explain.jobs``, under ``torchrun`` too).  Batch ``b`` (graph ids ``b * batch_size`` on) is explained
with one forward and one backward, written to its own part file, then recorded in the process's manifest
(:mod:`.store`).  Rerunning the same call skips the recorded batches (arguments that change the rows must be the same).
Under ``torch.distributed`` rank ``r`` of ``w`` explains the batches ``b % w == r`` on its own device; the batches do
not depend on ``w``, so the ranks' rows equal one process's, and a job may resume with another number of processes.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from lrp_lib.core.rules import get_rule
from lrp_lib.core.validation import check_model
from lrp_lib.explain.jobs.batches import backend_of, batch_explainer
from lrp_lib.explain.jobs.store import (COLUMNS, FORMAT, batch_table, check_settings, manifest_path,
                                       part_name, pyarrow_modules, read_explanations, read_manifests, write_atomic)

__all__ = ["explain_dataset", "read_explanations", "COLUMNS", "MODES", "main"]

MODES = ("binary_classification", "multiclass_classification", "regression")


def _distributed() -> tuple[int, int]:
    import torch.distributed as dist
    return (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)


def _default_device() -> torch.device:
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()) \
        if torch.cuda.is_available() else torch.device("cpu")


def explain_dataset(model: nn.Module, dataset_or_loader, out, *, mode: str, batch_size: int | None = None,
                    target="prediction", rule=None, device=None, progress: bool = True, num_workers: int = 0) -> dict:
    """Explain every graph of a data set with LRP and write the relevance to Parquet files in ``out``.

    Args:
        model: a graph-level PyG model, called as ``model(x, edge_index, batch=batch)``, or one with its own
            relevance entry point (``lrp_relevance_pass``: :mod:`lrp_lib.teach.graph`), called as ``model(data)``;
            moved to ``device``, in eval mode.
        dataset_or_loader: a data set (``len()``, ``dataset[i]`` a ``Data``; a graph's id is its index) or a
            non-shuffling ``torch_geometric.loader.DataLoader`` (its ``batch_size`` the default).
        out: the output folder (created; an existing job there is resumed).
        mode: ``"binary_classification"`` (one logit per graph), ``"multiclass_classification"``, ``"regression"``.
        batch_size: graphs per batch, part file and row group; default 64.
        target: ``"prediction"`` (the largest logit; class 1 where a binary logit is > 0), ``"label"``
            (``data.y``) or a class index.
        rule: the LRP rule of a PyG model (default epsilon); ``None`` for a model with its own entry point.
        device: default ``cuda:<LOCAL_RANK>`` when CUDA is available, else the CPU.
        progress: a tqdm bar on stderr (rank 0); num_workers: DataLoader worker processes.

    Returns this process's ``{"out", "rank", "world_size", "batches", "skipped", "written", "graphs"}``.  Raises
    TypeError or ValueError for a bad argument, and ValueError where ``out`` holds a job with other arguments."""
    from torch_geometric.loader import DataLoader
    from tqdm import tqdm  # plain tqdm: a text bar on stderr, also in a notebook

    pq = pyarrow_modules().parquet  # (fails early without pyarrow)
    dataset, loader_batch = dataset_or_loader, None  # the indexable data set (and the loader's batch size)
    if isinstance(dataset_or_loader, torch.utils.data.DataLoader):
        if not isinstance(dataset_or_loader.sampler, torch.utils.data.SequentialSampler):
            raise ValueError("dataset_or_loader: a DataLoader must not shuffle (shuffle=False, no sampler), "
                             "because graphs are identified by their index in loader.dataset")
        dataset, loader_batch = dataset_or_loader.dataset, dataset_or_loader.batch_size
    elif not hasattr(dataset_or_loader, "__getitem__") or not hasattr(dataset_or_loader, "__len__"):
        raise TypeError(f"dataset_or_loader must be a data set (len() and indexing give graphs) or a "
                        f"torch_geometric.loader.DataLoader, got {type(dataset_or_loader).__name__}")
    batch_size = (loader_batch or 64) if batch_size is None else batch_size
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a folder path (str or os.PathLike), got {type(out).__name__}")
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {progress!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
    backend = backend_of(model) if isinstance(model, nn.Module) else None
    check_model(model)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if isinstance(target, bool) or not (target in ("prediction", "label") or isinstance(target, int) and target >= 0):
        raise ValueError(f"target must be 'prediction', 'label' or a class index >= 0 (int), got {target!r}")
    if mode == "regression" and target != "prediction":
        raise ValueError(f"target must be 'prediction' for mode='regression' (the output itself is "
                         f"explained), got {target!r}")
    if mode == "binary_classification" and isinstance(target, int) and target > 1:
        raise ValueError(f"target must be 0 or 1 for mode='binary_classification', got {target}")
    if backend == "graph" and rule is not None:
        raise ValueError("rule: an lrp_lib.teach.graph model carries its rules in its layers; pass rule=None "
                         f"(got {rule!r})")
    # the rule as the manifest records it: its repr (``Epsilon(eps=1e-06)``), so that ``None``, ``"epsilon"`` and
    # ``Epsilon()`` resume one another (None for the graph backend)
    rule_name = None if backend == "graph" else repr(get_rule("epsilon" if rule is None else rule))
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out must be a folder, but {str(out)!r} is a file")
    out.mkdir(parents=True, exist_ok=True)
    rank, world = _distributed()
    device = _default_device() if device is None else torch.device(device)

    n = len(dataset)
    settings = {"num_graphs": n, "batch_size": batch_size, "mode": mode, "target": target, "rule": rule_name,
                "backend": backend}
    manifests = read_manifests(out)
    check_settings(out, manifests, settings)
    done = {int(b) for _, m in manifests for b in m.get("batches", {})}
    mine_path = manifest_path(out, rank)
    record = next((dict(m["batches"]) for p, m in manifests if p == mine_path), {})
    # a part file without a manifest entry (killed between the two renames) is redone: same name, same rows
    mine = range(rank, (n + batch_size - 1) // batch_size, world)
    todo = [b for b in mine if b not in done]
    summary = {"out": str(out), "rank": rank, "world_size": world, "batches": len(mine),
               "skipped": len(mine) - len(todo), "written": 0, "graphs": 0}
    if not todo:
        return summary

    for stale in [f".{part_name(b)}.*.tmp" for b in todo] + [f".{mine_path.name}.*.tmp"]:
        for path in out.glob(stale):  # left by a killed run of this rank
            path.unlink(missing_ok=True)
    training = model.training
    model.to(device).eval()
    explain = batch_explainer(model, mode, rule)
    ids_of = [list(range(b * batch_size, min(n, (b + 1) * batch_size))) for b in todo]
    subset = torch.utils.data.Subset(dataset, [i for ids in ids_of for i in ids])
    # the loader's batches are exactly ids_of: every job batch is full but the data set's last, last in todo
    loader = DataLoader(subset, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    bar = tqdm(total=len(todo), desc=f"explaining (rank {rank}/{world})" if world > 1 else "explaining",
               unit="batch", file=sys.stderr, disable=not progress or rank != 0)
    try:
        for b, ids, batch in zip(todo, ids_of, loader):
            batch = batch.to(device)
            table = batch_table(ids, *explain(batch, target), batch)
            write_atomic(out / part_name(b), lambda p: pq.write_table(table, p, row_group_size=len(ids)))
            record[str(b)] = {"file": part_name(b), "first_id": ids[0], "last_id": ids[-1], "rows": len(ids)}
            payload = {"format": FORMAT, "rank": rank, "world_size": world, "settings": settings,
                       "batches": dict(sorted(record.items(), key=lambda kv: int(kv[0])))}
            write_atomic(mine_path, lambda p: p.write_text(json.dumps(payload, indent=1) + "\n"))
            bar.update(1)
    finally:
        bar.close()
        model.train(training)
    return {**summary, "written": len(todo), "graphs": len(subset)}  # (the loop wrote every batch of todo)


def _load(spec: str, what: str):
    """``module:attr`` or ``path/to/file.py:attr``; a callable is called without arguments."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"--{what} must be 'module:callable' or 'file.py:callable', got {spec!r}")
    where, attr = spec.rsplit(":", 1)
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"--{what}: no file {where!r}")
        name = f"_lrp_job_{what}_{path.stem}"
        if (module := sys.modules.get(name)) is None:
            module_spec = importlib.util.spec_from_file_location(name, path)
            # registered before it runs, as an import would (dataclasses and pickling look it up by name)
            module = sys.modules[name] = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    if not hasattr(module, attr):
        raise ValueError(f"--{what}: {where!r} has no attribute {attr!r}")
    obj = getattr(module, attr)
    return obj() if callable(obj) and not isinstance(obj, nn.Module) else obj


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lrp-explain`` command: :func:`explain_dataset` with the arguments ``argv`` (default: ``sys.argv``)."""
    parser = argparse.ArgumentParser(prog="lrp-explain", description="Explain every graph of a data set with LRP; "
                                     "Parquet output, resumable (rerun the same command), sharded under torchrun.")
    parser.add_argument("--model", required=True, help="module:callable (or file.py:callable) giving the model")
    parser.add_argument("--dataset", required=True, help="module:callable (or file.py:callable) giving the data set")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--mode", required=True, choices=MODES)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--target", default="prediction", help="'prediction', 'label' or a class index")
    parser.add_argument("--rule", default=None, help="LRP rule of a PyG model: epsilon (default) or gamma")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads per process (torchrun sets OMP_NUM_THREADS=1 itself)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    target = int(args.target) if args.target.lstrip("-").isdigit() else args.target

    import torch.distributed as dist
    started = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized()
    if started:
        backend = "nccl" if torch.cuda.is_available() and (args.device is None or "cuda" in args.device) else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(_default_device())
        dist.init_process_group(backend)
    try:
        summary = explain_dataset(_load(args.model, "model"), _load(args.dataset, "dataset"), args.out,
                                  mode=args.mode, batch_size=args.batch_size, target=target, rule=args.rule,
                                  device=args.device, progress=not args.no_progress)
        if started:
            dist.barrier()
        print(json.dumps(summary), file=sys.stderr)
    finally:
        if started:
            dist.destroy_process_group()
    return 0
