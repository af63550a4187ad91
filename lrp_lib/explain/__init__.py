"""The product: LRP for any PyTorch Geometric model, run through the model's own ``forward``.

Five sub-packages by subsystem and the modules that join them; imports point down this list:

* :mod:`~lrp_lib.explain.mode`: the interception and its rules.  ``RelevanceMode``
  (:mod:`~lrp_lib.explain.mode.function_mode`) sends every torch function on input-dependent tensors to its
  rule family; ``ForwardMode`` (:mod:`~lrp_lib.explain.mode.forward`) writes each family as a forward that keeps
  its value, so that one ordinary backward gives input times gradient as relevance; edge relevance from the
  messages (:mod:`~lrp_lib.explain.mode.edges`); the amounts kept (:mod:`~lrp_lib.explain.mode.tally`).
* The explanation's parts: :mod:`~lrp_lib.explain.inputs` (``check_inputs``), :mod:`~lrp_lib.explain.targets`
  (the explained output and its start relevance), :mod:`~lrp_lib.explain.propagate` (one forward and one
  backward), :mod:`~lrp_lib.explain.accounting` (``bias_relevance`` and ``relevance_residual`` per graph or
  target), :mod:`~lrp_lib.explain.masks` (signed relevance to the masks PyG's plots and metrics read).
* :mod:`~lrp_lib.explain.capture`: an explanation's forward captured with ``make_fx`` (and compiled by
  ``torch.compile``), kept per graph; :mod:`~lrp_lib.explain.subgraphs`: ``per_index=True``, k-hop subgraphs
  explained in chunks; :mod:`~lrp_lib.explain.walks`: relevant walks and subgraphs (GNN-LRP, sGNN-LRP).
* The public entry points: :mod:`~lrp_lib.explain.explainer` (``LRPExplainer``, ``Explainer``, the errors),
  :mod:`~lrp_lib.explain.algorithm` (``LRPExplainer``'s settings and defaults),
  :mod:`~lrp_lib.explain.relevance_pass` (one explanation), :mod:`~lrp_lib.explain.pyg_explainer` (PyG's
  ``Explainer`` with the inputs checked first), :mod:`~lrp_lib.explain.one_pass` (the prediction from the
  explanation's own forward), :mod:`~lrp_lib.explain.hetero` (heterogeneous graphs),
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
