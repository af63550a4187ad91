"""The arithmetic every explanation shares: the stabiliser (:mod:`~lrp_lib.core.stabilizer`), the rules
(:mod:`~lrp_lib.core.rules`) and their forward form (:mod:`~lrp_lib.core.modify`), the composites that assign
them to layers (:mod:`~lrp_lib.core.composites`) and the checks of user input (:mod:`~lrp_lib.core.validation`).
Imports nothing else from :mod:`lrp_lib`."""
import importlib

_MODULES = ("stabilizer", "rules", "modify", "composites", "validation")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
