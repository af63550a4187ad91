"""Do the explanations follow the model?  Deletion and insertion curves and PyG's fidelity on the book's tasks.

    python benchmarks/bench_faithfulness.py [--tasks ba_shapes,benzene] [--seeds 5] [--instances 20]
                                            [--methods lrp_zplus_logit_abs,saliency] [--out FOLDER]

Ground-truth AUROC (``bench_quality.py``) asks whether an explanation finds the motif planted in the data; this
benchmark asks whether it finds what the model used.  It takes ``bench_quality.py``'s tasks, models (the stored
weights of each seed), instances (at most ``--instances`` of the protocol's, evenly spaced) and explainers with
their papers' settings (``bench_quality.Methods``), and for every explanation:

* ranks the instance's edges by the method's edge scores and its nodes by its node scores (a method with node
  scores only: an edge scores the mean of its end points; with edge scores only: a node scores its largest
  in-edge; ties in a seeded random order), node tasks on the explained node's computation subgraph, where the
  model's output is the full graph's;
* for ``k`` = 0, 10, ..., 100 %, runs the model with the top ``k`` % of the edges removed from the graph, or of the
  nodes' features set to zero (*deletion*), and with only the top ``k`` % kept (*insertion*), and reads the
  explained class's logit and probability (the class the model predicts, as ``bench_quality.py`` explains);
* reports the area under each curve (trapezoid over ``k`` in [0, 1]): the probability as it is, the logit
  normalised per instance as :math:`(z_k - z_\\emptyset) / (z - z_\\emptyset)` (:math:`z`: everything kept,
  :math:`z_\\emptyset`: nothing; instances where the edges, or the features, raise the logit by less than
  ``MIN_SPAN`` = 0.05 are left out of it, the same for every method).  Deletion: lower is more faithful (the
  logit falls as soon as the top edges go); insertion: higher is more faithful;
* PyG's fidelity at sparsities of 10, 20 and 30 % (``explanation_type="model"``): fid+ the share of instances
  whose prediction changes when the top edges (nodes) are removed, fid- the share whose prediction changes when
  only they are kept, and ``torch_geometric.explain.metric.characterization_score`` of the two (weights 0.5).

Graph tasks also get GraphXAI's graph explanation unfaithfulness (GEF, Agarwal et al. 2023), from the node scores:
:math:`1 - e^{-\\mathrm{KL}}` between the prediction's softmax and the softmax with ``int(0.25 n)`` of the graph's
``n`` nodes chosen by the scores (ties in the seeded order) and the other nodes' or their own features set to zero,
two ways:

* ``gef_code``: as GraphXAI's code computes the published numbers (``graph_exp_faith_graph`` in
  ``graphxai/metrics/metrics_graph.py``, every version from the one that produced them on): the features of the
  *top* quarter are zeroed and the divergence is :math:`\\mathrm{KL}(\\hat y' \\| \\hat y)` (``F.kl_div(org.log(),
  pert)``).  Lower then means that removing the method's top nodes changes the prediction less;
* ``gef_paper``: as the paper defines it, the prediction on the explanation (only the top quarter keeps its
  features) against the prediction, :math:`\\mathrm{KL}(\\hat y \\| \\hat y')`: lower is more faithful.

:data:`PUBLISHED_GEF` holds GraphXAI's published numbers (Table 5, their GIN models; the stored per-graph results of
their repository average to them), to stand beside ``gef_code`` (the models differ: these are the book's).

Reference rows: ``random`` (uniform scores, the floor) and ``ground_truth`` (the task's ground truth ranked first:
edges and their end points on the node tasks and Mutagenicity, nodes and edges on BA-2Motifs, atoms on the
molecules, an edge scoring the mean of its end points).  Per (task, method): the mean over seeds and its 95 %
Student-t interval, clipped to the metric's range.  Writes ``benchmarks/results/faithfulness.json`` after every
task.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch_geometric.explain.metric import characterization_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_quality as bq  # noqa: E402
import quality_tasks as qt  # noqa: E402
from results_file import write_results  # noqa: E402

#: The fractions of the edges removed or kept.
STEPS = np.linspace(0.0, 1.0, 11)
#: The least amount by which the edges (or the node features) must raise the explained logit for its curve to be
#: normalised by it; instances below are left out of the logit areas (the same instances for every method).
MIN_SPAN = 0.05
#: The sparsities of PyG's fidelity.
SPARSITIES = (0.1, 0.2, 0.3)
#: Methods run by default: every LRP configuration, the gradient family, CAM, the mask-learning explainers, the
#: walk-based scores and the two reference rows.
REFERENCES = {"ground_truth": "the task's ground-truth edges ranked first (an upper reference where the model uses "
                              "the motif)", "random": "uniform random scores (the floor)"}
#: The share of a graph's nodes that GEF chooses (GraphXAI's ``top_k``).
GEF_TOP = 0.25
#: GraphXAI's published GEF on the molecule sets (Agarwal et al., Scientific Data 2023, Table 5; lower is "better"
#: under their code, which zeroes the top nodes): per data set, per method.  The Benzene and Fluoride-Carbonyl data
#: are graph-attribution's, as the book's; MUTAG (188 molecules) is not among the book's tasks.
PUBLISHED_GEF = {
    "benzene": {"integrated_gradients": 0.182, "pgexplainer": 0.375, "gnnexplainer": 0.444, "random": 0.513},
    "fluoride_carbonyl": {"integrated_gradients": 0.174, "pgexplainer": 0.372, "gnnexplainer": 0.423, "random": 0.440},
}
METRICS = ("deletion_logit", "insertion_logit", "deletion_probability", "insertion_probability")
RANGES = {"deletion_probability": (0.0, 1.0), "insertion_probability": (0.0, 1.0), "fid_plus": (0.0, 1.0),
          "gef_code": (0.0, 1.0), "gef_paper": (0.0, 1.0),
          "fid_minus": (0.0, 1.0), "characterization": (0.0, 1.0)}


def ranking(scores: torch.Tensor, seed: int) -> torch.Tensor:
    """Edge ids from the highest score to the lowest, ties in a random order fixed by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    shuffled = torch.randperm(scores.numel(), generator=g)
    order = torch.argsort(scores[shuffled].double(), descending=True, stable=True)
    return shuffled[order]


def curves(model, x, edge_index, index, target: int, order: torch.Tensor, on: str) -> dict:
    """Logit and probability of class ``target`` at ``index`` (None: the graph's one output row) with the top
    ``k`` of ``order`` removed (deletion) and with only them kept (insertion), for every ``k`` of :data:`STEPS`,
    and the prediction under each.  ``on="edges"``: ``order`` ranks the edges, which are removed from the graph;
    ``on="nodes"``: it ranks the nodes, whose features are set to zero (the graph unchanged)."""
    n = edge_index.shape[1] if on == "edges" else x.shape[0]
    out = {"deletion": [], "insertion": []}
    with torch.no_grad():
        for f in STEPS:
            top = torch.zeros(n, dtype=torch.bool)
            top[order[:int(round(f * n))]] = True
            for kind, keep in (("deletion", ~top), ("insertion", top)):
                if on == "edges":
                    row = model(x, edge_index[:, keep])
                else:
                    row = model(x * keep.to(x.dtype).unsqueeze(-1), edge_index)
                row = row[index] if index is not None else row[0]
                out[kind].append((float(row[target]), float(row.softmax(-1)[target]), int(row.argmax())))
    return out


def gef(model, x, edge_index, order: torch.Tensor) -> dict:
    """GraphXAI's unfaithfulness of one graph's node ranking ``order`` (module docstring): ``gef_code`` (the top
    ``int(GEF_TOP * n)`` nodes' features zeroed, :math:`\\mathrm{KL}(\\hat y' \\| \\hat y)`) and ``gef_paper`` (only
    theirs kept, :math:`\\mathrm{KL}(\\hat y \\| \\hat y')`)."""
    top = torch.zeros(x.shape[0], dtype=torch.bool)
    top[order[:int(x.shape[0] * GEF_TOP)]] = True
    with torch.no_grad():
        p = model(x, edge_index)[0].double().softmax(-1)
        removed = model(x * (~top).to(x.dtype).unsqueeze(-1), edge_index)[0].double().softmax(-1)
        kept = model(x * top.to(x.dtype).unsqueeze(-1), edge_index)[0].double().softmax(-1)
    code = float((removed * (removed.log() - p.log())).sum())
    paper = float((p * (p.log() - kept.log())).sum())
    return {"gef_code": 1.0 - float(np.exp(-code)), "gef_paper": 1.0 - float(np.exp(-paper))}


def summarise_instance(c: dict, target: int) -> dict:
    """The areas and fidelities of one instance's curves (``target``: the class the full graph predicts)."""
    full, empty = c["deletion"][0][0], c["deletion"][-1][0]
    span = full - empty
    res = {}
    for kind in ("deletion", "insertion"):
        logits = np.array([v[0] for v in c[kind]])
        probs = np.array([v[1] for v in c[kind]])
        res[f"{kind}_probability"] = float(np.trapezoid(probs, STEPS))
        res[f"{kind}_logit"] = float(np.trapezoid((logits - empty) / span, STEPS)) if span >= MIN_SPAN else None
    for s in SPARSITIES:
        i = int(np.argmin(np.abs(STEPS - s)))
        res[f"fid_plus@{s:g}"] = float(c["deletion"][i][2] != target)
        res[f"fid_minus@{s:g}"] = float(c["insertion"][i][2] != target)
    return res


def scores_of(meth: bq.Methods, name: str, inst, ei, lrp_cache: dict) -> tuple:
    """The method's (node scores, edge scores) on the instance's own graph (a node task: the subgraph's); an
    edge-only method's node scores are each node's largest in-edge score, a node-only method's edge scores the
    mean of the end points'."""
    if name.startswith("lrp_"):
        composite, explained, mask = name[4:].rsplit("_", 2)
        key = (composite, explained)
        if key not in lrp_cache:
            lrp_cache[key] = meth.explain_lrp(composite, explained, inst)[0]
        node, edge = lrp_cache[key][mask]
    else:
        (node, edge), _ = meth.explain(name, inst)
    if edge is None and node is not None:
        edge = (node[ei[0]] + node[ei[1]]) / 2
    return (None if node is None else node.detach().float()), (None if edge is None else edge.detach().float())


def truth_scores(task: qt.Task, inst, sub_eids, x, ei) -> tuple:
    """The ground truth as (node scores, edge scores): 1 on a ground-truth node or edge.  A node task's and
    Mutagenicity's truth is on edges (a node is true where a true edge ends), BA-2Motifs' on both, the molecules'
    on atoms (an edge scores the mean of its end points)."""
    if task.level == "node":
        edge = qt.node_truth(task, int(inst))[1].float()[sub_eids]
        node = torch.zeros(x.shape[0]).index_reduce_(0, ei[1], edge, "amax", include_self=True)
        return node, edge
    if getattr(inst, "atom_gt", None) is not None:
        node = inst.atom_gt.float().max(1).values
        return node, (node[ei[0]] + node[ei[1]]) / 2
    edge = inst.edge_gt.float()
    node = inst.node_gt.float() if getattr(inst, "node_gt", None) is not None else \
        torch.zeros(x.shape[0]).index_reduce_(0, ei[1], edge, "amax", include_self=True)
    return node, edge


def t_interval(values, bounds=None):
    mean, lo, hi = bq.t_interval(values)
    if bounds is not None and not np.isnan(lo):
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return mean, lo, hi


def run_task(name: str, seeds: int | list[int], methods: list[str], instances: int, log=print) -> dict:
    settings = bq.EXPLAINER_SETTINGS.get(name, bq.PYG_DEFAULTS)
    per_seed: dict = {m: [] for m in methods}
    seconds = 0.0
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    for seed in seeds:
        start = time.perf_counter()
        task = qt.build_task(name, seed, instances)
        names = [m for m in methods if m not in REFERENCES and bq.applicable(task, m)]
        meth = bq.Methods(task, seed, names, settings)
        meth._lift = lambda node, edge, eids: (node, edge)  # scores on the instance's own graph, not the task's
        meth.n_instances = len(task.instances)
        if "pgexplainer" in names:
            torch.manual_seed(seed)
            meth.train_pg(task.train_pool or task.instances)
        rows: dict = {m: [] for m in methods}
        for n, inst in enumerate(task.instances):
            x, ei, kw, _, eids = meth.inputs(inst)
            index = kw.get("index")
            target = int(meth.target_of(inst))
            lrp_cache: dict = {}
            for m in methods:
                torch.manual_seed(seed)
                if m == "ground_truth":
                    scores = truth_scores(task, inst, eids, x, ei)
                elif m == "random":
                    g = torch.Generator().manual_seed(seed * 7919 + n)
                    scores = torch.rand(x.shape[0], generator=g), torch.rand(ei.shape[1], generator=g)
                elif m in names:
                    try:
                        scores = scores_of(meth, m, inst, ei, lrp_cache)
                    except Exception as err:  # noqa: BLE001 -- counted, the run goes on
                        log(f"    {m}: {type(err).__name__}: {str(err)[:120]}")
                        continue
                else:
                    continue
                row = {}
                for on, s in zip(("nodes", "edges"), scores):
                    if s is not None and s.numel():
                        c = curves(task.model, x, ei, index, target, ranking(s, seed * 1_000_003 + n), on)
                        row.update({f"{on}_{k}": v for k, v in summarise_instance(c, target).items()})
                        if on == "nodes" and index is None:  # a graph task: GraphXAI's GEF
                            row.update({f"nodes_{k}": v for k, v in
                                        gef(task.model, x, ei, ranking(s, seed * 1_000_003 + n)).items()})
                rows[m].append(row)
        for m, rs in rows.items():
            keys = sorted({k for r in rs for k in r})
            if rs:
                per_seed[m].append({k: float(np.mean([r[k] for r in rs if r.get(k) is not None]))
                                    if any(r.get(k) is not None for r in rs) else None for k in keys})
        seconds += time.perf_counter() - start
        log(f"  {name} seed {seed}: {len(task.instances)} instances, {time.perf_counter() - start:.0f} s")
    result = {"level": "node" if name in qt.NODE_TASKS else "graph", "seeds": len(seeds), "seed_numbers": seeds,
              "seconds": round(seconds, 1), "methods": {}}
    for m, seeds_rows in per_seed.items():
        if not seeds_rows:
            continue
        row = {}
        for key in seeds_rows[0]:
            values = [s[key] for s in seeds_rows if s.get(key) is not None]
            if not values:
                continue
            base = key.split("@")[0].split("_", 1)[1]
            mean, lo, hi = t_interval(values, RANGES.get(base))
            row[key] = {"mean": round(mean, 4), "ci95": None if np.isnan(lo) else [round(lo, 4), round(hi, 4)],
                        "per_seed": [round(v, 4) for v in values]}
        for on in ("nodes", "edges"):
            for s in SPARSITIES:
                plus, minus = row.get(f"{on}_fid_plus@{s:g}"), row.get(f"{on}_fid_minus@{s:g}")
                if plus and minus:
                    fp, fm = plus["mean"], minus["mean"]
                    score = float(characterization_score(torch.tensor(fp), torch.tensor(fm))) \
                        if fp > 0 and fm < 1 else 0.0
                    row[f"{on}_characterization@{s:g}"] = round(score, 4)
        result["methods"][m] = row
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=",".join(qt.ALL_TASKS))
    parser.add_argument("--methods", default=None, help="comma-separated (default: every method of bench_quality.py "
                                                        "and the reference rows)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the seeds run are first-seed, ..., first-seed + seeds - 1 (the models of "
                             "bench_quality.py's seeds of the same numbers)")
    parser.add_argument("--instances", type=int, default=20, help="at most this many instances per task and seed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="folder for faithfulness.json (default benchmarks/results)")
    args = parser.parse_args(argv)
    known = {**bq.all_methods(), **REFERENCES}
    methods = [m for m in (args.methods.split(",") if args.methods else known) if m]
    tasks = [t for t in args.tasks.split(",") if t]
    for t in tasks:
        if t not in qt.ALL_TASKS:
            parser.error(f"--tasks: unknown task {t!r}; choose from {', '.join(qt.ALL_TASKS)}")
    for m in methods:
        if m not in known:
            parser.error(f"--methods: unknown method {m!r}; choose from {', '.join(known)}")
    if args.seeds < 1 or args.instances < 1:
        parser.error("--seeds and --instances must be at least 1")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.out:
        import results_file
        results_file.RESULTS = Path(args.out)
    settings = dict(tasks=tasks, methods={m: known[m] for m in methods}, seeds=args.seeds, first_seed=args.first_seed,
                    instances=args.instances,
                    steps=STEPS.tolist(), sparsities=list(SPARSITIES), threads=args.threads, gef_top=GEF_TOP,
                    published_gef=PUBLISHED_GEF,
                    protocol=__doc__.split("\n\n", 2)[2].split("Reference rows")[0].strip())
    results: dict = {}
    path = None
    for t in tasks:
        print(t, flush=True)
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        results[t] = run_task(t, seeds, methods, args.instances, log=lambda s: print(s, flush=True))
        path = write_results("faithfulness", results, settings)
    print(path)
    return results


if __name__ == "__main__":
    main()
