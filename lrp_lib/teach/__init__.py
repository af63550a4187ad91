"""The implementations the first chapters build on purpose, to teach how LRP works: one autograd
op per rule (:mod:`~lrp_lib.teach.ops`, :mod:`~lrp_lib.teach.index_ops`), plain scatters, Graph Network layers and the
``relevance()`` switch of chapter 2, chapter 3's linear maps, skip connections, the relprop style with hooks and in JAX,
guided backpropagation.  The product (:mod:`lrp_lib.explain`) does not import them; they import
:mod:`lrp_lib.core` only."""
import importlib

_MODULES = ("ops", "index_ops", "scatter", "graph", "graph_data", "graph_rule", "graph_relevance", "mode", "share", "backward_rules", "linear_maps", "residual", "relprop", "jax_lrp", "guided", "guided_backprop")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in ("relevance", "is_relevance_mode"):
        return getattr(importlib.import_module(f"{__name__}.mode"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
