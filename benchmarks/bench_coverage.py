"""Which PyTorch Geometric layers and models LRPExplainer explains correctly: ok / refused / wrong.

    python benchmarks/bench_coverage.py [--only GCNConv,GATConv,...] [--list]

Goes over every layer in ``torch_geometric.nn.conv.__all__`` and every model in
``torch_geometric.nn.models.__all__`` (plus a residual model, a sigmoid head and heterogeneous
models built with ``to_hetero`` / ``HeteroConv`` / ``HGTConv`` / ``HANConv``), and layer options
(every string aggregation, LSTM and multi-aggregation, ``edge_weight``, graph readouts other than a
sum), and single operations after a GCN layer (``PRIMITIVE_FNS``: sums, products, gates, softmax,
normalisations, ...).  Each is built with small sizes from the constructor tables below (``CONVS``,
``AGGREGATIONS``, ``PRIMITIVES``, ``MODELS``, ``HETERO``), in float64, with
every bias set to zero, in eval mode, and explained through PyG's ``Explainer`` with
``LRPExplainer(rule=Epsilon(0.0))`` (LRP-0), at two task levels:

* ``graph``: conv -> ReLU -> ``global_add_pool`` -> ``Linear(., 1)`` (models: ``global_mean_pool``)
  on a batch of two small graphs; the explained output is the sum of both graphs' outputs;
* ``node``: conv -> ReLU -> ``Linear(., 1)``; the explained output is the output of one node;

and, where the layer takes ``edge_attr``, with and without it.  Each explanation is sorted:

* **ok**: the node relevance (plus the relevance of ``edge_attr``, when the explanation reports
  it under a key of its own with the shape of ``edge_attr``) sums to the explained output within
  ``TOL`` (1e-8, relative to max(1, |output|)); and, when the model is piecewise linear, the
  node relevance equals ``x * d(output)/dx`` computed by plain autograd on the unmodified model
  within ``TOL``.  Piecewise linear is decided automatically: positively homogeneous
  (``f(a x) = a f(x)`` for a = 0.5 and 3 on random inputs, biases being zero) and with a
  gradient that does not change under a small random perturbation of the input.  For such a
  model LRP-0 is exactly input times gradient.  (Homogeneity is taken jointly in ``x`` and
  ``edge_attr`` when the explanation reports ``edge_attr`` relevance, in ``x`` alone otherwise.)
* **refused**: ``UnsupportedModelError``, ``ValueError`` or ``TypeError`` with a message (the
  first line is kept, and the file where it was raised); a refused or crashed row is explained
  again with ``edge_mask_type=None`` (node relevance only), stored as ``without_edge_mask``;
* **wrong**: an explanation that fails a check (the errors are stored, whether the explainer
  warned about it, and the single numbers it reports besides the masks, such as the share of
  constant terms, with ``accounted`` true when they make up the rest of the output);
* **crash**: any other exception: a failure of the library;
* **skipped**: layers that cannot be built generically (they need node positions, a hypergraph,
  CUDA-only kernels, packages that are not installed, ...), each with its reason; also a model
  whose unmodified forward fails on the generic inputs.

Writes ``benchmarks/results/coverage.json`` (one row per (layer, task level, edge_attr)) with
``results_file.write_results``; ``--only`` runs a subset and writes nothing.  ``--baseline FILE``
stores the statuses of an earlier run (the library before the generic mechanism) in the new file,
``--keep-baseline`` carries over the one already stored, ``--library-note`` says which lrp_lib
was measured.  A full run takes
well under three minutes on one thread.  ``check`` is the checking function that
``tests/benchmarks/test_bench_coverage.py`` also calls with deliberately wrong explainers.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.explain import Explainer
from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

import torch_geometric.nn.aggr as pyg_aggr
import torch_geometric.nn.conv as pyg_conv
import torch_geometric.nn.models as pyg_models

from lrp_lib.explain.explainer import LRPExplainer, UnsupportedModelError
from lrp_lib.explain.walks import HeteroWalkModel, WalkModel, all_walks
from lrp_lib.core.rules import Epsilon

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import write_results  # noqa: E402

TOL = 1e-8
F_IN, HIDDEN, EDGE_DIM = 4, 4, 3
NODE = 1  # the explained node of the node-level task
STATUSES = ("ok", "refused", "wrong", "crash", "skipped")


# ----------------------------------------------------------------------- inputs
def graph_inputs(seed: int = 0, f_in: int = F_IN, edge_dim: int = EDGE_DIM) -> dict:
    """Two small graphs in one batch (6 and 5 nodes): a directed ring both ways plus a few random
    edges in each (sorted by receiver, as LSTM aggregation needs), float64 features ``x`` (N, f_in),
    ``edge_attr`` (E, edge_dim), a relation type per edge (``edge_type``, 2 types), a node type per
    node (``node_type``, 2 types) and a positive ``edge_weight`` per edge (0.5 to 1.5)."""
    g = torch.Generator().manual_seed(seed)
    edges, offset, batch = [], 0, []
    for b, n in enumerate((6, 5)):
        pairs = {(i, (i + 1) % n) for i in range(n)} | {((i + 1) % n, i) for i in range(n)}
        for _ in range(3):
            s, d = torch.randint(0, n, (2,), generator=g).tolist()
            if s != d:
                pairs.add((s, d))
        edges += [(s + offset, d + offset) for s, d in sorted(pairs, key=lambda p: (p[1], p[0]))]
        batch += [b] * n
        offset += n
    edge_index = torch.tensor(edges, dtype=torch.long).t().contiguous()
    num_nodes, num_edges = offset, edge_index.shape[1]
    return dict(
        x=torch.randn(num_nodes, f_in, generator=g, dtype=torch.float64),
        edge_index=edge_index,
        edge_attr=torch.randn(num_edges, edge_dim, generator=g, dtype=torch.float64),
        batch=torch.tensor(batch),
        edge_type=torch.randint(0, 2, (num_edges,), generator=g),
        node_type=torch.randint(0, 2, (num_nodes,), generator=g),
        edge_weight=0.5 + torch.rand(num_edges, generator=g, dtype=torch.float64),
    )


def hetero_inputs(seed: int = 0) -> dict:
    """One heterogeneous graph: node types 'a' (5 nodes, 4 features) and 'b' (4 nodes, 3),
    edge types a->b, b->a, a->a, float64."""
    g = torch.Generator().manual_seed(seed)

    def edges(n_src, n_dst, k):
        pairs = sorted({(int(s), int(d)) for s, d in zip(torch.randint(0, n_src, (k,), generator=g),
                                                         torch.randint(0, n_dst, (k,), generator=g))})
        return torch.tensor(pairs, dtype=torch.long).t().contiguous()

    x = {"a": torch.randn(5, 4, generator=g, dtype=torch.float64),
         "b": torch.randn(4, 3, generator=g, dtype=torch.float64)}
    ab = edges(5, 4, 8)
    edge_index = {("a", "to", "b"): ab, ("b", "rev_to", "a"): ab.flip(0), ("a", "links", "a"): edges(5, 5, 6)}
    return dict(x=x, edge_index=edge_index)


HETERO_METADATA = (["a", "b"], [("a", "to", "b"), ("b", "rev_to", "a"), ("a", "links", "a")])


# ---------------------------------------------------------------- the checker
def zero_biases(model: nn.Module) -> nn.Module:
    """Set every parameter whose name contains 'bias' to zero (also MultiheadAttention's
    in_proj_bias, LSTM's bias_ih/hh, norms' bias)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name.split(".")[-1]:
                p.zero_()
    return model


def _leaves(x, edge_attr=None):
    xs = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()} if isinstance(x, dict) else \
        x.detach().clone().requires_grad_(True)
    ea = edge_attr.detach().clone().requires_grad_(True) if edge_attr is not None else None
    return xs, ea


def _flat(x) -> list[Tensor]:
    return [x[k] for k in sorted(x)] if isinstance(x, dict) else [x]


def _explained(model, x, edge_index, kwargs, level, index):
    """The explained output as a scalar (sum of the graphs' outputs, or node ``index``'s output),
    and the full output."""
    out = model(x, edge_index, **kwargs)
    y = out.sum() if level == "graph" else out[index].sum()
    return y, out


def reference(model, inputs: dict, level: str, index: int = NODE):
    """Plain autograd on the unmodified model: the explained value y, d y/dx and d y/d edge_attr."""
    x, ea = _leaves(inputs["x"], inputs.get("edge_attr"))
    kwargs = _kwargs(inputs, ea)
    y, _ = _explained(model, x, inputs["edge_index"], kwargs, level, index)
    wrt = _flat(x) + ([ea] if ea is not None else [])
    grads = torch.autograd.grad(y, wrt, allow_unused=True)
    grads = [torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads)]
    return float(y.detach()), grads


def _kwargs(inputs: dict, edge_attr=None) -> dict:
    kwargs = {k: v for k, v in inputs.items() if k not in ("x", "edge_index") and v is not None}
    if "edge_attr" in kwargs:
        kwargs["edge_attr"] = edge_attr if edge_attr is not None else kwargs["edge_attr"]
    return kwargs


def _scale(inputs: dict, a: float, with_edge_attr: bool, shift=None) -> dict:
    out = dict(inputs)
    x = inputs["x"]
    out["x"] = {k: a * v for k, v in x.items()} if isinstance(x, dict) else a * x
    if shift is not None:
        out["x"] = {k: v + shift["x"][k] for k, v in out["x"].items()} if isinstance(x, dict) else out["x"] + shift["x"]
    if inputs.get("edge_attr") is not None:
        if with_edge_attr:
            out["edge_attr"] = a * inputs["edge_attr"]
        if with_edge_attr and shift is not None:
            out["edge_attr"] = out["edge_attr"] + shift["edge_attr"]
    return out


def piecewise_linear(model, inputs: dict, level: str, with_edge_attr: bool, index: int = NODE) -> tuple[bool, bool]:
    """(positively homogeneous, piecewise linear) in x (and edge_attr if ``with_edge_attr``).

    Homogeneous: f(a u) = a f(u) for a = 0.5 and 3 (relative 1e-9).  Piecewise linear: homogeneous
    and the gradient of the explained output unchanged (relative 1e-10) when the inputs move by a
    random 1e-6 step: locally linear, as a ReLU network away from its kinks."""
    with torch.no_grad():
        base = model(inputs["x"], inputs["edge_index"], **_kwargs(inputs))
        scale = max(1.0, float(base.abs().max()))
        homogeneous = all(
            float((model(s["x"], s["edge_index"], **_kwargs(s)) - a * base).abs().max()) <= 1e-9 * scale * a
            for a in (0.5, 3.0) for s in [_scale(inputs, a, with_edge_attr)])
    if not homogeneous:
        return False, False
    g = torch.Generator().manual_seed(1)
    step = {"x": {k: 1e-6 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in inputs["x"].items()}
            if isinstance(inputs["x"], dict) else 1e-6 * torch.randn(inputs["x"].shape, generator=g, dtype=torch.float64)}
    if inputs.get("edge_attr") is not None:
        step["edge_attr"] = 1e-6 * torch.randn(inputs["edge_attr"].shape, generator=g, dtype=torch.float64)
    _, g0 = reference(model, inputs, level, index)
    _, g1 = reference(model, _scale(inputs, 1.0, with_edge_attr, shift=step), level, index)
    gscale = max(max(float(t.abs().max()) for t in g0 if t.numel()), 1e-300)
    moved = max(float((a - b).abs().max()) for a, b in zip(g0, g1) if a.numel())
    return True, moved <= 1e-10 * gscale


def _edge_attr_relevance(explanation, edge_attr: Tensor | None, known: set):
    """(key, tensor) of an extra entry of the explanation with the shape of edge_attr, or None."""
    if edge_attr is None:
        return None
    for key in explanation.keys():
        if key in known:
            continue
        value = explanation[key]
        if isinstance(value, Tensor) and tuple(value.shape) == tuple(edge_attr.shape) and value.is_floating_point():
            return key, value
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _raised_in(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return ""
    path = Path(tb[-1].filename)
    parts = path.parts
    for root in ("lrp_lib", "torch_geometric", "torch"):
        if root in parts:
            return "/".join(parts[parts.index(root):]) + f":{tb[-1].lineno}"
    return path.name + f":{tb[-1].lineno}"


def default_algorithm():
    return LRPExplainer(rule=Epsilon(0.0), mask="relevance")


def _sci(v: float | None):
    return None if v is None else float(f"{v:.2g}")


def check(model: nn.Module, inputs: dict, level: str, algorithm=None, index: int = NODE,
          edge_mask_type: str | None = "object") -> dict:
    """Explain ``model`` on ``inputs`` (x, edge_index and the model's keyword arguments) at task
    ``level`` ('graph' or 'node') and sort the outcome.  Returns a dict with ``status`` (ok / refused /
    wrong / crash), ``reason``, ``conservation_error``, ``xgrad_error`` (None when not piecewise
    linear), ``piecewise_linear``, ``homogeneous``, ``edge_attr_relevance`` (the key found, or None)
    and ``warnings``.  ``algorithm``: the explainer algorithm (default LRPExplainer(rule=Epsilon(0.0)));
    ``edge_mask_type``: 'object' (edge relevance too) or None."""
    model = model.double().eval()
    algorithm = default_algorithm() if algorithm is None else algorithm
    row = dict(status=None, reason="", raised_in="", conservation_error=None, xgrad_error=None,
               piecewise_linear=None, homogeneous=None, edge_attr_relevance=None, warnings=[])
    y, grads = reference(model, inputs, level, index)
    kwargs = _kwargs(inputs)
    explainer = Explainer(model, algorithm=algorithm, explanation_type="model", node_mask_type="attributes",
                          edge_mask_type=edge_mask_type,
                          model_config=dict(mode="regression", task_level=level, return_type="raw"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            explanation = explainer(inputs["x"], inputs["edge_index"], index=None if level == "graph" else index,
                                    **kwargs)
        except (UnsupportedModelError, ValueError, TypeError) as e:
            explanation = None
            row.update(status="refused", reason=_first_line(e), raised_in=_raised_in(e))
        except Exception as e:  # noqa: BLE001 - any other exception is the library's failure
            explanation = None
            row.update(status="crash", reason=_first_line(e), raised_in=_raised_in(e),
                       traceback="".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:]))
    row["warnings"] = sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught
                              if not issubclass(w.category, (DeprecationWarning,))})
    if explanation is None:
        return row
    ea = inputs.get("edge_attr")
    known = {"node_mask", "edge_mask", "x", "edge_index", "target", "index", "prediction", *kwargs}
    hetero = isinstance(inputs["x"], dict)
    if hetero:
        masks = explanation.collect("node_mask")
        node_rel = [masks.get(k) for k in sorted(inputs["x"])]
    else:
        node_rel = [explanation.get("node_mask")]
    if any(m is None for m in node_rel):
        row.update(status="wrong", reason="no node_mask in the explanation")
        return row
    found = None if hetero else _edge_attr_relevance(explanation, ea, known)
    rel = [m.detach().to(torch.float64) for m in node_rel]
    row["_node_relevance"] = dict(zip(sorted(inputs["x"]), rel)) if hetero else rel[0]  # for check_walks; not written
    if found is not None:
        row["edge_attr_relevance"] = found[0]
        rel.append(found[1].detach().to(torch.float64))
    norm = max(1.0, abs(y))
    total = sum(float(r.sum()) for r in rel)
    cons = abs(total - y) / norm if all(bool(torch.isfinite(r).all()) for r in rel) else float("inf")
    row["conservation_error"] = _sci(cons)
    homogeneous, pl = piecewise_linear(model, inputs, level, with_edge_attr=found is not None, index=index)
    row.update(homogeneous=homogeneous, piecewise_linear=pl)
    # relevance the explanation reports elsewhere as one number each (e.g. the share of constant terms)
    others = {} if hetero else {
        key: float(explanation[key].sum()) for key in explanation.keys()
        if key not in known and (found is None or key != found[0]) and isinstance(explanation[key], Tensor)
        and explanation[key].is_floating_point() and explanation[key].numel() == 1}
    row["other_relevance"] = {k: _sci(v) for k, v in sorted(others.items())}
    row["accounted"] = bool(others) and abs(total + sum(others.values()) - y) / norm <= TOL
    wrong = []
    if not cons <= TOL:
        wrong.append(f"relevance sums to {total:.6g}, output {y:.6g}")
        if others:
            wrong.append("reported besides: " + ", ".join(f"{k} {v:.3g}" for k, v in sorted(others.items()))
                         + (" (they make up the rest)" if row["accounted"] else ""))
    if pl:
        xs = _flat(inputs["x"]) + ([ea] if found is not None else [])
        ref = [v * g for v, g in zip(xs, grads)]
        err = max(float((r - q).abs().max()) if r.shape == q.shape else float("inf")
                  for r, q in zip(rel, ref)) / norm
        row["xgrad_error"] = _sci(err)
        if not err <= TOL:
            wrong.append(f"relevance differs from x * gradient by {err:.2g}")
    row["status"] = "wrong" if wrong else "ok"
    if wrong and row["warnings"]:  # a wrong explanation that says so is still wrong, but not silent
        wrong.append(f"with a warning ({row['warnings'][0].split(':')[0]})")
    row["reason"] = "; ".join(wrong)
    return row


def _first_graph(inputs: dict) -> dict:
    """The first graph of a batch on its own: its nodes and edges, every per-node and per-edge input
    sliced (a tensor whose first dimension is the number of nodes or of edges), ``batch`` all zeros."""
    batch, edge_index = inputs["batch"], inputs["edge_index"]
    nodes, edges = batch == 0, batch[edge_index[0]] == 0
    n, e = int(batch.numel()), int(edge_index.shape[1])
    out = {}
    for key, value in inputs.items():
        if key == "edge_index":
            out[key] = value[:, edges]  # graph 0's nodes come first, so their ids stay
        elif isinstance(value, Tensor) and value.dim() and value.shape[0] == n:
            out[key] = value[nodes]
        elif isinstance(value, Tensor) and value.dim() and value.shape[0] == e:
            out[key] = value[edges]
        else:
            out[key] = value
    return out


def first_graph_relevance(model: nn.Module, inputs: dict) -> Tensor:
    """``LRPExplainer``'s node relevance (LRP-0) of one graph on its own (``inputs`` from
    :func:`_first_graph`), graph level, float64."""
    explainer = Explainer(model, algorithm=default_algorithm(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type=None,
                          model_config=dict(mode="regression", task_level="graph", return_type="raw"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explanation = explainer(inputs["x"], inputs["edge_index"], **_kwargs(inputs))
    return explanation.node_mask.detach().to(torch.float64)


def check_walks(model: nn.Module, inputs: dict, level: str, node_relevance: Tensor, index: int = NODE) -> dict:
    """The walks of the same model under the same rule (LRP-0, :mod:`lrp_lib.explain.walks`): every
    walk's relevance (all walks enumerated), summed by start node, against ``node_relevance``, the node
    relevance of ``LRPExplainer``'s explanation (:func:`check`).  Graph level: the walks explain the first
    graph of the batch on its own (a walk model explains one number); ``node_relevance`` is then
    ``LRPExplainer``'s node relevance of that graph on its own (:func:`first_graph_relevance`, as
    :func:`run_spec` passes it: a model that mixes the graphs of a batch, by attention over all nodes or
    by a norm's batch statistics, gives a graph alone other values than in the batch), or of the whole
    batch (its first graph's rows are compared: valid where the graphs do not interact).  A refusal of the walks (``WalksUndefinedError``, a ValueError: relevance moves
    between nodes outside message passing, or a layer propagates over another node set) is "refused".
    A heterogeneous graph: walks of typed nodes (:mod:`lrp_lib.explain.walks.hetero`), summed by start
    node per node type against ``node_relevance``, a dict node type -> relevance.  Returns
    ``walks`` (ok / refused / wrong / crash), ``walks_reason``,
    ``walks_count`` (the number of walks) and ``walks_error`` (the largest difference, relative to
    max(1, |the explained output|))."""
    out = dict(walks=None, walks_reason="", walks_count=None, walks_error=None)
    hetero = isinstance(inputs["x"], dict)
    if hetero:
        types = list(inputs["x"])
        node_relevance = torch.cat([node_relevance[k].sum(-1) for k in types])
        node_relevance = node_relevance.unsqueeze(-1)
    n = node_relevance.shape[0] if hetero else inputs["x"].shape[0]
    nodes = torch.ones(n, dtype=torch.bool)
    if level == "graph" and inputs.get("batch") is not None and not hetero:
        inputs, nodes = _first_graph(inputs), inputs["batch"] == 0
        if node_relevance.shape[0] != n:  # already the first graph's own
            nodes = torch.ones(node_relevance.shape[0], dtype=torch.bool)
    kwargs = {} if hetero else _kwargs(inputs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wm = (HeteroWalkModel if hetero else WalkModel)(model, inputs["x"], inputs["edge_index"], Epsilon(0.0),
                                                            index=None if level == "graph" else index, **kwargs)
            walks = all_walks(wm)
            rel = wm.walk_relevance(walks).detach().to(torch.float64)
            y = float(model(inputs["x"], inputs["edge_index"], **kwargs)[0 if level == "graph" else index].sum())
    except (UnsupportedModelError, ValueError, TypeError, NotImplementedError) as e:
        out.update(walks="refused", walks_reason=_first_line(e))
        return out
    except Exception as e:  # noqa: BLE001 - any other exception is the library's failure
        out.update(walks="crash", walks_reason=_first_line(e))
        return out
    size = n if hetero else inputs["x"].shape[0]  # graph level: the first graph's nodes
    marginal = torch.zeros(size, dtype=torch.float64).index_add_(0, walks[:, 0], rel)
    err = float((marginal - node_relevance.sum(-1)[nodes]).abs().max()) / max(1.0, abs(y))
    out.update(walks="ok" if err <= TOL else "wrong", walks_count=int(walks.shape[0]), walks_error=_sci(err))
    if err > TOL:
        out["walks_reason"] = f"walks summed by start node differ from the node relevance by {err:.2g}"
    return out


# ------------------------------------------------------------------- the models
class ConvModel(nn.Module):
    """conv -> ReLU -> (graph: global_add_pool) -> Linear(., 1); ``call`` says how to call the conv."""

    def __init__(self, conv: nn.Module, call: Callable, level: str, width: int, pool=global_add_pool,
                 relu: bool = True):
        super().__init__()
        self.conv, self.call, self.level, self.pool, self.relu = conv, call, level, pool, relu
        self.head = nn.Linear(width, 1, bias=False)

    def features(self, x, edge_index, edge_attr=None, batch=None, edge_type=None, node_type=None,
                 edge_weight=None):
        h = self.call(self.conv, x, edge_index, edge_attr=edge_attr, batch=batch, edge_type=edge_type,
                      node_type=node_type, edge_weight=edge_weight)
        if isinstance(h, tuple):
            h = h[0]
        if self.relu:
            h = F.relu(h)
        if self.level == "graph":
            h = self.pool(h, batch)
        return h

    def forward(self, *args, **kwargs):
        return self.head(self.features(*args, **kwargs))


class Readout(nn.Module):
    """A model that returns one row per graph itself (AttentiveFP): explained as is."""

    def __init__(self, model: nn.Module, call: Callable, level: str, width: int):
        super().__init__()
        self.model, self.call = model, call

    def forward(self, x, edge_index, edge_attr=None, batch=None, edge_type=None, node_type=None, edge_weight=None):
        return self.call(self.model, x, edge_index, edge_attr=edge_attr, batch=batch)


def call_plain(conv, x, edge_index, edge_attr=None, **_):
    return conv(x, edge_index) if edge_attr is None else conv(x, edge_index, edge_attr=edge_attr)


def call_edge_weight(conv, x, edge_index, edge_weight=None, **_):
    return conv(x, edge_index, edge_weight)


def call_with_batch(conv, x, edge_index, edge_attr=None, batch=None, **_):
    return conv(x, edge_index, batch=batch)


def call_x0(conv, x, edge_index, **_):  # GCN2Conv, FAConv: (x, x_0, edge_index)
    return conv(x, x, edge_index)


def call_signed(conv, x, edge_index, **_):  # SignedConv: positive and negative edges, alternating
    return conv(x, edge_index[:, 0::2], edge_index[:, 1::2])


def call_dna(conv, x, edge_index, **_):  # DNAConv: (N, layers, channels), one layer of history
    return conv(x.unsqueeze(1), edge_index)


def call_relational(conv, x, edge_index, edge_attr=None, edge_type=None, **_):
    return conv(x, edge_index, edge_type) if edge_attr is None else conv(x, edge_index, edge_type, edge_attr)


def call_heat(conv, x, edge_index, edge_attr=None, edge_type=None, node_type=None, **_):
    return conv(x, edge_index, node_type, edge_type, edge_attr)


def call_model(model, x, edge_index, edge_attr=None, batch=None, **_):  # basic_gnn models
    return model(x, edge_index, edge_attr=edge_attr, batch=batch) if edge_attr is not None else \
        model(x, edge_index, batch=batch)


def call_batch_positional(model, x, edge_index, edge_attr=None, batch=None, **_):
    return model(x, edge_index, batch)


def call_first_column(model, x, edge_index, edge_attr=None, batch=None, **_):
    return model(x, edge_index, batch)[:, :1]


def call_attentivefp(model, x, edge_index, edge_attr=None, batch=None, **_):
    return model(x, edge_index, edge_attr, batch)


def mlp(i, o):
    return nn.Sequential(nn.Linear(i, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, o))


def pna_degree(inputs):
    from torch_geometric.utils import degree
    d = degree(inputs["edge_index"][1], inputs["x"].shape[0], dtype=torch.long)
    return torch.bincount(d)


@dataclass
class Spec:
    """A layer or model of the table: ``build(edge_dim or None, inputs)`` returns the module;
    ``edge``: 'no' (takes no edge_attr), 'optional' or 'required'; ``uses``: extra inputs
    (edge_type, node_type) passed to it."""
    name: str
    family: str
    build: Callable | None = None
    edge: str = "no"
    call: Callable = call_plain
    uses: tuple = ()
    wrapper: type = ConvModel
    pool: Callable = global_add_pool
    levels: tuple = ("graph", "node")
    relu: bool = True
    pool_module: Callable | None = None  # builds a readout module (graph level) instead of ``pool``
    skip: str = ""
    kwargs_text: str = ""
    zero: tuple = ()  # further parameters that act as biases (set to zero like the biases)


def _c(name, family, build, kwargs_text, **kw):
    return Spec(name, family, build, kwargs_text=kwargs_text, **kw)


C = pyg_conv
I, O, E = F_IN, HIDDEN, EDGE_DIM
PNA_AGGR = dict(aggregators=["mean", "min", "max", "std"], scalers=["identity", "amplification", "attenuation"])

CONVS = [
    Spec("MessagePassing", "conv", skip="the abstract base class of all layers (each layer below is one)"),
    _c("SimpleConv", "conv", lambda ed, d: C.SimpleConv(aggr="sum", combine_root="sum"),
       "aggr='sum', combine_root='sum'"),
    _c("GCNConv", "conv", lambda ed, d: C.GCNConv(I, O), "4, 4"),
    _c("ChebConv", "conv", lambda ed, d: C.ChebConv(I, O, K=2), "4, 4, K=2"),
    _c("SAGEConv", "conv", lambda ed, d: C.SAGEConv(I, O), "4, 4"),
    Spec("CuGraphSAGEConv", "conv", skip="needs pylibcugraphops and CUDA"),
    _c("GraphConv", "conv", lambda ed, d: C.GraphConv(I, O), "4, 4"),
    Spec("GravNetConv", "conv", skip="builds its own k-NN graph (no edge_index input); needs torch-cluster"),
    _c("GatedGraphConv", "conv", lambda ed, d: C.GatedGraphConv(O, num_layers=2), "4, num_layers=2"),
    _c("ResGatedGraphConv", "attention", lambda ed, d: C.ResGatedGraphConv(I, O, edge_dim=ed),
       "4, 4, edge_dim", edge="optional"),
    _c("GATConv", "attention", lambda ed, d: C.GATConv(I, 2, heads=2, edge_dim=ed), "4, 2, heads=2, edge_dim",
       edge="optional"),
    Spec("CuGraphGATConv", "attention", skip="needs pylibcugraphops and CUDA"),
    Spec("FusedGATConv", "attention", skip="needs the dgNN CUDA kernels"),
    _c("GATv2Conv", "attention", lambda ed, d: C.GATv2Conv(I, 2, heads=2, edge_dim=ed),
       "4, 2, heads=2, edge_dim", edge="optional"),
    _c("TransformerConv", "attention", lambda ed, d: C.TransformerConv(I, 2, heads=2, edge_dim=ed),
       "4, 2, heads=2, edge_dim", edge="optional"),
    _c("AGNNConv", "attention", lambda ed, d: C.AGNNConv(), "(no arguments)"),
    _c("TAGConv", "conv", lambda ed, d: C.TAGConv(I, O, K=2), "4, 4, K=2"),
    _c("GINConv", "conv", lambda ed, d: C.GINConv(mlp(I, O)), "nn=MLP(4, 4, 4)"),
    _c("GINEConv", "conv", lambda ed, d: C.GINEConv(mlp(I, O), edge_dim=ed), "nn=MLP(4, 4, 4), edge_dim",
       edge="required"),
    _c("ARMAConv", "conv", lambda ed, d: C.ARMAConv(I, O, num_stacks=2, num_layers=2),
       "4, 4, num_stacks=2, num_layers=2"),
    _c("SGConv", "conv", lambda ed, d: C.SGConv(I, O, K=2), "4, 4, K=2"),
    _c("SSGConv", "conv", lambda ed, d: C.SSGConv(I, O, alpha=0.1, K=2), "4, 4, alpha=0.1, K=2"),
    _c("APPNP", "conv", lambda ed, d: C.APPNP(K=2, alpha=0.1), "K=2, alpha=0.1"),
    _c("MFConv", "conv", lambda ed, d: C.MFConv(I, O, max_degree=3), "4, 4, max_degree=3"),
    _c("RGCNConv", "conv", lambda ed, d: C.RGCNConv(I, O, num_relations=2), "4, 4, num_relations=2 (edge_type)",
       call=call_relational, uses=("edge_type",)),
    _c("FastRGCNConv", "conv", lambda ed, d: C.FastRGCNConv(I, O, num_relations=2),
       "4, 4, num_relations=2 (edge_type)", call=call_relational, uses=("edge_type",)),
    Spec("CuGraphRGCNConv", "conv", skip="needs pylibcugraphops and CUDA"),
    _c("RGATConv", "attention", lambda ed, d: C.RGATConv(I, O, num_relations=2, edge_dim=ed),
       "4, 4, num_relations=2, edge_dim (edge_type)", edge="optional", call=call_relational, uses=("edge_type",)),
    _c("SignedConv", "conv", lambda ed, d: C.SignedConv(I, O, first_aggr=True),
       "4, 4, first_aggr=True (even edges positive, odd negative)", call=call_signed),
    _c("DNAConv", "attention", lambda ed, d: C.DNAConv(I, heads=2), "4, heads=2 (x as one layer of history)",
       call=call_dna),
    Spec("PointNetConv", "conv", skip="needs node positions pos"),
    _c("GMMConv", "conv", lambda ed, d: C.GMMConv(I, O, dim=ed, kernel_size=2),
       "4, 4, dim=edge_dim, kernel_size=2; mu = 0 (the Gaussians' centres are subtracted from edge_attr: a bias)",
       edge="required", zero=("mu",)),
    Spec("SplineConv", "conv", skip="needs torch-spline-conv (not installed)"),
    _c("NNConv", "conv", lambda ed, d: C.NNConv(I, O, nn=nn.Linear(ed, I * O)),
       "4, 4, nn=Linear(edge_dim, 16)", edge="required"),
    _c("CGConv", "attention", lambda ed, d: C.CGConv(I, dim=ed or 0), "4, dim=edge_dim", edge="optional"),
    _c("EdgeConv", "conv", lambda ed, d: C.EdgeConv(mlp(2 * I, O)), "nn=MLP(8, 4, 4)"),
    Spec("DynamicEdgeConv", "conv", skip="builds its own k-NN graph (no edge_index input); needs torch-cluster"),
    Spec("XConv", "conv", skip="needs node positions pos and torch-cluster"),
    Spec("PPFConv", "conv", skip="needs node positions pos and normals"),
    _c("FeaStConv", "attention", lambda ed, d: C.FeaStConv(I, O, heads=2), "4, 4, heads=2"),
    Spec("PointTransformerConv", "attention", skip="needs node positions pos"),
    Spec("HypergraphConv", "conv", skip="takes a hypergraph incidence (hyperedge_index), not an edge_index"),
    _c("LEConv", "conv", lambda ed, d: C.LEConv(I, O), "4, 4"),
    _c("PNAConv", "conv", lambda ed, d: C.PNAConv(I, O, deg=pna_degree(d), edge_dim=ed, **PNA_AGGR),
       "4, 4, mean/min/max/std, identity/amplification/attenuation, deg, edge_dim", edge="optional"),
    _c("ClusterGCNConv", "conv", lambda ed, d: C.ClusterGCNConv(I, O), "4, 4"),
    _c("GENConv", "conv", lambda ed, d: C.GENConv(I, O, edge_dim=ed, eps=0.0), "4, 4, edge_dim, eps=0",
       edge="optional"),
    _c("GCN2Conv", "conv", lambda ed, d: C.GCN2Conv(I, alpha=0.1, theta=0.5, layer=1),
       "4, alpha=0.1, theta=0.5, layer=1 (x_0 = x)", call=call_x0),
    _c("PANConv", "conv", lambda ed, d: C.PANConv(I, O, filter_size=2), "4, 4, filter_size=2"),
    Spec("WLConv", "conv", skip="Weisfeiler-Lehman colour refinement: integer colours, no gradient"),
    _c("WLConvContinuous", "conv", lambda ed, d: C.WLConvContinuous(), "(no arguments)"),
    _c("FiLMConv", "conv", lambda ed, d: C.FiLMConv(I, O), "4, 4"),
    _c("SuperGATConv", "attention", lambda ed, d: C.SuperGATConv(I, 2, heads=2), "4, 2, heads=2"),
    _c("FAConv", "attention", lambda ed, d: C.FAConv(I, eps=0.1), "4, eps=0.1 (x_0 = x)", call=call_x0),
    _c("EGConv", "conv", lambda ed, d: C.EGConv(I, O, aggregators=["sum"], num_heads=2, num_bases=2),
       "4, 4, aggregators=['sum'], num_heads=2, num_bases=2"),
    _c("PDNConv", "conv", lambda ed, d: C.PDNConv(I, O, edge_dim=ed, hidden_channels=4),
       "4, 4, edge_dim, hidden_channels=4", edge="required"),
    _c("GeneralConv", "conv", lambda ed, d: C.GeneralConv(I, O, in_edge_channels=ed), "4, 4, in_edge_channels",
       edge="optional"),
    Spec("HGTConv", "attention", skip="heterogeneous: row 'HGTConv(hetero)'"),
    _c("HEATConv", "attention", lambda ed, d: C.HEATConv(I, O, num_node_types=2, num_edge_types=2,
                                                         edge_type_emb_dim=2, edge_dim=ed, edge_attr_emb_dim=2,
                                                         heads=2),
       "4, 4, 2 node/edge types, edge_dim, heads=2 (node_type, edge_type)", edge="required", call=call_heat,
       uses=("edge_type", "node_type")),
    Spec("HeteroConv", "conv", skip="heterogeneous: row 'HeteroConv(SAGE+Graph+GCN)'"),
    Spec("HANConv", "attention", skip="heterogeneous: row 'HANConv(hetero)'"),
    _c("LGConv", "conv", lambda ed, d: C.LGConv(), "(no arguments)"),
    Spec("PointGNNConv", "conv", skip="needs node positions pos"),
    _c("GPSConv", "attention", lambda ed, d: C.GPSConv(I, C.GINConv(mlp(I, I)), heads=1),
       "4, GINConv(MLP), heads=1 (batch)", call=call_with_batch),
    _c("AntiSymmetricConv", "conv", lambda ed, d: C.AntiSymmetricConv(I, num_iters=1), "4, num_iters=1"),
    _c("DirGNNConv", "conv", lambda ed, d: C.DirGNNConv(C.GCNConv(I, O)), "GCNConv(4, 4)"),
    _c("MixHopConv", "conv", lambda ed, d: C.MixHopConv(I, O, powers=[0, 1, 2]), "4, 4, powers=[0, 1, 2]"),
    Spec("MeshCNNConv", "conv", skip="mesh edges as nodes with exactly four neighbours each"),
]


SIMPLE_AGGRS = ["mean", "max", "min", "mul", "std", "var", "softmax", "powermean", "median"]
AGGREGATIONS = [
    _c(f"SimpleConv(aggr={a})", "aggregation", lambda ed, d, a=a: C.SimpleConv(aggr=a, combine_root="sum"),
       f"aggr='{a}', combine_root='sum'") for a in SIMPLE_AGGRS] + [
    _c("SAGEConv(aggr=lstm)", "aggregation", lambda ed, d: C.SAGEConv(I, O, aggr="lstm"), "4, 4, aggr='lstm'"),
    _c("SAGEConv(aggr=mean+max+std)", "aggregation", lambda ed, d: C.SAGEConv(I, O, aggr=["mean", "max", "std"]),
       "4, 4, aggr=['mean', 'max', 'std']"),
    _c("SAGEConv(project+normalize)", "aggregation", lambda ed, d: C.SAGEConv(I, O, project=True, normalize=True),
       "4, 4, project=True, normalize=True"),
    _c("GATConv(concat=False)", "aggregation", lambda ed, d: C.GATConv(I, O, heads=2, concat=False),
       "4, 4, heads=2, concat=False (mean over heads)"),
    _c("GINConv(eps=0.3)", "aggregation", lambda ed, d: C.GINConv(mlp(I, O), eps=0.3), "nn=MLP(4, 4, 4), eps=0.3"),
    _c("GCNConv(edge_weight)", "aggregation", lambda ed, d: C.GCNConv(I, O), "4, 4; called with edge_weight",
       call=call_edge_weight, uses=("edge_weight",)),
    _c("GraphConv(edge_weight)", "aggregation", lambda ed, d: C.GraphConv(I, O), "4, 4; called with edge_weight",
       call=call_edge_weight, uses=("edge_weight",)),
    _c("TAGConv(edge_weight)", "aggregation", lambda ed, d: C.TAGConv(I, O, K=2), "4, 4, K=2; called with edge_weight",
       call=call_edge_weight, uses=("edge_weight",)),
] + [
    Spec(f"readout: {name}", "aggregation", lambda ed, d: C.GCNConv(I, O), levels=("graph",), pool=pool,
         pool_module=make, kwargs_text=f"GCNConv(4, 4), ReLU, {name}{text}")
    for name, pool, make, text in [
        ("global_max_pool", global_max_pool, None, ""),
        ("AttentionalAggregation", None, lambda: pyg_aggr.AttentionalAggregation(gate_nn=nn.Linear(O, 1)),
         "(gate_nn=Linear(4, 1))"),
        ("Set2Set", None, lambda: pyg_aggr.Set2Set(O, processing_steps=2), "(4, processing_steps=2)"),
        ("SortAggregation", None, lambda: pyg_aggr.SortAggregation(k=3), "(k=3)"),
        ("MultiAggregation", None, lambda: pyg_aggr.MultiAggregation(["mean", "max", "std"]),
         "(['mean', 'max', 'std'])"),
    ]
]

M = pyg_models
VARIANTS = [("", {}), ("jk=cat", dict(jk="cat")), ("jk=max", dict(jk="max")), ("jk=lstm", dict(jk="lstm")),
            ("norm=batch_norm", dict(norm="batch_norm")), ("norm=layer_norm", dict(norm="layer_norm")),
            ("norm=graph_norm", dict(norm="graph_norm"))]
BASIC = [("GCN", lambda ed, d, **o: M.GCN(I, HIDDEN, 2, **o), "no"),
         ("GraphSAGE", lambda ed, d, **o: M.GraphSAGE(I, HIDDEN, 2, **o), "no"),
         ("GIN", lambda ed, d, **o: M.GIN(I, HIDDEN, 2, **o), "no"),
         ("GAT", lambda ed, d, **o: M.GAT(I, HIDDEN, 2, heads=2, edge_dim=ed, **o), "optional"),
         ("GAT-v2", lambda ed, d, **o: M.GAT(I, HIDDEN, 2, heads=2, v2=True, edge_dim=ed, **o), "optional"),
         ("PNA", lambda ed, d, **o: M.PNA(I, HIDDEN, 2, deg=pna_degree(d), edge_dim=ed, **PNA_AGGR, **o),
          "optional"),
         ("EdgeCNN", lambda ed, d, **o: M.EdgeCNN(I, HIDDEN, 2, **o), "no")]


def _model_spec(name, tag, build, edge, opts):
    label = f"{name}({tag})" if tag else name
    return Spec(label, "model", lambda ed, d, b=build, o=opts: b(ed, d, **o), edge=edge, call=call_model,
                pool=global_mean_pool, relu=False,
                kwargs_text=f"4, 4, num_layers=2{', v2=True' if name == 'GAT-v2' else ''}{', ' + tag if tag else ''}")


class Residual(nn.Module):
    """x + relu(GCNConv(x)), then h + relu(GraphConv(h)): two residual sums."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = C.GCNConv(I, I), C.GraphConv(I, I)

    def forward(self, x, edge_index, **_):
        h = x + F.relu(self.conv1(x, edge_index))
        return h + F.relu(self.conv2(h, edge_index))


class SigmoidHead(nn.Module):
    """ConvModel's output passed through a sigmoid (explained value: the probability)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return torch.sigmoid(self.inner(*args, **kwargs))


MODELS = [_model_spec(n, tag, b, e, o) for n, b, e in BASIC for tag, o in VARIANTS] + [
    Spec("residual x + conv(x)", "model", lambda ed, d: Residual(), relu=False, pool=global_mean_pool,
         kwargs_text="x + relu(GCNConv(x)), then h + relu(GraphConv(h))"),
    Spec("sigmoid head", "model", lambda ed, d: C.GCNConv(I, O), pool=global_mean_pool,
         kwargs_text="sigmoid(Linear(pool(relu(GCNConv(4, 4)))))"),
    Spec("AttentiveFP", "model", lambda ed, d: M.AttentiveFP(I, HIDDEN, 1, edge_dim=ed, num_layers=2,
                                                              num_timesteps=2),
         edge="required", call=call_attentivefp, wrapper=Readout, levels=("graph",),
         kwargs_text="4, 4, 1, edge_dim, num_layers=2, num_timesteps=2 (its own readout)"),
    Spec("DeepGCNLayer", "model", lambda ed, d: M.DeepGCNLayer(C.GENConv(I, I, eps=0.0), nn.LayerNorm(I), nn.ReLU(),
                                                               block="res+"),
         pool=global_mean_pool, kwargs_text="GENConv(4, 4), LayerNorm(4), ReLU(), block='res+'"),
    Spec("PMLP", "model", lambda ed, d: M.PMLP(I, HIDDEN, HIDDEN, num_layers=2), pool=global_mean_pool,
         kwargs_text="4, 4, 4, num_layers=2"),
    Spec("NeuralFingerprint", "model", lambda ed, d: M.NeuralFingerprint(I, HIDDEN, HIDDEN, num_layers=2),
         call=call_first_column, wrapper=Readout, levels=("graph",),
         kwargs_text="4, 4, 4, num_layers=2 (its own readout; first output column: each layer's "
                     "softmax rows sum to one, so the sum of all columns is a constant)"),
    Spec("LINKX", "model", lambda ed, d: M.LINKX(d["x"].shape[0], I, HIDDEN, HIDDEN, num_layers=1),
         pool=global_mean_pool, kwargs_text="num_nodes, 4, 4, 4, num_layers=1"),
    Spec("GraphUNet", "model", lambda ed, d: M.GraphUNet(I, HIDDEN, HIDDEN, depth=1), pool=global_mean_pool,
         kwargs_text="4, 4, 4, depth=1"),
    Spec("RECT_L", "model", lambda ed, d: M.RECT_L(I, HIDDEN), pool=global_mean_pool, kwargs_text="4, 4"),
    Spec("GroupAddRev", "model", lambda ed, d: M.GroupAddRev(C.GCNConv(I // 2, I // 2), num_groups=2,
                                                             disable=True),
         pool=global_mean_pool, kwargs_text="GCNConv(2, 2), num_groups=2, disable=True (else it frees its input)"),
    Spec("SGFormer", "model", lambda ed, d: M.SGFormer(I, HIDDEN, HIDDEN, trans_num_layers=1, gnn_num_layers=1),
         call=call_batch_positional, pool=global_mean_pool,
         kwargs_text="4, 4, 4, trans_num_layers=1, gnn_num_layers=1 (batch)"),
    Spec("Polynormer", "model", lambda ed, d: M.Polynormer(I, HIDDEN, HIDDEN, local_layers=1, global_layers=1),
         call=call_batch_positional, pool=global_mean_pool,
         kwargs_text="4, 4, 4, local_layers=1, global_layers=1 (batch)"),
]

MODEL_SKIPS = {
    "MLP": "no message passing (its norms appear in the models with norm=)",
    "JumpingKnowledge": "covered by the models with jk=",
    "HeteroJumpingKnowledge": "covered by the models with jk= (per node type)",
    "MetaLayer": "a container for user-written edge/node/global blocks",
    "Node2Vec": "node embeddings looked up by id: no input features",
    "MetaPath2Vec": "node embeddings looked up by id: no input features",
    "DeepGraphInfomax": "a training wrapper around an encoder (explain the encoder)",
    "InnerProductDecoder": "edge scores (task_level='edge')",
    "GAE": "a training wrapper around an encoder (explain the encoder)",
    "VGAE": "a training wrapper around an encoder (explain the encoder)",
    "ARGA": "a training wrapper around an encoder (explain the encoder)",
    "ARGVA": "a training wrapper around an encoder (explain the encoder)",
    "SignedGCN": "signed link prediction (task_level='edge')",
    "RENet": "temporal knowledge-graph events, no edge_index input",
    "SchNet": "needs atom positions pos",
    "DimeNet": "needs atom positions pos",
    "DimeNetPlusPlus": "needs atom positions pos",
    "ViSNet": "needs atom positions pos",
    "GNNFF": "needs atom positions pos",
    "GPSE": "a positional-encoding pretrainer with its own input format",
    "GPSENodeEncoder": "encodes precomputed GPSE features",
    "to_captum_model": "a utility, not a model",
    "to_captum_input": "a utility, not a model",
    "captum_output_to_dicts": "a utility, not a model",
    "TGNMemory": "temporal memory for event streams",
    "LabelPropagation": "propagates labels y, has no weights",
    "CorrectAndSmooth": "post-processes predictions with labels, has no weights",
    "LightGCN": "embeddings looked up by id for link prediction",
    "MaskLabel": "a label-embedding training utility",
    "LPFormer": "link prediction (task_level='edge')",
    "ARLinkPredictor": "link prediction (task_level='edge')",
}
COVERED_MODELS = {"GCN", "GraphSAGE", "GIN", "GAT", "PNA", "EdgeCNN", "AttentiveFP", "DeepGCNLayer", "PMLP",
                  "NeuralFingerprint", "LINKX", "GraphUNet", "RECT_L", "GroupAddRev", "SGFormer", "Polynormer"}


class HeteroModel(nn.Module):
    """A heterogeneous encoder (dict in, dict out), then node type 'a': ReLU -> (graph: sum pool over
    both types) -> Linear(., 1)."""

    def __init__(self, encoder: nn.Module, level: str, width: dict):
        super().__init__()
        self.encoder, self.level = encoder, level
        self.heads = nn.ModuleDict({k: nn.Linear(w, 1, bias=False) for k, w in width.items()})

    def forward(self, x_dict, edge_index_dict):
        h = self.encoder(x_dict, edge_index_dict)
        if self.level == "node":
            return self.heads["a"](F.relu(h["a"]))
        return sum(self.heads[k](global_add_pool(F.relu(h[k]), None)) for k in sorted(h))


class SageBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = C.SAGEConv((-1, -1), HIDDEN)
        self.conv2 = C.SAGEConv((-1, -1), HIDDEN)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


class GATBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = C.GATConv((-1, -1), HIDDEN, add_self_loops=False)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


class HeteroLayers(nn.Module):
    """Layers that take (x_dict, edge_index_dict) directly (HeteroConv, HGTConv, HANConv)."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x_dict, edge_index_dict):
        for i, layer in enumerate(self.layers):
            if i:
                x_dict = {k: F.relu(v) for k, v in x_dict.items()}
            x_dict = {k: v for k, v in layer(x_dict, edge_index_dict).items() if v is not None}
        return x_dict


def _to_hetero(base):
    from torch_geometric.nn import to_hetero
    return to_hetero(base, HETERO_METADATA, aggr="sum")


def _hetero_conv():
    et = HETERO_METADATA[1]
    return HeteroLayers(C.HeteroConv({et[0]: C.SAGEConv((-1, -1), HIDDEN), et[1]: C.GraphConv((-1, -1), HIDDEN),
                                      et[2]: C.GCNConv(-1, HIDDEN)}, aggr="sum"))


HETERO = [
    Spec("to_hetero(SAGEConv x2)", "hetero", lambda ed, d: _to_hetero(SageBase()),
         kwargs_text="two SAGEConv((-1, -1), 4), aggr='sum'"),
    Spec("to_hetero(GATConv)", "hetero", lambda ed, d: _to_hetero(GATBase()),
         kwargs_text="GATConv((-1, -1), 4, add_self_loops=False), aggr='sum'"),
    Spec("HeteroConv(SAGE+Graph+GCN)", "hetero", lambda ed, d: _hetero_conv(),
         kwargs_text="{a->b: SAGEConv, b->a: GraphConv, a->a: GCNConv}, aggr='sum'"),
    Spec("HGTConv(hetero)", "hetero", lambda ed, d: HeteroLayers(C.HGTConv(-1, HIDDEN, HETERO_METADATA, heads=2)),
         kwargs_text="-1, 4, metadata, heads=2"),
    Spec("HANConv(hetero)", "hetero", lambda ed, d: HeteroLayers(C.HANConv(-1, HIDDEN, HETERO_METADATA, heads=2)),
         kwargs_text="-1, 4, metadata, heads=2"),
]

class ThenFn(nn.Module):
    """GCNConv(4, 4) followed by one operation ``fn(h, x)`` (x: the layer's input)."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.conv, self.fn = C.GCNConv(I, O), fn

    def forward(self, x, edge_index):
        return self.fn(self.conv(x, edge_index), x)


W_MIX = None  # a fixed mixing matrix for the gate below, made on first use


def _mix(h):
    global W_MIX
    if W_MIX is None:
        W_MIX = torch.randn(O, O, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    return h @ W_MIX.to(h.dtype)


PRIMITIVE_FNS = [
    ("residual sum", lambda h, x: h + x, "h + x"),
    ("concatenation", lambda h, x: torch.cat([h, x], dim=-1), "torch.cat([h, x], -1)"),
    ("product h * h", lambda h, x: h * h, "h * h"),
    ("sigmoid gate", lambda h, x: torch.sigmoid(_mix(h)) * h, "sigmoid(h W) * h"),
    ("one-minus gate", lambda h, x: (1 - torch.sigmoid(_mix(h))) * h, "(1 - sigmoid(h W)) * h"),
    ("GRU-style mix", lambda h, x: (1 - torch.sigmoid(_mix(h))) * torch.tanh(h) + torch.sigmoid(_mix(h)) * x,
     "(1 - z) * tanh(h) + z * x, z = sigmoid(h W)"),
    ("tanh", lambda h, x: torch.tanh(h), "tanh(h)"),
    ("gelu", lambda h, x: F.gelu(h), "F.gelu(h)"),
    ("elu", lambda h, x: F.elu(h), "F.elu(h)"),
    ("leaky_relu", lambda h, x: F.leaky_relu(h, 0.2), "F.leaky_relu(h, 0.2)"),
    ("softplus", lambda h, x: F.softplus(h), "F.softplus(h)"),
    ("exp", lambda h, x: torch.exp(h), "torch.exp(h)"),
    ("softmax as value", lambda h, x: torch.softmax(h, dim=-1), "torch.softmax(h, -1)"),
    ("layer_norm", lambda h, x: F.layer_norm(h, (O,)), "F.layer_norm(h, (4,))"),
    ("normalize", lambda h, x: F.normalize(h, dim=-1), "F.normalize(h, dim=-1)"),
    ("max over features", lambda h, x: h.max(dim=-1, keepdim=True).values, "h.max(-1, keepdim=True)"),
    ("self-attention", lambda h, x: torch.softmax(h @ h.T, dim=-1) @ h, "softmax(h h^T) h (over all nodes)"),
    ("division", lambda h, x: h / (1 + h.abs()), "h / (1 + |h|)"),
]
PRIMITIVES = [Spec(f"op: {name}", "primitive", lambda ed, d, fn=fn: ThenFn(fn), relu=False,
                   kwargs_text=f"GCNConv(4, 4) then {text}") for name, fn, text in PRIMITIVE_FNS]

ALL = CONVS + AGGREGATIONS + PRIMITIVES + MODELS + HETERO


# ------------------------------------------------------------------- running
def seed_for(name: str) -> int:
    return zlib.crc32(name.encode())


def build_case(spec: Spec, level: str, edge_attr: bool):
    """(model, inputs) for one row: the module built in float64 with zero biases, in eval mode."""
    torch.manual_seed(seed_for(f"{spec.name}|{level}|{edge_attr}"))
    if spec.family == "hetero":
        inputs = hetero_inputs()
        encoder = spec.build(None, inputs)
        with torch.no_grad():  # lazy shapes (-1) are set by a first forward (float32 is the default dtype)
            encoder({k: v.float() for k, v in inputs["x"].items()}, inputs["edge_index"])
        encoder = encoder.double()
        with torch.no_grad():
            out = encoder(inputs["x"], inputs["edge_index"])
        model = HeteroModel(encoder, level, {k: v.shape[-1] for k, v in out.items()})
        return zero_biases(model.double()).eval(), inputs
    inputs = graph_inputs()
    inputs = {k: v for k, v in inputs.items() if k in ("x", "edge_index", "batch", *spec.uses)
              or (k == "edge_attr" and edge_attr)}
    module = spec.build(EDGE_DIM if edge_attr else None, inputs).double()
    zero_biases(module).eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.split(".")[-1] in spec.zero:
                p.zero_()
    with torch.no_grad():
        out = spec.call(module, inputs["x"], inputs["edge_index"], edge_attr=inputs.get("edge_attr"),
                        batch=inputs["batch"], edge_type=inputs.get("edge_type"), node_type=inputs.get("node_type"),
                        edge_weight=inputs.get("edge_weight"))
    if isinstance(out, tuple):
        out = out[0]
    if spec.wrapper is Readout:
        model = Readout(module, spec.call, level, out.shape[-1])
    else:
        pool = spec.pool_module().double() if spec.pool_module is not None else spec.pool
        model = ConvModel(module, spec.call, level, out.shape[-1], pool=pool, relu=spec.relu)
        if level == "graph" and spec.pool_module is not None:  # the readout sets the head's width
            zero_biases(model.double()).eval()
            with torch.no_grad():
                width = model.features(**{"x": inputs["x"], "edge_index": inputs["edge_index"],
                                          **_kwargs(inputs)}).shape[-1]
            model.head = nn.Linear(width, 1, bias=False)
    if spec.name == "sigmoid head":
        model = SigmoidHead(model)
    return zero_biases(model.double()).eval(), inputs


def cases(spec: Spec):
    """The (level, edge_attr) rows of a spec."""
    attrs = {"no": (False,), "optional": (False, True), "required": (True,)}[spec.edge]
    return [(level, ea) for level in spec.levels for ea in attrs]


def run_spec(spec: Spec, algorithm_factory=default_algorithm, walks: bool = True) -> list[dict]:
    base = dict(layer=spec.name, family=spec.family, kwargs=spec.kwargs_text)
    if spec.skip:
        return [dict(base, level=None, edge_attr=None, status="skipped", reason=spec.skip)]
    rows = []
    for level, ea in cases(spec):
        row = dict(base, level=level, edge_attr=ea)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, inputs = build_case(spec, level, ea)
                reference(model, inputs, level)
        except Exception as e:  # noqa: BLE001 - the unmodified model fails: nothing to explain
            rows.append(dict(row, status="skipped", reason=f"the unmodified model fails on the generic inputs: "
                                                           f"{_first_line(e)}"))
            continue
        result = check(model, inputs, level, algorithm=algorithm_factory())
        node_relevance = result.pop("_node_relevance", None)
        if result["status"] in ("refused", "crash"):  # would node relevance alone work?
            again = check(model, inputs, level, algorithm=algorithm_factory(), edge_mask_type=None)
            result["without_edge_mask"] = {k: again[k] for k in ("status", "reason", "raised_in")}
        if result["status"] == "ok" and walks:
            if level == "graph" and inputs.get("batch") is not None and not isinstance(inputs["x"], dict):
                node_relevance = first_graph_relevance(model, _first_graph(inputs))
            result.update(check_walks(model, inputs, level, node_relevance))
        rows.append(dict(row, **result))
    return rows


def row_key(row: dict) -> str:
    return f"{row['layer']}|{row['level']}|{row['edge_attr']}"


def counts(rows: list[dict]) -> dict:
    return {s: sum(r["status"] == s for r in rows) for s in STATUSES}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated names from --list (writes nothing)")
    parser.add_argument("--list", action="store_true", help="list the names and exit")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", default=None,
                        help="an earlier coverage.json whose statuses are kept as the baseline in the new file")
    parser.add_argument("--keep-baseline", action="store_true",
                        help="keep the baseline stored in the current benchmarks/results/coverage.json")
    parser.add_argument("--library-note", default="", help="which lrp_lib was measured (stored in settings)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.list:
        print("\n".join(s.name for s in ALL))
        return
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in only if n not in {s.name for s in ALL}]
    if unknown:
        parser.error(f"unknown names {unknown}; see --list")
    specs = [s for s in ALL if not only or s.name in only]
    missing_convs = sorted(set(pyg_conv.__all__) - {s.name for s in CONVS})
    missing_models = sorted(set(pyg_models.__all__) - COVERED_MODELS - set(MODEL_SKIPS))
    if missing_convs or missing_models:
        print(f"not in the table: convs {missing_convs}, models {missing_models}")
    rows, start = [], time.perf_counter()
    for spec in specs:
        for row in run_spec(spec):
            rows.append(row)
            where = f"{row['level'] or '-'}{' +edge_attr' if row['edge_attr'] else ''}"
            print(f"{spec.name:28s} {where:18s} {row['status']:8s} walks {str(row.get('walks')):8s} "
                  f"{(row.get('reason') or row.get('walks_reason') or '')[:100]}", flush=True)
    if not only:
        for name in sorted(MODEL_SKIPS):
            rows.append(dict(layer=name, family="model", kwargs="", level=None, edge_attr=None, status="skipped",
                             reason=MODEL_SKIPS[name]))
    total = counts(rows)
    print(f"\n{len(rows)} rows: " + ", ".join(f"{v} {k}" for k, v in total.items()) +
          f" ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    if only:
        return rows
    for r in rows:
        r.pop("traceback", None)
    results = dict(rows=rows, counts=total, tolerance=TOL, missing_convs=missing_convs,
                   missing_models=missing_models)
    if args.keep_baseline:
        current = Path(__file__).resolve().parent / "results" / "coverage.json"
        results["baseline"] = json.loads(current.read_text())["results"]["baseline"]
    if args.baseline:
        old = json.loads(Path(args.baseline).read_text())
        results["baseline"] = dict(
            counts=old["results"]["counts"], library=old["settings"].get("library", ""),
            statuses={row_key(r): r["status"] for r in old["results"]["rows"]})
    path = write_results("coverage", results,
                         settings=dict(threads=args.threads, f_in=F_IN, hidden=HIDDEN, edge_dim=EDGE_DIM,
                                       rule="Epsilon(0.0)", dtype="float64", node=NODE,
                                       library=args.library_note))
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return rows


if __name__ == "__main__":
    main()
