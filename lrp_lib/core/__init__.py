"""The arithmetic every explanation shares: :mod:`~lrp_lib.core.stabilizer`, :mod:`~lrp_lib.core.rules` and their
forward form :mod:`~lrp_lib.core.modify`, :mod:`~lrp_lib.core.composites`, :mod:`~lrp_lib.core.validation`.
Imports nothing else from :mod:`lrp_lib`."""
import importlib

_MODULES = ("stabilizer", "rules", "modify", "composites", "validation")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
