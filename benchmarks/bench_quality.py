"""How good are LRP's explanations? Ground-truth AUROC of explainers on the standard synthetic and molecular tasks.

    python benchmarks/bench_quality.py [--fast] [--tasks ba_shapes,benzene] [--seeds 3] [--instances 20]
                                       [--slow-epochs 100] [--out FOLDER]

For each task (see ``benchmarks/quality_tasks.py``) and seed: generate the data, train the model
(or load ``lrp_lib/weights/quality_<task>_s<seed>.pt``), pick ``--instances`` correctly classified
test instances that have a ground truth, explain each with every method (one instance at a time,
the methods taking turns), and score the explanation against the ground truth by AUROC:

* node-level tasks (BA-Shapes, BA-Community, Tree-Cycles, Tree-Grid, Infection): PyG's BA-Shapes
  example protocol -- the edges of the 3-hop subgraph of each explained node, pooled over the
  explained nodes of a seed, scored against the motif's edges (Infection: the edges on a shortest
  path from an infected node);
* BA-2Motifs and Mutagenicity: edge AUROC per graph, averaged;
* the molecular tasks of Sanchez-Lengeling et al. (2020): atom AUROC per molecule, the best over the
  alternative ground truths, averaged over the test molecules of label 1.

Node scores of node-only methods (CAM, Grad-CAM) become edge scores as the mean of the two
end points; edge scores of edge-only methods (PGExplainer) become atom scores as the largest score
of an incident edge.  Writes ``benchmarks/results/quality.json``: task -> method -> AUROC mean and
std over seeds, ms per explanation, plus the model's test accuracy per task (per seed and mean).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quality_tasks as qt  # noqa: E402
from results_file import write_results  # noqa: E402
from torch_geometric.explain import Explainer  # noqa: E402
from torch_geometric.explain.algorithm import (AttentionExplainer, CaptumExplainer, GNNExplainer,  # noqa: E402
                                               GraphMaskExplainer, PGExplainer)

from lrp_lib.explain import LRPExplainer  # noqa: E402
from lrp_lib.guided_backprop import guided_backprop  # noqa: E402
from lrp_lib.rules import Rule  # noqa: E402

#: method key -> what it is (written into the JSON settings, read by the chapter).
METHODS = {
    "lrp_eps": "LRP, epsilon rule, signed relevance (LRPExplainer's default)",
    "lrp_eps_abs": "LRP, epsilon rule, |relevance|",
    "lrp_gamma": "LRP, gamma rule (0.25), signed",
    "lrp_zplus": "LRP, z+ rule, signed",
    "lrp_eps_contrast": "LRP, epsilon rule, signed, explaining z_c - mean of the other logits",
    "lrp_zplus_contrast": "LRP, z+ rule, signed, explaining z_c - mean of the other logits",
    "lrp_eps_nobias": "LRP, epsilon rule whose denominator leaves out the bias of each linear map the rule sees (the "
                      "Linear head; GCNConv adds its bias outside, in a proportional split), signed",
    "saliency": "saliency |gradient| (Captum via CaptumExplainer)",
    "grad_x_input": "Grad x Input (Captum InputXGradient)",
    "integrated_gradients": "Integrated Gradients (Captum, 50 steps, zero baseline)",
    "guided_backprop": "guided backprop (lrp_lib.guided_backprop, gradient via Captum Saliency, signed)",
    "cam": "CAM: per-node contribution to the head through the mean pool (graph-level only)",
    "grad_cam": "Grad-CAM on the last GCN layer (graph-level only)",
    "gnnexplainer": "GNNExplainer (PyG)",
    "pgexplainer": "PGExplainer (PyG, trained on the explained instances; training time counted)",
    "graphmask": "GraphMaskExplainer (PyG)",
    "gat_attention": "attention weights of a GAT trained on the same task (PyG AttentionExplainer; a different "
                     "model, synthetic tasks only)",
    "gat_lrp_eps": "LRP (epsilon, signed) of that GAT (LRPExplainer's generic mechanism: CP-LRP, attention as constant)",
    "gat_lrp_eps_abs": "LRP (epsilon, |relevance|) of that GAT",
    "gat_lrp_zplus_contrast": "LRP (z+, signed, contrast of the logits) of that GAT",
    "random": "uniform random scores",
}
SLOW = {"gnnexplainer", "pgexplainer", "graphmask"}


class EpsilonNoBias(Rule):
    r"""Epsilon rule whose denominator leaves out the bias: all of a layer's relevance reaches its inputs.

    Only the biases that reach the rule are left out: those of ``nn.Linear`` layers.  ``GCNConv`` adds its
    bias after the linear map, and LRPExplainer splits that sum in proportion (the bias keeps its share).

    .. math:: R_j = \sum_k \frac{x_j w_{jk}}{\sum_{j'} x_{j'} w_{j'k} + \epsilon\,\mathrm{sign}(\cdot)} R_k

    The forward pass (and so which ReLUs are active) is the model's own, bias included.
    """

    def __init__(self, eps: float = 1e-6):
        self.eps = eps

    def propagate(self, m, x, weight, bias, out, rel_out, op):
        z = m(x, weight, None)
        z = z + self.eps * torch.where(z >= 0, 1.0, -1.0).to(z.dtype)
        return x * m.vjp(rel_out / z, x, weight)

    def __repr__(self):
        return f"EpsilonNoBias({self.eps:g})"


class Contrast(nn.Module):
    """The model followed by the linear map z -> z_c - mean_{k != c} z_k for every class c (no bias)."""

    def __init__(self, model: nn.Module, classes: int):
        super().__init__()
        self.model = model
        self.contrast = nn.Linear(classes, classes, bias=False)
        with torch.no_grad():
            eye = torch.eye(classes)
            self.contrast.weight.copy_(eye - (1 - eye) / (classes - 1))

    def forward(self, *args, **kwargs):
        return self.contrast(self.model(*args, **kwargs))


class TwoLogits(nn.Module):
    """A one-logit binary model as a two-class one: (-z/2, z/2)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        z = self.model(*args, **kwargs)
        return torch.cat([-z / 2, z / 2], -1)


def node_embeddings(model, x, edge_index):
    """The node features that the mean pool averages (the last GCN layer after its ReLU)."""
    if isinstance(model, qt.GraphGCN):
        return model.embed(x, edge_index)
    h = x
    for conv in (model.gc1, model.gc2, model.gc3, model.gc4):  # lrp_lib.models.MutagenicityGCN
        h = torch.relu(conv(h, edge_index))
    return h


def head_of(model):
    if isinstance(model, qt.GraphGCN):
        return model.head
    return lambda p: model.head(model.pre_head(p))


class Methods:
    """The explainers of one task's model, each a function instance -> scores (edges or atoms)."""

    def __init__(self, task: qt.Task, seed: int, slow_epochs: int, names: list[str], graphmask_epochs: int = 30):
        self.task, self.seed, self.names = task, seed, names
        self.mode = task.mode
        level = task.level
        self.cfg = dict(mode=task.mode, task_level=level, return_type="raw")
        edge = task.truth == "edge"
        model = task.model
        self.classes = None if task.mode == "binary_classification" else \
            int(task.model.head.out_features)

        def explainer(algorithm, node=None, edge_type="object", kind="model", m=model):
            cfg = self.cfg
            if self.mode == "binary_classification" and not isinstance(algorithm, LRPExplainer):
                # PyG's Captum, GNNExplainer, PGExplainer and GraphMask want classes: the one logit z as two
                # logits (-z/2, z/2), whose softmax is the sigmoid of z; each class is then explained by its logit
                m, cfg = TwoLogits(copy.deepcopy(m) if m is model else m).eval(), {**cfg,
                                                                                  "mode": "multiclass_classification"}
            return Explainer(m, algorithm=algorithm, explanation_type=kind, node_mask_type=node,
                             edge_mask_type=edge_type, model_config=cfg)

        lrp_node = "object"
        self.ex = {}
        for key, rule in (("lrp_eps", "epsilon"), ("lrp_gamma", "gamma"), ("lrp_zplus", "zplus"),
                          ("lrp_eps_nobias", EpsilonNoBias())):
            self.ex[key] = explainer(LRPExplainer(rule=rule), node=lrp_node)
        if self.classes:
            contrast = Contrast(model, self.classes).eval()
            self.ex["lrp_eps_contrast"] = explainer(LRPExplainer(), node=lrp_node, m=contrast)
            self.ex["lrp_zplus_contrast"] = explainer(LRPExplainer(rule="zplus"), node=lrp_node, m=contrast)
        captum_node, captum_edge = (None, "object") if edge else ("attributes", None)
        self.ex["saliency"] = explainer(CaptumExplainer("Saliency"), captum_node, captum_edge)
        self.ex["grad_x_input"] = explainer(CaptumExplainer("InputXGradient"), captum_node, captum_edge)
        self.ex["integrated_gradients"] = explainer(CaptumExplainer("IntegratedGradients", n_steps=50),
                                                    captum_node, captum_edge)
        self.ex["guided_backprop"] = explainer(CaptumExplainer("Saliency", abs=False), captum_node, captum_edge)
        # PyG's mask-learning explainers leave state on the model they explain (Captum's gradients then miss the
        # edge mask): each gets a copy of its own
        self.ex["gnnexplainer"] = explainer(GNNExplainer(epochs=slow_epochs), "attributes" if edge else "object",
                                            "object" if edge else None, m=copy.deepcopy(model))
        layers = sum(isinstance(m, qt.GCNConv) for m in model.modules())
        self.ex["graphmask"] = explainer(GraphMaskExplainer(layers, epochs=graphmask_epochs, log=False),
                                         "attributes" if edge else "object", "object", m=copy.deepcopy(model))
        self.ex["pgexplainer"] = explainer(PGExplainer(epochs=30, lr=0.003), None, "object", kind="phenomenon",
                                           m=copy.deepcopy(model))
        self.pg_seconds = 0.0
        if task.gat is not None:
            self.ex["gat_attention"] = explainer(AttentionExplainer(), None, "object", m=task.gat.eval())
            self.ex["gat_lrp_eps"] = explainer(LRPExplainer(), lrp_node, m=task.gat)
            self.ex["gat_lrp_zplus_contrast"] = explainer(LRPExplainer(rule="zplus"), lrp_node,
                                                          m=Contrast(task.gat, self.classes).eval())

    # inputs of one instance
    def inputs(self, inst):
        if self.task.level == "node":
            d = self.task.data
            return d.x, d.edge_index, dict(index=int(inst)), d.y
        return inst.x, inst.edge_index, {}, inst.y

    def sign(self, inst):
        """+1, or -1 for a binary model explaining class 0 (gradient methods see the logit of class 1)."""
        if self.mode != "binary_classification":
            return 1.0
        return 1.0 if int(self.inputs(inst)[3].view(-1)[0]) == 1 else -1.0

    def train_pg(self, instances):
        ex = self.ex["pgexplainer"]
        torch.manual_seed(self.seed)
        start = time.perf_counter()
        for epoch in range(ex.algorithm.epochs):
            for inst in instances:
                x, ei, kw, y = self.inputs(inst)
                target = y if self.task.level == "node" else y.view(-1)
                ex.algorithm.train(epoch, ex.model, x, ei, target=target.long(), **kw)
        self.pg_seconds = time.perf_counter() - start

    def explain(self, name, inst):
        """(scores over the task's truth objects: edges or atoms, seconds)."""
        x, ei, kw, y = self.inputs(inst)
        edge = self.task.truth == "edge"
        start = time.perf_counter()
        if name == "random":
            g = torch.Generator().manual_seed(self.seed * 100003 + (int(inst) if self.task.level == "node" else
                                                                    int(x.shape[0]) * 7 + int(ei.shape[1])))
            s = torch.rand(ei.shape[1] if edge else x.shape[0], generator=g)
        elif name in ("cam", "grad_cam"):
            s = self._cam(name, inst)
            if edge:
                s = (s[ei[0]] + s[ei[1]]) / 2
        elif name in ("lrp_eps_abs", "gat_lrp_eps_abs"):
            e = self.ex[name[:-4]](x, ei, **kw)
            s = (e.edge_mask if edge else e.node_mask.sum(-1)).abs()
        else:
            ex = self.ex["lrp_eps" if name == "lrp_eps_abs" else name]
            if name == "pgexplainer":
                target = y if self.task.level == "node" else y.view(-1)
                e = ex(x, ei, target=target.long(), **kw)
            elif name == "guided_backprop":
                with guided_backprop(self.task.model):
                    e = ex(x, ei, **kw)
            else:
                e = ex(x, ei, **kw)
            if edge:
                s = e.edge_mask
            elif e.get("node_mask") is not None:
                s = e.node_mask.sum(-1)
            else:  # an edge-only method on an atom task: the largest incident edge score
                s = torch.zeros(x.shape[0]).scatter_reduce(0, ei[1], e.edge_mask, "amax", include_self=False)
        seconds = time.perf_counter() - start
        if name == "pgexplainer":
            seconds += self.pg_seconds / max(1, self.n_instances)
        return s.detach().float(), seconds

    def _cam(self, name, inst):
        model = self.task.model
        x, ei = inst.x, inst.edge_index
        with torch.enable_grad():
            h = node_embeddings(model, x, ei)
            if name == "cam":
                h = h.detach()
            pooled = h.mean(0, keepdim=True)
            pooled_leaf = pooled.detach().requires_grad_(True)
            out = head_of(model)(pooled_leaf)
            c = 0 if out.shape[-1] == 1 else int(out.argmax(-1))
            out[0, c].backward()
            g = pooled_leaf.grad[0] * self.sign(inst)
        if name == "cam":  # head contribution of each node: h_i . (d out / d pooled)
            return (h * g).sum(-1)
        # Grad-CAM (Pope et al., 2019): weights = mean over nodes of d out / d h_i = g / N, ReLU of the weighted sum
        return torch.relu((h.detach() * (g / x.shape[0])).sum(-1))


def auroc(truth, scores):
    truth = np.asarray(truth, dtype=float)
    if truth.min() == truth.max():
        return None
    return float(roc_auc_score(truth, np.asarray(scores, dtype=float)))


def score_task(task, methods, per_instance):
    """AUROC per method for one seed, from per-instance (scores) lists."""
    out = {}
    for name, rows in per_instance.items():
        kept = [(inst, s) for inst, s in zip(task.instances, rows) if s is not None]
        if not kept:
            out[name] = None
            continue
        instances, rows = [k for k, _ in kept], [s for _, s in kept]
        if task.level == "node":
            truths, preds = [], []
            for v, s in zip(instances, rows):
                hard, truth = qt.node_truth(task, v)
                truths.append(truth[hard])
                preds.append(s[hard])
            out[name] = auroc(torch.cat(truths), torch.cat(preds))
        elif task.truth == "edge":
            vals = [auroc(g.edge_gt, s) for g, s in zip(instances, rows)]
            vals = [v for v in vals if v is not None]
            out[name] = float(np.mean(vals)) if vals else None
        else:
            vals = []
            for g, s in zip(instances, rows):
                alts = [auroc(g.atom_gt[:, k], s) for k in range(g.atom_gt.shape[1])]
                alts = [a for a in alts if a is not None]
                if alts:
                    vals.append(max(alts))
            out[name] = float(np.mean(vals)) if vals else None
    return out


def applicable(task, name):
    if name in ("cam", "grad_cam"):
        return task.level == "graph"
    if name in ("lrp_eps_contrast", "lrp_zplus_contrast"):
        return task.mode != "binary_classification"
    if name.startswith("gat_"):
        return task.gat is not None
    if name == "guided_backprop":
        return task.name != "mutagenicity"  # MutagenicityGCN calls F.relu: nothing for guided backprop to swap
    return True


def run_task(name, seeds, instances, slow_epochs, methods, progress=True, graphmask_epochs=30):
    per_seed = {m: [] for m in methods}
    times = {m: [] for m in methods}
    accuracy, counts, gat_accuracy = [], [], []
    failures = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        task = qt.build_task(name, seed, instances, rng, gat="gat_attention" in methods and
                             (name in qt.NODE_TASKS or name == "ba_2motifs"))
        train_s = time.perf_counter() - t0
        accuracy.append(task.accuracy)
        if task.gat_accuracy is not None:
            gat_accuracy.append(task.gat_accuracy)
        counts.append(len(task.instances))
        names = [m for m in methods if applicable(task, m)]
        meth = Methods(task, seed, slow_epochs, names, graphmask_epochs)
        meth.n_instances = len(task.instances)
        if "pgexplainer" in names:
            meth.train_pg(task.instances)
        rows = {m: [] for m in names}
        bar = tqdm(task.instances, desc=f"{name} seed {seed} (setup {train_s:.0f} s)", file=sys.stderr,
                   leave=False, disable=not progress)
        for inst in bar:
            for m in names:
                torch.manual_seed(seed)
                try:
                    s, sec = meth.explain(m, inst)
                except (ValueError, RuntimeError) as err:  # e.g. z+ with no positive contribution: counted, not scored
                    failures.setdefault(m, []).append(f"{type(err).__name__}: {str(err)[:160]}")
                    s, sec = None, None
                rows[m].append(s)
                if sec is not None:
                    times[m].append(sec)
        for m, v in score_task(task, meth, rows).items():
            per_seed[m].append(v)
    result = {"accuracy": float(np.mean(accuracy)), "accuracy_per_seed": [round(a, 4) for a in accuracy],
              "gat_accuracy": float(np.mean(gat_accuracy)) if gat_accuracy else None,
              "instances_per_seed": counts, "methods": {}}
    for m in methods:
        vals = [v for v in per_seed[m] if v is not None]
        if not vals:
            continue
        result["methods"][m] = {"auroc": round(float(np.mean(vals)), 4), "auroc_std": round(float(np.std(vals)), 4),
                                "auroc_per_seed": [round(v, 4) for v in vals],
                                "ms": round(1000 * float(np.median(times[m])), 3),
                                "ms_mean": round(1000 * float(np.mean(times[m])), 3),
                                "failed": len(failures.get(m, []))}
        if failures.get(m):
            result["methods"][m]["first_failure"] = failures[m][0]
    return result


def diagnose_signed(seeds, instances=40):
    """Why signed edge relevance misses the motif on BA-Shapes: AUROC per class and where the relevance goes.

    For each LRP variant (rule x explained quantity): pooled edge AUROC of signed and absolute relevance and the
    signed AUROC per class; for the default, the mean explained logit and the mean relevance reaching the
    inputs, the motif edges and the other edges of the subgraph (the rest is taken by the biases).
    """
    variants = {"epsilon, logit": ("epsilon", False), "epsilon without bias, logit": (EpsilonNoBias(), False),
                "gamma, logit": ("gamma", False), "z+, logit": ("zplus", False),
                "epsilon, contrast": ("epsilon", True), "epsilon without bias, contrast": (EpsilonNoBias(), True),
                "z+, contrast": ("zplus", True)}
    rows = {v: {"signed": [], "abs": [], "per_class": {}} for v in variants}
    sums = []
    for seed in seeds:
        task = qt.build_task("ba_shapes", seed, instances, np.random.default_rng(seed))
        d = task.data
        for v, (rule, contrast) in variants.items():
            model = Contrast(task.model, 4).eval() if contrast else task.model
            ex = Explainer(model, algorithm=LRPExplainer(rule=rule), explanation_type="model",
                           node_mask_type="object", edge_mask_type="object",
                           model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
            truths, preds, classes = [], [], []
            for node in task.instances:
                e = ex(d.x, d.edge_index, index=node)
                hard, truth = qt.node_truth(task, node)
                truths.append(truth[hard])
                preds.append(e.edge_mask[hard].detach())
                classes.append(int(d.y[node]))
                if v == "epsilon, logit":
                    with torch.no_grad():
                        z = float(task.model(d.x, d.edge_index)[node].max())
                    on = truth.bool() & hard
                    sums.append([z, float(e.node_mask.sum()), float(e.edge_mask[on].sum()),
                                 float(e.edge_mask[hard & ~truth.bool()].sum())])
            rows[v]["signed"].append(auroc(torch.cat(truths), torch.cat(preds)))
            rows[v]["abs"].append(auroc(torch.cat(truths), torch.cat(preds).abs()))
            for c in sorted(set(classes)):
                pick = [i for i, k in enumerate(classes) if k == c]
                rows[v]["per_class"].setdefault(str(c), []).append(
                    auroc(torch.cat([truths[i] for i in pick]), torch.cat([preds[i] for i in pick])))
    out = {"instances_per_seed": instances, "seeds": len(seeds), "variants": {}}
    for v, r in rows.items():
        out["variants"][v] = {"signed": round(float(np.mean(r["signed"])), 4), "abs": round(float(np.mean(r["abs"])), 4),
                              "per_class": {c: round(float(np.mean(x)), 4) for c, x in r["per_class"].items()}}
    z, inputs, motif, other = np.mean(sums, 0)
    out["relevance_sums"] = {"explained_logit": round(float(z), 3), "inputs": round(float(inputs), 3),
                             "biases": round(float(z - inputs), 3), "motif_edges": round(float(motif), 3),
                             "other_subgraph_edges": round(float(other), 3)}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", action="store_true", help="a reduced run (few instances, one seed, short "
                                                            "optimisation) in under three minutes")
    parser.add_argument("--tasks", default=",".join(qt.ALL_TASKS), help="comma-separated: " + ",".join(qt.ALL_TASKS))
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " + ",".join(METHODS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--instances", type=int, default=10, help="explained instances per task and seed")
    parser.add_argument("--slow-epochs", type=int, default=100, help="epochs of GNNExplainer per explanation")
    parser.add_argument("--graphmask-epochs", type=int, default=20, help="epochs of GraphMaskExplainer per "
                                                                         "explanation (it is the slowest)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="folder for quality.json (default benchmarks/results)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.fast:
        args.seeds, args.instances = 1, min(args.instances, 4)
        args.slow_epochs, args.graphmask_epochs = min(args.slow_epochs, 20), min(args.graphmask_epochs, 10)
    torch.set_num_threads(args.threads)
    tasks = [t for t in args.tasks.split(",") if t]
    methods = [m for m in args.methods.split(",") if m]
    for t in tasks:
        if t not in qt.ALL_TASKS:
            parser.error(f"--tasks: unknown task {t!r}; choose from {', '.join(qt.ALL_TASKS)}")
    for m in methods:
        if m not in METHODS:
            parser.error(f"--methods: unknown method {m!r}; choose from {', '.join(METHODS)}")
    warnings.filterwarnings("ignore")
    if args.out:
        import results_file
        results_file.RESULTS = Path(args.out)

    def write_partial(results, diagnostics):
        return write_results("quality", {"tasks": results, "signed_diagnostics": diagnostics}, settings)

    settings = dict(fast=args.fast, tasks=tasks, methods={m: METHODS[m] for m in methods}, seeds=args.seeds,
                    instances=args.instances, gnnexplainer_epochs=args.slow_epochs,
                    graphmask_epochs=args.graphmask_epochs, pgexplainer_epochs=30,
                    threads=args.threads,
                    protocol={"node": "edge AUROC over the 3-hop subgraph edges, pooled over the explained nodes of a "
                                      "seed (PyG's BA-Shapes example)",
                              "graph_edge": "edge AUROC per graph, averaged",
                              "atom": "atom AUROC per molecule, best over the alternative ground truths, averaged"},
                    ms="median over instances and seeds of one explanation's wall time, one thread")
    results = {}
    for t in tasks:
        start = time.perf_counter()
        results[t] = run_task(t, list(range(args.seeds)), args.instances, args.slow_epochs, methods,
                              progress=not args.no_progress, graphmask_epochs=args.graphmask_epochs)
        results[t]["seconds"] = round(time.perf_counter() - start, 1)
        row = results[t]["methods"]
        print(f"{t:22s} acc {results[t]['accuracy']:.3f}  " + "  ".join(
            f"{m} {v['auroc']:.3f}" for m, v in row.items()), flush=True)
        write_partial(results, None)
    diagnostics = None
    if "ba_shapes" in tasks:
        diagnostics = diagnose_signed(list(range(args.seeds)), 10 if args.fast else 40)
        print("signed vs |R| on BA-Shapes:", json.dumps(diagnostics["variants"]), flush=True)
    path = write_partial(results, diagnostics)
    print(f"wrote {path}", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
