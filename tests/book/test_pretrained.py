"""lrp_lib.book.pretrained: stored weights load exactly, the retrain switch trains and stores, bad input is
named; and every chapter that trains a model, retrained from scratch on this machine, lands within a
stated tolerance of the model it stores (not digit for digit: another CPU drifts by about 1e-6)."""
import math
import shutil
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from torch import nn

from lrp_lib.book import pretrained

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

# How far a retrained model's metrics may land from the stored model's: (absolute, relative).
# A metric passes if it is within either. Accuracies and AUROCs move by a few test examples when
# training drifts (on another processor, whose products round differently, the chapter 8 GIN's test
# accuracy landed 0.025 from the stored one); losses are small positive numbers that move relative
# to their size.
TOLERANCES = {
    "accuracy": (0.03, 0.0),
    "auroc": (0.02, 0.0),
    "loss": (0.01, 0.25),
    "rmse": (0.0, 0.1),
    "mae": (0.0, 0.1),
}


def tolerance(metric: str) -> tuple[float, float]:
    for kind, tol in TOLERANCES.items():
        if kind in metric:
            return tol
    raise AssertionError(f"metric {metric!r} has no stated tolerance in TOLERANCES")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(pretrained.WEIGHTS_ENV, str(tmp_path))
    monkeypatch.delenv(pretrained.RETRAIN_ENV, raising=False)
    return tmp_path


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))


def fake_train(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    return {"metrics": {"train_loss": 0.25}, "checkpoints": [{"lr": 0.1, "state_dict": model.state_dict()}]}


def test_retrain_stores_and_a_fresh_model_loads_the_same_weights(folder):
    trained = make_model(0)
    record = pretrained.load_or_train("toy", trained, fake_train, retrain=True)
    assert record["source"] == "retrained" and record["metrics"] == {"train_loss": 0.25}
    assert (folder / "toy.pt").is_file()
    fresh = make_model(1)
    calls = []
    loaded = pretrained.load_or_train("toy", fresh, lambda m: calls.append(m))
    assert not calls, "train must not run when weights are stored"
    assert loaded["source"] == "stored" and loaded["metrics"] == {"train_loss": 0.25}
    for a, b in zip(trained.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    assert not fresh.training
    assert torch.equal(loaded["checkpoints"][0]["state_dict"]["0.weight"], trained[0].weight)
    assert "torch" in pretrained.load_record("toy")["trained_on"]


def test_the_environment_switch_retrains(folder, monkeypatch):
    pretrained.load_or_train("toy", make_model(0), fake_train, retrain=True)
    monkeypatch.setenv(pretrained.RETRAIN_ENV, "1")
    calls = []

    def train(model):
        calls.append(1)
        return {"metrics": {"train_loss": 0.5}}

    assert pretrained.load_or_train("toy", make_model(0), train)["metrics"]["train_loss"] == 0.5
    assert calls == [1]
    monkeypatch.setenv(pretrained.RETRAIN_ENV, "maybe")
    with pytest.raises(ValueError, match="LRP_BOOK_RETRAIN"):
        pretrained.load_or_train("toy", make_model(0), train)


def test_missing_weights_say_how_to_retrain(folder):
    with pytest.raises(FileNotFoundError, match="LRP_BOOK_RETRAIN=1"):
        pretrained.load_or_train("absent", make_model(0), fake_train)


def test_weights_of_another_model_are_refused_with_the_path(folder):
    pretrained.load_or_train("toy", make_model(0), fake_train, retrain=True)
    with pytest.raises(ValueError, match="do not fit this model"):
        pretrained.load_or_train("toy", nn.Linear(3, 1), fake_train)


@pytest.mark.parametrize("name", ["", "Upper", "../escape", "a b", 3])
def test_bad_names_are_refused(folder, name):
    with pytest.raises(ValueError, match="name"):
        pretrained.load_or_train(name, make_model(0), fake_train, retrain=True)


@pytest.mark.parametrize("record, match", [
    (None, "'metrics' dict"),
    ({"loss": 1.0}, "'metrics' dict"),
    ({"metrics": {"loss": "low"}}, "must be a float"),
    ({"metrics": {"loss": True}}, "must be a float"),
    ({"metrics": {}, "source": "x"}, "'source'"),
])
def test_bad_training_records_are_refused(folder, record, match):
    with pytest.raises((TypeError, ValueError), match=match):
        pretrained.load_or_train("toy", make_model(0), lambda m: record, retrain=True)


def test_model_and_train_are_checked(folder):
    with pytest.raises(TypeError, match="model"):
        pretrained.load_or_train("toy", "not a model", fake_train)
    with pytest.raises(TypeError, match="train"):
        pretrained.load_or_train("toy", make_model(0), None)


def test_tolerances_cover_the_stored_metrics():
    # the chapters' models; benchmarks/bench_quality.py's (quality_*) record its training run (epochs,
    # learning rate, attempts) and are checked by its own tests, not retrained from a chapter
    files = sorted(p for p in pretrained.weights_folder().glob("*.pt") if not p.stem.startswith("quality_"))
    assert len(files) >= 8
    for path in files:
        for metric in pretrained.load_record(path.stem)["record"]["metrics"]:
            tolerance(metric)


def training_chapters():
    found = []
    for path in CHAPTERS:
        nb = nbformat.read(path, as_version=4)
        if any("train" in c.metadata.get("tags", []) for c in nb.cells):
            found.append(path)
    return found


@pytest.mark.parametrize("path", training_chapters(), ids=lambda p: p.stem)
def test_chapter_retrained_from_scratch_lands_within_tolerance(path, folder, monkeypatch):
    """Run the chapter up to its last cell tagged "train" with LRP_BOOK_RETRAIN=1, writing into a
    temporary folder, and compare each retrained model's metrics with the stored model's."""
    nb = nbformat.read(path, as_version=4)
    last = max(i for i, c in enumerate(nb.cells) if "train" in c.metadata.get("tags", []))
    nb.cells = nb.cells[: last + 1]
    # A page may also load a model that another chapter trains (retrain=False): give it the stored
    # weights in the temporary folder; what this chapter retrains overwrites its own files there.
    stored_folder = Path(pretrained.__file__).resolve().parent / "weights"
    for stored in stored_folder.glob("*.pt"):
        shutil.copyfile(stored, folder / stored.name)
    copied = {f.name: f.stat().st_mtime_ns for f in folder.glob("*.pt")}
    monkeypatch.setenv(pretrained.RETRAIN_ENV, "1")
    NotebookClient(nb, timeout=1200, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    retrained = sorted(f for f in folder.glob("*.pt") if copied.get(f.name) != f.stat().st_mtime_ns)
    assert retrained, f"{path.name}: no model was retrained into {folder}"
    monkeypatch.delenv(pretrained.WEIGHTS_ENV)
    for file in retrained:
        stored = pretrained.load_record(file.stem)["record"]["metrics"]
        monkeypatch.setenv(pretrained.WEIGHTS_ENV, str(folder))
        new = pretrained.load_record(file.stem)["record"]["metrics"]
        monkeypatch.delenv(pretrained.WEIGHTS_ENV)
        assert new.keys() == stored.keys(), file.stem
        for metric, value in stored.items():
            abs_tol, rel_tol = tolerance(metric)
            assert math.isclose(new[metric], value, abs_tol=abs_tol, rel_tol=rel_tol), \
                f"{file.stem}: retrained {metric} {new[metric]:.4f} vs stored {value:.4f}"
