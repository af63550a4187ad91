r"""Where the explained value went, group by group (each graph of a batch, each target of ``per_index=True``):
:func:`account`.  For a group :math:`g` (its input nodes and its explained output rows)

.. math::  v_g = \sum_{i \in g} R_i + B_g + \rho_g

with :math:`R_i` the relevance of the group's node features (and of the ``edge_attr`` of the edges into its
nodes), :math:`B_g` what the biases and stabilisers kept (``bias_relevance``) and :math:`\rho_g` what was lost
(``relevance_residual``: a detach, a zero output, a rule that does not conserve, relevance that crossed to another
group).  The backward totals only :math:`\sum_g B_g` (:class:`~lrp_lib.explain.mode.tally.Tally`).  With
:math:`u_g = v_g - \sum_{i \in g} R_i = B_g + \rho_g`, one more backward, from the explained values scaled by
distinct weights :math:`c_g \in [1, 2)`, gives

.. math::  \sum_g \rho_g = \sum_g u_g - \sum_g B_g, \qquad \sum_g c_g \rho_g = \sum_g c_g u_g - \sum_g c_g B_g.

When both are zero up to rounding (:math:`10^3` machine epsilons of the magnitude of the explained values, the
inputs' relevance and the biases'), no group lost anything (losses that cancel in one sum do not in the other):
:math:`B_g = u_g`, :math:`\rho_g = 0`.  Otherwise a backward per group gives its :math:`B_g` (the last by
difference), as when its graph is explained alone (the passes are linear), and :math:`\rho_g = u_g - B_g`.

Where the tally holds each kept amount per row (:class:`~lrp_lib.explain.mode.tally.ProbeTally`) and ``row_groups``
gives the group of every row of every row count (:func:`batch_row_groups`, or a
:class:`~lrp_lib.explain.subgraphs.layer_pruning.LayerPlan`), :math:`B_g` is read off without those passes, and a
group with :math:`|u_g - B_g|` above rounding lost relevance (``split_losses=False``: the row sums only show that
none did; where one did, the backward per group runs).
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from lrp_lib.core import stabilizer

__all__ = ["account", "account_one", "batch_row_groups", "lost_relevance", "LostRelevanceWarning", "NOT_FINITE"]

NOT_FINITE = ("the relevance is NaN or Inf: the model's weights (or buffers, such as a batch norm's running "
              "statistics) contain NaN or Inf values, or its output is not finite; check them with torch.isfinite")


class LostRelevanceWarning(stabilizer.LostRelevanceWarning):
    """Part of the explained output's relevance did not reach the inputs (a detach in the model)."""


def lost_relevance(start: Tensor, rels: list, absorbed: float, detached: set) -> float:
    """What of the explained value ``start`` neither reached the inputs (``rels``, their relevance; None: none) nor
    was kept by the biases and stabilisers (``absorbed``), with a :class:`LostRelevanceWarning` (naming the tensors the
    forward ``detached``) where it exceeds rounding (1e-3 of the explained magnitude in float32, 1e-6 in float64);
    a ``ValueError`` where a relevance is NaN or Inf."""
    rels = [r for r in rels if r is not None]
    sums = [t.sum() for t in (start, *rels, start.abs())]
    # one read of the data (the same values as read one by one)
    explained, *reached, magnitude = torch.stack(sums).tolist() if len({s.dtype for s in sums}) == 1 else \
        [float(s) for s in sums]
    lost = explained - sum(reached) - absorbed
    if not math.isfinite(lost) and not stabilizer.all_finite(*rels):  # (a sum is finite only if its terms are)
        raise ValueError(NOT_FINITE)
    _warn_lost(lost, explained, magnitude, detached, start.dtype)
    return lost


def _warn_lost(lost: float, explained: float, magnitude: float, detached: set, dtype: torch.dtype) -> None:
    """The :class:`LostRelevanceWarning` of :func:`lost_relevance` (``magnitude``: of the explained relevance)."""
    if abs(lost) > (1e-6 if dtype == torch.float64 else 1e-3) * max(1.0, magnitude):
        share = f" ({100 * lost / explained:.1f} % of the explained {explained:.4g})" if explained else ""
        where = (f"model.forward detaches tensors ({', '.join(sorted(detached))}) or joins constants"
                 if detached else "relevance reached constants joined to the computation (torch.cat, "
                                  "indexing) or outputs equal to zero")
        warnings.warn(f"relevance {lost:.4g}{share} did not reach x: {where}; the explanation covers only the rest. "
                      f"Remove the detach to explain the whole output", LostRelevanceWarning, stacklevel=6)


def account_one(start: Tensor, grads: list, absorbed: float, detached: set) -> tuple[Tensor, Tensor]:
    r""":func:`account` of one group whose output is one row (a single graph), with :func:`lost_relevance`'s
    warning and error, from one read of the data: ``(bias_relevance, relevance_residual)``, of shape ``[1]`` and
    equal to :func:`account`'s (the same float64 sums, in the same order).

    .. math::  B = \sum_\text{ops} b, \qquad \rho = \Big(\sum_j v_j - \sum_i R_i\Big) - B"""
    dtype, start = start.dtype, start.detach()
    rels = [rel.detach() for rel in grads if rel is not None]
    parts = [start.reshape(1, -1).sum(-1), start.abs().sum().view(1)]
    parts += [rel.flatten(1).sum(-1) if rel.dim() > 1 else rel for rel in rels]
    if any(p.dtype != dtype for p in parts):
        parts = [p.double() for p in parts]
    values = torch.cat(parts).tolist()  # one synchronisation
    explained, reached = 0.0 + values[0], 0.0
    for v in values[2:]:  # (a loop, not sum(): Python 3.12's sum of floats compensates rounding)
        reached += v
    unaccounted = explained - reached
    if math.isfinite(unaccounted):
        _warn_lost(unaccounted - absorbed, explained, values[1], detached, dtype)
    elif not stabilizer.all_finite(*rels):
        raise ValueError(NOT_FINITE)
    return (torch.tensor([absorbed], dtype=dtype, device=start.device),
            torch.tensor([unaccounted - absorbed], dtype=dtype, device=start.device))


def batch_row_groups(batch: Tensor) -> dict | None:
    """The group of each row of a batch's tensors, by row count, for :meth:`~lrp_lib.explain.mode.tally.Tally.split`:
    the node rows (``batch``) and the graph rows (pooled tensors, the output); None for a single graph.  Edges are
    not covered: where they keep relevance, the split gives None and :func:`account` runs its backward."""
    graphs = int(batch.max()) + 1 if batch.numel() else 0
    if graphs < 2:
        return None
    own = torch.arange(graphs, device=batch.device)
    if graphs == batch.numel() and not torch.equal(batch, own):
        return None  # as many graphs as nodes, not one node each in order: the rows cannot be told apart
    return {batch.numel(): batch, graphs: own}


def _rerun(head: Tensor, inputs: list, start: Tensor, tally, recorder) -> float:
    """The bias total of one more backward from ``start`` (the tally and the edge record kept)."""
    absorbed, blocked = tally.absorbed, tally.blocked
    saved = None if recorder is None else recorder.record.clone()
    tally.absorbed, tally.blocked = {}, {}
    try:
        tally.backward(head, inputs, start, retain_graph=True)
        return tally.total(tally.absorbed)
    finally:
        tally.absorbed, tally.blocked = absorbed, blocked
        if saved is not None:
            recorder.record.copy_(saved)


def account(head: Tensor, inputs: list, start: Tensor, grads: list, tally, recorder, *,
            node_group: Tensor, row_group: Tensor, num_groups: int, edge_group: Tensor | None = None,
            row_groups: dict | None = None, split_losses: bool = True):
    """``(bias_relevance, relevance_residual)``, one value per group ``0 .. num_groups - 1``.

    ``head``/``inputs``/``start``/``grads``: the explained output, the marked inputs (node features, then any
    ``edge_attr``), the start relevance and the inputs' relevance of the backward just run (graph retained);
    ``tally``: the mode's tally after it; ``recorder``: its edge recorder (or None), whose ``record`` the extra
    passes leave unchanged; ``node_group``, ``edge_group``, ``row_group``: the group (``-1``: none) of each node,
    ``edge_attr`` row and row of ``head``; ``row_groups``, ``split_losses``: see the module docstring."""
    dtype, device = start.dtype, start.device
    shape = (-1, *([1] * (start.dim() - 1)))  # a value per row, broadcast over the rest
    explained = torch.zeros(num_groups, dtype=torch.float64, device=device)
    rows = start.detach().reshape(start.shape[0], -1).sum(-1).double()
    keep = row_group >= 0
    explained.index_add_(0, row_group[keep], rows[keep])
    reached = torch.zeros_like(explained)
    size = float(rows.abs().sum())  # the magnitudes that rounding is relative to
    for rel, group in zip(grads, (node_group, edge_group)):
        if rel is None or group is None:
            continue
        size += float(rel.detach().abs().sum())
        per_row = (rel.detach().flatten(1).sum(-1) if rel.dim() > 1 else rel.detach()).double()  # (also 0 rows)
        inside = group >= 0
        reached.index_add_(0, group[inside], per_row[inside])
    unaccounted = explained - reached
    total_bias = tally.total(tally.absorbed)
    bias = unaccounted.clone()
    tol = 1e3 * torch.finfo(dtype).eps * (1.0 + size + abs(total_bias))
    split = tally.split(row_groups, num_groups) if num_groups > 1 and row_groups is not None else None
    found_loss = split is not None and bool(((unaccounted - split).abs() > tol).any())
    if found_loss and split_losses:
        bias = split
    elif split is None and num_groups > 1:  # the weighted check
        weights = 1.0 + torch.remainder(torch.arange(1, num_groups + 1, dtype=torch.float64, device=device)
                                        * 0.6180339887498949, 1.0)
        lost = float(unaccounted.sum()) - total_bias
        weighted_start = start * weights.to(dtype)[row_group.clamp(min=0)].view(shape)
        weighted_start = torch.where(keep.view(shape), weighted_start, torch.zeros_like(weighted_start))
        weighted_lost = float((weights * unaccounted).sum()) - _rerun(head, inputs, weighted_start, tally, recorder)
        found_loss = abs(lost) > tol or abs(weighted_lost) > 2 * tol
    elif num_groups < 2:
        bias[:] = total_bias
    if found_loss and bias is not split:  # each group's bias from its own backward (unless the split gave it)
        done = 0.0
        for g in range(num_groups - 1):
            mine = (row_group == g).view(shape)
            bias[g] = _rerun(head, inputs, torch.where(mine, start, torch.zeros_like(start)), tally, recorder) \
                if bool(mine.any()) else 0.0
            done += float(bias[g])
        bias[-1] = total_bias - done
    return bias.to(dtype), (unaccounted - bias).to(dtype)
