"""The files of a data-set job (:mod:`lrp_lib.explain.jobs`): batch ``b`` in ``part-<b>.parquet`` (one row
group, the columns of :data:`COLUMNS`), each process's record in ``manifest-rank<r>.json``, both written to a
temporary file and renamed (:func:`write_atomic`); :func:`read_explanations` reads back what the manifests record.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import torch

__all__ = ["COLUMNS", "FORMAT", "SETTINGS", "read_explanations", "write_atomic", "part_name", "manifest_path",
           "read_manifests", "check_settings", "batch_table", "pyarrow_modules"]

#: The columns of every part file, in order: the graph's index, the class explained (-1: regression), the output
#: explained (the target's logit, :math:`\pm` a binary logit, the regression value), the explained value minus the
#: inputs' relevance, and the relevance per node and per edge.
COLUMNS = ("graph_id", "target", "explained_value", "bias_relevance", "node_relevance", "edge_relevance")
FORMAT = 1
SETTINGS = ("num_graphs", "batch_size", "mode", "target", "rule", "backend")


def pyarrow_modules():
    try:
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError as err:
        raise ImportError(f"lrp_lib.explain.jobs writes and reads Parquet with pyarrow, which is not installed "
                          f"({err}): pip install pyarrow (or pip install 'lrp_lib[jobs]')") from None
    return pyarrow


def write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def part_name(b: int) -> str:
    return f"part-{b:06d}.parquet"


def manifest_path(out: Path, rank: int) -> Path:
    return out / f"manifest-rank{rank:05d}.json"


def read_manifests(out: Path) -> list[tuple[Path, dict]]:
    found = []
    for path in sorted(out.glob("manifest-rank*.json")):
        try:
            found.append((path, json.loads(path.read_text())))
        except json.JSONDecodeError as err:  # cannot happen with atomic writes; say so if it does
            raise ValueError(f"{path}: not valid JSON ({err}); the job's manifests are written atomically, "
                             "so the file was changed by something else") from None
    return found


def check_settings(out: Path, manifests, settings: dict) -> None:
    for path, data in manifests:
        old = data.get("settings", {})
        for key in SETTINGS:
            if old.get(key) != settings[key]:
                names = {"num_graphs": "dataset_or_loader (its number of graphs)", "backend": "model (its kind)"}
                raise ValueError(f"out={str(out)!r} holds a job run with {key}={old.get(key)!r} ({path.name}), but "
                                 f"this call has {key}={settings[key]!r}: {names.get(key, key)} differs. Rerun with "
                                 f"the same arguments to resume, or choose a new out")


def batch_table(ids: Sequence[int], target, value, bias, node, edge, batch):
    pa = pyarrow_modules()
    # PyG's Batch keeps each graph's nodes and edges together, in the order of the graphs
    nodes, edges = (t.detach().cpu().split(torch.bincount(graph, minlength=len(ids)).tolist())
                    for t, graph in ((node, batch.batch), (edge, batch.batch[batch.edge_index[0]])))
    float_type = pa.float64() if node.dtype == torch.float64 else pa.float32()
    return pa.table({
        "graph_id": pa.array(list(ids), pa.int64()),
        "target": pa.array(target.cpu().tolist(), pa.int64()),
        "explained_value": pa.array(value.detach().double().cpu().tolist(), pa.float64()),
        "bias_relevance": pa.array(bias.detach().double().cpu().tolist(), pa.float64()),
        "node_relevance": pa.array([t.numpy() for t in nodes], pa.list_(float_type)),
        "edge_relevance": pa.array([t.numpy() for t in edges], pa.list_(float_type)),
    })


def read_explanations(out, *, check: bool = True):
    """All rows a job wrote to ``out`` (the part files that its manifests record), sorted by graph id, as a
    ``pyarrow.Table``.  Raises FileNotFoundError where ``out`` is not a folder and, with ``check`` (default),
    ValueError when a graph id occurs twice or a recorded part file is missing."""
    pa = pyarrow_modules()
    pc, pq = pa.compute, pa.parquet
    out = Path(out)
    if not out.is_dir():
        raise FileNotFoundError(f"out: {str(out)!r} is not a folder written by explain_dataset")
    files = {int(b): out / entry["file"] for _, m in read_manifests(out) for b, entry in m.get("batches", {}).items()}
    if not files:
        return pa.table({c: [] for c in COLUMNS})
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing and check:
        raise ValueError(f"out: the manifests record part files that are missing: {missing[:3]}")
    table = pa.concat_tables([pq.read_table(files[b]) for b in sorted(files) if files[b].exists()])
    table = table.take(pc.sort_indices(table, [("graph_id", "ascending")]))
    if check and len(table) and pc.count_distinct(table.column("graph_id")).as_py() != len(table):
        raise ValueError("out: a graph id occurs in more than one row")
    return table
