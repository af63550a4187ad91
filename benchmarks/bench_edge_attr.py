"""Molecules with bond features: what explaining one molecule at a time costs when the model reads ``edge_attr``.

    python benchmarks/bench_edge_attr.py                   # writes benchmarks/results/edge_attr.json
    python benchmarks/bench_edge_attr.py --molecules 50 --no-write

The molecules: ESOL's (MoleculeNet's ``delaney-processed.csv`` in ``$LRP_DATA_ROOT``), parsed with RDKit
(:func:`lrp_lib.book.datasets.esol.smiles_to_graph`: 17 atom features, 6 bond features), in file order.  The model:
three ``GINEConv`` layers (``edge_dim=6``, each an MLP of 64 hidden units), ReLU, ``global_add_pool`` and a linear
head, random weights (seeded), float32, eval mode.  Each molecule's output is explained once, by
``LRPExplainer`` called directly (``explanation_type="phenomenon"``, a regression; node relevance and the relevance
of every bond's features, ``edge_attr_relevance``), against the plain gradient with respect to both inputs
(``x * grad`` and ``edge_attr * grad`` of one backward).  The methods:

* ``default``: ``LRPExplainer()``: after ``ANY_GRAPH_AFTER`` molecules explained eagerly, the explanation is captured
  once with symbolic sizes (``edge_attr`` an input of the captured graph) and run as it is for every later molecule;
* ``eager``: ``LRPExplainer(replay=False)``: the model's forward under the rules on every call;
* ``compiled``: ``LRPExplainer(compile=True)``: the same capture compiled by ``torch.compile(dynamic=True)``, once
  (its compile time is reported).

Timing: one PyTorch thread; ``ANY_GRAPH_AFTER + 8`` molecules of warm-up explained by every method, then
``--molecules`` timed molecules, on each of which the methods take turns (the order rotated by one place a
molecule); the median over the molecules of each
method's ratio to that molecule's gradient.  Before timing, every method's node and ``edge_attr`` relevance is
checked against the eager explanation on the warm-up molecules (float32 rounding).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch_geometric.nn import GINEConv, global_add_pool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import write_results  # noqa: E402
from bench_mechanism import in_turn  # noqa: E402

from lrp_lib.book.datasets.esol import esol  # noqa: E402
from lrp_lib.explain.capture.cache import ANY_GRAPH_AFTER  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402


class GINE(nn.Module):
    def __init__(self, features=17, edge_dim=6, hidden=64):
        super().__init__()
        self.convs = nn.ModuleList(
            GINEConv(nn.Sequential(nn.Linear(f, hidden), nn.ReLU(), nn.Linear(hidden, hidden)), edge_dim=edge_dim)
            for f in (features, hidden, hidden))
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, edge_index, edge_attr, batch=None):
        for conv in self.convs:
            x = conv(x, edge_index, edge_attr).relu()
        return self.head(global_add_pool(x, batch))


def measure(count: int) -> dict:
    torch.manual_seed(0)
    graphs = [g for g in esol(download=False) if g.edge_index.shape[1] > 0][:ANY_GRAPH_AFTER + 8 + count]
    model = GINE().eval()
    config = dict(mode="regression", task_level="graph", return_type="raw")
    explainers = {name: Explainer(copy.deepcopy(model), algorithm=LRPExplainer(**options),
                                  explanation_type="phenomenon", node_mask_type="attributes", model_config=config)
                  for name, options in (("default", {}), ("eager", {"replay": False}), ("compiled", {"compile": True}))}

    def gradient(g):
        x, attr = g.x.clone().requires_grad_(True), g.edge_attr.clone().requires_grad_(True)
        out = model(x, g.edge_index, attr)
        gx, ga = torch.autograd.grad(out[0, 0], [x, attr])
        return x.detach() * gx, attr.detach() * ga

    def lrp(name):
        ex = explainers[name]
        return lambda g: ex.algorithm(ex.model, g.x, g.edge_index, target=g.target, edge_attr=g.edge_attr)

    for g in graphs:
        with torch.no_grad():
            g.target = model(g.x, g.edge_index, g.edge_attr)[:, 0]
    calls = {"gradient": gradient, **{name: lrp(name) for name in explainers}}
    warm_up, timed = graphs[:ANY_GRAPH_AFTER + 8], graphs[ANY_GRAPH_AFTER + 8:]
    compile_seconds, largest, reasons = None, 0.0, {name: set() for name in explainers}
    for g in warm_up:
        want = calls["eager"](g)
        for name in ("default", "compiled"):
            start = time.perf_counter()
            got = calls[name](g)
            if name == "compiled" and compile_seconds is None:
                compile_seconds = time.perf_counter() - start
            for key in ("node_relevance", "edge_attr_relevance"):
                scale = max(float(want[key].abs().max()), 1e-12)
                largest = max(largest, float((got[key] - want[key]).abs().max()) / scale)
        calls["gradient"](g)
    assert largest < 1e-4, largest
    ratios: dict = {name: [] for name in calls}
    for turn, g in enumerate(timed):
        seconds = {}
        for name, call in in_turn(calls, turn):
            start = time.perf_counter()
            out = call(g)
            seconds[name] = time.perf_counter() - start
            if name in reasons:
                reasons[name].add(out.get("replay_reason", "replay=False"))
        for name in calls:
            ratios[name].append(seconds[name] / seconds["gradient"])
    return {"molecules": len(timed), "warm_up": len(warm_up),
            "median_ratio_to_gradient": {k: statistics.median(v) for k, v in ratios.items()},
            "largest_difference_from_eager": largest, "compile_seconds": compile_seconds,
            "replay_reasons": {k: sorted(v) for k, v in reasons.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--molecules", type=int, default=300, help="timed molecules")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    result = measure(args.molecules)
    print({k: round(v, 2) for k, v in result["median_ratio_to_gradient"].items()}, result["replay_reasons"])
    if not args.no_write:
        print(write_results("edge_attr", result, vars(args)))


if __name__ == "__main__":
    main()
