"""What an explanation's operations kept (:class:`Tally`), read from the probes of the forward rules
(:class:`ProbeTally`) and split by graph or target (:func:`lrp_lib.explain.accounting.account`)."""
from __future__ import annotations

import torch
from torch import Tensor

from lrp_lib.core import modify

__all__ = ["Tally", "ProbeTally"]


def _table(name: str, doc: str) -> property:
    """The property of one table of :class:`Tally`, read (and replaced) after the pending amounts."""
    def get(self) -> dict[str, float]:
        self._flush()
        return self._tables[name]

    def put(self, table: dict) -> None:
        self._flush()
        self._tables[name] = table
    return property(get, put, doc=doc)


class Tally:
    """Amounts of relevance kept by constants (biases, constant terms, stabilisers) or blocked, per label, and,
    where known, what was kept per row of the tensors of each row count (:attr:`rows`; :attr:`unsplit`: not
    known), which :meth:`split` divides among groups.  The amounts are kept as tensors until a table is read,
    then read with one synchronisation and summed label by label in the order they came."""

    absorbed = _table("absorbed", "What biases, constant terms and stabilisers kept, ``{label: amount}``.")
    blocked = _table("blocked", "The relevance that reached each operation without a rule, ``{label: amount}``.")

    def __init__(self):
        self._tables: dict[str, dict] = {"absorbed": {}, "blocked": {}}
        self._pending: list[tuple[str, str, Tensor]] = []
        self.rows: dict[int, Tensor] = {}
        self.unsplit = True

    def absorb(self, label: str, amount: Tensor) -> None:
        """Add ``amount`` (a tensor) to :attr:`absorbed` under ``label``."""
        self._pending.append(("absorbed", label, amount.detach()))

    def _flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        amounts = [a for _, _, a in pending]
        if all(a.device == amounts[0].device and a.dtype == amounts[0].dtype for a in amounts):
            read = torch.stack(amounts).tolist()  # one synchronisation
        else:  # a model spread over devices or dtypes
            read = [a.item() for a in amounts]
        for (table, label, _), value in zip(pending, read):
            target = self._tables[table]
            target[label] = value if label not in target else target[label] + value

    @staticmethod
    def total(table: dict) -> float:
        return float(sum(table.values())) if table else 0.0

    def split(self, row_groups: dict, num_groups: int) -> Tensor | None:
        """The absorbed amount of each group (float64, ``[num_groups]``), with ``row_groups`` the group of each row
        of the tensors of each row count (``{count: groups}``); None where some non-zero amount has no group."""
        if self.unsplit:
            return None
        out = torch.zeros(num_groups, dtype=torch.float64)
        for n, per_row in self.rows.items():
            groups = row_groups.get(n)
            if groups is None or groups.numel() != n:
                if bool(per_row.any()):
                    return None
                continue  # nothing kept on these rows (e.g. attention weights, which pass no relevance)
            out = out.to(per_row.device)
            inside = groups >= 0
            if not bool(inside.all()) and bool(per_row[~inside].any()):
                return None
            out.index_add_(0, groups[inside], per_row[inside])
        return out


class ProbeTally(Tally):
    """The amounts of a ``ForwardMode`` explanation, read from its probes' gradients after each backward
    (:meth:`backward`): what the operations that can keep relevance kept (the relevance they received less what
    they passed on, plus the amounts of ``kept``), what reached each operation without a rule, and, with
    ``rows=True``, what was kept per row (:attr:`rows`)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.unsplit = mode.row_probes is None  # scalar probes: totals only

    def backward(self, head: Tensor, inputs: list, start: Tensor, retain_graph: bool = False) -> list:
        """One ordinary backward from ``head``, whose relevance is ``start`` (the gradient ``start / head``): returns
        the inputs' relevance (input times gradient); the edges' relevance goes to the edge recorder, the probes'
        amounts into this tally."""
        if self.mode.recorder is not None:
            self.mode.recorder.record.zero_()  # (each backward records from zero)
        grads = torch.autograd.grad(head, [*inputs, *self.leaves()], modify.share_of(start, head),
                                    allow_unused=True, retain_graph=retain_graph)
        self.settle(grads[len(inputs):])
        return [None if g is None else t.detach() * g for t, g in zip(inputs, grads)]

    def leaves(self) -> list:
        """The probes whose gradients hold the amounts: ``kept``, each blocked operation's probe, and the probes per
        row."""
        mode = self.mode
        return [mode.kept, *(p for _, _, p in mode.probes), *(leaf for leaf, _ in (mode.row_probes or {}).values())]

    def settle(self, grads) -> None:
        """The amounts from the gradients of :meth:`leaves` (in its order; None: not reached)."""
        mode = self.mode
        total = grads[0].detach() if grads[0] is not None else mode.kept.new_zeros(())
        self.rows = {}
        for count, g in zip(mode.row_probes or {}, grads[1 + len(mode.probes):]):
            if g is not None:  # what row r kept: received less passed on, plus the kept amounts
                self.rows[count] = g.detach().double()
                total = total + g.sum()
        self.absorb("biases, constant terms and stabilisers", total)
        for (label, value, _), g in zip(mode.probes, grads[1:]):
            if g is not None:
                self._pending.append(("blocked", label, (value * g).sum().detach()))
