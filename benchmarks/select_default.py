"""Which LRP configuration should be the default?  Ground truth and faithfulness together, by a declared rule.

    python benchmarks/select_default.py [--runs FOLDER[,FOLDER...]] [--out FOLDER]

Each run is a folder holding a ``quality.json`` (``bench_quality.py``) and a ``faithfulness.json``
(``bench_faithfulness.py``) measured on the same tasks, seeds and models.  The default is chosen by
:data:`RULE`, written down on 2026-12-06 before the confirmatory run on seeds 5 to 9 (which no earlier run
used): the first run (seeds 0 to 4) proposes, the fresh run decides.  :data:`DECISION` says what the fresh run
decides.  Writes ``benchmarks/results/selection.json``: per run, every LRP configuration's mean ranks under
both views, the winner, and the counts the issue's targets name (the tasks where the default is the most
faithful method, and where it is at or above the best non-LRP method by ground truth).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import write_results  # noqa: E402

#: The rule, declared before the confirmatory run.
RULE = ("On each task, the methods that both benchmarks ran (reference rows left out) are ranked by mean "
        "ground-truth AUROC over seeds (higher first) and by each of the four deletion areas: edges removed or "
        "node features zeroed, following the explained probability or the normalised logit (lower first); ties "
        "share their average rank.  A method's faithfulness rank on a task is the mean of its four deletion ranks. "
        "An LRP configuration's score is the mean over the tasks of (ground-truth rank + faithfulness rank) / 2; "
        "the lowest score wins, ties going to the cheaper configuration (median ms of the quality run).")
#: What the fresh run decides.
DECISION = ("The current default stays if its score on the fresh run is within TOLERANCE of the winner's; "
            "otherwise the fresh run's winner becomes the default.")
#: How far behind the winner (in mean rank) the current default may be and stay.
TOLERANCE = 0.5
#: The default when the rule was declared: z+ on every weight, the target logit, |R|.
CURRENT_DEFAULT = "lrp_zplus_logit_abs"
#: The four versions of the faithfulness view (keys of ``faithfulness.json``'s method rows).
DELETIONS = ("edges_deletion_probability", "edges_deletion_logit", "nodes_deletion_probability",
             "nodes_deletion_logit")
#: Rows that are references, not methods.
REFERENCES = ("random", "ground_truth")
#: Methods of the LRP family that are not configurations of ``LRPExplainer`` (GNN-LRP's walks, sGNN-LRP's search).
WALKS = ("sgnn_greedy", "sgnn_greedy_alpha", "top_walks")
#: "Within" in the counts of the issue's targets: 0.01 of AUROC or of a deletion area.
WITHIN = 0.01


def _mean(row, key):
    value = (row or {}).get(key)
    if isinstance(value, dict):
        value = value.get("mean")
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else float(value)


def task_ranks(values: dict[str, float], lower_is_better: bool) -> dict[str, float]:
    """Rank of each method (1 = best), ties sharing their average rank."""
    names = list(values)
    ranks = rankdata([values[m] if lower_is_better else -values[m] for m in names])
    return dict(zip(names, (float(r) for r in ranks)))


def scores(quality: dict, faithfulness: dict) -> dict:
    """Every LRP configuration's mean ranks under :data:`RULE` on one run, the winner, and the target counts."""
    qtasks, ftasks = quality["results"]["tasks"], faithfulness["results"]
    tasks = [t for t in qtasks if t in ftasks]
    if not tasks:
        raise ValueError("the quality and faithfulness results share no task")
    truth: dict[str, list] = {}
    faith: dict[str, list] = {}
    per_version: dict[str, dict[str, list]] = {v: {} for v in DELETIONS}
    counts = {"most_faithful_edges_logit": [], "most_faithful_nodes_logit": [], "ground_truth_at_best": []}
    for t in tasks:
        qm, fm = qtasks[t]["methods"], ftasks[t]["methods"]
        methods = [m for m in qm if m in fm and m not in REFERENCES and _mean(qm[m], "auroc") is not None
                   and all(_mean(fm[m], v) is not None for v in DELETIONS)]
        truth_t = task_ranks({m: _mean(qm[m], "auroc") for m in methods}, lower_is_better=False)
        version_t = {v: task_ranks({m: _mean(fm[m], v) for m in methods}, lower_is_better=True) for v in DELETIONS}
        for m in methods:
            if not m.startswith("lrp_"):
                continue
            truth.setdefault(m, []).append(truth_t[m])
            faith.setdefault(m, []).append(float(np.mean([version_t[v][m] for v in DELETIONS])))
            for v in DELETIONS:
                per_version[v].setdefault(m, []).append(version_t[v][m])
        for on in ("edges", "nodes"):  # the most faithful among every method the faithfulness run has
            key = f"{on}_deletion_logit"
            areas = {m: _mean(row, key) for m, row in fm.items() if m not in REFERENCES}
            areas = {m: a for m, a in areas.items() if a is not None}
            if areas.get(CURRENT_DEFAULT) is not None and areas[CURRENT_DEFAULT] <= min(areas.values()) + WITHIN:
                counts[f"most_faithful_{on}_logit"].append(t)
        others = [_mean(row, "auroc") for m, row in qm.items()
                  if not m.startswith("lrp_") and m not in WALKS and m not in REFERENCES]
        others = [a for a in others if a is not None]  # every non-LRP method the quality run has
        if others and (_mean(qm.get(CURRENT_DEFAULT), "auroc") or -1.0) >= max(others) - WITHIN:
            counts["ground_truth_at_best"].append(t)
    ms = {m: float(np.median([_mean(qtasks[t]["methods"].get(m), "ms") or 0.0 for t in tasks])) for m in truth}
    rows = {m: {"truth_rank": float(np.mean(truth[m])), "faithfulness_rank": float(np.mean(faith[m])),
                "score": float(np.mean([(a + b) / 2 for a, b in zip(truth[m], faith[m])])),
                "tasks": len(truth[m]), "ms": ms.get(m),
                **{f"{v}_rank": float(np.mean(per_version[v][m])) for v in DELETIONS}}
            for m in truth if len(truth[m]) == len(tasks)}
    if not rows:
        raise ValueError("no LRP configuration has both views on every shared task")
    order = sorted(rows, key=lambda m: (round(rows[m]["score"], 9), rows[m]["ms"] or 0.0))
    return {"tasks": tasks, "seeds": quality["settings"].get("seeds"),
            "first_seed": quality["settings"].get("first_seed", 0), "winner": order[0], "order": order,
            "configurations": rows, "counts": {k: {"tasks": v, "n": len(v), "of": len(tasks)}
                                               for k, v in counts.items()}}


def decide(proposal: dict, fresh: dict) -> dict:
    """What :data:`DECISION` makes of a fresh run."""
    rows = fresh["configurations"]
    behind = rows[CURRENT_DEFAULT]["score"] - rows[fresh["winner"]]["score"]
    keep = behind <= TOLERANCE
    return {"proposed": proposal["winner"], "fresh_winner": fresh["winner"], "current_default": CURRENT_DEFAULT,
            "default_behind_winner": round(behind, 4), "tolerance": TOLERANCE,
            "default": CURRENT_DEFAULT if keep else fresh["winner"], "confirmed": keep}


def load_run(folder: Path) -> tuple[dict, dict]:
    files = [folder / "quality.json", folder / "faithfulness.json"]
    for f in files:
        if not f.exists():
            raise FileNotFoundError(f"--runs: {f} is missing (run bench_quality.py and bench_faithfulness.py "
                                    f"with --out {folder})")
    quality, faithfulness = (json.loads(f.read_text()) for f in files)
    qs, fs = quality["settings"], faithfulness["settings"]
    if (qs.get("seeds"), qs.get("first_seed", 0)) != (fs.get("seeds"), fs.get("first_seed", 0)):
        raise ValueError(f"--runs: {folder} holds runs of different seeds (quality {qs.get('first_seed', 0)}+"
                         f"{qs.get('seeds')}, faithfulness {fs.get('first_seed', 0)}+{fs.get('seeds')})")
    return quality, faithfulness


def main(argv=None):
    here = Path(__file__).resolve().parent / "results"
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=f"{here},{here / 'confirmatory'}",
                        help="comma-separated folders: the proposing run, then the fresh run")
    parser.add_argument("--out", default=None, help="folder for selection.json (default benchmarks/results)")
    args = parser.parse_args(argv)
    folders = [Path(f) for f in args.runs.split(",") if f]
    runs = [scores(*load_run(f)) for f in folders]
    result = {"runs": runs}
    if len(runs) >= 2:
        result["decision"] = decide(runs[0], runs[-1])
    if args.out:
        import results_file
        results_file.RESULTS = Path(args.out)
    settings = {"rule": RULE, "decision": DECISION, "tolerance": TOLERANCE, "current_default": CURRENT_DEFAULT,
                "within": WITHIN, "runs": [str(f.relative_to(here.parent)) if f.is_relative_to(here.parent) else str(f)
                                           for f in folders]}
    print(write_results("selection", result, settings))
    return result


if __name__ == "__main__":
    main()
