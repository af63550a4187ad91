"""bound: a value per thread for the length of a block; ensure_hook: each hook registered once per module."""
import copy
import threading
from contextvars import ContextVar

import torch
from torch_geometric.nn import GCNConv, MessagePassing

from lrp_lib.explain.mode.hooks import bound, ensure_hook

VAR: ContextVar = ContextVar("test_value", default=None)


def test_bound_restores_the_value_before_the_block_also_after_an_error():
    with bound(VAR, 1) as value:
        assert value == 1 and VAR.get() == 1
        try:
            with bound(VAR, 2):
                assert VAR.get() == 2
                raise KeyError
        except KeyError:
            pass
        assert VAR.get() == 1
    assert VAR.get() is None


def test_another_thread_does_not_see_the_bound_value():
    seen = []
    with bound(VAR, "main"):
        worker = threading.Thread(target=lambda: seen.append(VAR.get()))
        worker.start()
        worker.join()
    assert seen == [None]


def test_a_hook_is_registered_once_per_module_also_on_a_deep_copy():
    calls = []

    def hook(module, inputs):
        calls.append(module)

    model = torch.nn.Sequential(GCNConv(3, 4), torch.nn.ReLU(), GCNConv(4, 2))
    for _ in range(3):
        ensure_hook(model, MessagePassing, "_propagate_forward_pre_hooks", hook)
    twin = copy.deepcopy(model)
    ensure_hook(twin, MessagePassing, "_propagate_forward_pre_hooks", hook)
    for m in (model, twin):
        assert [len(layer._propagate_forward_pre_hooks) for layer in m if isinstance(layer, GCNConv)] == [1, 1]
    x, edge_index = torch.randn(5, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
    twin[0](x, edge_index)
    assert calls == [twin[0]]
