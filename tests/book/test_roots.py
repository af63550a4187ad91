"""One place for the data sets: $LRP_DATA_ROOT to read, $LRP_CACHE_DIR to write, both defaulting
to ~/.cache/lrp_lib/data, for every loader."""
from pathlib import Path

import importlib

from lrp_lib.book.datasets.roots import cache_root, data_root

esol_module = importlib.import_module("lrp_lib.book.datasets.esol")  # the package exports the functions
mutagenicity_module = importlib.import_module("lrp_lib.book.datasets.mutagenicity")


def test_environment_variables_and_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("LRP_DATA_ROOT", raising=False)
    monkeypatch.delenv("LRP_CACHE_DIR", raising=False)
    assert cache_root() == Path.home() / ".cache" / "lrp_lib" / "data"
    assert data_root() == cache_root()
    monkeypatch.setenv("LRP_CACHE_DIR", str(tmp_path / "cache"))
    assert data_root() == cache_root() == tmp_path / "cache"
    monkeypatch.setenv("LRP_DATA_ROOT", str(tmp_path / "shared"))
    assert data_root() == tmp_path / "shared" and cache_root() == tmp_path / "cache"


def test_every_loader_uses_the_same_roots(monkeypatch, tmp_path):
    monkeypatch.setenv("LRP_DATA_ROOT", str(tmp_path / "shared"))
    monkeypatch.setenv("LRP_CACHE_DIR", str(tmp_path / "cache"))
    assert esol_module.default_root() == tmp_path / "shared"
    assert mutagenicity_module.data_root is data_root and mutagenicity_module.cache_root is cache_root
