"""lrp_lib.book.quality: names of quality.json's keys, and the rule-choice tables."""
import pytest

from lrp_lib.book.quality import TASK_TITLES, choice_rows, decision_rows, method_name
from lrp_lib.book.results import load_results


def test_method_names():
    assert method_name("lrp_zplus_logit_abs") == "LRP z+, logit, abs"
    assert method_name("lrp_gamma_sgnn_contrast_relevance") == "LRP gamma 3->0 (sGNN), contrast, relevance"
    assert method_name("lrp_gamma_logit_positive") == "LRP gamma, logit, positive"
    assert method_name("lrp_gamma_dig_logit_abs") == "LRP gamma 2,1 (DIG), logit, abs"
    assert method_name("grad_x_input") == "Grad x Input"
    assert method_name("lrp_best") == "lrp_best"  # not a configuration: kept as it is
    with pytest.raises(TypeError, match="key must be"):
        method_name(3)


def tasks_of(table):
    return {t: {"methods": {m: {"auroc": a} for m, a in methods.items()}} for t, methods in table.items()}


TASKS = tasks_of({
    "ba_shapes": {"lrp_epsilon_logit_abs": 0.9, "lrp_zplus_logit_abs": 0.7, "saliency": 0.95, "random": 0.99},
    "tree_grid": {"lrp_epsilon_logit_abs": 0.5, "lrp_zplus_logit_abs": 0.8, "saliency": 0.6, "random": 0.5,
                  "pgexplainer": 1.0},
    "benzene": {"lrp_epsilon_contrast_relevance": 0.4, "lrp_zplus_logit_positive": 0.6, "saliency": 0.55},
})
SUMMARY = {"overall": {"winner": "lrp_epsilon_logit_abs"}, "node_level": {"winner": "lrp_zplus_logit_abs"},
           "graph_level": None}


def test_decision_rows_by_hand():
    rows = decision_rows(TASKS, SUMMARY, [("nodes", "node", ["ba_shapes", "tree_grid", "nope"]),
                                          ("molecules", "graph", ["benzene"]),
                                          ("none", "graph", ["nope"])])
    assert [r["kind"] for r in rows] == ["nodes", "molecules"]  # a group without results is left out
    nodes, mols = rows
    # means over the two tasks: epsilon 0.7, z+ 0.75, saliency 0.775; pgexplainer ran on one task only
    # and random never competes
    assert nodes["tasks"] == ["ba_shapes", "tree_grid"]
    assert (nodes["lrp"], nodes["lrp_a"]) == ("LRP z+, logit, abs", pytest.approx(0.75))
    assert (nodes["any"], nodes["any_a"]) == ("saliency", pytest.approx(0.775))
    assert (nodes["default"], nodes["default_a"]) == ("LRP z+, logit, abs", pytest.approx(0.75))
    # no graph-level selection: the overall default, which did not run on benzene
    assert (mols["lrp"], mols["lrp_a"]) == ("LRP z+, logit, positive", 0.6)
    assert mols["default"] == "LRP epsilon, logit, abs" and mols["default_a"] is None


def test_decision_rows_errors():
    with pytest.raises(ValueError, match="level of 'x' must be"):
        decision_rows(TASKS, SUMMARY, [("x", "edge", ["ba_shapes"])])
    with pytest.raises(ValueError, match="no LRP configuration"):
        decision_rows(tasks_of({"a": {"saliency": 0.5}}), SUMMARY, [("x", "node", ["a"])])


def test_choice_rows_by_hand():
    rows = choice_rows(TASKS, ["benzene", "ba_shapes"])
    assert rows[0] == {"task": "Benzene", "abs": None, "positive": 0.6, "relevance": 0.4,
                       "logit": 0.6, "contrast": 0.4}
    assert rows[1] == {"task": "BA-Shapes", "abs": 0.9, "positive": None, "relevance": None,
                       "logit": 0.9, "contrast": None}
    with pytest.raises(KeyError, match="no results for"):
        choice_rows(TASKS, ["tree_cycles"])


def test_tables_of_the_results_file_against_a_slow_loop():
    quality = load_results("quality")
    tasks = quality["results"]["tasks"]
    order = [t for t in TASK_TITLES if t in tasks]
    rows = choice_rows(tasks, order)
    for t, row in zip(order, rows):
        for m, v in tasks[t]["methods"].items():
            if not m.startswith("lrp_"):
                continue
            _, mask = m.rsplit("_", 1)
            assert v["auroc"] <= row[mask]
            assert v["auroc"] <= row["contrast" if "_contrast_" in m else "logit"]
        assert max(row[m] for m in ("abs", "positive", "relevance")) == max(row["logit"], row["contrast"])
    (row,) = decision_rows(tasks, quality["results"]["summary"], [("all", "node", order)])
    means = {}
    for m in tasks[order[0]]["methods"]:
        if m != "random" and all(m in tasks[t]["methods"] for t in order):
            means[m] = sum(tasks[t]["methods"][m]["auroc"] for t in order) / len(order)
    assert row["any_a"] == pytest.approx(max(means.values()))
    assert row["lrp_a"] == pytest.approx(max(v for m, v in means.items() if m.startswith("lrp_")))
