"""What an explanation costs, eager, captured and compiled, against the plain input gradient.

    python benchmarks/bench_mechanism.py                     # 25, 700, 2k, 10k, 100k nodes (about 10 minutes)
    python benchmarks/bench_mechanism.py --sizes 700 --no-write
    python benchmarks/bench_mechanism.py --device cuda       # writes benchmarks/results/mechanism-cuda.json
    python benchmarks/bench_mechanism.py --sizes             # molecules alone: mechanism-molecules.json

The model is a 3-layer GCN (32 input features, 64 hidden, 4 classes, ReLU, PyG's ``GCNConv``; random weights,
float32), on a random graph of ``N`` nodes and ``8 N`` edges (``torch.randint``, seeded).  One node's output is
explained: ``explanation_type="phenomenon"`` with the target given, so that what is timed is the explanation's own
cost (no prediction pass), through PyG's ``Explainer`` (``lrp_lib.explain.explainer.Explainer``).  The methods:

* ``gradient``: ``torch.autograd.grad(model(x, edge_index)[i, c], x)``, the floor every ratio is divided by;
* ``gradient_edge_mask``: PyG's own gradient with an edge mask: ``set_masks`` puts a mask of ones on every
  layer's messages (as PyG's explainers do), and the gradient is taken with respect to ``x`` and the mask;
* ``forward`` and ``forward_edges``: ``LRPExplainer()``, the defaults (z+), node masks alone and with
  ``edge_mask_type="object"`` (the README's call): the rules as forward modifications, one ordinary backward, the
  explanation's forward captured (``make_fx``) from the second call on a graph and run as a graph of ATen
  operations, each called through PyTorch's Python binding of the same name;
* ``forward_eager`` and ``forward_eager_edges``: the same with ``replay=False``: the model's forward in the mode
  on every call (what one explanation of a new graph costs);
* ``by_hand``: the default rules' node relevance written by hand for this model, with no library: the least
  arithmetic that z+ asks of one plain backward (:func:`by_hand`; its largest difference from the default's node
  relevance in float64, relative to the largest relevance, is recorded as ``by_hand_difference``).  Not a method a user can call: it shows how much
  of an explanation's cost is the rule's own arithmetic, and how much the library's general machinery;
* ``compiled``: ``LRPExplainer(compile=True)``, node masks: the explanation captured once for
  graphs of any size (``edge_index`` an input of the captured graph) and compiled by
  ``torch.compile(fullgraph=True, dynamic=True)`` (inductor);
* ``compiled_edges``: the same with the edge mask: captured per graph (its graph part folded, the edge probe
  placed by the graph's own messages) and compiled with static sizes, at the graph's second call (the first
  runs eagerly);
  the compile time (the call that compiles) of both is reported, with PyTorch's compile caches as they are (a graph that
  inductor compiled before, in an earlier run on the same machine, loads from its on-disk cache in seconds);

Timing: per size, in each of ``--processes`` fresh processes (three, one after another), six warm-up calls of each
method, then ``--repeat`` rounds (more below 10,000 nodes) in which the methods take turns (their order rotated by one place a round),
one intra-op thread
(``--threads``); per process and method the median wall-clock seconds per call and its ratio to the gradient's
median.  Reported per method: the median of the processes' ratios and their range (``ratio_range``), and the
longest compile time.  Every LRP method's node relevance is checked against
the ``forward_eager`` explanation (the model's own forward under the rules, no capture) before timing (float32
rounding).

Molecules one at a time (``--molecules``, default 300 timed): the first molecules of graph-attribution's benzene task
and the molecular tasks' 3-layer GCN (``quality_tasks``), each molecule's predicted logit
explained by ``LRPExplainer`` called directly (the target given), default and compiled, each with its own copy of
the model, taking turns with the gradient (``x * grad``) molecule by molecule after ``ANY_GRAPH_AFTER + 8`` (40)
other molecules of warm-up (each timed molecule is explained once); the median over the molecules of each one's
ratio to its gradient.  ``forward``: the default, which captures the explanation once with symbolic sizes at the
warm-up's ``ANY_GRAPH_AFTER``-th molecule and runs it as it is (``replay_reason`` "captured for any graph");
``compiled``: ``compile=True``, compiled once, at the first molecule of the warm-up (its compile time is reported),
for molecules of every size; ``forward_edges``: the default with ``edge_mask_type="object"`` (the README's call),
captured for any graph likewise, each layer's messages matched to their input edges in the captured graph;
``gradient_edge_mask``: PyG's gradient with an edge mask (``set_masks``), with respect to ``x`` and the mask;
``forward_loader``: the default given the batch vector of a loader of batch size one (all zeros).  The batch: the
timed molecules as one PyG ``Batch``, and as a loader's batches of 32 (:func:`batch`).  Writes ``benchmarks/results/mechanism.json`` (the
graph sizes) and ``benchmarks/results/mechanism-molecules.json`` (the molecules).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import write_results  # noqa: E402

from lrp_lib.explain.capture.cache import ANY_GRAPH_AFTER  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402

MODEL_CONFIG = dict(mode="multiclass_classification", task_level="node", return_type="raw")


class GCN(nn.Module):
    def __init__(self, features=32, hidden=64, classes=4):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = GCNConv(features, hidden), GCNConv(hidden, hidden), GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        return self.conv3(self.conv2(self.conv1(x, edge_index).relu(), edge_index).relu(), edge_index)


def setup(nodes: int, edges_per_node: int, device):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = GCN().eval().to(device)
    x = torch.randn(nodes, 32, generator=g).to(device)
    edge_index = torch.randint(0, nodes, (2, edges_per_node * nodes), generator=g).to(device)
    index = int(torch.randint(0, nodes, (1,), generator=g))
    with torch.no_grad():
        target = model(x, edge_index).argmax(-1)
    return model, x, edge_index, index, target


def by_hand(model, x, edge_index, index, c):
    r"""The default rules on this GCN, written by hand as forward modifications: z+ on each layer's linear map,
    the identity through PyG's own ``propagate`` (the gradient's message passing), ReLU's identity, and
    :math:`\epsilon = 10^{-6}` on the aggregation and on the bias sum; the relevance is ``x * grad``.  Each map is
    one matrix product with the stacked weights :math:`[W; W^+]` (for the signed first layer, of
    :math:`[x^+, x^-]` with :math:`[W, W; W^+, W^-]`), giving :math:`z` and :math:`z^+`, each row's outputs then
    combined with constant weights, :math:`(z / z^+) \cdot z^+` where :math:`z^+ \ne 0` (z+) and :math:`1 \cdot z`
    where not (LRP-0), so that the backward runs one matrix product per layer.  No accounts, no checks.  It gives
    the default's node relevance (to 2e-15 in float64 at 25 to 2,000 nodes)."""
    def stable(y):
        return y + torch.where(y >= 0, 1e-6, -1e-6)

    def epsilon(y):  # the value y, its gradient scaled by y / (y + eps sign(y))
        with torch.no_grad():
            share = y / stable(y)
        return torch.addcmul((y - y * share).detach(), y, share)

    convs = (model.conv1, model.conv2, model.conv3)
    stacked = []
    for i, conv in enumerate(convs):
        w = conv.lin.weight.detach()
        pos, neg = w.clamp(min=0), w.clamp(max=0)
        stacked.append(torch.cat([torch.cat([w, w], 1), torch.cat([pos, neg], 1)]) if i == 0 else torch.cat([w, pos]))

    def run():
        leaf = x.clone().requires_grad_(True)
        edges, weight = gcn_norm(edge_index, None, x.shape[0], add_self_loops=True, dtype=x.dtype)
        h = leaf
        for i, (conv, w) in enumerate(zip(convs, stacked)):
            u = (torch.cat([h.clamp(min=0), h.clamp(max=0)], 1) if i == 0 else h) @ w.t()
            width = u.shape[1] // 2
            with torch.no_grad():
                z, zp = u[:, :width], u[:, width:]
                positive = zp != 0
                share = torch.cat([(~positive).to(u.dtype), torch.where(positive, z / zp.where(positive, 1.0), 0.0)], 1)
            z = (u * share).view(-1, 2, width).sum(1)
            agg = epsilon(conv.propagate(edges, x=z, edge_weight=weight))
            out = agg + conv.bias
            with torch.no_grad():
                share = agg / stable(out)
            out = torch.addcmul((out - agg * share).detach(), agg, share)
            h = out.relu() if i < 2 else out
        return leaf.detach() * torch.autograd.grad(h[index, c], leaf)[0]
    return run


def by_hand_difference(model, x, edge_index, index, target) -> float:
    """The largest difference between :func:`by_hand` and ``LRPExplainer()``'s node relevance in float64, relative
    to the largest relevance."""
    import copy
    model, x = copy.deepcopy(model).double(), x.double()
    ours = Explainer(model, algorithm=LRPExplainer(replay=False), explanation_type="phenomenon",
                     node_mask_type="attributes", model_config=MODEL_CONFIG)(x, edge_index, target=target,
                                                                             index=index).node_relevance
    hand = by_hand(model, x, edge_index, index, int(target[index]))()
    return float((hand - ours).abs().max() / ours.abs().max())


def methods(model, x, edge_index, index, target, compile_times: dict) -> dict:
    c = int(target[index])

    def gradient():
        leaf = x.clone().requires_grad_(True)
        return torch.autograd.grad(model(leaf, edge_index)[index, c], leaf)[0]

    def gradient_edge_mask():
        leaf = x.clone().requires_grad_(True)
        mask = torch.ones(edge_index.shape[1], device=x.device, requires_grad=True)
        set_masks(model, mask, edge_index, apply_sigmoid=False)
        try:
            return torch.autograd.grad(model(leaf, edge_index)[index, c], [leaf, mask])[0]
        finally:
            clear_masks(model)

    def lrp(edges: bool, **options):
        explainer = Explainer(model, algorithm=LRPExplainer(**options), explanation_type="phenomenon",
                              node_mask_type="attributes", edge_mask_type="object" if edges else None,
                              model_config=MODEL_CONFIG)
        return lambda: explainer(x, edge_index, target=target, index=index).node_relevance

    def compiled(edges: bool):
        call = lrp(edges, compile=True)
        if edges:
            call()  # with an edge mask a graph's first call runs eagerly; its second compiles
        start = time.perf_counter()
        call()  # the call that compiles
        compile_times["compiled_edges" if edges else "compiled"] = time.perf_counter() - start
        return call

    return {"gradient": gradient, "gradient_edge_mask": gradient_edge_mask,
            "forward": lrp(False), "forward_edges": lrp(True),
            "forward_eager": lrp(False, replay=False), "forward_eager_edges": lrp(True, replay=False),
            "by_hand": by_hand(model, x, edge_index, index, c),
            "compiled": compiled(False), "compiled_edges": compiled(True)}


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def in_turn(calls: dict, turn: int) -> list:
    """``calls``' items in the order of round ``turn``: rotated by one place a round, so that each method follows
    each other equally often (the method that runs right after another on the same graph finds its data in the
    cache: measured at 7 to 15% faster than in first place)."""
    items = list(calls.items())
    return items[turn % len(items):] + items[:turn % len(items)]


def take_turns(calls: dict, warm_up: int, rounds: int, device) -> dict:
    """The median seconds of each of ``calls`` (functions of no argument), after ``warm_up`` calls of each, over
    ``rounds`` rounds in which they take turns, in an order rotated each round (:func:`in_turn`)."""
    for call in calls.values():
        for _ in range(warm_up):
            call()
    times: dict = {name: [] for name in calls}
    for turn in range(rounds):
        for name, call in in_turn(calls, turn):
            sync(device)
            start = time.perf_counter()
            call()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def measure(nodes: int, edges_per_node: int, repeat: int, device) -> dict:
    model, x, edge_index, index, target = setup(nodes, edges_per_node, device)
    compile_times: dict = {}
    calls = methods(model, x, edge_index, index, target, compile_times)
    reference = calls["forward_eager"]()
    for name, call in calls.items():
        if name.startswith(("forward", "compiled", "by_hand")):
            got = call()
            scale = float(reference.abs().max())
            assert float((got - reference).abs().max()) <= 1e-4 * max(scale, 1e-12), name
    rounds = repeat * max(1, min(10, 10_000 // nodes))
    medians = take_turns(calls, 6, rounds, device)
    return {"nodes": nodes, "edges": edges_per_node * nodes, "rounds": rounds,
            "by_hand_difference": by_hand_difference(model, x, edge_index, index, target),
            "median_seconds": medians,
            "ratio_to_gradient": {name: medians[name] / medians["gradient"] for name in calls},
            "compile_seconds": compile_times}


def per_molecule(count: int, device) -> dict:
    """The median per-molecule ratio to the gradient, ``count`` molecules one at a time: node masks (default and
    compiled), node and edge masks (the README's call, default) and PyG's gradient with an edge mask."""
    import copy
    from quality_tasks import GraphGCN, molecules
    warm_up = ANY_GRAPH_AFTER + 8
    graphs = molecules("benzene")[0][:warm_up + count]
    torch.manual_seed(0)
    model = GraphGCN(graphs[0].num_node_features, 2).eval().to(device)
    graphs = [(g.x.to(device), g.edge_index.to(device)) for g in graphs]
    with torch.no_grad():
        targets = [torch.tensor([int(model(x, e).argmax())], device=device) for x, e in graphs]
    config = dict(mode="multiclass_classification", task_level="graph", return_type="raw")
    explainers = {}
    for name, options, edges in (("forward", {}, None), ("compiled", {"compile": True}, None),
                                 ("forward_edges", {}, "object"), ("forward_loader", {}, None)):
        own = copy.deepcopy(model)
        explainers[name] = Explainer(own, algorithm=LRPExplainer(**options), explanation_type="phenomenon",
                                     node_mask_type="attributes", edge_mask_type=edges, model_config=config)

    def gradient(x, e, t):
        leaf = x.clone().requires_grad_(True)
        logit = model(leaf, e)[0, t[0]]
        return leaf * torch.autograd.grad(logit, leaf)[0]

    def gradient_edge_mask(x, e, t):  # PyG's own edge mask (set_masks), as its gradient-based explainers place it
        leaf = x.clone().requires_grad_(True)
        mask = torch.ones(e.shape[1], device=x.device, requires_grad=True)
        set_masks(model, mask, e, apply_sigmoid=False)
        try:
            grads = torch.autograd.grad(model(leaf, e)[0, t[0]], [leaf, mask])
        finally:
            clear_masks(model)
        return leaf * grads[0], mask * grads[1]

    def lrp(name):
        ex = explainers[name]
        return lambda x, e, t: ex.algorithm(ex.model, x, e, target=t)

    def loader(x, e, t):  # a DataLoader of batch size one: the batch vector given (all zeros)
        ex = explainers["forward_loader"]
        return ex.algorithm(ex.model, x, e, target=t, batch=x.new_zeros(x.shape[0], dtype=torch.long))

    calls = {"gradient": gradient, "forward": lrp("forward"), "compiled": lrp("compiled"),
             "forward_edges": lrp("forward_edges"), "gradient_edge_mask": gradient_edge_mask,
             "forward_loader": loader}
    compile_seconds = None
    for (x, e), t in list(zip(graphs, targets))[:warm_up]:
        for name, call in calls.items():
            start = time.perf_counter()
            call(x, e, t)
            if name == "compiled" and compile_seconds is None:
                compile_seconds = time.perf_counter() - start
    ratios: dict = {name: [] for name in calls}
    times: dict = {name: [] for name in calls}
    reasons: dict = {"forward": set(), "compiled": set(), "forward_edges": set(), "forward_loader": set()}
    for turn, ((x, e), t) in enumerate(list(zip(graphs, targets))[warm_up:]):
        seconds = {}
        for name, call in in_turn(calls, turn):
            sync(device)
            start = time.perf_counter()
            out = call(x, e, t)
            sync(device)
            seconds[name] = time.perf_counter() - start
            if name in reasons:
                reasons[name].add(out.replay_reason)
        for name in calls:
            ratios[name].append(seconds[name] / seconds["gradient"])
            times[name].append(seconds[name])
    return {"molecules": len(times["gradient"]),
            "median_ratio_to_gradient": {k: statistics.median(v) for k, v in ratios.items()},
            "median_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()},
            "compile_seconds": compile_seconds, "default_replay_reasons": sorted(reasons["forward"]),
            "compiled_replay_reasons": sorted(reasons["compiled"]),
            "edges_replay_reasons": sorted(reasons["forward_edges"]),
            "loader_replay_reasons": sorted(reasons["forward_loader"]),
            "batch": batch(model, graphs[warm_up:], targets[warm_up:], config, device)}


def batch(model, graphs, targets, config, device, rounds: int = 7) -> dict:
    """All the molecules as one PyG batch: the default explainer (one account per molecule) and with one
    account for the batch, against one batched Gradient x Input, taking turns; per molecule and as ratios.
    ``loader``: the molecules as a data loader's batches of 32, one account each, against the same batches'
    batched Gradient x Input."""
    from torch_geometric.data import Batch, Data
    data = Batch.from_data_list([Data(x=x, edge_index=e) for x, e in graphs]).to(device)
    target = torch.cat(targets)
    explainers = {name: Explainer(model, algorithm=LRPExplainer(accounts=accounts), explanation_type="phenomenon",
                                  node_mask_type="attributes", model_config=config)
                  for name, accounts in (("lrp", "each"), ("lrp_total", "total"))}

    def gradient():
        leaf = data.x.clone().requires_grad_(True)
        logits = model(leaf, data.edge_index, data.batch)
        return leaf * torch.autograd.grad(logits.gather(1, target[:, None]).sum(), leaf)[0]

    calls = {"gradient": gradient, **{name: (lambda ex=ex: ex(data.x, data.edge_index, batch=data.batch,
                                                                target=target).node_relevance)
                                      for name, ex in explainers.items()}}
    # a data loader: batches of 32 molecules, new tensors on every pass (as a DataLoader makes them), one account
    # each, against the batched gradient of the same batches; the last, smaller batch left out (a capture of its own)
    chunks = [(graphs[i:i + 32], target[i:i + 32]) for i in range(0, len(graphs) - 31, 32)]
    loader_ex = Explainer(model, algorithm=LRPExplainer(accounts="total"), explanation_type="phenomenon",
                          node_mask_type="attributes", model_config=config)

    def batches():
        return [(Batch.from_data_list([Data(x=x, edge_index=e) for x, e in chunk]).to(device), t)
                for chunk, t in chunks]

    def loader_gradient():
        for b, t in batches():
            leaf = b.x.clone().requires_grad_(True)
            logits = model(leaf, b.edge_index, b.batch)
            torch.autograd.grad(logits.gather(1, t[:, None]).sum(), leaf)
    reasons = set()

    def loader_lrp():
        for b, t in batches():
            reasons.add(loader_ex(b.x, b.edge_index, batch=b.batch, target=t).replay_reason)
    calls.update(loader_gradient=loader_gradient, loader_lrp=loader_lrp)
    for _ in range(ANY_GRAPH_AFTER // len(chunks) + 1):  # (past the batches explained eagerly before the capture)
        loader_lrp()
    one = explainers["lrp"](data.x, data.edge_index, batch=data.batch, target=target)
    if one.bias_relevance.shape != (len(graphs),):
        raise AssertionError("the batch's explanation has no account per molecule")
    medians = take_turns(calls, 3, rounds, device)
    reasons.clear()
    loader_lrp()
    loader = {"batches": len(chunks), "molecules_per_batch": 32, "replay_reasons": sorted(reasons),
              "ratio_to_gradient": medians["loader_lrp"] / medians["loader_gradient"],
              "ms_per_molecule": 1e3 * medians["loader_lrp"] / (32 * len(chunks))}
    medians = {k: v for k, v in medians.items() if not k.startswith("loader")}
    return {"molecules": len(graphs), "ms_per_molecule": {k: 1e3 * v / len(graphs) for k, v in medians.items()},
            "ratio_to_gradient": {k: v / medians["gradient"] for k, v in medians.items()}, "loader": loader}


def across_processes(nodes: int, args) -> dict:
    """:func:`measure` of one size in ``args.processes`` fresh processes, one after another: per method the median
    over the processes of each one's ratio to its own gradient, and their range.  (The ratios of one process
    move together by up to a third from one process to the next at 10,000 nodes and more, with the heap's
    layout; a median over fresh processes is steadier than more rounds in one.)"""
    runs = []
    for _ in range(args.processes):
        command = [sys.executable, __file__, "--one-size", str(nodes), "--edges-per-node", str(args.edges_per_node),
                   "--threads", str(args.threads), "--repeat", str(args.repeat), "--device", args.device]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    names = runs[0]["ratio_to_gradient"]
    return {"nodes": nodes, "edges": runs[0]["edges"], "rounds": runs[0]["rounds"], "processes": len(runs),
            "by_hand_difference": max(r["by_hand_difference"] for r in runs),
            "median_seconds": {k: statistics.median(r["median_seconds"][k] for r in runs) for k in names},
            "ratio_to_gradient": {k: statistics.median(r["ratio_to_gradient"][k] for r in runs) for k in names},
            "ratio_range": {k: (min(r["ratio_to_gradient"][k] for r in runs),
                                max(r["ratio_to_gradient"][k] for r in runs)) for k in names},
            "compile_seconds": {k: max(r["compile_seconds"][k] for r in runs) for k in runs[0]["compile_seconds"]}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[25, 700, 2000, 10_000, 100_000],
                   help="graph sizes of one node's explanation: mechanism.json (none: molecules alone)")
    p.add_argument("--edges-per-node", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=7, help="rounds from 10,000 nodes up (more below)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--molecules", type=int, default=300,
                   help="molecules one at a time and in a batch: mechanism-molecules.json (0: none)")
    p.add_argument("--processes", type=int, default=3,
                   help="fresh processes per graph size, each timing every method (the median ratio is reported)")
    p.add_argument("--one-size", type=int, help=argparse.SUPPRESS)  # (a child process: one size, its row as JSON)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    warnings.filterwarnings("ignore")
    if args.one_size:
        print(json.dumps(measure(args.one_size, args.edges_per_node, args.repeat, device)))
        return
    suffix = "" if device.type == "cpu" else f"-{device.type}"
    rows = []
    for nodes in args.sizes:
        row = across_processes(nodes, args)
        rows.append(row)
        print(nodes, {k: round(v, 2) for k, v in row["ratio_to_gradient"].items()},
              {k: [round(a, 2), round(b, 2)] for k, (a, b) in row["ratio_range"].items()}, flush=True)
    if rows and not args.no_write:
        print(write_results("mechanism" + suffix, {"graphs": rows}, vars(args)))
    if args.molecules:
        molecules = per_molecule(args.molecules, device)
        print("molecules", {k: round(v, 2) for k, v in molecules["median_ratio_to_gradient"].items()})
        if not args.no_write:
            print(write_results("mechanism-molecules" + suffix, molecules, vars(args)))


if __name__ == "__main__":
    main()
