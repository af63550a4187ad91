"""Memory measures shared by the benchmark scripts (Linux).

* :func:`status_bytes` reads a field of ``/proc/self/status``: ``VmRSS`` (resident now) or
  ``VmHWM`` (peak resident size of this process; unlike ``ru_maxrss`` it is not inherited from
  a parent process).  Peak growth = ``status_bytes("VmHWM") - status_bytes("VmRSS")`` taken
  before the computation, in a fresh process.
* :func:`saved_bytes` runs a forward and counts the bytes of the distinct storages autograd
  keeps for backward, leaving out given tensors (inputs, parameters) that are alive anyway.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch


def status_bytes(field: str) -> int:
    """A memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not found in /proc/self/status")


def saved_bytes(forward: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes autograd saves for backward while ``forward()`` runs (each storage counted once)."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(seen.values())
