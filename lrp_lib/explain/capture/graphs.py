"""Passes over a captured explanation's FX graph: :func:`fold_constants` runs the graph part once and keeps its
values; :func:`deduplicated` computes what several layers recompute once; :func:`python_bindings` calls each ATen
operation through PyTorch's Python binding of the same name."""
from __future__ import annotations

import torch
from torch import Tensor
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.dialect.common.cse_pass import CSEPass

__all__ = ["fold_constants", "deduplicated", "python_bindings"]


def fold_constants(graph: torch.fx.GraphModule, inputs: list) -> torch.fx.GraphModule:
    """The graph part (every operation that reads no input of ``graph``: self-loops, degrees, normalisation
    coefficients, the weights' clamps) run once, each constant an input-dependent operation reads kept as the
    value it had when it was read, so that an in-place change (PyG's ``scatter_add_`` into a buffer, which
    ``torch.fx.experimental.const_fold`` leaves in the graph) is seen where it happened.  A buffer that an
    input-dependent operation writes into (a scatter into zeros of a size the model read) is made on every call,
    from a copy of what it is made from."""
    variable, fresh = set(), set()
    while True:
        variable.clear()
        for node in graph.graph.nodes:
            if node.op == "placeholder" or node in fresh or any(a in variable for a in node.all_input_nodes):
                variable.add(node)
        written = {a for node in variable for a in _written(node)} - variable
        if not written:
            break
        fresh |= written
    reads: dict = {}  # (node, arg) -> (the value kept, the value as read, with its strides)

    class Reader(torch.fx.Interpreter):
        def run_node(self, node):
            if node in variable and node.op != "placeholder":
                for arg in node.all_input_nodes:
                    if arg not in variable and (node, arg) not in reads:
                        value = self.env[arg]
                        reads[(node, arg)] = (value.detach().clone() if isinstance(value, Tensor) else value, value)
            return super().run_node(node)

    with torch.enable_grad():
        Reader(graph).run(*inputs)
    for i, ((node, arg), (value, read)) in enumerate(reads.items()):
        if not isinstance(value, Tensor):
            continue
        name, shape = f"_graph_part_{i}", None
        # a value read as a broadcast (an index PyG's scatters expand over the features): one slice, expanded again
        if read.dim() and 0 in read.stride() and read.numel():
            index = tuple(slice(0, 1) if stride == 0 and size > 1 else slice(None)
                          for stride, size in zip(read.stride(), read.shape))
            value, shape = value[index].contiguous(), list(read.shape)
        graph.register_buffer(name, value)
        with graph.graph.inserting_before(node):
            kept = graph.graph.get_attr(name)
            if shape is not None:
                kept = graph.graph.call_function(torch.ops.aten.expand.default, (kept, shape))
            if node in fresh:
                kept = graph.graph.call_function(torch.ops.aten.clone.default, (kept,))
            node.replace_input_with(arg, kept)
    graph.graph.eliminate_dead_code(lambda node: node in variable or node.op in ("placeholder", "output"))
    graph.recompile()
    return graph


def _written(node: torch.fx.Node) -> list:
    """The nodes whose values the operation ``node`` writes into (an in-place operation's ``self``)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.is_mutable:
        return []
    return [a for arg, a in zip(schema.arguments, node.args)
            if arg.alias_info is not None and arg.alias_info.is_write and isinstance(a, torch.fx.Node)]


def deduplicated(graph: torch.fx.GraphModule, args: list) -> torch.fx.GraphModule:
    """``graph`` functionalised (``torch.func.functionalize``; a copy, which has no derivative, or a slice that gives
    its input unchanged: that input), then each repeated operation removed (``CSEPass``): what every layer recomputes
    (PyG's normalisation) runs once.  Kept if its outputs and gradients on ``args`` are ``graph``'s."""
    try:
        with torch.enable_grad(), torch.fx.experimental._config.patch(use_duck_shape=False):  # (each size its own)
            new = make_fx(torch.func.functionalize(graph, remove="mutations"), tracing_mode="symbolic",
                          _allow_non_fake_inputs=True)(*args)
        aten = torch.ops.aten  # (a copy of a value of its shape and dtype is that value, a slice of all an input)
        for node in [n for n in new.graph.nodes if n.target in (aten.copy.default, aten.slice.Tensor)]:
            value = node.args[1] if node.target is aten.copy.default else node.args[0]
            whole = node.target is aten.copy.default or node.args[2:3] in ((), (0,), (None,))
            if whole and (v := value.meta["val"]).shape == node.meta["val"].shape and v.dtype == node.meta["val"].dtype:
                node.replace_all_uses_with(value)
        new.graph.eliminate_dead_code()
        new = CSEPass().call(new).graph_module
        with torch.enable_grad():
            grads = [a for a in args if a.requires_grad]
            runs = [(*r, *torch.autograd.grad([o.sum() for o in r if o.requires_grad], grads, allow_unused=True))
                    for r in (graph(*args), new(*args))]
        floats = [len({o for o in g.graph.output_node().args[0] if o.meta["val"].is_floating_point()})
                  for g in (graph, new)]  # (an output hooks read merged into another: its relevance twice)
        same = floats[0] == floats[1] and all(a is b is None or torch.equal(a, b) for a, b in zip(*runs))
    except Exception:  # (an operation functionalize or the retrace does not take, one without a derivative)
        return graph
    return new if same else graph


def python_bindings(graph: torch.fx.GraphModule, inputs: list) -> torch.fx.GraphModule:
    """``graph`` with each ATen operation called through PyTorch's Python binding of the same name where there is
    one (``torch.mul`` for ``aten.mul.Tensor``, ``Tensor.add_`` for ``aten.add_.Tensor``): the same kernels and
    autograd nodes, without the operator's own Python call and argument parsing (a third of a small graph's forward).
    Kept if its outputs on ``inputs`` are ``graph``'s to the bit.  Constants become plain attributes."""
    for store in (graph._parameters, graph._buffers):
        for name in list(store):
            graph.__dict__[name] = store.pop(name)
    expected = graph(*inputs)
    changed = [(node, node.target) for node in graph.graph.nodes
               if isinstance(node.target, torch._ops.OpOverload) and node.target.namespace == "aten"]
    for node, op in changed:
        name = op.__name__.split(".")[0]
        function, method = getattr(torch._C._VariableFunctions, name, None), getattr(torch._C.TensorBase, name, None)
        # (the generated code calls torch.<name>, which a library may have wrapped, as PyG wraps select and
        # index_select: then Tensor.<name>, where that is the binding)
        wrapped = getattr(torch, name, None) is not function and method is not None and torch.Tensor.__dict__.get(
            name, method) is method
        node.target = method if function is not None and wrapped else function or method or op
    graph.recompile()
    try:
        same = all(torch.equal(a, b) for a, b in zip(graph(*inputs), expected))
    except (TypeError, RuntimeError):  # (a binding whose signature differs from the operator's)
        same = False
    if not same:
        for node, op in changed:
            node.target = op
        graph.recompile()
    return graph
