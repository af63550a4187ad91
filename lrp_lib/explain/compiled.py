r"""Compiled explanations: a replayed explanation's ATen operations, run again without Python rules.

A replayed explanation (:mod:`lrp_lib.explain.replay`) still runs the relevance rules' Python: each
step of the plan goes through the mode's handlers and an autograd function, and the backward calls
each rule's Python ``backward``, which picks its operations (the sign checks of z+, the zero checks of
a share, the accounts).  On a small graph that Python is most of the cost.  Yet for a given plan the
operations that reach PyTorch's dispatcher -- the ATen operations, forward and backward -- are the
same on every call, as long as the values that the Python read from tensor data are the same.

:class:`Recorder` is a ``TorchDispatchMode`` that writes down, during one replayed explanation, every
ATen operation of its forward (segment one) and of its backward (segment two): the operator, its
arguments with each tensor replaced by a slot (an input, an earlier operation's result) or kept as a
constant (a parameter or buffer of the model, a tensor the plan holds), and each value the Python read
from the data (``.item()``, ``bool(t)``, ``torch.equal``: ATen operations; ``.tolist()``, which is not
one, through :func:`lrp_lib.core.stabilizer.read`, the rules' one way to read it).  :func:`run` executes that
:class:`Program` on new inputs: one call of each operator, under ``torch.no_grad()``, with no Python
between them.  Between the two segments the explainer's own Python computes the relevance the
backward starts from (the target class, the explained rows), so a new target needs no new program.
The relevance is the one the replay gives, to the bit: the same kernels on the same values, in the
same order.

Guards (:class:`~lrp_lib.explain.record.Stale`: the explainer then replays the plan, and records the
program again on a later call).  Every value read from the data is read again and compared: a rule
whose choice depends on the data (the signs of a layer's input for z+, a zero in a denominator)
compiles to the choice it made, and a call where it would choose otherwise falls back.  The rules
read signs, booleans and counts, not amounts, so that the same choice reads the same value; a program
whose recording read an amount (a warning about lost relevance reads the amount lost) is not kept.
The operations whose result's shape depends on the data (``nonzero``, boolean indexing, ``unique``)
have their shapes compared.  The parameters, buffers and constants must be the same tensors at the
same version, as for the plan itself, and autocast on or off as when recorded (its casts happen above
ATen, so a program holds them).

What is compiled: explanations with one account for the whole call (node-level tasks, or
``accounts="total"``), without an edge mask, ``per_index`` or ``recompute``, of models that read no
tensor data through ``tolist`` or ``numpy`` in their forward (a plan compares those values itself; a
program could not see them); the others replay.  On a GPU the autograd engine runs the backward in a
thread of its own per device: the recorder, a dispatch mode, is carried into it, and sees the rules'
reads there too (:meth:`Recorder.on_read`); a backward whose operations ran in more than one thread
(tensors on several devices) has no fixed order and is not compiled.  The program itself runs in the
calling thread.

A program that has run :data:`SIMPLIFY_AFTER` times runs simplified (:func:`simplify`): the steps that give the same values
on every run (on the model's parameters alone, or repeating an earlier step on the same values, as each
GCN layer normalising the same edges again) run once, when it is made; the results are the same to the bit.
The signs that a rule reads of a few numbers (z+'s signs of its input's extremes) are read, on the CPU,
with one ``item`` each instead of ``stack``, ``sign`` and ``tolist`` (:func:`_read_signs_by_item`).  From its
second run on, a simplified program calls each operator through the C binding of PyTorch's Python API
that was seen to call that operator on the same kinds of arguments (:mod:`lrp_lib.explain.bindings`:
``torch.mm`` parses its arguments faster than the ``OpOverload``), except under a torch function mode,
which then sees the operators as before.

Programs for any size (:func:`generalise`).  A program is recorded for one input signature, sizes
included, as a plan is.  Explanations whose inputs come in many sizes (molecules one at a time) would
rarely meet a program of their size.  Yet the programs of two sizes most often run the same
operations, with only the sizes in their arguments changed.  Where two programs of a family (the same
model, options, dtypes and numbers of dimensions) differ in nothing else, and every number that differs
is the size of a tensor the program has at that point, the same tensor dimension in both, one program
is made whose sizes are read from the tensors it runs on (:class:`SizeRef`).  The guards of such a
program, beyond those above:

* each size of an input that was free (differed between the two) is at least 2, and no two free sizes
  are equal (models branch on empty or single-entry tensors, and a model could compare two sizes);
* the two programs' free input sizes must not be in the same ratio (twice as many edges as nodes in
  both), or a number twice the node count could be taken for the edge count;
* a data-dependent size (the edges that remain once self-loops are removed) that equalled an earlier
  size in both programs must equal it again; one that was new is free.

What no guard can see is a model's Python that takes another branch at another size above 1 without
reading tensor data (a different algorithm above some number of nodes, say): ``LRPExplainer(compile=
"exact")`` keeps programs per signature for such a model.
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Callable

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from lrp_lib.explain.bindings import binding
from lrp_lib.explain.primitives import Tally
from lrp_lib.explain import replay
from lrp_lib.explain.record import READ_STEP, NotReplayable, Ref, Stale, model_state

__all__ = ["Program", "Recorder", "Compiling", "run", "explain", "compiling", "NotCompiled", "DATA_SHAPED",
           "PY_READS", "MAX_FAILURES", "RUNS_PER_FAILURE", "SizeRef", "generalise", "family", "families_of",
           "FAMILY_PROGRAMS", "simplify", "SIMPLIFY_AFTER"]

#: Operators whose result's shape depends on the data: their shapes are compared on every run.
DATA_SHAPED = frozenset("""nonzero nonzero_static argwhere masked_select index unique_dim unique_consecutive
unique_dim_consecutive _unique _unique2 repeat_interleave bincount""".split())
_ALIASES = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)
_STEP, _READ, _MULTI, _PY_READ = range(4)
#: Tensor methods that read data without an ATen operation (the dispatcher does not see them).
PY_READS = frozenset({"tolist", "numpy", "__array__"})


def _context() -> tuple:
    """The dispatch state that the recorded operations depend on: autocast casts above ATen, so a program
    recorded under it holds the casts (and one recorded without it holds none)."""
    return tuple(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))


class NotCompiled(Exception):
    """The recorded explanation cannot be written as a :class:`Program`."""


def _template(a, slot_of: Callable):
    if isinstance(a, Tensor):
        return slot_of(a)
    if type(a) in (list, tuple):
        return type(a)(_template(b, slot_of) for b in a)
    return a


class SizeRef:
    """A size of a generic program (:func:`generalise`): dimension ``dim`` of the tensor in ``slot``."""
    __slots__ = ("slot", "dim")

    def __init__(self, slot: int, dim: int):
        self.slot, self.dim = slot, dim


def _slots_in(a, found: list) -> None:
    if type(a) is Ref or type(a) is SizeRef:
        found.append(a.slot)
    elif type(a) in (list, tuple):
        for b in a:
            _slots_in(b, found)


def _resolve(a, env: list):
    t = type(a)
    if t is Ref:
        return env[a.slot]
    if t is SizeRef:
        return env[a.slot].shape[a.dim]
    if t is tuple or t is list:
        return t(_resolve(b, env) for b in a)
    return a


def _flat(t_args, t_kwargs):
    """The fast form of a step's arguments (a list with None at the tensors, and their slots), or None."""
    if t_kwargs and any(type(v) in (Ref, SizeRef, list, tuple) for v in t_kwargs.values()):
        return None
    if any(type(a) is SizeRef or type(a) in (list, tuple) and any(type(b) in (Ref, SizeRef) for b in a)
           for a in t_args):
        return None
    return ([None if type(a) is Ref else a for a in t_args],
            tuple((i, a.slot) for i, a in enumerate(t_args) if type(a) is Ref))


def _same_shape(shape, check, env: list | None = None) -> bool:
    """``shape`` is the recorded ``check``: a number, None for a size of at least 2, or a
    :class:`SizeRef` for the size of a tensor in ``env``."""
    if len(shape) != len(check):
        return False
    for s, c in zip(shape, check):
        if c is None:
            if s < 2:
                return False
        elif type(c) is SizeRef:
            if s != env[c.slot].shape[c.dim]:
                return False
        elif s != c:
            return False
    return True


class Program:
    """The ATen operations of one explanation (see the module docstring)."""

    def __init__(self):
        self.steps: list = []  # (kind, op, args, kwargs, flat, out, check)
        self.n_slots = 0
        self.inputs: list[int] = []  # slots of the model's inputs, in order
        self.start_slot: int | None = None
        self.split = 0  # steps[:split]: the forward; steps[split:]: the backward
        self.out_slot = self.head_slot = None
        self.grad_slots: list[int | None] = []
        self.tally: list[tuple[str, str, tuple[int, ...]]] = []
        self.detached: set[str] = set()
        self.explained_head: str | None = None
        self.constants: list[tuple[Tensor, int]] = []
        self.scalars: list[tuple[Tensor, object]] = []  # 0-dimensional constants and their values
        self.states = self.context = None
        self.drops: list[tuple[int, ...]] = []
        self.shapes: dict[int, tuple] = {}  # each tensor slot's shape when recorded
        self.input_sizes: list[tuple] | None = None  # a generic program's inputs' shapes (None: any size >= 2)
        self.fast: Program | None = None  # the program that runs: :func:`simplify`'s (made after SIMPLIFY_AFTER runs)
        self.runs = 0  # the runs before it was simplified
        self.code: tuple | None = None  # a simplified program's two segments as functions (:func:`_code`)
        self.bound: tuple | None = None  # the same, each operator called through its C binding where one was found


class Recorder(TorchDispatchMode):
    """Writes a :class:`Program` while a replayed explanation runs (entered once for its forward,
    once for its backward).  ``constants``: the tensors the program may hold (the model's
    parameters and buffers, the plan's constants and kept results)."""

    def __init__(self, model: nn.Module, constants: list[Tensor]):
        super().__init__()
        self.program = Program()
        self.program.states = model_state(model)
        self.program.context = _context()
        self._slot: dict[int, int] = {}
        self._alive: list = []  # every recorded tensor, kept alive while recording (no reused ids)
        self._allowed = {id(t): t for t in constants}
        self._constants: dict[int, Tensor] = {}
        self._threads: set[int] = set()  # the threads the backward's operations ran in
        self._backward = False
        self.failure: str | None = None

    def declare(self, t: Tensor) -> None:
        """Make ``t`` the program's next input."""
        self.program.inputs.append(self._new(t))

    def _new(self, t: Tensor) -> int:
        k = self.program.n_slots
        self.program.n_slots += 1
        self._slot[id(t)] = k
        self.program.shapes[k] = tuple(t.shape)
        self._alive.append(t)
        return k

    def slot(self, t: Tensor):
        k = self._slot.get(id(t))
        if k is not None:
            return Ref(k)
        if id(t) in self._allowed or id(t) in self._constants:
            self._constants[id(t)] = t
            return t
        if t.dim() == 0 and not t.requires_grad:  # a scalar constant (a stabiliser's epsilon): its value checked
            self._constants[id(t)] = t
            self.program.scalars.append((t, t.item()))
            return t
        raise NotCompiled(f"an operation reads a tensor of shape {tuple(t.shape)} made outside the explanation")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.failure is not None:
            return out
        try:
            self._record(func, args, kwargs, out)
        except Exception as e:  # noqa: BLE001 - what the recorder cannot write keeps the plan from compiling,
            self.failure = str(e) if isinstance(e, NotCompiled) else f"{type(e).__name__}: {e}"  # never the call
        return out

    def _record(self, func, args, kwargs, out) -> None:
        if self._backward:
            self._threads.add(threading.get_ident())
        if func in _ALIASES and isinstance(args[0], Tensor) and id(args[0]) in self._slot:
            self._slot[id(out)] = self._slot[id(args[0])]  # without autograd, the same tensor
            self._alive.append(out)
            return
        if torch.Tag.nondeterministic_seeded in func.tags:
            raise NotCompiled(f"{func} is random")
        _OVERLOADS.setdefault(func._op, func)
        t_args = _template(args, self.slot)
        t_kwargs = {k: _template(v, self.slot) for k, v in kwargs.items()}
        flat = _flat(t_args, t_kwargs)
        check = func.overloadpacket.__name__ in DATA_SHAPED
        if isinstance(out, Tensor):
            k = self._slot.get(id(out))
            if k is None:
                k = self._new(out)
            self.program.steps.append((_STEP, func._op, t_args, t_kwargs, flat, k, tuple(out.shape) if check else None))
        elif isinstance(out, (tuple, list)) and all(isinstance(o, Tensor) for o in out):
            ks = tuple(self._slot[id(o)] if id(o) in self._slot else self._new(o) for o in out)
            shapes = tuple(tuple(o.shape) for o in out) if check else None
            self.program.steps.append((_MULTI, func._op, t_args, t_kwargs, flat, ks, shapes))
        else:
            if isinstance(out, float) and out not in (-1.0, 0.0, 1.0):
                raise NotCompiled(f"{func} read an amount from the data")
            if not isinstance(out, (bool, int, float)) and not (
                    isinstance(out, (tuple, list)) and all(isinstance(o, (bool, int)) for o in out)):
                raise NotCompiled(f"{func} gave a result of type {type(out).__name__}")
            self.program.steps.append((_READ, func._op, t_args, t_kwargs, flat, None, out))

    def begin_backward(self, start: Tensor) -> None:
        """Between the segments: ``start`` (the relevance the backward starts from) is an input."""
        self.program.split = len(self.program.steps)
        self.program.start_slot = self._new(start)
        self._backward = True

    def on_read(self, t: Tensor, values) -> None:
        """Called by :func:`lrp_lib.core.stabilizer.read` in any thread where this mode is active (the
        autograd engine carries it into the threads where a GPU's backward runs)."""
        self.read(Tensor.tolist, (t,), {}, values)

    def read(self, func, args, kwargs, out) -> None:
        """A value read from tensor data without an ATen operation (``tolist``, through
        :func:`lrp_lib.core.stabilizer.read`): a guard."""
        if self._backward:
            self._threads.add(threading.get_ident())
        if self.failure is None:
            try:
                self._record_read(func, args, kwargs, out)
            except Exception as e:  # noqa: BLE001 - as in __torch_dispatch__
                self.failure = str(e) if isinstance(e, NotCompiled) else f"{type(e).__name__}: {e}"

    def _record_read(self, func, args, kwargs, out) -> None:
        values = out.tolist() if hasattr(out, "tolist") else out  # numpy: compared as lists
        flat = values if isinstance(values, list) else [values]
        while flat and isinstance(flat[0], list):
            flat = [v for row in flat for v in row]
        if any(isinstance(v, float) and v not in (-1.0, 0.0, 1.0) for v in flat):
            raise NotCompiled(f"{getattr(func, '__name__', func)} read an amount from the data")
        t_args = _template(args, self.slot)
        self.program.steps.append((_PY_READ, func, t_args, dict(kwargs), None, None, values))

    def finish(self, out: Tensor, head: Tensor, grads, unread: list, detached: set, explained_head) -> Program:
        """The program, once the backward has run (``unread``: the tally's amounts, as
        :meth:`~lrp_lib.explain.primitives.Tally.unread` gives them); :class:`NotCompiled` if it
        cannot be one."""
        if self.failure is not None:
            raise NotCompiled(self.failure)
        if len(self._threads) > 1:  # (devices of their own: the order of their operations is not fixed)
            raise NotCompiled("the backward ran in several threads")
        p = self.program

        def known(t):
            if t is None:
                return None
            k = self._slot.get(id(t))
            if k is None:
                raise NotCompiled("a result the program does not compute")
            return k
        p.out_slot, p.head_slot = known(out), known(head)
        p.grad_slots = [known(g) for g in grads]
        p.tally = [(table, label, tuple(known(t) for t in terms)) for table, label, terms in unread]
        p.detached, p.explained_head = set(detached), explained_head
        for t in self._constants.values():
            p.constants.append((t, t._version))
        for t, value in p.scalars:
            if t.item() != value:
                raise NotCompiled("a scalar constant changed while recording")
        p.drops = _drops(p)
        self._alive = []
        return p


def _results(p: Program) -> set[int]:
    """The slots of what a run of ``p`` returns: the output, the explained head, the relevance, the tally."""
    keep = {k for k in (p.out_slot, p.head_slot, *p.grad_slots) if k is not None}
    keep.update(k for _, _, ks in p.tally for k in ks)
    return keep


def _read_by(step) -> list[int]:
    """The slots a step reads: in its arguments, and a generic program's sizes that a data-shaped result
    must have (its check)."""
    kind, _, a, kw, _, _, check = step
    found: list = []
    _slots_in(a, found)
    _slots_in(list(kw.values()), found)
    if kind in (_STEP, _MULTI) and check is not None:
        _slots_in(check, found)
    return found


def _drops(p: Program) -> list[tuple[int, ...]]:
    """The slots each step is the last to read (or, unread, to write), but for the program's results."""
    keep = _results(p)
    last: dict[int, int] = {}
    for i, step in enumerate(p.steps):
        for k in _read_by(step):
            last[k] = i
        kind, outs = step[0], step[5]
        for k in (outs if kind == _MULTI else (outs,) if kind == _STEP else ()):
            last.setdefault(k, i)
    drops: list[list[int]] = [[] for _ in p.steps]
    for k, i in last.items():
        if k not in keep:
            drops[i].append(k)
    return [tuple(d) for d in drops]


# Simplifying a program.  A recorded program repeats work that gives the same values on every run: each
# GCN layer normalises the same edges again, and each rule transposes, clips and reads the signs of its
# layer's weights.  :func:`simplify` does that work once.  The same kernels run on the same values, so the
# relevance is unchanged to the bit; what changes is how many operations each run calls.

_OVERLOADS: dict = {}  # an operator (``OpOverload._op``, as steps hold it) -> its OpOverload (its schema)
_EFFECTS: dict = {}


def _effects(op):
    """``(written, viewed)``: the arguments ``op`` writes in place and those its results may share memory
    with (a view, or the tensor an in-place operation returns), each as (position, name); None for an
    operator without a schema."""
    found = _EFFECTS.get(op)
    if found is None:
        f = _OVERLOADS.get(op)
        if f is None:
            return None
        schema = f._schema
        sets = set()
        for r in schema.returns:
            if r.alias_info is not None:
                sets.update(r.alias_info.before_set)
        written, viewed = [], []
        for i, a in enumerate(schema.arguments):
            where = (None if a.kwarg_only else i, a.name)
            if a.alias_info is not None and a.alias_info.is_write:
                written.append(where)
            if a.alias_info is not None and sets.intersection(a.alias_info.before_set):
                viewed.append(where)
        found = _EFFECTS[op] = (tuple(written), tuple(viewed))
    return found


def _key_of(a, vn: dict):
    """What an argument is, for comparing two steps: each slot by the value it holds (``vn``)."""
    t = type(a)
    if t is Ref:
        return "ref", vn[a.slot]
    if t is SizeRef:
        return "size", vn[a.slot], a.dim
    if t is tuple or t is list:
        return t, tuple(_key_of(b, vn) for b in a)
    if isinstance(a, Tensor):
        return "tensor", id(a)
    if t is float:
        return t, repr(a)  # (0.0 and -0.0 differ; nan equals nan)
    return t, a


def simplify(p: Program) -> Program:
    """``p`` with the work that gives the same values on every run done once, as a program of its own:

    * a step whose arguments are all constants (the model's parameters, or results of such steps) is run
      now, and its result becomes a constant of the program (a weight's transpose, its positive part);
      a value read from constants alone is not read again (the constants are checked on every run);
    * a step that repeats an earlier one on the same values reads the earlier result instead (each layer
      of a GCN normalising the same edges again), and a value read twice is read once.

    Values are compared by how they were computed (the operator and the values of its arguments), a
    tensor written in place by what wrote it.  A step whose result is written in place, or shares memory
    with a tensor that is, is neither run now nor replaced; a program that writes a constant is kept as
    it is.  The kernels and their inputs are those of ``p``: the results are the same, to the bit."""
    steps = p.steps
    effects = []
    for kind, op, *_ in steps:
        e = ((), ()) if kind == _PY_READ else _effects(op)
        if e is None:
            return p
        effects.append(e)
    # the slots that share memory (a view and what it views), and the groups of them that are written
    parent = list(range(p.n_slots))

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def arg(args, kwargs, pos, name):
        return args[pos] if pos is not None and pos < len(args) else kwargs.get(name)
    written: set[int] = set()
    for (kind, op, args, kwargs, _, outs, _), (writes, viewed) in zip(steps, effects):
        for pos, name in writes:
            v = arg(args, kwargs, pos, name)
            if isinstance(v, Tensor) or type(v) in (list, tuple) and any(isinstance(b, Tensor) for b in v):
                return p  # (a constant written in place)
            found: list = []
            _slots_in([v], found)
            written.update(found)
        if viewed and kind in (_STEP, _MULTI):
            found = []
            _slots_in([arg(args, kwargs, pos, name) for pos, name in viewed], found)
            for o in (outs if kind == _MULTI else (outs,)):
                for k in found:
                    parent[root(o)] = root(k)
    shared = {root(k) for k in written}
    members: dict[int, list[int]] = {}
    for k in range(p.n_slots):
        members.setdefault(root(k), []).append(k)
    keep = _results(p)

    const: dict[int, Tensor] = {}  # slots whose values are constants now
    rename: dict[int, int] = {}  # slot -> the earlier slot holding its value
    vn: dict[int, object] = {k: ("input", k) for k in (*p.inputs, p.start_slot) if k is not None}
    seen: dict = {}
    ids: dict = {}
    fresh = 0

    def sub(a):
        t = type(a)
        if t is Ref or t is SizeRef:
            k = rename.get(a.slot, a.slot)
            if k in const:
                return const[k] if t is Ref else const[k].shape[a.dim]
            return a if k == a.slot else Ref(k) if t is Ref else SizeRef(k, a.dim)
        if t is tuple or t is list:
            return t(sub(b) for b in a)
        return a

    out_steps: list = []
    effects_of: list = []  # (written, viewed) of each step kept
    split = None
    for i, ((kind, op, args, kwargs, _, outs, check), (writes, _)) in enumerate(zip(steps, effects)):
        if i == p.split:
            split = len(out_steps)
        a, kw = sub(args), {k: sub(v) for k, v in kwargs.items()}
        refs: list = []
        _slots_in(a, refs)
        _slots_in(list(kw.values()), refs)
        outs_t = outs if kind == _MULTI else (outs,) if kind == _STEP else ()
        free = not writes and all(root(k) not in shared for k in outs_t)
        if kind in (_READ, _PY_READ):
            if not refs:
                continue  # read from constants: the same value on every run
            key = (kind, op, _key_of(a, vn), tuple((k, _key_of(v, vn)) for k, v in kw.items()))
            if key in seen:
                continue
            seen[key] = None
            out_steps.append((kind, op, a, kw, None, outs, check))
            effects_of.append(((), ()))
            continue
        if free and not refs and not keep.intersection(outs_t):
            with torch.no_grad():
                out = op(*a, **kw)
            for k, o in zip(outs_t, out if kind == _MULTI else (out,)):
                const[k] = o
            continue
        key = (kind, op, _key_of(a, vn), tuple((k, _key_of(v, vn)) for k, v in kw.items()))
        if free:
            earlier = seen.get(key)
            if earlier is not None:
                for k, e in zip(outs_t, earlier):
                    rename[k] = e
                continue
            seen[key] = outs_t
            number = ids.setdefault(key, len(ids))  # (numbers, not the nested keys: hashing stays flat)
            for j, k in enumerate(outs_t):
                vn[k] = (number, j)
        else:
            changed = list(outs_t)
            _slots_in([arg(a, kw, pos, name) for pos, name in writes], changed)
            changed = set(changed)
            if len(changed) == 1 and len(members[root(next(iter(changed)))]) == 1:
                vn[changed.pop()] = (ids.setdefault(key, len(ids)), 0)  # written, sharing memory with none:
                # known by what wrote it
            for k in changed:
                for m in members[root(k)]:
                    fresh += 1
                    vn[m] = ("written", fresh)
        if check is not None:
            check = sub(check)
        out_steps.append((kind, op, a, kw, _flat(a, kw), outs, check))
        effects_of.append((writes, ()))
    # what no longer reaches a result (a layer's edge normalisation once its reads read the first layer's)
    live = {rename.get(k, k) for k in keep} | set(p.inputs)  # (a write into an input is kept)
    needed = [False] * len(out_steps)
    for i in range(len(out_steps) - 1, -1, -1):
        kind, op, a, kw, _, outs, check = out_steps[i]
        if kind in (_STEP, _MULTI):
            touched = list(outs if kind == _MULTI else (outs,))
            _slots_in([arg(a, kw, pos, name) for pos, name in effects_of[i][0]], touched)
            if not any(m in live for k in touched for m in members[root(k)]):
                continue
        needed[i] = True
        live.update(_read_by(out_steps[i]))
    split = sum(needed[:split]) if split is not None else None
    out_steps = [st for st, n in zip(out_steps, needed) if n]
    q = Program()
    q.__dict__.update(p.__dict__)
    q.fast = None
    q.steps, q.split = out_steps, len(out_steps) if split is None else split
    q.out_slot, q.head_slot = (None if k is None else rename.get(k, k) for k in (p.out_slot, p.head_slot))
    q.grad_slots = [None if k is None else rename.get(k, k) for k in p.grad_slots]
    q.tally = [(table, label, tuple(rename.get(k, k) for k in ks)) for table, label, ks in p.tally]
    _read_signs_by_item(q)
    q.drops = _drops(q)
    q.code = (_code(q, 0, q.split), _code(q, q.split, len(q.steps)))
    return q


_SIGN, _STACK = torch.ops.aten.sign.default, torch.ops.aten.stack.default


def _sign(v):
    """``torch.sign`` of a number, as ``tolist`` gives it: 1.0, -1.0, or 0.0 (for 0.0, -0.0 and NaN)."""
    return 1.0 if v > 0 else -1.0 if v < 0 else 0.0


def _signs(items: list) -> list:
    """``torch.stack(items).sign().tolist()`` where ``items`` are 0-dimensional tensors and the signs of
    constants (floats): on the CPU one ``item`` per tensor instead of two operations and a ``tolist``; on a
    GPU, where each ``item`` would wait for the device, the tensors' signs in one read."""
    tensors = [t for t in items if type(t) is not float]
    if all(t.device.type == "cpu" for t in tensors):
        return [_sign(t.item()) if type(t) is not float else t for t in items]
    read = iter(torch.stack(tensors).sign().tolist())  # one synchronisation
    return [next(read) if type(t) is not float else t for t in items]


def _read_signs_by_item(q: Program) -> None:
    """Where a rule reads the signs of a few numbers (z+'s signs of its input's and weight's extremes: a
    ``stack`` of 0-dimensional tensors, its ``sign``, then ``tolist``), read them with :func:`_signs`: the
    same values, compared with the same recorded ones; the constants' signs are taken now, and on the CPU
    each tensor is read with ``item``, at a fraction of the cost."""
    steps = q.steps
    made: dict[int, int] = {}
    uses: dict[int, int] = {}
    for i, step in enumerate(steps):
        if step[0] == _STEP:
            made[step[5]] = i
        for k in _read_by(step):
            uses[k] = uses.get(k, 0) + 1
    kept = _results(q)
    gone: set[int] = set()
    for j, (kind, op, args, kwargs, _, outs, check) in enumerate(steps):
        if kind != _PY_READ or getattr(op, "__name__", None) != "tolist" or kwargs or len(args) != 1 or \
                type(args[0]) is not Ref:
            continue
        s_slot = args[0].slot
        i_s = made.get(s_slot)
        if i_s is None or _OVERLOADS.get(steps[i_s][1]) is not _SIGN or type(steps[i_s][2][0]) is not Ref:
            continue
        t_slot = steps[i_s][2][0].slot
        i_t = made.get(t_slot)
        if i_t is None or _OVERLOADS.get(steps[i_t][1]) is not _STACK or steps[i_t][3] or \
                steps[i_t][2][1:] not in ((), (0,)) or uses.get(s_slot) != 1 or uses.get(t_slot) != 1 or \
                kept.intersection((s_slot, t_slot)):
            continue
        items = steps[i_t][2][0]
        if not all(type(a) is Ref and q.shapes.get(a.slot) == () or
                   isinstance(a, Tensor) and a.dim() == 0 and a.is_floating_point() for a in items):
            continue
        signs = [a if type(a) is Ref else float(_sign(a.item())) for a in items]
        steps[j] = (_PY_READ, _signs, (signs,), {}, None, None, check)
        gone.update((i_s, i_t))
    if gone:
        q.split -= sum(1 for i in gone if i < q.split)
        q.steps = [st for i, st in enumerate(steps) if i not in gone]


def _run(p: Program, env: list, start: int, stop: int, found: list | None = None) -> None:
    """Steps ``start:stop`` of ``p`` on ``env``; with ``found``, also the C binding of each step's operator
    on its arguments (:func:`lrp_lib.explain.bindings.binding`), or None, at the step's index."""
    steps, drops = p.steps, p.drops
    for i in range(start, stop):
        kind, op, args, kwargs, flat, outs, check = steps[i]
        if flat is not None:
            a = flat[0][:]
            for j, k in flat[1]:
                a[j] = env[k]
        else:
            a, kwargs = _resolve(args, env), {k: _resolve(v, env) for k, v in kwargs.items()}
        if found is not None and op in _OVERLOADS:
            found[i] = binding(_OVERLOADS[op], tuple(a), kwargs)
        out = op(*a, **kwargs)
        if kind == _PY_READ:
            out = out.tolist() if hasattr(out, "tolist") else out
        if kind == _STEP:
            if check is not None and not _same_shape(out.shape, check, env):
                raise Stale(f"{_op_name(op)} gave a result of another shape than when compiled")
            env[outs] = out
        elif kind == _MULTI:
            if check is not None and not (len(out) == len(check) and all(_same_shape(o.shape, c, env)
                                                                          for o, c in zip(out, check))):
                raise Stale(f"{_op_name(op)} gave results of other shapes than when compiled")
            for k, o in zip(outs, out):
                env[k] = o
        elif type(out) is not type(check) or out != check:
            raise Stale(f"{_op_name(op)} read {out!r} from the data, not {check!r} as when compiled")
        for k in drops[i]:
            env[k] = None


def _op_name(op) -> str:
    """A step's operator as messages name it (``aten.equal.default``, ``tolist``)."""
    return str(_OVERLOADS.get(op, getattr(op, "__name__", op)))


def _code(p: Program, start: int, stop: int, bound: list | None = None) -> Callable[[list], None]:
    """Steps ``start:stop`` of ``p`` as one Python function of ``env``: what :func:`_run` does, written out
    step by step (each operator and constant a name of the function's globals), without the loop that
    reads each step's form on every run.  ``bound``: per step, the C binding to call instead of its
    operator, or None (:func:`_run`'s ``found``)."""
    names: dict = {"Stale": Stale, "_same_shape": _same_shape, "_multi_shapes": _multi_shapes}

    def name(v) -> str:
        k = f"c{len(names)}"
        names[k] = v
        return k

    def arg(a) -> str:
        t = type(a)
        if t is Ref:
            return f"env[{a.slot}]"
        if t is SizeRef:
            return f"env[{a.slot}].shape[{a.dim}]"
        if t is list or t is tuple:
            inner = ", ".join(arg(b) for b in a)
            return f"[{inner}]" if t is list else f"({inner}{',' if len(a) == 1 else ''})"
        if t is int or t is bool or a is None:
            return repr(a)
        return name(a)
    lines = ["def segment(env):"]
    for i in range(start, stop):
        kind, op, args, kwargs, _, outs, check = p.steps[i]
        call = f"{name(op if bound is None or bound[i] is None else bound[i])}({', '.join([*(arg(a) for a in args), *(f'{k}={arg(v)}' for k, v in kwargs.items())])})"
        what = name(_op_name(op))
        if kind == _STEP:
            lines.append(f"    env[{outs}] = {call}")
            if check is not None:
                lines.append(f"    if not _same_shape(env[{outs}].shape, {name(check)}, env):")
                lines.append(f"        raise Stale(f'{{{what}}} gave a result of another shape than when compiled')")
        elif kind == _MULTI:
            lines.append(f"    out = {call}")
            if check is not None:
                lines.append(f"    if not _multi_shapes(out, {name(check)}, env):")
                lines.append(f"        raise Stale(f'{{{what}}} gave results of other shapes than when compiled')")
            lines.append(f"    {', '.join(f'env[{k}]' for k in outs)}, = out")
        else:
            lines.append(f"    out = {call}")
            if kind == _PY_READ:
                lines.append("    out = out.tolist() if hasattr(out, 'tolist') else out")
            c = name(check)
            lines.append(f"    if type(out) is not type({c}) or out != {c}:")
            lines.append(f"        raise Stale(f'{{{what}}} read {{out!r}} from the data, not {{{c}!r}} as when compiled')")
        for k in p.drops[i]:
            lines.append(f"    env[{k}] = None")
    lines.append("    return None")
    exec(compile("\n".join(lines), f"<program steps {start}:{stop}>", "exec"), names)  # noqa: S102 - our own text
    return names["segment"]


def _multi_shapes(out, check, env: list) -> bool:
    return len(out) == len(check) and all(_same_shape(o.shape, c, env) for o, c in zip(out, check))


def _guarded(p: Program, env: list, start: int, stop: int, code: tuple | None = None,
             found: list | None = None) -> None:
    try:
        if code is not None:
            code[0 if start == 0 else 1](env)
            return
        _run(p, env, start, stop, found)
    except Stale:
        raise
    except Exception as e:  # noqa: BLE001 - an operation that does not run on these inputs: the replay decides
        raise Stale(f"an operation failed ({type(e).__name__}: {e})") from e


def run(p: Program, model: nn.Module, inputs: list, start_of: Callable[[Tensor, Tensor], Tensor],
        state: tuple | None = None):
    """The explanation of ``inputs`` by program ``p``: (output, explained head, start relevance, the
    relevance of each input, the tally).  ``start_of(output, head)`` gives the start relevance
    between the segments; ``state``: the model's :func:`~lrp_lib.explain.record.model_state` if the
    caller has it.  :class:`Stale` if a guard fails."""
    if (model_state(model) if state is None else state) != p.states:
        raise Stale("the model's parameters, buffers or training flags changed")
    if _context() != p.context:
        raise Stale("autocast is on or off, not as when compiled")
    for t, version in p.constants:
        if t._version != version:
            raise Stale("a constant of the program changed in place")
    for t, value in p.scalars:
        if t.item() != value:
            raise Stale("a scalar constant of the program changed")
    if p.fast is not None:
        p = p.fast
    else:
        p.runs += 1
        if p.runs > SIMPLIFY_AFTER:  # (simplifying costs a few explanations: programs run rarely are not)
            p.fast = simplify(p)
            p = p.fast
    code, found = p.code, None
    # the C bindings call the operators sooner; a torch function mode (or a tensor subclass) would see their
    # calls, not the operators', so then the operators are called as recorded
    if code is not None and not torch._C._is_torch_function_mode_enabled() and \
            all(type(t) is Tensor for t in inputs):
        if p.bound is not None:
            code = p.bound
        else:  # this run finds the bindings, step by step
            code, found = None, [None] * len(p.steps)
    env = [None] * p.n_slots
    for k, t in zip(p.inputs, inputs):
        env[k] = t
    with torch.no_grad():
        _guarded(p, env, 0, p.split, code, found)
        out, head = env[p.out_slot], env[p.head_slot]
        start = start_of(out, head)  # (its errors, a target out of range, are the caller's)
        env[p.start_slot] = start
        _guarded(p, env, p.split, len(p.steps), code, found)
    if found is not None:
        p.bound = (_code(p, 0, p.split, found), _code(p, p.split, len(p.steps), found))
    tally = Tally.of([(table, label, tuple(env[k] for k in ks)) for table, label, ks in p.tally])
    grads = [None if k is None else env[k] for k in p.grad_slots]
    return out, head, start, grads, tally



#: How many runs a program makes as recorded before it is simplified (:func:`simplify`, which costs about
#: as much as a few explanations of a small graph: a program for one size that runs once or twice is not).
SIMPLIFY_AFTER = 2

#: How many times a plan's programs may fail their guards and the plan still be compiled again, or more
#: where they ran :data:`RUNS_PER_FAILURE` times as often (a rule whose choice changes now and then, as when a
#: layer's input has no positive entry on one graph in many, is compiled again after a failure).
MAX_FAILURES = 2
RUNS_PER_FAILURE = 4


def _key(state: tuple, inputs: list, kwargs: dict, options: tuple):
    """This call's plan signature, or None where the model's explanations are not replayed (``state``,
    the model's :func:`~lrp_lib.explain.record.model_state`, says it has hooks)."""
    if state[2]:
        return None
    try:
        return replay.signature(inputs, kwargs, options)
    except NotReplayable:
        return None


# Generic programs: one program for inputs of any size.  Two programs of the same model and
# options whose inputs differ only in their sizes (molecules of other numbers of atoms and bonds) most
# often run the same operations, the sizes in their arguments aside.  Where they do, and every size
# that differs is the size of a tensor the program has at that point (a dimension of an input or of
# an earlier result, the same one in both), the program is written once with those sizes read from
# the tensors it runs on (:class:`SizeRef`).

#: The programs of other signatures kept per family, to be generalised with a new one.
FAMILY_PROGRAMS = 4


def family(key: tuple) -> tuple:
    """A signature (:func:`lrp_lib.explain.replay.signature`) with each tensor's shape replaced by its
    number of dimensions: the key of the programs that a generic program covers."""
    def abstract(d):
        return (d[0], len(d[1]), *d[2:]) if type(d) is tuple and d and d[0] == "tensor" else d
    inputs, kwargs, alias, options = key
    return tuple(abstract(d) for d in inputs), tuple((k, abstract(d)) for k, d in kwargs), alias, options


class _Family:
    __slots__ = ("programs", "generic", "runs", "failures", "refused")

    def __init__(self):
        self.programs: dict = {}  # signature -> its program (the latest FAMILY_PROGRAMS)
        self.generic: Program | None = None
        self.runs = self.failures = 0
        self.refused: str | None = None  # why the latest pair could not be generalised


_families: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()
_families_lock = threading.Lock()


def families_of(model: nn.Module) -> dict:
    """The families of ``model``'s programs (family key -> their programs and generic program)."""
    with _families_lock:
        found = _families.get(model)
        if found is None:
            found = _families[model] = {}
        return found


def _same(a, b) -> bool:
    return type(a) is type(b) and (a == b or a != a and b != b)  # (NaN constants)


def generalise(a: Program, b: Program) -> Program:
    """One program for the inputs of both ``a`` and ``b`` and of any size between and beyond, as long
    as each size stays at least 2 (sizes 0 and 1 change broadcasting and the branches that models take);
    :class:`NotCompiled` (with the first difference) where they differ otherwise, or where a size that
    differs is not the size of a tensor the program has."""
    if (a.n_slots, a.inputs, a.start_slot, a.split, a.out_slot, a.head_slot, a.grad_slots, a.tally,
            a.detached, a.explained_head, a.states, a.context) != \
            (b.n_slots, b.inputs, b.start_slot, b.split, b.out_slot, b.head_slot, b.grad_slots, b.tally,
             b.detached, b.explained_head, b.states, b.context) or len(a.steps) != len(b.steps):
        raise NotCompiled("the programs differ in their form")
    if [v for _, v in a.scalars] != [v for _, v in b.scalars]:
        raise NotCompiled("the programs hold other scalars")
    scalars = {id(t) for t, _ in a.scalars} | {id(t) for t, _ in b.scalars}  # (their values checked on each run)
    sizes: dict[tuple[int, int], SizeRef] = {}  # (size in a, size in b) -> the first tensor dimension so

    def define(k: int) -> None:
        sa, sb = a.shapes[k], b.shapes[k]
        if len(sa) != len(sb):
            raise NotCompiled(f"a result has {len(sa)} dimensions in one program, {len(sb)} in the other")
        for d, (u, v) in enumerate(zip(sa, sb)):
            if u != v:
                if u < 2 or v < 2:
                    raise NotCompiled("a size of 0 or 1 differs")
                sizes.setdefault((u, v), SizeRef(k, d))

    def unify(x, y, guard: bool):
        tx = type(x)
        if tx is Ref:
            if type(y) is Ref and y.slot == x.slot:
                return x
            raise NotCompiled("an operation reads other tensors")
        if tx is tuple or tx is list:
            if type(y) is not tx or len(x) != len(y):
                raise NotCompiled("an operation has other arguments")
            return tx(unify(u, v, guard) for u, v in zip(x, y))
        if isinstance(x, Tensor):
            # a guard's constant (the graph a plan keeps its graph part for, compared by torch.equal) may
            # differ: the generic program compares with a's, and reads the value that both programs read
            if x is y or guard and isinstance(y, Tensor) or id(x) in scalars and id(y) in scalars and \
                    x.dtype == y.dtype and x.device == y.device and x.item() == y.item():
                return x
            raise NotCompiled("an operation reads other constants")
        if tx is int and type(y) is int and x != y:
            ref = sizes.get((x, y))
            if ref is None:
                raise NotCompiled(f"a number ({x} and {y}) is not the size of a tensor of the program")
            return ref
        if _same(x, y):
            return x
        raise NotCompiled(f"an operation has other arguments ({x!r} and {y!r})")

    g = Program()
    for name in ("n_slots", "inputs", "start_slot", "split", "out_slot", "head_slot", "grad_slots", "tally",
                 "detached", "explained_head", "constants", "scalars", "states", "context", "shapes"):
        setattr(g, name, getattr(a, name))
    for k in a.inputs:
        define(k)
    g.input_sizes = [tuple(u if u == v else None for u, v in zip(a.shapes[k], b.shapes[k])) for k in a.inputs]
    free = [(a.shapes[k][d], b.shapes[k][d]) for k, spec in zip(a.inputs, g.input_sizes)
            for d, c in enumerate(spec) if c is None]
    for i, (u, v) in enumerate(free):  # two sizes in the same ratio in both (as many edges as nodes, or twice
        for w, z in free[i + 1:]:  # as many): a number that is the one could be taken for the other
            if u * z == v * w:
                raise NotCompiled("two sizes of the inputs are in the same ratio in both programs")
    for i, (sa, sb) in enumerate(zip(a.steps, b.steps)):
        if i == a.split:
            define(a.start_slot)
        kind, op, args, kwargs, _, outs, check = sa
        if (kind, op, outs) != sb[:2] + sb[5:6] or kwargs.keys() != sb[3].keys():
            raise NotCompiled(f"the programs run other operations ({op} and {sb[1]})")
        guard = kind in (_READ, _PY_READ)
        t_args = unify(args, sb[2], guard)
        t_kwargs = {k: unify(v, sb[3][k], guard) for k, v in kwargs.items()}
        if kind in (_READ, _PY_READ):
            if not _same(check, sb[6]) and check != sb[6]:
                raise NotCompiled(f"{op} read {check!r} in one program, {sb[6]!r} in the other")
        elif check is not None:  # a data-shaped result: a size that differs is free (None), unless both
            shapes = (check,) if kind == _STEP else check  # programs had it already: it must then be that
            other = (sb[6],) if kind == _STEP else sb[6]  # size again (as many edges kept as given)
            if len(shapes) != len(other) or any(len(c) != len(o) for c, o in zip(shapes, other)):
                raise NotCompiled(f"{op} gave results of other dimensions")
            free = tuple(tuple(u if u == v else sizes.get((u, v)) for u, v in zip(c, o)) for c, o in zip(shapes, other))
            check = free[0] if kind == _STEP else free
        g.steps.append((kind, op, t_args, t_kwargs, _flat(t_args, t_kwargs), outs, check))
        for k in (outs if kind == _MULTI else (outs,) if kind == _STEP else ()):
            define(k)
    g.drops = _drops(g)
    return g


def _fits(p: Program, inputs: list) -> bool:
    """The inputs have the shapes of generic program ``p``'s: the same sizes where its are fixed, sizes
    of at least 2 where they are free, and no two free sizes equal (a model may compare them: as many
    edges as nodes could take another branch)."""
    free = []
    for t, spec in zip(inputs, p.input_sizes):
        if not _same_shape(t.shape, spec):
            return False
        free.extend(s for s, c in zip(t.shape, spec) if c is None)
    return len(set(free)) == len(free)


def _offer(model: nn.Module, key: tuple, program: Program) -> None:
    """Keep ``program`` (of signature ``key``) in its family, and make the family's generic program of it
    and another signature's where there is none."""
    fam_key = family(key)
    families = families_of(model)
    with _families_lock:
        fam = families.get(fam_key)
        if fam is None:
            fam = families[fam_key] = _Family()
        others = [p for k, p in fam.programs.items() if k != key]
        fam.programs.pop(key, None)
        fam.programs[key] = program
        while len(fam.programs) > FAMILY_PROGRAMS:
            del fam.programs[next(iter(fam.programs))]
        if fam.generic is not None:
            return
    for other in reversed(others):
        try:
            generic = generalise(other, program)
        except NotCompiled as e:
            fam.refused = str(e)
            continue
        with _families_lock:
            fam.generic, fam.refused = generic, None
        return


def explain(model: nn.Module, inputs: list, kwargs: dict, options: tuple, start_of: Callable,
            generic: bool = True):
    """The explanation by the program of this signature's plan or (``generic``) by its family's generic
    program (:func:`generalise`), as :func:`run` gives it, plus the program; None where there is none or
    the guards of each failed (a program that failed is dropped).  The generic program runs first where
    it is simplified and this signature's own program is not yet (:data:`SIMPLIFY_AFTER`); either one
    runs where the other's guards fail (another branch of the data)."""
    state = model_state(model)
    key = _key(state, inputs, kwargs, options)
    if key is None:
        return None
    plan = replay.plans_of(model).get(key)
    program = None if plan is None else plan.program
    fam = families_of(model).get(family(key)) if generic else None
    any_size = None if fam is None else fam.generic
    if any_size is not None and not _fits(any_size, inputs):
        any_size = None
    order = [program, any_size]
    if program is not None and any_size is not None and program.fast is None and any_size.fast is not None:
        order.reverse()
    for p in order:
        if p is None:
            continue
        try:
            done = run(p, model, inputs, start_of, state)
        except Stale:
            if p is program:
                plan.program = None
                plan.program_failures += 1
            else:
                fam.failures += 1
                if fam.failures > max(MAX_FAILURES, fam.runs // RUNS_PER_FAILURE):
                    fam.generic = None  # made again from the next programs recorded
                    fam.failures, fam.runs = 0, 0
            continue
        if p is program:
            plan.program_runs += 1
        else:
            fam.runs += 1
        return (*done, p)
    return None


class Compiling:
    """Records the program of ``plan`` while an explanation replays it: :meth:`forward` around the
    replay, :meth:`backward` around the backward, then :meth:`finish`."""

    def __init__(self, model: nn.Module, plan, inputs: list, key: tuple):
        held = [t for t, _ in plan.held]
        kept = [t for t in (plan.cached_env or ()) if isinstance(t, Tensor)]
        graph = [v for _, v in (plan.graph_inputs or ())]
        self.plan, self.model, self.key = plan, model, key
        self.recorder = Recorder(model, [*model.parameters(), *model.buffers(), *held, *kept, *graph])
        for t in inputs:
            self.recorder.declare(t)
        self.unread = None

    @contextmanager
    def forward(self):
        with self.recorder:  # (which sees the rules' reads: Recorder.on_read)
            yield

    def backward(self, tally: Tally):
        @contextmanager
        def context(start: Tensor):
            self.recorder.begin_backward(start)
            with self.recorder:
                yield
            self.unread = None if tally.was_read() else tally.unread()
        return context

    def finish(self, out: Tensor, head: Tensor, grads, detached: set, explained_head) -> None:
        """Keep the program on the plan (None where it cannot be one: the plan is then not compiled), and
        in its family (:func:`generalise`)."""
        try:
            if self.unread is None:
                raise NotCompiled("the accounts were read during the backward")
            self.plan.program = self.recorder.finish(out, head, grads, self.unread, detached, explained_head)
        except Exception as e:  # noqa: BLE001 - the explanation is done: a program that cannot be made is refused
            self.plan.program_refused = str(e) if isinstance(e, NotCompiled) else f"{type(e).__name__}: {e}"
            return
        _offer(self.model, self.key, self.plan.program)


def compiling(model: nn.Module, inputs: list, kwargs: dict, options: tuple) -> Compiling | None:
    """A :class:`Compiling` where this signature has a plan without a program (and not refused)."""
    key = _key(model_state(model), inputs, kwargs, options)
    plan = None if key is None else replay.plans_of(model).get(key)
    if plan is None or plan.program is not None or plan.program_refused is not None or \
            plan.program_failures > max(MAX_FAILURES, plan.program_runs // RUNS_PER_FAILURE):
        return None
    refused = None
    if any(step[0] == READ_STEP and getattr(step[1], "__name__", None) in PY_READS for step in plan.steps):
        refused = "the model reads tensor data without an ATen operation (tolist, numpy)"
    if refused is not None:
        plan.program_refused = refused
        return None
    return Compiling(model, plan, inputs, key)
