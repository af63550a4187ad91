"""Convolutions: relevance backward against the gradient, and lrp_lib against Captum's LRP.

    python benchmarks/bench_conv.py                # batch of 256 digits, 20 repeats
    python benchmarks/bench_conv.py --repeats 5    # a quick run

The residual CNN of the chapter "Convolutions and skip connections" (a 3x3 convolution to 24
channels, a residual block at 8x8, average pooling, a residual block at 4x4, global average
pooling, a dense layer; untrained, seeded, float32) on a batch of 256 of scikit-learn's 8x8
digits, CPU.

1. Residual CNN: forward + backward of the ordinary network (the gradient of the logits) against
   forward + backward of the relevance network (``model(x, rule)``) for the epsilon, gamma and
   z+ rules.
2. The same CNN without skip connections (Captum cannot treat them): ``captum.attr.LRP``'s
   ``attribute`` (epsilon rule; it runs two forwards and one backward) against lrp_lib's
   epsilon forward + backward.

Time: the variants alternate in one process, ``--repeats`` times each after a warm-up; the
table gives the median.  Memory, as in ``bench_graph.py``:

* saved bytes: the distinct storages autograd keeps for backward (inputs and parameters
  excluded), counted with ``torch.autograd.graph.saved_tensors_hooks``.  Captum keeps its
  activations in module attributes, outside autograd, so it gets no such figure.
* peak RSS: each variant runs once in a fresh subprocess; the peak resident set size
  (``VmHWM``) minus the resident size just before the forward (Linux).

Ratios are against the first row of each table.  The tables are printed and written to
``benchmarks/results/conv.json`` (see ``results_file.py``), which chapter 3 and the Performance
page render.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from lrp_lib.teach import ops
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.teach.ops import LostRelevanceWarning
from lrp_lib.teach.residual import ResidualBlock

import memory  # benchmarks/memory.py, beside this script
import results_file  # benchmarks/results_file.py


class ResidualCNN(nn.Module):
    """The chapter's network: ``forward(x)`` ordinary, ``forward(x, rule)`` relevance ops."""

    def __init__(self, channels=24, classes=10, skips=True):
        super().__init__()
        self.skips = skips
        self.stem = nn.Conv2d(1, channels, 3, padding=1)
        self.block1, self.block2 = ResidualBlock(channels), ResidualBlock(channels)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x, rule=None):
        if rule is None:
            h = self.block1(torch.relu(self.stem(x)))
            h = self.block2(F.avg_pool2d(h, 2))
            return self.fc(F.avg_pool2d(h, 4).flatten(1))
        eps = rules.Epsilon(1e-6)
        h = ops.relu(linear_maps.conv2d(x, self.stem.weight, self.stem.bias, padding=1, rule=rule))
        h = self.block1(h, rule=rule)
        h = self.block2(linear_maps.avg_pool2d(h, 2, rule=eps), rule=rule)
        return linear_maps.linear(linear_maps.avg_pool2d(h, 4, rule=eps).flatten(1), self.fc.weight, self.fc.bias, rule=eps)


class PlainCNN(nn.Module):
    """The same layers without skips, as modules Captum knows (one ReLU module per use)."""

    def __init__(self, channels=24, classes=10):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(1 if i == 0 else channels, channels, 3, padding=1) for i in range(5)])
        self.relus = nn.ModuleList([nn.ReLU() for _ in range(5)])
        self.pool1, self.pool2 = nn.AvgPool2d(2), nn.AvgPool2d(4)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x, rule=None):
        h = x
        for i in range(5):
            if i == 3:
                h = self.pool1(h) if rule is None else linear_maps.avg_pool2d(h, 2, rule=rule)
            c = self.convs[i]
            h = self.relus[i](c(h)) if rule is None else ops.relu(linear_maps.conv2d(h, c.weight, c.bias, padding=1, rule=rule))
        h = (self.pool2(h) if rule is None else linear_maps.avg_pool2d(h, 4, rule=rule)).flatten(1)
        return self.fc(h) if rule is None else linear_maps.linear(h, self.fc.weight, self.fc.bias, rule=rule)


VARIANTS = {  # name: (network, rule or None for the gradient, or "captum")
    "gradient": ("residual", None),
    "epsilon": ("residual", rules.Epsilon(1e-6)),
    "gamma": ("residual", rules.Gamma(0.25)),
    "z+": ("residual", rules.ZPlus()),
    "lrp_lib epsilon": ("plain", rules.Epsilon(1e-9)),
    "captum LRP": ("plain", "captum"),
}


def setup(batch: int):
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    images = torch.tensor(load_digits().images[:batch] / 16.0, dtype=torch.float32).unsqueeze(1)
    return {"residual": ResidualCNN().eval(), "plain": PlainCNN().eval()}, images


def run_once(models, images, name):
    """Forward and backward of one variant from the predicted logit; returns seconds."""
    network, rule = VARIANTS[name]
    model = models[network]
    x = images.clone().requires_grad_(True)
    t0 = time.perf_counter()
    if rule == "captum":
        from captum.attr import LRP

        with torch.no_grad():
            target = model(images).argmax(1)
        t0 = time.perf_counter()  # the target is given, as it would be for an explanation
        LRP(model).attribute(x, target=target)
    else:
        out = model(x, rule=rule)
        seed = F.one_hot(out.argmax(1), out.shape[1]).to(out.dtype)
        out.backward(seed if rule is None else seed * out.detach())
    elapsed = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    return elapsed


def saved_bytes(models, images, name) -> int | None:
    network, rule = VARIANTS[name]
    if rule == "captum":
        return None
    model = models[network]
    x = images.clone().requires_grad_(True)
    return memory.saved_bytes(lambda: model(x, rule=rule), [x, *model.parameters()])


def rss_child(args, name) -> int:
    models, images = setup(args.batch)
    if VARIANTS[name][1] == "captum":
        from captum.attr import LRP  # noqa: F401  (imported before measuring)
    before = memory.status_bytes("VmRSS")
    run_once(models, images, name)
    return memory.status_bytes("VmHWM") - before


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rss-child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # LostRelevanceWarning on an exact 0, Captum's and tqdm's notices

    if args.rss_child:
        print(json.dumps(rss_child(args, args.rss_child)))
        return

    models, images = setup(args.batch)
    saved = {name: saved_bytes(models, images, name) for name in VARIANTS}
    times = {name: [] for name in VARIANTS}
    for name in VARIANTS:  # warm-up
        run_once(models, images, name)
    for _ in range(args.repeats):
        for name in VARIANTS:
            times[name].append(run_once(models, images, name))
    rss = {}
    for name in VARIANTS:
        cmd = [sys.executable, __file__, "--rss-child", name, "--batch", str(args.batch), "--threads", str(args.threads)]
        rss[name] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    print(f"batch {args.batch} digits (8x8), float32, CPU, {args.threads} thread(s), median of {args.repeats}")
    results = []
    for table, title, names in TABLES:
        base = names[0]
        print(f"\n{title}\n")
        print("| variant | forward + backward (ms) | time ratio | saved for backward (KiB) | saved ratio | peak RSS (MiB) | RSS ratio |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        t0, s0, r0 = statistics.median(times[base]), saved[base], rss[base]
        for name in names:
            t, s, r = statistics.median(times[name]), saved[name], rss[name]
            results.append({
                "table": table, "variant": name, "baseline": base,
                "time_ms": t * 1e3, "time_ratio": t / t0,
                "saved_kib": None if s is None else s / 1024, "saved_ratio": None if s is None else s / s0,
                "peak_rss_mib": r / 2**20, "rss_ratio": r / r0,
            })
            s_text = ("-", "-") if s is None else (f"{s / 1024:.0f}", f"{s / s0:.2f}x")
            print(f"| {name} | {t * 1e3:.1f} | {t / t0:.2f}x | {s_text[0]} | {s_text[1]} | {r / 2**20:.1f} | {r / r0:.2f}x |")
    path = results_file.write_results("conv", results, {
        "batch": args.batch, "repeats": args.repeats, "threads": args.threads, "dtype": "float32", "device": "cpu"})
    print(f"\nwrote {path}")


#: The two tables: (key in the results file, title, variants; ratios are against the first).
TABLES = [("residual", "Residual CNN: relevance vs gradient", ["gradient", "epsilon", "gamma", "z+"]),
          ("captum", "CNN without skips: lrp_lib vs Captum", ["lrp_lib epsilon", "captum LRP"])]

if __name__ == "__main__":
    main()
