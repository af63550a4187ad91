"""LRPExplainer through PyG's ``Explainer`` over the grid of its settings, and GNNExplainer and Captum
saliency over the same settings for comparison.

The grid: ``task_level`` (node, graph, edge: link prediction, the model takes ``edge_label_index``)
x ``mode`` (binary_classification, multiclass_classification, regression) x ``return_type`` (raw,
probs, log_probs) x ``explanation_type`` (model, phenomenon) x ``node_mask_type`` (None, object,
attributes, common_attributes) x ``edge_mask_type`` (None, object) x model (GCN, GAT, GIN, GPS:
``GPSConv(channels, GINConv(...), heads=2)``).  A combination that PyG's ``Explainer`` itself rejects
(its configuration checks, whatever the algorithm) is *invalid* and not counted.  Every valid one is
run and sorted:

* ``works``: an explanation came back and its relevance accounts for the explained value,
  ``node_relevance.sum() + edge_attr_relevance.sum() + bias_relevance + relevance_residual`` equals
  the value computed here independently of the explainer from the model's logits (the target
  class's logit for a multiclass classifier, the log-odds of the target class for a binary one, the
  output for a regression, summed over the explained rows ``index``), to ``1e-6`` relative, the masks
  are finite and in [0, 1] and have the shapes PyG expects;
* ``refused``: a clear error (``UnsupportedModelError``, ``ValueError``, ``TypeError``; the message is kept);
* ``crash``: any other exception;
* ``wrong``: an explanation came back but failed one of the checks above (the reason is kept).

For GNNExplainer (``epochs=5``) and Captum's ``Saliency`` (``CaptumExplainer``) there is no
conservation to check: ``works`` means an explanation with finite masks of the expected shapes.

The grid runs in float64 (conservation to 1e-6 relative) and again in float32 (1e-4; PyG's
GNNExplainer assumes float32: its binary-probability loss fails on float64 models), the float32 run
kept as a summary.

Run: ``python benchmarks/pyg_grid.py`` (about four minutes; writes ``benchmarks/results/pyg_grid.json``).
"""
from __future__ import annotations

import argparse
import itertools
import logging
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.nn import GATConv, GCNConv, GINConv, GPSConv, global_add_pool

from lrp_lib.explain.explainer import LRPExplainer, UnsupportedModelError

sys.path.insert(0, str(Path(__file__).resolve().parent))

TASK_LEVELS = ("node", "graph", "edge")
MODES = ("binary_classification", "multiclass_classification", "regression")
RETURN_TYPES = ("raw", "probs", "log_probs")
EXPLANATION_TYPES = ("model", "phenomenon")
NODE_MASK_TYPES = (None, "object", "attributes", "common_attributes")
EDGE_MASK_TYPES = (None, "object")
MODELS = ("GCN", "GAT", "GIN", "GPS")
METHODS = ("lrp", "gnnexplainer", "captum_saliency")
FEATURES, HIDDEN, CLASSES = 4, 8, 3
DTYPE = torch.float64  # --dtype float32 to compare with methods that assume float32


class GridModel(nn.Module):
    """Two message-passing layers (GCN, GAT, GIN, or a linear embedding and two GPSConv layers), then
    the task's head: the node embeddings (node), their sum per graph (graph), or an MLP on the two end
    points of each column of ``edge_label_index`` (edge); ``out`` logits (1 for binary and
    regression, 3 classes for multiclass), then the probability function ``return_type`` asks for
    (``sigmoid``/``logsigmoid`` for binary, ``softmax``/``log_softmax`` for multiclass)."""

    def __init__(self, kind: str, task_level: str, mode: str, return_type: str):
        super().__init__()
        self.kind, self.task_level, self.mode, self.return_type = kind, task_level, mode, return_type
        out = CLASSES if mode == "multiclass_classification" else 1
        if kind == "GCN":
            self.convs = nn.ModuleList([GCNConv(FEATURES, HIDDEN), GCNConv(HIDDEN, HIDDEN)])
        elif kind == "GAT":
            self.convs = nn.ModuleList([GATConv(FEATURES, HIDDEN // 2, heads=2), GATConv(HIDDEN, HIDDEN)])
        elif kind == "GIN":
            mlp = lambda i: nn.Sequential(nn.Linear(i, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))  # noqa: E731
            self.convs = nn.ModuleList([GINConv(mlp(FEATURES)), GINConv(mlp(HIDDEN))])
        elif kind == "GPS":
            self.embed = nn.Linear(FEATURES, HIDDEN)
            mlp = lambda: nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))  # noqa: E731
            self.convs = nn.ModuleList([GPSConv(HIDDEN, GINConv(mlp()), heads=2) for _ in range(2)])
        else:
            raise ValueError(f"kind must be one of {MODELS}, got {kind!r}")
        self.head = nn.Sequential(nn.Linear(2 * HIDDEN if task_level == "edge" else HIDDEN, HIDDEN), nn.ReLU(),
                                  nn.Linear(HIDDEN, out))
        self.logits_only = False

    def forward(self, x, edge_index, batch=None, edge_label_index=None):
        h = self.embed(x) if self.kind == "GPS" else x
        for conv in self.convs:
            h = conv(h, edge_index, batch) if self.kind == "GPS" else conv(h, edge_index)
            h = h if self.kind == "GPS" else torch.relu(h)
        if self.task_level == "graph":
            h = global_add_pool(h, batch)
        elif self.task_level == "edge":
            h = torch.cat([h[edge_label_index[0]], h[edge_label_index[1]]], -1)
        z = self.head(h)
        if self.logits_only or self.return_type == "raw":
            return z
        binary = self.mode != "multiclass_classification"
        if self.return_type == "probs":
            return torch.sigmoid(z) if binary else torch.softmax(z, -1)
        return F.logsigmoid(z) if binary else torch.log_softmax(z, -1)


def make_model(kind, task_level, mode, return_type, seed=0):
    torch.manual_seed(seed)
    model = GridModel(kind, task_level, mode, return_type).to(DTYPE).eval()
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():  # batch norms (GPSConv) with statistics as after training
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g, dtype=DTYPE) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g, dtype=DTYPE) + 0.5)
    return model


def make_inputs(task_level, seed=0):
    """Two small random undirected graphs in one batch (node and edge tasks: the batch as one graph),
    the keyword arguments the model takes, and the explained ``index``."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for n in (5, 7):
        src, dst = torch.randint(0, n, (2, 2 * n), generator=g)
        keep = src != dst
        ei = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
        graphs.append(Data(x=torch.rand(n, FEATURES, generator=g, dtype=DTYPE), edge_index=ei))
    data = Batch.from_data_list(graphs)
    kwargs = {"batch": data.batch}
    if task_level == "graph":
        index = 1
    elif task_level == "node":
        index = torch.tensor([1, 8])
    else:
        kwargs["edge_label_index"] = torch.tensor([[0, 2, 6, 9], [3, 4, 10, 11]])
        index = torch.tensor([0, 2])
    return data, kwargs, index


class _Anything(ExplainerAlgorithm):
    """An algorithm that supports every setting: PyG's own checks decide what is valid."""

    def supports(self):
        return True

    def forward(self, *args, **kwargs):
        raise NotImplementedError


def explainer_kwargs(combo: dict) -> dict:
    return dict(explanation_type=combo["explanation_type"], node_mask_type=combo["node_mask_type"],
                edge_mask_type=combo["edge_mask_type"],
                model_config=dict(mode=combo["mode"], task_level=combo["task_level"],
                                  return_type=combo["return_type"]))


def pyg_rejects(combo: dict) -> str | None:
    """PyG's reason for rejecting the settings (whatever the algorithm), or None if it accepts them."""
    model = make_model(combo["model"], combo["task_level"], combo["mode"], combo["return_type"])
    try:
        Explainer(model, algorithm=_Anything(), **explainer_kwargs(combo))
    except Exception as e:  # noqa: BLE001 -- PyG raises ValueError or TypeError
        return f"{type(e).__name__}: {e}"
    return None


def target_for(combo, model, data, kwargs):
    """The target of a phenomenon explanation (the model's own prediction is used for 'model'):
    the class after the predicted one (multiclass), the other class (binary), a random value
    (regression)."""
    with torch.no_grad():
        model.logits_only = True
        z = model(data.x, data.edge_index, **kwargs)
        model.logits_only = False
    if combo["mode"] == "multiclass_classification":
        return (z.argmax(-1) + 1) % CLASSES
    if combo["mode"] == "binary_classification":
        return (z.view(-1) <= 0).long()
    return torch.rand(z.shape, generator=torch.Generator().manual_seed(5), dtype=z.dtype)


def explained_value(combo, model, data, kwargs, index, target) -> float:
    """What LRP should conserve, from the model's logits and the target, independently of the explainer."""
    with torch.no_grad():
        model.logits_only = True
        z = model(data.x, data.edge_index, **kwargs)
        model.logits_only = False
    rows = torch.arange(z.shape[0])[index].view(-1)
    if combo["mode"] == "multiclass_classification":
        t = target.view(-1)
        t = t[rows] if t.numel() == z.shape[0] else t
        return float(z[rows, t].sum())
    if combo["mode"] == "binary_classification":
        t = target.view(-1)[rows].to(z.dtype)
        return float(((2 * t - 1) * z[rows, 0]).sum())
    return float(z[rows].sum())


def _mask_problems(e, combo, data) -> list[str]:
    n, f, edges = data.num_nodes, data.num_features, data.edge_index.shape[1]
    shapes = {"object": (n, 1), "attributes": (n, f), "common_attributes": (1, f)}
    out = []
    nm, em = e.get("node_mask"), e.get("edge_mask")
    if combo["node_mask_type"] is None:
        if nm is not None:
            out.append("node_mask set without node_mask_type")
    elif nm is None or tuple(nm.shape) != shapes[combo["node_mask_type"]]:
        out.append(f"node_mask shape {None if nm is None else tuple(nm.shape)}, expected "
                   f"{shapes[combo['node_mask_type']]}")
    elif not torch.isfinite(nm).all():
        out.append("node_mask not finite")
    if combo["edge_mask_type"] is None:
        if em is not None:
            out.append("edge_mask set without edge_mask_type")
    elif em is None or tuple(em.shape) != (edges,):
        out.append(f"edge_mask shape {None if em is None else tuple(em.shape)}, expected ({edges},)")
    elif not torch.isfinite(em).all():
        out.append("edge_mask not finite")
    return out


class _Logged(logging.Handler):
    """The messages PyG logs while an explainer is set up (why an algorithm refuses the settings)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def algorithm(method):
    """The algorithm of ``method`` (a name of :data:`METHODS`; an ``ExplainerAlgorithm`` is used as it is,
    and checked as LRP)."""
    if isinstance(method, ExplainerAlgorithm):
        return method
    if method == "lrp":
        return LRPExplainer()
    if method == "gnnexplainer":
        from torch_geometric.explain import GNNExplainer
        return GNNExplainer(epochs=5)
    if method == "captum_saliency":
        from torch_geometric.explain import CaptumExplainer
        return CaptumExplainer("Saliency")
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def run_one(combo: dict, method: str = "lrp") -> dict:
    """Run one valid combination with one method: a row with ``status`` and ``detail``."""
    model = make_model(combo["model"], combo["task_level"], combo["mode"], combo["return_type"])
    data, kwargs, index = make_inputs(combo["task_level"])
    target = target_for(combo, model, data, kwargs) if combo["explanation_type"] == "phenomenon" else None
    row = dict(combo, method=method if isinstance(method, str) else type(method).__name__)
    t0 = time.perf_counter()
    logged = _Logged()
    logging.getLogger().addHandler(logged)
    try:
        ex = Explainer(model, algorithm=algorithm(method), **explainer_kwargs(combo))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            e = ex(data.x, data.edge_index, target=target, index=index, **kwargs)
    except (UnsupportedModelError, ValueError, TypeError, NotImplementedError) as err:
        # PyG's algorithms log why they do not support the settings, then raise a generic error
        row.update(status="refused", detail=" ".join([*logged.messages, f"{type(err).__name__}: {err}"]))
        return row
    except Exception as err:  # noqa: BLE001 -- a crash is what this grid looks for
        row.update(status="crash", detail=f"{type(err).__name__}: {err} | "
                   + traceback.format_exc(limit=-2).strip().replace("\n", " / ")[-400:])
        return row
    finally:
        logging.getLogger().removeHandler(logged)
    row["seconds"] = round(time.perf_counter() - t0, 4)
    problems = _mask_problems(e, combo, data)
    if not isinstance(method, str) or method == "lrp":
        if combo["explanation_type"] == "model":
            with torch.no_grad():
                target = ex.get_target(ex.get_prediction(data.x, data.edge_index, **kwargs))
        want = explained_value(combo, model, data, kwargs, index, target)
        attr = e.get("edge_attr_relevance")
        got = (float(e.node_relevance.sum()) + (0.0 if attr is None else float(attr.sum()))
               + float(e.bias_relevance.sum()) + float(e.relevance_residual.sum()))
        row.update(explained=want, accounted=got, bias_relevance=float(e.bias_relevance.sum()),
                   relevance_residual=float(e.relevance_residual.sum()))
        scale = max(1.0, abs(want)) * (1e-6 if DTYPE == torch.float64 else 1e-4)
        if abs(got - want) > scale:
            problems.append(f"relevance accounts for {got:.6g}, the explained value is {want:.6g}")
        if not torch.isfinite(e.node_relevance).all():
            problems.append("node_relevance not finite")
        lost = [str(w.message) for w in caught if "did not reach" in str(w.message)]
        if lost:
            row["warning"] = lost[0][:300]
        elif abs(float(e.relevance_residual.sum())) > scale:  # lost without the explainer saying so
            problems.append(f"relevance_residual {float(e.relevance_residual.sum()):.3g} without a warning")
    if problems:
        row.update(status="wrong", detail="; ".join(problems))
    else:
        row.update(status="works", detail="")
    return row


def grid(models=MODELS):
    keys = ("model", "task_level", "mode", "return_type", "explanation_type", "node_mask_type", "edge_mask_type")
    for values in itertools.product(models, TASK_LEVELS, MODES, RETURN_TYPES, EXPLANATION_TYPES,
                                    NODE_MASK_TYPES, EDGE_MASK_TYPES):
        yield dict(zip(keys, values))


def run_grid(methods, models, dtype):
    """Every combination of the grid in ``dtype``: (summary, rows, invalid)."""
    global DTYPE
    DTYPE = dtype
    rows, invalid = [], []
    for combo in grid(models):
        reason = pyg_rejects(combo)
        if reason is not None:
            invalid.append(dict(combo, reason=reason))
            continue
        for method in methods:
            rows.append(run_one(combo, method))
    counts = {m: dict(Counter(r["status"] for r in rows if r["method"] == m)) for m in methods}
    by_model = {m: {k: dict(Counter(r["status"] for r in rows if r["method"] == m and r["model"] == k))
                    for k in models} for m in methods}
    lrp_rows = [r for r in rows if r["method"] == "lrp" and "relevance_residual" in r]
    messages = lambda status: {m: dict(Counter(r["detail"][:200] for r in rows  # noqa: E731
                                               if r["method"] == m and r["status"] == status)) for m in methods}
    summary = dict(valid=len(rows) // max(len(methods), 1), invalid=len(invalid), counts=counts, by_model=by_model,
                   invalid_reasons=dict(Counter(r["reason"].split(":", 1)[1].strip()[:120] for r in invalid)),
                   lrp_max_abs_residual=max((abs(r["relevance_residual"]) for r in lrp_rows), default=None),
                   lrp_max_abs_error=max((abs(r["accounted"] - r["explained"]) for r in lrp_rows), default=None),
                   lrp_warned=sum("warning" in r for r in lrp_rows),
                   refusal_messages=messages("refused"), crash_messages=messages("crash"), wrong_messages=messages("wrong"))
    return summary, rows, invalid


def compact_table(rows, methods) -> dict:
    """One line per valid combination: its settings, then each method's status (the messages are in
    the summary, counted): ``"GCN node binary_classification raw model - object": "works works refused"``."""
    keys = ("model", "task_level", "mode", "return_type", "explanation_type", "node_mask_type", "edge_mask_type")
    table: dict[str, list] = {}
    for r in rows:
        table.setdefault(" ".join(str(r[k] or "-") for k in keys), []).append(r["status"])
    return {"columns": " ".join(keys) + ": " + " ".join(methods),
            "rows": {k: " ".join(v) for k, v in table.items()}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--dtypes", default="float64,float32",
                        help="the first is the main grid (all rows kept); the others: their summaries")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    for handler in logging.getLogger().handlers:  # PyG logs each unsupported setting: the rows keep it, not stderr
        handler.setLevel(logging.CRITICAL)
    methods, models, dtypes = args.methods.split(","), tuple(args.models.split(",")), args.dtypes.split(",")
    results = {}
    for k, name in enumerate(dtypes):
        summary, rows, invalid = run_grid(methods, models, getattr(torch, name))
        print(f"{name}: {summary['valid']} valid combinations, {summary['invalid']} rejected by PyG")
        for m in methods:
            print(f"  {m:16s} {summary['counts'][m]}")
        results[name] = dict(summary=summary, table=compact_table(rows, methods)) if k == 0 else dict(summary=summary)
    if not args.no_write:
        from results_file import write_results
        path = write_results("pyg_grid", results, settings=dict(methods=methods, models=list(models), dtypes=dtypes,
                                                                threads=args.threads))
        print("wrote", path)
    return results


if __name__ == "__main__":
    main()
