"""Relevance backward vs the plain autograd backward of the same computation.

    python benchmarks/bench_ops.py            # the full sizes (writes results/ops.json)
    python benchmarks/bench_ops.py --quick    # small sizes, a smoke test (writes no results file)

For each case the forward is run once, then the backward is timed (median of --repeat runs,
relevance and gradient interleaved in one process, so both see the same machine load).
Peak memory is measured separately, one fresh subprocess per case and mode: after the inputs
exist, the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``), one forward + backward
runs, and the growth of the peak resident set (VmHWM) over the resident set before is reported.
That counts everything the computation allocates (saved tensors and temporaries), which is what
a user runs out of.  (Linux only; elsewhere the memory columns are left empty.)

The figures are printed as a table and written to ``benchmarks/results/ops.json`` (see
``results_file.py``), which the book's Performance page renders.

Cases: ``linear_eps`` at N = 100,000, in = out = 64 against ``torch.nn.functional.linear``;
the three scatter ops on 1,000,000 elements against the plain (gradient) scatters of
``lrp_lib.teach.scatter``; and the epsilon rule of the original notebook *Hijacking autograd for
LRP* (chapter 1), which materialises an N x in x out tensor, against ``linear_eps`` at a size where it fits.

Width sweep (rows with ``"group": "width_sweep"``): ``linear_eps`` against ``F.linear`` (weights
frozen, the gradient to the input) at in = out = 16, 32, ..., 1024, with N = 100,000 rows up to 64
features and N * width = 6,553,600 elements above.  Per width: the forward + backward and the
backward ratios (median of --repeat interleaved runs) and the bytes that autograd saves for the
backward (``memory.saved_bytes``: distinct storages, the weight left out, the input x counted).
With frozen weights the gradient to x saves nothing per row (its backward is ``R @ W``), so the
saved-bytes ratio is taken against the gradient of a trainable weight, which keeps x, as in
training.  The epsilon rule ``R_x = x * ((R / (z + eps sign z)) @ W)`` needs x and z: ``linear_eps``
keeps x and recomputes z in backward (a second matrix product, the default ``recompute=True``);
``linear_eps(..., recompute=False)``, which keeps z too (the design before), takes its turn in the
same rounds, in the ``saved_output_*`` columns.  The other cases run the default.

Floor (rows with ``"group": "floor"``, ``--only-floor`` prints them alone): ``linear_eps`` at
N = 100,000, 64 -> 64, pass by pass against the gradient, with the bytes each pass reads and writes,
the count of passes and matrix products per method, the bytes to main memory of the blocked
backward, the measured ratio (wall clock and CPU time of the thread) and the time of the matrix
products alone (see ``floor_rows``).
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

from lrp_lib.core.stabilizer import stabilize
from lrp_lib.teach import ops, scatter

import memory  # benchmarks/memory.py, beside this script
import results_file  # benchmarks/results_file.py


class OriginalLinearEpsilon(torch.autograd.Function):
    """The original notebook's epsilon rule, for comparison: N x in x out contributions."""

    eps = 1e-6

    @staticmethod
    def forward(ctx, x, weight):
        Z = weight.t()[None, :, :] * x[:, :, None]
        Zs = Z.sum(dim=1, keepdim=True)
        ctx.save_for_backward(Z, Zs)
        return Zs.squeeze(dim=1)

    @staticmethod
    def backward(ctx, rel_out):
        Z, Zs = ctx.saved_tensors
        eps = torch.where(Zs >= 0, OriginalLinearEpsilon.eps, -OriginalLinearEpsilon.eps)
        return (rel_out[:, None, :] * Z / (Zs + eps)).sum(dim=2), None  # not in place, unlike the original


#: What each case compares: (the "relevance" columns, the "gradient" columns).
COMPARES = {
    "linear_eps": ("lrp_lib.teach.ops.linear_eps", "torch.nn.functional.linear"),
    "linear_eps_wide": ("lrp_lib.teach.ops.linear_eps", "torch.nn.functional.linear"),
    "scatter_add": ("lrp_lib.teach.ops.scatter_add", "lrp_lib.teach.scatter.scatter_add"),
    "scatter_mean": ("lrp_lib.teach.ops.scatter_mean", "lrp_lib.teach.scatter.scatter_mean"),
    "scatter_max": ("lrp_lib.teach.ops.scatter_max", "lrp_lib.teach.scatter.scatter_max"),
    "original_eps": ("epsilon rule with N x in x out contributions (original notebook)", "lrp_lib.teach.ops.linear_eps"),
}


def make_case(name: str, quick: bool):
    """Return (description, input, {mode: forward function of one leaf tensor})."""
    g = torch.Generator().manual_seed(0)
    n_lin = 2_000 if quick else 100_000
    n_orig = 1_000 if quick else 20_000
    n_scat = 10_000 if quick else 1_000_000
    groups = n_scat // 10

    if name == "linear_eps":
        x = torch.randn(n_lin, 64, generator=g)
        w = torch.randn(64, 64, generator=g) / 8
        return f"linear_eps, N={n_lin:,}, 64->64", x, {
            "relevance": lambda t: ops.linear_eps(t, w),
            "gradient": lambda t: F.linear(t, w),
        }
    if name == "linear_eps_wide":
        n = 1_000 if quick else 20_000
        x = torch.randn(n, 512, generator=g)
        w = torch.randn(512, 512, generator=g) / 23
        return f"linear_eps, N={n:,}, 512->512", x, {
            "relevance": lambda t: ops.linear_eps(t, w),
            "gradient": lambda t: F.linear(t, w),
        }
    if name == "original_eps":
        x = torch.randn(n_orig, 64, generator=g)
        w = torch.randn(64, 64, generator=g) / 8
        return f"original 3-D epsilon vs linear_eps, N={n_orig:,}", x, {
            "relevance": lambda t: OriginalLinearEpsilon.apply(t, w),  # "relevance" = the original's
            "gradient": lambda t: ops.linear_eps(t, w),  # compared against linear_eps here
        }
    x = torch.rand(n_scat, generator=g) + 0.1
    index = torch.randint(0, groups, (n_scat,), generator=g)
    plain = {"scatter_add": scatter.scatter_add, "scatter_mean": scatter.scatter_mean,
             "scatter_max": lambda s, i, d, n: scatter.scatter_max(s, i, d, n)[0]}[name]
    relevance = {"scatter_add": ops.scatter_add, "scatter_mean": ops.scatter_mean,
                 "scatter_max": lambda s, i, d, n: ops.scatter_max(s, i, d, n)[0]}[name]
    return f"{name}, {n_scat:,} elements -> {groups:,} groups", x, {
        "relevance": lambda t: relevance(t, index, 0, groups),
        "gradient": lambda t: plain(t, index, 0, groups),
    }


WIDTHS = [16, 32, 64, 128, 256, 512, 1024]


def sweep_rows(widths, repeat: int, quick: bool) -> list[dict]:
    """The width sweep of ``linear_eps`` (see the module's docstring)."""
    rows = []
    for width in widths:
        n = min(2_000 if quick else 100_000, (65_536 if quick else 6_553_600) // width)
        g = torch.Generator().manual_seed(width)
        x = torch.randn(n, width, generator=g)
        w = torch.randn(width, width, generator=g) / width ** 0.5
        fns = {"relevance": lambda t: ops.linear_eps(t, w), "gradient": lambda t: F.linear(t, w),
               "saved_output": lambda t: ops.linear_eps(t, w, recompute=False)}
        for fn in fns.values():
            timed(fn, x)
        runs = {mode: [] for mode in fns}
        for _ in range(repeat):
            for mode, fn in fns.items():
                runs[mode].append(timed(fn, x))
        bwd = {m: statistics.median(r[0] for r in runs[m]) * 1e3 for m in runs}
        both = {m: statistics.median(r[1] for r in runs[m]) * 1e3 for m in runs}
        leaf = x.clone().requires_grad_()
        w_train = w.clone().requires_grad_()
        saved = {
            "relevance": memory.saved_bytes(lambda: ops.linear_eps(leaf, w), [w]),
            "gradient_frozen": memory.saved_bytes(lambda: F.linear(leaf, w), [w]),
            "gradient_trainable": memory.saved_bytes(lambda: F.linear(leaf, w_train), [w_train]),
            "saved_output": memory.saved_bytes(lambda: ops.linear_eps(leaf, w, recompute=False), [w]),
        }
        rows.append({
            "case": f"linear_eps_width_{width}", "group": "width_sweep", "width": width, "rows": n,
            "description": f"linear_eps, N={n:,}, {width}->{width}",
            "relevance": COMPARES["linear_eps"][0], "baseline": COMPARES["linear_eps"][1],
            "relevance_backward_ms": bwd["relevance"], "gradient_backward_ms": bwd["gradient"],
            "backward_ratio": bwd["relevance"] / bwd["gradient"],
            "relevance_fwd_bwd_ms": both["relevance"], "gradient_fwd_bwd_ms": both["gradient"],
            "fwd_bwd_ratio": both["relevance"] / both["gradient"],
            "relevance_saved_bytes": saved["relevance"],
            "gradient_saved_bytes_frozen": saved["gradient_frozen"],
            "gradient_saved_bytes_trainable": saved["gradient_trainable"],
            "saved_bytes_ratio": saved["relevance"] / saved["gradient_trainable"],
            # the previous design (z saved in forward), measured in the same rounds
            "saved_output_backward_ms": bwd["saved_output"], "saved_output_fwd_bwd_ms": both["saved_output"],
            "saved_output_backward_ratio": bwd["saved_output"] / bwd["gradient"],
            "saved_output_fwd_bwd_ratio": both["saved_output"] / both["gradient"],
            "saved_output_saved_bytes": saved["saved_output"],
            "saved_output_saved_bytes_ratio": saved["saved_output"] / saved["gradient_trainable"],
        })
        r = rows[-1]
        print(f"| {width} | {n:,} | {r['fwd_bwd_ratio']:.2f} | {r['backward_ratio']:.2f} | "
              f"{both['relevance']:.1f} | {both['gradient']:.1f} | {r['saved_bytes_ratio']:.2f} | "
              f"{r['saved_output_fwd_bwd_ratio']:.2f} | {r['saved_output_saved_bytes_ratio']:.2f} |", flush=True)
    return rows


def floor_rows(repeat: int, quick: bool) -> list[dict]:
    """The floor of ``linear_eps`` at N = 100,000, 64 -> 64 (rows with ``"group": "floor"``).

    Each pass of the two forward + backward computations is timed on its own (median of
    ``repeat`` interleaved rounds, each pass allocating its result where the op does), with the
    bytes it reads and writes and its multiply-adds.  One row per pass, then one row per method
    (the gradient, ``linear_eps`` and ``linear_eps(recompute=False)``) with its count of passes,
    its bytes, the sum of its passes' times, its measured forward + backward (the same rounds,
    also in CPU time of the thread, which a loaded machine does not stretch) and the minor page
    faults of one run (a fresh allocation of 25.6 MB that the C library has returned to the
    system is faulted in page by page).  The ``fused`` estimate is the time of the matrix products
    alone: what a kernel that ran the element-wise passes inside the products would need.

    The pass rows time each pass over whole N-row tensors, as a backward without blocks would
    run it (``bytes_moved``: every pass reading and writing main memory).  ``linear_eps`` runs
    its backward over blocks of rows that stay in the cache, so its traffic to main memory
    (``bytes_memory``) is that of the forward and the seed plus, in backward, x and R read and
    R_x written (and z read, with ``recompute=False``); the gradient's backward reads R and
    writes its result.
    """
    import resource

    n, f = (2_000 if quick else 100_000), 64
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, f, generator=g)
    w = torch.randn(f, f, generator=g) / 8
    rel = torch.ones(n, f)
    eps = 1e-6
    z = F.linear(x, w)
    d = stabilize(z, eps)
    share = rel / d
    t = share @ w
    scratch = torch.empty_like(z)
    eps_t = z.new_tensor(eps)
    size = n * f * x.element_size()  # bytes of one N x 64 tensor (x, z, R, the share, the result)
    mm = 2 * n * f * f  # floating-point operations of one matrix product
    grad, lrp, kept = "gradient", "linear_eps", "linear_eps_recompute_false"
    every = (grad, lrp, kept)
    passes = [  # (pass, function, bytes read, bytes written, flops, the methods that run it)
        ("forward: z = x W^T (matrix product)", lambda: F.linear(x, w), size, size, mm, every),
        ("seed: R = ones_like(z)", lambda: torch.ones_like(z), 0, size, 0, every),
        ("gradient backward: R W (matrix product)", lambda: rel @ w, size, size, mm, (grad,)),
        ("recompute z = x W^T (matrix product)", lambda: F.linear(x, w), size, size, mm, (lrp,)),
        ("stabiliser: copysign(eps, z)", lambda: torch.copysign(eps_t, z), size, size, 0, (lrp, kept)),
        ("stabiliser: d += z (in place)", lambda: torch.add(d, z, out=scratch), 2 * size, size, 0, (lrp, kept)),
        ("finite check of d (aminmax)", lambda: torch.aminmax(d), size, 0, 0, (lrp, kept)),
        ("share: d = R / d (in place)", lambda: torch.div(rel, d, out=scratch), 2 * size, size, 0, (lrp, kept)),
        ("share W (matrix product)", lambda: share @ w, size, size, mm, (lrp, kept)),
        ("product with x (in place)", lambda: torch.mul(t, x, out=scratch), 2 * size, size, 0, (lrp, kept)),
        ("finite check of the result (aminmax)", lambda: torch.aminmax(t), size, 0, 0, (lrp, kept)),
    ]
    whole = {grad: lambda v: F.linear(v, w), lrp: lambda v: ops.linear_eps(v, w, eps=eps),
             kept: lambda v: ops.linear_eps(v, w, eps=eps, recompute=False)}

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def run_whole(fn):
        leaf = x.clone().requires_grad_()
        before, cpu, start = faults(), time.thread_time(), time.perf_counter()
        out = fn(leaf)
        out.backward(torch.ones_like(out))
        return time.perf_counter() - start, time.thread_time() - cpu, faults() - before

    for _, fn, *_ in passes:
        fn()
    for fn in whole.values():
        run_whole(fn)
    pass_times = [[] for _ in passes]
    whole_runs = {m: [] for m in whole}
    for _ in range(repeat):
        for i, (_, fn, *_) in enumerate(passes):
            start = time.perf_counter()
            fn()
            pass_times[i].append(time.perf_counter() - start)
        for m, fn in whole.items():
            whole_runs[m].append(run_whole(fn))
    rows = []
    for (name, _, read, written, flops, methods), times in zip(passes, pass_times):
        rows.append({"case": "linear_eps_floor_pass", "group": "floor", "pass": name, "rows": n, "width": f,
                     "bytes_read": read, "bytes_written": written, "flops": flops, "methods": list(methods),
                     "ms": statistics.median(times) * 1e3})
    totals = {}
    for m in whole:
        mine = [r for r in rows if m in r["methods"]]
        runs = whole_runs[m]
        totals[m] = {
            "case": "linear_eps_floor_total", "group": "floor", "method": m, "rows": n, "width": f,
            "passes": len(mine), "matrix_products": sum(1 for r in mine if r["flops"]),
            "bytes_moved": sum(r["bytes_read"] + r["bytes_written"] for r in mine),
            # forward (x read, z written), seed, then the backward's N-row reads and writes
            "bytes_memory": 3 * size + {grad: 2, lrp: 3, kept: 4}[m] * size,
            "flops": sum(r["flops"] for r in mine),
            "sum_of_passes_ms": sum(r["ms"] for r in mine),
            "matrix_products_ms": sum(r["ms"] for r in mine if r["flops"]),
            "seed_ms": sum(r["ms"] for r in mine if r["pass"].startswith("seed")),
            "measured_fwd_bwd_ms": statistics.median(r[0] for r in runs) * 1e3,
            "measured_fwd_bwd_cpu_ms": statistics.median(r[1] for r in runs) * 1e3,
            "minor_page_faults": statistics.median(r[2] for r in runs),
        }
    base = totals[grad]
    for m, row in totals.items():
        row["measured_ratio"] = row["measured_fwd_bwd_ms"] / base["measured_fwd_bwd_ms"]
        row["measured_cpu_ratio"] = row["measured_fwd_bwd_cpu_ms"] / base["measured_fwd_bwd_cpu_ms"]
        row["sum_of_passes_ratio"] = row["sum_of_passes_ms"] / base["sum_of_passes_ms"]
        row["bytes_ratio"] = row["bytes_moved"] / base["bytes_moved"]
        row["bytes_memory_ratio"] = row["bytes_memory"] / base["bytes_memory"]
        # fused: the matrix products and the seed, every element-wise pass inside a product
        row["fused_ratio"] = ((row["matrix_products_ms"] + row["seed_ms"])
                              / (base["matrix_products_ms"] + base["seed_ms"]))
        rows.append(row)
    print("\nlinear_eps pass by pass (N={:,}, 64->64, median of {}):\n".format(n, repeat))
    print("| pass | MB read | MB written | ms | methods |\n|---|---|---|---|---|")
    for r in rows[:len(passes)]:
        print(f"| {r['pass']} | {r['bytes_read'] / 1e6:.1f} | {r['bytes_written'] / 1e6:.1f} | {r['ms']:.2f} | "
              f"{', '.join(r['methods'])} |")
    print("\n| method | passes | matrix products | MB moved by the passes | MB to memory, in blocks "
          "| sum of passes ms | measured ms | ratio | CPU ratio | bytes ratio | bytes to memory ratio "
          "| fused ratio | page faults |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows[len(passes):]:
        print(f"| {r['method']} | {r['passes']} | {r['matrix_products']} | {r['bytes_moved'] / 1e6:.1f} | "
              f"{r['bytes_memory'] / 1e6:.1f} | "
              f"{r['sum_of_passes_ms']:.1f} | {r['measured_fwd_bwd_ms']:.1f} | {r['measured_ratio']:.2f} | "
              f"{r['measured_cpu_ratio']:.2f} | {r['bytes_ratio']:.2f} | {r['bytes_memory_ratio']:.2f} | "
              f"{r['fused_ratio']:.2f} | "
              f"{r['minor_page_faults']:.0f} |", flush=True)
    return rows


CASES = ["linear_eps", "linear_eps_wide", "scatter_add", "scatter_mean", "scatter_max", "original_eps"]


def timed(fn, x) -> tuple[float, float]:
    """(backward seconds, forward + backward seconds) of one run."""
    leaf = x.clone().requires_grad_()
    start = time.perf_counter()
    out = fn(leaf)
    seed = torch.ones_like(out)
    middle = time.perf_counter()
    out.backward(seed)
    end = time.perf_counter()
    return end - middle, end - start


def memory_child(case: str, mode: str, quick: bool) -> None:
    _, x, fns = make_case(case, quick)
    leaf = x.clone().requires_grad_()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    before = memory.status_bytes("VmRSS")
    out = fns[mode](leaf)
    out.backward(torch.ones_like(out))
    print(json.dumps({"peak_mb": (memory.status_bytes("VmHWM") - before) / 2**20}))


def measure_memory(case: str, mode: str, quick: bool) -> float:
    cmd = [sys.executable, __file__, "--memory-child", case, mode] + (["--quick"] if quick else [])
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError:
        return float("nan")
    return json.loads(out.strip().splitlines()[-1])["peak_mb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1: on a shared, loaded machine, thread-pool "
                             "synchronisation adds a scheduler delay to every op and swamps the comparison)")
    parser.add_argument("--widths", type=int, nargs="+", default=WIDTHS, help="widths of the linear_eps sweep")
    parser.add_argument("--only-sweep", action="store_true", help="print the width sweep only (writes no results file)")
    parser.add_argument("--only-floor", action="store_true",
                        help="print the pass-by-pass account of linear_eps only (writes no results file)")
    parser.add_argument("--memory-child", nargs=2, metavar=("CASE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(*args.memory_child, args.quick)
        return

    warnings.simplefilter("ignore", ops.LostRelevanceWarning)  # empty scatter groups are expected
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, CPU, median of {args.repeat}\n")
    cols = ["case", "backward ratio", "fwd+bwd ratio", "relevance bwd ms", "gradient bwd ms",
            "relevance MiB", "gradient MiB", "memory ratio"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    results = []
    if args.only_floor:
        floor_rows(args.repeat, args.quick)
        return
    for case in ([] if args.only_sweep else CASES):
        desc, x, fns = make_case(case, args.quick)
        for fn in fns.values():  # warm-up
            timed(fn, x)
        runs = {mode: [] for mode in fns}
        for _ in range(args.repeat):
            for mode, fn in fns.items():
                runs[mode].append(timed(fn, x))
        bwd = {m: statistics.median(r[0] for r in runs[m]) * 1e3 for m in runs}
        both = {m: statistics.median(r[1] for r in runs[m]) * 1e3 for m in runs}
        mem = {m: measure_memory(case, m, args.quick) for m in fns}
        row = {
            "case": case, "description": desc,
            "relevance": COMPARES[case][0], "baseline": COMPARES[case][1],
            "relevance_backward_ms": bwd["relevance"], "gradient_backward_ms": bwd["gradient"],
            "backward_ratio": bwd["relevance"] / bwd["gradient"],
            "relevance_fwd_bwd_ms": both["relevance"], "gradient_fwd_bwd_ms": both["gradient"],
            "fwd_bwd_ratio": both["relevance"] / both["gradient"],
            "relevance_peak_mib": _finite(mem["relevance"]), "gradient_peak_mib": _finite(mem["gradient"]),
            "memory_ratio": _finite(mem["relevance"] / mem["gradient"]),
        }
        results.append(row)
        cells = [desc, f"{row['backward_ratio']:.2f}", f"{row['fwd_bwd_ratio']:.2f}",
                 f"{bwd['relevance']:.1f}", f"{bwd['gradient']:.1f}", f"{mem['relevance']:.0f}",
                 f"{mem['gradient']:.0f}", f"{mem['relevance'] / mem['gradient']:.2f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    print("\nLast row: the original notebook's N x in x out epsilon rule in the 'relevance' columns, "
          "linear_eps in the 'gradient' columns.")
    print("\nlinear_eps against F.linear (frozen weights) by width; saved bytes against a trainable weight's gradient\n")
    print("| width | N | fwd+bwd ratio | backward ratio | relevance fwd+bwd ms | gradient fwd+bwd ms | saved bytes ratio "
          "| z saved: fwd+bwd ratio | z saved: saved bytes ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    results += sweep_rows(args.widths, args.repeat, args.quick)
    if not args.only_sweep:
        results += floor_rows(args.repeat, args.quick)
    if args.quick or args.only_sweep:  # the book's figures stay those of a full run
        print("--quick/--only-sweep: benchmarks/results/ops.json left as it is")
        return
    path = results_file.write_results("ops", results, {
        "quick": args.quick, "repeat": args.repeat, "threads": args.threads, "widths": args.widths, "dtype": "float32", "device": "cpu"})
    print(f"wrote {path}")


def _finite(value: float):
    """JSON has no NaN: a memory figure that could not be measured is null."""
    return None if value != value else value

if __name__ == "__main__":
    main()
