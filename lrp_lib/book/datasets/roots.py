"""Where the data sets live: one convention for all of :mod:`lrp_lib.book.datasets`.

* :func:`data_root`: where a loader looks for raw files -- ``$LRP_DATA_ROOT`` if set (a shared,
  possibly read-only folder, as CI's ``../shared/data``), else the cache;
* :func:`cache_root`: where files are downloaded and processed files are written --
  ``$LRP_CACHE_DIR`` if set, else ``~/.cache/lrp_lib/data``.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_root", "cache_root"]


def cache_root() -> Path:
    """``$LRP_CACHE_DIR``, else ``~/.cache/lrp_lib/data``: downloads and processed files go here."""
    return Path(os.environ.get("LRP_CACHE_DIR") or Path.home() / ".cache" / "lrp_lib" / "data")


def data_root() -> Path:
    """``$LRP_DATA_ROOT``, else :func:`cache_root`: where the loaders look for raw files."""
    return Path(os.environ.get("LRP_DATA_ROOT") or cache_root())
