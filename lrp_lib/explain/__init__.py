"""The product: LRP for any PyTorch Geometric model, run through the model's own ``forward``.

* :mod:`~lrp_lib.explain.function_mode`: ``RelevanceMode``, the ``TorchFunctionMode`` that sends
  every torch function the model calls to its rule family (dispatch, tracking of the
  input-dependent tensors); :mod:`~lrp_lib.explain.dispatch`: what it does with each torch function,
  decided once per function; :mod:`~lrp_lib.explain.inplace`: the calls it sends to no rule
  (attribute reads, dropout, in-place operations);
* :mod:`~lrp_lib.explain.op_tables`: which torch functions and autograd nodes pass relevance as
  they are; :mod:`~lrp_lib.explain.graph_check`: ``UnsupportedModelError``;
* :mod:`~lrp_lib.explain.handlers`: the rule of each torch function with one of its own (linear
  maps, products, convolutions, reductions, scatters, arithmetic, softmax, norms);
  :mod:`~lrp_lib.explain.recurrent`: RNN/LSTM/GRU and multi-head attention written out;
* :mod:`~lrp_lib.explain.forward`: ``ForwardMode``, the mode with each rule family a forward
  modification, one ordinary backward; :mod:`~lrp_lib.explain.capture`: an
  explanation's forward captured with ``make_fx`` and compiled by ``torch.compile``, kept per graph by
  :mod:`~lrp_lib.explain.capture_cache` (keyed by :mod:`~lrp_lib.explain.model_state`);
* :mod:`~lrp_lib.explain.tensors`: ``explain_tensor``, any torch model on a plain tensor input (no graph);
* :mod:`~lrp_lib.explain.edges`: edge relevance through message hooks;
* :mod:`~lrp_lib.explain.inputs`: ``check_inputs`` and ``check_hetero_inputs``;
* :mod:`~lrp_lib.explain.targets`: the explained output and its start relevance;
* :mod:`~lrp_lib.explain.propagate`: one forward and one backward;
* :mod:`~lrp_lib.explain.accounting`: ``bias_relevance`` and ``relevance_residual`` per graph (or
  per target);
* :mod:`~lrp_lib.explain.subgraphs`: ``per_index=True``, k-hop subgraphs explained in chunks, on
  :mod:`~lrp_lib.explain.unions` (the subgraphs of many targets as one graph) and
  :mod:`~lrp_lib.explain.layer_pruning` (each message-passing step along the edges it needs) and
  :mod:`~lrp_lib.explain.border_degrees` (GCN's degrees at the border from one counted edge per node);
* :mod:`~lrp_lib.explain.explainer`: the public names, ``LRPExplainer`` for PyG's ``Explainer``
  (:mod:`~lrp_lib.explain.algorithm`: its settings; :mod:`~lrp_lib.explain.relevance_pass`: one forward and one
  backward); :mod:`~lrp_lib.explain.pyg_explainer`: ``Explainer``, PyG's with the
  inputs checked first; :mod:`~lrp_lib.explain.hetero`: heterogeneous graphs;
  :mod:`~lrp_lib.explain.one_pass`: the prediction taken from the explanation's own forward (a
  classifier's, by default), near ties decided by the model's own pass;
* :mod:`~lrp_lib.explain.masks`: signed relevance to the masks PyG's plots and metrics read;
* :mod:`~lrp_lib.explain.walks`: relevant walks and subgraphs (GNN-LRP, sGNN-LRP), on
  :mod:`~lrp_lib.explain.walk_model` (``WalkModel``), :mod:`~lrp_lib.explain.walk_graph` (the cut
  relevance graph), :mod:`~lrp_lib.explain.walk_algebra` (its per-node and per-edge pieces) and
  :mod:`~lrp_lib.explain.walk_search` (the searches), :mod:`~lrp_lib.explain.walk_hetero`
  (heterogeneous graphs: typed walks), refusing with
  :mod:`~lrp_lib.explain.walk_defined` where walks are not defined;
* :mod:`~lrp_lib.explain.jobs`: a whole data set explained to Parquet, one batch at a time by
  :mod:`~lrp_lib.explain.job_batches`, with its files in :mod:`~lrp_lib.explain.job_store`.

Imports :mod:`lrp_lib.core` only.
"""
import importlib

_MODULES = ("function_mode", "op_tables", "graph_check", "handlers", "recurrent", "edges", "inputs",
            "targets", "propagate", "accounting", "subgraphs", "unions", "layer_pruning", "border_degrees", "explainer", "masks", "walks",
            "walk_model", "walk_graph", "walk_algebra", "walk_defined", "walk_search", "walk_hetero", "jobs",
            "job_batches", "job_store", "dispatch", "hetero", "one_pass", "inplace",
            "pyg_explainer", "forward", "capture", "capture_cache", "model_state", "tensors", "algorithm",
            "relevance_pass")


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in ("LRPExplainer", "Explainer"):
        return getattr(importlib.import_module(f"{__name__}.explainer"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
