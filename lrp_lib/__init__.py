"""Layer-wise Relevance Propagation for PyTorch Geometric models: :mod:`lrp_lib.core` (stabiliser, rules,
composites, input checks), :mod:`lrp_lib.explain` (the product: any PyG model explained through its own
``forward``), :mod:`lrp_lib.teach` (the first chapters' small implementations) and :mod:`lrp_lib.book` (what the
book's pages share); imports point ``book`` -> ``explain`` -> ``core`` and ``teach`` -> ``core``.
``from lrp_lib import LRPExplainer, Explainer, Composite, explain_dataset`` imports what most users need; PyG is
loaded on first use only.
"""
import importlib

__version__ = '0.1.0'

_LAZY = {
    "LRPExplainer": "lrp_lib.explain.explainer",
    "Explainer": "lrp_lib.explain.pyg_explainer",
    "Composite": "lrp_lib.core.composites",
    "explain_dataset": "lrp_lib.explain.jobs",
    "read_explanations": "lrp_lib.explain.jobs",
}
_SUBPACKAGES = ("core", "explain", "teach", "book")
__all__ = [*_LAZY, *_SUBPACKAGES]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'lrp_lib' has no attribute {name!r}")
