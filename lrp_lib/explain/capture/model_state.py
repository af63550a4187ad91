"""What a captured explanation depends on in the model (:func:`model_state`), by which
:class:`~lrp_lib.explain.capture.cache.CaptureCache` keys it: a captured graph runs no hook, and holds the
parameters it was captured with."""
from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import MessagePassing

__all__ = ["model_state", "hooks_of"]


def model_state(model: nn.Module) -> tuple:
    """What a captured explanation depends on in the model: its parameters and buffers (which tensors, at which version),
    every module's training flag, and which hooks would run Python in its forward, named, or None (global module
    hooks, or the first module with :func:`hooks_of`), all from one walk over its modules."""
    flags, tensors, hooks = [], [], None
    if any(getattr(_torch_module, name, None) for name in _GLOBAL_HOOKS):
        hooks = "global module hooks are registered"
    for name, m in model.named_modules():
        flags.append(m.training)
        for t in m._parameters.values():
            if t is not None:
                tensors.append((id(t), t._version))
        if m._buffers:
            for t in m._buffers.values():
                if t is not None:
                    tensors.append((id(t), t._version))
        if hooks is None and (found := hooks_of(m)) is not None:
            hooks = f"module '{name or type(m).__name__}' has {found}"
    return tuple(tensors), tuple(flags), hooks


_torch_module = torch.nn.modules.module
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_OWN_HOOKS = "lrp_lib.explain.mode.edges"  # the message hooks of edge relevance, which run in every explanation
_HOOK_DICTS: dict = {}  # a MessagePassing class -> the names of its hook dictionaries


def hooks_of(m: nn.Module) -> str | None:
    """Which hooks of module ``m`` (not its children) would run Python in its forward, or None: module
    hooks, and a message-passing layer's hooks other than those of edge relevance."""
    if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks:
        return "hooks"
    if isinstance(m, MessagePassing):
        attrs = _HOOK_DICTS.get(type(m))
        if attrs is None:  # (the same for every instance of a class: made by MessagePassing.__init__)
            attrs = _HOOK_DICTS[type(m)] = tuple(a for a, v in vars(m).items() if "forward" in a and
                                                 isinstance(v, dict) and not a.startswith("_forward"))
        for attr in attrs:
            hooks = getattr(m, attr, None)
            if hooks and any(getattr(h, "__module__", None) != _OWN_HOOKS for h in hooks.values()):
                return attr.strip("_")
    return None

