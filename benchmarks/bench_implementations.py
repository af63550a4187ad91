"""Three implementations of LRP on one MLP: time side by side, as ratios.

    python benchmarks/bench_implementations.py [--batch 1024] [--width 512] [--layers 4] [--repeats 25]

The MLP has ``layers`` bias-free linear layers of ``width`` x ``width`` with ReLU between them,
seeded random weights, float32.  Each row times one full relevance pass (forward included,
since every implementation needs one) for the same input and the same output relevance:

* plain gradient: ``torch`` forward + ``backward`` (the baseline);
* lrp_lib autograd trick: ``ops.linear_eps`` (or ``linear_maps.linear`` for alpha-beta) / ``ops.relu``
  forward + ``backward``;
* relprop hooks: ``lrp_lib.teach.relprop.Sequential`` forward (hooks store inputs) + ``relprop``;
* JAX / Flax eager and ``jax.jit``-compiled: ``lrp_lib.teach.jax_lrp.MLP.relprop`` (forward inside).

The same rows follow for the alpha-beta rule (alpha=1, beta=0).
Repetitions are interleaved (one of each in turn) and the median is reported.  Before timing,
the script checks that the implementations agree on this input.  The table is printed and
written to ``benchmarks/results/implementations.json`` (see ``results_file.py``), which chapter 4
and the Performance page render.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lrp_lib.teach import ops  # noqa: E402
from lrp_lib.teach import relprop as rp  # noqa: E402
from lrp_lib.core import rules  # noqa: E402
from lrp_lib.teach import linear_maps  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file  # noqa: E402  (benchmarks/results_file.py)


def build(batch, width, layers, seed=0):
    gen = torch.Generator().manual_seed(seed)
    Ws = [torch.randn(width, width, generator=gen) / width ** 0.5 for _ in range(layers)]
    x = torch.randn(batch, width, generator=gen)
    return Ws, x


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--repeats", type=int, default=25)
    p.add_argument("--threads", type=int, default=1,
                   help="CPU cores for the whole process (default 1, as the other benchmarks): torch's "
                        "intra-op threads, and the process is pinned to that many cores so that JAX's XLA "
                        "backend, which starts its own thread pool, gets no more")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    pinned = None
    if hasattr(os, "sched_setaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        if args.threads < len(allowed):
            pinned = allowed[-args.threads:]
            os.sched_setaffinity(0, pinned)

    import jax
    import jax.numpy as jnp

    from lrp_lib.teach import jax_lrp as jl

    Ws, x = build(args.batch, args.width, args.layers)

    def forward_plain(t):
        for k, W in enumerate(Ws):
            t = t @ W.T
            t = t.clamp(min=0) if k < len(Ws) - 1 else t
        return t

    with torch.no_grad():
        out = forward_plain(x)
    R = out * (out == out.max(dim=1, keepdim=True).values)  # explain the winning class

    def plain_gradient():
        leaf = x.clone().requires_grad_()
        forward_plain(leaf).backward(R)
        return leaf.grad

    def autograd_trick():
        leaf = x.clone().requires_grad_()
        t = leaf
        for k, W in enumerate(Ws):
            t = ops.linear_eps(t, W, eps=1e-6)
            t = ops.relu(t) if k < len(Ws) - 1 else t
        t.backward(R)
        return leaf.grad

    def autograd_trick_alpha1_beta0():
        leaf = x.clone().requires_grad_()
        t = leaf
        for k, W in enumerate(Ws):
            t = linear_maps.linear(t, W, rule=rules.AlphaBeta(alpha=1.0, beta=0.0))
            t = ops.relu(t) if k < len(Ws) - 1 else t
        t.backward(R)
        return leaf.grad

    layers = []
    for k, W in enumerate(Ws):
        layer = rp.Linear(args.width, args.width, bias=False)
        with torch.no_grad():
            layer.weight.copy_(W)
        layers += [layer] + ([rp.ReLU()] if k < len(Ws) - 1 else [])
    net = rp.Sequential(*layers)

    def hooks(**rule):
        with torch.no_grad():
            net(x)
        return net.relprop(R, **rule)

    model = jl.MLP(features=[args.width] * args.layers, use_bias=False)
    params = {"params": {f"layers_{2 * k}": {"kernel": jnp.asarray(W.T.numpy())} for k, W in enumerate(Ws)}}
    xj, Rj = jnp.asarray(x.numpy()), jnp.asarray(R.numpy())

    def jax_eager(**rule):
        return model.apply(params, Rj, xj, method=jl.MLP.relprop, **rule).block_until_ready()

    jitted = {}

    def jax_jit(**rule):
        key = tuple(sorted(rule.items()))
        if key not in jitted:
            jitted[key] = jax.jit(lambda p, r, t: model.apply(p, r, t, method=jl.MLP.relprop, **rule))
        return jitted[key](params, Rj, xj).block_until_ready()

    eps = dict(rule="epsilon", eps=1e-6)
    ab = dict(rule="alpha_beta", alpha=1.0, beta=0.0)
    rows = [
        ("plain gradient (torch)", plain_gradient),
        ("epsilon: lrp_lib autograd trick", autograd_trick),
        ("epsilon: relprop hooks", lambda: hooks(**eps)),
        ("epsilon: JAX/Flax eager", lambda: jax_eager(**eps)),
        ("epsilon: JAX/Flax jit", lambda: jax_jit(**eps)),
        ("alpha=1, beta=0: lrp_lib autograd trick (linear_maps.linear)", autograd_trick_alpha1_beta0),
        ("alpha=1, beta=0: relprop hooks", lambda: hooks(**ab)),
        ("alpha=1, beta=0: JAX/Flax eager", lambda: jax_eager(**ab)),
        ("alpha=1, beta=0: JAX/Flax jit", lambda: jax_jit(**ab)),
    ]

    # Accuracy first (and warm-up: jit compiles here).  Each float32 result is compared with the
    # same rule computed in float64; the epsilon rule with a small epsilon is ill-conditioned where
    # some z_k is near zero, so float32 results differ from it, and from each other, by up to
    # about 1% of the largest relevance.  The tests check the agreement to 1e-6 in float64.
    Ws64, x64, R64 = [W.double() for W in Ws], x.double(), R.double()

    def float64_relevance(rule):
        layers64 = []
        for k, W in enumerate(Ws64):
            layer = rp.Linear(args.width, args.width, bias=False, dtype=torch.float64)
            with torch.no_grad():
                layer.weight.copy_(W)
            layers64 += [layer] + ([rp.ReLU()] if k < len(Ws) - 1 else [])
        net64 = rp.Sequential(*layers64)
        net64(x64)
        return net64.relprop(R64, **rule)

    reference = {"epsilon": float64_relevance(eps), "alpha": float64_relevance(ab)}
    deviation = {}
    for name, fn in rows[1:]:
        got = fn()
        got = (got if isinstance(got, torch.Tensor) else torch.from_numpy(np.array(got))).double()
        ref = reference[name.split(":")[0].split("=")[0]]
        deviation[name] = float((got - ref).abs().max() / ref.abs().max())
        assert deviation[name] < 5e-2, f"{name} differs from float64 by {deviation[name]:.2e}"

    times = {name: [] for name, _ in rows}
    for _ in range(args.repeats):
        for name, fn in rows:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    base, trick = median[rows[0][0]], median[rows[1][0]]

    print(f"MLP: {args.layers} bias-free layers of {args.width}, ReLU, batch {args.batch}, float32, "
          f"median of {args.repeats}; torch {torch.__version__} ({torch.get_num_threads()} threads), jax {jax.__version__}")
    print()
    print("| implementation | time (ms) | / plain gradient | / lrp_lib autograd trick | max deviation from float64 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    results = []
    for (name, _), (rule, implementation) in zip(rows, KEYS):
        t = median[name]
        results.append({"label": name, "rule": rule, "implementation": implementation, "time_ms": 1e3 * t,
                        "ratio_to_gradient": t / base, "ratio_to_autograd_trick": t / trick,
                        "max_deviation_float64": deviation.get(name)})
        dev = f"{deviation[name]:.1e}" if name in deviation else "-"
        print(f"| {name} | {1e3 * t:.1f} | {t / base:.2f} | {t / trick:.2f} | {dev} |")
    print()
    print("max deviation: largest |float32 - float64| over the batch, relative to the largest |float64| relevance")
    path = results_file.write_results("implementations", results, {
        "batch": args.batch, "width": args.width, "layers": args.layers, "repeats": args.repeats,
        "threads": args.threads, "pinned_cpus": pinned, "jax": jax.__version__, "dtype": "float32", "device": "cpu"})
    print(f"wrote {path}")


#: (rule, implementation) of each row of ``rows`` in ``main``, in the same order.
KEYS = [("gradient", "plain gradient")] + [
    (rule, impl) for rule in ("epsilon", "alpha1_beta0")
    for impl in ("autograd trick", "relprop hooks", "JAX/Flax eager", "JAX/Flax jit")]

if __name__ == "__main__":
    main()
