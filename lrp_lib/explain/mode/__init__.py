"""The interception and its rules: how a model's own forward becomes its explanation.

* :mod:`~lrp_lib.explain.mode.function_mode`: ``RelevanceMode``, the ``TorchFunctionMode`` that sends every torch
  function the model calls on input-dependent tensors to its rule family; :mod:`~lrp_lib.explain.mode.dispatch`:
  what it does with each torch function, from the tables of :mod:`~lrp_lib.explain.mode.op_tables`;
  :mod:`~lrp_lib.explain.mode.inplace`: the calls it sends to no rule (attribute reads, dropout, in-place
  operations); :mod:`~lrp_lib.explain.mode.graph_check`: ``UnsupportedModelError``;
* :mod:`~lrp_lib.explain.mode.handlers` and :mod:`~lrp_lib.explain.mode.recurrent` (RNNs and attention written
  out): the rule of each torch function with one of its own;
* :mod:`~lrp_lib.explain.mode.forward`: ``ForwardMode``, each rule family a forward modification, and the probes
  of what biases and stabilisers keep (:mod:`~lrp_lib.explain.mode.tally`);
* :mod:`~lrp_lib.explain.mode.edges`: edge relevance; :mod:`~lrp_lib.explain.mode.hooks`: the hooks on a model's
  modules and the per-thread value each reads.

Imports :mod:`lrp_lib.core` only.
"""
