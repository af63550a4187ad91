"""Trained weights of the book's models, stored so that every reader's machine shows the same outputs.

Training the same model with the same seeds on another CPU (another instruction set, another
thread count, another BLAS) drifts by about 1e-6 after a few dozen epochs: enough to flip a printed
fourth decimal, or the ranking of two nearly tied edges. The chapters therefore train each model
once, store its weights (and whatever training produced that a later cell needs, such as TracIn's
checkpoints) in ``lrp_lib/book/weights/<name>.pt``, and load them by default. Explaining a fixed model
only runs inference, which agrees across CPUs far below the printed precision.

One switch retrains from scratch::

    LRP_BOOK_RETRAIN=1 jupyter lab          # or: import os; os.environ["LRP_BOOK_RETRAIN"] = "1"

and ``LRP_BOOK_WEIGHTS=<folder>`` reads and writes the weights in another folder (the tests retrain
into a temporary one and check that the metrics land within a stated tolerance of the stored ones).

The stored file holds plain tensors, numbers and strings only, and is read with
``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import os
import platform
import re
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["RETRAIN_ENV", "WEIGHTS_ENV", "weights_folder", "weights_path", "retrain_requested",
           "load_or_train", "load_record", "FORMAT"]

RETRAIN_ENV = "LRP_BOOK_RETRAIN"
WEIGHTS_ENV = "LRP_BOOK_WEIGHTS"
FORMAT = 1
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def weights_folder() -> Path:
    """The folder the weights are read from and written to: ``$LRP_BOOK_WEIGHTS`` or the package's."""
    override = os.environ.get(WEIGHTS_ENV)
    return Path(override) if override else Path(__file__).resolve().parent / "weights"


def weights_path(name: str) -> Path:
    """``<weights_folder()>/<name>.pt``; ``name`` is lower case letters, digits, ``_ . -``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be lower case letters, digits, '_', '.' or '-', got {name!r}")
    return weights_folder() / f"{name}.pt"


def retrain_requested() -> bool:
    """True when ``$LRP_BOOK_RETRAIN`` is set to 1, true, yes or on (any case)."""
    value = os.environ.get(RETRAIN_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{RETRAIN_ENV} must be 1/true/yes/on or 0/false/no/off, got {value!r}")


def _check_record(record, name: str) -> dict:
    if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
        raise TypeError(f"train for {name!r} must return a dict with a 'metrics' dict "
                        f"(metric name -> float), got {type(record).__name__}")
    for key, value in record["metrics"].items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"train for {name!r}: metric {key!r} must be a float, got {value!r}")
    if "source" in record:
        raise ValueError(f"train for {name!r}: 'source' is set by load_or_train, do not return it")
    return record


def _cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def load_record(name: str) -> dict:
    """The stored file of ``name`` as a dict: ``state_dict``, ``record`` (metrics and extras), ``trained_on``.

    Raises ``FileNotFoundError`` naming the path and the retrain switch when there is none.
    """
    path = weights_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"no stored weights for {name!r} at {path}; set {RETRAIN_ENV}=1 to train "
                                f"the model from scratch (or {WEIGHTS_ENV} to the folder that holds them)")
    stored = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        raise ValueError(f"{path} is not a weights file of format {FORMAT}; set {RETRAIN_ENV}=1 to retrain")
    return stored


def load_or_train(name: str, model: nn.Module, train: Callable[[nn.Module], dict], *,
                  retrain: bool | None = None) -> dict:
    """Load the stored weights of ``name`` into ``model``, or train it with ``train(model)`` and store them.

    ``train(model)`` trains the model in place and returns a record: ``{"metrics": {name: float},
    ...}`` plus anything later cells need (tensors, numbers, strings, lists and dicts of them, such
    as state dicts of intermediate checkpoints). The record is stored beside the weights, so that a
    chapter prints the training metrics identically whether it trained or loaded.

    Training happens when ``retrain`` is true, or when it is ``None`` and ``$LRP_BOOK_RETRAIN`` is
    set. Otherwise a missing file is an error that says how to retrain, and a file whose tensors do
    not fit ``model`` is an error that names the mismatching keys.

    Returns the record, with ``record["source"]`` set to ``"stored"`` or ``"retrained"``. The model
    is left in eval mode, on the device it was on.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(train):
        raise TypeError(f"train must be a callable taking the model, got {type(train).__name__}")
    path = weights_path(name)
    if retrain is None:
        retrain = retrain_requested()
    if retrain:
        record = _check_record(train(model), name)
        stored = {"format": FORMAT, "name": name, "state_dict": _cpu(model.state_dict()),
                  "record": _cpu(record),
                  "trained_on": f"torch {torch.__version__}, {platform.machine()}, "
                                f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads"}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(stored, path)
        except OSError as err:  # a read-only install: keep the trained model in memory only
            warnings.warn(f"could not store the weights of {name!r} at {path} ({err}); set {WEIGHTS_ENV} "
                          f"to a writable folder to keep them", stacklevel=2)
        model.eval()
        return {**record, "source": "retrained"}
    stored = load_record(name)
    try:
        model.load_state_dict(stored["state_dict"])
    except RuntimeError as err:
        raise ValueError(f"the stored weights {path} do not fit this model (was the model changed?): "
                         f"{err}. Set {RETRAIN_ENV}=1 to retrain it") from None
    model.eval()
    return {**stored["record"], "source": "stored"}
