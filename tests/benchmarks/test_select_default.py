"""benchmarks/select_default.py: the declared rule computed by hand on made-up results."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import select_default as sd  # noqa: E402

DELETIONS = sd.DELETIONS


def run(aurocs: dict, areas: dict, ms: dict | None = None, first_seed=0):
    """quality.json and faithfulness.json of one run: ``aurocs[task][method]``, ``areas[task][method]`` (one area
    for the four deletion versions, or a tuple of four)."""
    ms = ms or {}
    quality = {"settings": {"seeds": 2, "first_seed": first_seed},
               "results": {"tasks": {t: {"methods": {m: {"auroc": a, "ms": ms.get(m, 1.0)} for m, a in row.items()}}
                                     for t, row in aurocs.items()}}}
    faithfulness = {"settings": {"seeds": 2, "first_seed": first_seed}, "results": {
        t: {"methods": {m: {v: {"mean": a if isinstance(a, float) else a[i]} for i, v in enumerate(DELETIONS)}
                        for m, a in row.items()}} for t, row in areas.items()}}
    return quality, faithfulness


A, B, G = "lrp_zplus_logit_abs", "lrp_epsilon_logit_abs", "grad_x_input"


def test_scores_are_the_mean_of_the_two_views_ranks():
    # task 1: truth A > G > B; deletion (lower better) B < A < G  -> A: (1 + 2) / 2, B: (3 + 1) / 2
    # task 2: truth B > A = G (tie: 2.5 each); deletion A < B = G (2.5) -> A: (2.5 + 1) / 2, B: (1 + 2.5) / 2
    quality, faith = run({"t1": {A: 0.9, B: 0.5, G: 0.7}, "t2": {A: 0.6, B: 0.8, G: 0.6}},
                         {"t1": {A: 0.3, B: 0.2, G: 0.4}, "t2": {A: 0.1, B: 0.3, G: 0.3}})
    out = sd.scores(quality, faith)
    rows = out["configurations"]
    assert rows[A]["truth_rank"] == pytest.approx((1 + 2.5) / 2)
    assert rows[A]["faithfulness_rank"] == pytest.approx((2 + 1) / 2)
    assert rows[A]["score"] == pytest.approx(((1 + 2) / 2 + (2.5 + 1) / 2) / 2)
    assert rows[B]["score"] == pytest.approx(((3 + 1) / 2 + (1 + 2.5) / 2) / 2)
    assert out["winner"] == A and G not in rows  # only LRP configurations are candidates


def test_the_faithfulness_rank_averages_the_four_deletion_versions_and_ties_go_to_the_cheaper():
    # equal truth; deletion ranks per version: A 1, 2, 2, 1 and B 2, 1, 1, 2 -> both 1.5: a tie, B cheaper
    quality, faith = run({"t": {A: 0.7, B: 0.7}}, {"t": {A: (0.1, 0.2, 0.2, 0.1), B: (0.2, 0.1, 0.1, 0.2)}},
                         ms={A: 2.0, B: 1.0})
    out = sd.scores(quality, faith)
    assert out["configurations"][A]["faithfulness_rank"] == out["configurations"][B]["faithfulness_rank"] == 1.5
    assert out["configurations"][A]["edges_deletion_logit_rank"] == 2.0
    assert out["winner"] == B


def test_the_decision_keeps_the_default_within_the_tolerance():
    def fresh(behind):
        return {"winner": B, "configurations": {A: {"score": 3.0 + behind}, B: {"score": 3.0}}}

    kept = sd.decide({"winner": A}, fresh(sd.TOLERANCE))
    assert kept["confirmed"] and kept["default"] == A
    replaced = sd.decide({"winner": A}, fresh(sd.TOLERANCE + 0.01))
    assert not replaced["confirmed"] and replaced["default"] == B


def test_the_target_counts():
    # the default is the most faithful by edges but not by nodes; by truth it is 0.005 below the best other method
    quality, faith = run({"t": {A: 0.895, B: 0.95, G: 0.9, "random": 0.5}},
                         {"t": {A: (0.5, 0.1, 0.5, 0.5), B: (0.5, 0.3, 0.5, 0.2), G: (0.5, 0.4, 0.5, 0.4),
                                "random": (0.9, 0.9, 0.9, 0.9)}})
    counts = sd.scores(quality, faith)["counts"]
    assert counts["most_faithful_edges_logit"]["n"] == 1
    assert counts["most_faithful_nodes_logit"]["n"] == 0
    assert counts["ground_truth_at_best"]["n"] == 1  # B is LRP: the best other method is G


def test_runs_of_other_seeds_are_refused(tmp_path):
    quality, faith = run({"t": {A: 0.9}}, {"t": {A: 0.1}}, first_seed=5)
    faith["settings"]["first_seed"] = 0
    (tmp_path / "quality.json").write_text(json.dumps(quality))
    (tmp_path / "faithfulness.json").write_text(json.dumps(faith))
    with pytest.raises(ValueError, match="different seeds"):
        sd.load_run(tmp_path)
    with pytest.raises(FileNotFoundError, match="faithfulness.json is missing"):
        (tmp_path / "faithfulness.json").unlink()
        sd.load_run(tmp_path)
