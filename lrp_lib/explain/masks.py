r"""From signed relevance to the masks that PyTorch Geometric's tools read: :func:`relevance_mask`.

LRP's relevance is signed (a node can hold evidence *against* the class), but PyG's tools expect an importance in
:math:`[0, 1]`, as GNNExplainer's masks: ``visualize_feature_importance`` drops negative bars,
``visualize_graph`` scales edge opacity by the mask, ``Explanation.threshold`` keeps entries by value, and
``fidelity`` and ``unfaithfulness`` multiply the mask into the inputs.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.explain.config import MaskType

__all__ = ["MASKS", "relevance_mask", "per_mask_type"]

#: The kinds of mask :func:`relevance_mask` makes.
MASKS = ("abs", "positive", "relevance")


def check_mask_kind(kind) -> str:
    """``kind`` if it is one of :data:`MASKS`, else a ``ValueError`` naming the argument ``mask``."""
    if not isinstance(kind, str) or kind not in MASKS:
        raise ValueError(f"mask must be one of {', '.join(repr(m) for m in MASKS)}, got {kind!r}")
    return kind


def relevance_mask(relevance: Tensor | dict | None, kind: str = "abs") -> Tensor | dict | None:
    r"""The mask of kind ``kind`` (``"abs"``, ``"positive"`` or ``"relevance"``) of ``relevance``.

    ``"abs"``: evidence for and against counts; ``"positive"``: only evidence for the explained output;
    ``"relevance"``: the signed relevance (PyG's tools misread its negative entries).  ``relevance``: a tensor, or
    a dict of tensors (one per node or edge type), normalised by their one maximum (zero: zeros), or ``None``.

    .. math::  \text{abs: } m = \frac{|R|}{\max |R|}, \qquad
               \text{positive: } m = \frac{\max(R, 0)}{\max R}, \qquad
               \text{relevance: } m = R
    """
    kind = check_mask_kind(kind)
    if relevance is None:
        return None
    if isinstance(relevance, Tensor):
        return relevance_mask({0: relevance}, kind)[0]
    if not isinstance(relevance, dict):
        raise TypeError(f"relevance must be a tensor or a dict of tensors, got {type(relevance).__name__}")
    parts = {k: v.detach() for k, v in relevance.items()}
    if kind == "relevance":
        return parts
    parts = {k: v.abs() if kind == "abs" else v.clamp(min=0) for k, v in parts.items()}
    top = max((float(v.max()) for v in parts.values() if v.numel()), default=0.0)
    return {k: v / top if top > 0 else torch.zeros_like(v) for k, v in parts.items()}


def per_mask_type(node_rel: Tensor, node_type) -> Tensor:
    """Relevance per feature (N x F) as the node mask type reads it: ``attributes`` N x F,
    ``common_attributes`` summed over the nodes (1 x F), ``object`` (or no node mask) summed per node (N x 1)."""
    if node_type == MaskType.attributes:
        return node_rel
    if node_type == MaskType.common_attributes:
        return node_rel.sum(0, keepdim=True)
    return node_rel.sum(-1, keepdim=True)
