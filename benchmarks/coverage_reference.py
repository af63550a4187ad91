"""Today's relevance of every row of the coverage benchmark, written down so that a later mechanism can
be held to it (``tests/explain/test_coverage_reference.py``).

    PYTHONPATH=. python benchmarks/coverage_reference.py [--out FILE] [--same-as FILE] [--commit C]

Goes over the rows of ``benchmarks/bench_coverage.py`` (``ALL``: every layer, aggregation, operation,
model and heterogeneous model of its tables, at each task level, with and without ``edge_attr``),
builds each with the benchmark's own builder (:func:`bench_coverage.build_case`: float64, biases zero,
eval mode) and explains it with the benchmark's own checker (:func:`bench_coverage.check`, through
PyG's ``Explainer``), in two variants:

* ``lrp0``: the benchmark's explanation as it is, ``LRPExplainer(rule=Epsilon(0.0), mask="relevance")``
  with the biases zero;
* ``zplus``: the library's default explainer, ``LRPExplainer()`` (z+ on every weight, mask ``abs``),
  after every bias (each parameter whose name ends in ``bias``, as
  :func:`bench_coverage.zero_biases` finds them) is filled with ``0.1 * randn`` from a generator seeded
  by the row (:func:`fill_biases`), so that ``bias_relevance`` is not trivially zero and the z+ path is
  pinned too.

A row is stored when its ``lrp0`` explanation is ``ok`` or ``wrong`` (the status and the reasons are
kept; a wrong row's values are today's values all the same).  A row the benchmark ``refused`` with an
edge mask but explains without one (its ``without_edge_mask``) is stored with ``edge_mask_type``
None: its node relevance only.  Skipped and crashed rows, and the ``zplus`` variant of a row that it
refuses, are listed under ``not_stored`` with the reason.

For each stored variant: ``output`` (the explained value of the unmodified model: the sum of both
graphs' outputs, or node ``NODE``'s output; a float), and the float64 tensors ``node_relevance``
(the signed relevance, N x F; heterogeneous: ``node_relevance[a]``, ``node_relevance[b]``),
``edge_relevance`` (E; heterogeneous: per edge type ``edge_relevance[a,to,b]``, ...) where an edge
mask was asked for, ``edge_attr_relevance`` (E x D) where the model takes ``edge_attr``,
``bias_relevance`` and ``relevance_residual`` (one value per graph of the batch at graph level, else
a 0-dimensional tensor), and ``explained_output`` (a string) where the explanation starts below a
probability head.  The masks are not stored: with ``mask="relevance"`` the node mask is the node
relevance, and ``abs`` is a function of it.

Each row also keeps the model it explained: ``model``, the state dict of the ``lrp0`` model (float64,
biases zero; ``keys`` and one vector of ``values``, :func:`_state`), and ``zplus_biases``, the biases
the ``zplus`` variant put in.  The test loads them over
the model it builds, because the built model is not the same on every machine: PyG's initialisers
draw float32 normals, which torch rounds differently on another CPU instruction set (``randn`` of 16
float32 numbers differs in its last bits under ``ATEN_CPU_CAPABILITY=default`` and AVX512), and that
moved the relevance by up to 7e-5 of the output.  The inputs (float64 normals) are the same everywhere.

All tensors of the file are views into one storage per dtype (two entries in ``torch.save``'s
archive instead of several thousand).  The file names the commit, torch and PyG.
It runs on one thread (as the benchmark does), and the same checkout writes the same tensors to the
bit: ``--same-as FILE`` compares the file written with an earlier one.
"""
from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.nn.conv import RGATConv

import lrp_lib
from lrp_lib.explain.explainer import LRPExplainer
from lrp_lib.core.rules import Epsilon

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_coverage as bc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "tests" / "explain" / "data" / "coverage_reference.pt"
VARIANTS = ("lrp0", "zplus")
BIAS_SCALE = 0.1
STORED_STATUSES = ("ok", "wrong")


class Capture(LRPExplainer):
    """LRPExplainer that keeps the explanation it returned (``explanation``; PyG's ``Explainer`` adds
    ``prediction`` to the same object)."""

    explanation = None

    def forward(self, *args, **kwargs):
        self.explanation = super().forward(*args, **kwargs)
        return self.explanation


def algorithm(variant: str, **options) -> Capture:
    """The explainer of a variant: LRP-0 as the benchmark's (:func:`bench_coverage.default_algorithm`),
    or the library's defaults (z+); ``options``: more arguments of ``LRPExplainer``."""
    if variant == "lrp0":
        return Capture(rule=Epsilon(0.0), mask="relevance", **options)
    if variant == "zplus":
        return Capture(**options)
    raise ValueError(f"unknown variant {variant!r}; use one of {VARIANTS}")


def fill_biases(model: torch.nn.Module, row_id: str) -> torch.nn.Module:
    """Every parameter that :func:`bench_coverage.zero_biases` sets to zero filled with
    ``BIAS_SCALE * randn`` from a generator seeded by the row (in the order of ``named_parameters``)."""
    g = torch.Generator().manual_seed(bc.seed_for(f"{row_id}|bias"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name.split(".")[-1]:
                p.copy_(BIAS_SCALE * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return model


def row_id(layer: str, level: str, edge_attr: bool) -> str:
    return bc.row_key(dict(layer=layer, level=level, edge_attr=edge_attr))


def _build(spec: bc.Spec, level: str, edge_attr: bool):
    """:func:`bench_coverage.build_case`, with RGATConv's ``l2`` set: PyG (2.8) leaves it uninitialised
    (``torch.full(self.l2.size(), 1 / out_channels)`` is computed and dropped), so it held whatever the
    memory held; it is read only by the attention modes with degree scaling, not by the default one
    that the benchmark builds (the relevance is the same to the bit with any values), and is set to
    the value PyG means, so that the stored state is the same on every run."""
    with warnings.catch_warnings():  # as bench_coverage.run_spec builds a row
        warnings.simplefilter("ignore")
        model, inputs = bc.build_case(spec, level, edge_attr)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, RGATConv):
                module.l2.fill_(1 / module.out_channels)
    return model, inputs


def _tensors(explanation, hetero: bool) -> dict:
    """The explanation's relevance (float64, detached, contiguous), keyed as the module docstring says."""
    out = {}

    def put(key, value):
        if value is not None:
            out[key] = value.detach().to(torch.float64).contiguous().clone()

    if hetero:
        for kind in ("node_relevance", "edge_relevance"):
            try:
                parts = explanation.collect(kind)
            except KeyError:  # no edge mask asked for
                parts = {}
            for key, value in sorted(parts.items(), key=lambda kv: str(kv[0])):
                put(f"{kind}[{','.join(key) if isinstance(key, tuple) else key}]", value)
    else:
        for kind in ("node_relevance", "edge_relevance", "edge_attr_relevance"):
            put(kind, explanation.get(kind))
    for kind in ("bias_relevance", "relevance_residual"):
        put(kind, getattr(explanation, kind, None))
    return out


def _state(model: torch.nn.Module, biases_only: bool = False) -> dict:
    """The model's state dict (``biases_only``: its bias parameters) as ``keys`` (in order) and
    ``values``, one float64 vector of them all (integer buffers, such as a degree histogram or a batch
    norm's count, are small integers: exact in float64).  The shapes are the built model's."""
    biases = {n for n, _ in model.named_parameters() if "bias" in n.split(".")[-1]}
    items = [(k, v.detach()) for k, v in model.state_dict().items() if not biases_only or k in biases]
    values = torch.cat([v.reshape(-1).to(torch.float64) for _, v in items]) if items else \
        torch.zeros(0, dtype=torch.float64)
    if not all(torch.equal(v, v.to(torch.float64).to(v.dtype)) for _, v in items):
        raise ValueError("a buffer of the model is not exact in float64")
    return dict(keys=[k for k, _ in items], values=values.clone())


def _load(model: torch.nn.Module, state: dict, strict: bool = True) -> None:
    """A stored :func:`_state` into a freshly built model: every stored key must be one of the model's
    (with as many values as the model's tensor has), and (``strict``) every key of the model stored."""
    current = model.state_dict()
    unknown = [k for k in state["keys"] if k not in current]
    missing = [k for k in current if k not in state["keys"]] if strict else []
    sizes = [current[k].numel() for k in state["keys"] if k in current]
    if unknown or missing or sum(sizes) != state["values"].numel():
        raise ValueError(f"the model's parameters are not the stored ones: missing {missing}, unknown {unknown}, "
                         f"{sum(sizes)} values where {state['values'].numel()} are stored")
    offset, new = 0, {}
    for key, n in zip(state["keys"], sizes):
        t = current[key]
        new[key] = state["values"][offset:offset + n].view(t.shape).to(t.dtype)
        offset += n
    model.load_state_dict(new, strict=False)


def record(spec: bc.Spec, level: str, edge_attr: bool, variant: str, edge_mask_type: str | None = "object",
           explainer: LRPExplainer | None = None, model_state: dict | None = None,
           biases: dict | None = None) -> tuple[dict | None, dict, dict]:
    """Explain one row in one variant with :func:`bench_coverage.check`: ``(values, check's row, state)``.

    The model is built by :func:`bench_coverage.build_case`; ``model_state``: its parameters and buffers
    as stored (loaded over the built ones, so that the values do not hang on the random numbers of this
    machine: torch draws float32 normals with other roundings on other CPU instruction sets); ``zplus``:
    then its biases filled (:func:`fill_biases`), or set to ``biases`` as stored.  ``values``:
    ``output`` (float), the tensors of :func:`_tensors` and ``explained_output`` where the explanation
    has one; None where the explanation was refused or crashed (the row says why).  ``state``: the
    model's parameters and buffers explained (``lrp0``: all; ``zplus``: the biases).  ``explainer``:
    another algorithm than the variant's (a :class:`Capture`), e.g. to see that a comparison with the
    stored values catches another rule."""
    model, inputs = _build(spec, level, edge_attr)
    if model_state is not None:
        _load(model, model_state)
    if variant == "zplus":
        if biases is None:
            fill_biases(model, row_id(spec.name, level, edge_attr))
        else:
            _load(model, biases, strict=False)
    state = _state(model, biases_only=variant == "zplus")
    explainer = algorithm(variant) if explainer is None else explainer
    row = bc.check(model, inputs, level, algorithm=explainer, edge_mask_type=edge_mask_type)
    row.pop("_node_relevance", None)
    explanation = explainer.explanation
    if row["status"] in ("refused", "crash") or explanation is None:
        return None, row, state
    prediction = explanation.prediction.detach().to(torch.float64)
    output = prediction.sum() if level == "graph" else prediction[bc.NODE].sum()
    values = dict(output=float(output), **_tensors(explanation, isinstance(inputs["x"], dict)))
    text = getattr(explanation, "explained_output", None)
    if isinstance(text, str):
        values["explained_output"] = text
    return values, row, state


def rows_of_the_benchmark():
    """``(row id, spec, level, edge_attr)`` of every row the benchmark explains, in its order (skipped
    specs have none)."""
    for spec in bc.ALL:
        if spec.skip:
            continue
        for level, ea in bc.cases(spec):
            yield row_id(spec.name, level, ea), spec, level, ea


def make(progress: bool = True, commit: str | None = None) -> dict:
    """The reference: ``meta``, ``rows`` (row id -> dict) and ``not_stored`` (row id -> reason)."""
    rows, not_stored = {}, {}
    for rid, spec, level, ea in rows_of_the_benchmark():
        try:
            model, inputs = _build(spec, level, ea)
            bc.reference(model, inputs, level)
        except Exception as e:  # noqa: BLE001 - the benchmark skips these rows too
            not_stored[rid] = f"skipped: the unmodified model fails on the generic inputs: {bc._first_line(e)}"
            continue
        values, row, state = record(spec, level, ea, "lrp0")
        entry = dict(layer=spec.name, level=level, edge_attr=ea, status=row["status"], reason=row["reason"],
                     warnings=row["warnings"], edge_mask_type="object")
        if values is None and row["status"] in ("refused", "crash"):  # the benchmark's retry: node relevance only
            again, row2, _ = record(spec, level, ea, "lrp0", edge_mask_type=None)
            if again is not None:
                values, entry["edge_mask_type"] = again, None
                entry.update(reason=f"{row['reason']}; explained without an edge mask: {row2['status']}"
                                    + (f" ({row2['reason']})" if row2["reason"] else ""))
        if values is None:
            not_stored[rid] = f"{row['status']}: {row['reason']}"
            continue
        entry.update(lrp0=values, model=state)
        zplus, zrow, biases = record(spec, level, ea, "zplus", edge_mask_type=entry["edge_mask_type"],
                                     model_state=state)
        if zplus is None:
            not_stored[f"{rid}|zplus"] = f"{zrow['status']}: {zrow['reason']}"
        else:
            entry.update(zplus=zplus, zplus_biases=biases)
        rows[rid] = entry
        if progress:
            print(f"{rid:45s} {entry['status']:8s} {'edges' if entry['edge_mask_type'] else 'no edges':8s} "
                  f"{'zplus' if zplus is not None else 'zplus ' + zrow['status']}", flush=True)
    meta = dict(**_library(commit), torch=str(torch.__version__), torch_geometric=str(torch_geometric.__version__),
                python=platform.python_version(), cpu_capability=torch.backends.cpu.get_cpu_capability(),
                threads=torch.get_num_threads(), variants=dict(
                    lrp0="LRPExplainer(rule=Epsilon(0.0), mask='relevance'), biases zero (bench_coverage)",
                    zplus=f"LRPExplainer() (z+, mask 'abs'), every bias {BIAS_SCALE} * randn seeded by the row"),
                node=bc.NODE, made_by="benchmarks/coverage_reference.py")
    return dict(meta=meta, rows=rows, not_stored=not_stored)


def _git(*args) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _library(commit: str | None = None) -> dict:
    """Which lrp_lib was measured: ``commit`` (given, or ``git rev-parse HEAD`` where lrp_lib is this
    checkout's), where it was imported from, and whether this checkout's lrp_lib had changes not
    committed (then the values are not the commit's; None where that cannot be told: not a checkout)."""
    lib = Path(lrp_lib.__file__).resolve().parents[1]
    ours = lib == ROOT
    status = _git("status", "--porcelain", "--", "lrp_lib") if ours else None
    dirty = None if status is None else bool(status)
    if commit is None:
        commit = (_git("rev-parse", "HEAD") if ours else None) or f"unknown (lrp_lib from {lib}; pass --commit)"
    if dirty:
        print("warning: lrp_lib has changes that are not committed: the values are not the commit's",
              file=sys.stderr)
    return dict(commit=commit, lrp_lib=str(lib), lrp_lib_uncommitted_changes=dirty)


def tensors_of(reference: dict) -> dict:
    """``path -> tensor`` of every tensor of a reference's rows (a path: the keys down to it, the row
    id first)."""
    out = {}

    def walk(path, value):
        if isinstance(value, torch.Tensor):
            out[path] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(path + (k,), v)
    walk((), reference["rows"])
    return out


def pack(reference: dict) -> dict:
    """Every tensor made a view into one storage per dtype (``torch.save`` then writes one storage of
    float64 and one of int64, instead of one per tensor)."""
    tensors = tensors_of(reference)
    for dtype in sorted({t.dtype for t in tensors.values()}, key=str):
        these = {p: t for p, t in tensors.items() if t.dtype == dtype}
        flat = torch.cat([t.reshape(-1) for t in these.values()])
        start = 0
        for path, t in these.items():
            parent = reference["rows"]
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = flat[start:start + t.numel()].view(t.shape)
            start += t.numel()
    return reference


def differences(a: dict, b: dict) -> list[str]:
    """Where two references differ: rows, keys, floats, strings or tensors not equal to the bit."""
    out = []
    if a["rows"].keys() != b["rows"].keys():
        out.append(f"rows differ: {sorted(a['rows'].keys() ^ b['rows'].keys())}")

    def walk(path, x, y):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(
                    x.view(torch.int64) if x.dtype == torch.float64 else x,
                    y.view(torch.int64) if y.dtype == torch.float64 else y):
                out.append(f"{path}: not equal to the bit")
        elif isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                out.append(f"{path}: keys differ: {sorted(map(str, x.keys() ^ y.keys()))}")
            for k in x.keys() & y.keys():
                walk(path + (k,), x[k], y[k])
        elif type(x) is not type(y) or x != y:
            out.append(f"{path}: {x!r} != {y!r}")
    for rid in sorted(a["rows"].keys() & b["rows"].keys()):
        walk((rid,), a["rows"][rid], b["rows"][rid])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(PATH), help=f"where to write (default {PATH.relative_to(ROOT)})")
    parser.add_argument("--same-as", default=None, help="an earlier file: say whether every value is the same")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--commit", default=None,
                        help="the commit measured, where lrp_lib is not this checkout's HEAD (an export: "
                             "git archive COMMIT | tar -x -C DIR, then run DIR's script with PYTHONPATH=DIR)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    reference = pack(make(commit=args.commit))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(reference, out)
    rows = reference["rows"].values()
    by_status = {s: sum(r["status"] == s for r in rows) for s in ("ok", "wrong", "refused")}
    print(f"\n{len(reference['rows'])} rows ({by_status}; {sum('zplus' in r for r in rows)} with zplus), "
          f"{len(reference['not_stored'])} not stored, {out.stat().st_size / 1024:.0f} KB, "
          f"{time.perf_counter() - start:.0f} s: {out}", file=sys.stderr)
    if args.same_as:
        diff = differences(reference, torch.load(args.same_as, weights_only=True))
        print("the same to the bit as " + args.same_as if not diff else "\n".join(diff[:20]), file=sys.stderr)
        if diff:
            sys.exit(1)


if __name__ == "__main__":
    main()
