"""Many target nodes of a large graph: nodes explained per second, LRP against Captum saliency and GNNExplainer.

    python benchmarks/bench_nodes.py                 # 10,000 targets, 100,000 nodes, 1,000,000 edges
    python benchmarks/bench_nodes.py --targets 1000  # fewer targets on the same graph (a shorter run)
    python benchmarks/bench_nodes.py --fast          # 500 targets, 10,000 nodes, 100,000 edges (writes no results file)

A 3-layer GCN (32 input features, 32 hidden, 4 classes, ReLU, a linear head; random weights: the
cost does not depend on training) on a random graph (``torch.randint`` senders and receivers),
float32, CPU, ``--threads`` intra-op threads (default 2, the cores of the book's machine).  Every
method runs through ``lrp_lib.Explainer`` (``explanation_type="model"``, node-level multiclass), which is
PyG's ``Explainer`` with the inputs checked, and which hands its prediction pass on to ``per_index=True``
(the subgraphs' outputs are compared with it, so the full graph is not run again):

* **LRP, per_index=True**: ``LRPExplainer(per_index=True)`` with ``index`` = all targets in one call:
  each target explained on its own, chunks of ``--chunk-size`` targets on the disjoint union of
  their 3-hop subgraphs (one forward and one backward per chunk; as many targets per chunk as the
  estimated memory of the pass allows, at most ``--chunk-size``), each message-passing step passing
  only the edges into the nodes that the targets' outputs read of it.  Timed on every target.
* **LRP, per_index=True, GIN**: the same with a 3-layer GIN (each ``GINConv`` with one linear layer,
  32 hidden) on the same graph and targets.  GIN's messages do not read the senders' degrees, so its
  subgraphs leave out the edges into their outermost nodes (GCN's keep them: its normalisation
  reads those degrees).
* **Captum saliency**: ``CaptumExplainer("Saliency")``, one call per target (each is a forward and a
  backward of the whole graph).  Timed on a subset of ``--subset`` targets; nodes per second are
  that subset's.
* **GNNExplainer** (PyG, ``--gnnexplainer-epochs`` steps), one call per target, timed on
  ``--gnnexplainer-subset`` targets; the time for all targets is extrapolated (and labelled so).
* Two other ways of batching, measured on ``--subset`` targets: a batched backward
  (``torch.autograd.grad(..., is_grads_batched=True)``, i.e. ``vmap`` over the backward of the whole
  graph) and one backward of the whole graph per target (``retain_graph=True``), against the
  k-hop subgraphs above.  The backward is PyTorch's own, through the forward rules (``ForwardMode``);
  if the batched backward fails, the error is recorded.

Wall-clock seconds give the nodes per second; the CPU seconds of the process (all its threads) are
recorded beside them, and the 1-minute load average before each LRP run: on a machine shared with
other work, the wall clock also counts the time other processes held the cores, the CPU time does
not.

The nodes per second of each method are printed and written to ``benchmarks/results/nodes.json``
(``results_file.write_results``), which the book's Performance page renders.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.explain import GNNExplainer
from torch_geometric.explain.algorithm import CaptumExplainer
from torch_geometric.nn import GCNConv, GINConv

from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.core.modify import share_of
from lrp_lib.explain.mode.forward import ForwardMode

import results_file  # benchmarks/results_file.py

MODEL_CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")


class GCN(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, hidden)
        self.conv3 = GCNConv(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.relu(self.conv2(x, edge_index))
        x = F.relu(self.conv3(x, edge_index))
        return self.head(x)


class GIN(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.convs = nn.ModuleList(GINConv(nn.Linear(a, hidden)) for a in (features, hidden, hidden))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.head(x)


def setup(nodes: int, edges: int, targets: int, features: int = 32):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = GCN(features, 32, 4).eval()
    x = torch.randn(nodes, features, generator=g)
    edge_index = torch.randint(0, nodes, (2, edges), generator=g)
    index = torch.randperm(nodes, generator=g)[:targets]
    return model, x, edge_index, index


def per_second(count: int, seconds: float) -> float:
    return count / seconds


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def load() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def lrp_nodes(model, x, edge_index, index, chunk_size: int):
    """(wall seconds, CPU seconds of this process, the explanation, the load average before)."""
    explainer = Explainer(model, algorithm=LRPExplainer(per_index=True, chunk_size=chunk_size),
                          explanation_type="model", node_mask_type="object", edge_mask_type="object",
                          model_config=MODEL_CONFIG)
    before = load()
    start, cpu = time.perf_counter(), time.process_time()
    explanation = explainer(x, edge_index, index=index)
    sync()
    return time.perf_counter() - start, time.process_time() - cpu, explanation, before


def per_target(explainer, x, edge_index, targets) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one call per target."""
    start, cpu = time.perf_counter(), time.process_time()
    for t in targets.tolist():
        explainer(x, edge_index, index=t)
    sync()
    return time.perf_counter() - start, time.process_time() - cpu


def batched_backward(model, x, edge_index, targets):
    """(seconds or None, error or None) of a vmap'ed backward of the whole graph for ``targets``,
    and the seconds of one whole-graph backward per target."""
    leaf = x.clone().requires_grad_()
    with torch.enable_grad():
        with ForwardMode("epsilon", model) as mode:
            mode.mark(leaf)
            out = model(leaf, edge_index)
        starts = torch.zeros(targets.numel(), *out.shape, device=out.device)
        cls = out.detach()[targets].argmax(-1)
        starts[torch.arange(targets.numel(), device=out.device), targets, cls] = out.detach()[targets, cls]
        starts = share_of(starts, out.detach())  # the gradient that starts the forward rules' backward
        sync()
        t0 = time.perf_counter()
        for i in range(targets.numel()):
            torch.autograd.grad(out, leaf, starts[i], retain_graph=True)
        sync()
        loop_seconds = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            torch.autograd.grad(out, leaf, starts, retain_graph=True, is_grads_batched=True)
            sync()
            return time.perf_counter() - t0, None, loop_seconds
        except Exception as error:  # noqa: BLE001 -- recorded in the results
            return None, f"{type(error).__name__}: {str(error).splitlines()[0][:300]}", loop_seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fast", action="store_true", help="500 targets on 10,000 nodes; writes no results file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda; cuda writes benchmarks/results/nodes-cuda.json")
    p.add_argument("--chunk-size", type=int, default=256, help="most targets per chunk (memory may allow fewer)")
    p.add_argument("--targets", type=int, default=None, help="targets (default 10,000; --fast: 500)")
    p.add_argument("--subset", type=int, default=20, help="targets for Captum saliency and the batching comparison")
    p.add_argument("--gnnexplainer-subset", type=int, default=2)
    p.add_argument("--gnnexplainer-epochs", type=int, default=100)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # PyG/Captum deprecation notes; LostRelevanceWarning at dead ReLUs
    nodes, edges, targets = (10_000, 100_000, 500) if args.fast else (100_000, 1_000_000, 10_000)
    targets = args.targets or targets
    model, x, edge_index, index = setup(nodes, edges, targets)
    model, x, edge_index, index = model.to(args.device), x.to(args.device), edge_index.to(args.device), index.to(args.device)
    subset = index[: args.subset]
    print(f"3-layer GCN, {nodes:,} nodes, {edges:,} edges, {targets:,} targets, float32, "
          f"{torch.get_num_threads()} threads, {args.device}\n", flush=True)

    lrp_explainer = Explainer(model, algorithm=LRPExplainer(per_index=True, chunk_size=args.chunk_size),
                              explanation_type="model", node_mask_type="object", edge_mask_type="object",
                              model_config=MODEL_CONFIG)
    lrp_explainer(x, edge_index, index=index[:8])  # warm-up
    lrp_seconds, lrp_cpu, explanation, lrp_load = lrp_nodes(model, x, edge_index, index, args.chunk_size)
    lrp_subset_seconds, lrp_subset_cpu, _, subset_load = lrp_nodes(model, x, edge_index, subset, args.chunk_size)
    nnz = explanation.node_relevance_per_index._nnz()
    print(f"LRP per_index: {targets:,} targets in {lrp_seconds:.1f} s, {per_second(targets, lrp_seconds):.0f} nodes/s "
          f"({nnz / targets:.0f} subgraph nodes per target)", flush=True)

    torch.manual_seed(0)
    gin = GIN(32, 32, 4).eval().to(args.device)
    lrp_nodes(gin, x, edge_index, index[:8], args.chunk_size)  # warm-up
    gin_seconds, gin_cpu, _, gin_load = lrp_nodes(gin, x, edge_index, index, args.chunk_size)
    print(f"LRP per_index, GIN: {targets:,} targets in {gin_seconds:.1f} s, "
          f"{per_second(targets, gin_seconds):.0f} nodes/s", flush=True)

    saliency = Explainer(model, algorithm=CaptumExplainer("Saliency"), explanation_type="model",
                         node_mask_type="attributes", edge_mask_type=None, model_config=MODEL_CONFIG)
    saliency(x, edge_index, index=int(subset[0]))  # warm-up
    saliency_seconds, saliency_cpu = per_target(saliency, x, edge_index, subset)
    print(f"Captum saliency: {subset.numel()} targets in {saliency_seconds:.1f} s, "
          f"{per_second(subset.numel(), saliency_seconds):.2f} nodes/s", flush=True)

    gnn_subset = index[: args.gnnexplainer_subset]
    gnnexplainer = Explainer(model, algorithm=GNNExplainer(epochs=args.gnnexplainer_epochs), explanation_type="model",
                             node_mask_type="attributes", edge_mask_type="object", model_config=MODEL_CONFIG)
    gnn_seconds, gnn_cpu = per_target(gnnexplainer, x, edge_index, gnn_subset)
    print(f"GNNExplainer ({args.gnnexplainer_epochs} epochs): {gnn_subset.numel()} targets in {gnn_seconds:.1f} s, "
          f"{per_second(gnn_subset.numel(), gnn_seconds):.3f} nodes/s; all {targets:,} targets extrapolated: "
          f"{gnn_seconds / gnn_subset.numel() * targets / 3600:.1f} h", flush=True)

    batched_seconds, batched_error, loop_seconds = batched_backward(model, x, edge_index, subset)
    print(f"batched backward (is_grads_batched) on {subset.numel()} targets: "
          + (f"{batched_seconds:.2f} s" if batched_error is None else f"fails: {batched_error}"), flush=True)
    print(f"one whole-graph backward per target: {subset.numel()} targets in {loop_seconds:.2f} s, "
          f"{per_second(subset.numel(), loop_seconds):.1f} nodes/s (forward not counted)", flush=True)

    rows = [
        {"method": "LRP, per_index=True (k-hop subgraphs, chunks)", "key": "lrp", "targets": targets,
         "seconds": lrp_seconds, "cpu_seconds": lrp_cpu, "nodes_per_second": per_second(targets, lrp_seconds),
         "extrapolated": False, "load_average_1min_before": lrp_load},
        {"method": "LRP, per_index=True, on the subset", "key": "lrp_subset", "targets": subset.numel(),
         "seconds": lrp_subset_seconds, "cpu_seconds": lrp_subset_cpu,
         "nodes_per_second": per_second(subset.numel(), lrp_subset_seconds),
         "extrapolated": False, "load_average_1min_before": subset_load},
        {"method": "LRP, per_index=True, GIN (no edges into the outermost hop)", "key": "lrp_gin",
         "targets": targets, "seconds": gin_seconds, "cpu_seconds": gin_cpu,
         "nodes_per_second": per_second(targets, gin_seconds), "extrapolated": False,
         "load_average_1min_before": gin_load},
        {"method": "Captum saliency (one call per target)", "key": "saliency", "targets": subset.numel(),
         "seconds": saliency_seconds, "cpu_seconds": saliency_cpu,
         "nodes_per_second": per_second(subset.numel(), saliency_seconds),
         "extrapolated": False},
        {"method": f"GNNExplainer, {args.gnnexplainer_epochs} epochs (one call per target)", "key": "gnnexplainer",
         "targets": gnn_subset.numel(), "seconds": gnn_seconds, "cpu_seconds": gnn_cpu,
         "nodes_per_second": per_second(gnn_subset.numel(), gnn_seconds), "extrapolated": True,
         "seconds_all_targets_extrapolated": gnn_seconds / gnn_subset.numel() * targets},
        {"method": "LRP, one whole-graph backward per target (retain_graph, forward not counted)",
         "key": "lrp_backward_loop", "targets": subset.numel(), "seconds": loop_seconds,
         "nodes_per_second": per_second(subset.numel(), loop_seconds), "extrapolated": False},
        {"method": "LRP, batched whole-graph backward (is_grads_batched)", "key": "lrp_batched_backward",
         "targets": subset.numel(), "seconds": batched_seconds,
         "nodes_per_second": None if batched_seconds is None else per_second(subset.numel(), batched_seconds),
         "extrapolated": False, "error": batched_error},
    ]
    print("\n| method | targets timed | s | CPU s | nodes/s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        rate = "fails" if r["nodes_per_second"] is None else f"{r['nodes_per_second']:.3g}"
        cpu = f"{r['cpu_seconds']:.2f}" if r.get("cpu_seconds") is not None else "-"
        print(f"| {r['method']} | {r['targets']:,} | {r['seconds'] or 0:.2f} | {cpu} | {rate} |")
    if args.fast:
        print("--fast: benchmarks/results/nodes.json left as it is")
        return
    name = "nodes" if args.device == "cpu" else f"nodes-{args.device.split(':')[0]}"
    path = results_file.write_results(name, rows, {
        "nodes": nodes, "edges": edges, "targets": targets, "features": 32, "hidden": 32, "layers": 3,
        "classes": 4, "chunk_size": args.chunk_size, "subset": args.subset,
        "gnnexplainer_subset": args.gnnexplainer_subset, "gnnexplainer_epochs": args.gnnexplainer_epochs,
        "threads": args.threads, "dtype": "float32", "device": args.device})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
