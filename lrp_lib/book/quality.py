"""Reading ``benchmarks/results/quality.json`` for the book: names, and the rule-choice tables.

The explanation-quality benchmark (``benchmarks/bench_quality.py``) keys its tasks and methods by
short names (``ba_shapes``, ``lrp_zplus_logit_abs``). The benchmark chapter and the page on
choosing a rule both show them to readers, and both pick "the best LRP configuration over a group
of tasks" the same way; this module does both once.

* :data:`TASK_TITLES`: each task's name as the papers write it, in the book's order;
* :func:`method_name`: a method key as a reader reads it (``"LRP z+, logit, abs"``);
* :func:`decision_rows`: per group of tasks, the best LRP configuration, the best method of any
  kind and the task level's default, by mean AUROC over the group's tasks;
* :func:`choice_rows`: per task, the best LRP AUROC with each mask and each explained quantity.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["TASK_TITLES", "METHOD_NAMES", "COMPOSITE_NAMES", "MASKS", "QUANTITIES", "method_name",
           "decision_rows", "choice_rows"]

TASK_TITLES = {
    "ba_shapes": "BA-Shapes",
    "ba_community": "BA-Community",
    "tree_cycles": "Tree-Cycles",
    "tree_grid": "Tree-Grid",
    "infection": "Infection",
    "ba_2motifs": "BA-2Motifs",
    "mutagenicity": "Mutagenicity",
    "benzene": "Benzene",
    "fluoride_carbonyl": "Fluoride-Carbonyl",
    "alkane_carbonyl": "Alkane-Carbonyl",
    "amine_ether_benzene": "Amine-Ether-Benzene",
}
#: The methods other than LRP, in the order the tables list them.
METHOD_NAMES = {
    "saliency": "saliency",
    "grad_x_input": "Grad x Input",
    "integrated_gradients": "Integrated Gradients",
    "cam": "CAM",
    "grad_cam": "Grad-CAM",
    "gnnexplainer": "GNNExplainer",
    "gnnexplainer_orig": "GNNExplainer (original settings)",
    "pgexplainer": "PGExplainer",
    "sgnn_greedy": "sGNN-LRP greedy",
    "sgnn_greedy_alpha": "sGNN-LRP greedy (alpha)",
    "top_walks": "top walks (GNN-LRP)",
    "random": "random",
}
#: The LRP composites of the benchmark (``lrp_<composite>_<explained>_<mask>``).
COMPOSITE_NAMES = {
    "epsilon": "epsilon",
    "zplus": "z+",
    "gamma": "gamma",
    "gamma_sgnn": "gamma 3->0 (sGNN)",
    "gamma_dig": "gamma 2,1 (DIG)",
    "layered": "layered",
}
MASKS = ("abs", "positive", "relevance")
QUANTITIES = ("logit", "contrast")


def method_name(key: str) -> str:
    """A method key of ``quality.json`` as a reader reads it; an unknown key comes back as it is."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a method key (str), got {type(key).__name__}")
    if key in METHOD_NAMES:
        return METHOD_NAMES[key]
    if key.startswith("lrp_"):
        for c in sorted(COMPOSITE_NAMES, key=len, reverse=True):
            rest = key[len(f"lrp_{c}_"):]
            if key.startswith(f"lrp_{c}_") and rest.count("_") == 1:
                explained, mask = rest.split("_")
                return f"LRP {COMPOSITE_NAMES[c]}, {explained}, {mask}"
    return key


def _check_tasks(tasks, names):
    if not isinstance(tasks, Mapping):
        raise TypeError(f"tasks must be quality.json's results['tasks'] (a dict), got {type(tasks).__name__}")
    unknown = [t for t in names if t not in tasks]
    if unknown:
        raise KeyError(f"tasks has no results for {unknown}; it has {sorted(tasks)}")


def decision_rows(tasks: Mapping, summary: Mapping, groups: Sequence[tuple[str, str, Sequence[str]]]) -> list[dict]:
    """One row per group of tasks: what wins there, by mean AUROC over the group's tasks.

    ``groups`` holds ``(label, level, task names)``, ``level`` being ``"node"`` or ``"graph"``;
    task names missing from ``tasks`` are skipped (a group with none is left out). Only methods run
    on every task of the group compete. Each row has ``kind`` (the label), ``lrp`` and ``lrp_a``
    (the best LRP configuration and its mean AUROC), ``any`` and ``any_a`` (the best method of any
    kind, random excluded), and ``default`` and ``default_a`` (the level's default from
    ``summary``, the selection of ``bench_quality``; the overall one where the level has none).
    Ties go to the method listed first in the file, so the table is the same on every run.
    """
    rows = []
    for label, level, names in groups:
        if level not in ("node", "graph"):
            raise ValueError(f"groups: level of {label!r} must be 'node' or 'graph', got {level!r}")
        names = [t for t in names if t in tasks]
        if not names:
            continue
        common = [m for m in tasks[names[0]]["methods"]
                  if m != "random" and all(m in tasks[t]["methods"] for t in names)]
        mean = {m: sum(tasks[t]["methods"][m]["auroc"] for t in names) / len(names) for m in common}
        lrp = [m for m in mean if m.startswith("lrp_")]
        if not lrp:
            raise ValueError(f"groups: no LRP configuration ran on every task of {label!r} ({names})")
        best_lrp = max(lrp, key=mean.get)
        best_any = max(mean, key=mean.get)
        default = summary.get(f"{level}_level") or summary["overall"]
        rows.append({"kind": label, "tasks": names, "lrp": method_name(best_lrp), "lrp_a": mean[best_lrp],
                     "any": method_name(best_any), "any_a": mean[best_any],
                     "default": method_name(default["winner"]), "default_a": mean.get(default["winner"])})
    return rows


def choice_rows(tasks: Mapping, order: Sequence[str]) -> list[dict]:
    """Per task of ``order``: the best LRP AUROC with each mask and with each explained quantity.

    The best is over every composite (and, for a mask, both quantities; for a quantity, all masks).
    Each row has ``task`` (its title) and one key per mask (``abs``, ``positive``, ``relevance``)
    and per quantity (``logit``, ``contrast``).
    """
    _check_tasks(tasks, order)
    rows = []
    for t in order:
        lrp = {m: v["auroc"] for m, v in tasks[t]["methods"].items() if m.startswith("lrp_")}
        row = {"task": TASK_TITLES.get(t, t)}
        for part in MASKS:
            found = [a for m, a in lrp.items() if m.endswith("_" + part)]
            row[part] = max(found) if found else None
        for part in QUANTITIES:
            found = [a for m, a in lrp.items() if f"_{part}_" in m]
            row[part] = max(found) if found else None
        rows.append(row)
    return rows
