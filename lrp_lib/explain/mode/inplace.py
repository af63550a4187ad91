r"""The calls that the relevance mode does not send to a rule (:class:`SpecialCalls`, a part of
:class:`~lrp_lib.explain.mode.function_mode.RelevanceMode`): attribute reads (``.data``, a detach that the mode
reports, ``.grad``, ``.T``), dropout (refused in training mode, whose mask is random; the identity in eval
mode), and in-place operations on input-dependent tensors (``x.relu_()``, ``h += m``), computed out of place on
a copy by the same handler, then copied into the tensor.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from lrp_lib.explain.mode.dispatch import HANDLERS
from lrp_lib.explain.mode.graph_check import UnsupportedModelError
from lrp_lib.explain.mode.op_tables import AUGMENTED, IDENTITY

__all__ = ["SpecialCalls"]


class SpecialCalls:
    """Attribute reads, dropout and in-place operations inside the mode (methods of the mode)."""

    def get_attribute(self, func, args, kwargs):
        """An attribute read: the attribute, marked where it is a tensor but ``.data`` or ``.grad``."""
        attr = getattr(getattr(func, "__self__", None), "__name__", "")
        out = func(*args, **kwargs)
        if attr in ("data", "grad"):
            if attr == "data":
                self.detached.add(f".data in {self.module_label()}")
            return out
        return self.mark(out) if isinstance(out, Tensor) else out

    def run_dropout(self, func, name, args, kwargs):
        """Dropout: refused in training mode with ``p > 0``; else its value, which keeps the input's marks."""
        training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        if training and p:
            raise UnsupportedModelError(f"{name} in training mode in {self.module_label()}: relevance of a random "
                                        f"mask is not defined; call model.eval() (PyG's Explainer does)")
        out = func(*args, **kwargs)
        source = args[0] if args else kwargs.get("input")
        if out is not source and isinstance(out, Tensor) and isinstance(source, Tensor):  # (eager: the input itself;
            out.__dict__.update({k: v for k, v in vars(source).items() if k.startswith("_lrp_")})  # traced: a copy)
        return self.mark(out)

    def run_inplace(self, func, name, args, kwargs):
        """An in-place operation: computed out of place on a copy, then copied into the tensor (so autograd
        records the copy and nothing that a rule saved is overwritten)."""
        base = AUGMENTED.get(name, name[:-1])
        target = args[0]
        if not isinstance(target, Tensor) or not (base in HANDLERS or base in IDENTITY):
            raise UnsupportedModelError(f"the in-place operation {name} in {self.module_label()} on a tensor that "
                                        f"depends on the input: LRP has no rule for it")
        source = target.clone()
        if self.is_marked(target):
            self.mark(source)
        outofplace = getattr(torch.Tensor, base, None) or getattr(torch, base, None) or getattr(F, base, None)
        if outofplace is None:
            raise UnsupportedModelError(f"the in-place operation {name} in {self.module_label()}: no out-of-place "
                                        f"version of it was found to compute its relevance")
        handler, new_args = HANDLERS.get(base), (source, *args[1:])
        result = handler(self, outofplace, new_args, kwargs) if handler else self.identity(outofplace, new_args, kwargs)
        target.copy_(result)
        return self.mark(target)
