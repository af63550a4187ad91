r"""LRP for any PyTorch Geometric model, as a ``torch_geometric.explain`` algorithm.

.. code-block:: python

    explainer = Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(data.x, data.edge_index, batch=data.batch)

How it works.  The model runs unchanged inside a :class:`~lrp_lib.explain.mode.forward.ForwardMode`, a
:class:`torch.overrides.TorchFunctionMode` of the calling thread that gives every torch function called on tensors
depending on ``x`` (and ``edge_attr``) its rule, written as a forward that keeps the value and changes the
gradient.  One ordinary backward from the explained output then leaves each input's relevance (input times
gradient); message hooks give each edge the relevance of its messages (:mod:`lrp_lib.explain.mode.edges`).  An
operation without a rule, or one that ran outside the interception, gives an :class:`UnsupportedModelError`
naming it.  ``bias_relevance`` says what the biases and stabilisers kept, per graph of a batch
(:mod:`lrp_lib.explain.accounting`).

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
