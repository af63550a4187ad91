"""Refusing what relevance cannot pass through: :class:`UnsupportedModelError` and
:func:`check_relevance_graph`, which walks the autograd graph from the explained output to the
inputs and names every node that is neither a relevance primitive nor a copy or selection."""
from __future__ import annotations

import torch
from torch import Tensor

from lrp_lib.explain.op_tables import PASS_NODES

__all__ = ["UnsupportedModelError", "check_relevance_graph", "node_name"]


class UnsupportedModelError(TypeError):
    """The model uses an operation that relevance cannot be propagated through."""


def node_name(node) -> str:
    name = type(node).__name__
    for suffix in ("Backward0", "Backward1", "Backward2", "Backward3"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def check_relevance_graph(out: Tensor, inputs: list[Tensor]) -> None:
    """Raise :class:`UnsupportedModelError` if ``out`` depends on ``inputs`` through an autograd node
    that is neither a relevance primitive nor a copy/selection (a custom ``autograd.Function`` of
    the model, an extension op that does not dispatch torch functions): it would pass a gradient,
    not relevance.  Branches that do not lead to ``inputs`` (weights only) are ignored."""
    ends = set()
    for t in inputs:
        if t.grad_fn is not None:
            ends.add(t.grad_fn)
        elif t.requires_grad:
            with torch.enable_grad():  # the view records its grad_fn also under torch.no_grad()
                ends.add(t.view_as(t).grad_fn.next_functions[0][0])  # the leaf's AccumulateGrad node
    reach: dict = {}
    stack = [out.grad_fn] if out.grad_fn is not None else []
    while stack:
        node = stack[-1]
        if node in reach:
            stack.pop()
            continue
        children = [n for n, _ in node.next_functions if n is not None]
        pending = [c for c in children if c not in reach]
        if pending:
            stack.extend(pending)
            continue
        reach[node] = node in ends or any(reach[c] for c in children)
        stack.pop()
    bad = sorted({node_name(n) for n, r in reach.items() if r and not (
        type(n).__name__.endswith("RelevanceBackward") or node_name(n) in PASS_NODES)})
    if bad:
        raise UnsupportedModelError(
            f"the model's output depends on its input through {', '.join(bad)}, which ran outside "
            f"lrp_lib's interception (a custom torch.autograd.Function or an extension op): relevance "
            f"cannot be propagated through it. Write it with torch operations, or explain with another method")

