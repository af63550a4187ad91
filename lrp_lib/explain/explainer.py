r"""LRP for any PyTorch Geometric model, as a ``torch_geometric.explain`` algorithm.

.. code-block:: python

    explainer = Explainer(model, algorithm=LRPExplainer(), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(data.x, data.edge_index, batch=data.batch)

How it works.  The model runs unchanged inside a :class:`~lrp_lib.explain.mode.function_mode.RelevanceMode`,
a :class:`torch.overrides.TorchFunctionMode` that sends every torch function the model calls on
tensors depending on ``x`` (and on ``edge_attr``) to its rule, written as a forward that keeps the
operation's value and changes its gradient (:mod:`lrp_lib.explain.mode.forward`): linear maps get the rule that the
:class:`~lrp_lib.core.composites.Composite` chooses for their weight, sums and aggregations split
proportionally, max and min go to the winner, elementwise functions pass relevance unchanged,
attention weights are held constant (CP-LRP) and other products split uniformly (AttnLRP).  So
GCN, GraphSAGE, GIN, GAT, a residual ``x + conv(x)``, a model with batch norm, your own
subclass of a conv -- any model built from torch operations -- is explained through its own
code.  One backward from the explained output leaves the relevance of each node feature (and
of each ``edge_attr`` entry).  An operation without a rule that relevance reaches, or one that
ran outside the interception (a custom ``autograd.Function``), gives an
:class:`UnsupportedModelError` naming it, never a wrong explanation.

Edges (:mod:`lrp_lib.explain.mode.edges`): a message hook on each ``MessagePassing`` module adds the
relevance of the messages of edge :math:`j \to i`, summed over features and layers, to that edge;
the self-loops a layer adds (GCN, GAT) leave their share with the node.  The rules are forward
modifications (:mod:`lrp_lib.explain.mode.forward`): each keeps its operation's value and changes its gradient, so
the backward is PyTorch's own.  From the second explanation of a graph on, its forward is captured with
PyTorch's ``make_fx`` and run without the model's or the rules' Python (:mod:`lrp_lib.explain.capture`);
``LRPExplainer(compile=True)`` hands it to ``torch.compile``.

Nothing is patched globally: the mode belongs to the calling thread, so explanations run from
several threads, and training in other threads, do not disturb each other.

The relevance starts from the explained output: the raw logit of the target class (multiclass),
:math:`\pm` the single logit of a binary model (:math:`+z` for target 1, :math:`-z` for target 0: the
log-odds of the target class), or the regression value.  For a bias-free model under the ``"z"``
composite the node relevance (plus the ``edge_attr`` relevance) sums to that value; otherwise the
explanation's ``bias_relevance`` says how much the biases and stabilisers kept.  The graphs of a
batch do not exchange messages, so one backward explains all of them, each from its own output,
with the same masks as one graph at a time; ``bias_relevance`` and ``relevance_residual`` then hold
one value per graph (:mod:`lrp_lib.explain.accounting`), each as when its graph is explained alone.

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
