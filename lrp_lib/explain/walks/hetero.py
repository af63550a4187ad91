r"""GNN-LRP's walks on a heterogeneous graph (``x`` and ``edge_index`` dicts: ``to_hetero``, ``HeteroConv``,
``HANConv``).

A walk is a sequence of typed nodes :math:`((\tau_0, j_0), \dots, (\tau_L, j_L))`: step :math:`t` goes along an
edge :math:`j_{t-1} \to j_t` of an edge type :math:`(\tau_{t-1}, r, \tau_t)` that a ``propagate`` of step :math:`t`
passes messages along, or stays at its node; its relevance is as in :mod:`lrp_lib.explain.walks`, keeping all the
messages of parallel relations between the same two nodes.  Node type :math:`\tau` (in ``x``'s key order) holds the
global ids ``offset[τ] .. offset[τ] + count[τ] - 1``.  The relations of one layer are one step: a cut's time and node
type are found from the cuts it depends on (:class:`HeteroLayout`).  The queries are
:class:`~lrp_lib.explain.walks.model.WalkModel`'s masked backwards on the global ids (exact; no per-node algebra:
``top_walks`` scores every walk).  Refused where homogeneous graphs are; a propagate over one tensor holding several
node types (``HGTConv``) raises :class:`~lrp_lib.explain.mode.function_mode.UnsupportedModelError`.
"""
from __future__ import annotations

from itertools import accumulate

import torch
from torch import Tensor, nn

from lrp_lib.explain.mode.function_mode import UnsupportedModelError
from lrp_lib.explain.inputs import check_hetero_inputs, uncompiled
from lrp_lib.explain.walks.model import WalkModel, step_pairs
from lrp_lib.explain.walks.search import to_edges

__all__ = ["HeteroLayout", "HeteroWalkModel", "walk_model"]


class HeteroLayout:
    """The node types' global ids and, while recording, each cut's time and node type."""

    def __init__(self, x: dict, edge_index: dict):
        self.types, self.count = list(x), {k: int(v.shape[0]) for k, v in x.items()}
        self.offset = dict(zip(self.types, accumulate([0] + [self.count[k] for k in self.types])))
        self.num_nodes, self.edge_index = sum(self.count.values()), edge_index
        self.where: dict[int, tuple] = {}     # id(cut leaf) -> (time, node type)
        self.calls: list[dict] = []           # per propagate: edge_type, src, dst, name

    def rows(self, node_type) -> tuple[int, int]:
        return self.offset[node_type], self.count[node_type]

    def locate(self, t: Tensor) -> set:
        """The (time, node type) of every cut that ``t`` depends on (autograd, back to the cuts)."""
        if id(t) in self.where:
            return {self.where[id(t)]}
        found, seen, stack = set(), set(), [t.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            if (var := getattr(fn, "variable", None)) is not None:
                if id(var) in self.where:
                    found.add(self.where[id(var)])
                continue
            stack.extend(f for f, _ in fn.next_functions)
        return found

    def place_tensor(self, t: Tensor, name: str = "the model", dim: int = 0) -> tuple:
        """(time, node type, offset, count) of a tensor with rows (along ``dim``) of one node type: the type it
        depends on, or of those the one with as many nodes as it has rows."""
        found = self.locate(t)
        every, rows = sorted({ty for _, ty in found}, key=str), t.shape[dim] if t.dim() else None
        types = [ty for ty in every if self.count[ty] == rows] if len(every) > 1 else every
        if len(types) != 1:
            raise UnsupportedModelError(
                f"walks on a heterogeneous graph: {name} reads a tensor of {rows} rows that depends on the node "
                f"types {every} (a tensor that concatenates node types, as HGTConv's single graph over all types); "
                f"each propagate must read one node type per side")
        return (max(u for u, _ in found), types[0], *self.rows(types[0]))

    def place_call(self, module, names: dict, edge_index, marked: list) -> dict:
        """Time, per marked argument (node type, offset, count), and the global edges of a propagate."""
        name = f"'{names.get(id(module), type(module).__name__)}'"
        if getattr(module, "flow", "source_to_target") != "source_to_target":
            raise UnsupportedModelError(f"walks on a heterogeneous graph: {name} propagates target_to_source")
        node_dim = getattr(module, "node_dim", -2)
        placed = [self.place_tensor(p, name, node_dim if -p.dim() <= node_dim < p.dim() else 0)
                  for _, _, p, _ in marked]
        src = {pl[1] for (_, part, _, size), pl in zip(marked, placed) if size == 0 or part == 0}
        dst = {pl[1] for (_, part, _, size), pl in zip(marked, placed) if size == 0 or part == 1}
        given = next((k for k, v in self.edge_index.items() if v is edge_index), None)
        if given is not None:
            src, dst = src | {given[0]}, dst | {given[2]}
        if len(src) != 1 or len(dst) > 1:
            raise UnsupportedModelError(f"walks on a heterogeneous graph: {name}'s messages read source nodes of "
                                        f"types {sorted(src, key=str)} and targets of {sorted(dst, key=str)}")
        s = src.pop()
        d = dst.pop() if dst else s
        edges = edge_index.detach().long()
        if edges.numel() and (int(edges[0].max()) >= self.count[s] or int(edges[1].max()) >= self.count[d]):
            raise UnsupportedModelError(f"walks on a heterogeneous graph: {name}'s edge_index has ids beyond the "
                                        f"{self.count[s]} '{s}' (source) or {self.count[d]} '{d}' (target) nodes")
        self.calls.append(dict(edge_type=given if given is not None else self._edge_type(s, d, edges),
                               src=(s, *self.rows(s)), dst=(d, *self.rows(d)), name=name))
        shift = torch.tensor([[self.offset[s]], [self.offset[d]]], device=edges.device)
        return dict(time=max(pl[0] for pl in placed) + 1, parts=[pl[1:] for pl in placed], edges=edges + shift)

    def _edge_type(self, s, d, edges: Tensor):
        """The input edge type whose edges this propagate's edges contain (a layer that adds self-loops)."""
        n = max(self.count[s], self.count[d]) + 1
        have = set((edges[0] * n + edges[1]).tolist())
        hits = [k for k, v in self.edge_index.items() if k[0] == s and k[2] == d
                and set((v[0].long() * n + v[1].long()).tolist()) <= have]
        return hits[0] if len(hits) == 1 else None


class HeteroWalkModel(WalkModel):
    """:class:`~lrp_lib.explain.walks.model.WalkModel` of a heterogeneous graph (module docstring).  Walks: global
    node ids (``offset[τ] + j``, W x (L+1)) or typed, ``[((τ_0, j_0), ..., (τ_L, j_L)), ...]``.  ``index``: the
    explained node's row (of the output's node type) or ``(node type, row)``.  :meth:`node_relevance` and
    :meth:`edge_relevance` are dicts per node and edge type; :meth:`step_relevance` one entry per ``propagate``.
    Edge features (an ``edge_attr`` dict) are held constant: their share is in ``bias_relevance``."""

    def __init__(self, model: nn.Module, x: dict, edge_index: dict, rule="epsilon", *, index=None,
                 target: int | None = None, **model_kwargs):
        check_hetero_inputs(model, x, edge_index, **model_kwargs)
        if not x:
            raise ValueError("x is an empty dict: give the features of at least one node type")
        self.layout = layout = HeteroLayout(x, edge_index)
        self.node_types, self.offset, self.count = layout.types, layout.offset, layout.count
        self.num_nodes = n = layout.num_nodes
        self.xs = {k: v.detach().clone().requires_grad_(True) for k, v in x.items()}
        self.x = next(iter(self.xs.values()))
        g = self._record(model, rule, {("x", k): v for k, v in self.xs.items()},
                         lambda: model(self.xs, edge_index, **model_kwargs), layout)
        row, self.index = self._index(index, g.output)
        rels = self._explain(row, target, [step_pairs(torch.cat([e for e, u in zip(g.steps, g.times) if u == t], 1), n)
                                           for t in range(1, g.depth + 1)])
        self._node = {k: r.detach() for k, r in zip(self.node_types, rels)}
        self.edge_attr_relevance = None
        self.total = float(sum(r.sum() for r in self._node.values()))
        self.edge_types = list(edge_index)
        self.edge_index = torch.cat([edge_index[k].long() + torch.tensor([[self.offset[k[0]]], [self.offset[k[2]]]])
                                     for k in self.edge_types], 1) if self.edge_types else torch.zeros(2, 0).long()
        self.algebra, self.slow_reason = None, "a heterogeneous graph: the queries run masked backwards"

    def _index(self, index, out: Tensor):
        """(the output's row, the global node id) of ``index`` (class docstring); (None, None) if None."""
        if index is None:
            return None, None
        if isinstance(index, tuple):
            if len(index) != 2 or index[0] not in self.count:
                raise ValueError(f"index must be a row of the output or (node type, row) with a node type of x "
                                 f"({self.node_types}), got {index!r}")
            node_type, row = index
        else:
            row, types = index, sorted({ty for _, ty in self.layout.locate(out)}, key=str)
            if len(types) != 1:
                raise ValueError(f"index={index!r}: the output's rows depend on the node types {types}; pass "
                                 f"index=(node type, row)")
            node_type = types[0]
        if isinstance(row, Tensor) and row.numel() == 1 and not row.is_floating_point():
            row = int(row)
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < self.count[node_type]:
            raise ValueError(f"index must be a row of node type {node_type!r} (0..{self.count[node_type] - 1}), "
                             f"got {row!r}")
        if out.dim() == 0 or out.shape[0] != self.count[node_type]:
            raise ValueError(f"index={index!r} is a node of type {node_type!r} ({self.count[node_type]} nodes), "
                             f"but the model's output has shape {tuple(out.shape)}")
        return row, self.offset[node_type] + row

    def _run(self, masks, batch: int, capture: int | None = None):
        rels, captured = self.graph.backward(self.start, masks, batch, capture)
        return torch.cat([r.detach().reshape(batch, r.shape[1], -1).sum(-1) for r in rels], 1).unsqueeze(-1), captured

    def global_walks(self, walks) -> Tensor:
        """Typed walks (a list of sequences of (node type, row)) as global ids (W, L+1); a tensor as is."""
        if isinstance(walks, (list, tuple)) and walks and isinstance(walks[0], (list, tuple)) and walks[0] \
                and isinstance(walks[0][0], (list, tuple)):
            for w, walk in enumerate(walks):
                for t, step in enumerate(walk):
                    if not isinstance(step, (list, tuple)) or len(step) != 2 or step[0] not in self.count:
                        raise ValueError(f"walks[{w}][{t}] must be (node type, row) with a node type of x "
                                         f"({self.node_types}), got {step!r}")
                    ty, j = step
                    if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < self.count[ty]:
                        raise ValueError(f"walks[{w}][{t}] = {step!r}: row must be in 0..{self.count[ty] - 1}")
            if len({len(walk) for walk in walks}) > 1:
                raise ValueError("walks must all have the same length (L+1 typed nodes)")
            return torch.tensor([[self.offset[ty] + j for ty, j in walk] for walk in walks], device=self.x.device)
        return walks

    def walk_scores(self, k: int, signed: bool = True, beam: int | None = None) -> tuple[dict, dict]:
        """As :func:`~lrp_lib.explain.walks.walk_scores`: dicts per node type and per edge type."""
        node, edge = super().walk_scores(k, signed, beam)
        return (dict(zip(self.node_types, node.split(list(self.count.values())))),
                dict(zip(self.edge_types, edge.split([v.shape[1] for v in self.layout.edge_index.values()]))))

    def typed_walks(self, walks: Tensor) -> list[tuple]:
        """Global ids (W, L+1) as typed walks: one tuple of (node type, row) per walk."""
        starts = torch.tensor([self.offset[k] for k in self.node_types])
        flat = walks.detach().cpu().long()
        pos = torch.searchsorted(starts, flat, right=True) - 1
        return [tuple((self.node_types[int(p)], int(j) - int(starts[p])) for p, j in zip(pr, wr))
                for pr, wr in zip(pos, flat)]

    def walk_relevance(self, walks) -> Tensor:
        """As :meth:`WalkModel.walk_relevance`, also of typed walks."""
        return super().walk_relevance(self.global_walks(walks))

    def node_relevance(self) -> dict:
        """{node type: (count,)} the walks' relevance by start node: ``LRPExplainer``'s node relevance."""
        return {k: r.sum(-1) for k, r in self._node.items()}

    def step_relevance(self) -> list[dict]:
        """Per ``propagate`` call, a dict: ``edge_type`` (None where not the input's), ``time`` (its step t),
        ``module``, ``pairs`` (P, 2) its edges (source row, target row); ``walks`` (P,) the relevance of the walks
        whose step t is j -> k (all relations of step t); ``carried`` (P,) what this call's messages j -> k bring to
        j's row of its input (``LRPExplainer``'s edge relevance): ``walks`` plus what earlier biases keep of it,
        where no other relation of the step joins j and k and j != k."""
        out, n = [], self.num_nodes
        for c, (call, e, t) in enumerate(zip(self.layout.calls, self.graph.steps, self.graph.times)):
            pairs = step_pairs(e, n, loops=False).t()
            walks, carried, _ = self._through(pairs, t, c + 1)
            local = pairs - torch.tensor([call["src"][1], call["dst"][1]], device=pairs.device)
            out.append(dict(edge_type=call["edge_type"], time=t, module=call["name"], pairs=local, walks=walks,
                            carried=carried))
        return out

    def edge_relevance(self, part: str = "carried") -> dict:
        """{edge type: (E,)}: per input edge, ``part`` (``"carried"`` or ``"walks"``) of :meth:`step_relevance`
        summed over the steps, split evenly between parallel copies of an edge."""
        if part not in ("carried", "walks"):
            raise ValueError(f"part must be 'carried' or 'walks', got {part!r}")
        out = {k: self.x.new_zeros(v.shape[1]) for k, v in self.layout.edge_index.items()}
        m = self.num_nodes  # more than any row of a node type: keys (source row, target row) are unique
        for s in self.step_relevance():
            if s["edge_type"] is None:
                continue
            ref = self.layout.edge_index[s["edge_type"]].long().to(s["pairs"].device)
            out[s["edge_type"]] += to_edges(ref[0] * m + ref[1], s["pairs"][:, 0] * m + s["pairs"][:, 1], s[part])
        return out


def walk_model(model: nn.Module, x, edge_index, rule="epsilon", **kwargs) -> WalkModel:
    """:class:`HeteroWalkModel` for dicts ``x`` and ``edge_index``, else :class:`WalkModel` (a compiled model through
    its own module, :func:`~lrp_lib.explain.inputs.uncompiled`)."""
    return (HeteroWalkModel if isinstance(x, dict) else WalkModel)(uncompiled(model), x, edge_index, rule, **kwargs)
