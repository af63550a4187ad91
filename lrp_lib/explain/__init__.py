"""The product: LRP for any PyTorch Geometric model, run through the model's own ``forward``.

* :mod:`~lrp_lib.explain.function_mode`: ``RelevanceMode``, the ``TorchFunctionMode`` that sends
  every torch function the model calls to a relevance primitive;
* :mod:`~lrp_lib.explain.primitives`: the relevance primitives, each a ``torch.autograd.Function``;
* :mod:`~lrp_lib.explain.explainer`: ``LRPExplainer`` for PyG's ``Explainer``, and ``Explainer``
  with the inputs checked first;
* :mod:`~lrp_lib.explain.masks`: signed relevance to the masks PyG's plots and metrics read;
* :mod:`~lrp_lib.explain.walks`: relevant walks and subgraphs (GNN-LRP, sGNN-LRP);
* :mod:`~lrp_lib.explain.jobs`: a whole data set explained to Parquet.

Imports :mod:`lrp_lib.core` only.
"""
import importlib

_MODULES = ("function_mode", "primitives", "explainer", "masks", "walks", "jobs")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in ("LRPExplainer", "Explainer"):
        return getattr(importlib.import_module(f"{__name__}.explainer"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
