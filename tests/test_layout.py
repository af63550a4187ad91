"""The package's layout holds: imports point one way and no private helper crosses a module.

``lrp_lib.core`` imports nothing else from lrp_lib; ``lrp_lib.teach`` and ``lrp_lib.explain`` import
``core`` (and themselves) only, so the product never depends on the chapters' teaching code;
``lrp_lib.book`` may import everything.  Inside ``lrp_lib.explain`` imports point down its layers
(:data:`EXPLAIN_LAYERS`).
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lrp_lib"
ALLOWED = {
    "core": {"core"},
    "teach": {"core", "teach"},
    "explain": {"core", "explain"},
    "book": {"core", "teach", "explain", "book"},
}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "weights" not in p.parts)


def part_of(path: Path) -> str | None:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else None


def lrp_imports(path: Path):
    """(line, imported module, imported names) for every import of lrp_lib in ``path``."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "lrp_lib" or node.module.startswith("lrp_lib.")):
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            yield node.lineno, "." * node.level + (node.module or ""), [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "lrp_lib" or a.name.startswith("lrp_lib."):
                    yield node.lineno, a.name, []


def violations(path: Path, part: str, imports) -> list[str]:
    out = []
    for line, module, names in imports:
        where = f"{path.relative_to(PACKAGE.parent)}:{line}"
        if module.startswith("."):
            out.append(f"{where}: relative import {module!r} (write it absolute)")
            continue
        target = module.split(".")[1] if module.count(".") else None
        if target is None:  # from lrp_lib import X
            target = {"LRPExplainer": "explain", "Explainer": "explain", "Composite": "core",
                      "explain_dataset": "explain", "read_explanations": "explain"}.get(names[0], names[0]) \
                if names else None
        if part is not None and target not in ALLOWED[part]:
            out.append(f"{where}: lrp_lib.{part} imports {module} ({', '.join(names) or 'module'})")
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        if private:
            out.append(f"{where}: imports the private {', '.join(private)} from {module}")
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_one_way_and_share_no_private_helper(path):
    assert violations(path, part_of(path), lrp_imports(path)) == []


def test_the_layout_check_catches_a_wrong_arrow_and_a_private_import(tmp_path):
    bad = [(3, "lrp_lib.teach.ops", ["add"]), (4, "lrp_lib.core.rules", ["_share"]), (5, ".rules", ["Rule"])]
    found = violations(PACKAGE / "explain" / "explainer.py", "explain", bad)
    assert len(found) == 3
    assert "lrp_lib.explain imports lrp_lib.teach.ops" in found[0]
    assert "private _share" in found[1] and "relative import" in found[2]
    assert violations(PACKAGE / "book" / "models.py", "book", bad[:1]) == []


def test_every_module_belongs_to_one_of_the_four_parts():
    assert {part_of(p) for p in MODULES} - {None} == set(ALLOWED)
    assert [p.name for p in MODULES if part_of(p) is None] == ["__init__.py"]


#: The layers of ``lrp_lib.explain``, lowest first: a module imports from its own layer and the ones below
#: (the modules of a sub-package from their own sub-package, not from a sibling of the same layer).
EXPLAIN_LAYERS = [
    {"mode"},
    {"inputs", "targets", "accounting", "masks"},
    {"capture", "subgraphs", "walks"},
    {"explainer", "algorithm", "relevance_pass", "pyg_explainer", "one_pass", "hetero", "tensors"},
    {"jobs"},
]


def explain_unit(module: str) -> str | None:
    """The sub-package or top-level module of ``lrp_lib.explain`` that ``module`` (dotted) belongs to."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["lrp_lib", "explain"] else None


def layer_violations(path: Path, imports) -> list[str]:
    rank = {unit: i for i, layer in enumerate(EXPLAIN_LAYERS) for unit in layer}
    own = explain_unit(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    out = []
    for line, module, names in imports:
        unit = explain_unit(module)
        if own is None or unit is None or unit == own:
            continue
        if rank[unit] > rank[own] or (rank[unit] == rank[own] and rank[own] in (0, 2, 4)):
            out.append(f"{path.relative_to(PACKAGE.parent)}:{line}: lrp_lib.explain.{own} imports {module}")
    return out


EXPLAIN = [p for p in MODULES if part_of(p) == "explain" and p != PACKAGE / "explain" / "__init__.py"]


@pytest.mark.parametrize("path", EXPLAIN, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_explain_imports_point_down_its_layers(path):
    assert layer_violations(path, lrp_imports(path)) == []


def test_every_explain_unit_has_a_layer_and_the_check_catches_an_upward_import():
    units = {explain_unit(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)) for p in EXPLAIN}
    assert units == set().union(*EXPLAIN_LAYERS)
    walks = PACKAGE / "explain" / "walks" / "model.py"
    assert layer_violations(walks, [(1, "lrp_lib.explain.subgraphs", ["x"]), (2, "lrp_lib.explain.algorithm", ["y"]),
                                    (3, "lrp_lib.explain.targets", ["z"])]) == [
        "lrp_lib/explain/walks/model.py:1: lrp_lib.explain.walks imports lrp_lib.explain.subgraphs",
        "lrp_lib/explain/walks/model.py:2: lrp_lib.explain.walks imports lrp_lib.explain.algorithm"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict:
    """Each module of lrp_lib to the modules of lrp_lib it imports (anywhere in it, functions included; ``from
    package import module`` counts as the module)."""
    names = {module_name(p) for p in MODULES}
    graph = {}
    for path in MODULES:
        targets = set()
        for _, module, imported in lrp_imports(path):
            subs = [f"{module}.{n}" for n in imported if f"{module}.{n}" in names]
            targets.update(subs or ([module] if module in names else []))
        graph[module_name(path)] = targets - {module_name(path)}
    return graph


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
