"""Each chapter notebook agrees with its source: ``book/_src/NAME.py`` is what gets edited and
``tools/nb.py`` builds ``book/NAME.ipynb`` from it, so an edit made in Jupyter or Colab would be
lost at the next build.  These tests fail on any cell whose source, type or tags differ."""
import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "book" / "_src").glob("*.py"))
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def _nb_tool():
    spec = importlib.util.spec_from_file_location("nb_tool", ROOT / "tools" / "nb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NB = _nb_tool()


def cells_of_source(src: Path):
    """The cells ``tools/nb.py`` writes for ``src``, as (type, source, tags)."""
    cells = NB.parse(src.read_text())
    cells = cells[:1] + [NB.colab_cell()] + cells[1:]
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in cells]


def cells_of_notebook(path: Path):
    nb = nbformat.read(path, as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]


def differences(expected, stored):
    """Human-readable differences between two cell lists (empty when they agree)."""
    out = []
    if len(expected) != len(stored):
        out.append(f"{len(expected)} cells in the source, {len(stored)} in the notebook")
    for i, (a, b) in enumerate(zip(expected, stored)):
        if a != b:
            what = [name for name, x, y in zip(("type", "source", "tags"), a, b) if x != y]
            first = next((k for k, (x, y) in enumerate(zip(a[1], b[1])) if x != y), min(len(a[1]), len(b[1])))
            out.append(f"cell {i}: {', '.join(what)} differ (source from character {first}: "
                       f"{a[1][first:first + 40]!r} vs {b[1][first:first + 40]!r})")
    return out


def test_every_notebook_has_a_source_and_every_source_a_notebook():
    assert [p.stem for p in SOURCES] == [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_notebook_cells_equal_those_built_from_the_source(src):
    notebook = ROOT / "book" / f"{src.stem}.ipynb"
    problems = differences(cells_of_source(src), cells_of_notebook(notebook))
    assert not problems, (f"{notebook.name} and _src/{src.name} disagree; edit the source and rebuild with "
                          f"`python tools/nb.py book/_src/{src.name}`:\n  " + "\n  ".join(problems))


def test_the_check_catches_an_edit_made_in_the_notebook(tmp_path):
    src = SOURCES[0]
    nb = nbformat.read(ROOT / "book" / f"{src.stem}.ipynb", as_version=4)
    code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and i > 1)
    nb.cells[code].source += "\nprint('edited in Colab')"
    nb.cells[0].metadata["tags"] = ["hide-input"]
    stored = [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]
    problems = differences(cells_of_source(src), stored)
    assert len(problems) == 2
    assert problems[0].startswith("cell 0: tags differ") and problems[1].startswith(f"cell {code}: source differ")
    assert "edited in Colab" in problems[1]
    assert differences(cells_of_source(src), stored[:-1])[0].endswith("in the notebook")


#: Functions whose result shows only when displayed (or when it is the last expression of its cell).
_SHOWN_WHEN_DISPLAYED = ("results_table", "Markdown", "HTML")


def undisplayed(source: str) -> list[int]:
    """Lines of ``source`` (one code cell) where a table or Markdown is made and dropped: a bare
    expression that is not the cell's last statement, so the reader never sees it."""
    import ast
    lines = [line if not line.lstrip().startswith(("%", "!")) else "" for line in source.splitlines()]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    last = tree.body[-1] if tree.body else None
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node is not last
            and getattr(node.value.func, "id", None) in _SHOWN_WHEN_DISPLAYED]


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_every_table_a_cell_makes_is_shown(src):
    dropped = [(i, line) for i, (kind, source, _) in enumerate(cells_of_source(src)) if kind == "code"
               for line in undisplayed(source)]
    assert not dropped, f"{src.name}: tables made but not displayed (cell, line): {dropped}; wrap them in display()"


def test_the_display_check_catches_a_dropped_table():
    assert undisplayed("results_table(rows, cols)\nx = 1") == [1]
    assert undisplayed("if ok:\n    results_table(rows, cols)\nx = 1") == [2]
    assert undisplayed("display(results_table(rows, cols))\nx = 1") == []
    assert undisplayed("x = 1\nresults_table(rows, cols)") == []


def test_a_stream_flushed_in_parts_is_stored_as_one():
    """Where the kernel splits one cell's printing into several stream outputs depends on timing; the built
    notebook joins consecutive parts of one stream, and keeps other outputs and other streams apart."""
    out = nbformat.v4.new_output
    outputs = [out("stream", name="stdout", text="a\n"), out("stream", name="stdout", text="b\n"),
               out("stream", name="stderr", text="warn\n"), out("stream", name="stdout", text="c\n"),
               out("display_data", data={"text/plain": "x"}), out("stream", name="stdout", text="d\n")]
    got = NB.coalesce_streams(outputs)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in got] == [
        ("stream", "stdout", "a\nb\n"), ("stream", "stderr", "warn\n"), ("stream", "stdout", "c\n"),
        ("display_data", None, None), ("stream", "stdout", "d\n")]
