"""GNN-LRP walks on heterogeneous graphs (lrp_lib.explain.walks.hetero) against LRPExplainer's one explanation.

    python benchmarks/bench_walks_hetero.py                 # node types of 20, 100, 400 nodes
    python benchmarks/bench_walks_hetero.py --sizes 20 100  # fewer sizes

The model: ``to_hetero`` of two ``SAGEConv((-1, -1), 16)`` layers (ReLU between, no bias), node types
'a' (16 features) and 'b' (8), edge types a->b, b->a (its reverse) and a->a, about 3 edges per node
and edge type; a ReLU, a sum over both types' nodes and a linear head to one output (graph level),
float64, random weights (seed 0), rule LRP-0.

Timed side by side in one process, taking turns (median of ``--repeats`` runs each):

* ``explain``: ``LRPExplainer`` through ``Explainer`` (node relevance per node type);
* ``walk_model``: building ``HeteroWalkModel`` (the cut forward, the walks-defined probes, one
  backward);
* ``walks_1k``: ``walk_relevance`` of 1,000 walks sampled from all walks, on a built model (one
  masked backward per distinct suffix of the walks, in batches of about 40,000 / N);
* ``all_walks``: enumerating every walk and scoring it, on a built model (where at most
  ``--max-walks``);
* ``top_walks``: ``top_walks(k=10)`` from the model (build included; every walk scored).

Each row checks the walks summed by start node against the explanation's node relevance (largest
difference relative to max(1, |output|)).  Ratios are to ``explain``.  Written to
``benchmarks/results/walks_hetero.json`` with the machine and the load average.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn
from torch_geometric.nn import SAGEConv, to_hetero

from lrp_lib.core.rules import Epsilon
from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.walks import HeteroWalkModel, all_walks, top_walks

import results_file  # benchmarks/results_file.py

HIDDEN = 16
EDGE_TYPES = [("a", "to", "b"), ("b", "rev_to", "a"), ("a", "near", "a")]


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = SAGEConv((-1, -1), HIDDEN, bias=False)
        self.c2 = SAGEConv((-1, -1), HIDDEN, bias=False)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = to_hetero(Body(), (["a", "b"], EDGE_TYPES), aggr="sum")
        self.head = nn.Linear(HIDDEN, 1, bias=False)

    def forward(self, x, edge_index):
        h = self.body(x, edge_index)
        return self.head(sum(v.relu().sum(0, keepdim=True) for v in h.values()))


def graph(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    na, nb = n, max(2, n // 2)
    x = {"a": torch.randn(na, 16, generator=g, dtype=torch.float64),
         "b": torch.randn(nb, 8, generator=g, dtype=torch.float64)}

    def edges(ns, nd, k):
        e = torch.stack([torch.randint(0, ns, (k,), generator=g), torch.randint(0, nd, (k,), generator=g)])
        return torch.unique(e, dim=1)
    ab = edges(na, nb, 3 * nb)
    return x, {EDGE_TYPES[0]: ab, EDGE_TYPES[1]: ab.flip(0), EDGE_TYPES[2]: edges(na, na, 3 * na)}


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(n: int, repeats: int, max_walks: int) -> dict:
    torch.manual_seed(0)
    x, ei = graph(n)
    model = Model()
    with torch.no_grad():
        model({k: v.float() for k, v in x.items()}, ei)
    model = model.double().eval()
    explainer = Explainer(model, algorithm=LRPExplainer(rule=Epsilon(0.0)), explanation_type="model",
                          node_mask_type="attributes",
                          model_config=dict(mode="regression", task_level="graph", return_type="raw"))
    wm = HeteroWalkModel(model, x, ei, Epsilon(0.0))
    walks = all_walks(wm)
    out = dict(nodes={k: v.shape[0] for k, v in x.items()}, edges={"__".join(k): int(v.shape[1]) for k, v in ei.items()},
               walks=int(walks.shape[0]))
    sample = walks[torch.randperm(walks.shape[0], generator=torch.Generator().manual_seed(1))[:1000]]
    e = explainer(x, ei)
    rel = wm.walk_relevance(walks)
    marg = torch.zeros(wm.num_nodes, dtype=torch.float64).index_add_(0, walks[:, 0], rel)
    ref = torch.cat([e[k].node_relevance.sum(-1) for k in wm.node_types])
    with torch.no_grad():
        y = float(model(x, ei).sum())
    out["marginal_error"] = float((marg - ref).abs().max()) / max(1.0, abs(y))
    methods = {"explain": lambda: explainer(x, ei),
               "walk_model": lambda: HeteroWalkModel(model, x, ei, Epsilon(0.0)),
               "walks_1k": lambda: wm.walk_relevance(sample)}
    if walks.shape[0] <= max_walks:
        methods["all_walks"] = lambda: wm.walk_relevance(all_walks(wm))
        methods["top_walks"] = lambda: top_walks(model, x, ei, 10, Epsilon(0.0))
    times = {k: [] for k in methods}
    for _ in range(repeats):  # taking turns
        for k, fn in methods.items():
            times[k].append(median_time(fn, 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    out["seconds"] = {k: float(f"{v:.4g}") for k, v in med.items()}
    out["ratio_to_explain"] = {k: float(f"{v / med['explain']:.3g}") for k, v in med.items()}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 100, 400])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-walks", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]
    rows = []
    for n in args.sizes:
        r = row(n, args.repeats, args.max_walks)
        rows.append(r)
        print(n, r["walks"], f"err {r['marginal_error']:.2g}", r["seconds"], r["ratio_to_explain"], flush=True)
    path = results_file.write_results("walks_hetero", dict(rows=rows), settings=dict(
        sizes=args.sizes, repeats=args.repeats, threads=args.threads, hidden=HIDDEN, rule="Epsilon(0.0)",
        load_average_start=load_start, load_average_end=os.getloadavg()[0]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
