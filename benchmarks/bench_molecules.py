"""Cost of explaining molecules, one at a time and a whole batch at once: LRP against the gradient.

    python benchmarks/bench_molecules.py                 # 300 molecules (about 2 minutes)
    python benchmarks/bench_molecules.py --molecules 40 --no-write   # a quick look
    python benchmarks/bench_molecules.py --save-graphs FILE   # the molecules as a torch file, for a machine without RDKit
    python benchmarks/bench_molecules.py --device cuda --graphs FILE   # on a GPU: results/molecules-cuda.json

The molecules are the first ``--molecules`` of graph-attribution's benzene task (Sanchez-Lengeling et
al. 2020, from ``$LRP_DATA_ROOT/graph-attribution``; 10 to 40 atoms, 14 atom features), the model is
the molecular tasks' 3-layer GCN of the quality benchmark (``quality_tasks.GraphGCN``: GCN layers of
64 units with ReLU, a mean pool, a linear head; seeded random weights: the cost does not depend on
training), float32, CPU (or ``--device cuda``, each call timed from a synchronised start to a
synchronised end), one intra-op thread.  What is explained: each molecule's logit of the class
the model predicts, by the relevance (or attribution) of every atom feature
(``node_mask_type="attributes"``, no edge mask).

One molecule at a time, the methods take turns molecule by molecule (so the load of a shared
machine falls on all alike); per method the median over the molecules of the milliseconds per
molecule, and the median of the ratio to the gradient of the same molecule.  Each method has one
explainer for the whole pass, as a user explaining a data set would, with its own copy of the model
(replay keeps its plans per model, so no method replays a plan another one recorded):

* **gradient**: ``x * torch.autograd.grad(logit, x)`` (Gradient x Input), one forward and one
  backward, no explainer around it: the floor the others are divided by;
* **LRP algorithm**: ``LRPExplainer`` called directly, the target given (the explanation's own cost),
  with the defaults ``replay=True, compile=True``, with ``compile="exact"`` and with ``replay=False``.
  Replay (:mod:`lrp_lib.explain.replay`) records a forward per input signature (numbers of atoms and
  bonds, ...) and replays it for the later explanations of that signature; the first explanation of a
  signature runs in the mode, the second records, the third records its program
  (:mod:`lrp_lib.explain.compiled`), which the later ones run.  Once two sizes have programs that
  differ only in their sizes, one program serves molecules of every size ("compiled for any size");
  ``compile="exact"`` keeps the programs per size.  One pass over the molecules (``--rounds 1``, the
  default) explains each once, as a pass over a data set would;
* **LRP, phenomenon** / **saliency, phenomenon**: through ``lrp_lib.explain.explainer.Explainer``
  (PyG's, with the inputs checked) with ``explanation_type="phenomenon"``, which runs no prediction
  pass of its own: each method's own cost with PyG's wrapping;
* **LRP, model** / **saliency, model**: ``explanation_type="model"``, where PyG adds a prediction pass
  before saliency to pick its target; for LRP, ``lrp_lib``'s ``Explainer`` takes the prediction from
  the explanation's own forward instead (:mod:`lrp_lib.explain.one_pass`).

Then the LRP algorithm again (a fresh explainer, with its own copy of the model) in a pass of its own in
which only it and the gradient take turns, as when a data set is explained with one method: among the
eight methods, the processor's caches lose what each one used before its next turn, which costs the
longer Python path of LRP more than the gradient's.

A whole batch: all molecules in one PyG ``Batch``, each molecule's logit explained from its own
output (graph-level ``LRPExplainer``, ``explanation_type="phenomenon"``, target = each molecule's
predicted class), against one batched gradient (``x * grad`` of the sum of the molecules' logits,
which gives each molecule's own Gradient x Input since the molecules share no edge).  ``accounts``
``"each"`` (the default: one bias and residual value per molecule, one more backward) and
``"total"`` both take their turn, and ``replay=False``; the batch is explained again every round, so
the default replays it.  As a check, the batch's LRP relevance must equal the one-at-a-
time relevance of every molecule (up to float32 rounding).

Writes ``benchmarks/results/molecules.json`` (``molecules-cuda.json`` with ``--device cuda``;
``results_file.write_results``), which the book's Performance page renders.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import torch
from torch_geometric.data import Batch, Data
from torch_geometric.explain.algorithm import CaptumExplainer

from lrp_lib.explain import compiled
from lrp_lib.explain.explainer import Explainer, LRPExplainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file  # noqa: E402
from quality_tasks import GraphGCN, molecules  # noqa: E402

#: Where the model and the molecules live (``--device``).
DEVICE = torch.device("cpu")
#: How each explanation of the LRP algorithm (replay=True) ran: "replayed", "recorded", "a new signature".
REPLAYS: list = []
#: The LRP algorithm's copy of the model (whose program for any size is counted).
PROGRAM_OF: list = []
MODEL_CONFIG = dict(mode="multiclass_classification", task_level="graph", return_type="raw")
ONE = ["gradient", "lrp_algorithm", "lrp_algorithm_exact", "lrp_algorithm_mode", "lrp_phenomenon", "saliency_phenomenon", "lrp_model",
       "saliency_model"]
LABELS = {
    "gradient": "Gradient x Input (torch.autograd.grad)",
    "lrp_algorithm": "LRP (LRPExplainer called directly)",
    "lrp_algorithm_exact": "LRP, programs per size only (LRPExplainer(compile='exact') called directly)",
    "lrp_algorithm_mode": "LRP without replay (LRPExplainer(replay=False) called directly)",
    "lrp_phenomenon": "LRP (Explainer, phenomenon)",
    "saliency_phenomenon": "saliency (CaptumExplainer, phenomenon)",
    "lrp_model": "LRP (Explainer, model)",
    "saliency_model": "saliency (CaptumExplainer, model)",
    "batch_gradient": "Gradient x Input of the whole batch (one backward)",
    "batch_lrp": "LRP of the whole batch (Explainer, phenomenon, accounts='each')",
    "batch_lrp_total": "LRP of the whole batch (Explainer, phenomenon, accounts='total')",
    "batch_lrp_mode": "LRP of the whole batch without replay (replay=False, accounts='each')",
}


def explainer(model, algorithm, kind):
    return Explainer(model, algorithm=algorithm, explanation_type=kind, node_mask_type="attributes",
                     edge_mask_type=None, model_config=MODEL_CONFIG)


def one_at_a_time_methods(model) -> dict:
    """{method: function (molecule, target) -> the (atoms, features) attribution}: one explainer per
    method for the whole pass, as a user explains a data set, each with its own copy of the model (the
    plans that replay records are kept per model: no method replays what another recorded)."""
    def own(algorithm, kind):
        return explainer(copy.deepcopy(model), algorithm, kind)
    ex = {"lrp_phenomenon": own(LRPExplainer(), "phenomenon"),
          "saliency_phenomenon": own(CaptumExplainer("Saliency"), "phenomenon"),
          "lrp_model": own(LRPExplainer(), "model"),
          "saliency_model": own(CaptumExplainer("Saliency"), "model")}
    algorithm, plain = own(LRPExplainer(), "phenomenon"), own(LRPExplainer(replay=False), "phenomenon")
    PROGRAM_OF.append(algorithm.model)
    exact = own(LRPExplainer(compile="exact"), "phenomenon")

    def gradient(g, target):
        leaf = g.x.detach().requires_grad_()
        return leaf.detach() * torch.autograd.grad(model(leaf, g.edge_index)[0, target], leaf)[0]

    def via(name):
        if name.endswith("model"):
            return lambda g, t: ex[name](g.x, g.edge_index).node_mask
        return lambda g, t: ex[name](g.x, g.edge_index, target=torch.tensor([t], device=DEVICE)).node_mask

    def direct(e, reasons=None):  # the algorithm, connected to its configuration by its Explainer, called without it
        def call(g, t):
            out = e.algorithm(e.model, g.x, g.edge_index, target=torch.tensor([t], device=DEVICE))
            if reasons is not None:
                reasons.append(out.replay_reason.split(":")[0].split(" (")[0])
            return out.node_mask
        return call

    methods = {"gradient": gradient, "lrp_algorithm": direct(algorithm, REPLAYS), "lrp_algorithm_mode": direct(plain),
               "lrp_algorithm_exact": direct(exact),
               **{name: via(name) for name in ex}}
    return {name: methods[name] for name in ONE}


def one_at_a_time_calls(methods: dict, g, target):
    """{method: function of no argument giving the attribution of molecule ``g``}."""
    return {name: (lambda f=f: f(g, target)) for name, f in methods.items()}


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def timed(fn):
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return time.perf_counter() - start, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--molecules", type=int, default=300)
    p.add_argument("--rounds", type=int, default=1, help="passes over the molecules (1: each explained once)")
    p.add_argument("--batch-rounds", type=int, default=15)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu (default; results/molecules.json) or cuda (results/molecules-cuda.json)")
    p.add_argument("--graphs", help="read the molecules from this torch file (written by --save-graphs) instead of "
                                    "building them from the SMILES with RDKit")
    p.add_argument("--save-graphs", metavar="FILE", help="write the first --molecules molecules to FILE and stop")
    args = p.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # Captum/PyG deprecation notes
    machine = results_file.machine_info()
    if args.graphs:
        graphs = [Data(x=x, edge_index=e) for x, e in torch.load(args.graphs)]
    else:
        graphs, _, _ = molecules("benzene")
    graphs = [g for g in graphs[: args.molecules]]
    if args.save_graphs:
        torch.save([(g.x, g.edge_index) for g in graphs], args.save_graphs)
        print(f"wrote {len(graphs)} molecules to {args.save_graphs}")
        return
    graphs = [Data(x=g.x.to(DEVICE), edge_index=g.edge_index.to(DEVICE)) for g in graphs]
    torch.manual_seed(0)
    model = GraphGCN(graphs[0].num_node_features, 2).eval().to(DEVICE)
    with torch.no_grad():
        targets = [int(model(g.x, g.edge_index).argmax()) for g in graphs]
    methods = one_at_a_time_methods(model)
    calls = [one_at_a_time_calls(methods, g, t) for g, t in zip(graphs, targets)]
    for c in calls[:5]:  # warm-up
        for fn in c.values():
            fn()
    REPLAYS.clear()
    times = {m: [] for m in ONE}
    ratios = {m: [] for m in ONE}
    lrp_one = []
    for r in range(args.rounds):
        for c in calls:
            got = {}
            for name, fn in c.items():
                seconds, got[name] = timed(fn)
                times[name].append(seconds)
            for name in ONE:
                ratios[name].append(times[name][-1] / times["gradient"][-1])
            if r == 0:
                lrp_one.append(got["lrp_algorithm"])
    # the LRP algorithm and the gradient alone, taking turns
    paired = explainer(copy.deepcopy(model), LRPExplainer(), "phenomenon")
    pair_calls = [{"gradient": calls[i]["gradient"],
                   "lrp_algorithm": lambda g=g, t=t: paired.algorithm(paired.model, g.x, g.edge_index, target=torch.tensor(
                       [t], device=DEVICE))} for i, (g, t) in enumerate(zip(graphs, targets))]
    for c in pair_calls[:5]:  # warm-up, as above
        for fn in c.values():
            fn()
    pair_times = {"gradient": [], "lrp_algorithm": []}
    pair_runs: dict = {}
    for r in range(args.rounds):
        for c in pair_calls:
            seconds_g, _ = timed(c["gradient"])
            seconds_l, got = timed(c["lrp_algorithm"])
            pair_times["gradient"].append(seconds_g)
            pair_times["lrp_algorithm"].append(seconds_l)
            pair_runs.setdefault(got.replay_reason.split(":")[0].split(" (")[0], []).append(seconds_l / seconds_g)
    # the whole batch
    batch = Batch.from_data_list([g.__class__(x=g.x, edge_index=g.edge_index) for g in graphs])
    t_all = torch.tensor(targets, device=DEVICE)
    ex_each = explainer(model, LRPExplainer(), "phenomenon")
    ex_total = explainer(model, LRPExplainer(accounts="total"), "phenomenon")
    ex_mode = explainer(model, LRPExplainer(replay=False), "phenomenon")

    def batch_gradient():
        leaf = batch.x.detach().requires_grad_()
        out = model(leaf, batch.edge_index, batch.batch)
        return leaf.detach() * torch.autograd.grad(out.gather(1, t_all[:, None]).sum(), leaf)[0]

    batch_calls = {"batch_gradient": batch_gradient,
                   "batch_lrp": lambda: ex_each(batch.x, batch.edge_index, target=t_all, batch=batch.batch).node_mask,
                   "batch_lrp_total": lambda: ex_total(batch.x, batch.edge_index, target=t_all,
                                                       batch=batch.batch).node_mask,
                   "batch_lrp_mode": lambda: ex_mode(batch.x, batch.edge_index, target=t_all, batch=batch.batch).node_mask}
    for _ in range(2):  # the second explanation of the batch records its plan
        first = {name: fn() for name, fn in batch_calls.items()}
    lrp_batch = ex_each(batch.x, batch.edge_index, target=t_all, batch=batch.batch)
    equal = torch.equal if DEVICE.type == "cpu" else partial(torch.allclose, rtol=1e-4, atol=1e-6)  # GPU sums: no fixed order
    if not lrp_batch.replayed or not equal(first["batch_lrp_mode"], lrp_batch.node_mask):
        raise AssertionError("the batch's second explanation did not replay, or differs from the mode's")
    per_molecule = torch.cat(lrp_one)
    same = torch.allclose(lrp_batch.node_relevance, torch.cat(
        [explainer(model, LRPExplainer(mask="relevance"), "phenomenon")(g.x, g.edge_index, target=torch.tensor([t], device=DEVICE))
         .node_relevance for g, t in zip(graphs, targets)]), rtol=1e-4, atol=1e-5)
    if not same:
        raise AssertionError("the batch's LRP relevance differs from the molecules' one at a time")
    assert per_molecule.shape == first["batch_lrp"].shape
    btimes = {m: [] for m in batch_calls}
    for _ in range(args.batch_rounds):
        for name, fn in batch_calls.items():
            btimes[name].append(timed(fn)[0])
    atoms = [g.num_nodes for g in graphs]
    rows = {"one_at_a_time": {}, "batch": {}}
    for name in ONE:
        rows["one_at_a_time"][name] = {
            "label": LABELS[name], "median_ms": statistics.median(times[name]) * 1e3,
            "median_ratio_to_gradient": statistics.median(ratios[name]),
            "ratio_of_medians": statistics.median(times[name]) / statistics.median(times["gradient"])}
    rows["paired"] = {
        "label": "LRP (LRPExplainer called directly), taking turns with the gradient alone",
        "median_ms": statistics.median(pair_times["lrp_algorithm"]) * 1e3,
        "gradient_median_ms": statistics.median(pair_times["gradient"]) * 1e3,
        "median_ratio_to_gradient": statistics.median(
            [lrp / grad for lrp, grad in zip(pair_times["lrp_algorithm"], pair_times["gradient"])]),
        "runs": {how: {"molecules": len(r), "median_ratio_to_gradient": statistics.median(r)}
                 for how, r in pair_runs.items()}}
    runs = {}  # the LRP algorithm's explanations by how they ran: how many, the median ratio to the gradient
    for how, ratio in zip(REPLAYS, ratios["lrp_algorithm"]):
        runs.setdefault(how, []).append(ratio)
    rows["lrp_algorithm_runs"] = {how: {"molecules": len(r), "median_ratio_to_gradient": statistics.median(r)}
                                  for how, r in runs.items()}
    generic = [f.generic for f in compiled.families_of(PROGRAM_OF[0]).values() if f.generic is not None]
    if generic:  # the operations of the program for any size, as recorded and as it runs (simplified)
        p = generic[0]
        rows["program_operations"] = {"recorded": len(p.steps), "run": len((p.fast or compiled.simplify(p)).steps),
                                      "recorded_forward": p.split,
                                      "run_forward": (p.fast or compiled.simplify(p)).split}
        print(f"program for any size: {rows['program_operations']}")
    base = statistics.median(btimes["batch_gradient"])
    for name in batch_calls:
        med = statistics.median(btimes[name])
        rows["batch"][name] = {"label": LABELS[name], "median_ms": med * 1e3, "ms_per_molecule": med * 1e3 / len(graphs),
                               "ratio_to_gradient": med / base, "seconds": btimes[name]}
    one_lrp = rows["one_at_a_time"]["lrp_phenomenon"]["median_ms"] * len(graphs)
    rows["batch"]["speedup_over_one_at_a_time"] = one_lrp / rows["batch"]["batch_lrp"]["median_ms"]
    rows["batch"]["equal_to_one_at_a_time"] = same
    print(f"{len(graphs)} molecules ({min(atoms)} to {max(atoms)} atoms), 3-layer GCN (64), one thread\n")
    print("| one molecule at a time | ms | ratio to the gradient (median of paired) |\n|---|---:|---:|")
    for name, r in rows["one_at_a_time"].items():
        print(f"| {r['label']} | {r['median_ms']:.2f} | {r['median_ratio_to_gradient']:.2f} |")
    print("\n| the whole batch | ms | ms per molecule | ratio to the batched gradient |\n|---|---:|---:|---:|")
    for name in batch_calls:
        r = rows["batch"][name]
        print(f"| {r['label']} | {r['median_ms']:.1f} | {r['ms_per_molecule']:.3f} | {r['ratio_to_gradient']:.2f} |")
    print("\n" + ", ".join(f"{how}: {r['molecules']} ({r['median_ratio_to_gradient']:.2f}x)"
                            for how, r in rows["lrp_algorithm_runs"].items()))
    pr = rows["paired"]
    print(f"\n{pr['label']}: {pr['median_ratio_to_gradient']:.2f}x (" + ", ".join(
        f"{how}: {r['molecules']} at {r['median_ratio_to_gradient']:.2f}x" for how, r in pr["runs"].items()) + ")")
    print(f"\nbatched LRP is {rows['batch']['speedup_over_one_at_a_time']:.0f}x faster than one at a time")
    if args.no_write:
        return
    settings = {"task": "benzene (graph-attribution)", "molecules": len(graphs), "atoms_min": min(atoms),
                "atoms_max": max(atoms), "atoms_median": statistics.median(atoms), "model": "GraphGCN, 3 GCN layers of 64, mean pool",
                "rounds": args.rounds, "batch_rounds": args.batch_rounds, "threads": 1, "dtype": "float32",
                "device": DEVICE.type, "load_average_1min_start": machine.get("load_average_1min"),
                "load_average_1min_end": results_file.machine_info().get("load_average_1min")}
    path = results_file.write_results("molecules-cuda" if DEVICE.type == "cuda" else "molecules", rows, settings)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
