"""Build a chapter notebook from its percent-format source and execute it in place.

    python tools/nb.py book/_src/01_hijacking_autograd.py [...]

A source file is plain Python.  ``# %%`` starts a code cell, ``# %% [markdown]`` a markdown
cell (each of its lines starts with ``# ``), and ``tags=["hide-input"]`` after the marker sets
cell tags.  The notebook is written to ``book/<name>.ipynb`` and executed there (so relative
paths resolve as they do in the book build and under nbval), with the outputs stored.

Every chapter gets the Colab install cell of ``book/_src/_colab_cell.txt`` right after its first
markdown cell (the title), with the repository URL from ``_config.yml``, the one place that names
it. The cell is tagged ``remove-cell``: the rendered book does not show it, Colab runs it.
"""
import json
import re
import sys
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient

MARKER = re.compile(r"^# %%(?P<md> \[markdown\])?(?P<rest>.*)$")


def parse(text):
    cells, kind, tags, lines = [], None, [], []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(l[2:] if l.startswith("# ") else l.lstrip("#") for l in body.split("\n"))
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            trapped = [l for l in body.split("\n") if re.match(r"^# #+ ", l)]
            if trapped:  # a heading after code without a "# %% [markdown]" marker renders as a comment
                raise SystemExit(f"markdown heading inside a code cell: {trapped[0]!r}; "
                                 "start a markdown cell with '# %% [markdown]' before it")
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)

    for line in text.split("\n"):
        m = MARKER.match(line)
        if m:
            flush()
            kind = "markdown" if m.group("md") else "code"
            t = re.search(r"tags=(\[.*\])", m.group("rest"))
            tags = json.loads(t.group(1)) if t else []
            lines = []
        else:
            lines.append(line)
    flush()
    return cells


ROOT = Path(__file__).resolve().parents[1]


def colab_cell():
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    text = (ROOT / "book" / "_src" / "_colab_cell.txt").read_text().strip("\n")
    cell = nbformat.v4.new_code_cell(text.format(repository=repository))
    cell.metadata["tags"] = ["remove-cell"]
    return cell


def coalesce_streams(outputs: list) -> list:
    """The outputs with consecutive parts of one stream (stdout, stderr) joined: where the kernel flushes a
    stream between two prints depends on timing, so the stored outputs would not."""
    joined = []
    for out in outputs:
        if (out.get("output_type") == "stream" and joined and joined[-1].get("output_type") == "stream"
                and joined[-1].get("name") == out.get("name")):
            joined[-1]["text"] += out["text"]
        else:
            joined.append(out)
    return joined


def build(src: Path, execute: bool = True) -> Path:
    nb = nbformat.v4.new_notebook()
    cells = parse(src.read_text())
    if not cells or cells[0].cell_type != "markdown" or not cells[0].source.startswith("# "):
        raise SystemExit(f"{src}: a chapter starts with a markdown cell holding its '# ' title")
    nb.cells = cells[:1] + [colab_cell()] + cells[1:]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    dest = src.parent.parent / (src.stem + ".ipynb")
    if execute:
        NotebookClient(nb, timeout=1200, kernel_name="python3",
                       resources={"metadata": {"path": str(dest.parent)}}).execute()
        nb.metadata["language_info"] = {"name": "python"}  # keep version numbers out of the diff
    for cell in nb.cells:  # cell ids make noisy diffs; number them instead
        cell["id"] = f"c{nb.cells.index(cell):03d}"
        cell.get("metadata", {}).pop("execution", None)
        if cell.cell_type == "code":  # (a stream flushed in two parts, by timing, is stored as one)
            cell.outputs = coalesce_streams(cell.outputs)
    nbformat.write(nb, dest)
    return dest


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("built", build(Path(arg)))
