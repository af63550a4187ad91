"""The relevance of every row of the coverage benchmark against the values written down before the
mechanism was rewritten (``tests/explain/data/coverage_reference.pt``, made by
``benchmarks/coverage_reference.py``, which names the commit).

Each stored row is built again with ``bench_coverage.build_case``, given the stored parameters (the
initialisers' random numbers are not the same on every CPU) and explained again through
``bench_coverage.check`` in each stored variant (``lrp0``: LRP-0 with the biases zero, as the benchmark
explains it; ``zplus``: the library's default explainer with nonzero biases): the explained output, the
node relevance, the edge relevance, the ``edge_attr`` relevance, ``bias_relevance`` and
``relevance_residual`` must all be the stored ones to 1e-10 (:func:`mismatches`).  A row that is no
longer in the benchmark's tables, or that is now refused or crashes, fails with its name and the reason."""
import math
import sys
from pathlib import Path

import pytest
import torch

from lrp_lib.explain.explainer import LRPExplainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_coverage as bc  # noqa: E402
import coverage_reference as cr  # noqa: E402

STORED = torch.load(cr.PATH, weights_only=True)
ROWS = STORED["rows"]
SPECS = {s.name: s for s in bc.ALL}
CASES = [(rid, v) for rid, entry in ROWS.items() for v in cr.VARIANTS if v in entry]

#: The tolerance, relative to each stored value (RTOL) plus an absolute part that scales with the
#: explained output (ATOL * max(1, |output|)).  Float64 rounds at 1.1e-16; the same relevance computed
#: by other kernels (another CPU instruction set, another number of threads, a backward that adds in
#: another order) differs by a few roundings of the terms it adds.  Measured on the 714 stored
#: explanations (an AMD EPYC, the file made on one thread with AVX512): on one thread every value the
#: same to the bit; on two threads 4 differ, by at most 2.2e-16 of max(1, |output|); under
#: ATEN_CPU_CAPABILITY=avx2 20 and under ATEN_CPU_CAPABILITY=default 55 differ, by at most 3.2e-16
#: (2.5e-6 of this tolerance).  An entry that is zero or the sum of terms that cancel carries rounding
#: of the size of those terms, which are of the size of the output, not of the entry: hence the
#: absolute part in units of the output.  A different rule, a lost factor or a share sent to the wrong
#: input moves values by far more than 1e-10 of the output (LRP-epsilon's 1e-6 already does: see the
#: tests at the end).  No row needed a looser tolerance.
RTOL = 1e-10
ATOL = 1e-10


def mismatches(got: dict, want: dict) -> list[str]:
    """What differs between recomputed values ``got`` and stored values ``want`` (one variant of one
    row): keys present in one only, strings not equal, floats and tensors (shape, dtype, values) not
    equal within RTOL / ATOL; an empty list where they agree."""
    out = []
    scale = max(1.0, abs(want.get("output", 0.0)))
    for key in sorted(got.keys() | want.keys()):
        if key not in got or key not in want:
            out.append(f"{key}: {'not recomputed' if key not in got else 'not stored'}")
            continue
        a, b = got[key], want[key]
        if isinstance(b, torch.Tensor):
            try:
                torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL * scale, check_dtype=True)
            except AssertionError as e:
                out.append(f"{key}: " + " ".join(str(e).split("\n")[:4]))
        elif isinstance(b, float):
            if not (isinstance(a, float) and math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL * scale)):
                out.append(f"{key}: {a!r} != stored {b!r}")
        elif a != b:
            out.append(f"{key}: {a!r} != stored {b!r}")
    return out


def recompute(rid: str, variant: str, explainer=None) -> dict:
    """The row's values explained again now (fails with the row's name where it cannot be)."""
    entry = ROWS[rid]
    spec = SPECS.get(entry["layer"])
    if spec is None or spec.skip or (entry["level"], entry["edge_attr"]) not in bc.cases(spec):
        pytest.fail(f"{rid}: no longer a row of benchmarks/bench_coverage.py")
    try:
        got, row, _ = cr.record(spec, entry["level"], entry["edge_attr"], variant,
                                edge_mask_type=entry["edge_mask_type"], explainer=explainer,
                                model_state=entry["model"], biases=entry.get("zplus_biases"))
    except Exception as e:  # noqa: BLE001 - e.g. the unmodified model no longer runs
        pytest.fail(f"{rid} ({variant}): {type(e).__name__}: {e}")
    if got is None:
        pytest.fail(f"{rid} ({variant}): now {row['status']}: {row['reason']} ({row['raised_in']})")
    return got


def test_the_file_holds_the_rows():
    assert STORED["meta"]["commit"] and "unknown" not in STORED["meta"]["commit"]
    assert len(ROWS) > 300 and all("node_relevance" in e["lrp0"] or "node_relevance[a]" in e["lrp0"]
                                   for e in ROWS.values())
    assert {e["status"] for e in ROWS.values()} <= {"ok", "wrong", "refused"}
    tensors = cr.tensors_of(STORED)
    assert all(t.dtype == torch.float64 for t in tensors.values())
    # the biases of the zplus variant are not zero: their relevance is pinned too
    assert sum(float(e["zplus"]["bias_relevance"].abs().sum()) > 1e-3 for e in ROWS.values() if "zplus" in e) > 300


#: Rows where the rules as forward modifications put the same relevance in another account: PDNConv's edge
#: weights (a sigmoid, 0.5 at 0) send relevance into outputs equal to zero, which no split can pass on; the
#: primitives' tally counts it as kept by the map (``bias_relevance``), the forward rules as lost
#: (``relevance_residual``, which is what it stands for).  Node, edge and ``edge_attr`` relevance agree.
FORWARD_SPLIT = {("PDNConv|graph|True", "lrp0")}


@pytest.mark.parametrize("rid, variant", CASES, ids=[f"{rid}-{v}" for rid, v in CASES])
def test_the_forward_rules_give_the_stored_relevance(rid, variant):
    """``LRPExplainer()``, the forward rules: the values the relevance primitives wrote down."""
    got, want = recompute(rid, variant, cr.algorithm(variant)), dict(ROWS[rid][variant])
    if (rid, variant) in FORWARD_SPLIT:
        total = lambda d: d["bias_relevance"] + d["relevance_residual"]  # noqa: E731
        torch.testing.assert_close(total(got), total(want), rtol=RTOL, atol=ATOL)
        got, want = ({k: v for k, v in d.items() if k not in ("bias_relevance", "relevance_residual")}
                     for d in (got, want))
    problems = mismatches(got, want)
    assert not problems, f"{rid} ({variant}, stored status {ROWS[rid]['status']}): " + "; ".join(problems)


# ------------------------------------------------------------------ the comparison can fail
ROW = "GCNConv|node|False"


def test_the_comparison_flags_a_value_moved_by_more_than_the_tolerance():
    want = ROWS[ROW]["lrp0"]
    got = recompute(ROW, "lrp0")
    assert mismatches(got, want) == []
    scale = max(1.0, abs(want["output"]))
    for key in ("node_relevance", "edge_relevance", "bias_relevance", "relevance_residual"):
        moved = dict(got)
        moved[key] = got[key].clone()
        moved[key].view(-1)[0] += 1e-9 * scale  # ten times the tolerance
        problems = mismatches(moved, want)
        assert len(problems) == 1 and problems[0].startswith(key), problems
    assert [p.split(":")[0] for p in mismatches(dict(got, output=got["output"] * (1 + 1e-8)), want)] == ["output"]
    missing = {k: v for k, v in got.items() if k != "edge_relevance"}
    assert mismatches(missing, want) == ["edge_relevance: not recomputed"]


@pytest.mark.parametrize("rule", ["epsilon", "zplus"])
def test_another_rule_does_not_give_the_stored_relevance(rule):
    """The stored LRP-0 values of a GCN are not those of LRP-epsilon (1e-6: close to LRP-0 but not to
    1e-10) nor of z+."""
    got = recompute(ROW, "lrp0", explainer=cr.Capture(rule=rule, mask="relevance"))
    problems = mismatches(got, ROWS[ROW]["lrp0"])
    assert any(p.startswith("node_relevance") for p in problems), problems


def test_a_row_that_is_now_refused_fails_with_its_name(monkeypatch):
    class Refuses(cr.Capture):
        def forward(self, *args, **kwargs):
            raise ValueError("this layer is not supported")

    monkeypatch.setattr(cr, "algorithm", lambda variant: Refuses())
    with pytest.raises(pytest.fail.Exception, match=r"GCNConv\|node\|False \(lrp0\): now refused: ValueError"):
        recompute(ROW, "lrp0")


def test_a_row_that_is_no_longer_built_fails_with_its_name(monkeypatch):
    monkeypatch.delitem(SPECS, "GCNConv")
    with pytest.raises(pytest.fail.Exception, match=r"GCNConv\|node\|False: no longer a row"):
        recompute(ROW, "lrp0")


def test_the_default_explainer_is_z_plus():
    """The ``zplus`` variant is what LRPExplainer() does by default: the same values as the rule named."""
    assert LRPExplainer().composite.key() == LRPExplainer(rule="zplus").composite.key()
