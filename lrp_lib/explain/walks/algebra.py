r"""The walks' backward as small tensor algebra: per-node matrices and per-edge coefficients.

Between two ``propagate`` calls the (linear) backward acts row by row: a matrix per node; inside one, the message of
edge :math:`e: j \to k` is an elementwise share of the aggregation.  So the relevance arriving at time :math:`t` at
row :math:`k` is a vector :math:`a_t[k]` over the cuts of time :math:`t`, and a step :math:`j \to k` maps it to

.. math::  a_{t-1}[j] = \sum_c G_c[j \to k] \odot (E_t[k]\, a_t[k]) + [j = k]\, S_t[k]\, a_t[k]

with :math:`E_t[k]` the node matrix from the arrivals to the ``propagate`` output, :math:`G_c` the per-feature
shares of message and aggregation (summed over parallel edges; the ``x_i`` reads on the self step) and
:math:`S_t[k]` the routes that skip the ``propagate`` (root weights, residuals).  A walk's relevance is
:math:`\pi_0[j_0] \cdot a_0[j_0]`, :math:`\pi_0` the relevance that reaches ``x`` per unit arrival.

Checked, not assumed: :class:`WalkAlgebra` raises :class:`NotDecomposable` (the walks then run masked backwards)
where a message is not elementwise in what it reads, an aggregation is not a per-feature share, a route skips more
than one ``propagate``, or its weighted backward differs from the recorded graph's on random node weights.
"""
from __future__ import annotations

from functools import cached_property
from itertools import accumulate

import torch
from torch import Tensor
from torch_geometric.utils import scatter
from torch_geometric.utils.sparse import index2ptr

__all__ = ["WalkAlgebra", "NotDecomposable", "find_steps"]


class NotDecomposable(Exception):
    """The recorded graph is not per-node matrices and per-edge elementwise shares (the reason)."""


def find_steps(src: Tensor, dst: Tensor, j: Tensor, k: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Where the steps j -> k are among the steps (src, dst) sorted by (dst, src), and whether they are there."""
    keys, q = dst * n + src, k * n + j
    pos = torch.searchsorted(keys, q).clamp(max=keys.numel() - 1)
    return pos, keys[pos] == q


def _close(a: Tensor, b: Tensor, scale: float) -> bool:
    tol = float(torch.finfo(a.dtype).eps) ** 0.5 * max(scale, float(b.abs().max()) if b.numel() else 0.0, 1e-30)
    return bool(((a - b).abs() <= tol).all())


class WalkAlgebra:
    """The tables of the walks' backward (module docstring), built from a recorded WalkModel."""

    def __init__(self, wm):
        g, cuts, n, L = wm.graph, wm.graph.cuts, wm.num_nodes, wm.graph.depth
        self.n, self.depth = n, L
        if any(c.kind != "attr" and (c.leaf.dim() == 0 or c.leaf.shape[0] != n) for c in cuts):
            raise NotDecomposable("a cut tensor has no row per node")
        grads = g.grad(g.output, [c.leaf for c in cuts], g.seed(wm.start), False)
        arrive, pre = {}, {}
        for i, gr in enumerate(grads):
            if gr is None or cuts[i].kind == "attr":
                continue
            if cuts[i].time == L - 1 and L > 0:  # the last layer's root: a self step at step L
                pre[i] = gr.detach().reshape(n, -1).unsqueeze(0)
            elif cuts[i].time == L:
                arrive[i] = gr.detach().reshape(n, -1)
            elif bool((gr != 0).any()):
                raise NotDecomposable("the output reads a layer two or more propagate calls back (jumping knowledge)")
        slots = sorted(arrive)
        if not slots:
            raise NotDecomposable("the output does not reach the last layer")
        # a column of ones carries what the output sends past the last propagate (through S_L)
        self.a_out = torch.cat([arrive[i] for i in slots] + ([grads[slots[0]].new_ones(n, 1)] if pre else []), 1)
        self.E, self.S, self.G, self.pairs = {}, {}, {}, {}
        for t in range(L, 0, -1):
            exit_, skip = self._time(g, t, slots)
            if t == L and pre:
                exit_ = torch.cat([exit_, exit_.new_zeros(1, *exit_.shape[1:])])
                for i, part in pre.items():
                    skip[i] = torch.cat([skip.get(i, part.new_zeros(exit_.shape[0] - 1, n, part.shape[2])), part])
            self.E[t] = exit_.permute(1, 0, 2).contiguous()                         # (N, B_t, d_O)
            per_cut, self.pairs[t] = self._messages(g, wm, t)
            slots = sorted(set(per_cut) | set(skip))     # the cuts of time t - 1 that a walk's state covers
            dims = [cuts[i].leaf.reshape(n, -1).shape[1] for i in slots]
            offs = dict(zip(slots, accumulate([0] + dims)))
            self.G[t] = [(offs[i], G) for i, G in per_cut.items()]
            self.S[t] = exit_.new_zeros(n, exit_.shape[0], sum(dims)) if skip else None
            for i, part in skip.items():
                self.S[t][:, :, offs[i]:offs[i] + part.shape[2]] = part.permute(1, 0, 2)
        self.pi0 = self._time(g, 0, slots)[0].sum(2).t().contiguous()               # (N, B_0)
        self._check(wm)

    def _time(self, g, t: int, slots: list):
        """Probe the node-wise part of time t: returns (exit (B, N, d), {cut: (B, N, d) skip})."""
        n, cuts = self.n, g.cuts
        dims = [cuts[i].leaf.reshape(n, -1).shape[1] for i in slots]
        B = sum(dims)   # one probe per feature of each slot: state[i][b, :, f] = 1 for b its row of the identity
        state = {i: e.to(cuts[i].leaf).unsqueeze(1).repeat(1, n, 1)
                 for i, e in zip(slots, torch.eye(B).split(dims, 1))}
        exit_kind = "x" if t == 0 else "output"
        exit_, skip = None, {}
        for i in reversed([i for i, c in enumerate(cuts) if c.time == t and c.kind != "attr"]):
            c = cuts[i]
            if c.kind == exit_kind:
                if exit_ is None:
                    exit_ = state.pop(i, None)
                    if t == 0 and exit_ is not None:  # what reaches x: relevance, x times its gradient
                        exit_ = exit_ * c.leaf.detach().reshape(n, -1)
                    continue
                raise NotDecomposable(f"two propagate outputs at step {t}")
            if i not in state or c.source is None:
                continue
            grad = state.pop(i).reshape(B, *c.leaf.shape)
            got = g.grad(c.source, [cuts[m].leaf for m in range(i)], grad, True)
            for m, gr in enumerate(got):
                cm = cuts[m]
                if gr is None or cm.kind == "attr":
                    continue
                gr = gr.detach().reshape(B, n, -1)
                if cm.time == t:
                    state[m] = gr if m not in state else state[m] + gr
                elif cm.time == t - 1:
                    skip[m] = gr if m not in skip else skip[m] + gr
                elif bool((gr != 0).any()):
                    raise NotDecomposable("a route skips more than one propagate (jumping knowledge, a long residual)")
        if exit_ is None:
            ref = cuts[0].leaf if t == 0 else next(c.leaf for c in cuts if c.kind == "output" and c.layer == t)
            exit_ = ref.new_zeros(B, n, ref.reshape(n, -1).shape[1])
        return exit_, skip

    def _messages(self, g, wm, t: int):
        """Per-feature shares of layer t's propagate: ({cut: G (P, d)}, (src, dst, ptr, self))."""
        n, msg = self.n, g.messages[t - 1]
        if msg.calls != 1 or not isinstance(msg.out, Tensor) or msg.flow != "source_to_target":
            raise NotDecomposable(f"layer {t}'s message is not one call along source_to_target")
        out_cut = next((c for c in g.cuts if c.kind == "output" and c.layer == t), None)
        if out_cut is None:
            raise NotDecomposable(f"layer {t}'s propagate output is not cut")
        edges, M, O = g.steps[t - 1], msg.out, out_cut.source
        E, dst = edges.shape[1], edges[1]
        if M.dim() == 0 or M.shape[0] != E:
            raise NotDecomposable(f"layer {t}'s message has no row per edge")
        d = O.reshape(n, -1).shape[1]
        if M.reshape(E, -1).shape[1] != d:
            raise NotDecomposable(f"layer {t}'s aggregation changes the feature size")
        (A,) = g.grad(O, [M], torch.ones_like(O), False)
        A = torch.zeros(E, d, dtype=O.dtype, device=O.device) if A is None else A.detach().reshape(E, -1)
        r = torch.rand_like(O)
        (Ar,) = g.grad(O, [M], r, False)
        if Ar is not None and not _close(Ar.detach().reshape(E, -1), A * r.reshape(n, -1)[dst], float(A.abs().max())):
            raise NotDecomposable(f"layer {t}'s aggregation is not a per-feature share of the messages")
        tensors = [v[0] for v in msg.args.values()]
        ones = g.grad(M, tensors, torch.ones_like(M), False)
        r = torch.rand_like(M)
        rand = g.grad(M, tensors, r, False)
        src_p, dst_p = wm.steps[t - 1]
        pair_of_edge, _ = find_steps(src_p, dst_p, edges[0], dst, n)
        self_p = src_p == dst_p
        per_cut: dict = {}
        for (name, (_, cut, side)), D, Dr in zip(msg.args.items(), ones, rand):
            if D is None:
                continue
            D, Dr = D.detach().reshape(E, -1), Dr.detach().reshape(E, -1)
            if D.shape[1] != d or not _close(Dr, D * r.reshape(E, -1), float(D.abs().max())):
                raise NotDecomposable(f"layer {t}'s message is not elementwise in {name}")
            C = D * A
            G = per_cut.setdefault(cut, C.new_zeros(src_p.numel(), d))
            if side == 0:   # x_j: the step j -> k
                G.index_add_(0, pair_of_edge, C)
            else:           # x_i: the receiver's own row, on the self step k -> k
                on_k = C.new_zeros(n, d).index_add_(0, dst, C)
                G[self_p] += on_k[dst_p[self_p]]
        return per_cut, (src_p, dst_p, index2ptr(dst_p, n), self_p)

    def _check(self, wm):
        """The algebra's weighted backward equals the recorded graph's on node weights 1 and random."""
        w = torch.cat([torch.ones(1, self.n), torch.rand(2, self.n)]).to(wm.x)
        (rel, *_), _ = wm.graph.backward(wm.start, lambda u: w, 3)
        rel = rel.detach().reshape(3, -1)
        if not _close(self.weighted(w), rel.sum(1), float(rel.abs().sum(1).max())):
            raise NotDecomposable("the per-node matrices and per-edge shares do not reproduce the backward")

    def back(self, t: int, k: Tensor, a: Tensor) -> tuple[Tensor, Tensor | None]:
        """(v, s) for states a (W, B_t) at rows k: v = E_t[k]^T a (W, d), s = S_t[k]^T a or None
        (E_t: (N, B_t, d), S_t: (N, B_t, B_{t-1}))."""
        S = self.S[t]
        return _matvec(self.E[t], k, a), (None if S is None else _matvec(S, k, a))

    def child(self, t: int, p: Tensor, v: Tensor, s: Tensor | None) -> Tensor:
        """The state at time t-1 of steps p (pair ids) from v, s (rows aligned with p)."""
        out = v.new_zeros(p.numel(), self.pi_width(t - 1))
        for o, G in self.G[t]:
            out[:, o:o + G.shape[1]] = G[p] * v
        if s is not None:
            own = self.pairs[t][3][p]
            out[own] += s[own]
        return out

    @cached_property
    def first_step(self) -> Tensor:
        """(P_1, B_1): per step p = j -> k of time 1 the exact prefix vector z_p, so that a walk whose
        step 1 is p and whose state at time 1 is a has relevance z_p . a (computed once)."""
        src, dst, _, own = self.pairs[1]
        y = self.pi0.new_zeros(src.numel(), self.E[1].shape[2])
        for o, G in self.G[1]:
            y += self.pi0[src, o:o + G.shape[1]] * G
        z = torch.cat([torch.einsum("po,pbo->pb", yy, self.E[1][dd]) for yy, dd in zip(y.split(1024), dst.split(1024))])
        if self.S[1] is not None:
            z[own] += torch.einsum("pa,pba->pb", self.pi0[src[own]], self.S[1][dst[own]])
        return z

    def pi_width(self, t: int) -> int:
        return self.pi0.shape[1] if t == 0 else self.E[t].shape[1]

    def find(self, t: int, j: Tensor, k: Tensor) -> Tensor:
        """The pair ids of the steps j -> k at time t (valid steps)."""
        return find_steps(self.pairs[t][0], self.pairs[t][1], j, k, self.n)[0]

    def walk_relevance(self, walks: Tensor) -> Tensor:
        """Relevance of valid walks (W, L+1)."""
        a = self.a_out[walks[:, -1]]
        for t in range(self.depth, 0, -1):
            v, s = self.back(t, walks[:, t], a)
            a = self.child(t, self.find(t, walks[:, t - 1], walks[:, t]), v, s)
        return (self.pi0[walks[:, 0]] * a).sum(-1)

    def weighted(self, w: Tensor) -> Tensor:
        r""":math:`\sum_w \prod_t w[j_t] R_w` for node weights w (M, N), chunked over M."""
        out = []
        P = max(int(self.pairs[t][0].numel()) for t in self.pairs)
        width = max(int(self.E[t].shape[2]) for t in self.E)
        chunk = max(1, int(2e7 // max(P * width, 1)))
        for part in w.split(chunk):
            a = self.a_out.unsqueeze(0) * part.unsqueeze(-1)
            for t in range(self.depth, 0, -1):
                v = torch.einsum("mnb,nbo->mno", a, self.E[t])
                src, dst, _, _ = self.pairs[t]
                nxt = a.new_zeros(a.shape[0], self.n, self.pi_width(t - 1))
                for o, G in self.G[t]:
                    nxt[..., o:o + G.shape[1]].index_add_(1, src, G.unsqueeze(0) * v[:, dst])
                if self.S[t] is not None:
                    nxt += torch.einsum("mnb,nba->mna", a, self.S[t])
                a = nxt * part.unsqueeze(-1)
            out.append((a * self.pi0).sum((1, 2)))
        return torch.cat(out)

    def bounds(self) -> list:
        """Per time t a box (lo, hi), each (N, B_t), of every prefix vector pi with R = pi . a_t[k]
        (interval arithmetic from pi_0, the union over the steps into k)."""
        out = [(self.pi0, self.pi0)]
        for t in range(1, self.depth + 1):
            lo, hi = out[-1]
            src, dst, _, _ = self.pairs[t]
            y_lo = y_hi = lo.new_zeros(src.numel(), self.E[t].shape[2])
            for o, G in self.G[t]:
                a, b = lo[src, o:o + G.shape[1]] * G, hi[src, o:o + G.shape[1]] * G
                y_lo, y_hi = y_lo + torch.minimum(a, b), y_hi + torch.maximum(a, b)
            k_lo, k_hi = scatter(y_lo, dst, 0, self.n, "min"), scatter(y_hi, dst, 0, self.n, "max")
            n_lo, n_hi = _interval(k_lo, k_hi, self.E[t].transpose(1, 2))
            if self.S[t] is not None:
                s_lo, s_hi = _interval(lo, hi, self.S[t].transpose(1, 2))
                n_lo, n_hi = n_lo + s_lo.clamp(max=0), n_hi + s_hi.clamp(min=0)
            out.append((n_lo, n_hi))
        return out


def _matvec(m: Tensor, k: Tensor, a: Tensor) -> Tensor:
    """m[k[w]]^T a[w] for every w (m: (N, B, O), a: (W, B)), as one sparse product: the states placed
    in the rows of their nodes' blocks times m stacked (N B, O) (no gather of W matrices)."""
    W, B = a.shape
    if W == 0:
        return a.new_zeros(0, m.shape[2])
    rows = torch.arange(W, device=a.device).repeat_interleave(B)
    cols = (k * B).unsqueeze(1) + torch.arange(B, device=a.device)
    placed = torch.sparse_coo_tensor(torch.stack([rows, cols.reshape(-1)]), a.reshape(-1),
                                     size=(W, m.shape[0] * B), is_coalesced=True, check_invariants=False)
    return torch.sparse.mm(placed, m.reshape(-1, m.shape[2]))


def _interval(lo: Tensor, hi: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """Box of m[n]^T y for y in [lo[n], hi[n]] (m: (N, A, B), lo/hi: (N, A)): center and radius."""
    center = torch.bmm(((lo + hi) / 2).unsqueeze(1), m).squeeze(1)
    if bool((lo == hi).all()):
        return center, center
    radius = torch.bmm(((hi - lo) / 2).unsqueeze(1), m.abs()).squeeze(1)
    return center - radius, center + radius
