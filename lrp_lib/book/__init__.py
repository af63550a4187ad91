"""What the book's pages and benchmarks share: the trained models' architectures
(:mod:`~lrp_lib.book.models`) and stored weights (:mod:`~lrp_lib.book.pretrained`), the data
sets (:mod:`~lrp_lib.book.datasets`), plots (:mod:`~lrp_lib.book.plotting`) and the tables read
from the benchmark results (:mod:`~lrp_lib.book.results`)."""
import importlib

_MODULES = ("models", "pretrained", "plotting", "results", "datasets")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
