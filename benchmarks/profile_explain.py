"""Where one LRP explanation's time goes: its phases timed side by side, against the plain gradient.

    python benchmarks/profile_explain.py                  # 25 and 700 nodes (about a minute)
    python benchmarks/profile_explain.py --sizes 25 --cprofile   # and cProfile's top functions

The model, graphs and explained output of ``bench_scaling.py`` (a 3-layer GCN, 32 features, ten edges
per node, one node's logit).  Each phase is a function of no argument; they take turns, round by
round, in one process (median over the rounds, and each phase's median ratio to the gradient of the
same round):

* ``gradient``: ``torch.autograd.grad`` of the explained logit (one forward, one backward);
* ``forward``: the model's forward with autograd on; ``prediction``: without (PyG's prediction pass);
* ``bare_mode_forward``: the forward inside a ``TorchFunctionMode`` that only calls each function: the
  cost of the interception itself;
* ``mode_forward``: the forward inside :class:`~lrp_lib.explain.function_mode.RelevanceMode` (fast
  dispatch), ``mode_forward_reference``: with its reference dispatch (``fast=False``);
* ``mode_forward_backward``: that forward and the relevance backward, nothing else;
* ``lrp_algorithm``: ``LRPExplainer`` called directly (the checks, accounts and masks around it);
* ``lrp``: through ``Explainer`` (the prediction taken from the explanation's own forward, the training
  flag, the explanation's attributes); ``lrp_two_passes``: ``Explainer(one_pass=False)``, PyG's prediction
  pass first; ``saliency``: Captum's, through ``Explainer``;
* ``replay_forward``, ``replay_forward_backward``: the forward replayed from its recorded plan
  (:mod:`lrp_lib.explain.replay`), and with the relevance backward; ``replay_all_steps_forward_backward``:
  also the steps on ``edge_index`` alone (kept from the recording otherwise, the graph being the same);
  ``lrp_algorithm_replay``, ``lrp_replay``,
  ``lrp_replay_two_passes``: ``LRPExplainer(replay=True, compile=False)`` called directly, through
  ``Explainer``, and with ``one_pass=False`` (each replays: the first call, the warm-up, records);
* ``lrp_algorithm_compiled``, ``lrp_compiled``: ``LRPExplainer()`` (the defaults) called directly and through
  ``Explainer``: the replayed explanation's ATen operations run as a program
  (:mod:`lrp_lib.explain.compiled`; asserted after the warm-up).

Beside the times, the number of ATen operations one call of each phase dispatches (counted once, after
the warm-up, by a ``TorchDispatchMode`` that only counts: on a small graph each costs about the same
Python and dispatch time, and on a GPU each is at least one kernel launch), and the median number
of minor page faults per call (``getrusage``): memory the C
allocator took fresh from the kernel.  From a few hundred nodes up, the relevance pass takes several
times the gradient's (the allocator gives freed memory back and takes it again); run with
``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_`` raised (glibc) to see the times without them.

Writes ``benchmarks/results/profile_explain.json``; with either variable set,
``benchmarks/results/profile_explain_malloc.json``::

    MALLOC_TRIM_THRESHOLD_=1000000000 MALLOC_MMAP_THRESHOLD_=1000000000 python benchmarks/profile_explain.py --sizes 25 700 2000
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import statistics
import time
import warnings

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from lrp_lib.explain.explainer import Explainer, LRPExplainer
from lrp_lib.explain.function_mode import RelevanceMode
from lrp_lib.explain import replay

import results_file  # benchmarks/results_file.py
from bench_scaling import MODEL_CONFIG, explainers, setup


class BareMode(TorchFunctionMode):
    """Intercepts every torch function and only calls it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def phases(nodes: int) -> dict:
    model, x, edge_index, index, target = setup(nodes, 10)
    ex = explainers(model, 20)
    for name in ("lrp", "lrp_two_passes"):  # the mode on every call
        ex[name].algorithm.replay = False
    target_t, index_t = torch.tensor([target]), torch.tensor([index])
    algorithm = ex["lrp"].algorithm
    composite = algorithm.composite

    def gradient():
        leaf = x.detach().requires_grad_()
        return torch.autograd.grad(model(leaf, edge_index)[index, target], leaf)[0]

    def forward():
        return model(x.detach().requires_grad_(), edge_index)

    def prediction():
        with torch.no_grad():
            return model(x, edge_index)

    def bare_mode_forward():
        with BareMode():
            return model(x.detach().requires_grad_(), edge_index)

    def mode_forward(fast=True, backward=False):
        leaf = x.detach().clone().requires_grad_()
        mode = RelevanceMode(composite, model, fast=fast)
        with mode:
            mode.mark(leaf)
            out = model(leaf, edge_index)
        if not backward:
            return out
        start = torch.zeros_like(out)
        start[index, target] = out[index, target].detach()
        return torch.autograd.grad(out, leaf, start)[0]

    replay_ex = {name: Explainer(model, algorithm=LRPExplainer(replay=True, compile=False), explanation_type="model",
                                 node_mask_type="attributes", edge_mask_type=None, model_config=MODEL_CONFIG,
                                 one_pass=None if name == "lrp_replay" else False)
                for name in ("lrp_replay", "lrp_replay_two_passes")}
    compiled_ex = Explainer(model, algorithm=LRPExplainer(), explanation_type="model", node_mask_type="attributes",
                            edge_mask_type=None, model_config=MODEL_CONFIG)
    compiled_algorithm = compiled_ex.algorithm
    for _ in range(replay.RECORD_ON + 1):  # the call after the plan's recording records the program
        compiled_ex(x, edge_index, index=index)
    assert compiled_ex(x, edge_index, index=index).replay_reason == "compiled"
    assert compiled_algorithm(model, x, edge_index, target=target_t, index=index_t).replay_reason == "compiled"
    replay_algorithm = replay_ex["lrp_replay"].algorithm
    for e in replay_ex.values():  # the phases below replay (the second call of a signature records)
        for _ in range(replay.RECORD_ON):
            e(x, edge_index, index=index)
        assert e(x, edge_index, index=index).replayed
    plan = {}

    def replay_forward(backward=False, reuse=True):
        leaf = x.detach().clone().requires_grad_()
        mode, _, out, replayed, reason = replay.forward(
            model, lambda m, r: (m(composite, model), None), [leaf, edge_index], [leaf], {},
            ("profile", id(composite)), lambda: model(leaf, edge_index), reuse=reuse)
        replay.keep(mode)
        plan["replayed"] = replayed
        if not backward:
            return out
        start = torch.zeros_like(out)
        start[index, target] = out[index, target].detach()
        return torch.autograd.grad(out, leaf, start)[0]

    return {
        "gradient": gradient, "forward": forward, "prediction": prediction, "bare_mode_forward": bare_mode_forward,
        "mode_forward": mode_forward, "mode_forward_reference": lambda: mode_forward(fast=False),
        "mode_forward_backward": lambda: mode_forward(backward=True),
        "lrp_algorithm": lambda: algorithm(model, x, edge_index, target=target_t, index=index_t).node_mask,
        "lrp": lambda: ex["lrp"](x, edge_index, index=index).node_mask,
        "lrp_two_passes": lambda: ex["lrp_two_passes"](x, edge_index, index=index).node_mask,
        "saliency": lambda: ex["saliency"](x, edge_index, index=index).node_mask,
        "replay_forward": replay_forward, "replay_forward_backward": lambda: replay_forward(backward=True),
        "replay_all_steps_forward_backward": lambda: replay_forward(backward=True, reuse=False),
        "lrp_algorithm_replay": lambda: replay_algorithm(model, x, edge_index, target=target_t,
                                                         index=index_t).node_mask,
        "lrp_replay": lambda: replay_ex["lrp_replay"](x, edge_index, index=index).node_mask,
        "lrp_replay_two_passes": lambda: replay_ex["lrp_replay_two_passes"](x, edge_index, index=index).node_mask,
        "lrp_algorithm_compiled": lambda: compiled_algorithm(model, x, edge_index, target=target_t,
                                                             index=index_t).node_mask,
        "lrp_compiled": lambda: compiled_ex(x, edge_index, index=index).node_mask,
    }


class _Count(TorchDispatchMode):
    """Counts the ATen operations dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def operations(fn) -> int:
    """How many ATen operations one call of ``fn`` dispatches."""
    with _Count() as counter:
        fn()
    return counter.count


def measure(nodes: int, rounds: int) -> dict:
    calls = phases(nodes)
    for fn in calls.values():  # warm-up
        fn()
    ops = {name: operations(fn) for name, fn in calls.items()}
    wall = {name: [] for name in calls}
    faults = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - start)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    base = statistics.median(wall["gradient"])
    row = {"nodes": nodes, "rounds": rounds, "phases": {}}
    for name, times in wall.items():
        row["phases"][name] = {"median_seconds": statistics.median(times),
                               "ratio_to_gradient": statistics.median(times) / base,
                               "paired_ratio_to_gradient": statistics.median(
                                   t / g for t, g in zip(times, wall["gradient"])),
                               "median_page_faults": statistics.median(faults[name]),
                               "aten_operations": ops[name]}
    return row


def top_functions(nodes: int, calls: int = 100, limit: int = 25) -> str:
    """cProfile's top functions by own time over ``calls`` explanations through ``Explainer``."""
    explain = phases(nodes)["lrp"]
    explain()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        explain()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[25, 700])
    p.add_argument("--rounds", type=int, default=200, help="rounds at 25 nodes (fewer on larger graphs)")
    p.add_argument("--cprofile", action="store_true", help="print cProfile's top functions too")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    machine = results_file.machine_info()
    rows = []
    for n in args.sizes:
        row = measure(n, max(20, round(args.rounds * min(1.0, 700 / max(n, 700)))))
        rows.append(row)
        print(f"\n{n:,} nodes, {row['rounds']} rounds (median ms; ratio to the gradient, paired)")
        for name, ph in row["phases"].items():
            print(f"  {name:34s} {ph['median_seconds'] * 1e3:8.3f}  {ph['ratio_to_gradient']:5.2f}x "
                  f"({ph['paired_ratio_to_gradient']:.2f}x)  {ph['median_page_faults']:8.0f} page faults  "
                  f"{ph['aten_operations']:5d} operations")
        if args.cprofile:
            print(top_functions(n))
    if not args.no_write:
        malloc = {k: os.environ[k] for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_") if k in os.environ}
        path = results_file.write_results("profile_explain_malloc" if malloc else "profile_explain", rows, {
            "sizes": args.sizes, "edges_per_node": 10, "threads": 1, "dtype": "float32",
            "malloc_env": malloc,
            "load_average_1min_start": machine.get("load_average_1min"),
            "load_average_1min_end": results_file.machine_info().get("load_average_1min")})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
