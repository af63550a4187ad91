"""The book's own conventions: every chapter is in the table of contents, starts with the
Colab-only install cell pointing at the repository named in _config.yml, and stores no output
that would make nbval flaky."""
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))  # the numbered chapters and the other pages


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def test_there_are_chapters():
    assert CHAPTERS, "no chapter notebooks found in book/"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_in_the_toc(path):
    assert f"book/{path.stem}" in toc_files()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_colab_cell_follows_the_title_installs_only_in_colab_from_the_configured_repository(path):
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    cells = json.loads(path.read_text())["cells"]
    title, install = cells[0], cells[1]
    assert title["cell_type"] == "markdown" and "".join(title["source"]).startswith("# "), "title first"
    source = "".join(install["source"])
    assert '"google.colab" in sys.modules' in source
    assert f'REPOSITORY = "{repo}"' in source and "git+{REPOSITORY}" in source
    assert "torch" not in re.sub(r"torch_geometric", "", source.split("pip")[1]), "must not reinstall torch"
    assert "remove-cell" in install["metadata"].get("tags", []), "the rendered book does not show it"
    assert "RuntimeError" in source, "a failed install says what to do"
    others = ["".join(c["source"]) for c in cells[2:] if c["cell_type"] == "code"]
    assert not any("google.colab" in s and "pip" in s for s in others), "one install cell per chapter"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_stored_outputs_are_machine_independent(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("execution_count") is not None or not "".join(cell["source"]).strip(), f"cell {i} never ran"
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr", f"cell {i} stored stderr output"
            assert out["output_type"] != "error", f"cell {i} stored an error"
            text = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            assert not re.search(r"0x[0-9a-fA-F]{6,}", text), f"cell {i}: memory address"
            assert not re.search(r"/work/|/tmp/|/root/|/home/|site-packages", text), f"cell {i}: a local path"
            assert not re.search(r"\d+(\.\d+)?\s?(it/s|s/it)", text), f"cell {i}: progress bar"


# A measured number: at least two decimals (0.716, -3.15, 1.19x). The text may quote the literature
# (a line with a citation) and math; everything else that is measured must come from a cell (glue,
# or a table rendered from benchmarks/results).
NUMBER = re.compile(r"(?<![\w.])[-\u2212]?\d+\.\d{2,}(?![\d.])")
CITED = re.compile(r"\{cite|et al\.|reported", re.I)


def typed_numbers(markdown_lines, outputs):
    found = []
    for line in markdown_lines:
        if CITED.search(line) or line.strip().startswith("$$"):
            continue
        bare = re.sub(r"`[^`]*`", "", re.sub(r"\$[^$]*\$", "", line))
        bare = re.sub(r"(?i)\b(pytorch|torch|python|jupyter[- ]book|version)\s*[=v]?\s*[\d.]+", "", bare)
        found += [(n, line.strip()) for n in NUMBER.findall(bare) if n.replace("\u2212", "-").lstrip("-") not in outputs]
    return found


def stored_text(nb):
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            for key, value in out.get("data", {}).items():
                if key.startswith("text/") or key.startswith("application/papermill.record/text"):
                    texts.append("".join(value) if isinstance(value, list) else str(value))
    return "\n".join(texts)


PAGES = sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_measured_number_is_typed_into_prose(path):
    if path.suffix == ".md":
        lines, outputs = path.read_text().splitlines(), ""
    else:
        nb = json.loads(path.read_text())
        lines = [l for c in nb["cells"] if c["cell_type"] == "markdown" for l in "".join(c["source"]).splitlines()]
        outputs = stored_text(nb)
    typed = typed_numbers(lines, outputs)
    assert not typed, "numbers typed into prose that no cell produces (glue them): " + "; ".join(
        f"{n} in {line[:80]!r}" for n, line in typed[:5])


def test_the_typed_number_check_catches_a_typed_number():
    assert typed_numbers(["LRP scores 0.716 here"], "0.612") == [("0.716", "LRP scores 0.716 here")]
    assert typed_numbers(["LRP scores 0.716 here"], "auroc 0.716") == []
    assert typed_numbers(["GNNExplainer 0.925 {cite}`ying2019`", "$x = 1.25$", "PyTorch 2.13"], "") == []


def prose_words(nb: dict) -> int:
    """The words of a notebook's markdown cells (a glued value counts as one word)."""
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return len(re.findall(r"\w+", re.sub(r"\{glue:text\}`[^`]*`", "x", text)))


#: What a reader gets through in one sitting: 5,000 words of prose a page, and the costs page, which answers
#: one question, 1,500.
WORD_LIMIT, WORD_LIMITS = 5000, {"performance": 1500}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_page_stays_within_its_length(path):
    limit = WORD_LIMITS.get(path.stem, WORD_LIMIT)
    words = prose_words(json.loads(path.read_text()))
    assert words <= limit, f"{path.stem}: {words} words of prose, more than {limit}"


def test_the_length_check_counts_the_words_of_the_prose():
    nb = {"cells": [{"cell_type": "markdown", "source": ["# Costs\n", "It costs {glue:text}`ratio:.2f` times."]},
                    {"cell_type": "code", "source": ["print('not prose at all here')"]}]}
    assert prose_words(nb) == 5


#: Names of a rule that the prose does not use: each rule has one name (the glossary's), one string that selects
#: it and one class; formulas ($z^+_{jk}$) are not names.
OTHER_RULE_NAMES = {
    r"\bz\$\^\{?\+\}?\$": "z+",
    r"\bLRP-?zero\b|\bLRP0\b": "LRP-0",
    r"\bz-plus\b|\bZ\+": "z+",
    r"(?:ε|\$\\(?:var)?epsilon\$)[- ]rule": "epsilon",
    r"(?:γ|\$\\gamma\$)[- ]rule": "gamma",
    r"αβ|\$\\alpha\\beta\$|\$\\alpha\$-\$\\beta\$": "alpha-beta",
}


def other_rule_names(text: str) -> list[tuple[str, str]]:
    """(what was written, the rule's name) for each other name of a rule in ``text``."""
    return [(m.group(0), name) for pattern, name in OTHER_RULE_NAMES.items() for m in re.finditer(pattern, text)]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_each_rule_has_one_name_in_the_prose(path):
    if path.suffix == ".md":
        text = path.read_text()
    else:
        nb = json.loads(path.read_text())
        text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert not other_rule_names(text), f"{path.name}: write the rules by their glossary names: {other_rule_names(text)}"


def test_the_rule_name_check_catches_another_name():
    assert other_rule_names("the default, z$^+$, and the $\\gamma$-rule") == [("z$^+$", "z+"), ("$\\gamma$-rule", "gamma")]
    assert other_rule_names("z+ keeps $z^+_{jk} / \\sum_j z^+_{jk}$; LRP-0 and epsilon") == []


def test_every_rule_name_is_in_the_glossary():
    glossary = (ROOT / "book" / "glossary.md").read_text()
    terms = set(re.findall(r"^(\S[^\n]*)\n  ", glossary.split("```{glossary}")[1], re.M))
    assert {"LRP-0", "epsilon", "gamma", "z+", "alpha-beta", "zbox"} <= terms, terms


def shown_tables(nb: dict) -> int:
    """The tables a page shows unfolded: markdown tables in its cells' outputs (``hide-output`` and
    ``hide-cell``: folded) and in its prose."""
    count = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            count += len(re.findall(r"^\|[ :-]*-{3}", "".join(cell["source"]), re.M))
        elif not {"hide-output", "hide-cell"} & set(cell.get("metadata", {}).get("tags", [])):
            for out in cell.get("outputs", []):
                text = "".join(out.get("data", {}).get("text/markdown", ""))
                count += len(re.findall(r"^\|[ :-]*-{3}", text, re.M))
    return count


#: Tables a reader takes in on one page; the rest are folded (``hide-output``) or in the results files.
TABLE_LIMIT = 8


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_page_shows_at_most_eight_tables(path):
    shown = shown_tables(json.loads(path.read_text()))
    assert shown <= TABLE_LIMIT, f"{path.stem} shows {shown} tables; fold the reference ones (tags=['hide-output'])"


def test_the_table_count_skips_folded_outputs():
    table = {"data": {"text/markdown": "| a | b |\n| --- | --- |\n| 1 | 2 |"}}
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [table, table]},
                    {"cell_type": "code", "metadata": {"tags": ["hide-output"]}, "outputs": [table]},
                    {"cell_type": "code", "metadata": {"tags": ["hide-cell"]}, "outputs": [table]},
                    {"cell_type": "markdown", "source": ["| x |\n", "|---|\n", "| y |"]}]}
    assert shown_tables(nb) == 3


def glued_values(nb: dict) -> dict:
    """The values a notebook glues (myst-nb's ``glue``), by name, as their stored text."""
    found = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("application/papermill.record/text/plain")
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if text is not None and name:
                found[name] = "".join(text)
    return found


def differing_glues(pages: dict) -> dict:
    """``{name: {page: value}}`` for each glued name that pages state with different values."""
    by_name: dict = {}
    for page, values in pages.items():
        for name, value in values.items():
            by_name.setdefault(name, {})[page] = value
    return {name: v for name, v in by_name.items() if len(set(v.values())) > 1}


def test_a_quantity_glued_on_several_pages_has_one_value():
    """A glued name is one quantity: where two pages glue it (the picked molecule's log-odds, the number of
    benchmark tasks), they state the same value."""
    pages = {p.name: glued_values(json.loads(p.read_text())) for p in CHAPTERS}
    differing = differing_glues(pages)
    assert not differing, f"the same glued name with different values on different pages: {differing}"


def test_the_glue_check_catches_two_values():
    assert differing_glues({"a": {"x": "1.0", "y": "2"}, "b": {"x": "1.1", "y": "2"}}) == {"x": {"a": "1.0", "b": "1.1"}}


#: Quantities that more than one page may want to state, each recognised in a sentence that glues a value: the
#: book states each on one page, or on several through the same glued name (one cell's value, which
#: ``test_a_quantity_glued_on_several_pages_has_one_value`` holds to one value).  Two pages that measure "LRP
#: against GNNExplainer" on different models and glue different numbers read as a contradiction.
QUANTITIES = {
    "LRP's time against GNNExplainer's": re.compile(
        r"GNNExplainer.*\b(faster|slower|times as long)\b|\b(faster|slower|times as long)\b.*GNNExplainer"),
    "LRP's time against saliency's": re.compile(
        r"saliency.*\b(faster|slower|times the (time|rate)|costs?)\b|\b(faster|slower|times the (time|rate)|costs?)\b"
        r".*saliency", re.I),
    "Integrated Gradients' time": re.compile(
        r"Integrated Gradients.*\b(costs?|times as long|ms)\b|\b(costs?|times as long)\b.*Integrated Gradients"),
    "the time per molecule": re.compile(r"\bms per\s+molecule\b|\bper molecule\b.*\bms\b"),
}
GLUED = re.compile(r"\{glue:text\}`([^`]+)`")


def quantity_statements(markdown: str) -> dict:
    """``{quantity: {glued names}}``: the sentences of ``markdown`` that glue a value and state one of
    :data:`QUANTITIES`, by the names they glue."""
    found: dict = {}
    text = re.sub(r"\s+", " ", markdown)
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z\[{(*])", text):
        names = set(GLUED.findall(sentence))
        if not names:
            continue
        for quantity, pattern in QUANTITIES.items():
            if pattern.search(GLUED.sub("x", sentence)):
                found.setdefault(quantity, set()).update(names)
    return found


def restated_quantities(pages: dict) -> dict:
    """``{quantity: {page: glued names}}`` for each quantity that two pages state through different glued names."""
    by_quantity: dict = {}
    for page, markdown in pages.items():
        for quantity, names in quantity_statements(markdown).items():
            by_quantity.setdefault(quantity, {})[page] = names
    return {q: v for q, v in by_quantity.items()
            if len(v) > 1 and len({frozenset(n) for n in v.values()}) > 1}


def test_a_quantity_is_stated_on_one_page():
    """LRP's cost against another method, or per molecule, comes from one page's cell: another page links to
    it rather than measuring it again on another model."""
    pages = {p.name: "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"]
                               if c["cell_type"] == "markdown") for p in CHAPTERS}
    restated = restated_quantities(pages)
    assert not restated, f"the same quantity stated on several pages from different cells: {restated}"


def test_the_restated_quantity_check_catches_a_second_measurement():
    first = "Batched, LRP takes {glue:text}`ms_a` ms per molecule. GNNExplainer is {glue:text}`x` times slower."
    second = "It explains {glue:text}`ms_b` ms per\nmolecule, one batch at a time. See [Performance](p.ipynb) for saliency."
    assert restated_quantities({"a": first, "b": second}) == {"the time per molecule": {"a": {"ms_a"}, "b": {"ms_b"}}}
    # the same glued name on both pages (one cell's value), or a link without a number: no restatement
    assert restated_quantities({"a": first, "b": second.replace("ms_b", "ms_a")}) == {}
    assert restated_quantities({"a": first, "b": "GNNExplainer's cost is on [Comparing](c.ipynb)."}) == {}


FOLDED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def shown_glue_cells(nb: dict) -> list:
    """The indices of the code cells a reader sees the code of that call ``glue``: book plumbing, which belongs in
    a cell tagged ``remove-cell`` (myst-nb reads glued values from removed cells too)."""
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and not FOLDED & set(c.get("metadata", {}).get("tags", [])) and "glue(" in "".join(c["source"])]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_shown_code_calls_glue(path):
    cells = shown_glue_cells(json.loads(path.read_text()))
    assert not cells, f"{path.stem}: code cells {cells} show glue calls; move them to a cell tagged remove-cell"


def test_the_glue_plumbing_check_catches_a_shown_glue_call():
    shown = {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "glue('x', x, display=False)"]}
    removed = {"cell_type": "code", "metadata": {"tags": ["remove-cell"]}, "source": ["glue('x', x, display=False)"]}
    plain = {"cell_type": "code", "metadata": {}, "source": ["x = 1"]}
    assert shown_glue_cells({"cells": [plain, shown, removed]}) == [1]


#: The pages the intro names as going straight to their point: no objectives box, no summary.
WITHOUT_FRAME = {"quickstart", "coverage", "bad_inputs"}


def frame_missing(nb: dict) -> list[str]:
    """What a chapter lacks of the frame the intro promises: the objectives box at the top and a summary."""
    markdown = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    missing = []
    if not any("Audience" in m and "Objectives" in m for m in markdown[:3]):
        missing.append("an Audience & Objectives box in its first cells")
    if not any(re.search(r"^## Summary", m, re.M) for m in markdown):
        missing.append("a '## Summary' section")
    return missing


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_has_the_frame_the_intro_promises(path):
    intro = (ROOT / "book" / "intro.md").read_text()
    assert "opens with an *Audience & Objectives* box and ends with a summary" in intro
    if path.stem in WITHOUT_FRAME:
        return
    missing = frame_missing(json.loads(path.read_text()))
    assert not missing, f"{path.stem} lacks {missing}"


def test_the_frame_check_catches_a_chapter_without_a_box():
    nb = {"cells": [{"cell_type": "markdown", "source": ["# A page\n", "Some words."]},
                    {"cell_type": "markdown", "source": ["## Summary\n", "- a point"]}]}
    assert frame_missing(nb) == ["an Audience & Objectives box in its first cells"]
    nb["cells"][0]["source"].append("\n:::{admonition} Audience & Objectives\nyou\n:::")
    nb["cells"][1]["source"] = ["## Sum up"]
    assert frame_missing(nb) == ["a '## Summary' section"]
