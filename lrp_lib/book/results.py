"""Read the benchmark results files in a chapter and show them as tables.

The scripts under ``benchmarks/`` write ``benchmarks/results/<name>.json`` (see
``benchmarks/results_file.py``), every file with the same top level::

    {"benchmark": name, "command": str, "machine": {...}, "settings": {...}, "results": [...] or {...}}

A chapter reads one with :func:`load_results`, says where it was measured with
:func:`machine_note` and shows rows of it with :func:`results_table`::

    from lrp_lib.book.results import load_results, machine_note, results_table
    graph = load_results("graph", repository=globals().get("REPOSITORY"))
    print(machine_note(graph))
    results_table(graph["results"]["rows"], [("measure", "measure", None), ("ratio", "ratio", "{:.2f}x")])

The table is an :class:`IPython.display.Markdown` object: the book renders its ``text/markdown``,
and its ``text/plain`` is IPython's fixed ``<IPython.core.display.Markdown object>``, so a stored
output compares equal on every machine.
"""
from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

from IPython.display import Markdown

__all__ = ["load_results", "validate_results", "machine_note", "results_table", "format_value",
           "raw_url", "REPOSITORY_ENV"]

#: The environment variable naming the book's repository, where :func:`load_results` downloads a results file
#: that is not on disk (the chapters' Colab cell sets it).
REPOSITORY_ENV = "LRP_BOOK_REPOSITORY"

#: The keys every results file has, and the type of each value.
LAYOUT = {"benchmark": str, "command": str, "machine": dict, "settings": dict, "results": (list, dict)}

_NAME = re.compile(r"^([A-Za-z0-9_-]+/)?[A-Za-z0-9_-]+$")  # a benchmark, or a run of it in a folder of results


def raw_url(repository: str, name: str, branch: str = "main") -> str:
    """The raw.githubusercontent.com address of ``benchmarks/results/<name>.json`` in ``repository``.

    ``repository`` is a GitHub URL such as ``https://github.com/owner/repo`` (a ``git+`` prefix,
    a ``.git`` suffix or a trailing slash are accepted).
    """
    m = re.match(r"^(?:git\+)?https?://github\.com/([^/\s]+)/([^/\s]+?)(?:\.git)?/?$", repository.strip())
    if m is None:
        raise ValueError(f"repository must be a GitHub URL like https://github.com/owner/repo, got {repository!r}")
    owner, repo = m.groups()
    return f"https://raw.githubusercontent.com/{owner}/{repo}/{branch}/benchmarks/results/{name}.json"


def validate_results(data: Any, name: str | None = None, source: str = "results") -> dict:
    """Check that ``data`` has the layout that ``benchmarks/results_file.write_results`` writes.

    Raises ``ValueError`` naming the missing or mistyped key. Returns ``data``.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a results file holds a JSON object, got {type(data).__name__}")
    missing = [k for k in LAYOUT if k not in data]
    if missing:
        raise ValueError(f"{source}: missing key(s) {missing}; a results file has {list(LAYOUT)} "
                         "(written by benchmarks/results_file.write_results)")
    for key, kind in LAYOUT.items():
        if not isinstance(data[key], kind):
            expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ValueError(f"{source}: '{key}' must be a {expected}, got {type(data[key]).__name__}")
    if name is not None and data["benchmark"] != name.rsplit("/", 1)[-1]:
        raise ValueError(f"{source}: 'benchmark' is {data['benchmark']!r}, expected {name.rsplit('/', 1)[-1]!r}")
    return data


def _find_local(name: str, start: Path) -> Path | None:
    for folder in (start, *start.parents):
        path = folder / "benchmarks" / "results" / f"{name}.json"
        if path.is_file():
            return path
    return None


def load_results(name: str, repository: str | None = None, *, timeout: float = 30.0) -> dict:
    """Read ``benchmarks/results/<name>.json`` (``name``: ``"quality"``, or ``"confirmatory/quality"`` for a run
    kept in a folder of its own).

    Looks in ``benchmarks/results`` of the current directory and of each of its parents (the
    chapters run from ``book/``). If there is none and ``repository`` (a GitHub URL; by default
    ``$LRP_BOOK_REPOSITORY``, which the chapters' Colab cell sets) is given, downloads the file from the
    ``main`` branch of that repository. Otherwise raises ``FileNotFoundError`` saying which script writes it.
    The layout is checked by :func:`validate_results`.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be a benchmark name such as 'ops' or 'graph' (letters, digits, '_', '-'), "
                         f"or one in a folder of results such as 'confirmatory/quality', got {name!r}")
    repository = repository or os.environ.get(REPOSITORY_ENV)
    path = _find_local(name, Path.cwd().resolve())
    if path is not None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        return validate_results(data, name, str(path))
    if repository:
        url = raw_url(repository, name)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                text = response.read().decode("utf-8")
        except (urllib.error.URLError, OSError) as err:
            raise FileNotFoundError(f"benchmarks/results/{name}.json is not in this directory or its parents, "
                                    f"and downloading {url} failed ({err})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{url}: not valid JSON ({err})") from None
        return validate_results(data, name, url)
    raise FileNotFoundError(
        f"benchmarks/results/{name}.json was not found in {Path.cwd()} or its parents. Run "
        f"`python benchmarks/bench_{name}.py` from the repository root to write it, or pass "
        f"repository=<GitHub URL of the book> to download the committed one.")


def machine_note(results: Mapping) -> str:
    """One line saying where and when the figures of a results file were measured."""
    validate_results(dict(results))
    m = results["machine"]
    parts = [m.get("cpu") or m.get("machine") or "unknown CPU"]
    if m.get("cores") is not None:
        parts.append(f"{m['cores']} cores")
    if m.get("torch_threads") is not None:
        threads = m["torch_threads"]
        parts.append(f"{threads} PyTorch thread" + ("" if threads == 1 else "s"))
    if m.get("cpu_capability"):
        parts.append(f"kernels for {m['cpu_capability'].upper()}")
    if m.get("torch"):
        parts.append(f"PyTorch {m['torch']}")
    if m.get("gpu"):
        parts.append(f"GPU {m['gpu']}")
    start = (results.get("settings") or {}).get("load_average_1min_start")
    if start is not None:  # taken by the benchmark before it ran
        parts.append(f"load average {start:.1f} at the start")
    elif m.get("load_average_1min") is not None:  # taken when the file was written
        parts.append(f"load average {m['load_average_1min']:.1f} at the end")
    when = f" on {m['date']}" if m.get("date") else ""
    return f"Measured{when} by `{results['command']}`: " + ", ".join(parts) + "."


def format_value(value: Any, fmt=None, missing: str = "-") -> str:
    """Format one table cell.

    ``fmt`` is ``None`` (``str(value)``), a format string with one ``{}`` field (``"{:.2f}x"``), a
    format spec (``".2f"``, ``",.0f"``) or a callable. ``None`` and NaN values give ``missing``.
    """
    if value is None or (isinstance(value, float) and value != value):
        return missing
    if fmt is None:
        text = str(value)
    elif callable(fmt):
        text = fmt(value)
    elif "{" in fmt:
        text = fmt.format(value)
    else:
        text = format(value, fmt)
    return text.replace("|", "\\|")


def results_table(rows: Sequence[Mapping], columns: Sequence[Sequence], missing: str = "-") -> Markdown:
    """A Markdown table of ``rows`` (dicts) for the book.

    ``columns`` holds ``(header, key, fmt)`` for each column: ``key`` is the row's key (or a
    callable of the row), ``fmt`` as in :func:`format_value`. Columns whose ``fmt`` is not ``None``
    (numbers) are right-aligned. A key that a row lacks, or a ``None`` value, shows ``missing``.
    """
    if not columns:
        raise ValueError("columns must name at least one (header, key, fmt) column")
    cols = []
    for i, col in enumerate(columns):
        if isinstance(col, str) or len(col) not in (2, 3):
            raise ValueError(f"columns[{i}] must be (header, key) or (header, key, fmt), got {col!r}")
        header, key, fmt = (*col, None) if len(col) == 2 else col
        cols.append((str(header), key, fmt))
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h, _, _ in cols) + " |",
             "| " + " | ".join("---:" if fmt is not None else "---" for _, _, fmt in cols) + " |"]
    for r, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"rows[{r}] must be a dict of column values, got {type(row).__name__}")
        cells = []
        for header, key, fmt in cols:
            value = key(row) if callable(key) else row.get(key)
            try:
                cells.append(format_value(value, fmt, missing))
            except (ValueError, TypeError) as err:
                raise ValueError(f"rows[{r}], column {header!r}: cannot format {value!r} with {fmt!r} ({err})") from None
        lines.append("| " + " | ".join(cells) + " |")
    return Markdown("\n".join(lines))
