"""The interception and its rules: how a model's own forward becomes its explanation.

* :mod:`~lrp_lib.explain.mode.function_mode`: ``RelevanceMode``, the ``TorchFunctionMode`` that sends every torch
  function the model calls on input-dependent tensors to its rule family (tracking of the input-dependent
  tensors); :mod:`~lrp_lib.explain.mode.dispatch`: what it does with each torch function, decided once per
  function, from the tables of :mod:`~lrp_lib.explain.mode.op_tables`;
  :mod:`~lrp_lib.explain.mode.inplace`: the calls it sends to no rule (attribute reads, dropout, in-place
  operations); :mod:`~lrp_lib.explain.mode.graph_check`: ``UnsupportedModelError``;
* :mod:`~lrp_lib.explain.mode.handlers`: the rule of each torch function with one of its own (linear maps,
  products, convolutions, reductions, scatters, arithmetic, softmax, norms);
  :mod:`~lrp_lib.explain.mode.recurrent`: RNN/LSTM/GRU and multi-head attention written out;
* :mod:`~lrp_lib.explain.mode.forward`: ``ForwardMode``, the mode with each rule family a forward modification
  (one ordinary backward), and the probes that total what biases and stabilisers keep;
* :mod:`~lrp_lib.explain.mode.edges`: edge relevance, messages times their gradient, placed on input edges.
* :mod:`~lrp_lib.explain.mode.hooks`: the hooks on a model's modules, registered once, and the per-thread value
  each reads.

Imports :mod:`lrp_lib.core` only.
"""
