"""lrp_lib.book.results: reading benchmarks/results/<name>.json and rendering tables for the book."""
import io
import json
import sys
import urllib.error
from pathlib import Path

import pytest
from IPython.display import Markdown

from lrp_lib.book import results as R

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def payload(name="ops", **overrides):
    data = {
        "benchmark": name,
        "command": f"python benchmarks/bench_{name}.py --threads 1",
        "machine": {"cpu": "Test CPU 9000", "machine": "x86_64", "cores": 2, "torch_threads": 1,
                    "cpu_capability": "avx512", "torch": "2.13.0+cpu", "python": "3.11.9",
                    "date": "2026-01-02", "load_average_1min": 3.456},
        "settings": {"threads": 1},
        "results": [{"case": "a", "ratio": 1.234}],
    }
    data.update(overrides)
    return data


def write(folder: Path, name: str, data) -> Path:
    path = folder / "benchmarks" / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_load_finds_file_in_a_parent_directory(tmp_path, monkeypatch):
    write(tmp_path, "ops", payload())
    book = tmp_path / "book" / "deeper"
    book.mkdir(parents=True)
    monkeypatch.chdir(book)
    data = R.load_results("ops")
    assert data["results"] == [{"case": "a", "ratio": 1.234}]
    assert data["machine"]["cores"] == 2


def test_nearest_directory_wins(tmp_path, monkeypatch):
    write(tmp_path, "ops", payload(results=[{"case": "outer"}]))
    write(tmp_path / "book", "ops", payload(results=[{"case": "inner"}]))
    monkeypatch.chdir(tmp_path / "book")
    assert R.load_results("ops")["results"] == [{"case": "inner"}]


def test_missing_file_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"python benchmarks/bench_graph\.py"):
        R.load_results("graph")


@pytest.mark.parametrize("bad, message", [
    ({k: v for k, v in payload().items() if k != "machine"}, r"missing key\(s\) \['machine'\]"),
    (payload(settings=[1]), r"'settings' must be a dict, got list"),
    (payload(results="fast"), r"'results' must be a list or dict, got str"),
    (payload(command=3), r"'command' must be a str"),
    (payload(name="conv"), r"'benchmark' is 'conv', expected 'ops'"),
    ([1, 2], r"holds a JSON object, got list"),
])
def test_wrong_layout_is_an_error(tmp_path, monkeypatch, bad, message):
    path = write(tmp_path, "ops", bad)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message) as err:
        R.load_results("ops")
    assert str(path) in str(err.value)


def test_invalid_json_is_an_error(tmp_path, monkeypatch):
    write(tmp_path, "ops", "{not json")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="not valid JSON"):
        R.load_results("ops")


def test_a_run_in_a_folder_of_results(tmp_path, monkeypatch):
    folder = tmp_path / "benchmarks" / "results" / "confirmatory"
    folder.mkdir(parents=True)
    layout = {"benchmark": "ops", "command": "c", "machine": {}, "settings": {}, "results": []}
    (folder / "ops.json").write_text(json.dumps(layout))
    monkeypatch.chdir(tmp_path)
    assert R.load_results("confirmatory/ops")["benchmark"] == "ops"
    (folder / "ops.json").write_text(json.dumps({**layout, "benchmark": "graph"}))
    with pytest.raises(ValueError, match="'benchmark' is 'graph', expected 'ops'"):
        R.load_results("confirmatory/ops")


@pytest.mark.parametrize("name", ["../ops", "ops.json", "", None, "a/b/ops", "/ops"])
def test_bad_name(name):
    with pytest.raises(ValueError, match="name must be a benchmark name"):
        R.load_results(name)


def test_write_results_layout_is_accepted(tmp_path, monkeypatch):
    """What benchmarks/results_file.write_results writes is what load_results reads."""
    import results_file

    monkeypatch.setattr(results_file, "RESULTS", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(sys, "argv", ["/x/benchmarks/bench_unit.py", "--threads", "1"])
    results_file.write_results("unit", {"rows": [{"x": 1}]}, {"threads": 1})
    monkeypatch.chdir(tmp_path)
    data = R.load_results("unit")
    assert data["command"] == "python benchmarks/bench_unit.py --threads 1"
    assert data["results"] == {"rows": [{"x": 1}]}
    note = R.machine_note(data)
    assert note.startswith(f"Measured on {data['machine']['date']} by `python benchmarks/bench_unit.py --threads 1`")


def test_raw_url():
    expected = "https://raw.githubusercontent.com/o/r/main/benchmarks/results/ops.json"
    for url in ["https://github.com/o/r", "https://github.com/o/r/", "https://github.com/o/r.git",
                "git+https://github.com/o/r"]:
        assert R.raw_url(url, "ops") == expected
    with pytest.raises(ValueError, match="repository must be a GitHub URL"):
        R.raw_url("https://gitlab.com/o/r", "ops")


def test_download_from_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []

    def fake_urlopen(url, timeout):
        seen.append(url)
        return io.BytesIO(json.dumps(payload("conv")).encode())

    monkeypatch.setattr(R.urllib.request, "urlopen", fake_urlopen)
    data = R.load_results("conv", repository="https://github.com/o/r")
    assert seen == ["https://raw.githubusercontent.com/o/r/main/benchmarks/results/conv.json"]
    assert data["benchmark"] == "conv"


def test_download_failure_is_file_not_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def fail(url, timeout):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(R.urllib.request, "urlopen", fail)
    with pytest.raises(FileNotFoundError, match="downloading https://raw.githubusercontent.com/o/r/main"):
        R.load_results("conv", repository="https://github.com/o/r")


def test_the_repository_comes_from_the_environment_by_default(tmp_path, monkeypatch):
    """The chapters call load_results(name): in Colab, where no results file is on disk, the install cell's
    LRP_BOOK_REPOSITORY says where to download it from; without it the error says which script writes it."""
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(R.urllib.request, "urlopen",
                        lambda url, timeout: seen.append(url) or io.BytesIO(json.dumps(payload("conv")).encode()))
    monkeypatch.delenv(R.REPOSITORY_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=r"python benchmarks/bench_conv\.py"):
        R.load_results("conv")
    monkeypatch.setenv(R.REPOSITORY_ENV, "https://github.com/o/r")
    assert R.load_results("conv")["benchmark"] == "conv"
    assert seen == ["https://raw.githubusercontent.com/o/r/main/benchmarks/results/conv.json"]


def test_local_file_is_preferred_to_the_repository(tmp_path, monkeypatch):
    write(tmp_path, "ops", payload())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(R.urllib.request, "urlopen", lambda *a, **k: pytest.fail("downloaded"))
    assert R.load_results("ops", repository="https://github.com/o/r")["benchmark"] == "ops"


def test_machine_note():
    note = R.machine_note(payload())
    assert note == ("Measured on 2026-01-02 by `python benchmarks/bench_ops.py --threads 1`: Test CPU 9000, "
                    "2 cores, 1 PyTorch thread, kernels for AVX512, PyTorch 2.13.0+cpu, "
                    "load average 3.5 at the end.")  # machine_info() runs when the file is written
    assert "\n" not in note
    started = payload()
    started["settings"] = {"load_average_1min_start": 0.4}
    assert R.machine_note(started).endswith("load average 0.4 at the start.")
    sparse = payload(machine={"machine": "arm64", "torch_threads": 4})
    assert R.machine_note(sparse) == "Measured by `python benchmarks/bench_ops.py --threads 1`: arm64, 4 PyTorch threads."
    with pytest.raises(ValueError, match="missing key"):
        R.machine_note({"machine": {}})


@pytest.mark.parametrize("value, fmt, text", [
    (1.23456, ".2f", "1.23"),
    (1.23456, "{:.2f}x", "1.23x"),
    (1234567.0, ",.0f", "1,234,567"),
    (3, None, "3"),
    (0.5, lambda v: f"{v:.0%}", "50%"),
    (None, ".2f", "-"),
    (float("nan"), ".2f", "-"),
    ("a|b", None, "a\\|b"),
])
def test_format_value(value, fmt, text):
    assert R.format_value(value, fmt) == text


def test_results_table():
    rows = [{"case": "linear", "ratio": 1.2345, "ms": 12.0},
            {"case": "scatter", "ratio": 2.0, "ms": None}]
    table = R.results_table(rows, [("case", "case"), ("ratio", "ratio", "{:.2f}x"),
                                   ("time (ms)", "ms", ".1f"), ("double", lambda r: r["ratio"] * 2, ".1f")])
    assert isinstance(table, Markdown)
    assert table.data == ("| case | ratio | time (ms) | double |\n"
                          "| --- | ---: | ---: | ---: |\n"
                          "| linear | 1.23x | 12.0 | 2.5 |\n"
                          "| scatter | 2.00x | - | 4.0 |")
    bundle = table._repr_markdown_()
    assert bundle == table.data
    # text/plain must not depend on the object's address or contents
    assert repr(table) == "<IPython.core.display.Markdown object>"


def test_results_table_errors():
    with pytest.raises(ValueError, match="columns must name at least one"):
        R.results_table([{"a": 1}], [])
    with pytest.raises(ValueError, match=r"columns\[0\] must be"):
        R.results_table([{"a": 1}], ["a"])
    with pytest.raises(ValueError, match=r"rows\[0\] must be a dict"):
        R.results_table([[1]], [("a", "a")])
    with pytest.raises(ValueError, match=r"rows\[0\], column 'a': cannot format 'x'"):
        R.results_table([{"a": "x"}], [("a", "a", ".2f")])
