r"""LRP for any PyTorch Geometric model, as a ``torch_geometric.explain`` algorithm.

.. code-block:: python

    explainer = Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(data.x, data.edge_index, batch=data.batch)

How it works: the model runs unchanged inside a :class:`~lrp_lib.explain.mode.forward.ForwardMode` (a
:class:`torch.overrides.TorchFunctionMode` of the calling thread) that gives every torch function on tensors
depending on ``x`` (and ``edge_attr``) its rule, as a forward that keeps the value and changes the gradient; one
ordinary backward leaves each input's relevance (input times gradient), message hooks each edge's
(:mod:`lrp_lib.explain.mode.edges`).  An operation without a rule, or one run outside the interception, gives an
:class:`UnsupportedModelError` naming it.  This module gathers the public names.
"""
from __future__ import annotations

from lrp_lib.explain.accounting import LostRelevanceWarning
from lrp_lib.explain.algorithm import DEFAULTS, LRPExplainer
from lrp_lib.explain.mode import UnsupportedModelError
from lrp_lib.explain.inputs import check_hetero_inputs, check_inputs
from lrp_lib.explain.masks import relevance_mask
from lrp_lib.explain.pyg_explainer import Explainer

__all__ = ["LRPExplainer", "Explainer", "UnsupportedModelError", "LostRelevanceWarning", "check_inputs",
           "check_hetero_inputs", "relevance_mask", "DEFAULTS"]
