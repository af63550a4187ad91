""":class:`WalkModel`, the object every walk query runs on (definitions: :mod:`lrp_lib.explain.walks`)."""
from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor, nn
from torch_geometric.utils import add_self_loops, coalesce, index_to_mask

from lrp_lib.core.composites import Composite, get_composite, message_passing_layers
from lrp_lib.core.rules import Epsilon, Gamma, Rule, get_rule
from lrp_lib.core.validation import check_edge_index
from lrp_lib.explain.accounting import lost_relevance
from lrp_lib.explain.inputs import check_inputs
from lrp_lib.explain.walks.algebra import NotDecomposable, WalkAlgebra, find_steps
from lrp_lib.explain.walks.defined import WalksUndefinedError, check_walks_defined
from lrp_lib.explain.walks.graph import WalkGraph
import lrp_lib.explain.walks.search as walk_search

__all__ = ["WalkModel", "WalksUndefinedError", "gamma_schedule", "explained_start", "CHUNK",
           "composite_of", "step_pairs", "check_walks"]

CHUNK = 1024            # rows of one batched masked backward
_ALGEBRA_FROM = 64      # rows (walks, weightings) from which a query builds the algebra


def gamma_schedule(depth: int, start: float = 3.0, stop: float = 0.0, eps: float = 1e-6) -> list[Rule]:
    r"""One rule per message-passing layer, :math:`\gamma` = ``np.linspace(start, stop, depth)`` (sGNN-LRP's
    schedule, Xiong et al., ICML 2022): ``Epsilon(0)`` (LRP-0) where :math:`\gamma = 0`, else ``Gamma(gamma, eps)``.
    Pass the list as ``rule=``; the layers after the last message-passing module (the head) get the last rule."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an int >= 1 (the number of message-passing layers), got {depth!r}")
    gammas = [start] if depth == 1 else [start + (stop - start) * i / (depth - 1) for i in range(depth - 1)] + [stop]
    return [Epsilon(0.0) if g == 0 else Gamma(float(g), eps) for g in gammas]


def composite_of(rule, model: nn.Module) -> Composite:
    """The Composite of ``rule``; a list: one rule per (outermost) message-passing module of ``model``
    (``to_hetero`` and ``HeteroConv`` have one per edge type and layer), in the order of its modules."""
    if not isinstance(rule, (list, tuple)):
        return get_composite(rule)
    if len(rule) == 0:
        raise ValueError("rule is an empty list: give one rule, or one rule per message-passing layer")
    rules = []
    for i, r in enumerate(rule):
        try:
            rules.append(get_rule(r))
        except (ValueError, TypeError) as e:
            raise type(e)(f"rule[{i}]: {e}") from None
    layers = message_passing_layers(model)
    if len(rule) != len(layers):
        raise ValueError(f"rule is a list of {len(rule)} rule(s), one per message-passing module, but the "
                         f"model has {len(layers)} message-passing module(s): give one rule per module")
    return Composite(linear=rules[-1], layers=rules, epsilon=getattr(rules[-1], "eps", 1e-6) or 0.0)


def _check_index(index, n: int) -> int:
    if isinstance(index, Tensor):
        if index.numel() != 1 or index.is_floating_point():
            raise ValueError(f"index must be one node id (an int), got a tensor of shape {tuple(index.shape)}")
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"index must be an int (the explained node), got {type(index).__name__}")
    if not 0 <= index < n:
        raise ValueError(f"index must be a node id in 0..{n - 1}, got {index}")
    return index


def explained_start(out, index, target) -> Tensor:
    """The output's relevance: the explained entry (row ``index``, column ``target``) keeps its value
    (a class column's logit as ``LRPExplainer`` starts from it)."""
    view = sel = torch.zeros_like(out, dtype=torch.bool)
    if index is not None:
        if out.dim() == 0 or out.shape[0] <= index:
            raise ValueError(f"index={index} but the model's output has shape {tuple(out.shape)} (no row {index}); "
                             f"index is for node-level outputs (one row per node)")
        view = view[index]
    if target is not None:
        if view.dim() == 0 or view.shape[-1] <= target or target < 0:
            raise ValueError(f"target={target} is not a column of the model's output {tuple(out.shape)}")
        view = view[..., target]
    if view.numel() != 1:
        raise ValueError(f"the explained output must be one number, but the model's output has shape "
                         f"{tuple(out.shape)}: pass index= (node-level) and/or target= (the class column)")
    view.fill_(True)
    return torch.where(sel, out.detach(), torch.zeros_like(out.detach()))


class WalkModel:
    """The model run once under the forward rules (``ForwardMode``), cut at its message-passing steps; build it to
    reuse one forward pass for several queries.

    Attributes: ``depth`` (L), ``output`` (the explained value), ``steps`` (per step, the (2, P) pairs ``(j, k)`` a
    walk may take: the propagated edges and every self step, sorted by ``(k, j)``), ``bias_relevance`` (what biases
    and stabilisers keep), ``edge_attr_relevance`` (E x D, or None), ``total`` (the relevance that reaches ``x``: the
    sum over all walks).  Raises :class:`~lrp_lib.explain.walks.defined.WalksUndefinedError` (a ValueError) where
    walks are not defined (:mod:`lrp_lib.explain.walks.defined`)."""

    def __init__(self, model: nn.Module, x: Tensor, edge_index: Tensor, rule="epsilon", *,
                 index: int | None = None, target: int | None = None, **model_kwargs):
        check_inputs(model, x, edge_index, **model_kwargs)
        edge_index = check_edge_index(edge_index, x.shape[0], "edge_index")  # (walks take the edges, no adjacency)
        self.num_nodes, self.edge_index = x.shape[0], edge_index.long()
        self.index = None if index is None else _check_index(index, self.num_nodes)
        self.x = x.detach().clone().requires_grad_(True)
        inputs, attr = {"x": self.x}, model_kwargs.get("edge_attr")
        if isinstance(attr, Tensor) and attr.is_floating_point():
            model_kwargs = dict(model_kwargs, edge_attr=attr.detach().clone().requires_grad_(True))
            inputs["edge_attr"] = model_kwargs["edge_attr"]
        g = self._record(model, rule, inputs, lambda: model(self.x, edge_index, **model_kwargs))
        rel, *attr_rel = self._explain(self.index, target, [step_pairs(e, self.num_nodes) for e in g.steps])
        self._node = rel.detach()
        self.edge_attr_relevance = attr_rel[0].detach() if attr_rel else None
        self.total, self.slow_reason = float(self._node.sum()), None

    def _record(self, model: nn.Module, rule, inputs: dict, call, layout=None) -> WalkGraph:
        """Record ``call()`` in eval mode under ``rule`` (:meth:`WalkGraph.record`); raise where it has no walks."""
        training = model.training
        model.eval()
        try:
            self.graph = g = WalkGraph.record(model, composite_of(rule, model), inputs, call, self.num_nodes, layout)
        finally:
            model.train(training)
        if g.depth == 0:
            raise ValueError("model: walks need at least one message-passing layer whose messages depend on x "
                             "(a MessagePassing module called in model.forward)")
        if not isinstance(g.output, Tensor) or not g.mode.is_marked(g.output):
            raise ValueError("the model's output does not depend on x through autograd: model.forward detaches it")
        return g

    def _explain(self, row, target, steps: list) -> list:
        """Check that walks are defined for the entry (``row``, ``target``), set ``steps``; the inputs' relevance."""
        g = self.graph
        self.start = explained_start(g.output, row, target)
        check_walks_defined(g, self.start, self.index)
        self.output, self.steps = self.start.sum(), steps
        rels, _ = g.backward(self.start, lambda u: None, None)
        self.bias_relevance = g.mode.tally.total(g.mode.tally.absorbed)
        lost_relevance(self.start, rels, self.bias_relevance, g.mode.detached)  # (warns where it exceeds rounding)
        return rels

    @cached_property
    def algebra(self) -> WalkAlgebra | None:
        """The walk algebra (:mod:`lrp_lib.explain.walks.algebra`), built on first use (or assigned); None where the
        model does not decompose (``slow_reason`` says why; the queries then run masked backwards)."""
        try:
            return WalkAlgebra(self)
        except NotDecomposable as e:
            self.slow_reason = str(e)
            return None

    def _use_algebra(self, rows: int) -> bool:
        """Whether a query of ``rows`` rows uses the algebra: once built, or from ``_ALGEBRA_FROM`` rows on."""
        return (rows >= _ALGEBRA_FROM or "algebra" in vars(self)) and self.algebra is not None

    @property
    def depth(self) -> int:
        """L, the number of message-passing steps: a walk has L + 1 nodes."""
        return self.graph.depth

    def _run(self, masks, batch: int, capture: int | None = None):
        (rel, *_), captured = self.graph.backward(self.start, masks, batch, capture)
        return rel.detach(), captured

    def _through(self, pairs: Tensor, t: int, layer: int):
        """For ``pairs`` (P, 2) ``(j, k)`` of step t, each (P,): the walks through j -> k at step t, what ``layer``'s
        messages carry to j's row, and what they send into the ``edge_attr`` of the input edges j -> k (or None)."""
        n, e = self.num_nodes, self.edge_index
        walks, carried, attrs = [], [], []
        for chunk in pairs.split(CHUNK):
            a, b = torch.nn.functional.one_hot(chunk.t(), n)
            rel, cap = self._run(lambda u: a if u == t - 1 else (b if u == t else None), chunk.shape[0], layer)
            inp = cap.get("input")
            walks.append(rel.sum((1, 2)))
            carried.append(inp.gather(1, chunk[:, :1]).view(-1) if inp is not None else rel.new_zeros(chunk.shape[0]))
            if "attr" in cap:  # the edge_attr of the input edges j -> k that the step's messages read
                own = (e[0].unsqueeze(0) == chunk[:, :1]) & (e[1].unsqueeze(0) == chunk[:, 1:])
                attrs.append((cap["attr"] * own).sum(1))
        return torch.cat(walks), torch.cat(carried), torch.cat(attrs) if attrs else None

    def walk_relevance(self, walks: Tensor) -> Tensor:
        r"""As :func:`walk_relevance`, on this recorded forward pass; without the algebra, one masked backward per
        distinct suffix :math:`(j_1, \dots, j_L)`, whose relevance at row :math:`j_0` of ``x`` is the walk's (batches
        of about 40,000 / N suffixes)."""
        walks = check_walks(walks, self)
        if walks.numel() and self._use_algebra(walks.shape[0]):
            return torch.cat([self.algebra.walk_relevance(c) for c in walks.split(65536)]).detach()
        n = self.num_nodes
        suffix, inverse = torch.unique(walks[:, 1:], dim=0, return_inverse=True)
        table = []
        for chunk in suffix.split(max(16, min(CHUNK, 40000 // max(n, 1)))):
            hot = [None, *torch.nn.functional.one_hot(chunk.t(), n)]
            table.append(self._run(lambda u: hot[u], chunk.shape[0])[0].sum(-1))
        return torch.cat(table)[inverse, walks[:, 0]]

    def weighted_relevance(self, weight: Tensor) -> Tensor:
        r""":math:`\sum_w \prod_{t=0}^{L} \mathrm{weight}[j_t]\, R_w` for node weights (N,) or (M, N):
        one masked backward per row (batched)."""
        w = weight.to(self.x.dtype).to(self.x.device)
        if w.dim() == 1:
            return self.weighted_relevance(w.unsqueeze(0))[0]
        if self._use_algebra(w.shape[0]):
            return self.algebra.weighted(w).detach()
        # (no rows: split gives one empty chunk)
        return torch.cat([self._run(lambda u: rows, rows.shape[0])[0].sum((1, 2)) for rows in w.split(CHUNK)])

    def subgraph_relevance(self, nodes, alpha: float = 0.0) -> Tensor:
        """As :func:`subgraph_relevance`, on this recorded forward pass."""
        alpha = walk_search.check_alpha(alpha)
        inside = _node_mask(nodes, self.num_nodes).to(self.x.device).to(self.x.dtype)
        if alpha == 0:
            return self.weighted_relevance(inside)
        outside = (1 - inside) * alpha
        return self.weighted_relevance(inside + outside) - self.weighted_relevance(outside)

    def node_relevance(self) -> Tensor:
        """(N,) the walks' relevance summed by start node: ``LRPExplainer``'s node relevance."""
        return self._node.sum(-1)

    def step_relevance(self) -> list[tuple[Tensor, Tensor, Tensor, Tensor | None]]:
        """Per step t = 1..L, ``(pairs, walks, carried, edge_attr)``, each (P,) but pairs (P, 2) ``(j, k)``: the
        relevance of the walks whose step t is j -> k; what the step's messages bring to j's row of its input
        (``LRPExplainer``'s edge relevance of j -> k at that step, without ``edge_attr``: ``walks`` plus what
        earlier biases keep of it); what they send into the ``edge_attr`` of the input edges j -> k (or None).
        One batched backward per step."""
        return [(pairs, *self._through(pairs, t + 1, t + 1)) for t, pairs in enumerate(p.t() for p in self.steps)]

    # ---- the searches (lrp_lib.explain.walks.search), on this recorded forward pass
    top_walks = walk_search.top_of
    walk_scores = walk_search.scores_of
    greedy_subgraph = walk_search.greedy


def step_pairs(edges: Tensor, n: int, loops: bool = True) -> Tensor:
    """The (2, P) unique steps (j, k) of a propagate, sorted by (k, j): its edges and, if ``loops``, self steps."""
    return coalesce(add_self_loops(edges, num_nodes=n)[0] if loops else edges, num_nodes=n, sort_by_row=False)


def check_walks(walks, wm: WalkModel) -> Tensor:
    """walks as long (W, L+1) on the model's device, with errors naming the argument."""
    walks = torch.as_tensor(walks)
    if walks.is_floating_point() or walks.is_complex() or walks.dtype == torch.bool:
        raise TypeError(f"walks must be an integer tensor (W, L+1) of node ids, got dtype {walks.dtype}")
    walks = walks.long().to(wm.x.device)
    if walks.dim() == 1:
        walks = walks.unsqueeze(0)
    L, n = wm.depth, wm.num_nodes
    if walks.dim() != 2 or walks.shape[1] != L + 1:
        raise ValueError(f"walks must have shape (W, {L + 1}): the model has {L} message-passing step(s), so a "
                         f"walk is {L + 1} node ids (j_0 input node, ..., j_{L} last receiver); got shape "
                         f"{tuple(walks.shape)}")
    if walks.numel() and (int(walks.min()) < 0 or int(walks.max()) >= n):
        bad = ((walks < 0) | (walks >= n)).nonzero()[0]
        raise ValueError(f"walks[{int(bad[0])}, {int(bad[1])}] = {int(walks[bad[0], bad[1]])} is not a node id "
                         f"(0..{n - 1})")
    for t, pairs in enumerate(wm.steps):
        bad = ~find_steps(pairs[0], pairs[1], walks[:, t], walks[:, t + 1], n)[1]
        if bool(bad.any()):
            w = int(bad.nonzero()[0, 0])
            j, k = int(walks[w, t]), int(walks[w, t + 1])
            modules = ", ".join(f"'{m}'" for m, u in zip(wm.graph.names, wm.graph.times) if u == t + 1)
            raise ValueError(f"walks[{w}] steps from node {j} to node {k} at step {t + 1} "
                             f"({modules}), which is not an edge of that step (no message {j} -> {k})")
    if wm.index is not None and bool((walks[:, -1] != wm.index).any()):
        w = int((walks[:, -1] != wm.index).nonzero()[0, 0])
        raise ValueError(f"walks[{w}] ends at node {int(walks[w, -1])}, but the explained node is index={wm.index}: "
                         f"for a node-level output every walk ends at the explained node")
    return walks


def _node_mask(nodes, n: int) -> Tensor:
    if not isinstance(nodes, Tensor):
        nodes = torch.as_tensor(list(nodes), dtype=torch.long)
    if nodes.dtype == torch.bool:
        if nodes.shape[-1] != n or nodes.dim() > 2:
            raise ValueError(f"nodes as a boolean mask must have shape ({n},) or (M, {n}), got {tuple(nodes.shape)}")
        return nodes
    if nodes.is_floating_point():
        raise TypeError(f"nodes must be node ids (an integer tensor or list) or a boolean mask, got dtype "
                        f"{nodes.dtype}")
    nodes = nodes.long().view(-1)
    if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= n):
        bad = int(nodes[(nodes < 0) | (nodes >= n)][0])
        raise ValueError(f"nodes contains {bad}, not a node id (0..{n - 1})")
    return index_to_mask(nodes, n)
