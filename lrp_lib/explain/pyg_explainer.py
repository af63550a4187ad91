"""PyG's :class:`~torch_geometric.explain.Explainer`, inputs checked first: ``lrp_lib.Explainer``.
"""
from __future__ import annotations

from torch import Tensor
from torch_geometric.explain import Explainer as PyGExplainer
from torch_geometric.explain.config import ModelMode, ModelTaskLevel

from lrp_lib.core.validation import is_adjacency
from lrp_lib.explain.algorithm import LRPExplainer
from lrp_lib.explain.mode.edges import adjacency_edges
from lrp_lib.explain.inputs import check_hetero_inputs, check_inputs, inputs_checked, uncompiled
from lrp_lib.explain.one_pass import explain_in_one_pass
from lrp_lib.explain.subgraphs import predicted, remember

__all__ = ["Explainer"]


class Explainer(PyGExplainer):
    """PyG's :class:`~torch_geometric.explain.Explainer`, a drop-in replacement (``from lrp_lib import Explainer``):
    with an :class:`LRPExplainer` the inputs go through :func:`check_inputs` before PyG's prediction pass (an error
    naming a bad input, not one from inside PyG or NaN masks); the training flag is restored if it fails.

    ``one_pass`` (``explanation_type="model"``, an :class:`LRPExplainer`, a homogeneous graph): the prediction and
    target come from the explanation's own forward, not a separate prediction pass (:mod:`lrp_lib.explain.one_pass`).
    ``None`` (default): for classification (a regression's target is its prediction: PyG's two passes); ``True``:
    always; ``False``: never.  With ``per_index=True`` the prediction pass runs (the subgraphs' outputs are
    compared with it: :func:`lrp_lib.explain.subgraphs.predicted`).

    Given a sparse adjacency as ``edge_index``, an explanation with an edge mask holds it as ``adj_t`` and its edges
    as ``edge_index`` (senders, receivers) in the order of PyG's ``to_edge_index(adj_t)``, the edge mask's order.
    """

    def __init__(self, *args, one_pass: bool | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if one_pass is not None and not isinstance(one_pass, bool):
            raise TypeError(f"one_pass must be None, True or False, got {one_pass!r}")
        self.one_pass = one_pass

    def __repr__(self) -> str:
        """The algorithm, and with an :class:`LRPExplainer` the rule that the weights of each module will get."""
        text = f"{type(self).__name__}(model={type(self.model).__name__}, algorithm={self.algorithm!r}"
        if not isinstance(self.algorithm, LRPExplainer):
            return text + ")"
        rules = self.algorithm.composite.rules_of(uncompiled(self.model))
        return text + ", rules={\n" + "".join(f"    {name or '(the model)'!r}: {rule!r},\n"
                                               for name, rule in rules.items()) + "})"

    def __call__(self, x, edge_index, *, target=None, index=None, **kwargs):
        checked = isinstance(self.algorithm, LRPExplainer) and not isinstance(x, dict)
        if checked:
            check_inputs(self.model, x, edge_index, **kwargs)
        elif isinstance(self.algorithm, LRPExplainer):
            check_hetero_inputs(self.model, x, edge_index, **kwargs)
        wanted = self.one_pass if self.one_pass is not None else self.model_config.mode != ModelMode.regression
        once = checked and wanted and self.explanation_type.value == "model" and not (
            self.algorithm.per_index and index is not None and self.model_config.task_level == ModelTaskLevel.node)
        training = self.model.training
        try:
            # the inputs checked once; the prediction pass kept (per_index=True compares with it)
            with inputs_checked(x if checked else None, edge_index), predicted():
                explanation = explain_in_one_pass(self, x, edge_index, target, index, **kwargs) if once else \
                    super().__call__(x, edge_index, target=target, index=index, **kwargs)
        finally:  # (PyG's call restores the training flag only where it succeeds; one_pass leaves eval mode)
            if self.model.training != training:  # (train() visits every submodule: only where needed)
                self.model.train(training)
        if is_adjacency(edge_index) and "num_edges" in explanation:  # (an LRPExplainer's edge mask): PyG's plots
            explanation.adj_t, explanation.edge_index = edge_index, adjacency_edges(edge_index)  # index the edges
            del explanation.num_edges  # (counted from the edges now)
        return explanation

    def get_prediction(self, *args, **kwargs) -> Tensor:
        out = super().get_prediction(*args, **kwargs)
        remember(self.model, args, kwargs, out)  # for per_index=True: the full graph's output
        return out
