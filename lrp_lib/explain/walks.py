r"""GNN-LRP: the relevance of walks, of node sets, and the most relevant walks.

GNN-LRP (Schnake et al., *Higher-Order Explanations of Graph Neural Networks via Relevant Walks*,
TPAMI 2021) gives each walk :math:`(j_0, j_1, \dots, j_L)` through an :math:`L`-layer graph network
its relevance: :math:`j_0` is the input node, :math:`j_t` the node that receives the message at
layer :math:`t`.  Layer :math:`t` computes, for each receiving node :math:`K`,

.. math::  z_{K} = \sum_{\tau} \Big(\sum_{J \to K \text{ of type } \tau} c_{KJ}\, h_{J}\Big) W_\tau + b ,

a sum of messages (GCN: one type, the normalised edges and self-loops; GraphConv and SAGEConv: a
root type :math:`J = K` and a neighbour type; GIN: the aggregation :math:`(1+\epsilon) h_K +
\sum_J h_J` with :math:`W = I`, its ``nn`` following as node-wise layers).  The walk's relevance
is the nested LRP backward in which layer :math:`t` keeps only the message from :math:`j_{t-1}`
to :math:`j_t`:

.. math::  R_{j_0 \dots j_L} = \sum_{f_0, \dots, f_L}
           \frac{h_{j_0 f_0} c_{j_1 j_0} w'_{f_0 f_1}}{z'_{j_1 f_1}} \cdots
           \frac{h_{j_{L-1} f_{L-1}} c_{j_L j_{L-1}} w'_{f_{L-1} f_L}}{z'_{j_L f_L}}\, R_{j_L f_L}

(node-wise layers between the message passing, such as ReLUs and GIN's MLP, apply their own rule
in between), with :math:`w' = w + \gamma w^+` and :math:`z'` the denominator of all contributions
to the unit (bias :math:`b + \gamma b^+` included) for the gamma rule, :math:`w' = w`,
:math:`z' = z + \epsilon\,\mathrm{sign}(z)` for the epsilon rule.  Under LRP-0 (``rule="z"``) on
a bias-free network of ReLUs, linear maps and sum/mean pools, this is the walk's exact
contribution to the output in the network linearised at its ReLU gates, so **the walks' relevances
sum to the output**, and summed over the walks that start at node :math:`j` they give node
:math:`j`'s LRP relevance (walk relevance refines node relevance).

How it is computed (the autograd trick).  One forward pass of the model's own ``forward`` runs
with the convolutions (and, for a rule other than LRP-0, every ``Linear``) replaced by the same
computation written so that its *gradient* is the rule: :math:`z = z' s + (z - z' s)_{\text{detached}}`,
:math:`s = z / z'` detached, so the value is unchanged and ``input * grad`` is the rule's relevance.
The output of each message-passing layer is cut from the graph, which splits the network into
layers of message passing (sparse, one :math:`D \times F` map per message type) and node-wise
segments; the node-wise segments' rule-Jacobians are taken once per layer with autograd (the
identity where a layer reads the previous output directly, a diagonal from one vector-Jacobian
product where only ReLUs act, else one product per feature: an MLP).  Then

* :func:`walk_relevance` multiplies, for each walk, the output's rule-gradient at :math:`j_L` by
  the layers' step maps back to :math:`x_{j_0}`: :math:`O(L F^2)` per walk, all walks batched.
* :func:`subgraph_relevance` is the same backward with every layer masked to :math:`S` (the sum
  over walks inside :math:`S`, the sGNN-LRP relevance of Xiong et al., ICML 2022):
  one masked message-passing backward, :math:`O(L (E F + N F^2))`, no enumeration.
* :func:`top_walks` finds the :math:`k` walks of largest :math:`|R|` by branch and bound from the
  output side (see its docstring): exact.
* :func:`walk_scores` turns the top :math:`k` walks into node and edge scores (each walk adds its
  relevance to every position it occupies and every input edge it steps along), to score against
  node or edge ground truth.
* :func:`greedy_subgraph` is sGNN-LRP's greedy search (Xiong et al.): nodes added one at a time,
  each maximising the relevance of the grown set (optionally their :math:`\alpha`-relaxation,
  ``subgraph_relevance(alpha=)``), all candidates of a step in one batched masked backward; the
  rank of each node is its score for a node AUROC.
* :class:`WalkModel` keeps the recorded pass for several queries, and gives the walk marginals:
  ``node_relevance()`` (walks by start node: LRP node relevance) and ``step_relevance()`` (walks by
  the step they take at each layer: summed over layers, LRP edge relevance).

Rules per layer: ``rule`` is one rule for every layer, or a list with one rule per message-passing
layer (their number must match the calls), e.g. :func:`gamma_schedule` (:math:`\gamma` from 3 at
the first layer to 0 at the last, as in Xiong et al.'s code).  Layer :math:`t`'s rule applies to its
convolution and to every ``Linear`` called after it and before the next convolution (GIN's ``nn``,
the MLP after it, the head after the last layer); a ``Linear`` before the first convolution gets
the first layer's rule.

Numerics: the gamma and epsilon rules divide by :math:`z'`; on random (untrained) models in
float32 this makes results differ between CPU and GPU by about :math:`10^{-4}` relative (float64:
:math:`10^{-10}`), LRP-0 by float rounding only.  Compute stored results in float64.

The models: a subset of what :class:`~lrp_lib.explain.explainer.LRPExplainer` explains: those built
from ``GCNConv``,
``GraphConv`` (aggr add or mean), ``GINConv`` (aggr add or mean) and ``SAGEConv`` (aggr add or
mean, no project/normalize) with ``Linear``/``ReLU`` layers (PyG ``MLP`` without norms included)
between them and in the head, and global add/mean/max pools, for graph- and node-level outputs.
The walk's layers are the calls of these convolutions in the order ``model.forward`` makes them;
between two calls only node-wise layers may act (checked).  Other node-wise operations pass their
gradient (LRP-0 for linear maps).  One difference from ``LRPExplainer`` by design: GraphConv's
and SAGEConv's root and neighbour terms share one denominator (Schnake et al.'s rule for the whole
layer), where ``LRPExplainer`` first splits between the two terms; both agree under LRP-0.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, GINConv, GraphConv, MessagePassing, SAGEConv
from torch_geometric.nn import Linear as PyGLinear
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lrp_lib.core.rules import AlphaBeta, Epsilon, Gamma, Rule, get_rule
from lrp_lib.core.validation import check_edge_index, check_node_features

__all__ = ["walk_relevance", "top_walks", "subgraph_relevance", "all_walks", "WalkModel", "walk_scores",
           "greedy_subgraph", "GreedySubgraph", "gamma_schedule"]


# ------------------------------------------------------------------ the rule
def _rule_params(rule) -> tuple[float, float]:
    """(gamma, eps) of the rule; (0, 0) is LRP-0."""
    rule = get_rule(rule)
    if isinstance(rule, Gamma):
        return rule.gamma, rule.eps
    if isinstance(rule, Epsilon):
        return 0.0, rule.eps
    raise ValueError(f"rule must be an epsilon rule ('z' = LRP-0, 'epsilon', Epsilon(eps)) or a gamma rule "
                     f"('gamma', Gamma(gamma, eps)) for walk relevance, got {rule!r}"
                     + (" (alpha-beta splits positive and negative parts: not one backward)"
                        if isinstance(rule, AlphaBeta) else ""))


def _rule_list(rule) -> list[tuple[float, float]] | None:
    """(gamma, eps) per message-passing layer for a list of rules; None for one rule."""
    if not isinstance(rule, (list, tuple)):
        return None
    if len(rule) == 0:
        raise ValueError("rule is an empty list: give one rule, or one rule per message-passing layer")
    out = []
    for i, r in enumerate(rule):
        try:
            out.append(_rule_params(r))
        except (ValueError, TypeError) as e:
            raise type(e)(f"rule[{i}]: {e}") from None
    return out


def gamma_schedule(depth: int, start: float = 3.0, stop: float = 0.0, eps: float = 1e-6) -> list[Rule]:
    r"""One rule per message-passing layer with :math:`\gamma` going linearly from ``start`` at the first
    layer to ``stop`` at the last (``np.linspace(start, stop, depth)``): the schedule of sGNN-LRP's code
    (Xiong et al., ICML 2022, ``gammas = np.linspace(3, 0, model_depth)`` in ``subgraph_relevance.py``).
    A layer with :math:`\gamma = 0` gets LRP-0 (``Epsilon(0)``), as there (their ``lrpforward`` leaves
    such a layer's gradient alone); the others ``Gamma(gamma, eps)``.  Their stabiliser adds
    :math:`10^{-6}` to the denominator, ours :math:`\epsilon\,\mathrm{sign}(z')`: the same where
    :math:`z' > 0`.  Pass the list as ``rule=`` to any function here."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an int >= 1 (the number of message-passing layers), got {depth!r}")
    gammas = [start] if depth == 1 else [start + (stop - start) * i / (depth - 1) for i in range(depth - 1)] + [stop]
    return [Epsilon(0.0) if g == 0 else Gamma(float(g), eps) for g in gammas]


def _modified(w: Tensor, gamma: float) -> Tensor:
    return w + gamma * w.clamp(min=0) if gamma else w


def _scale(z: Tensor, z_mod: Tensor, eps: float) -> Tensor:
    """s = z / (z' + eps sign z'), sign(0) = +1; 0 where the denominator is 0."""
    den = z_mod + eps * torch.where(z_mod >= 0, 1.0, -1.0).to(z_mod.dtype) if eps else z_mod
    return torch.where(den == 0, torch.zeros_like(z), z / torch.where(den == 0, torch.ones_like(den), den))


def _gradient_trick(z: Tensor, z_mod: Tensor, s: Tensor) -> Tensor:
    """Value z, gradient that of z' * s (s constant)."""
    t = z_mod * s
    return t + (z - t).detach()


# ------------------------------------------------------------------ one layer
@dataclass
class _Layer:
    """One call of a message-passing layer: z_K = sum_tau (sum_{J->K, tau} c h_J) W_tau + b."""
    name: str
    num_nodes: int
    src: Tensor                 # (P,) sender J of each (J, K) pair, pairs sorted by (K, J)
    dst: Tensor                 # (P,) receiver K
    coef: Tensor                # (P, T) summed coefficient of each message type
    weights: list               # T modified maps (D x F) or None for the identity
    scale: Tensor | None        # (N, F) s = z / z' (None: 1)
    ptr: Tensor                 # (N + 1,) CSR over dst
    u: Tensor | None = None     # the layer's input (N x D) in the recorded graph
    z_leaf: Tensor | None = None
    jac: "_Jacobian | None" = None  # d u / d z_prev under the rule, node by node
    u_value: Tensor | None = None  # the layer input's values (N x D)

    def key(self, j: Tensor, k: Tensor) -> Tensor:
        return k * self.num_nodes + j

    def find(self, j: Tensor, k: Tensor) -> Tensor:
        """Index of the pair (j -> k), -1 where it is not a step of this layer."""
        keys = self.key(self.src, self.dst)
        q = self.key(j, k)
        pos = torch.searchsorted(keys, q).clamp(max=max(keys.numel() - 1, 0))
        ok = (keys.numel() > 0) & (keys[pos] == q) if keys.numel() else torch.zeros_like(q, dtype=torch.bool)
        return torch.where(ok, pos, torch.full_like(pos, -1))

    def step_back(self, v: Tensor, k: Tensor, pair: Tensor) -> Tensor:
        """Gradient at the layer input row J from gradient v at output row K through pair (J->K):
        sum_tau c_tau W'_tau (s_K * v)."""
        if self.scale is not None:
            v = v * self.scale[k]
        out = None
        for t, w in enumerate(self.weights):
            part = v if w is None else v @ w.T
            part = part * self.coef[pair, t].unsqueeze(-1)
            out = part if out is None else out + part
        return out

    def forward_all(self, p: Tensor) -> Tensor:
        """Row vectors p (N, D) at the layer input to (N, F) at its output: sum over pairs of the step map."""
        out = None
        for t, w in enumerate(self.weights):
            part = p if w is None else p @ w
            msg = part[self.src] * self.coef[:, t].unsqueeze(-1)
            agg = torch.zeros(self.num_nodes, part.shape[-1], dtype=part.dtype, device=part.device)
            agg.index_add_(0, self.dst, msg)
            out = agg if out is None else out + agg
        return out if self.scale is None else out * self.scale

    def back_all(self, g: Tensor, mask: Tensor | None) -> Tensor:
        """Masked backward of the whole layer: g (..., N, F) -> (..., N, D), only pairs inside the mask."""
        if self.scale is not None:
            g = g * self.scale
        out = None
        for t, w in enumerate(self.weights):
            part = g if w is None else g @ w.T                     # (..., N, D)
            msg = part[..., self.dst, :] * self.coef[:, t].unsqueeze(-1)
            if mask is not None:
                msg = msg * (mask[..., self.src] & mask[..., self.dst]).unsqueeze(-1).to(msg.dtype)
            agg = torch.zeros(*part.shape[:-2], self.num_nodes, part.shape[-1], dtype=part.dtype, device=part.device)
            agg.index_add_(agg.dim() - 2, self.src, msg)
            out = agg if out is None else out + agg
        return out


def _pairs(name, n, src, dst, coef, types, num_types, dtype):
    """Unique (J, K) pairs sorted by (K, J) with their summed coefficient per type, and the CSR."""
    keys = dst * n + src
    uniq, inverse = torch.unique(keys, sorted=True, return_inverse=True)
    table = torch.zeros(uniq.numel(), num_types, dtype=dtype, device=src.device)
    table.index_put_((inverse, types), coef.to(dtype), accumulate=True)
    p_src, p_dst = uniq % n, torch.div(uniq, n, rounding_mode="floor")
    counts = torch.bincount(p_dst, minlength=n)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    return p_src, p_dst, table, ptr


def _mean_coef(dst: Tensor, n: int, w: Tensor) -> Tensor:
    count = torch.bincount(dst, minlength=n).to(w.dtype).clamp(min=1)
    return w / count[dst]


def _aggr(m, name):
    aggr = m.aggr if isinstance(m.aggr, str) else None
    if aggr in ("add", "sum"):
        return "add"
    if aggr == "mean":
        return "mean"
    raise ValueError(f"walk relevance supports {name} with aggr 'add' or 'mean', got {m.aggr!r}")


# ------------------------------------------------------------------ recording
class WalkModel:
    """The model run once, cut at its message-passing layers, under a rule or one rule per layer (used
    by every function here; build it yourself to reuse one forward pass for several queries).

    Attributes: ``layers`` (one per message-passing call, in order), ``output`` (the explained
    scalar), ``x`` and ``grad_out`` (the rule-gradient of the output at the last layer's output,
    N x F_L).  ``index`` is the explained node of a node-level output (None: graph-level).
    """

    def __init__(self, model: nn.Module, x: Tensor, edge_index: Tensor, rule="epsilon", *,
                 index: int | None = None, target: int | None = None, **model_kwargs):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        x = check_node_features(x, "x")
        edge_index = check_edge_index(edge_index, x.shape[0], "edge_index")
        self._rules = _rule_list(rule)
        if self._rules is None:
            self.gamma, self.eps = _rule_params(rule)
            self.exact = self.gamma == 0 and self.eps == 0
        else:  # one rule per message-passing layer
            self.gamma = self.eps = None
            self.exact = all(g == 0 and e == 0 for g, e in self._rules)
        self.num_nodes = x.shape[0]
        self.edge_index = edge_index.long()
        self.layers: list[_Layer] = []
        self.x = x.detach().clone().requires_grad_(True)
        self.index = None if index is None else _check_index(index, self.num_nodes)
        training = model.training
        model.eval()
        try:
            with torch.enable_grad(), self._patched(model):
                out = model(self.x, edge_index, **model_kwargs)
            self.output = _explained(out, self.index, target)
            self._cut()
        finally:
            model.train(training)

    # ---- patching
    @contextlib.contextmanager
    def _patched(self, model):
        saved = []
        convs = (GCNConv, GraphConv, GINConv, SAGEConv)
        try:
            for name, m in model.named_modules():
                if isinstance(m, convs):
                    saved.append((m, m.__dict__.get("forward")))
                    m.forward = self._conv_forward(m, name or type(m).__name__)
                elif isinstance(m, MessagePassing):
                    raise ValueError(f"walk relevance does not support module '{name}' of type {type(m).__name__}; "
                                     f"supported message passing: GCNConv, GraphConv, GINConv, SAGEConv")
                elif isinstance(m, (nn.Linear, PyGLinear)) and not self.exact:
                    saved.append((m, m.__dict__.get("forward")))
                    m.forward = self._linear_forward(m)
            yield
        finally:
            for m, forward in reversed(saved):
                if forward is None:
                    del m.forward
                else:
                    m.forward = forward

    def _params(self, t: int, name: str = "") -> tuple[float, float]:
        """(gamma, eps) of message-passing layer t (0-based)."""
        if self._rules is None:
            return self.gamma, self.eps
        if t >= len(self._rules):
            raise ValueError(f"rule is a list of {len(self._rules)} rule(s), one per message-passing layer, but "
                             f"model.forward calls message-passing layer {t + 1} ({name}): give one rule per layer")
        return self._rules[t]

    def _linear_forward(self, m):
        def forward(x):
            # the rule of the message-passing layer called last (the first one before any)
            gamma, eps = self._params(max(len(self.layers) - 1, 0))
            w, b = m.weight, m.bias
            z = F.linear(x, w, b)
            if gamma == 0 and eps == 0:  # LRP-0: the plain gradient
                return z
            z_mod = F.linear(x, _modified(w, gamma), None if b is None else _modified(b, gamma))
            return _gradient_trick(z, z_mod, _scale(z, z_mod, eps).detach())
        return forward

    def _conv_forward(self, m, name):
        def forward(x, edge_index, *args, **kwargs):
            return self._conv(m, name, x, edge_index, *args, **kwargs)
        return forward

    def _conv(self, m, name, x, edge_index, edge_weight=None, size=None):
        if isinstance(x, (tuple, list)):
            raise ValueError(f"walk relevance does not support {name} on bipartite (x_src, x_dst) input")
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"{name} must be called with a dense edge_index of shape (2, E)")
        n, dtype = x.shape[0], x.dtype
        gamma, eps = self._params(len(self.layers), name)
        edge_index = edge_index.long()
        e = edge_index.shape[1]
        ones = x.new_ones(e)
        w_edge = ones if edge_weight is None else edge_weight.detach().to(dtype)
        nodes = torch.arange(n, device=x.device)
        bias = None
        if isinstance(m, GCNConv):
            if m.flow != "source_to_target":
                raise ValueError(f"walk relevance supports GCNConv with flow 'source_to_target' ({name})")
            if m.normalize:
                ei, w = gcn_norm(edge_index, w_edge if edge_weight is not None else None, n, m.improved,
                                 m.add_self_loops, m.flow, dtype)
            else:
                ei, w = edge_index, w_edge
            src, dst, coef, types = ei[0], ei[1], w, torch.zeros_like(ei[0])
            weights = [m.lin.weight.T]
            bias = m.bias
        elif isinstance(m, GINConv):
            aggr = _aggr(m, name)
            c = w_edge if aggr == "add" else _mean_coef(edge_index[1], n, w_edge)
            src = torch.cat([edge_index[0], nodes])
            dst = torch.cat([edge_index[1], nodes])
            coef = torch.cat([c, (1 + m.eps.detach()).to(dtype).expand(n)])
            types = torch.zeros_like(src)
            weights = [None]
        else:  # GraphConv, SAGEConv: root and neighbour terms
            aggr = _aggr(m, name)
            if isinstance(m, SAGEConv):
                if m.project or m.normalize:
                    raise ValueError(f"walk relevance supports SAGEConv without project/normalize ({name})")
                root_w = m.lin_r.weight.T if m.root_weight else None
                rel_w, bias = m.lin_l.weight.T, m.lin_l.bias
            else:
                root_w, rel_w, bias = m.lin_root.weight.T, m.lin_rel.weight.T, m.lin_rel.bias
            c = w_edge if aggr == "add" else _mean_coef(edge_index[1], n, w_edge)
            src, dst, coef = edge_index[0], edge_index[1], c
            types = torch.ones_like(src)
            weights = [rel_w, rel_w]  # type 0 (root) replaced below
            if root_w is not None:
                src, dst = torch.cat([src, nodes]), torch.cat([dst, nodes])
                coef = torch.cat([coef, x.new_ones(n)])
                types = torch.cat([types, torch.zeros(n, dtype=torch.long, device=x.device)])
                weights[0] = root_w
            else:
                weights[0] = rel_w * 0
        num_types = len(weights)
        # the forward value (same as PyG's, aggregation before the weight)
        msgs = x[src] * coef.unsqueeze(-1)
        z = z_mod = None
        for t, w in enumerate(weights):
            agg = torch.zeros(n, x.shape[1], dtype=dtype, device=x.device)
            agg = agg.index_add(0, dst[types == t], msgs[types == t])
            zt = agg if w is None else agg @ w
            zt_mod = agg if w is None else agg @ _modified(w, gamma)
            z = zt if z is None else z + zt
            z_mod = zt_mod if z_mod is None else z_mod + zt_mod
        if bias is not None:
            z = z + bias
            z_mod = z_mod + _modified(bias, gamma)
        # a weight-free aggregation (GIN's) splits in proportion to the messages: no rule, no scale
        exact = gamma == 0 and eps == 0
        scale = None if exact or all(w is None for w in weights) else _scale(z, z_mod, eps).detach()
        p_src, p_dst, table, ptr = _pairs(name, n, src, dst, coef, types, num_types, dtype)
        layer = _Layer(name, n, p_src, p_dst, table, [None if w is None else _modified(w, gamma).detach()
                                                      for w in weights], scale, ptr, u=x)
        z_leaf = z.detach().clone().requires_grad_(True)
        layer.z_leaf = z_leaf
        self.layers.append(layer)
        out = z_leaf
        if isinstance(m, GINConv):
            out = m.nn(out)
        return out

    # ---- cutting into segments
    def _cut(self):
        if not self.layers:
            raise ValueError("model: walk relevance needs at least one message-passing layer (GCNConv, GraphConv, "
                             "GINConv, SAGEConv) called in model.forward")
        if self._rules is not None and len(self._rules) != len(self.layers):
            raise ValueError(f"rule is a list of {len(self._rules)} rules, one per message-passing layer, but "
                             f"model.forward calls {len(self.layers)} message-passing layer(s): give one rule per "
                             f"layer")
        leaves = [self.x] + [layer.z_leaf for layer in self.layers]
        out = self.output
        last = self.layers[-1].z_leaf
        _check_depends(out, leaves, last, "the model's output")
        (g,) = torch.autograd.grad(out, last, retain_graph=True, allow_unused=True)
        self.grad_out = torch.zeros_like(last) if g is None else g.detach()
        for t, layer in enumerate(self.layers):
            prev = leaves[t]
            u = layer.u
            _check_depends(u, leaves, prev, f"the input of message-passing layer {t + 1} ({layer.name})")
            layer.jac = _nodewise_jacobian(u, prev, layer.name)
            layer.u_value = layer.u.detach()
            layer.u = None

    @property
    def depth(self) -> int:
        """L, the number of message-passing calls: a walk has L + 1 nodes."""
        return len(self.layers)

    # ---- queries on the recorded forward pass (the module functions build a WalkModel and call these)
    def walk_relevance(self, walks: Tensor) -> Tensor:
        """As :func:`walk_relevance`, on this recorded forward pass."""
        walks, pairs = _check_walks(walks, self)
        return _walks_backward(self, walks, pairs).detach()

    def subgraph_relevance(self, nodes, alpha: float = 0.0) -> Tensor:
        """As :func:`subgraph_relevance`, on this recorded forward pass."""
        alpha = _check_alpha(alpha)
        mask = _node_mask(nodes, self.num_nodes).to(self.x.device)
        if alpha == 0:
            return _masked_backward(self, mask).detach()
        return _alpha_relevance(self, mask, alpha).detach()

    def top_walks(self, k: int, beam: int | None = None, signed: bool = False) -> tuple[Tensor, Tensor]:
        """As :func:`top_walks`, on this recorded forward pass."""
        _check_k(k, beam)
        _check_bool(signed, "signed")
        return _top_walks(self, k, beam or max(8 * k, 64), signed)

    def walk_scores(self, k: int, signed: bool = True, beam: int | None = None) -> tuple[Tensor, Tensor]:
        """As :func:`walk_scores`, on this recorded forward pass (edge scores over its ``edge_index``)."""
        _check_k(k, beam)
        _check_bool(signed, "signed")
        walks, rel = _top_walks(self, k, beam or max(8 * k, 64), signed)
        return _scores_from_walks(walks, rel if signed else rel.abs(), self.edge_index.to(walks.device),
                                  self.num_nodes)

    def greedy_subgraph(self, size: int | None = None, alpha: float = 0.0) -> "GreedySubgraph":
        """As :func:`greedy_subgraph`, on this recorded forward pass."""
        return _greedy(self, _check_size(size, self.num_nodes), _check_alpha(alpha))

    def all_walks(self) -> Tensor:
        """Every walk (W, L+1) ending at the explained node (node-level) or anywhere; exponential in L."""
        return all_walks(self)

    def node_relevance(self) -> Tensor:
        """(N,) the sum of walk relevance over the walks starting at each node: the node's LRP relevance
        (under LRP-0 the same as :class:`~lrp_lib.explain.explainer.LRPExplainer`'s), one backward."""
        return _masked_backward(self, None, per_node=True).detach()

    def step_relevance(self) -> list[tuple[Tensor, Tensor]]:
        """Per layer t = 1..L: ``(steps, relevance)``, steps (P, 2) the layer's message pairs (J, K) (self
        steps included) and the summed relevance of all walks whose step t is J -> K.  Summed over layers
        and restricted to the input's edges, under LRP-0, it is :class:`~lrp_lib.explain.explainer.LRPExplainer`'s
        edge relevance.  Computed as ``p_J . step(g_K)``: p the sum of the prefix vectors of all walks
        reaching J (one forward pass of the rule's linear maps from x), g the unmasked rule-gradient
        (one backward); exact for every rule, bias or not (under LRP-0 without biases p is the layer
        input itself)."""
        grads = _layer_grads(self)
        p = self.x.detach()
        out = []
        for layer, g in zip(self.layers, grads):
            p = layer.jac.forward(p)                                           # at the layer input
            pair = torch.arange(layer.src.numel(), device=g.device)
            v = layer.step_back(g[layer.dst], layer.dst, pair)
            out.append((torch.stack([layer.src, layer.dst], 1), (p[layer.src] * v).sum(-1).detach()))
            p = layer.forward_all(p)
        return out


def _check_depends(t: Tensor, leaves: list[Tensor], allowed: Tensor, what: str):
    """t must depend on no recorded leaf other than ``allowed`` (no skip over a message-passing layer)."""
    if not t.requires_grad:
        return
    ids = {id(leaf): i for i, leaf in enumerate(leaves)}
    seen, stack = set(), [t.grad_fn] if t.grad_fn is not None else []
    if t.grad_fn is None and id(t) in ids and t is not allowed:
        raise ValueError(f"{what} is not the output of the previous layer")
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        var = getattr(node, "variable", None)
        if var is not None and id(var) in ids and var is not allowed:
            k = ids[id(var)]
            src = "x" if k == 0 else f"the output of message-passing layer {k}"
            raise ValueError(f"{what} depends on {src} directly (a skip connection or a reused input): walks "
                             f"need each message-passing layer to read only the previous one's output "
                             f"through node-wise layers")
        stack.extend(n for n, _ in node.next_functions)


class _Jacobian:
    """The rule-Jacobian of a node-wise segment u = phi(z_prev), node by node: ``back`` maps gradients
    at u rows to gradients at z_prev rows, ``forward`` row vectors the other way.  Stored as the
    identity, a diagonal (N, F) (a ReLU) or full matrices (N, F_prev, D)."""

    def __init__(self, kind: str, value: Tensor | None):
        self.kind, self.value = kind, value

    def _rows(self, rows):
        return self.value if rows is None else self.value[rows]

    def back(self, v: Tensor, rows: Tensor | None = None) -> Tensor:
        """v (..., R, D) at u rows ``rows`` (None: all N rows) -> (..., R, F_prev)."""
        if self.kind == "identity":
            return v
        if self.kind == "diag":
            return v * self._rows(rows)
        return torch.einsum("nfd,...nd->...nf", self._rows(rows), v)

    def forward(self, p: Tensor) -> Tensor:
        """Row vectors p (N, F_prev) -> (N, D)."""
        if self.kind == "identity":
            return p
        if self.kind == "diag":
            return p * self.value
        return torch.einsum("nf,nfd->nd", p, self.value)

    def interval(self, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
        """The box of the row vectors of the box [lo, hi] mapped by ``forward``."""
        if self.kind == "identity":
            return lo, hi
        if self.kind == "diag":
            a, b = lo * self.value, hi * self.value
            return torch.minimum(a, b), torch.maximum(a, b)
        return _interval(lo, hi, self.value, "nf,nfd->nd")


def _nodewise_jacobian(u: Tensor, prev: Tensor, name: str) -> _Jacobian:
    """The rule-Jacobian of u with respect to prev, node by node; checks node-wise-ness."""
    n, d = u.shape[0], u.shape[-1]
    if u is prev:
        return _Jacobian("identity", None)
    if not u.requires_grad:
        return _Jacobian("full", torch.zeros(n, prev.shape[-1], d, dtype=u.dtype, device=u.device))
    if n > 1:  # node-wise: a gradient at one node reaches that node only
        probe = torch.zeros_like(u)
        probe[n // 2] = 1.0
        (col,) = torch.autograd.grad(u, prev, probe, retain_graph=True, allow_unused=True)
        if col is not None:
            other = torch.cat([col[: n // 2], col[n // 2 + 1:]])
            if bool((other != 0).any()):
                raise ValueError(f"model: the layers between message-passing layers (before {name}) mix nodes; "
                                 f"walks need node-wise layers there (Linear, ReLU, MLP)")
    if prev.shape[-1] == d:  # elementwise (a ReLU, a dropout in eval mode)? one VJP with ones tells
        (diag,) = torch.autograd.grad(u, prev, torch.ones_like(u), retain_graph=True, allow_unused=True)
        diag = torch.zeros_like(prev) if diag is None else diag.detach()
        if _elementwise(u, prev, diag):
            return _Jacobian("diag", diag)
    eye = torch.eye(d, dtype=u.dtype, device=u.device)
    try:  # all d vector-Jacobian products in one batched backward
        (cols,) = torch.autograd.grad(u, prev, eye.unsqueeze(1).expand(d, n, d), retain_graph=True,
                                      allow_unused=True, is_grads_batched=True)
        if cols is None:
            cols = prev.new_zeros(d, *prev.shape)
        return _Jacobian("full", cols.permute(1, 2, 0).detach())
    except RuntimeError:  # an op without a batching rule: one product per feature
        pass
    cols = []
    for k in range(d):
        (col,) = torch.autograd.grad(u, prev, eye[k].expand(n, d), retain_graph=True, allow_unused=True)
        cols.append(torch.zeros_like(prev) if col is None else col)
    return _Jacobian("full", torch.stack(cols, -1).detach())


_ELEMENTWISE = {"ReluBackward0", "ThresholdBackward0", "ThresholdBackward1", "CloneBackward0",
                "AliasBackward0", "ViewBackward0"}


def _elementwise(u: Tensor, prev: Tensor, diag: Tensor) -> bool:
    """True if every autograd node between u and prev is an elementwise ReLU or a copy."""
    seen, stack = set(), [u.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if getattr(node, "variable", None) is prev:
            continue
        if type(node).__name__ not in _ELEMENTWISE:
            return False
        stack.extend(n for n, _ in node.next_functions)
    return True


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


def _explained(out, index, target) -> Tensor:
    if not isinstance(out, Tensor):
        raise ValueError(f"model must return a tensor, got {type(out).__name__}")
    y = out
    if index is not None:
        if y.dim() == 0 or y.shape[0] <= index:
            raise ValueError(f"index={index} but the model's output has shape {tuple(out.shape)} (no row {index}); "
                             f"index is for node-level outputs (one row per node)")
        y = y[index]
    if target is not None:
        if y.dim() == 0 or y.shape[-1] <= target or target < 0:
            raise ValueError(f"target={target} is not a column of the model's output {tuple(out.shape)}")
        y = y[..., target]
    if y.numel() != 1:
        raise ValueError(f"the explained output must be one number, but the model's output has shape "
                         f"{tuple(out.shape)}: pass index= (node-level) and/or target= (the class column)")
    return y.reshape(())


# ------------------------------------------------------------------ walks
def _check_walks(walks, wm: WalkModel) -> tuple[Tensor, list[Tensor]]:
    """walks as long (W, L+1) and each layer's pair index (W,), with errors naming the argument."""
    if not isinstance(walks, Tensor):
        walks = torch.as_tensor(walks)
    if walks.is_floating_point() or walks.is_complex() or walks.dtype == torch.bool:
        raise TypeError(f"walks must be an integer tensor (W, L+1) of node ids, got dtype {walks.dtype}")
    walks = walks.long().to(wm.x.device)
    if walks.dim() == 1:
        walks = walks.unsqueeze(0)
    L = wm.depth
    if walks.dim() != 2 or walks.shape[1] != L + 1:
        raise ValueError(f"walks must have shape (W, {L + 1}): the model has {L} message-passing layer(s), so a "
                         f"walk is {L + 1} node ids (j_0 input node, ..., j_{L} last receiver); got shape "
                         f"{tuple(walks.shape)}")
    n = wm.num_nodes
    if walks.numel() and (int(walks.min()) < 0 or int(walks.max()) >= n):
        bad = ((walks < 0) | (walks >= n)).nonzero()[0]
        raise ValueError(f"walks[{int(bad[0])}, {int(bad[1])}] = {int(walks[bad[0], bad[1]])} is not a node id "
                         f"(0..{n - 1})")
    pairs = []
    for t, layer in enumerate(wm.layers):
        pair = layer.find(walks[:, t], walks[:, t + 1])
        if bool((pair < 0).any()):
            w = int((pair < 0).nonzero()[0, 0])
            j, k = int(walks[w, t]), int(walks[w, t + 1])
            kind = "a self-loop step" if j == k else "an edge"
            raise ValueError(f"walks[{w}] steps from node {j} to node {k} at layer {t + 1} ({layer.name}), "
                             f"which is not {kind} of that layer (no message {j} -> {k})")
        pairs.append(pair)
    if wm.index is not None and walks.numel() and bool((walks[:, -1] != wm.index).any()):
        w = int((walks[:, -1] != wm.index).nonzero()[0, 0])
        raise ValueError(f"walks[{w}] ends at node {int(walks[w, -1])}, but the explained node is index={wm.index}: "
                         f"for a node-level output every walk ends at the explained node")
    return walks, pairs


def _walks_backward(wm: WalkModel, walks: Tensor, pairs: list[Tensor]) -> Tensor:
    v = wm.grad_out[walks[:, -1]]
    for t in range(wm.depth, 0, -1):
        layer = wm.layers[t - 1]
        v = layer.step_back(v, walks[:, t], pairs[t - 1])            # (W, D) at the layer input row j_{t-1}
        v = layer.jac.back(v, walks[:, t - 1])                           # (W, F_{t-1})
    return (wm.x.detach()[walks[:, 0]] * v).sum(-1)


def walk_relevance(model: nn.Module, x: Tensor, edge_index: Tensor, walks: Tensor, rule: Rule | str | list = "epsilon",
                   *, index: int | None = None, target: int | None = None, **model_kwargs) -> Tensor:
    r"""The GNN-LRP relevance of each walk (see the module docstring for the definition).

    Args:
        model: a graph network of supported layers (module docstring); put in eval mode while it runs.
        x, edge_index: the graph; ``**model_kwargs`` (``batch=``, ``edge_weight=``) go to ``model``.
        walks: LongTensor (W, L+1), one walk per row :math:`(j_0, \dots, j_L)`, :math:`L` the number of
            message-passing calls: :math:`j_0` the input node, :math:`j_t` the node receiving the
            message at layer :math:`t`.  A step :math:`j \to j` is allowed where the layer has a
            self/root term (GCN's self-loops, GIN's :math:`(1+\epsilon) h_j`, GraphConv's root weight)
            or the graph has the self-loop edge.  A walk ends anywhere for a graph-level output,
            at ``index`` for a node-level one.
        rule: ``"z"`` (LRP-0), ``"epsilon"`` / ``Epsilon(eps)`` (default, :math:`\epsilon = 10^{-6}`),
            ``"gamma"`` / ``Gamma(gamma, eps)``; or a list of these, one per message-passing layer
            (module docstring, :func:`gamma_schedule`).
        index: the explained node of a node-level output (the output's row).
        target: the explained column of the output (class), if it has several.

    Returns: (W,) relevance, in x's dtype.  Under LRP-0 on a bias-free model, the relevances of all
    walks (:func:`all_walks`) sum to the explained output.  Cost: one forward pass and the
    node-wise Jacobians, then :math:`O(L F^2)` per walk.
    """
    return WalkModel(model, x, edge_index, rule, index=index, target=target, **model_kwargs).walk_relevance(walks)


def all_walks(wm: WalkModel, end: Tensor | None = None) -> Tensor:
    """Every walk of the recorded model (W, L+1), ending at ``end`` (node ids; default: the explained
    node for a node-level output, else every node).  Exponential in depth: for small graphs."""
    n = wm.num_nodes
    if end is None:
        end = torch.tensor([wm.index]) if wm.index is not None else torch.arange(n)
    end = end.to(wm.x.device)
    walks = end.long().view(-1, 1)
    for layer in reversed(wm.layers):
        k = walks[:, 0]
        counts = layer.ptr[k + 1] - layer.ptr[k]
        parent = torch.repeat_interleave(torch.arange(walks.shape[0], device=walks.device), counts)
        offs = torch.arange(parent.numel(), device=walks.device) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        pair = layer.ptr[k][parent] + offs
        walks = torch.cat([layer.src[pair].unsqueeze(1), walks[parent]], dim=1)
    return walks


# ------------------------------------------------------------------ subgraphs
def _node_mask(nodes, n: int) -> Tensor:
    if not isinstance(nodes, Tensor):
        nodes = torch.as_tensor(list(nodes) if not isinstance(nodes, (list, tuple)) else nodes, dtype=torch.long)
    if nodes.dtype == torch.bool:
        if nodes.shape[-1] != n or nodes.dim() > 2:
            raise ValueError(f"nodes as a boolean mask must have shape ({n},) or (M, {n}), got {tuple(nodes.shape)}")
        return nodes
    if nodes.is_floating_point():
        raise TypeError(f"nodes must be node ids (an integer tensor or list) or a boolean mask, got dtype {nodes.dtype}")
    nodes = nodes.long().view(-1)
    if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= n):
        bad = int(nodes[(nodes < 0) | (nodes >= n)][0])
        raise ValueError(f"nodes contains {bad}, not a node id (0..{n - 1})")
    mask = torch.zeros(n, dtype=torch.bool, device=nodes.device)
    mask[nodes] = True
    return mask


def subgraph_relevance(model: nn.Module, x: Tensor, edge_index: Tensor, nodes, rule: Rule | str | list = "epsilon", *,
                       index: int | None = None, target: int | None = None, alpha: float = 0.0,
                       **model_kwargs) -> Tensor:
    r"""The relevance of the node set :math:`S` = ``nodes``: the sum of the relevance of every walk
    that stays in :math:`S` (sGNN-LRP, Xiong et al., ICML 2022).

    With ``alpha`` :math:`= \alpha > 0`, Xiong et al.'s relaxation: every walk that visits :math:`S`
    at least once counts, weighted by :math:`\alpha` per position outside :math:`S`,

    .. math::  R_\alpha(S) = \sum_{w:\ \exists t,\ j_t \in S} \alpha^{\#\{t \in 0..L:\ j_t \notin S\}} R_w

    (a node visited twice outside :math:`S` counts twice).  As in their ``subgraph_mp_forward_hook``
    (``subgraph_relevance.py``), two weighted backwards: node weights :math:`m = 1` on :math:`S`,
    :math:`\alpha` off it (every walk weighted by :math:`\prod_t m_{j_t}`) minus
    :math:`m = 0` on :math:`S`, :math:`\alpha` off it (the walks that never visit :math:`S`).
    :math:`\alpha = 0` is the plain subgraph relevance, :math:`\alpha = 1` every walk through :math:`S`.

    Computed without enumerating walks: the walk backward of :func:`walk_relevance` run on every node
    at once with each layer's messages restricted to pairs inside :math:`S` (and the output's gradient
    to :math:`S`), which is the sum over all walks in :math:`S` by distributivity.  Cost: one forward
    pass plus :math:`O(L (E F + N F D))`, polynomial.

    Args:
        nodes: node ids (list or LongTensor) or a boolean mask (N,); a boolean (M, N) gives M sets at
            once.  For a node-level output only walks ending at ``index`` count (0 if ``index`` is
            not in :math:`S`).
        alpha: a number in [0, 1] (default 0), see above.
        others: as :func:`walk_relevance`.

    Returns: a 0-dim tensor (or (M,) for M sets).  With :math:`S` = all nodes, under LRP-0 on a bias-free
    model, it is the explained output.
    """
    alpha = _check_alpha(alpha)
    wm = WalkModel(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.subgraph_relevance(nodes, alpha)


def _check_alpha(alpha) -> float:
    if isinstance(alpha, Tensor) and alpha.numel() == 1:
        alpha = float(alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= float(alpha) <= 1:
        raise ValueError(f"alpha must be a number in [0, 1] (the weight of each position of a walk outside the "
                         f"subgraph), got {alpha!r}")
    return float(alpha)


def _weighted_backward(wm: WalkModel, weight: Tensor) -> Tensor:
    """sum_w (prod_{t=0..L} weight[j_t]) R_w for node weights (N,) or (M, N): the walk backward with the
    gradient at every layer's rows (output side, each layer's input side, x) multiplied by the weight
    once per position."""
    w = weight.to(wm.x.dtype).unsqueeze(-1)                         # (..., N, 1)
    g = _start_grad(wm) * w                                         # position L
    for layer in reversed(wm.layers):
        g = layer.back_all(g, None) * w                              # position t - 1 (rows j_{t-1})
        g = layer.jac.back(g)                                        # node-wise: commutes with the weight
    return (wm.x.detach() * g).sum((-1, -2))


def _alpha_relevance(wm: WalkModel, mask: Tensor, alpha: float) -> Tensor:
    """Xiong et al.'s R_alpha(S) for a boolean mask (N,) or (M, N), both backwards in one batch."""
    inside = mask.to(wm.x.dtype)
    outside = (1 - inside) * alpha
    both = _weighted_backward(wm, torch.stack([inside + outside, outside]))   # (2, ...) batched
    return both[0] - both[1]


def _start_grad(wm: WalkModel) -> Tensor:
    g = wm.grad_out
    if wm.index is not None:
        keep = torch.zeros(wm.num_nodes, dtype=torch.bool, device=g.device)
        keep[wm.index] = True
        g = g * keep.unsqueeze(-1).to(g.dtype)
    return g


def _masked_backward(wm: WalkModel, mask: Tensor | None, per_node: bool = False) -> Tensor:
    """Sum of walk relevance over walks inside ``mask`` ((N,) or (M, N); None: all walks), per start
    node if ``per_node``."""
    g = _start_grad(wm)
    if mask is not None:
        g = g * mask.unsqueeze(-1).to(g.dtype)                  # (..., N, F)
    for layer in reversed(wm.layers):
        g = layer.back_all(g, mask)                              # (..., N, D)
        g = layer.jac.back(g)
    rel = wm.x.detach() * g
    if mask is not None:
        rel = rel * mask.unsqueeze(-1).to(g.dtype)
    return rel.sum(-1) if per_node else rel.sum((-1, -2))


def _layer_grads(wm: WalkModel) -> list[Tensor]:
    """The unmasked rule-gradient at each layer's output (N x F_t), t = 1..L."""
    g = _start_grad(wm)
    grads = [g]
    for layer in reversed(wm.layers[1:]):
        g = layer.jac.back(layer.back_all(g, None))
        grads.append(g)
    return grads[::-1]


# ------------------------------------------------------------------ top-k
def _interval(lo: Tensor, hi: Tensor, m: Tensor, eq: str) -> tuple[Tensor, Tensor]:
    """Box [lo, hi] of row vectors a mapped by a -> a m (einsum ``eq``): the exact box of the image."""
    mp, mn = m.clamp(min=0), m.clamp(max=0)
    return (torch.einsum(eq, lo, mp) + torch.einsum(eq, hi, mn),
            torch.einsum(eq, hi, mp) + torch.einsum(eq, lo, mn))


def _bounds(wm: WalkModel) -> list[tuple[Tensor, Tensor]]:
    """Per layer t a box (lo, hi), each (N, F_t): every prefix row vector a with R = a . v at layer t's
    output row K (v the suffix's rule-gradient there) lies in [lo[K], hi[K]] (interval arithmetic
    through the node-wise Jacobians, the step maps and the scales; union over senders)."""
    lo = hi = wm.x.detach()
    bounds = []
    for layer in wm.layers:
        lo, hi = layer.jac.interval(lo, hi)                            # box at the layer input row J
        out_lo = out_hi = None
        for t, w in enumerate(layer.weights):
            q_lo, q_hi = (lo, hi) if w is None else _interval(lo, hi, w, "nd,df->nf")
            c = layer.coef[:, t].unsqueeze(-1)
            a, b = q_lo[layer.src] * c, q_hi[layer.src] * c              # per pair, c of either sign
            m_lo, m_hi = torch.minimum(a, b), torch.maximum(a, b)
            out_lo = m_lo if out_lo is None else out_lo + m_lo
            out_hi = m_hi if out_hi is None else out_hi + m_hi
        n, f = layer.num_nodes, out_lo.shape[-1]
        k_lo = out_lo.new_zeros(n, f).index_reduce(0, layer.dst, out_lo, "amin", include_self=False)
        k_hi = out_hi.new_zeros(n, f).index_reduce(0, layer.dst, out_hi, "amax", include_self=False)
        if layer.scale is not None:
            a, b = k_lo * layer.scale, k_hi * layer.scale
            k_lo, k_hi = torch.minimum(a, b), torch.maximum(a, b)
        bounds.append((k_lo, k_hi))
        lo, hi = k_lo, k_hi
    return bounds


def _expand(wm: WalkModel, t: int, walks: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Children at layer t-1 of suffixes whose first node is at layer t (walks hold the suffix in
    columns t..L)."""
    layer = wm.layers[t - 1]
    k = walks[:, t]
    counts = layer.ptr[k + 1] - layer.ptr[k]
    parent = torch.repeat_interleave(torch.arange(walks.shape[0], device=walks.device), counts)
    offs = torch.arange(parent.numel(), device=walks.device) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    pair = layer.ptr[k][parent] + offs
    j = layer.src[pair]
    child_v = layer.step_back(v[parent], k[parent], pair)
    child_v = layer.jac.back(child_v, j)
    child = walks[parent].clone()
    child[:, t - 1] = j
    return child, child_v


def _ub(wm: WalkModel, bounds: list[Tensor], t: int, walks: Tensor, v: Tensor, signed: bool = False) -> Tensor:
    """Upper bound of |R| (of R if ``signed``) over the completions of the suffixes."""
    if t == 0:
        r = (wm.x.detach()[walks[:, 0]] * v).sum(-1)
        return r if signed else r.abs()
    lo, hi = bounds[t - 1]
    lo, hi = lo[walks[:, t]], hi[walks[:, t]]
    top = torch.maximum(lo * v, hi * v).sum(-1)      # max of a . v over the box
    if signed:
        return top
    bottom = torch.minimum(lo * v, hi * v).sum(-1)   # min of a . v over the box
    return torch.maximum(top, -bottom)


def top_walks(model: nn.Module, x: Tensor, edge_index: Tensor, k: int, rule: Rule | str | list = "epsilon", *,
              index: int | None = None, target: int | None = None, beam: int | None = None,
              signed: bool = False, **model_kwargs) -> tuple[Tensor, Tensor]:
    r"""The ``k`` walks of largest :math:`|R|` (of largest :math:`R` with ``signed=True``), exactly,
    without enumerating all walks.

    Search: **branch and bound with exact (valid) upper bounds**, from the output side.  A partial walk
    is a suffix :math:`(j_t, \dots, j_L)` with its rule-gradient :math:`v` at layer :math:`t`'s output
    row :math:`j_t`; every completion has relevance :math:`a \cdot v` for a prefix vector :math:`a`,
    and :math:`a` lies in a box :math:`[lo_t[j_t], hi_t[j_t]]` computed for all nodes by one pass of
    interval arithmetic from the input (:math:`lo_0 = hi_0 = x`, then each layer's node-wise
    Jacobians, step maps and scales, the union over senders).  So
    :math:`\max(\sum_f \max(lo_f v_f, hi_f v_f), -\sum_f \min(lo_f v_f, hi_f v_f))` bounds the
    :math:`|R|` of every walk that extends the suffix.  First a beam search (width ``beam``, default :math:`\max(8k, 64)`) ranked by
    that bound completes some walks; the :math:`k`-th largest of their :math:`|R|` is a threshold
    :math:`\tau`.  Then every suffix is expanded layer by layer keeping only those whose bound is
    :math:`\ge \tau`: a walk among the true top :math:`k` has :math:`|R| \ge \tau` and so do the bounds
    of all its suffixes, so it is never pruned.  **Guarantee**: the result is the exact top :math:`k`
    of all walks by :math:`|R|` (ties at the :math:`k`-th value broken arbitrarily); the cost depends
    on how many suffixes the bound cannot rule out (worst case all walks, typically a small multiple
    of :math:`k` per layer times the degree).

    With ``signed=True`` the same search ranks by :math:`R` itself (the most positive walks, as
    Schnake et al. and Xiong et al. show them): the bound of a suffix is then
    :math:`\sum_f \max(lo_f v_f, hi_f v_f)` and the threshold the :math:`k`-th largest :math:`R`.

    Args:
        k: how many walks (>= 1); fewer come back if the graph has fewer walks.
        signed: rank by :math:`R` (largest first) instead of :math:`|R|`.
        others: as :func:`walk_relevance`.

    Returns: ``(walks, relevance)``: LongTensor (k, L+1) and (k,), sorted by decreasing :math:`|R|`
    (decreasing :math:`R` if ``signed``).
    """
    _check_k(k, beam)
    _check_bool(signed, "signed")
    wm = WalkModel(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.top_walks(k, beam, signed)


def _check_k(k, beam):
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 (the number of walks to return), got {k!r}")
    if beam is not None and (isinstance(beam, bool) or not isinstance(beam, int) or beam < 1):
        raise ValueError(f"beam must be an int >= 1 (the beam width of the first pass), got {beam!r}")


def _check_bool(value, name: str):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _start(wm: WalkModel) -> tuple[Tensor, Tensor]:
    L, n = wm.depth, wm.num_nodes
    ends = (torch.tensor([wm.index]) if wm.index is not None else torch.arange(n)).to(wm.x.device)
    walks = torch.full((ends.numel(), L + 1), -1, dtype=torch.long, device=ends.device)
    walks[:, L] = ends
    return walks, wm.grad_out[ends]


def _top_walks(wm: WalkModel, k: int, beam: int, signed: bool = False) -> tuple[Tensor, Tensor]:
    L = wm.depth
    bounds = _bounds(wm)
    key = (lambda r: r) if signed else (lambda r: r.abs())
    # 1. beam search for a threshold
    walks, v = _start(wm)
    for t in range(L, 0, -1):
        ub = _ub(wm, bounds, t, walks, v, signed)
        if ub.numel() > beam:
            keep = ub.topk(beam).indices
            walks, v = walks[keep], v[keep]
        walks, v = _expand(wm, t, walks, v)
    rel = (wm.x.detach()[walks[:, 0]] * v).sum(-1)
    if rel.numel() >= k:
        tau = key(rel).topk(k).values[-1]
        tau = tau - 1e3 * torch.finfo(rel.dtype).eps * tau.abs()  # float rounding of the bounds vs. exact values
    else:  # fewer walks than k: keep everything
        tau = rel.new_tensor(float("-inf"))
    # 2. branch and bound with the threshold
    walks, v = _start(wm)
    for t in range(L, 0, -1):
        keep = _ub(wm, bounds, t, walks, v, signed) >= tau
        walks, v = _expand(wm, t, walks[keep], v[keep])
    rel = (wm.x.detach()[walks[:, 0]] * v).sum(-1)
    order = key(rel).argsort(descending=True, stable=True)[:k]
    return walks[order], rel[order].detach()


# ------------------------------------------------------------------ node and edge scores
def walk_scores(model: nn.Module, x: Tensor, edge_index: Tensor, k: int, rule: Rule | str | list = "epsilon", *,
                index: int | None = None, target: int | None = None, signed: bool = True,
                beam: int | None = None, **model_kwargs) -> tuple[Tensor, Tensor]:
    r"""Node and edge scores from the ``k`` most relevant walks (GNN-LRP, Schnake et al., TPAMI 2021).

    The walks: ``top_walks(k, signed=signed)`` (exact, branch and bound).  With ``signed=True``
    (default) the :math:`k` walks of largest :math:`R` (most positive first, as Schnake et al. and
    Xiong et al. rank and draw walks), each contributing :math:`v_w = R_w` (a negative :math:`R_w`
    only if fewer than :math:`k` walks are positive); with ``signed=False`` the :math:`k` walks of
    largest :math:`|R|`, each contributing :math:`v_w = |R_w|`.  Then, with :math:`T` the top walks,

    .. math::  \mathrm{node}_j = \sum_{w \in T} v_w \, \#\{t \in 0..L : j_t = j\}, \qquad
               \mathrm{edge}_e = \sum_{w \in T} v_w \, \#\{t \in 1..L : (j_{t-1}, j_t) = (s_e, d_e)\} / m_e

    **Counting**: a node gets :math:`v_w` once per position of the walk it occupies (the walk
    :math:`(3, 3, 5, 3)` gives node 3 :math:`3 v_w`, node 5 :math:`v_w`).  An edge :math:`e` of
    ``edge_index`` (source :math:`s_e`, target :math:`d_e`, PyG's ``source_to_target`` direction) gets
    :math:`v_w` once per step of the walk along it, split equally between its :math:`m_e` parallel copies;
    the reverse edge :math:`(d_e, s_e)` is another edge.  A self step :math:`j \to j` (GCN's added
    self-loop, GIN's :math:`(1+\epsilon) h_j`, a root weight) goes to the edge :math:`(j, j)` if
    ``edge_index`` has one, else to no edge.  So with ``k`` at least the number of walks and
    ``signed=True``, ``node.sum()`` is :math:`(L + 1) \sum_w R_w` (under LRP-0 on a bias-free model:
    :math:`L + 1` times the output), ``edge.sum()`` is :math:`\sum_w R_w` times the number of its
    steps along edges of ``edge_index``, and ``edge`` is the walks' step marginal
    (:meth:`WalkModel.step_relevance`) summed over layers on the input's edges.

    Args:
        k: how many walks (int >= 1); if the graph has fewer, all of them.
        rule: one rule, or a list with one rule per message-passing layer (e.g. :func:`gamma_schedule`).
        signed: rank by and add :math:`R` (True) or :math:`|R|` (False).
        beam: the first pass's beam width of :func:`top_walks`.
        others: as :func:`walk_relevance`.

    Returns: ``(node_scores, edge_scores)``: (N,) and (E,) in x's dtype, E = ``edge_index.shape[1]``.
    Cost: one :func:`top_walks`, then linear in :math:`k L`.
    """
    _check_k(k, beam)
    _check_bool(signed, "signed")
    wm = WalkModel(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.walk_scores(k, signed=signed, beam=beam)


def _scores_from_walks(walks: Tensor, value: Tensor, edge_index: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Node and edge scores of walks (W, L+1) each adding ``value`` (W,) (see :func:`walk_scores`)."""
    length = walks.shape[1]
    node = value.new_zeros(n).index_add_(0, walks.reshape(-1), value.repeat_interleave(length))
    edge_key = edge_index[0] * n + edge_index[1]
    edge = value.new_zeros(edge_key.numel())
    if edge_key.numel() == 0 or walks.numel() == 0:
        return node, edge
    uniq, inverse = torch.unique(edge_key, sorted=True, return_inverse=True)
    copies = torch.bincount(inverse, minlength=uniq.numel()).to(value.dtype)
    step_key = (walks[:, :-1] * n + walks[:, 1:]).reshape(-1)
    step_value = value.repeat_interleave(length - 1)
    pos = torch.searchsorted(uniq, step_key).clamp(max=uniq.numel() - 1)
    found = uniq[pos] == step_key
    per_key = value.new_zeros(uniq.numel()).index_add_(0, pos[found], step_value[found])
    return node, (per_key / copies)[inverse]


# ------------------------------------------------------------------ greedy subgraph search
class GreedySubgraph(NamedTuple):
    """What :func:`greedy_subgraph` returns."""
    order: Tensor       #: (size,) LongTensor: the nodes in the order the search adds them
    scores: Tensor      #: (N,) node scores for AUROC: N - i for the i-th added node (i from 0), 0 if never added
    relevance: Tensor   #: (size,) the (alpha-)subgraph relevance of the first i + 1 nodes of ``order``


def greedy_subgraph(model: nn.Module, x: Tensor, edge_index: Tensor, size: int | None = None,
                    rule: Rule | str | list = "epsilon", *, alpha: float = 0.0, index: int | None = None,
                    target: int | None = None, **model_kwargs) -> GreedySubgraph:
    r"""sGNN-LRP's greedy subgraph search (Xiong et al., *Efficient Computation of Higher-Order
    Subgraph Attribution via Message Passing*, ICML 2022).

    Start from :math:`S_0 = \emptyset`; step :math:`i` adds the node

    .. math::  v_i = \arg\max_{v \notin S_{i-1}} R_\alpha(S_{i-1} \cup \{v\})

    (signed relevance, :func:`subgraph_relevance` with ``alpha``; ties, up to 16 ulp of the largest
    :math:`|R|` of the step, to the smallest node id: symmetric nodes tie exactly), until
    ``size`` nodes (default: all :math:`N`, as their code does).  The node score is the rank,
    :math:`\mathrm{score}(v_i) = N - i` (:math:`i = 0, 1, \dots`), as ``best_fo[fs] = nb_nodes - i`` in
    their ``get_feat_order_local_best_guess`` (``utils.py``, mode ``'extr'``); nodes never added (when
    ``size < N``) score 0.  Their BA-2Motifs node AUROC (0.993 at :math:`\alpha = 0`, 0.996 at
    :math:`\alpha = 0.05`, ``evaluation_results/result_local_best_guess.txt``) is
    ``roc_auc_score(motif_node_mask, scores)`` per graph (the 5 motif nodes positive), averaged over
    graphs, for a 3-layer GIN explained at the graph's label with the schedule
    :math:`\gamma = 3, 1.5, 0` (:func:`gamma_schedule`).

    Cost: one forward pass, then step :math:`i` is one batched masked backward over its
    :math:`N - i` candidates (two with :math:`\alpha > 0`): :math:`O(\text{size} \cdot N \cdot L (E F + N F^2))`.

    Args:
        size: how many nodes to add (int in 1..N; None: N).
        rule: one rule, or a list with one rule per message-passing layer (e.g. ``gamma_schedule(3)``).
        alpha: Xiong et al.'s :math:`\alpha` in [0, 1] (see :func:`subgraph_relevance`).
        others: as :func:`walk_relevance`.

    Returns: :class:`GreedySubgraph` ``(order, scores, relevance)`` (a named tuple of three).
    """
    alpha = _check_alpha(alpha)
    wm = WalkModel(model, x, edge_index, rule, index=index, target=target, **model_kwargs)
    return wm.greedy_subgraph(size, alpha=alpha)


def _check_size(size, n: int) -> int:
    if size is None:
        return n
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= n:
        raise ValueError(f"size must be an int in 1..{n} (how many of the graph's {n} nodes the search adds) "
                         f"or None (all), got {size!r}")
    return size


def _greedy(wm: WalkModel, size: int, alpha: float) -> GreedySubgraph:
    n, device = wm.num_nodes, wm.x.device
    chosen = torch.zeros(n, dtype=torch.bool, device=device)
    order, rels = [], []
    for _ in range(size):
        cand = (~chosen).nonzero().view(-1)                                  # ascending node ids
        masks = chosen.expand(cand.numel(), n).clone()
        masks[torch.arange(cand.numel(), device=device), cand] = True
        rel = _masked_backward(wm, masks) if alpha == 0 else _alpha_relevance(wm, masks, alpha)
        # ties (equal up to float rounding: symmetric nodes) go to the smallest id
        tol = 16 * torch.finfo(rel.dtype).eps * float(rel.abs().max())
        best = int((rel >= rel.max() - tol).nonzero()[0, 0])
        chosen[cand[best]] = True
        order.append(cand[best])
        rels.append(rel[best])
    order_t = torch.stack(order)
    scores = torch.zeros(n, dtype=wm.x.dtype, device=device)
    scores[order_t] = (n - torch.arange(size, device=device)).to(wm.x.dtype)
    return GreedySubgraph(order_t, scores, torch.stack(rels).detach())
