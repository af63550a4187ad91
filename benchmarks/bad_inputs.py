"""A catalogue of bad or unusual inputs to lrp_lib's public entry points, each run and classified.

Every case calls one entry point the way a new user might, then the outcome is sorted
automatically into one of four classes:

* ``clear error``: an exception (or, for a result that cannot be fully right, a warning) whose
  message names the argument at fault (each case lists the words that count as naming it);
* ``works``: a result that passes the case's check (against a reference, or conservation);
* ``silently wrong``: a result that is NaN/Inf or fails the check, with no such message;
* ``obscure crash``: any other exception.

The explainer cases use ``lrp_lib.explain.explainer.Explainer`` (PyG's ``Explainer`` that checks the inputs
before its prediction pass) where the library has it, else PyG's own ``Explainer``: what a user of
that version of the library would call.

    python benchmarks/bad_inputs.py                    # writes benchmarks/results/bad_inputs.json
    PYTHONPATH=/path/to/old/checkout python benchmarks/bad_inputs.py --label before

``--label before`` measures another checkout of ``lrp_lib`` (the one on ``PYTHONPATH``) and stores
its outcomes under ``"before"`` in the existing results file, keeping the ``"after"`` ones.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lrp_lib  # noqa: E402  (from PYTHONPATH: the checkout being measured)
from lrp_lib.explain import explainer as lrp_explain  # noqa: E402
from lrp_lib.teach import graph as lrp_graph  # noqa: E402
from lrp_lib.teach import ops  # noqa: E402
from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.explain import Explainer as PyGExplainer  # noqa: E402
from torch_geometric.nn import GATConv, GCNConv, GINConv, GraphConv, SAGEConv, global_add_pool  # noqa: E402
from torch_geometric.utils import to_edge_index, to_torch_csr_tensor  # noqa: E402

CLASSES = ("clear error", "works", "silently wrong", "obscure crash")
Explainer = getattr(lrp_explain, "Explainer", PyGExplainer)


# -------------------------------------------------------------------- models
class Net(nn.Module):
    """Two convolutions of one kind, ReLU, add-pooling, a linear read-out; no biases (so the node
    relevance of a graph sums to the explained logit: the conservation check)."""

    def __init__(self, kind: str, features: int = 3, hidden: int = 8, out: int = 1, self_loops: bool = True):
        super().__init__()
        self.kind = kind

        def conv(i, o):
            if kind == "GCN":
                return GCNConv(i, o, bias=False, add_self_loops=self_loops)
            if kind == "GIN":
                return GINConv(nn.Sequential(nn.Linear(i, o, bias=False), nn.ReLU(), nn.Linear(o, o, bias=False)))
            if kind == "GraphConv":
                return GraphConv(i, o, bias=False)
            return SAGEConv(i, o, bias=False)

        self.conv1, self.conv2 = conv(features, hidden), conv(hidden, hidden)
        self.lin = nn.Linear(hidden, out, bias=False)

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        extra = (edge_weight,) if self.kind in ("GCN", "GraphConv") and edge_weight is not None else ()
        h = torch.relu(self.conv1(x, edge_index, *extra))
        h = torch.relu(self.conv2(h, edge_index, *extra))
        return self.lin(global_add_pool(h, batch))


class HalfDetached(Net):
    """Half of the hidden channels pass through ``.detach()``: their share never reaches x."""

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        h = torch.relu(self.conv1(x, edge_index))
        h = torch.cat([h[:, :4], h[:, 4:].detach()], dim=1)
        h = torch.relu(self.conv2(h, edge_index))
        return self.lin(global_add_pool(h, batch))


class AllDetached(Net):
    def forward(self, x, edge_index, batch=None, edge_weight=None):
        return super().forward(x, edge_index, batch).detach()


class Sigmoid(Net):
    def forward(self, x, edge_index, batch=None, edge_weight=None):
        return torch.sigmoid(super().forward(x, edge_index, batch))


def model(kind, cls=Net, **kw):
    torch.manual_seed(0)
    m = cls(kind, **kw)
    if kind == "GCN":  # positive first-layer weights keep the hidden units alive on positive inputs
        with torch.no_grad():
            m.conv1.lin.weight.abs_()
    return m.eval()


def graph(n=6, features=3, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, features, generator=g, dtype=dtype) + 0.1
    src = torch.tensor([0, 1, 1, 2, 2, 3, 3, 4, 4, 5])
    dst = torch.tensor([1, 0, 2, 1, 3, 2, 4, 3, 5, 4])
    keep = (src < n) & (dst < n)
    return x, torch.stack([src[keep], dst[keep]])


def two_graphs():
    x, ei = graph()
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    return x, ei, batch  # edges 2-3 and 3-2 join the graphs: they cross


# ------------------------------------------------------------------ checks
def finite(*ts) -> bool:
    return all(t is None or bool(torch.isfinite(t).all()) for t in ts)


def conserved(expl, m, x, edge_index, **kw) -> bool:
    """The node relevance sums to |logit| per explained graph (target = the predicted class; a final
    sigmoid is explained from its input, the logit)."""
    with torch.no_grad():
        out = m(x, edge_index, **kw)
    if expl.get("explained_output") == "the input of the model's final sigmoid":
        out = torch.logit(out.double())  # a probability head is explained from its logit
    node = expl.node_mask
    if not finite(node, expl.get("edge_mask")):
        return False
    want = float(out.abs().sum())
    return math.isclose(float(node.sum()), want, rel_tol=1e-4, abs_tol=1e-5)


def explainer(m, phenomenon=False, **cfg):
    config = dict(mode="binary_classification", task_level="graph", return_type="raw")
    config.update(cfg)
    return Explainer(m, algorithm=lrp_explain.LRPExplainer(mask="relevance"), explanation_type="phenomenon" if phenomenon else "model",
                     node_mask_type="attributes", edge_mask_type="object", model_config=config)


# ------------------------------------------------------------------- cases
CASES = []


def case(name, entry, names, check=None):
    """Register ``fn`` as a case: ``names`` are the words an error must contain to be clear,
    ``check(result) -> bool`` the test of a returned result (None: no result is right)."""
    def deco(fn):
        CASES.append(dict(case=name, entry=entry, names=names, run=fn, check=check))
        return fn
    return deco


def explain_case(name, kind, names, x=None, edge_index=None, check="conserve", phenomenon=False,
                 m=None, target=None, return_type="raw", **kw):
    """A case calling ``Explainer(model, LRPExplainer())(x, edge_index, **kw)``."""
    def run():
        mm = m() if callable(m) else model(kind)
        gx, gei = graph()
        xx = gx if x is None else (x() if callable(x) else x)
        ei = gei if edge_index is None else (edge_index() if callable(edge_index) else edge_index)
        kwargs = {k: (v() if callable(v) else v) for k, v in kw.items()}
        extra = {"target": target} if target is not None else {}
        expl = explainer(mm, phenomenon=phenomenon, return_type=return_type)(xx, ei, **extra, **kwargs)
        return expl, mm, xx, ei, kwargs

    def chk(res):
        expl, mm, xx, ei, kwargs = res
        if check == "conserve":
            return conserved(expl, mm, xx, ei.long() if isinstance(ei, torch.Tensor) else ei, **kwargs)
        if callable(check):
            return check(expl, mm, xx, ei, kwargs)
        return False

    CASES.append(dict(case=name, entry=f"Explainer(LRPExplainer) on {kind}", names=names, run=run,
                      check=None if check is None else chk))


def nan_at(t, value=float("nan")):
    t = t.clone()
    t.view(-1)[0] = value
    return t


def same_as_long(expl, mm, xx, ei, kwargs):
    ref = explainer(mm)(xx, ei.long(), **kwargs)
    return (finite(expl.node_mask) and torch.allclose(expl.node_mask, ref.node_mask, atol=1e-6)
            and torch.allclose(expl.edge_mask, ref.edge_mask, atol=1e-6))


KINDS = ("GCN", "GIN", "GraphConv", "SAGE")
X = graph()[0]
EI = graph()[1]
for kind in KINDS:
    explain_case("good input", kind, (), check="conserve")
    explain_case("float64 input", kind, (), x=X.double(), m=lambda k=kind: model(k).double())
    explain_case("no edges", kind, (), edge_index=torch.zeros(2, 0, dtype=torch.long))
    explain_case("isolated node and self-loops", kind, (),
                 edge_index=torch.tensor([[0, 1, 2, 2, 3], [1, 0, 2, 3, 3]]))
    explain_case("edge_index int32", kind, (), edge_index=EI.int(), check=same_as_long)
    explain_case("batch of two graphs", kind, (), x=torch.cat([X, X]),
                 edge_index=torch.cat([EI, EI + 6], 1), batch=torch.arange(2).repeat_interleave(6))
    explain_case("NaN in x", kind, ("x",), x=nan_at(X), check=None)
    explain_case("Inf in x", kind, ("x",), x=nan_at(X, float("inf")), check=None)
    explain_case("integer x", kind, ("x",), x=(X * 10).long(), check=None)
    explain_case("1-D x", kind, ("x",), x=X[:, 0], check=None)
    explain_case("empty graph", kind, ("x", "empty", "no nodes"), x=torch.zeros(0, 3),
                 edge_index=torch.zeros(2, 0, dtype=torch.long), check=None)
    explain_case("edge_index out of range", kind, ("edge_index",), edge_index=torch.cat([EI, torch.tensor([[0], [6]])], 1),
                 check=None)
    explain_case("negative edge_index", kind, ("edge_index",), edge_index=torch.cat([EI, torch.tensor([[0], [-1]])], 1),
                 check=None)
    explain_case("1-D edge_index", kind, ("edge_index",), edge_index=EI.reshape(-1), check=None)
    explain_case("transposed edge_index (E, 2)", kind, ("edge_index",), edge_index=EI.t().contiguous(), check=None)
    explain_case("float edge_index", kind, ("edge_index",), edge_index=EI.float(), check=None)
    explain_case("edge_index with 3 rows", kind, ("edge_index",), edge_index=torch.cat([EI, EI[:1]]), check=None)

    @case("sparse adjacency with edge masks (a CSR adj_t)", f"Explainer(LRPExplainer) on {kind}", (),
          check=lambda res: finite(res[0].edge_mask) and torch.equal(res[0].edge_index, res[1].edge_index)
          and all(torch.allclose(res[0][k], res[1][k], atol=1e-6) for k in ("node_mask", "edge_mask")))
    def _sparse_edge_masks(kind=kind):
        """Node and edge masks of the model called with an adj_t, and with its edges as edge_index (in the
        order of to_edge_index(adj_t), the explanation's edge_index)."""
        mm, (gx, gei) = model(kind), graph()
        adj = to_torch_csr_tensor(gei.flip(0), torch.ones(gei.shape[1]), size=(6, 6))
        return explainer(mm)(gx, adj), explainer(mm)(gx, to_edge_index(adj)[0].flip(0))

    @case("sparse adjacency, node masks (a CSR adj_t)", f"Explainer(LRPExplainer) on {kind}", (),
          check=lambda res: finite(res[0].node_mask) and torch.allclose(res[0].node_mask, res[1].node_mask, atol=1e-6))
    def _sparse_node_masks(kind=kind):
        """Node masks of the model called with an adj_t, and with the same edges as edge_index."""
        mm, (gx, gei) = model(kind), graph()
        ex = Explainer(mm, algorithm=lrp_explain.LRPExplainer(mask="relevance"), explanation_type="model",
                       node_mask_type="attributes", model_config=dict(mode="binary_classification",
                                                                      task_level="graph", return_type="raw"))
        return ex(gx, to_torch_csr_tensor(gei.flip(0), torch.ones(gei.shape[1]), size=(6, 6))), ex(gx, gei)
    explain_case("batch too short", kind, ("batch",), batch=torch.zeros(5, dtype=torch.long), check=None)
    explain_case("batch whose graphs share edges", kind, ("batch",), batch=two_graphs()[2], check=None)
    explain_case("binary target 2", kind, ("target",), phenomenon=True, target=torch.tensor([2]), check=None)
    explain_case("binary target -1", kind, ("target",), phenomenon=True, target=torch.tensor([-1]), check=None)
    explain_case("binary target of wrong length", kind, ("target",), phenomenon=True,
                 target=torch.tensor([1, 0, 1]), check=None)
    explain_case("detach inside the model", kind, ("detach", "did not reach", "lost"),
                 m=lambda k=kind: model(k, HalfDetached), check="conserve")
    explain_case("fully detached output", kind, ("detach", "model"), m=lambda k=kind: model(k, AllDetached),
                 check=None)
    explain_case("sigmoid in forward", kind, (), m=lambda k=kind: model(k, Sigmoid), check="conserve",
                 return_type="probs")  # a probability head: explained from its logit

for kind in ("GCN", "GraphConv"):
    W = torch.rand(EI.shape[1]) + 0.5
    explain_case("edge_weight", kind, (), edge_weight=W)
    explain_case("NaN in edge_weight", kind, ("edge_weight",), edge_weight=nan_at(W), check=None)
    explain_case("Inf in edge_weight", kind, ("edge_weight",), edge_weight=nan_at(W, float("inf")), check=None)
    explain_case("edge_weight of wrong length", kind, ("edge_weight",), edge_weight=W[:-1], check=None)

explain_case("negative edge weights", "GCN", ("edge_weight",), edge_weight=-torch.ones(EI.shape[1]), check=None)
explain_case("edge_index int32, no self-loops", "GCN", (), edge_index=EI.int(),
             m=lambda: model("GCN", self_loops=False), check=same_as_long)


class PerNode(Net):
    """One output row per node (no pooling): a node-level model."""

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        h = torch.relu(self.conv1(x, edge_index))
        return self.lin(torch.relu(self.conv2(h, edge_index)))


class Dropping(Net):
    """Dropout between the layers (on in training mode)."""

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        h = nn.functional.dropout(torch.relu(self.conv1(x, edge_index)), 0.5, self.training)
        return self.lin(global_add_pool(torch.relu(self.conv2(h, edge_index)), batch))


class LinkPredictor(Net):
    """The score of each link of ``edge_label_index``: the dot product of its ends' embeddings."""

    def forward(self, x, edge_index, edge_label_index=None):
        z = self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)
        return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(dim=-1)


class AttentionOnEdges(nn.Module):
    """A GAT reading edge_attr only in its attention scores (``edge_dim``)."""

    def __init__(self, kind=None):
        super().__init__()
        self.att, self.lin = GATConv(3, 4, heads=2, edge_dim=2), nn.Linear(8, 1, bias=False)

    def forward(self, x, edge_index, edge_attr=None, batch=None):
        return self.lin(global_add_pool(torch.relu(self.att(x, edge_index, edge_attr=edge_attr)), batch))


def _conserved_in_training(expl, mm, xx, ei, kwargs):
    mm.eval()
    return conserved(expl, mm, xx, ei, **kwargs)


explain_case("float64 x into a float32 model", "GCN", ("x", "float64"), x=X.double(), check=None)
explain_case("float16 x into a float32 model", "GCN", ("x", "float16"), x=X.half(), check=None)
explain_case("task_level='graph' for a model with one row per node", "GCN", ("task_level",),
             m=lambda: model("GCN", PerNode), check=None)
explain_case("model left in training mode (dropout)", "GCN", ("training",),
             m=lambda: model("GCN", Dropping).train(), check=_conserved_in_training)
explain_case("edge_attr read only by attention (GATConv edge_dim)", "GAT", ("edge_attr",),
             m=lambda: model("GAT", AttentionOnEdges), edge_attr=torch.rand(EI.shape[1], 2), check="conserve")


def _link(pair):
    m = model("GCN", LinkPredictor)
    expl = Explainer(m, algorithm=lrp_explain.LRPExplainer(mask="relevance"), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="binary_classification", task_level="edge", return_type="raw"))(
        X, EI, edge_label_index=pair)
    return expl, m, pair


def _link_conserved(res):
    expl, m, pair = res
    with torch.no_grad():
        logit = float(m(X, EI, edge_label_index=pair))
    return math.isclose(float(expl.node_mask.sum() + expl.bias_relevance), abs(logit), rel_tol=1e-4, abs_tol=1e-5)


CASES.append(dict(case="one link as a 1-D edge_label_index", entry="Explainer(LRPExplainer) on GCN link predictor",
                  names=(), run=lambda: _link(torch.tensor([0, 4])), check=_link_conserved))


def _node_level_shared_edges():
    m = model("GCN", PerNode)
    x, ei, batch = two_graphs()
    expl = explainer(m, task_level="node")(x, ei, batch=batch, index=2)
    return expl, m, x, ei


def _node_level_conserved(res):
    expl, m, x, ei = res
    with torch.no_grad():
        want = abs(float(m(x, ei)[2, 0]))
    return math.isclose(float(expl.node_mask.sum()), want, rel_tol=1e-4, abs_tol=1e-5)


CASES.append(dict(case="node-level batch whose graphs share edges", entry="Explainer(LRPExplainer) on GCN",
                  names=(), run=_node_level_shared_edges, check=_node_level_conserved))


def _restored(train):
    m = model("GIN")
    m.train(train)
    try:
        explainer(m)(X, EI.float())
    except Exception:
        pass
    if m.training != train:
        raise AssertionError("the model's training flag was not restored")
    return m.training


CASES.append(dict(case="training flag after an error", entry="Explainer(LRPExplainer) on GIN", names=(),
                  run=lambda: _restored(True), check=lambda r: r is True))


# ------------------------------------------------------------------- ops
def ops_case(name, names, fn, check=None):
    CASES.append(dict(case=name, entry=f"ops.{fn.__name__}" if not name.startswith("ops.") else name,
                      names=names, run=fn, check=check))


def _lin(x=None, w=None, b=None, eps=1e-6):
    torch.manual_seed(0)
    x = torch.rand(4, 3, requires_grad=True) if x is None else x
    w = torch.randn(2, 3) if w is None else w
    out = ops.linear_eps(x, w, b, eps=eps)
    out.backward(out.detach())
    return out, x.grad


def lin_ok(res):
    out, g = res
    return finite(out, g) and math.isclose(float(g.sum()), float((out.detach() ** 2 / (out.detach().abs() + 1e-6)).sum()), rel_tol=1e-3)


def _case(name, entry, names, fn, check=None):
    CASES.append(dict(case=name, entry=entry, names=names, run=fn, check=check))


_case("eps NaN", "ops.linear_eps", ("eps",), lambda: _lin(eps=float("nan")))
_case("eps Inf", "ops.linear_eps", ("eps",), lambda: _lin(eps=float("inf")))
_case("eps negative", "ops.linear_eps", ("eps",), lambda: _lin(eps=-1.0))
_case("eps a string", "ops.linear_eps", ("eps",), lambda: _lin(eps="0.1"))
_case("eps 0.1", "ops.linear_eps", (), lambda: _lin(eps=0.1), check=lambda r: finite(*r))
_case("integer x", "ops.linear_eps", ("x",), lambda: _lin(x=torch.ones(4, 3, dtype=torch.long)))
_case("weight of wrong shape", "ops.linear_eps", ("weight", "x"), lambda: _lin(w=torch.randn(2, 4)))
_case("bias of wrong shape", "ops.linear_eps", ("bias",), lambda: _lin(b=torch.zeros(3)))
_case("NaN in x (relevance NaN)", "ops.linear_eps", ("x", "NaN"),
      lambda: _lin(x=nan_at(torch.rand(4, 3)).requires_grad_(True)))


def _scatter(op, index, n=5, dim_size=None, src=None):
    src = torch.rand(n, 3, requires_grad=True) if src is None else src
    out = getattr(ops, op)(src, index, 0, dim_size)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(out.detach())
    return src, index, out, src.grad, op


def scatter_ok(res):
    src, index, out, g, op = res
    ref = getattr(ops, op)(src.detach(), index.long(), 0, out.shape[0])
    ref = ref[0] if isinstance(ref, tuple) else ref
    return finite(out, g) and torch.allclose(out, ref) and math.isclose(float(g.sum()), float(out.detach().sum()) if op != "scatter_mean" else float(g.sum()), rel_tol=1e-4)


IDX = torch.tensor([0, 0, 1, 2, 2])
for op in ("scatter_add", "scatter_mean", "scatter_max"):
    _case("int32 index", f"ops.{op}", (), lambda op=op: _scatter(op, IDX.int()), check=scatter_ok)
    _case("index out of range", f"ops.{op}", ("index",), lambda op=op: _scatter(op, IDX, dim_size=2))
    _case("negative index", f"ops.{op}", ("index",), lambda op=op: _scatter(op, torch.tensor([0, -1, 1, 2, 2])))
    _case("float index", f"ops.{op}", ("index",), lambda op=op: _scatter(op, IDX.float()))
    _case("index of wrong length", f"ops.{op}", ("index",), lambda op=op: _scatter(op, IDX[:4]))
_case("negative dim_size", "ops.scatter_add", ("dim_size",), lambda: _scatter("scatter_add", IDX, dim_size=-1))
_case("integer src", "ops.scatter_add", ("src",), lambda: _scatter("scatter_add", IDX, src=torch.ones(5, 3, dtype=torch.long)))


def _sel(index):
    src = torch.rand(4, 2, requires_grad=True)
    out = ops.index_select(src, 0, index)
    out.backward(torch.ones_like(out))
    return src, out


_case("int32 index", "ops.index_select", (), lambda: _sel(torch.tensor([0, 3, 3], dtype=torch.int32)),
      check=lambda r: torch.equal(r[0].grad, torch.tensor([[1.0, 1], [0, 0], [0, 0], [2, 2]])))
_case("index out of range", "ops.index_select", ("index",), lambda: _sel(torch.tensor([0, 4])))
_case("2-D index", "ops.index_select", ("index",), lambda: _sel(torch.tensor([[0, 1]])))
_case("shapes that do not broadcast", "ops.add", ("a", "b"), lambda: ops.add(torch.ones(3), torch.ones(4)))
_case("no tensor", "ops.add", ("a", "b"), lambda: ops.add(1.0, 2.0))
_case("repeated dim", "ops.sum", ("dim",), lambda: ops.sum(torch.ones(2, 2), dim=(0, 0)))
_case("dim out of range", "ops.sum", ("dim",), lambda: ops.sum(torch.ones(2, 2), dim=2))
_case("integer x", "ops.relu", ("x",), lambda: ops.relu(torch.ones(3, dtype=torch.long)))
_case("empty list", "ops.cat", ("tensors",), lambda: ops.cat([]))
_case("negative repeats", "ops.repeat_tensor", ("repeats",), lambda: ops.repeat_tensor(torch.ones(2, 1), -1))


# ------------------------------------------------------------------ rules
_case("Epsilon(nan)", "rules.Epsilon", ("eps",), lambda: rules.Epsilon(float("nan")))
_case("Epsilon(inf)", "rules.Epsilon", ("eps",), lambda: rules.Epsilon(float("inf")))
_case("Epsilon(-1)", "rules.Epsilon", ("eps",), lambda: rules.Epsilon(-1.0))
_case("Gamma(nan)", "rules.Gamma", ("gamma",), lambda: rules.Gamma(float("nan")))
_case("Gamma(-0.5)", "rules.Gamma", ("gamma",), lambda: rules.Gamma(-0.5))
_case("Gamma(eps=inf)", "rules.Gamma", ("eps",), lambda: rules.Gamma(0.25, eps=float("inf")))
_case("AlphaBeta(3, 1)", "rules.AlphaBeta", ("alpha", "beta"), lambda: rules.AlphaBeta(3.0, 1.0))
_case("unknown rule name", "rules.get_rule", ("rule",), lambda: rules.get_rule("lrp-foo"))
_case("rule of wrong type", "rules.get_rule", ("rule",), lambda: rules.get_rule(3))


def _rule_linear(rule, x=None):
    torch.manual_seed(0)
    x = torch.rand(4, 3, requires_grad=True) if x is None else x
    w = torch.randn(2, 3)
    out = linear_maps.linear(x, w, None, rule=rule)
    out.backward(out.detach())
    return out, x.grad


def rule_conserves(res):
    out, g = res
    return finite(out, g) and math.isclose(float(g.sum()), float(out.sum() * 0 + (out.detach() ** 2 / out.detach().abs().add(1e-6)).sum()), rel_tol=1e-3)


_case("rule 'z'", "linear_maps.linear", (), lambda: _rule_linear("z"), check=lambda r: finite(*r))
_case("rule 'alpha2beta1'", "linear_maps.linear", (), lambda: _rule_linear("alpha2beta1"), check=lambda r: finite(*r))
_case("NaN in x (relevance NaN)", "linear_maps.linear", ("x", "NaN"),
      lambda: _rule_linear("epsilon", nan_at(torch.rand(4, 3)).requires_grad_(True)))
_case("weight of wrong shape", "linear_maps.linear", ("weight", "x"),
      lambda: linear_maps.linear(torch.rand(4, 3), torch.randn(2, 4)))


# ------------------------------------------------------------ graph layers
def gn_graph(**over):
    g = torch.Generator().manual_seed(2)
    d = dict(x=torch.rand(5, 3, generator=g), edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
             edge_attr=torch.rand(4, 2, generator=g), u=torch.rand(1, 2, generator=g))
    d.update(over)
    return Data(**d)


def _gn(layer, data):
    torch.manual_seed(0)
    data = lrp_graph.relevance_inputs(data)
    with lrp_lib.teach.relevance():
        out = layer(data)
    t = out.get({"EdgeLinear": "edge_attr", "NodeLinear": "x", "GlobalLinear": "u"}[type(layer).__name__])
    t.backward(t.detach())
    return t, lrp_graph.read_relevance(data)


def gn_ok(res):
    t, rel = res
    tot = rel.totals()
    return finite(t) and all(math.isfinite(v) for v in tot.values())


def node_layer():
    torch.manual_seed(0)
    return lrp_graph.NodeLinear(4, node_features=3, incoming_features=2, global_features=2, bias=False)


def edge_layer():
    torch.manual_seed(0)
    return lrp_graph.EdgeLinear(4, edge_features=2, sender_features=3, receiver_features=3, bias=False)


def global_layer():
    torch.manual_seed(0)
    return lrp_graph.GlobalLinear(4, node_features=3, edge_features=2, bias=False)


G = gn_graph()
_case("good graph", "graph.NodeLinear", (), lambda: _gn(node_layer(), G), check=gn_ok)
_case("edge_index int32", "graph.NodeLinear", (), lambda: _gn(node_layer(), gn_graph(edge_index=G.edge_index.int())),
      check=gn_ok)
_case("edge_index int32", "graph.EdgeLinear", (), lambda: _gn(edge_layer(), gn_graph(edge_index=G.edge_index.int())),
      check=gn_ok)
_case("NaN in edge_attr", "graph.EdgeLinear", ("edge_attr",), lambda: _gn(edge_layer(), gn_graph(edge_attr=nan_at(G.edge_attr))))
_case("Inf in edge_attr", "graph.NodeLinear", ("edge_attr",),
      lambda: _gn(node_layer(), gn_graph(edge_attr=nan_at(G.edge_attr, float("inf")))))
_case("NaN in x", "graph.NodeLinear", ("x",), lambda: _gn(node_layer(), gn_graph(x=nan_at(G.x))))
_case("NaN in u", "graph.NodeLinear", ("u",), lambda: _gn(node_layer(), gn_graph(u=nan_at(G.u))))
_case("NaN in x", "graph.GlobalLinear", ("x",), lambda: _gn(global_layer(), gn_graph(x=nan_at(G.x))))
_case("edge_index out of range", "graph.EdgeLinear", ("edge_index",),
      lambda: _gn(edge_layer(), gn_graph(edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 5]]))))
_case("transposed edge_index", "graph.NodeLinear", ("edge_index",),
      lambda: _gn(node_layer(), gn_graph(edge_index=G.edge_index.t().contiguous())))
_case("edge_attr of wrong length", "graph.NodeLinear", ("edge_attr",),
      lambda: _gn(node_layer(), gn_graph(edge_attr=G.edge_attr[:3])))
_case("batch too short", "graph.GlobalLinear", ("batch",),
      lambda: _gn(global_layer(), gn_graph(batch=torch.zeros(4, dtype=torch.long))))
_case("batch whose graphs share edges", "graph.GlobalLinear", ("batch",),
      lambda: _gn(lrp_graph.GlobalLinear(4, edge_features=2, bias=False),
                  gn_graph(batch=torch.tensor([0, 0, 0, 1, 1]), u=torch.rand(2, 2))))
_case("eps NaN", "graph.NodeLinear", ("eps",), lambda: lrp_graph.NodeLinear(4, node_features=3, eps=float("nan")))
_case("eps Inf", "graph.EdgeLinear", ("eps",), lambda: lrp_graph.EdgeLinear(4, edge_features=2, eps=float("inf")))
_case("integer x", "graph.NodeLinear", ("x",), lambda: _gn(node_layer(), gn_graph(x=torch.ones(5, 3, dtype=torch.long))))


# ------------------------------------------- walks, models without a graph, heterogeneous graphs
from lrp_lib.explain import walks as lrp_walks  # noqa: E402
from lrp_lib.explain.tensors import explain_tensor  # noqa: E402
from torch_geometric.nn import GINEConv, HeteroConv  # noqa: E402

W = torch.rand(EI.shape[1], generator=torch.Generator().manual_seed(2)) + 0.5


def _walk_model(m=None, x=None, edge_index=None, **kw):
    """WalkModel of a graph-level model (LRP-0), its output's one logit explained."""
    mm = m() if callable(m) else model("GCN")
    gx, gei = graph()
    xx, ei = (gx if x is None else x), (gei if edge_index is None else edge_index)
    return lrp_walks.WalkModel(mm, xx, ei, "z", target=0, **kw), mm, xx, ei, kw


def _walks_conserve(res):
    wm, mm, xx, ei, kw = res
    with torch.no_grad():
        out = float(mm(xx, ei, **kw).sum())
    return math.isclose(wm.total, out, rel_tol=1e-4, abs_tol=1e-6)


_case("good graph", "walks.WalkModel", (), _walk_model, check=_walks_conserve)
_case("good graph with edge_weight", "walks.WalkModel", (), lambda: _walk_model(edge_weight=W), check=_walks_conserve)
_case("NaN in x", "walks.WalkModel", ("x",), lambda: _walk_model(x=nan_at(X)))
_case("NaN in edge_weight", "walks.WalkModel", ("edge_weight",), lambda: _walk_model(edge_weight=nan_at(W)))
_case("edge_weight of wrong length", "walks.WalkModel", ("edge_weight",), lambda: _walk_model(edge_weight=W[:-1]))
_case("float64 x into a float32 model", "walks.WalkModel", ("x", "float64"), lambda: _walk_model(x=X.double()))
_case("transposed edge_index (E, 2)", "walks.WalkModel", ("edge_index",),
      lambda: _walk_model(edge_index=EI.t().contiguous()))
_case("detach inside the model", "walks.WalkModel", ("detach", "did not reach", "lost"),
      lambda: _walk_model(m=lambda: model("GCN", HalfDetached)), check=_walks_conserve)


def _mlp(detach=False, nan_weight=False):
    torch.manual_seed(0)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 6, bias=False), nn.Linear(6, 2, bias=False)

        def forward(self, t):
            h = self.a(t).relu()
            return self.b(torch.cat([h[:, :3], h[:, 3:].detach()], 1) if detach else h)
    m = MLP().eval()
    if nan_weight:
        with torch.no_grad():
            m.b.weight[0, 0] = float("nan")
    return m


def _tensor_conserves(res):
    return finite(res.relevance) and math.isclose(
        float(res.relevance.sum()) + res.bias_relevance, float(res.explained.sum()), rel_tol=1e-4, abs_tol=1e-6)


_case("good input", "explain_tensor", (), lambda: explain_tensor(_mlp(), X, rule="z"), check=_tensor_conserves)
_case("NaN in x", "explain_tensor", ("x",), lambda: explain_tensor(_mlp(), nan_at(X), rule="z"))
_case("NaN in the weights", "explain_tensor", ("weights",), lambda: explain_tensor(_mlp(nan_weight=True), X))
_case("target out of range", "explain_tensor", ("target",), lambda: explain_tensor(_mlp(), X, torch.full((6,), 2)))
_case("detach inside the model", "explain_tensor", ("detach", "did not reach", "lost"),
      lambda: explain_tensor(_mlp(detach=True), X, rule="z"), check=_tensor_conserves)

HETERO_EI = {("a", "to", "b"): torch.tensor([[0, 1, 2, 3], [0, 1, 2, 0]]),
             ("b", "rev", "a"): torch.tensor([[0, 1, 2, 2], [1, 2, 3, 0]]),
             ("a", "self", "a"): torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])}


def _hetero(detach=False, dtype=torch.float64, x=None, edge_attr=None):
    """HeteroConv (SAGE a->b, GraphConv b->a, GINE with edge features a->a), no biases, LRP-0, node type a's
    row 1 explained (a regression)."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({("a", "to", "b"): SAGEConv((-1, -1), 3, bias=False),
                                    ("b", "rev", "a"): GraphConv((-1, -1), 3, bias=False),
                                    ("a", "self", "a"): GINEConv(nn.Linear(3, 3, bias=False), edge_dim=2)})
            self.head = nn.Linear(3, 1, bias=False)

        def forward(self, x, edge_index, edge_attr):
            h = self.conv(x, edge_index, edge_attr_dict=edge_attr)["a"].relu()
            return self.head(torch.cat([h[:, :1], h[:, 1:].detach()], 1) if detach else h)
    g = torch.Generator().manual_seed(3)
    xs = {"a": torch.rand(4, 3, generator=g, dtype=torch.float64), "b": torch.rand(3, 2, generator=g,
                                                                                     dtype=torch.float64)}
    attr = {("a", "self", "a"): torch.rand(4, 2, generator=g, dtype=torch.float64)}
    m = Net().to(dtype).eval()
    m({k: v.to(dtype) for k, v in xs.items()}, HETERO_EI, {k: v.to(dtype) for k, v in attr.items()})  # (lazy)
    with torch.no_grad():
        m.conv.convs["<a___self___a>"].lin.bias.zero_()
    xs = xs if x is None else x(xs)
    attr = attr if edge_attr is None else edge_attr(attr)
    e = Explainer(m, algorithm=lrp_explain.LRPExplainer("z"), explanation_type="model", node_mask_type="attributes",
                  edge_mask_type="object", model_config=dict(mode="regression", task_level="node",
                                                             return_type="raw"))(xs, HETERO_EI, index=1,
                                                                                 edge_attr=attr)
    return e, m, xs, attr


def _hetero_conserves(res):
    e, m, xs, attr = res
    with torch.no_grad():
        out = float(m(xs, HETERO_EI, attr)[1].sum())
    reached = sum(float(e[t].node_relevance.sum()) for t in xs) + sum(
        float(getattr(e[k], "edge_attr_relevance", torch.zeros(())).sum()) for k in attr)
    # (a bias-free model: nothing, the edge features' share included, may hide in bias_relevance)
    return finite(e.relevance_residual) and math.isclose(reached, out, rel_tol=1e-6, abs_tol=1e-9) and \
        abs(float(e.bias_relevance)) < 1e-9 and abs(float(e.relevance_residual)) < 1e-9


HETERO = "Explainer(LRPExplainer), heterogeneous graph"
_case("good graph with edge_attr", HETERO, (), _hetero, check=_hetero_conserves)
_case("float32 node features into a float64 model", HETERO, ("x", "float32"),
      lambda: _hetero(x=lambda xs: {"a": xs["a"], "b": xs["b"].float()}))
_case("edge_attr of wrong length", HETERO, ("edge_attr",), lambda: _hetero(edge_attr=lambda a: {k: v[:3] for k, v in
                                                                                               a.items()}))
_case("NaN in x", HETERO, ("x",), lambda: _hetero(x=lambda xs: {"a": nan_at(xs["a"]), "b": xs["b"]}))
_case("detach inside the model", HETERO, ("detach", "did not reach", "lost"), lambda: _hetero(detach=True),
      check=_hetero_conserves)


# ----------------------------------------------------------------- running
_PATH = re.compile(r"(/[\w.\-]+)+/?|[A-Za-z]:\\[\w.\\\-]+")
_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def sanitise(text: str) -> str:
    """One line, no paths or addresses (machine-independent)."""
    text = _ADDR.sub("0x…", _PATH.sub("<path>", text))
    return " ".join(text.split())


def names_argument(message: str, names) -> bool:
    """``message`` contains one of ``names`` as a word (so 'x' is not found in 'expected')."""
    return any(re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", message, re.IGNORECASE) for n in names)


def classify(c) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = c["run"]()
        except Exception as e:  # noqa: BLE001 - every exception is classified
            message = f"{type(e).__name__}: {e}"
            kind = "clear error" if c["names"] and names_argument(str(e), c["names"]) else "obscure crash"
            return dict(outcome=kind, message=sanitise(message))
    warned = [f"{type(w.message).__name__}: {w.message}" for w in caught
              if issubclass(w.category, UserWarning)]
    try:
        ok = c["check"] is not None and bool(c["check"](result))
    except Exception as e:  # noqa: BLE001 - a check that cannot run on the result: not a correct result
        ok, warned = False, warned + [f"(check failed: {type(e).__name__})"]
    if ok and not (c["names"] and any(names_argument(w, c["names"]) for w in warned)):
        return dict(outcome="works", message=sanitise(warned[0]) if warned else "")
    clear = [w for w in warned if c["names"] and names_argument(w, c["names"])]
    if clear:
        return dict(outcome="clear error", message=sanitise(clear[0]))
    return dict(outcome="silently wrong", message=sanitise(warned[0]) if warned else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", choices=("before", "after"), default="after",
                        help="store the outcomes as 'before' (another checkout) or 'after' (default)")
    parser.add_argument("--commit", default=None, help="the commit measured, recorded with --label before")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with warnings.catch_warnings():  # PyTorch's once-per-process notices on sparse tensors, not any case's
        warnings.simplefilter("ignore")
        to_torch_csr_tensor(EI.flip(0), torch.ones(EI.shape[1]), size=(6, 6))
    rows = []
    for c in CASES:
        r = classify(c)
        rows.append(dict(case=c["case"], entry=c["entry"], **r))
        print(f"{r['outcome']:15s} {c['entry']:40s} {c['case']:35s} {r['message'][:70]}")
    counts = {k: sum(r["outcome"] == k for r in rows) for k in CLASSES}
    print(counts, len(rows))
    from results_file import RESULTS, write_results
    path = RESULTS / "bad_inputs.json"
    old = json.loads(path.read_text())["results"] if path.exists() else {}
    measured = dict(counts=counts, cases=rows)
    if args.label == "before":
        measured["commit"] = args.commit
        results = dict(before=measured, after=old.get("after"))
    else:
        results = dict(before=old.get("before"), after=measured)
    write_results("bad_inputs", results, settings=dict(cases=len(rows)))


if __name__ == "__main__":
    main()
