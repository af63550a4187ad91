"""The product: LRP for any PyTorch Geometric model, run through the model's own ``forward``.

Its parts, lowest first (imports point down this list):

* :mod:`~lrp_lib.explain.mode`: the interception (``RelevanceMode``) and its rules, written as forwards that keep
  each operation's value (``ForwardMode``), so that one ordinary backward gives the relevance; edge relevance from
  the messages (:mod:`~lrp_lib.explain.mode.edges`); the amounts kept (:mod:`~lrp_lib.explain.mode.tally`).
* The explanation's parts: :mod:`~lrp_lib.explain.inputs` (the input checks), :mod:`~lrp_lib.explain.targets`
  (the explained output and its start relevance), :mod:`~lrp_lib.explain.propagate` (one forward and one
  backward), :mod:`~lrp_lib.explain.accounting` (``bias_relevance`` and ``relevance_residual`` per graph or
  target), :mod:`~lrp_lib.explain.masks` (signed relevance to the masks PyG's plots and metrics read).
* :mod:`~lrp_lib.explain.capture` (an explanation's forward captured with ``make_fx``, kept per graph),
  :mod:`~lrp_lib.explain.subgraphs` (``per_index=True``: k-hop subgraphs in chunks),
  :mod:`~lrp_lib.explain.walks` (relevant walks and subgraphs: GNN-LRP, sGNN-LRP).
* The entry points: :mod:`~lrp_lib.explain.explainer` (the public names), :mod:`~lrp_lib.explain.algorithm`
  (``LRPExplainer``), :mod:`~lrp_lib.explain.relevance_pass` (one explanation),
  :mod:`~lrp_lib.explain.pyg_explainer` (PyG's ``Explainer``, inputs checked first),
  :mod:`~lrp_lib.explain.one_pass` (the prediction from that forward), :mod:`~lrp_lib.explain.hetero`,
  :mod:`~lrp_lib.explain.tensors` (``explain_tensor``: any torch model on a plain tensor).
* :mod:`~lrp_lib.explain.jobs`: a whole data set explained to Parquet.

Imports :mod:`lrp_lib.core` only.
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
