"""What an explanation's operations kept: :class:`Tally`, the amounts biases, constant terms and stabilisers
kept and the relevance that reached operations without a rule, read from the probes of the forward rules
(:class:`~lrp_lib.explain.mode.forward.ProbeTally`) and split by graph or target
(:func:`lrp_lib.explain.accounting.account`)."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["Tally"]


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

    def _put(self, table: str, label: str, amount: Tensor) -> None:
        self._pending.append((table, label, amount.detach()))

    def absorb(self, label: str, amount: Tensor) -> None:
        """Add ``amount`` (a tensor) to :attr:`absorbed` under ``label``."""
        self._put("absorbed", label, amount)

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
