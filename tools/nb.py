"""Build a chapter notebook from its percent-format source and execute it in place.

    python tools/nb.py book/_src/01_hijacking_autograd.py [...]

A source file is plain Python.  ``# %%`` starts a code cell, ``# %% [markdown]`` a markdown
cell (each of its lines starts with ``# ``), and ``tags=["hide-input"]`` after the marker sets
cell tags.  The notebook is written to ``book/<name>.ipynb`` and executed there (so relative
paths resolve as they do in the book build and under nbval), with the outputs stored.
"""
import json
import re
import sys
from pathlib import Path

import nbformat
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


def build(src: Path, execute: bool = True) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = parse(src.read_text())
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
    nbformat.write(nb, dest)
    return dest


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("built", build(Path(arg)))
