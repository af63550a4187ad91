"""The relevance of the relevance primitives over the coverage zoo, written down before they were removed
(``tests/explain/data/primitive_reference.pt``), so that the forward rules stay checked against an
independent implementation of the same rules (``tests/explain/test_forward.py``).

The primitives were ``torch.autograd.Function`` s whose backward computed each rule's relevance
(``LRPExplainer(mechanism="functions")``, lrp_lib up to commit 69b9aa0).  The file was made from that commit:

    git archive 69b9aa0 lrp_lib | tar -x -C DIR
    PYTHONPATH=DIR python tests/explain/make_primitive_reference.py 69b9aa0

For every case of the zoo (:data:`make_zoo_relevance.ZOO`) under epsilon and alpha-beta (z+ and LRP-0 are
in ``coverage_reference.pt``), it stores the explanation's floating-point tensors but the inputs it echoes,
the warnings' classes, or the error's class; and, under epsilon and z+, the relevance of a transformer block
explained from a plain tensor (:func:`transformer`, ``explain_tensor``).
"""
from __future__ import annotations

import platform
import sys
import warnings
from pathlib import Path

import torch
from torch import nn
from torch_geometric.explain import HeteroExplanation

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_zoo_relevance as zoo  # noqa: E402

from lrp_lib.explain.explainer import Explainer, LRPExplainer, UnsupportedModelError  # noqa: E402

PATH = HERE / "data" / "primitive_reference.pt"
#: the rules stored (z+ and LRP-0 are in coverage_reference.pt)
RULES = ("epsilon", "alpha2beta1")


def key(spec, level, ea, rule) -> str:
    return f"{spec.name}|{level}|{ea}|{rule}"


def explain(spec, level, ea, rule, **options) -> dict | None:
    """The case's explanation: ``{"tensors": {name: tensor}, "warnings": [class names]}``, ``{"error": class
    name}``, or None where the zoo builds no model for it."""
    case = zoo.built(spec, level, ea)
    if case is None:
        return None
    model, inputs = case
    explainer = Explainer(model, algorithm=LRPExplainer(rule=zoo.RULES[rule], mask="relevance", **options),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="regression", task_level=level, return_type="raw"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = explainer(inputs["x"], inputs["edge_index"], index=None if level == "graph" else zoo.bc.NODE,
                            **zoo.bc._kwargs(inputs))
        except (UnsupportedModelError, ValueError, TypeError) as e:
            return {"error": type(e).__name__}
    stores = [("", out)] + ([(f"{t}:", out[t]) for t in out.node_types + out.edge_types]
                            if isinstance(out, HeteroExplanation) else [])
    tensors = {f"{p}{k}": store[k].detach() for p, store in stores for k in store.keys()
               if isinstance(store[k], torch.Tensor) and store[k].is_floating_point() and k not in zoo.INPUTS}
    return {"tensors": {k: t.to_dense() if t.is_sparse else t for k, t in tensors.items()},
            "warnings": sorted({type(w.message).__name__ for w in caught})}


def transformer(rule: str, **options):
    """``nn.TransformerEncoderLayer`` (d_model 8, 2 heads, no dropout) and a linear head on its mean, explained
    by ``explain_tensor`` on a seeded input of 4 sequences of 5 (its ``TensorRelevance``)."""
    from lrp_lib.explain.tensors import explain_tensor
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block, self.head = block, nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.block(x).mean(1))

    model = Net().double().eval()
    x = torch.randn(4, 5, 8, dtype=torch.float64)
    return explain_tensor(model, x, rule=rule, **options)


def main() -> None:
    torch.set_num_threads(1)
    commit = sys.argv[1] if len(sys.argv) > 1 else "unknown"
    records = {key(s, lv, e, r): explain(s, lv, e, r, mechanism="functions")
               for s, lv, e in zoo.ZOO for r in RULES}
    blocks = {rule: transformer(rule, mechanism="functions") for rule in ("epsilon", "zplus")}
    PATH.parent.mkdir(exist_ok=True)
    torch.save({"transformer": {r: {"relevance": t.relevance, "bias_relevance": t.bias_relevance,
                                    "explained": t.explained} for r, t in blocks.items()}, "commit": commit, "machine": zoo.machine(), "python": platform.python_version(),
                "torch": str(torch.__version__), "records": records}, PATH)
    print(f"wrote {PATH}: {len(records)} cases from {commit}")


if __name__ == "__main__":
    main()
