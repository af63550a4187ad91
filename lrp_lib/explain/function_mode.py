r"""LRP for any model, by intercepting torch functions: :class:`RelevanceMode`.

Inside ``with RelevanceMode(composite, model):`` every torch function that the model calls
(``F.linear``, ``Tensor.scatter_add_``, ``torch.relu``, ``a * b``, ...) goes through
:meth:`RelevanceMode.__torch_function__` (a :class:`torch.overrides.TorchFunctionMode`).  The
mode follows which tensors depend on the explained inputs ("marked" tensors: the inputs, and
every result of an operation on a marked tensor).  An operation on marked tensors is computed
by the relevance primitive of :mod:`lrp_lib.explain.primitives` that fits it, so its backward is an LRP
rule; operations on constants only (weights, degrees, normalisation coefficients computed from
``edge_index``) run unchanged.  One ``backward`` from the output then leaves relevance in the
inputs' ``.grad``.

What each operation gets (see :mod:`lrp_lib.core.composites` for why):

====================================================  ==========================================
operations on marked tensors                           rule
====================================================  ==========================================
views, indexing, ``gather``, ``index_select``, ``cat``,  passes like the gradient (copies sum
``stack``, ``split``, ``expand``, ``repeat``, ``where``, their relevance; max and min: the
``max``/``min``/``amax``, ``scatter_reduce`` amax/amin,  winner takes all)
``sort``, ``topk``, dropout in eval mode
``F.linear``, ``x @ W``, convolutions (``W`` a weight)   the composite's rule for that weight
sums, means, ``scatter_add``, ``index_add``,            epsilon rule (proportional split;
``scatter_reduce`` sum/mean, ``A @ x`` (``A`` data),    constant terms keep their share)
``cumsum``, average pools, batch norm (eval)
``a + b``, ``a - b``                                   proportional to the terms
elementwise functions, ``x * c``, ``x / c``            identity
``a * b`` (both marked)                                uniform (CP-LRP for attention weights)
``prod``, ``scatter_reduce`` prod (``MulAggregation``)  uniform over the factors, R / n
``a / b`` (both marked)                                denominator held constant
``A @ B`` (both marked)                                uniform on each product term
``softmax``                                            AttnLRP's softmax rule
layer / group / instance norm                          identity through the normalisation
``cat``/``stack`` with a constant                       the constant keeps its slice (a bias's share)
``nn.MultiheadAttention`` (``GPSConv``,                written out: projections, ``q k^T``,
``TransformerEncoderLayer``)                           softmax, ``A v``, out-projection, each as above
``nn.LSTM``/``GRU``/``RNN``, their cells               written out step by step: gates held constant
(``SAGEConv(aggr="lstm")``, ``Set2Set``)               (signal-take-all), the rest as above
anything else                                          blocked: no relevance passes, and the
                                                       amount that reached it is recorded
====================================================  ==========================================

Nothing is patched: the mode is pushed on the calling thread's own stack of function modes, so
other threads (training, other explanations) never see it, and it is gone when the block ends.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch_geometric.nn import MessagePassing

from lrp_lib.core.composites import Composite, get_composite
from lrp_lib.explain.primitives import (BilinearRelevance, BlockedRelevance, IdentityRelevance, JoinRelevance, LinearRelevance,
                         NormAffineRelevance, UniformProductRelevance, NormaliseRelevance, ProductRelevance, SoftmaxRelevance,
                         SumRelevance, Tally, WeightRelevance)
from lrp_lib.core.rules import Epsilon, LinearMap

__all__ = ["RelevanceMode", "UnsupportedModelError", "RELEVANCE_NODES", "check_relevance_graph"]


class UnsupportedModelError(TypeError):
    """The model uses an operation that relevance cannot be propagated through."""


# ------------------------------------------------------------------ name tables
#: Functions whose result carries no relevance (metadata, comparisons, integer results,
#: constructors, rounding); the result is not marked.
_PLAIN = frozenset("""
size dim numel __len__ __bool__ item tolist is_floating_point is_complex element_size stride storage_offset
is_contiguous data_ptr __format__ __repr__ __str__ __hash__ __index__ __int__ __float__ __array__ __reduce_ex__
eq ne lt le gt ge __eq__ __ne__ __lt__ __le__ __gt__ __ge__ isnan isinf isfinite isclose allclose equal
argmax argmin argsort nonzero any all count_nonzero bincount unique unique_consecutive histc
new_zeros new_ones new_full new_empty new_tensor zeros_like ones_like empty_like full_like rand_like randn_like
randint_like sign sgn signbit logical_not logical_and logical_or logical_xor floor ceil round trunc
register_hook retain_grad requires_grad_ get_device numpy __deepcopy__ __setstate__ __getstate__
""".split())

#: Functions that drop the autograd link: their result is a constant (relevance sent there is lost).
_DETACH = frozenset({"detach", "detach_"})

#: Functions whose gradient is already the relevance rule (copies, selections, max/min).
_PASS = frozenset("""
view view_as reshape reshape_as flatten unflatten squeeze unsqueeze transpose t permute movedim moveaxis
swapaxes swapdims __getitem__ index_select gather take take_along_dim narrow select
hstack vstack dstack split split_with_sizes chunk unbind tensor_split expand expand_as broadcast_to
repeat repeat_interleave tile contiguous clone to float double half bfloat16 type type_as cpu cuda flip roll
amax amin maximum minimum fmax fmin topk sort msort kthvalue median where masked_fill index_fill
index_copy masked_scatter pad constant_pad_nd diagonal diag tril triu unsqueeze_ squeeze_ t_ transpose_
as_strided scatter narrow_copy select_scatter slice_scatter movedim_ real view_as_real
""".split())

#: Elementwise functions of one marked input: the identity rule.
_IDENTITY = frozenset("""
relu relu6 leaky_relu elu selu celu gelu silu mish softplus softsign tanh sigmoid hardtanh hardswish
hardsigmoid prelu rrelu logsigmoid tanhshrink softshrink hardshrink threshold exp exp2 expm1 log log2
log10 log1p sqrt rsqrt square pow __pow__ __rpow__ float_power abs __abs__ absolute neg __neg__ negative
positive __pos__ clamp clamp_min clamp_max clip reciprocal normalize sin cos erf erfc sinh cosh atan asin
acos tan nan_to_num
""".split())

_DROPOUT = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                      "feature_alpha_dropout", "feature_dropout"})

#: Autograd nodes whose backward passes relevance correctly (the gradient of a copy, a view,
#: a selection); names without the trailing ``Backward<n>``.
_PASS_NODES = frozenset("""
AccumulateGrad View UnsafeView Reshape ReshapeAlias Unsqueeze Squeeze Select Slice Index IndexSelect Gather
T Transpose Permute Clone Alias ToCopy Expand Cat Split SplitWithSizes Unbind Stack Narrow Max Min Amax Amin
Maximum Minimum Fmax Fmin Topk Sort Kthvalue Median Where MaskedFill MaskedScatter IndexPut IndexFill IndexCopy
CopyBackwards CopySlices ConstantPadNd Repeat Flip Roll Diagonal Tril Triu AsStrided Scatter ScatterReduce
Take TakeAlongDim ViewAsReal SelectScatter SliceScatter Movedim Unfold PermuteBackward Squeeze
""".split())

RELEVANCE_NODES = _PASS_NODES  # for the docs: what check_relevance_graph accepts besides relevance ops


def _node_name(node) -> str:
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
    bad = sorted({_node_name(n) for n, r in reach.items() if r and not (
        type(n).__name__.endswith("RelevanceBackward") or _node_name(n) in _PASS_NODES)})
    if bad:
        raise UnsupportedModelError(
            f"the model's output depends on its input through {', '.join(bad)}, which ran outside "
            f"lrp_lib's interception (a custom torch.autograd.Function or an extension op): relevance "
            f"cannot be propagated through it. Write it with torch operations, or explain with another method")


# ------------------------------------------------------------------ the mode
class RelevanceMode(TorchFunctionMode):
    """Propagate relevance instead of gradients through every torch function called in its block.

    Args:
        composite: a :class:`~lrp_lib.core.composites.Composite` (or a rule or its name).
        model: the explained module: its parameters are the weights whose rule the composite
            chooses (by the owning module's type or name), and its module names label the report.

    Mark the explained inputs with :meth:`mark` inside the block, run the model, leave the block,
    then call ``torch.autograd.grad(out, inputs, R)``.  :attr:`tally` then says how much relevance
    the biases and stabilisers kept and how much reached operations without a rule.
    """

    def __init__(self, composite: Composite | str = "epsilon", model: nn.Module | None = None):
        super().__init__()
        self.composite = get_composite(composite)
        self.tally = Tally()
        self._heads: dict[int, tuple[str, Tensor, Tensor]] = {}  # id(output) -> (function, its input, output)
        self.detached: set[str] = set()
        self._token = object()
        self._leaves: list[Tensor] = []
        self._leaf_nodes: set | None = None
        self._reach: dict = {}
        # id(parameter) -> (owner's name, owner, (message-passing layer, number of them) or None)
        self._owners: dict[int, tuple[str, nn.Module, tuple[int, int] | None]] = {}
        self._module_names: dict[int, str] = {}
        self._rules: dict[int, Any] = {}
        self._eps_rule = Epsilon(self.composite.epsilon)
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
        if model is not None:
            layers = [name for name, module in model.named_modules() if isinstance(module, MessagePassing)]
            layers = [n for n in layers if not any(n.startswith(o + ".") for o in layers if o != n and o)]
            for name, module in model.named_modules():
                self._module_names[id(module)] = name
                depth = next((i for i, o in enumerate(layers) if name == o or not o or name.startswith(o + ".")),
                             None)
                for p in module.parameters(recurse=False):
                    self._owners[id(p)] = (name, module, None if depth is None else (depth, len(layers)))

    # -------------------------------------------------------------- marks
    def mark(self, t):
        """Mark ``t`` (a tensor, or a tuple/list of them) as depending on the explained input."""
        if isinstance(t, Tensor):
            if t.is_floating_point() and t.requires_grad:
                t._lrp_mark = self._token
                if t.grad_fn is None:
                    self._leaves.append(t)
        elif isinstance(t, (tuple, list)):
            for item in t:
                self.mark(item)
        return t

    def is_marked(self, t) -> bool:
        return isinstance(t, Tensor) and getattr(t, "_lrp_mark", None) is self._token

    def _gate(self, t: Tensor) -> Tensor:
        t._lrp_gate = self._token
        return t

    def _gate_all(self, t):
        if isinstance(t, Tensor):
            self._gate(t)
        elif isinstance(t, (tuple, list)):
            for item in t:
                self._gate_all(item)

    def _is_gate(self, t) -> bool:
        return getattr(t, "_lrp_gate", None) is self._token

    def _escaped(self, t: Tensor) -> None:
        """Raise if ``t`` is not marked but its autograd history reaches a marked input: it was
        computed outside the interception (a custom ``autograd.Function``), and treating it as a
        constant would silently drop (or misplace) its relevance."""
        if type(t.grad_fn).__name__.endswith("RelevanceBackward"):
            return  # made by a relevance primitive, being marked right now
        if self._leaf_nodes is None:
            self._leaf_nodes = {leaf.view_as(leaf).grad_fn.next_functions[0][0] for leaf in self._leaves}
        stack, path = [t.grad_fn], []
        while stack:
            node = stack.pop()
            if node is None:
                continue
            if node in self._reach:
                if self._reach[node]:
                    break
                continue
            self._reach[node] = False
            if node in self._leaf_nodes or type(node).__name__.endswith("RelevanceBackward"):
                self._reach[node] = True
                break
            path.append(node)
            stack.extend(n for n, _ in node.next_functions)
        else:
            return
        names = sorted({_node_name(n) for n in path if not (_node_name(n) in _PASS_NODES)})
        raise UnsupportedModelError(
            f"a tensor in {self.module_label()} depends on the input through {', '.join(names) or 'an operation'}, "
            f"which ran outside lrp_lib's interception (a custom torch.autograd.Function or an extension op): "
            f"relevance cannot be propagated through it. Write it with torch operations, or explain with "
            f"another method")

    def _any_detached(self, args, kwargs) -> bool:
        """Whether an argument was detached from the input in this block (or computed from one that was)."""
        items = [*args, *kwargs.values()]
        items += [b for a in items if isinstance(a, (list, tuple)) for b in a]
        return any(getattr(a, "_lrp_detached", None) is self._token for a in items if isinstance(a, Tensor))

    def _any_marked(self, args, kwargs) -> bool:
        token = self._token
        for a in args:
            if isinstance(a, Tensor):
                if getattr(a, "_lrp_mark", None) is token:
                    return True
                if a.grad_fn is not None and a.requires_grad:
                    self._escaped(a)
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, Tensor) and getattr(b, "_lrp_mark", None) is token:
                        return True
        for a in kwargs.values():
            if isinstance(a, Tensor) and getattr(a, "_lrp_mark", None) is token:
                return True
        return False

    # -------------------------------------------------------------- labels and rules
    def module_label(self) -> str:
        """The qualified name and type of the innermost module of the model on the call stack."""
        frame = sys._getframe(2)
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, nn.Module) and id(owner) in self._module_names:
                name = self._module_names[id(owner)] or "the model"
                return f"module '{name}' ({type(owner).__name__})" if name != "the model" else \
                    f"the model's own forward ({type(owner).__name__})"
            frame = frame.f_back
        return "the model"

    def _owner(self, w: Tensor):
        owner = self._owners.get(id(w))
        if owner is None and getattr(w, "_base", None) is not None:
            owner = self._owners.get(id(w._base))
        return owner

    def rule_for(self, w: Tensor):
        """(rule, label) for a weight: the composite's rule of its owning module; a constant that
        no module owns (data) gets the epsilon rule of the maps without weights."""
        owner = self._owner(w)
        if owner is None:
            return None, None
        key = id(owner[1])
        if key not in self._rules:
            self._rules[key] = self.composite.rule_for(*owner)
        return self._rules[key], f"module '{owner[0]}' ({type(owner[1]).__name__})"

    # -------------------------------------------------------------- dispatch
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", None) or repr(func)
        if name in _PLAIN or not torch.is_grad_enabled() or not self._any_marked(args, kwargs):
            out = func(*args, **kwargs)
            if self.detached and isinstance(out, Tensor) and self._any_detached(args, kwargs):
                out._lrp_detached = self._token  # computed from a detached input-dependent tensor
            return out
        if name in _DETACH:
            self.detached.add(f"{name} in {self.module_label()}")
            out = func(*args, **kwargs)
            out._lrp_detached = self._token
            return out
        if name == "__get__":
            return self._get(func, args, kwargs)
        if name in _DROPOUT:
            return self._dropout(func, name, args, kwargs)
        if name in _PASS:
            out = func(*args, **kwargs)
            if name in ("unsqueeze_", "squeeze_", "t_", "transpose_", "movedim_"):
                return out
            if any(self._is_gate(a) for a in args):  # a view or copy of attention weights stays one
                self._gate_all(out)
            return self.mark(out)
        if name in _COPY_INPLACE and not kwargs.get("reduce") and not kwargs.get("accumulate"):
            self._keep_saved_output(args[0])
            out = func(*args, **kwargs)
            self.mark(args[0])
            return out
        inplace = (name.endswith("_") and not name.startswith("__")) or name in _AUGMENTED
        if inplace:
            return self._inplace(func, name, args, kwargs)
        handler = _HANDLERS.get(name)
        if handler is None:
            if name in _IDENTITY:
                out = self.mark(self._identity(func, args, kwargs))
                if name in _GATES or (name in _SIGN_FLIPS and any(self._is_gate(a) for a in args)):
                    self._gate(out)  # a sigmoid is a gate; so is its negation
            else:
                out = self._blocked(func, name, args, kwargs)
        else:
            out = self.mark(handler(self, func, args, kwargs))
        if name in _HEADS and isinstance(out, Tensor):
            self._heads[id(out)] = (name, args[0], out)
        return out

    def head_of(self, out: Tensor) -> tuple[str, Tensor] | None:
        """``(name, logits)`` if ``out`` is the output of a softmax, log_softmax or sigmoid computed in
        this mode (a probability head), with ``logits`` its input; else ``None``."""
        entry = self._heads.get(id(out))
        if entry is None or entry[2] is not out:
            return None
        return entry[0], entry[1]

    def _get(self, func, args, kwargs):
        attr = getattr(getattr(func, "__self__", None), "__name__", "")
        out = func(*args, **kwargs)
        if attr in ("data", "grad"):
            if attr == "data":
                self.detached.add(f".data in {self.module_label()}")
            return out
        return self.mark(out) if isinstance(out, Tensor) else out

    def _dropout(self, func, name, args, kwargs):
        training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        if training and p:
            raise UnsupportedModelError(f"{name} in training mode in {self.module_label()}: relevance of a random "
                                        f"mask is not defined; call model.eval() (PyG's Explainer does)")
        return self.mark(func(*args, **kwargs))

    def _inplace(self, func, name, args, kwargs):
        """An in-place operation: computed out of place on a copy, then copied into ``self`` (so
        autograd records the copy and nothing that a relevance op saved is overwritten)."""
        base = _AUGMENTED.get(name, name[:-1])
        target = args[0]
        if not isinstance(target, Tensor) or not (base in _HANDLERS or base in _IDENTITY):
            raise UnsupportedModelError(f"the in-place operation {name} in {self.module_label()} on a tensor that "
                                        f"depends on the input: LRP has no rule for it")
        source = target.clone()
        if self.is_marked(target):
            self.mark(source)
        outofplace = getattr(torch.Tensor, base, None) or getattr(torch, base, None) or getattr(F, base, None)
        if outofplace is None:
            raise UnsupportedModelError(f"the in-place operation {name} in {self.module_label()}: no out-of-place "
                                        f"version of it was found to compute its relevance")
        new_args = (source, *args[1:])
        if base in _HANDLERS:
            result = _HANDLERS[base](self, outofplace, new_args, kwargs)
        else:
            result = self._identity(outofplace, new_args, kwargs)
        self._keep_saved_output(target)
        target.copy_(result)
        return self.mark(target)

    @staticmethod
    def _keep_saved_output(target) -> None:
        """``target`` is about to change in place: if a relevance primitive kept it as its output
        (``ctx.out``), give that primitive a copy of the value it computed."""
        node = getattr(target, "grad_fn", None)
        if node is not None and isinstance(getattr(node, "out", None), Tensor):
            node.out = node.out.clone()

    # -------------------------------------------------------------- rule families
    def _identity(self, func, args, kwargs):
        kwargs = {k: (False if k == "inplace" else v) for k, v in kwargs.items()}
        pos = [i for i, a in enumerate(args) if self.is_marked(a)]
        keys = [k for k, v in kwargs.items() if self.is_marked(v)]
        if len(pos) + len(keys) != 1:
            return self._blocked(func, getattr(func, "__name__", "?"), args, kwargs)
        if pos:
            i = pos[0]
            x = args[i]

            def fn(t):
                return func(*args[:i], t, *args[i + 1:], **kwargs)
        else:
            k = keys[0]
            x = kwargs[k]

            def fn(t):
                return func(*args, **{**kwargs, k: t})
        return IdentityRelevance.apply(x, fn)

    def linear(self, x: Tensor, fn: Callable, vjp: Callable | None, label: str):
        """A map linear in ``x`` (plus constants) with no weight: the epsilon rule."""
        return LinearRelevance.apply(x, fn, vjp, self.composite.epsilon, label, self.tally, self.composite.bias)

    def weighted(self, x: Tensor, weight: Tensor, bias: Tensor | None, fn: Callable, vjp: Callable | None,
                 op: str):
        """A map linear in ``x`` and in a constant ``weight``: the composite's rule for that weight."""
        rule, label = self.rule_for(weight)
        w = weight.detach()
        b = None if bias is None else bias.detach()
        if rule is None:  # a data constant, not a parameter
            return self.linear(x, lambda t: fn(t, w, b), None if vjp is None else (lambda v: vjp(v, x, w)),
                               f"{op} in {self.module_label()}")
        return WeightRelevance.apply(x, w, b, LinearMap(fn, vjp), rule, f"{op} in {label}", self.tally,
                                     self.composite.bias)

    def sum_terms(self, a, b, ca: float = 1.0, cb: float = 1.0, op: str = "add"):
        """``ca * a + cb * b`` (numbers allowed): each marked term gets its proportional share."""
        ma, mb = self.is_marked(a), self.is_marked(b)
        ref = a if isinstance(a, Tensor) else b
        ta = a if isinstance(a, Tensor) else torch.as_tensor(a, dtype=ref.dtype, device=ref.device)
        tb = b if isinstance(b, Tensor) else torch.as_tensor(b, dtype=ref.dtype, device=ref.device)
        if not ma:
            ta = ta.detach()
        if not mb:
            tb = tb.detach()
        if ca != 1.0:
            ta = IdentityRelevance.apply(ta, lambda t: t * ca) if ma else ta * ca
        if cb != 1.0:
            tb = IdentityRelevance.apply(tb, lambda t: t * cb) if mb else tb * cb
        gate = (ma and not mb and self._is_gate(a)) or (mb and not ma and self._is_gate(b))
        if gate:  # 1 - z of a gate z is a gate too (GRU's update gate): it passes relevance like one
            marked, const = (ta, tb) if ma else (tb, ta)
            return self._gate(IdentityRelevance.apply(marked, lambda t: t + const))
        if not (ma and mb) and not self.composite.bias:  # the constant term takes no share
            marked, const = (ta, tb) if ma else (tb, ta)
            return IdentityRelevance.apply(marked, lambda t: t + const)
        label = op if (ma and mb) else f"{op} of a constant in {self.module_label()}"
        return SumRelevance.apply(ta, tb, (ma, mb), self.composite.epsilon, label, self.tally)

    def product(self, a: Tensor, b: Tensor):
        ga, gb = self._is_gate(a), self._is_gate(b)
        if self.composite.attention == "cp" and ga != gb:
            weights = (0.0, 1.0) if ga else (1.0, 0.0)
        else:
            weights = (0.5, 0.5)
        return ProductRelevance.apply(a, b, weights)

    def _blocked(self, func, name, args, kwargs):
        with torch.no_grad():
            out = func(*args, **kwargs)
        flat = out if isinstance(out, (tuple, list)) else (out,)
        floats = [i for i, t in enumerate(flat) if isinstance(t, Tensor) and t.is_floating_point()]
        if not floats:
            return out
        marked = [a for a in args if self.is_marked(a)] + [b for a in args if isinstance(a, (list, tuple))
                                                          for b in a if self.is_marked(b)]
        marked += [v for v in kwargs.values() if self.is_marked(v)]
        label = f"{name} in {self.module_label()}"
        res = BlockedRelevance.apply(label, self.tally, len(floats), *[flat[i] for i in floats], *marked)
        res = res if isinstance(res, tuple) else (res,)
        self.mark(res)
        if not isinstance(out, (tuple, list)):
            return res[0]
        items = list(flat)
        for i, r in zip(floats, res):
            items[i] = r
        return type(out)(items) if not hasattr(out, "_fields") else type(out)(*items)


#: In-place copies (no arithmetic): autograd's gradient already routes relevance to the copied values.
_COPY_INPLACE = frozenset({"__setitem__", "copy_", "fill_", "zero_", "index_copy_", "masked_fill_", "masked_scatter_",
                           "scatter_", "index_put_", "index_fill_", "put_", "masked_fill", "index_copy"})

#: Elementwise functions whose output is a gate (a weight in [0, 1] that multiplies a signal): in a
#: product with a signal, the gate is held constant and the signal takes all the relevance (the
#: "signal-take-all" rule of Arras et al. 2017 for LSTM/GRU gates, CP-LRP for attention).
_GATES = frozenset({"sigmoid", "hardsigmoid"})
_SIGN_FLIPS = frozenset({"neg", "__neg__", "negative"})
#: Functions that turn logits into probabilities: a model ending in one is explained from its input.
_HEADS = frozenset({"softmax", "log_softmax", "sigmoid"})

_AUGMENTED = {"__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__itruediv__": "div"}


# ------------------------------------------------------------------ handlers
def _arg(args, kwargs, i, name, default=None):
    if name in kwargs:
        return kwargs[name]
    return args[i] if len(args) > i else default


def _linear(mode: RelevanceMode, func, args, kwargs):
    x, weight, bias = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    if mode.is_marked(weight) or mode.is_marked(bias):
        return mode._blocked(func, "linear with an input-dependent weight", args, kwargs)
    return mode.weighted(x, weight, bias, F.linear, lambda v, x_, w: v @ w, "linear")


def _matmul(mode: RelevanceMode, func, args, kwargs):
    a, b = args[0], args[1]
    if func is torch.Tensor.__rmatmul__:
        a, b = b, a
    ma, mb = mode.is_marked(a), mode.is_marked(b)
    if ma and mb:
        ga, gb = mode._is_gate(a), mode._is_gate(b)
        if mode.composite.attention == "cp" and ga != gb:
            weights = (0.0, 1.0) if ga else (1.0, 0.0)
        else:
            weights = (0.5, 0.5)
        if a.is_sparse or b.is_sparse:
            return mode._blocked(func, "sparse matmul of two input-dependent tensors", args, kwargs)
        return BilinearRelevance.apply(a, b, weights, mode.composite.epsilon, f"matmul in {mode.module_label()}",
                                       mode.tally)
    plain = torch.matmul if func in (torch.Tensor.__matmul__, torch.Tensor.__rmatmul__) else func
    if ma:
        return mode.weighted(a, b, None, lambda x, w, bias: plain(x, w) if bias is None else plain(x, w) + bias,
                             None, "matmul")
    return mode.weighted(b, a, None, lambda x, w, bias: plain(w, x) if bias is None else plain(w, x) + bias,
                         None, "matmul")


def _addmm(mode: RelevanceMode, func, args, kwargs):
    """``beta * input + alpha * (mat1 @ mat2)``: the product by the weight's rule, then the sum in
    proportion to its two terms (a constant ``input`` is a bias and keeps its share)."""
    inp, a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "mat1"), _arg(args, kwargs, 2, "mat2")
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    ma, mb = mode.is_marked(a), mode.is_marked(b)
    if ma and mb:
        return mode._blocked(func, "addmm of two input-dependent matrices", args, kwargs)
    if not (ma or mb):
        return mode.sum_terms(inp, (torch.mm(a, b) * alpha).detach(), beta, 1.0, op="addmm")
    if ma:
        part = mode.weighted(a, b, None, lambda x, w, c: x @ w if c is None else x @ w + c, None, "addmm")
    else:
        part = mode.weighted(b, a, None, lambda x, w, c: w @ x if c is None else w @ x + c, None, "addmm")
    part = mode.mark(part)
    if alpha != 1:
        part = mode.mark(IdentityRelevance.apply(part, lambda t: t * alpha))
    return mode.sum_terms(part, inp, 1.0, beta, op="addmm")


def _conv(mode: RelevanceMode, func, args, kwargs):
    x, weight = args[0], _arg(args, kwargs, 1, "weight")
    bias = _arg(args, kwargs, 2, "bias")
    rest = args[3:]
    extra = {k: v for k, v in kwargs.items() if k not in ("weight", "bias")}
    if mode.is_marked(weight) or mode.is_marked(bias):
        return mode._blocked(func, func.__name__, args, kwargs)
    return mode.weighted(x, weight, bias, lambda t, w, b: func(t, w, b, *rest, **extra), None, func.__name__)


def _einsum(mode: RelevanceMode, func, args, kwargs):
    eq, ops = args[0], list(args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:])
    marked = [i for i, o in enumerate(ops) if mode.is_marked(o)]
    if len(ops) != 2 or len(marked) != 1:
        return mode._blocked(func, "einsum of several input-dependent operands", args, kwargs)
    i = marked[0]
    other = ops[1 - i]

    def fn(x, w, b):
        pair = (x, w) if i == 0 else (w, x)
        out = torch.einsum(eq, *pair)
        return out if b is None else out + b
    return mode.weighted(ops[i], other, None, fn, None, "einsum")


def _reduction(mode: RelevanceMode, func, args, kwargs):
    """sum, mean, nansum, cumsum (linear in their one input)."""
    x = args[0]
    return mode.linear(x, lambda t: func(t, *args[1:], **kwargs), None, func.__name__)


def _mean(mode: RelevanceMode, func, args, kwargs):
    """A mean is a sum (split in proportion, stabilised at the sum) divided by a count (identity),
    as PyG's mean aggregation computes it, so both give the same relevance."""
    x = args[0]
    if kwargs.get("dtype") is not None:
        return _reduction(mode, func, args, kwargs)
    rest = {k: v for k, v in kwargs.items()}
    total = mode.mark(mode.linear(x, lambda t: torch.sum(t, *args[1:], **rest), None, "mean"))
    count = x.numel() // max(total.numel(), 1) if x.numel() else 1
    return IdentityRelevance.apply(total, lambda t: t / count)


def _pool(mode: RelevanceMode, func, args, kwargs):
    x = args[0]
    return mode.linear(x, lambda t: func(t, *args[1:], **kwargs), None, func.__name__)


def _scatter_add(mode: RelevanceMode, func, args, kwargs):
    inp, dim, index, src = (_arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "dim"),
                            _arg(args, kwargs, 2, "index"), _arg(args, kwargs, 3, "src"))
    mi, ms = mode.is_marked(inp), mode.is_marked(src)
    if ms:
        zeros = inp.detach() if not mi else torch.zeros_like(inp.detach())
        vjp = (lambda v: v.gather(dim, index)) if index.shape == src.shape else None
        out = mode.linear(src, lambda s: zeros.scatter_add(dim, index, s), vjp,
                          "scatter_add" if mi else f"scatter_add into a constant in {mode.module_label()}")
        return mode.sum_terms(inp, mode.mark(out), op="scatter_add") if mi else out
    return mode.sum_terms(inp, torch.zeros_like(inp.detach()).scatter_add(dim, index, src.detach()), op="scatter_add")


def _index_add(mode: RelevanceMode, func, args, kwargs):
    inp, dim, index, src = (_arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "dim"),
                            _arg(args, kwargs, 2, "index"), _arg(args, kwargs, 3, "source"))
    alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
    mi, ms = mode.is_marked(inp), mode.is_marked(src)
    if ms:
        zeros = inp.detach() if not mi else torch.zeros_like(inp.detach())
        out = mode.linear(src, lambda s: zeros.index_add(dim, index, s, alpha=alpha),
                          lambda v: v.index_select(dim, index) * alpha,
                          "index_add" if mi else f"index_add into a constant in {mode.module_label()}")
        return mode.sum_terms(inp, mode.mark(out), op="index_add") if mi else out
    return mode.sum_terms(inp, torch.zeros_like(inp.detach()).index_add(dim, index, src.detach(), alpha=alpha),
                          op="index_add")


def _scatter_reduce(mode: RelevanceMode, func, args, kwargs):
    inp, dim, index, src = (_arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "dim"),
                            _arg(args, kwargs, 2, "index"), _arg(args, kwargs, 3, "src"))
    reduce = _arg(args, kwargs, 4, "reduce")
    include_self = _arg(args, kwargs, 5, "include_self", True)
    if reduce in ("amax", "amin"):
        return func(*args, **kwargs)
    if reduce in ("sum", "mean") and mode.is_marked(src) and not mode.is_marked(inp):
        const = inp.detach()
        return mode.linear(src, lambda s: const.scatter_reduce(dim, index, s, reduce, include_self=include_self),
                           None, f"scatter_reduce ({reduce}) in {mode.module_label()}")
    if reduce == "prod" and mode.is_marked(src) and not mode.is_marked(inp) and index.shape == src.shape:
        # each group's product: its factors share its relevance uniformly; the constant start value takes none
        const = inp.detach()
        counts = torch.zeros(const.shape, dtype=torch.long, device=const.device).scatter_add(
            dim, index, torch.ones_like(index))
        return UniformProductRelevance.apply(
            src, lambda s: const.scatter_reduce(dim, index, s, "prod", include_self=include_self), counts,
            lambda t: t.gather(dim, index), f"scatter_reduce (prod) of empty groups in {mode.module_label()}",
            mode.tally)
    return mode._blocked(func, f"scatter_reduce ({reduce})", args, kwargs)


def _add(mode: RelevanceMode, func, args, kwargs):
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
    alpha = kwargs.get("alpha", 1)
    name = func.__name__
    if name == "__radd__":
        a, b = b, a
    if name in ("sub", "subtract", "__sub__"):
        return mode.sum_terms(a, b, 1.0, -alpha, op="sub")
    if name == "__rsub__":
        return mode.sum_terms(b, a, 1.0, -1.0, op="sub")
    if name == "rsub":
        return mode.sum_terms(b, a, 1.0, -alpha, op="sub")
    return mode.sum_terms(a, b, 1.0, alpha, op="add")


def _mul(mode: RelevanceMode, func, args, kwargs):
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
    if mode.is_marked(a) and mode.is_marked(b):
        return mode.product(a, b)
    return mode._identity(func, args, kwargs)


def _div(mode: RelevanceMode, func, args, kwargs):
    if kwargs.get("rounding_mode") is not None:
        return mode._blocked(func, "div with rounding_mode", args, kwargs)
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
    if func.__name__ == "__rtruediv__":
        a, b = b, a
    if mode.is_marked(a) and mode.is_marked(b):
        return mode._gate(NormaliseRelevance.apply(a, b))
    return mode._identity(func, args, kwargs)


def _prod(mode: RelevanceMode, func, args, kwargs):
    """``torch.prod(x, dim, keepdim=False)``: the uniform rule over the factors along ``dim``
    (:class:`~lrp_lib.explain.primitives.UniformProductRelevance`); ``torch.prod(x)`` over all elements."""
    x = args[0]
    dim = _arg(args, kwargs, 1, "dim")
    keepdim = _arg(args, kwargs, 2, "keepdim", False)
    if kwargs.get("dtype") is not None:
        return mode._blocked(func, "prod with dtype", args, kwargs)
    if dim is None:
        counts = torch.full((), x.numel(), dtype=torch.long, device=x.device)
        return UniformProductRelevance.apply(x, torch.prod, counts, lambda t: t.expand(x.shape), "prod", mode.tally)
    d = dim % x.dim()
    shape = list(x.shape)
    shape[d] = 1
    counts = torch.full(shape if keepdim else shape[:d] + shape[d + 1:], x.shape[d], dtype=torch.long,
                        device=x.device)
    return UniformProductRelevance.apply(x, lambda t: torch.prod(t, d, keepdim), counts,
                                         lambda t: (t if keepdim else t.unsqueeze(d)).expand(x.shape),
                                         f"prod in {mode.module_label()}", mode.tally)


def _max_min(mode: RelevanceMode, func, args, kwargs):
    """``max``/``min``: the winner takes all; ties split evenly (as ``amax`` and PyG's max
    aggregation do), so a graph alone and in a batch get the same relevance."""
    x = args[0]
    dim = _arg(args, kwargs, 1, "dim")
    if dim is None or isinstance(dim, Tensor):  # a full reduction, or the elementwise max of two tensors
        if dim is None and len(args) == 1 and not kwargs:
            return (torch.amax if func.__name__ == "max" else torch.amin)(x)
        return func(*args, **kwargs)
    keepdim = _arg(args, kwargs, 2, "keepdim", False)
    with torch.no_grad():
        indices = func(x, dim, keepdim).indices
    values = (torch.amax if func.__name__ == "max" else torch.amin)(x, dim, keepdim)
    return (torch.return_types.max if func.__name__ == "max" else torch.return_types.min)((values, indices))


def _rnn_cell(mode: RelevanceMode, func, args, kwargs):
    """``torch.gru_cell`` / ``torch.rnn_tanh_cell`` / ``torch.rnn_relu_cell`` (``nn.GRUCell``, ``nn.RNNCell``):
    written out in the torch operations they are made of and run inside the mode, so each part gets
    its rule (the weights theirs, the gates the product rules, tanh the identity)."""
    if kwargs or len(args) < 4:
        return mode._blocked(func, func.__name__, args, kwargs)
    x, h, w_ih, w_hh = args[:4]
    b_ih = args[4] if len(args) > 4 else None
    b_hh = args[5] if len(args) > 5 else None
    with mode:
        if func.__name__ == "gru_cell":
            return _gru_step(x, h, w_ih, w_hh, b_ih, b_hh)
        act = torch.tanh if func.__name__ == "rnn_tanh_cell" else torch.relu
        return act(F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh))


def _lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    """One LSTM step in torch operations (run inside the mode): the gates ``i, f, o`` are sigmoids
    (held constant in their products: signal-take-all, Arras et al. 2017), the cell input ``g`` a tanh
    (identity rule), :math:`c' = f c + i g` split in proportion, :math:`h' = o \tanh(c')`, and
    ``h' @ w_hr.T`` with ``proj_size``."""
    gates = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    i, f, o, g = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)
    c = f * c + i * g
    h = o * torch.tanh(c)
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(x, h, w_ih, w_hh, b_ih, b_hh):
    """One GRU step as ``torch.gru_cell`` computes it: reset and update gates are sigmoids (gates),
    :math:`n = \tanh(W_{in} x + b_{in} + r (W_{hn} h + b_{hn}))`, :math:`h' = (1 - z) n + z h`."""
    gi, gh = F.linear(x, w_ih, b_ih), F.linear(h, w_hh, b_hh)
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def _rnn(mode: RelevanceMode, func, args, kwargs):
    """``torch.lstm`` / ``torch.gru`` / ``torch.rnn_tanh`` / ``torch.rnn_relu`` (``nn.LSTM``, ``nn.GRU``,
    ``nn.RNN``, so PyG's ``LSTMAggregation``, ``SAGEConv(aggr="lstm")``, ``Set2Set``, ``GRUAggregation``):
    the recurrence written out step by step (layers, both directions, ``batch_first``, ``proj_size``)
    in the torch operations of :func:`_lstm_step` / :func:`_gru_step`, run inside the mode so that the
    weights get the composite's rule, the gates are held constant (signal-take-all, Arras et al.,
    "Explaining Recurrent Neural Network Predictions in Sentiment Analysis", WASSA 2017) and the sums
    split in proportion.  Packed sequences and dropout between layers in training mode are refused."""
    name = func.__name__
    if kwargs or len(args) != 9 or not isinstance(args[1], (tuple, list, Tensor)) or (
            isinstance(args[1], Tensor) and args[1].dtype == torch.long):
        return mode._blocked(func, f"{name} on a packed sequence (pass a padded tensor)", args, kwargs)
    x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args
    if train and dropout and num_layers > 1:
        raise UnsupportedModelError(f"{name} with dropout={dropout} between layers in training mode in "
                                    f"{mode.module_label()}: relevance of a random mask is not defined; call "
                                    f"model.eval() (PyG's Explainer does)")
    lstm = name == "lstm"
    dirs = 2 if bidirectional else 1
    per = len(params) // (num_layers * dirs)
    if per * num_layers * dirs != len(params):
        return mode._blocked(func, f"{name} with {len(params)} weights for {num_layers} layers", args, kwargs)
    h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    with mode:
        seq = x.transpose(0, 1) if batch_first else x  # (time, batch, features)
        h_n, c_n = [], []
        for layer in range(num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                w = list(params[k * per:(k + 1) * per])
                w_ih, w_hh = w[0], w[1]
                b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
                w_hr = w[-1] if (lstm and per == (5 if has_biases else 3)) else None
                h, c = h0[k], (c0[k] if lstm else None)
                steps = seq.unbind(0)
                order = range(len(steps) - 1, -1, -1) if d == 1 else range(len(steps))
                out = [None] * len(steps)
                for t in order:
                    if lstm:
                        h, c = _lstm_step(steps[t], h, c, w_ih, w_hh, b_ih, b_hh, w_hr)
                    elif name == "gru":
                        h = _gru_step(steps[t], h, w_ih, w_hh, b_ih, b_hh)
                    else:
                        act = torch.tanh if name == "rnn_tanh" else torch.relu
                        h = act(F.linear(steps[t], w_ih, b_ih) + F.linear(h, w_hh, b_hh))
                    out[t] = h
                outs.append(torch.stack(out, 0))
                h_n.append(h)
                c_n.append(c)
            seq = outs[0] if dirs == 1 else torch.cat(outs, -1)
        output = seq.transpose(0, 1) if batch_first else seq
        if lstm:
            return output, torch.stack(h_n, 0), torch.stack(c_n, 0)
        return output, torch.stack(h_n, 0)


def _lstm_cell(mode: RelevanceMode, func, args, kwargs):
    """``torch.lstm_cell`` (``nn.LSTMCell``): :func:`_lstm_step` inside the mode; returns ``(h', c')``."""
    if kwargs or len(args) < 4:
        return mode._blocked(func, func.__name__, args, kwargs)
    x, (h, c), w_ih, w_hh = args[0], args[1], args[2], args[3]
    b_ih = args[4] if len(args) > 4 else None
    b_hh = args[5] if len(args) > 5 else None
    with mode:
        return _lstm_step(x, h, c, w_ih, w_hh, b_ih, b_hh)


def _float_mask(mask: Tensor | None, dtype) -> Tensor | None:
    """A boolean attention mask (True: not attended) as torch's additive float mask (-inf there)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"attention masks must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


def _multi_head_attention(mode: RelevanceMode, func, args, kwargs):
    r"""``F.multi_head_attention_forward`` (``nn.MultiheadAttention``, so ``nn.TransformerEncoderLayer``
    and PyG's ``GPSConv``): written out in torch operations and run inside the mode --

    .. math::
        q = x_q W_q^	op + b_q,\quad k = x_k W_k^	op + b_k,\quad v = x_v W_v^	op + b_v
        	ext{ (per head)},\qquad
        A = \mathrm{softmax}ig(q k^	op / \sqrt{d} + Mig),\qquad
        y = ig[A vig]_{	ext{heads}} W_o^	op + b_o

    so the projections get the composite's rule for their weights, :math:`q k^	op` (two
    input-dependent factors) the uniform rule on each product term, the softmax AttnLRP's rule and
    :math:`A v` the attention rule: with ``attention="cp"`` (default) :math:`A` is held constant and
    all relevance goes to the values (CP-LRP, Ali et al., ICML 2022); with ``attention="uniform"``
    half goes through :math:`A` to the scores (AttnLRP, Achtibat et al., ICML 2024).  The mask
    :math:`M` (``attn_mask``, ``key_padding_mask``, bool or float; ``is_causal`` with its mask) is a
    constant: its finite entries keep their share of the scores' relevance, its ``-inf`` entries are
    filled in (no relevance).  ``need_weights`` (averaged over heads or not) is returned as torch
    returns it.  Refused: ``bias_k``/``bias_v``, ``add_zero_attn``, ``static_k``/``static_v``
    (blocked, with their name) and dropout in training mode."""
    names = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias",
             "bias_k", "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
             "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
             "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal")
    defaults = dict(training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                    use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
                    static_k=None, static_v=None, average_attn_weights=True, is_causal=False)
    p = {n: _arg(args, kwargs, i, n, defaults.get(n)) for i, n in enumerate(names)}
    unsupported = [n for n in ("bias_k", "bias_v", "static_k", "static_v") if p[n] is not None]
    if p["add_zero_attn"]:
        unsupported.append("add_zero_attn")
    if unsupported:
        return mode._blocked(func, f"multi_head_attention_forward with {', '.join(unsupported)}", args, kwargs)
    weights = [p[n] for n in ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias",
                              "q_proj_weight", "k_proj_weight", "v_proj_weight")]
    if any(mode.is_marked(w) for w in weights):
        return mode._blocked(func, "multi_head_attention_forward with input-dependent weights", args, kwargs)
    if p["training"] and p["dropout_p"]:
        raise UnsupportedModelError(f"attention dropout (p={p['dropout_p']}) in training mode in "
                                    f"{mode.module_label()}: relevance of a random mask is not defined; call "
                                    f"model.eval() (PyG's Explainer does)")
    query, key, value, heads = p["query"], p["key"], p["value"], p["num_heads"]
    batched = query.dim() == 3
    kpm, attn_mask = p["key_padding_mask"], p["attn_mask"]
    if p["is_causal"] and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
    with mode:
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            kpm = None if kpm is None else kpm.unsqueeze(0)
        tgt, bsz, embed = query.shape
        src = key.shape[0]
        if embed != p["embed_dim_to_check"] or embed % heads:
            raise ValueError(f"multi_head_attention_forward: embedding dimension {embed} does not match "
                             f"embed_dim_to_check={p['embed_dim_to_check']} or is not divisible by num_heads={heads}")
        hd = embed // heads
        b = p["in_proj_bias"]
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        if p["use_separate_proj_weight"]:
            wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
        else:
            wq, wk, wv = p["in_proj_weight"].chunk(3)
        q = F.linear(query, wq, bq).reshape(tgt, bsz * heads, hd).transpose(0, 1)
        k = F.linear(key, wk, bk).reshape(src, bsz * heads, hd).transpose(0, 1)
        v = F.linear(value, wv, bv).reshape(src, bsz * heads, hd).transpose(0, 1)
        mask = _float_mask(attn_mask, q.dtype)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(0)
        kpm = _float_mask(kpm, q.dtype)
        if kpm is not None:
            kpm = kpm.view(bsz, 1, 1, src).expand(-1, heads, -1, -1).reshape(bsz * heads, 1, src)
            mask = kpm if mask is None else mask + kpm
        scores = torch.bmm(q * (1.0 / hd) ** 0.5, k.transpose(-2, -1))
        if mask is not None:
            blocked = torch.isneginf(mask)
            finite = mask.masked_fill(blocked, 0.0)
            if bool((finite != 0).any()):
                scores = scores + finite
            if bool(blocked.any()):
                scores = scores.masked_fill(blocked, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.bmm(attn, v)
        out = out.transpose(0, 1).reshape(tgt * bsz, embed)
        out = F.linear(out, p["out_proj_weight"], p["out_proj_bias"]).view(tgt, bsz, -1)
        weights = None
        if p["need_weights"]:
            weights = attn.view(bsz, heads, tgt, src)
            if p["average_attn_weights"]:
                weights = weights.mean(dim=1)
            if not batched:
                weights = weights.squeeze(0)
        if not batched:
            out = out.squeeze(1)
    return out, weights


def _cat(mode: RelevanceMode, func, args, kwargs):
    """``torch.cat`` / ``torch.stack``: a copy, so relevance passes like the gradient; a joined constant
    (not input-dependent: an LSTM state computed from biases alone, a fixed embedding) keeps its slice
    as a bias does (:class:`~lrp_lib.explain.primitives.JoinRelevance`).  A joined tensor that the model
    detached from the input (or computed from one) is no constant: then the relevance of every joined
    constant is left unaccounted, for the explainer's warning about what did not reach the input."""
    tensors = _arg(args, kwargs, 0, "tensors")
    dim = _arg(args, kwargs, 1, "dim", kwargs.get("axis", 0))
    name = func.__name__
    if (kwargs.get("out") is not None or not isinstance(tensors, (list, tuple)) or not tensors
            or not all(isinstance(t, Tensor) and t.is_floating_point() for t in tensors)
            or len({(t.dtype, t.device) for t in tensors}) > 1 or not isinstance(dim, int)
            or all(mode.is_marked(t) for t in tensors) or mode._any_detached(tensors, {})):
        return func(*args, **kwargs)
    marked = tuple(mode.is_marked(t) for t in tensors)
    if name == "stack":
        dim = dim if dim >= 0 else dim + tensors[0].dim() + 1
        tensors = [t.unsqueeze(dim) for t in tensors]
    ref = tensors[0]
    joined = [t if m else t.detach() for t, m in zip(tensors, marked)]
    dim = dim if dim >= 0 else dim + ref.dim()
    return JoinRelevance.apply(dim, marked, f"constant joined by {name} in {mode.module_label()}", mode.tally,
                               *joined)


def _softmax(mode: RelevanceMode, func, args, kwargs):
    x = args[0]
    dim = _arg(args, kwargs, 1, "dim")
    if dim is None:
        return mode._blocked(func, "softmax without dim", args, kwargs)
    if kwargs.get("dtype") is not None:
        x = mode.mark(IdentityRelevance.apply(x, lambda t: t.to(kwargs["dtype"])))
    # AttnLRP's softmax rule does not conserve: what it does not pass on is left to the explanation's
    # relevance_residual (and its warning), not counted as a bias
    return mode._gate(SoftmaxRelevance.apply(x, dim, f"softmax in {mode.module_label()}", None))


def _channel_view(t: Tensor | None, x: Tensor) -> Tensor | None:
    if t is None:
        return None
    return t.detach().view(1, -1, *([1] * (x.dim() - 2))) if x.dim() > 1 else t.detach()


def _batch_norm(mode: RelevanceMode, func, args, kwargs):
    if func is not F.batch_norm:
        return mode._blocked(func, "torch.batch_norm (call F.batch_norm)", args, kwargs)
    x = args[0]
    names = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    p = {n: _arg(args, kwargs, i, n) for i, n in enumerate(names)}
    p["eps"] = 1e-5 if p["eps"] is None else p["eps"]
    label = f"batch_norm in {mode.module_label()}"
    if p["training"] or p["running_mean"] is None:
        return NormAffineRelevance.apply(x, lambda t: func(t, *args[1:], **kwargs),
                                         _channel_view(p["bias"], x) if mode.composite.bias else None,
                                         mode.composite.epsilon, label, mode.tally)
    scale = (p["running_var"].detach() + p["eps"]).rsqrt()
    if p["weight"] is not None:
        scale = scale * p["weight"].detach()
    scale = _channel_view(scale, x)
    return mode.linear(x, lambda t: func(t, *args[1:], **kwargs), lambda v: v * scale, label)


def _norm_affine(bias_index: int, channel: bool):
    def handler(mode: RelevanceMode, func, args, kwargs):
        x = args[0]
        bias = _arg(args, kwargs, bias_index, "bias")
        beta = _channel_view(bias, x) if channel else (None if bias is None else bias.detach())
        if not mode.composite.bias:
            beta = None
        return NormAffineRelevance.apply(x, lambda t: func(t, *args[1:], **kwargs), beta, mode.composite.epsilon,
                                         f"{func.__name__} in {mode.module_label()}", mode.tally)
    return handler


_HANDLERS: dict[str, Callable] = {
    "linear": _linear,
    "matmul": _matmul, "mm": _matmul, "bmm": _matmul, "mv": _matmul, "__matmul__": _matmul, "__rmatmul__": _matmul,
    "addmm": _addmm,
    "conv1d": _conv, "conv2d": _conv, "conv3d": _conv,
    "einsum": _einsum,
    "sum": _reduction, "mean": _mean, "nansum": _reduction, "cumsum": _reduction,
    "avg_pool1d": _pool, "avg_pool2d": _pool, "avg_pool3d": _pool, "adaptive_avg_pool1d": _pool,
    "adaptive_avg_pool2d": _pool, "adaptive_avg_pool3d": _pool,
    "scatter_add": _scatter_add, "index_add": _index_add, "scatter_reduce": _scatter_reduce,
    "add": _add, "__add__": _add, "__radd__": _add, "sub": _add, "subtract": _add, "__sub__": _add,
    "__rsub__": _add, "rsub": _add,
    "mul": _mul, "multiply": _mul, "__mul__": _mul, "__rmul__": _mul,
    "div": _div, "divide": _div, "true_divide": _div, "__truediv__": _div, "__rtruediv__": _div,
    "softmax": _softmax, "max": _max_min, "min": _max_min,
    "gru_cell": _rnn_cell, "rnn_tanh_cell": _rnn_cell, "rnn_relu_cell": _rnn_cell, "lstm_cell": _lstm_cell,
    "lstm": _rnn, "gru": _rnn, "rnn_tanh": _rnn, "rnn_relu": _rnn,
    "multi_head_attention_forward": _multi_head_attention,
    "cat": _cat, "concat": _cat, "concatenate": _cat, "stack": _cat, "prod": _prod,
    "batch_norm": _batch_norm,
    "layer_norm": _norm_affine(3, False), "group_norm": _norm_affine(3, True),
    "instance_norm": _norm_affine(4, True), "rms_norm": _norm_affine(99, False),
}
