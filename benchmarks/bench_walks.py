"""GNN-LRP walks: lrp_lib.explain.walks against naive per-walk enumeration, as the graph and the depth grow.

    python benchmarks/bench_walks.py            # 10 to 10,000 nodes, depth 2 to 5 (a few minutes)
    python benchmarks/bench_walks.py --fast     # a quick run: fewer sizes, smaller naive budget
    python benchmarks/bench_walks.py --fast --sizes 10 100 1000   # depth 3 only

The model: ``L`` ``GCNConv`` layers (16 input features, ``--hidden`` hidden (64), ReLU, no bias), a global add
pool and a linear head to one output, random weights (seed 0); the graph: a Barabasi-Albert graph
(``torch_geometric.utils.barabasi_albert_graph``, 2 edges per new node, both directions).  The
rule is LRP-0 (``rule="z"``), where every walk's relevance is its exact contribution and all walks
sum to the output (checked on every graph where all walks are enumerated).

What is timed, side by side in one process (median of ``--repeats`` runs each):

* ``walk_relevance``: ``lrp_lib.explain.walks.walk_relevance`` of every walk (enumerated with
  ``all_walks``, enumeration included), when there are at most ``--max-walks`` of them;
  ``walk_relevance_1k``: of 1,000 random walks (cost per walk at every size);
* ``subgraph``: ``subgraph_relevance`` of one connected node set S of ``--subgraph`` nodes
  (a breadth-first ball around node 0): one masked backward, no enumeration;
* ``top_walks``: ``top_walks(k=--k)``, exact (every walk scored by batched masked backwards);
* ``naive``: the way the reference implementation (DIG) computes walk relevance: one full
  forward and backward pass of the network **per walk**, the gradient confined to the walk's
  message at every layer; ``naive_subgraph`` runs it on every walk inside S and sums,
  ``naive_top`` on every walk of the graph and sorts.  The per-walk time is measured on a
  sample of walks; the naive sides run in full only where the projected time (per-walk time x
  number of walks) stays under ``--naive-budget`` seconds, else they are recorded as
  ``null`` with the projection in ``*_projected_s``.

Every row also checks the results: naive and lrp_lib agree on the sampled walks (largest
relative difference), the naive top-k equals ``top_walks``, the naive subgraph sum equals
``subgraph_relevance``.

``--threads`` (default 1) sets ``torch.set_num_threads``.  The table is printed and written to
``benchmarks/results/walks.json`` (``results_file.write_results``); the chapter *Relevant walks*
renders it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, global_add_pool
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import barabasi_albert_graph

from lrp_lib.explain.walks.search import bounded_walks, enumerated_walks
from lrp_lib.explain.walks import WalkModel, all_walks, subgraph_relevance, top_walks, walk_relevance

import results_file  # benchmarks/results_file.py

F_IN, HIDDEN = 16, 64


class GCN(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        dims = [F_IN] + [HIDDEN] * layers
        self.convs = nn.ModuleList(GCNConv(dims[i], dims[i + 1], bias=False) for i in range(layers))
        self.head = nn.Linear(HIDDEN, 1, bias=False)

    def forward(self, x, edge_index, batch=None):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.head(global_add_pool(x, batch))


def setup(n: int, layers: int):
    torch.manual_seed(0)
    np.random.seed(0)  # barabasi_albert_graph draws with numpy
    edge_index = barabasi_albert_graph(n, 2)
    x = torch.randn(n, F_IN)
    model = GCN(layers).eval()
    return model, x, edge_index


class Naive:
    """One forward and backward of the whole network per walk (DIG's GNN-LRP): the messages of
    layer t are those of GCNConv (normalised, with self-loops), and only the message
    j_{t-1} -> j_t keeps its gradient; R = sum_f x[j_0, f] * d out / d x[j_0, f] (LRP-0)."""

    def __init__(self, model: GCN, x, edge_index):
        n = x.shape[0]
        ei, w = gcn_norm(edge_index, None, n, add_self_loops=True)
        self.src, self.dst, self.coef, self.n = ei[0], ei[1], w, n
        keys = self.dst * n + self.src
        self.keys, self.order = keys.sort()
        self.model, self.x = model, x

    def edge_ids(self, j, k):
        pos = torch.searchsorted(self.keys, k * self.n + j)
        return self.order[pos]

    def relevance(self, walk) -> float:
        x = self.x.clone().requires_grad_(True)
        a = x
        for t, conv in enumerate(self.model.convs):
            e = int(self.edge_ids(walk[t:t + 1], walk[t + 1:t + 2]))
            h = conv.lin(a)
            msg = self.coef.unsqueeze(-1) * h[self.src]
            keep = torch.zeros(msg.shape[0], 1, dtype=torch.bool)
            keep[e] = True
            msg = torch.where(keep, msg, msg.detach())
            z = torch.zeros(self.n, h.shape[1]).index_add_(0, self.dst, msg)
            a = F.relu(z)
        out = self.model.head(a.sum(0))
        (grad,) = torch.autograd.grad(out.sum(), x)
        return float((x.detach()[walk[0]] * grad[walk[0]]).sum())

    def many(self, walks) -> torch.Tensor:
        return torch.tensor([self.relevance(w) for w in walks])


def count_walks(edge_index, n: int, layers: int) -> int:
    ei, _ = gcn_norm(edge_index, None, n, add_self_loops=True)
    c = torch.ones(n, dtype=torch.float64)
    for _ in range(layers):
        c = torch.zeros(n, dtype=torch.float64).index_add_(0, ei[1], c[ei[0]])
    return int(c.sum())


def ball(edge_index, size: int, start: int = 0) -> torch.Tensor:
    nodes, frontier = [start], [start]
    src, dst = edge_index
    while len(nodes) < size and frontier:
        nxt = []
        for v in frontier:
            for u in sorted(dst[src == v].tolist()):
                if u not in nodes and len(nodes) < size:
                    nodes.append(u)
                    nxt.append(u)
        frontier = nxt
    return torch.tensor(sorted(nodes))


CPU = {}  # the median process time of the last timed call (the machine is shared: wall time includes waits)


def timed(fn, repeats: int):
    times, cpu, out = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    CPU["last"] = statistics.median(cpu)
    return statistics.median(times), out


def random_walks(wm: WalkModel, count: int, gen: torch.Generator) -> torch.Tensor:
    """count walks drawn uniformly step by step, from the output side."""
    L = wm.depth
    walks = torch.empty(count, L + 1, dtype=torch.long)
    walks[:, L] = torch.randint(0, wm.num_nodes, (count,), generator=gen)
    for t in range(L, 0, -1):
        src, dst = wm.steps[t - 1]  # the step's pairs (j, k), sorted by k
        counts = torch.bincount(dst, minlength=wm.num_nodes)
        ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        k = walks[:, t]
        lo, hi = ptr[k], ptr[k + 1]
        pick = lo + (torch.rand(count, generator=gen) * (hi - lo)).long()
        walks[:, t - 1] = src[pick]
    return walks


def measure(n: int, layers: int, args) -> dict:
    model, x, edge_index = setup(n, layers)
    gen = torch.Generator().manual_seed(1)
    W = count_walks(edge_index, n, layers)
    S = ball(edge_index, min(args.subgraph, n))
    row = {"nodes": n, "edges": int(edge_index.shape[1]), "layers": layers, "walks": W, "k": args.k,
           "subgraph_nodes": int(S.numel())}
    with torch.no_grad():
        out = float(model(x, edge_index))
    r = args.repeats

    # lrp_lib
    row["top_walks_s"], (top_w, top_r) = timed(lambda: top_walks(model, x, edge_index, args.k, rule="z"), r)
    row["top_walks_cpu_s"] = CPU["last"]
    row["subgraph_s"], sub = timed(lambda: subgraph_relevance(model, x, edge_index, S, rule="z"), r)
    def record():
        wm_ = WalkModel(model, x, edge_index, rule="z")
        wm_.algebra  # the per-node matrices and per-edge shares, built on first use
        return wm_
    row["top_walks_record_s"], wm = timed(record, r)
    row["top_walks_search_s"], _ = timed(lambda: bounded_walks(wm, args.k), r)
    if W <= args.max_walks:
        row["top_walks_enumerated_s"], (_, enum_r) = timed(lambda: enumerated_walks(wm, args.k), r)
        row["top_walks_equals_enumerated"] = bool(torch.allclose(enum_r.abs(), top_r.abs(), rtol=1e-5, atol=1e-7))
    else:
        row["top_walks_enumerated_s"] = None
    sample = random_walks(wm, 1000, gen)
    row["walk_relevance_1k_s"], rel_sample = timed(lambda: walk_relevance(model, x, edge_index, sample, rule="z"), r)
    all_rel = None
    if W <= args.max_walks:
        def every_walk():
            wm_ = WalkModel(model, x, edge_index, rule="z")
            return walk_relevance(model, x, edge_index, all_walks(wm_), rule="z")
        row["walk_relevance_s"], all_rel = timed(every_walk, r)
        row["sum_error"] = abs(float(all_rel.double().sum()) - out) / max(abs(out), 1e-12)
        exact = all_rel.abs().topk(args.k).values
        row["top_walks_exact"] = bool(torch.allclose(top_r.abs(), exact, rtol=1e-4, atol=1e-7))
    else:
        row["walk_relevance_s"] = None

    # naive: per-walk time on a sample, then the full runs where they fit the budget
    naive = Naive(model, x, edge_index)
    m = args.naive_sample
    t0 = time.perf_counter()
    naive_sample = naive.many(sample[:m])
    per_walk = (time.perf_counter() - t0) / m
    row["naive_per_walk_s"] = per_walk
    scale = rel_sample[:m].abs().max().clamp(min=1e-12)
    row["naive_vs_lib_max_rel_diff"] = float((naive_sample - rel_sample[:m]).abs().max() / scale)

    in_s = torch.zeros(n, dtype=torch.bool)
    in_s[S] = True
    walks_s = all_walks(wm, end=S)
    walks_s = walks_s[in_s[walks_s].all(1)]
    row["subgraph_walks"] = int(walks_s.shape[0])
    row["naive_subgraph_projected_s"] = per_walk * walks_s.shape[0]
    if row["naive_subgraph_projected_s"] <= args.naive_budget:
        row["naive_subgraph_s"], tot = timed(lambda: naive.many(walks_s).sum(), 1)
        row["naive_subgraph_rel_diff"] = abs(float(tot) - float(sub)) / max(abs(float(sub)), 1e-12)
    else:
        row["naive_subgraph_s"] = None
    row["naive_top_projected_s"] = per_walk * W
    if row["naive_top_projected_s"] <= args.naive_budget and W <= args.max_walks:
        def naive_top():
            every = all_walks(WalkModel(model, x, edge_index, rule="z"))
            rel = naive.many(every)
            return rel[rel.abs().argsort(descending=True)[:args.k]]
        row["naive_top_s"], naive_best = timed(naive_top, 1)
        row["naive_top_matches"] = bool(torch.allclose(naive_best.abs(), top_r.abs(), rtol=1e-3, atol=1e-6))
    else:
        row["naive_top_s"] = None
    return row


def fmt(v):
    return "-" if v is None else f"{v:.3g}"


def main():
    global HIDDEN
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fast", action="store_true", help="sizes 10, 100, 1000; depth 2-3; naive budget 2 s")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--subgraph", type=int, default=10, help="nodes in the set S of subgraph_relevance")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--naive-budget", type=float, default=30.0, help="seconds a naive run may take (projected)")
    p.add_argument("--naive-sample", type=int, default=30, help="walks timed to project the naive cost")
    p.add_argument("--max-walks", type=int, default=50_000, help="enumerate all walks up to this many")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--hidden", type=int, default=64, help="hidden features of the GCN (default 64)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="only these sizes at depth 3 (no depth sweep)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    HIDDEN = args.hidden
    load_start = round(os.getloadavg()[0], 2)
    if args.fast:
        sizes, depths, depth_sizes = [10, 100, 1000], [2, 3], [100]
        args.naive_budget, args.repeats = min(args.naive_budget, 2.0), 1
    else:
        sizes, depths, depth_sizes = [10, 30, 100, 300, 1000, 3000, 10000], [2, 3, 4, 5], [100, 1000]
    if args.sizes:
        sizes, depth_sizes = args.sizes, []
    rows = []
    plan = [(n, 3, "size") for n in sizes] + [(n, L, "depth") for n in depth_sizes for L in depths if L != 3]
    print(f"{'sweep':6s} {'nodes':>6s} {'L':>2s} {'walks':>10s} {'top_walks':>9s} {'(search)':>9s} {'enumerate':>9s} "
          f"{'subgraph':>9s} {'all walks':>9s} "
          f"{'naive/walk':>10s} {'naive sub':>9s} {'naive top':>9s} {'naive top proj.':>15s}")
    for n, L, sweep in plan:
        row = measure(n, L, args)
        row["sweep"] = sweep
        rows.append(row)
        print(f"{sweep:6s} {n:6d} {L:2d} {row['walks']:10d} {fmt(row['top_walks_s']):>9s} "
              f"{fmt(row['top_walks_search_s']):>9s} {fmt(row['top_walks_enumerated_s']):>9s} {fmt(row['subgraph_s']):>9s} "
              f"{fmt(row['walk_relevance_s']):>9s} {fmt(row['naive_per_walk_s']):>10s} {fmt(row['naive_subgraph_s']):>9s} "
              f"{fmt(row['naive_top_s']):>9s} {fmt(row['naive_top_projected_s']):>15s}", flush=True)
    target = next(r for r in rows if r["nodes"] == 1000 and r["layers"] == 3)
    summary = {"target": f"top-10 walks of a 3-layer GCN (hidden {HIDDEN}) on a 1,000-node graph in under 0.5 s",
               "target_top_walks_s": target["top_walks_s"], "target_met": target["top_walks_s"] < 0.5,
               "target_top_walks_cpu_s": target["top_walks_cpu_s"],
               "load_average_1min_start": load_start}
    print(f"target: top-{args.k} walks, 3-layer GCN, 1,000 nodes: {target['top_walks_s']:.3f} s "
          f"(process time {target['top_walks_cpu_s']:.3f} s, load {load_start} at the start) "
          f"({'met' if summary['target_met'] else 'NOT met'})")
    path = results_file.write_results("walks", {"rows": rows, **summary}, {
        "fast": args.fast, "k": args.k, "subgraph": args.subgraph, "repeats": args.repeats,
        "naive_budget_s": args.naive_budget, "naive_sample": args.naive_sample, "max_walks": args.max_walks,
        "threads": args.threads, "features": F_IN, "hidden": HIDDEN, "rule": "z",
        "graph": "barabasi_albert_graph(n, 2)"})
    print("written", path)


if __name__ == "__main__":
    main()
