"""The product: LRP for any PyTorch Geometric model, run through the model's own ``forward``.  Imports point down
its layers: :mod:`~lrp_lib.explain.mode` (the interception and its rules); the explanation's parts (inputs,
targets, propagate, accounting, masks); capture, subgraphs (``per_index=True``) and walks (GNN-LRP); the entry
points (:mod:`~lrp_lib.explain.explainer` gathers the public names); jobs.  Imports :mod:`lrp_lib.core` only.
"""
import importlib

_MODULES = ("mode", "inputs", "targets", "propagate", "accounting", "masks", "capture", "subgraphs", "walks",
            "explainer", "algorithm", "relevance_pass", "pyg_explainer", "one_pass", "hetero", "tensors", "jobs")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in ("LRPExplainer", "Explainer"):
        return getattr(importlib.import_module(f"{__name__}.explainer"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
