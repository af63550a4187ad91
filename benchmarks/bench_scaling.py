"""Cost of one explanation against graph size: the plain gradient, LRP, Captum saliency and Integrated Gradients.

    python benchmarks/bench_scaling.py            # 25, 700, 1k, 2k, 3k, 10k, 30k, 100k nodes (about 6 minutes)
    python benchmarks/bench_scaling.py --fast     # 25, 700, 2k, 10k nodes, fewer repeats (writes no results file)
    python benchmarks/bench_scaling.py --device cuda   # on a GPU: writes benchmarks/results/scaling-cuda.json

The model is a 3-layer GCN, the architecture of ``bench_nodes.py`` (32 input features, 32 hidden, 4 classes, ReLU, a
linear head; random weights: the cost does not depend on training).  The graphs are random, ``N``
nodes and ``10 N`` edges (``torch.randint`` senders and receivers, generator seeded with 0),
float32, CPU (or ``--device cuda``: the model and the tensors on the GPU, each call timed from a
synchronised start to a synchronised end), ``--threads`` intra-op threads (default 1).

What is explained: the output of one node (node classification, ``index`` = one node drawn with the
seed, ``target`` = the class the model predicts for it), by the relevance or attribution of every
input feature (``node_mask_type="attributes"``, no edge mask).  Each method computes it on the
whole graph:

* **gradient**: ``torch.autograd.grad(model(x, edge_index)[index, target], x)``, one forward and
  one backward, no explainer around it: the floor the others are divided by;
* **LRP**: ``Explainer(model, algorithm=lrp_lib.explain.explainer.LRPExplainer(), ...)``, where ``Explainer``
  is ``lrp_lib.explain.explainer.Explainer`` (PyG's, with the inputs checked before the prediction pass for
  LRP and the training flag restored), for all three explainers; by default it takes the prediction and
  the target from LRP's own forward (:mod:`lrp_lib.explain.one_pass`) instead of running PyG's
  prediction pass first;
* **LRP, two passes**: the same with ``Explainer(..., one_pass=False)``: PyG's prediction pass, then LRP;
* **LRP algorithm**: ``LRPExplainer`` called directly (``explainer.algorithm(model, x, edge_index,
  target=..., index=...)``, the target given), without PyG's ``Explainer`` around it: the cost of
  the explanation itself, against the gradient;
* **LRP, phenomenon**: the same ``Explainer`` with ``explanation_type="phenomenon"``, which runs no
  prediction pass of its own (the target given): the explanation's own cost with PyG's wrapping;
* **without capture**: ``LRPExplainer(replay=False)`` through ``Explainer`` and called directly: every
  explanation runs the model's forward under the forward rules' mode (what the first explanation of a new
  graph costs).  The others use the default ``replay=True``: the second warm-up call captures the
  explanation's forward with ``make_fx`` (:mod:`lrp_lib.explain.capture`), and the timed calls run the captured
  graph and one ordinary backward (asserted); since the graph is the same on every call, its part of the
  capture (degrees, normalisation) is reused, as when many nodes of one graph are explained one by one;
* **saliency**: ``Explainer(model, algorithm=CaptumExplainer("Saliency"), ...)``, and with
  ``explanation_type="phenomenon"``;
* **Integrated Gradients**: ``Explainer(model, algorithm=CaptumExplainer("IntegratedGradients",
  n_steps=...), ...)`` (``--ig-steps``, default 20; PyG's ``CaptumExplainer`` runs the steps one
  at a time, ``internal_batch_size=1``, so its cost is about ``n_steps`` gradients).

The three explainers go through the same ``Explainer`` (``explanation_type="model"``).  For Captum's
methods it runs one prediction pass (a forward without autograd) before the algorithm, to pick the
target; for LRP it takes the prediction from LRP's own forward (``lrp_two_passes`` runs the pass as
PyG does).  The ratio of LRP to saliency is each call's cost as a user sees it.

Timing: per size, one warm-up call of each method (but IG), then ``--repeat`` rounds (more below
10,000 nodes: ``repeat * 10,000 / N``, at most ten times as many) in which the methods take turns
(Integrated Gradients, being ``n_steps`` times dearer, only in the first ``--ig-repeat`` rounds,
fewer from 10,000 nodes up: ``ig_repeat * 10,000 / N`` rounded, at least one),
in one process, so that the load of the shared machine falls on all alike.  Per method the
median wall-clock seconds, the median CPU seconds of the process and the median number of minor
page faults per call (``getrusage``: memory the C allocator took fresh from the kernel, which
glibc does for every allocation above its mmap threshold, at most 32 MiB, so from about 30,000
nodes here each call pays for zeroing its large tensors' pages); per method and size the
ratio of the medians to the gradient's, and the median over rounds of the ratio within a round
(each method against the gradient of the same round).  As a check, saliency's node mask must
equal ``|gradient|``, and LRP's relevance must be finite and of the gradient's shape (its sum
is recorded; it is not the logit, since the biases take their share).

Writes ``benchmarks/results/scaling.json`` (``scaling-cuda.json`` with ``--device cuda``;
``results_file.write_results``), which the book's Performance page plots.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
import warnings

import torch
from torch_geometric.explain.algorithm import CaptumExplainer

from lrp_lib.explain.explainer import Explainer, LRPExplainer

import results_file  # benchmarks/results_file.py
from bench_nodes import GCN  # the same 3-layer GCN as the many-nodes benchmark

MODEL_CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")
SIZES = [25, 700, 1_000, 2_000, 3_000, 10_000, 30_000, 100_000]
FAST_SIZES = [25, 700, 2_000, 10_000]
METHODS = ["gradient", "lrp", "lrp_two_passes", "lrp_algorithm", "lrp_phenomenon", "lrp_mode", "lrp_algorithm_mode",
           "saliency", "saliency_phenomenon", "integrated_gradients"]
LABELS = {
    "gradient": "gradient (torch.autograd.grad)",
    "lrp": "LRP (LRPExplainer)",
    "lrp_two_passes": "LRP with PyG's prediction pass first (Explainer(one_pass=False))",
    "lrp_algorithm": "LRP (LRPExplainer called directly, no Explainer)",
    "lrp_phenomenon": "LRP (LRPExplainer, explanation_type='phenomenon')",
    "lrp_mode": "LRP without capture (LRPExplainer(replay=False))",
    "lrp_algorithm_mode": "LRP without capture, called directly",
    "saliency": "saliency (CaptumExplainer)",
    "saliency_phenomenon": "saliency (CaptumExplainer, explanation_type='phenomenon')",
    "integrated_gradients": "Integrated Gradients (CaptumExplainer)",
}


#: Where the model and the tensors live (``--device``); the graphs are drawn on the CPU, then moved.
DEVICE = torch.device("cpu")


def setup(nodes: int, edges_per_node: int, features: int = 32):
    """The model, features, edges and the explained node of a seeded random graph, on ``DEVICE``."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = GCN(features, 32, 4).eval().to(DEVICE)
    x = torch.randn(nodes, features, generator=g).to(DEVICE)
    edge_index = torch.randint(0, nodes, (2, edges_per_node * nodes), generator=g).to(DEVICE)
    index = int(torch.randint(0, nodes, (1,), generator=g))
    with torch.no_grad():
        target = int(model(x, edge_index)[index].argmax())
    return model, x, edge_index, index, target


def explainers(model, ig_steps: int) -> dict:
    def make(algorithm, kind="model", **options):
        return Explainer(model, algorithm=algorithm, explanation_type=kind, node_mask_type="attributes",
                         edge_mask_type=None, model_config=MODEL_CONFIG, **options)

    return {"lrp": make(LRPExplainer()), "lrp_two_passes": make(LRPExplainer(), one_pass=False),
            "lrp_phenomenon": make(LRPExplainer(), "phenomenon"),
            "lrp_mode": make(LRPExplainer(replay=False)),
            "saliency": make(CaptumExplainer("Saliency")),
            "saliency_phenomenon": make(CaptumExplainer("Saliency"), "phenomenon"),
            "integrated_gradients": make(CaptumExplainer("IntegratedGradients", n_steps=ig_steps))}


def method_calls(model, x, edge_index, index, target, ig_steps):
    """{method: function of no argument returning the (N, F) node mask}."""
    ex = explainers(model, ig_steps)
    target_t = torch.tensor([target], device=DEVICE)

    def gradient():
        leaf = x.detach().requires_grad_()
        out = model(leaf, edge_index)
        return torch.autograd.grad(out[index, target], leaf)[0]

    target_all = torch.full((x.shape[0],), target, device=DEVICE)  # "phenomenon": PyG reads the target at index

    def via(name):
        t = target_all if name.endswith("phenomenon") else target_t
        return lambda: ex[name](x, edge_index, index=index, target=t).node_mask

    index_t = torch.tensor([index], device=DEVICE)

    def direct(algorithm):  # connected to the configuration by its Explainer, called without it
        return lambda: algorithm(model, x, edge_index, target=target_t, index=index_t).node_mask

    calls = {"gradient": gradient, **{name: via(name) for name in ex},
             "lrp_algorithm": direct(ex["lrp"].algorithm), "lrp_algorithm_mode": direct(ex["lrp_mode"].algorithm)}
    calls = {name: calls[name] for name in METHODS}

    def replayed():  # how each LRP explanation through Explainer ran: "captured", or why not
        return {name: getattr(ex[name](x, edge_index, index=index, target=target_all), "replay_reason", None)
                for name in ex if name.startswith("lrp")}
    return calls, replayed


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float32 rounding (a captured graph may order its sums otherwise than the eager forward)."""
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6 * float(b.abs().max().clamp(min=1)))


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def timed(fn):
    """(wall seconds, CPU seconds of the process, minor page faults, result) of one call (on a GPU,
    from a synchronised start to the end of its last kernel)."""
    sync()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    sync()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults, result


def measure(nodes: int, edges_per_node: int, repeat: int, ig_repeat: int, ig_steps: int) -> dict:
    model, x, edge_index, index, target = setup(nodes, edges_per_node)
    calls, replayed_now = method_calls(model, x, edge_index, index, target, ig_steps)
    # warm-up, and the checks below (Integrated Gradients warms up on its own first steps)
    for _ in range(3):  # the second explanation of a graph captures its forward
        masks = {name: fn() for name, fn in calls.items() if name != "integrated_gradients"}
    grad = masks["gradient"]
    if not torch.allclose(masks["saliency"], grad.abs(), rtol=1e-4, atol=1e-7):
        raise AssertionError(f"{nodes} nodes: Captum saliency differs from |gradient|")
    if not torch.isfinite(masks["lrp"]).all() or masks["lrp"].shape != grad.shape:
        raise AssertionError(f"{nodes} nodes: LRP relevance not finite or of the wrong shape")
    for name in ("lrp_two_passes", "lrp_algorithm", "lrp_phenomenon", "lrp_mode", "lrp_algorithm_mode"):
        if not same(masks[name], masks["lrp"]):
            raise AssertionError(f"{nodes} nodes: {name} differs from LRP through PyG's Explainer")
    if not same(masks["saliency_phenomenon"], masks["saliency"]):
        raise AssertionError(f"{nodes} nodes: saliency differs between the explanation types")
    replayed = replayed_now()  # after the warm-up: captured, but without capture
    expected = {"lrp_mode": None}  # (replay=False: no replay_reason)
    if replayed != {name: expected.get(name, "captured") for name in replayed}:
        raise AssertionError(f"{nodes} nodes: replayed {replayed}")
    wall = {m: [] for m in calls}
    cpu = {m: [] for m in calls}
    faults = {m: [] for m in calls}
    rounds = max(repeat, min(10 * repeat, round(repeat * 10_000 / nodes)))  # small graphs: more rounds
    for r in range(rounds):
        for name, fn in calls.items():
            if name == "integrated_gradients" and r >= max(1, min(ig_repeat, round(ig_repeat * 10_000 / nodes))):
                continue
            w, c, f, _ = timed(fn)
            wall[name].append(w)
            cpu[name].append(c)
            faults[name].append(f)
    row = {"nodes": nodes, "edges": edges_per_node * nodes, "explained_node": index, "target": target,
           "relevance_sum": float(masks["lrp"].sum()), "replayed": replayed, "methods": {}}
    base = statistics.median(wall["gradient"])
    for name in calls:
        count = len(wall[name])
        paired = [wall[name][i] / wall["gradient"][i] for i in range(count)]
        med = statistics.median(wall[name])
        row["methods"][name] = {
            "label": LABELS[name], "repeats": count, "seconds": wall[name],
            "median_seconds": med, "median_cpu_seconds": statistics.median(cpu[name]),
            "median_page_faults": statistics.median(faults[name]),
            "ratio_to_gradient": med / base, "paired_ratio_to_gradient": statistics.median(paired),
        }
    lrp, sal = wall["lrp"], wall["saliency"]
    row["lrp_over_saliency"] = statistics.median(lrp) / statistics.median(sal)
    row["lrp_over_saliency_paired"] = statistics.median(a / b for a, b in zip(lrp, sal))
    twice = wall["lrp_two_passes"]
    row["lrp_two_passes_over_saliency"] = statistics.median(twice) / statistics.median(sal)
    row["lrp_two_passes_over_saliency_paired"] = statistics.median(a / b for a, b in zip(twice, sal))
    mode = wall["lrp_mode"]
    row["lrp_mode_over_saliency"] = statistics.median(mode) / statistics.median(sal)
    row["lrp_mode_over_saliency_paired"] = statistics.median(a / b for a, b in zip(mode, sal))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="numbers of nodes (default 1k 3k 10k 30k 100k)")
    p.add_argument("--edges-per-node", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=7, help="rounds per size from 10,000 nodes up (median)")
    p.add_argument("--ig-repeat", type=int, default=3, help="rounds of Integrated Gradients per size")
    p.add_argument("--ig-steps", type=int, default=20, help="n_steps of Integrated Gradients")
    p.add_argument("--fast", action="store_true", help="sizes 25 700 2k 10k, 3 rounds; writes no results file")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu (default; results/scaling.json) or cuda (results/scaling-cuda.json)")
    args = p.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # Captum/PyG deprecation notes; LostRelevanceWarning at dead ReLUs
    sizes = args.sizes or (FAST_SIZES if args.fast else SIZES)
    repeat, ig_repeat = (3, 1) if args.fast else (args.repeat, args.ig_repeat)
    machine = results_file.machine_info()  # the load average before the run (the file records it at the end)
    print(f"3-layer GCN, {args.edges_per_node} edges per node, one node's logit explained, "
          f"{torch.get_num_threads()} threads, median of {repeat} (IG {args.ig_steps} steps: {ig_repeat})\n")
    cols = ["lrp", "lrp_two_passes", "lrp_algorithm", "lrp_phenomenon", "lrp_mode", "lrp_algorithm_mode", "saliency",
            "saliency_phenomenon", "integrated_gradients"]
    print("| nodes | gradient ms | " + " | ".join(f"{c} / grad" for c in cols) + " | LRP / saliency | two passes / saliency |")
    print("| ---: " * (len(cols) + 4) + "|", flush=True)
    rows = []
    for n in sizes:
        row = measure(n, args.edges_per_node, repeat, ig_repeat, args.ig_steps)
        rows.append(row)
        m = row["methods"]
        print(f"| {n:,} | {m['gradient']['median_seconds'] * 1e3:.2f} | "
              + " | ".join(f"{m[c]['paired_ratio_to_gradient']:.2f}" for c in cols)
              + f" | {row['lrp_over_saliency_paired']:.3f} | {row['lrp_two_passes_over_saliency_paired']:.3f} |", flush=True)
    if args.fast or args.no_write:
        print("--fast/--no-write: no results file written")
        return
    settings = {"sizes": sizes, "edges_per_node": args.edges_per_node, "features": 32, "hidden": 32, "layers": 3,
                "classes": 4, "repeat": repeat, "ig_repeat": ig_repeat, "ig_steps": args.ig_steps,
                "threads": args.threads, "dtype": "float32", "device": DEVICE.type,
                "explained": "one node's logit of its predicted class, node_mask_type='attributes'",
                "timing": "wall clock, methods take turns within each round, one warm-up each",
                "load_average_1min_start": machine.get("load_average_1min"),
                "load_average_1min_end": results_file.machine_info().get("load_average_1min")}
    path = results_file.write_results("scaling-cuda" if DEVICE.type == "cuda" else "scaling", rows, settings)
    print(f"wrote {path} (load average at start {machine.get('load_average_1min')})")


if __name__ == "__main__":
    main()
