r"""LRP for any PyTorch Geometric model, as a ``torch_geometric.explain`` algorithm.

.. code-block:: python

    explainer = Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(data.x, data.edge_index, batch=data.batch)

How it works.  The model runs unchanged inside a :class:`~lrp_lib.explain.mode.function_mode.RelevanceMode`, a
:class:`torch.overrides.TorchFunctionMode` of the calling thread that sends every torch function the model calls
on tensors depending on ``x`` (and on ``edge_attr``) to its rule (the table in
:mod:`lrp_lib.explain.mode.function_mode`), written as a forward that keeps the operation's value and changes its
gradient (:mod:`lrp_lib.explain.mode.forward`).  So any model built from torch operations (GCN, GAT, a residual
``x + conv(x)``, batch norm, your own subclass of a conv) is explained through its own code, and one ordinary
backward from the explained output (:func:`lrp_lib.explain.targets.start_relevance`) leaves the relevance of
each node feature and ``edge_attr`` entry; a message hook on each ``MessagePassing`` module gives each edge the
relevance of its messages, summed over features and layers (:mod:`lrp_lib.explain.mode.edges`).  An operation
without a rule that relevance reaches, or one that ran outside the interception (a custom
``autograd.Function``), gives an :class:`UnsupportedModelError` naming it, never a wrong explanation.

For a bias-free model under the ``"z"`` composite the relevance sums to the explained output; otherwise
``bias_relevance`` says how much the biases and stabilisers kept.  The graphs of a batch do not exchange
messages, so one backward explains all of them, each from its own output, with one ``bias_relevance`` and
``relevance_residual`` per graph (:mod:`lrp_lib.explain.accounting`).

This module gathers the public names: :class:`LRPExplainer` (:mod:`lrp_lib.explain.algorithm`), PyG's
``Explainer`` with the inputs checked first (:mod:`lrp_lib.explain.pyg_explainer`), the input checks
(:mod:`lrp_lib.explain.inputs`) and the errors and warnings an explanation raises.
"""
from __future__ import annotations

from lrp_lib.explain.accounting import LostRelevanceWarning
from lrp_lib.explain.algorithm import DEFAULTS, LRPExplainer
from lrp_lib.explain.mode.graph_check import UnsupportedModelError
from lrp_lib.explain.inputs import check_hetero_inputs, check_inputs
from lrp_lib.explain.masks import relevance_mask
from lrp_lib.explain.pyg_explainer import Explainer

__all__ = ["LRPExplainer", "Explainer", "UnsupportedModelError", "LostRelevanceWarning", "check_inputs",
           "check_hetero_inputs", "relevance_mask", "DEFAULTS"]
