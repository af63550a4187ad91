"""Graph Network layers: relevance backward against the gradient backward.

    python benchmarks/bench_graph.py                  # 100,000 nodes, 1,000,000 edges, 64 features
    python benchmarks/bench_graph.py --nodes 10000 --edges 100000   # a quick run

A four-block Graph Network (each block: EdgeLinear on edge, sender, receiver and global
features, ReLU; NodeLinear on node, incoming (sum) and global features, ReLU; GlobalLinear on
node and edge (sum) and global features, ReLU) on one random graph, float32, CPU.  The same
model runs its forward once outside and once inside ``lrp_lib.teach.relevance()``; we time the
backward from the global output (and the forward, for context) and measure memory.

Time: the two modes alternate in one process, ``--repeats`` times each; the table gives the
median.  Memory, two honest measures:

* saved bytes: the bytes of the distinct tensors that autograd keeps for backward, counted
  with ``torch.autograd.graph.saved_tensors_hooks`` (each storage counted once; the inputs
  and parameters excluded).  This is what the forward leaves alive until backward.
* peak RSS: each mode runs forward + backward in a fresh subprocess; the peak resident set
  size (``VmHWM`` in ``/proc/self/status``, Linux) minus the resident size just before the forward.  This
  includes every temporary of forward and backward (and allocator slack).

``--threads`` (default 1) sets ``torch.set_num_threads`` for both modes: on a shared, loaded
machine the synchronisation of a thread pool swamps the many small element-wise ops, and the
ratios compare like with like.  Ratios are relevance / gradient.

The table is printed and written to ``benchmarks/results/graph.json`` (see ``results_file.py``),
which chapter 2 and the Performance page render.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings

import torch
from torch import nn
from torch_geometric.data import Data

import lrp_lib
from lrp_lib.teach.graph import EdgeLinear, EdgeReLU, GlobalLinear, GlobalReLU, NodeLinear, NodeReLU
from lrp_lib.teach.ops import LostRelevanceWarning

import memory  # benchmarks/memory.py, beside this script
import results_file  # benchmarks/results_file.py


def block(f: int) -> nn.Sequential:
    return nn.Sequential(
        EdgeLinear(f, edge_features=f, sender_features=f, receiver_features=f, global_features=f), EdgeReLU(),
        NodeLinear(f, node_features=f, incoming_features=f, global_features=f, aggregation="sum"), NodeReLU(),
        GlobalLinear(f, node_features=f, edge_features=f, global_features=f, aggregation="sum"), GlobalReLU(),
    )


def setup(nodes: int, edges: int, features: int, blocks: int):
    torch.manual_seed(0)
    model = nn.Sequential(*[block(features) for _ in range(blocks)])
    data = Data(
        x=torch.randn(nodes, features, requires_grad=True),
        edge_attr=torch.randn(edges, features, requires_grad=True),
        edge_index=torch.randint(0, nodes, (2, edges)),
        u=torch.randn(1, features, requires_grad=True),
    )
    return model, data


def forward(model, data, relevance: bool):
    with lrp_lib.teach.relevance(relevance):
        return model(data).u


def run_once(model, data, relevance: bool):
    t0 = time.perf_counter()
    out = forward(model, data, relevance)
    t1 = time.perf_counter()
    out.backward(out.detach())  # relevance: start from the output itself; gradient: the same seed
    t2 = time.perf_counter()
    for t in (data.x, data.edge_attr, data.u):
        t.grad = None
    model.zero_grad(set_to_none=True)
    return t1 - t0, t2 - t1


def saved_bytes(model, data, relevance: bool) -> int:
    """Bytes of the distinct storages autograd saves for backward (inputs and parameters excluded)."""
    inputs = [data.x, data.edge_attr, data.u, data.edge_index, *model.parameters()]
    return memory.saved_bytes(lambda: forward(model, data, relevance), inputs)


def rss_child(args, relevance: bool) -> int:
    """In this (fresh) process: peak RSS increase of one forward + backward, in bytes."""
    model, data = setup(args.nodes, args.edges, args.features, args.blocks)
    before = memory.status_bytes("VmRSS")  # the graph and the model are built; nothing has run yet
    run_once(model, data, relevance)
    return memory.status_bytes("VmHWM") - before


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    # One thread by default: on a shared, loaded machine the synchronisation of a thread pool swamps
    # the many small element-wise ops; both modes run with the same setting, so ratios compare like with like.
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--rss-child", choices=["gradient", "relevance"], help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore", LostRelevanceWarning)  # an exact 0 among 64M float32 sums is possible

    if args.rss_child:
        print(json.dumps(rss_child(args, args.rss_child == "relevance")))
        return

    model, data = setup(args.nodes, args.edges, args.features, args.blocks)
    saved = {mode: saved_bytes(model, data, mode == "relevance") for mode in ("gradient", "relevance")}
    times = {"gradient": [], "relevance": []}
    run_once(model, data, False)  # warm-up
    for _ in range(args.repeats):
        for mode in ("gradient", "relevance"):
            times[mode].append(run_once(model, data, mode == "relevance"))
    del model, data

    rss = {}
    for mode in ("gradient", "relevance"):
        cmd = [sys.executable, __file__, "--rss-child", mode, "--nodes", str(args.nodes), "--edges", str(args.edges),
               "--features", str(args.features), "--blocks", str(args.blocks), "--threads", str(args.threads)]
        rss[mode] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    fwd = {m: statistics.median(t[0] for t in times[m]) for m in times}
    bwd = {m: statistics.median(t[1] for t in times[m]) for m in times}
    mib = 2 ** 20
    measures = [  # (key, label, unit, {mode: value})
        ("backward_time", "backward time", "s", bwd),
        ("forward_time", "forward time", "s", fwd),
        ("saved_for_backward", "saved for backward", "MiB", {m: saved[m] / mib for m in saved}),
        ("peak_rss_increase", "peak RSS increase, forward + backward", "MiB", {m: rss[m] / mib for m in rss}),
    ]
    results = [{"measure": key, "label": label, "unit": unit, "gradient": v["gradient"],
                "relevance": v["relevance"], "ratio": v["relevance"] / v["gradient"]}
               for key, label, unit, v in measures]
    print(f"GN, {args.blocks} blocks, {args.nodes:,} nodes, {args.edges:,} edges, {args.features} features, "
          f"float32, CPU, {args.threads} threads, median of {args.repeats}")
    print()
    print("| measure | gradient | relevance | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for r in results:
        fmt = ".2f" if r["unit"] == "s" else ",.0f"
        print(f"| {r['label']} ({r['unit']}) | {r['gradient']:{fmt}} | {r['relevance']:{fmt}} | {r['ratio']:.2f} |")
    path = results_file.write_results("graph", results, {
        "nodes": args.nodes, "edges": args.edges, "features": args.features, "blocks": args.blocks,
        "repeats": args.repeats, "threads": args.threads, "dtype": "float32", "device": "cpu"})
    print(f"wrote {path}")

if __name__ == "__main__":
    main()
