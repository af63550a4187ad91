"""The coverage zoo explained by replay (``tests/explain/test_replay.py``): each case is recorded on its
inputs, then explained on perturbed inputs of the same signature by replay and by the mode."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_zoo_relevance as zoo  # noqa: E402
from make_zoo_relevance import RULES, bc  # noqa: E402

from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402


def perturbed(inputs: dict) -> dict:
    """The same signature, other values: every floating point tensor scaled and shifted (positive ones
    stay positive), the integer ones (edges, batch, types) kept."""
    g = torch.Generator().manual_seed(1)

    def change(t):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        noise = torch.rand(t.shape, generator=g, dtype=t.dtype)
        return t * (1.1 + 0.2 * noise) if bool((t > 0).all()) else t * 1.1 + 0.1 * (noise - 0.5)
    return {k: ({a: change(b) for a, b in v.items()} if isinstance(v, dict) else change(v)) for k, v in inputs.items()}


def explainer(model, level, rule, replay):
    return Explainer(model, algorithm=LRPExplainer(rule=RULES[rule], mask="relevance", replay=replay),
                     explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="regression", task_level=level, return_type="raw"))


def call(ex, inputs, level):
    return ex(inputs["x"], inputs["edge_index"], index=None if level == "graph" else bc.NODE, **bc._kwargs(inputs))


def replay_case(spec, level, edge_attr, rule):
    """(record by replay, record by the mode, replayed?, reason) on the perturbed inputs; None: the zoo skips it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, inputs = bc.build_case(spec, level, edge_attr)
            bc.reference(model, inputs, level)
        except Exception:  # noqa: BLE001
            return None
    fast, mode = explainer(model, level, rule, True), explainer(model, level, rule, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call(fast, inputs, level)  # records
        except Exception:  # noqa: BLE001 - the mode refuses it: compared below
            pass
    new = perturbed(inputs)
    seen = {}

    def by_replay():
        out = call(fast, new, level)
        seen.update(replayed=getattr(out, "replayed", None), reason=getattr(out, "replay_reason", None))
        return out
    got = zoo._run(by_replay)
    want = zoo._run(lambda: call(mode, new, level))
    return got, want, seen.get("replayed"), seen.get("reason")


def keys():
    return [(f"{spec.name}|{level}|{ea}|{rule}", (spec, level, ea, rule)) for spec, level, ea in zoo.ZOO for rule in RULES]


if __name__ == "__main__":
    from collections import Counter
    torch.set_num_threads(1)
    stats, bad = Counter(), []
    for key, case in keys():
        r = replay_case(*case)
        if r is None:
            stats["skipped"] += 1
            continue
        got, want, replayed, reason = r
        if got != want:
            bad.append(key)
            print("DIFFER", key, replayed, reason, flush=True)
        if not replayed and reason and reason.startswith("not"):
            print("NOT", key, reason, flush=True)
        stats[reason if not replayed else "replayed"] += 1
    for k, v in stats.most_common():
        print(v, k)
    print("differ:", len(bad))
