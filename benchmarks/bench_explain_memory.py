"""Peak memory of one explanation against the gradient's, on the graphs of ``bench_scaling.py``.

    python benchmarks/bench_explain_memory.py                 # 10k, 30k and 100k nodes (about three minutes)
    python benchmarks/bench_explain_memory.py --sizes 30000   # one size

The model and graphs of ``bench_scaling.py`` (a 3-layer GCN, 32 features, ten edges per node, one
node's logit explained).  Each case runs in fresh subprocesses; its figure is the peak resident
set size (``VmHWM``) minus the resident size just before the explanation (Linux), in MiB, the median of
``--repeat`` (3) such subprocesses (the gradient's own figure moves by tens of MiB from one process to the next):

* ``gradient``: ``torch.autograd.grad`` of the explained logit;
* ``lrp``: ``LRPExplainer`` called directly, without capture (``replay=False``: the first explanation of a
  graph, the forward rules under the interception), node relevance only;
* ``lrp_edges``: the same with the edge relevance recorded (``edge_mask_type="object"``): each layer's
  messages pass a hook that reads their gradient, and are kept for it.

Writes ``benchmarks/results/explain_memory.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import results_file  # benchmarks/results_file.py

CASES = {"gradient": "the plain input gradient", "lrp": "LRP, node relevance",
         "lrp_edges": "LRP, node and edge relevance"}


def child(nodes: int, case: str) -> None:
    import torch

    import memory
    from bench_scaling import MODEL_CONFIG, setup
    from lrp_lib.explain.explainer import LRPExplainer

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model, x, edge_index, index, target = setup(nodes, 10)
    algorithm = LRPExplainer(replay=False)
    algorithm.connect(dict(explanation_type="model", node_mask_type="attributes",
                           edge_mask_type="object" if case.startswith("lrp_edges") else None), MODEL_CONFIG)
    target_t, index_t = torch.tensor([target]), torch.tensor([index])
    before = memory.status_bytes("VmRSS")
    if case == "gradient":
        leaf = x.detach().requires_grad_()
        torch.autograd.grad(model(leaf, edge_index)[index, target], leaf)
    else:
        algorithm(model, x, edge_index, target=target_t, index=index_t)
    print(json.dumps({"peak_mib": (memory.status_bytes("VmHWM") - before) / 2**20}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    p.add_argument("--child", nargs=2, metavar=("NODES", "CASE"), help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=3, help="fresh subprocesses per case, their median reported")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1])
        return
    rows = []
    for n in args.sizes:
        row = {"nodes": n, "edges": 10 * n, "cases": {}}
        for case, label in CASES.items():
            peaks = []
            for _ in range(args.repeat):
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(n), case],
                                     check=True, capture_output=True, text=True).stdout
                peaks.append(json.loads(out.strip().splitlines()[-1])["peak_mib"])
            row["cases"][case] = {"label": label, "peak_mib": statistics.median(peaks), "peaks_mib": peaks}
        base = row["cases"]["gradient"]["peak_mib"]
        for case in row["cases"].values():
            case["ratio_to_gradient"] = case["peak_mib"] / base
        rows.append(row)
        print(f"{n:>8,} nodes  " + "  ".join(f"{k} {v['peak_mib']:7.1f} MiB ({v['ratio_to_gradient']:.2f}x)"
                                             for k, v in row["cases"].items()))
    if not args.no_write:
        path = results_file.write_results("explain_memory", rows, {
            "sizes": args.sizes, "edges_per_node": 10, "features": 32, "hidden": 32, "layers": 3,
            "threads": 1, "dtype": "float32", "explained": "one node's logit, node_mask_type='attributes'",
            "measure": "peak RSS (VmHWM) minus RSS before the call, the median of --repeat fresh subprocesses per "
                       "case"})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
