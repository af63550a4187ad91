"""Explainers on Mutagenicity: milliseconds per explanation and ground-truth AUROC, side by side.

    python benchmarks/bench_explainers.py [--gnnexplainer-epochs 200] [--limit N]

Loads the chapter's trained GCN (book/_src/05_explaining_gnns.py) from its stored weights,
``lrp_lib/book/weights/mutagenicity-gcn.pt``, with ``lrp_lib.book.pretrained.load_or_train`` (a strict state
dict: the model class below must match the chapter's), so the figures are about the model the
chapter explains.  Then it explains every test mutagen that has an NO2 / NH2 group with LRPExplainer (one graph at a
time, and all of them in one batch), gradient saliency and Integrated Gradients (Captum, on the
edge mask) and GNNExplainer (PyG, 200 epochs), all through their usual APIs, interleaved graph by
graph so that the load of a shared machine falls on all methods alike.  For each method it
prints the mean wall-clock milliseconds per explanation (one CPU thread), the speed ratio against
GNNExplainer, the mean per-graph AUROC of the edge scores against the ground truth and PyG's
fidelity+ / fidelity- of each method's top-k edges (k = the number of ground-truth edges), and
writes the table with ``results_file.write_results`` (which records the machine) to
benchmarks/results/explainers.json, read by the chapter.  A full run takes about 10 minutes on
one core (GNNExplainer's 200 steps for each of the 259 molecules); ``--limit`` tries a few
molecules and writes nothing.
"""
import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from captum.attr import IntegratedGradients, Saliency
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from torch_geometric.explain import Explainer, GNNExplainer
from torch_geometric.explain.metric import fidelity
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, global_mean_pool

from lrp_lib.book.datasets import mutagenicity
from lrp_lib.explain.explainer import LRPExplainer
from lrp_lib.book.pretrained import RETRAIN_ENV, load_or_train

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import write_results  # noqa: E402

MODEL_CONFIG = dict(mode="binary_classification", task_level="graph", return_type="raw")


# ---------------------------------------------------------- the chapter's model
from lrp_lib.book.models import MutagenicityGCN as GCN  # noqa: E402  (chapter 5's class)


def seed_everything(seed=0):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def stored_model(dataset, test_idx, hidden=64):
    """The chapter's trained GCN from its stored weights, and its test accuracy."""
    def refuse(model):
        raise RuntimeError(f"the benchmark explains the chapter's stored model; build it with {RETRAIN_ENV}=1 "
                           "python tools/nb.py book/_src/05_explaining_gnns.py")

    seed_everything(0)
    model = GCN(dataset.num_features, hidden)
    load_or_train("mutagenicity-gcn", model, refuse, retrain=False)
    correct = 0
    with torch.no_grad():
        for b in DataLoader(dataset[test_idx], batch_size=512):
            correct += int(((model(b.x, b.edge_index, b.batch).view(-1) > 0).long() == b.y).sum())
    return model, correct / len(test_idx)


# ------------------------------------------------------------------ the methods
def target_logodds(model, data, edge_mask, target):
    """The log-odds of the target class (+z for 1, -z for 0) for each row of edge masks."""
    k, n, e = edge_mask.shape[0], data.num_nodes, data.edge_index.shape[1]
    edge_index = (data.edge_index.repeat(1, k) + (torch.arange(k) * n).repeat_interleave(e))
    batch = torch.arange(k).repeat_interleave(n)
    z = model(data.x.repeat(k, 1), edge_index, batch, edge_mask.reshape(-1)).view(-1)
    return z if int(target) == 1 else -z


def saliency(model, data, target):
    mask = torch.ones(1, data.edge_index.shape[1], requires_grad=True)
    return Saliency(lambda m: target_logodds(model, data, m, target)).attribute(mask, abs=True)[0]


def integrated_gradients(model, data, target, steps=50):
    mask = torch.ones(1, data.edge_index.shape[1], requires_grad=True)
    ig = IntegratedGradients(lambda m: target_logodds(model, data, m, target))
    return ig.attribute(mask, baselines=torch.zeros_like(mask), n_steps=steps, internal_batch_size=steps)[0]


def auroc(scores, truth):
    return float(roc_auc_score(truth.numpy(), scores.detach().numpy()))


def hard_top_k(scores, k):
    """1 on the k highest-scoring edges, 0 elsewhere (ties broken by position)."""
    mask = torch.zeros_like(scores, dtype=torch.float)
    mask[scores.detach().argsort(descending=True, stable=True)[:k]] = 1.0
    return mask


def fidelities(explainer, graphs, masks):
    """Mean fidelity+ and fidelity- (PyG) of the hard top-k edge masks, k = the ground-truth size."""
    plus, minus = [], []
    for g, m in zip(graphs, masks):
        explanation = explainer(g.x, g.edge_index)  # prediction, target and inputs for the metric
        explanation.edge_mask = hard_top_k(m, int(g.edge_gt.sum()))
        fp, fm = fidelity(explainer, explanation)
        plus.append(fp)
        minus.append(fm)
    return float(np.mean(plus)), float(np.mean(minus))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gnnexplainer-epochs", type=int, default=200)
    parser.add_argument("--limit", type=int, default=None, help="explain only the first N graphs")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    dataset = mutagenicity()
    labels = dataset._data.y.tolist()
    train_idx, test_idx = train_test_split(list(range(len(dataset))), stratify=labels, test_size=0.25,
                                           random_state=11)
    model, accuracy = stored_model(dataset, test_idx)
    print(f"stored model, test accuracy {accuracy:.3f}", flush=True)

    graphs = [dataset[i] for i in test_idx if int(dataset[i].y) == 0 and bool(dataset[i].edge_gt.any())]
    graphs = graphs[: args.limit] if args.limit else graphs
    with torch.no_grad():
        targets = [int(model(g.x, g.edge_index).view(-1) > 0) for g in graphs]
    lrp = Explainer(model, algorithm=LRPExplainer(rule="epsilon", mask="relevance"), explanation_type="model", node_mask_type=None,
                    edge_mask_type="object", model_config=MODEL_CONFIG)
    gnnexp = Explainer(model, algorithm=GNNExplainer(epochs=args.gnnexplainer_epochs), explanation_type="model",
                       node_mask_type=None, edge_mask_type="object", model_config=MODEL_CONFIG)
    methods = {
        "LRP (LRPExplainer)": lambda g, t: lrp(g.x, g.edge_index).edge_mask,
        "saliency (Captum)": lambda g, t: saliency(model, g, t),
        "Integrated Gradients (Captum, 50 steps)": lambda g, t: integrated_gradients(model, g, t),
        f"GNNExplainer (PyG, {args.gnnexplainer_epochs} epochs)": lambda g, t: gnnexp(g.x, g.edge_index).edge_mask,
    }
    # interleaved: each graph is explained by every method in turn, so that changes in the load of
    # the machine during the run fall on all methods alike
    for name, explain in methods.items():  # warm-up
        explain(graphs[0], targets[0])
    seconds = {name: 0.0 for name in methods}
    masks = {name: [] for name in methods}
    for i, (g, t) in enumerate(zip(graphs, targets)):
        torch.manual_seed(i)  # GNNExplainer's random initial mask
        for name, explain in methods.items():
            start = time.perf_counter()
            masks[name].append(explain(g, t))
            seconds[name] += time.perf_counter() - start
    rows = {}
    for name in methods:
        ms = seconds[name] * 1000 / len(graphs)
        scores = [auroc(m, g.edge_gt) for m, g in zip(masks[name], graphs)]
        fid_plus, fid_minus = fidelities(lrp, graphs, masks[name])
        rows[name] = dict(ms_per_explanation=ms, auroc=float(np.mean(scores)), fidelity_plus=fid_plus,
                          fidelity_minus=fid_minus)
        print(f"{name:45s} {ms:9.2f} ms  AUROC {np.mean(scores):.3f}  fid+ {fid_plus:.3f}  fid- {fid_minus:.3f}",
              flush=True)

    # LRP on the whole evaluation set in one batch (one backward)
    from torch_geometric.data import Batch
    batch = Batch.from_data_list(graphs)
    start = time.perf_counter()
    batched = lrp(batch.x, batch.edge_index, batch=batch.batch).edge_mask
    ms = (time.perf_counter() - start) * 1000 / len(graphs)
    one_by_one = torch.cat([lrp(g.x, g.edge_index).edge_mask for g in graphs])
    assert torch.allclose(batched, one_by_one, rtol=1e-4, atol=1e-6), "batched LRP differs from one by one"
    rows["LRP (LRPExplainer), whole set in one batch"] = dict(rows["LRP (LRPExplainer)"], ms_per_explanation=ms)
    gt_fid = fidelities(lrp, graphs, [g.edge_gt.float() for g in graphs])
    print(f"ground truth as the explanation: fid+ {gt_fid[0]:.3f}  fid- {gt_fid[1]:.3f}")

    gnn_name = next(k for k in rows if k.startswith("GNNExplainer"))
    print(f"\n{'method':50s} {'ms/explanation':>15s} {'speed-up vs GNNExplainer':>25s} {'AUROC':>7s}")
    for name, r in rows.items():
        r["speedup_vs_gnnexplainer"] = rows[gnn_name]["ms_per_explanation"] / r["ms_per_explanation"]
        print(f"{name:50s} {r['ms_per_explanation']:15.2f} {r['speedup_vs_gnnexplainer']:24.0f}x {r['auroc']:7.3f}")
    result = dict(
        graphs=len(graphs), test_accuracy=round(accuracy, 4), gnnexplainer_epochs=args.gnnexplainer_epochs,
        ground_truth_fidelity_plus=gt_fid[0], ground_truth_fidelity_minus=gt_fid[1], methods=rows,
    )
    settings = dict(model="mutagenicity-gcn (stored weights)", gnnexplainer_epochs=args.gnnexplainer_epochs,
                    limit=args.limit, threads=torch.get_num_threads(), dtype="float32",
                    timing="wall clock, methods interleaved graph by graph, one warm-up each")
    if not args.no_write and args.limit is None:
        print(f"written {write_results('explainers', result, settings)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
