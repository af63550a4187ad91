"""The relevance of a fixed version of lrp_lib over the coverage zoo, kept so that a later version
can be compared with it (``tests/explain/test_zoo_relevance.py``).

    PYTHONPATH=<the version to keep> python tests/explain/make_zoo_relevance.py [COMMIT]

writes ``tests/explain/data/zoo_relevance.json.gz``: for every case of the zoo of
``benchmarks/bench_coverage.py`` that LRPExplainer is run on (node and graph level, with and without
``edge_attr``) and each rule of :data:`RULES`, the :func:`fingerprint` of every tensor of the
explanation but the inputs it echoes (node and edge relevance, the masks, ``bias_relevance``,
``relevance_residual``, ``edge_attr_relevance``, the prediction and target: a hash of its shape, dtype and
values), and a hash of the warnings' messages or of the error; and ``per_index=True`` explanations of four small networks
(:data:`PER_INDEX`: chunks, pruning, both kinds of accounts).  The stored file names the commit
it was made from (``COMMIT``, else ``git rev-parse HEAD`` of the checkout on ``PYTHONPATH``); to make it
from a commit without checking it out: ``git archive COMMIT lrp_lib | tar -x -C DIR`` and
``PYTHONPATH=DIR``.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.explain import HeteroExplanation
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
import bench_coverage as bc  # noqa: E402

from lrp_lib.core.rules import Epsilon  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402

PATH = HERE / "data" / "zoo_relevance.json.gz"
RULES = {"z": Epsilon(0.0), "zplus": "zplus", "epsilon": "epsilon", "alpha2beta1": "alpha2beta1", "gamma": "gamma"}
ZOO = [(spec, level, ea) for spec in bc.ALL if not spec.skip for level, ea in bc.cases(spec)]


def zoo_keys() -> list[str]:
    return [f"{spec.name}|{level}|{ea}|{rule}" for spec, level, ea in ZOO for rule in RULES]


#: what an explanation echoes of its inputs: not compared
INPUTS = {"x", "edge_index", "edge_attr", "batch", "index"}


def fingerprint(t: torch.Tensor) -> list:
    """``[hash, summary]``: the first 12 hex digits of the SHA-256 of a tensor's shape, dtype and values
    (equal hashes are tensors that ``torch.equal`` finds equal; ``-0.0`` is written as ``0.0`` first),
    and, for a floating point tensor, three sums in float64 (of the values, of their magnitudes, and
    weighted by fixed random weights, written with ``float.hex``) that another processor, whose
    matrix products round differently, reproduces to rounding (None for other dtypes)."""
    t = (t.to_dense() if t.is_sparse else t).detach().contiguous()
    if t.is_floating_point():
        t = t + 0.0  # -0.0 + 0.0 = 0.0: the sign of a zero is not a difference of value
    digest = hashlib.sha256(f"{tuple(t.shape)} {t.dtype}".encode())
    digest.update(t.numpy().tobytes())
    summary = None
    if t.is_floating_point():
        v = t.double().flatten()
        w = torch.rand(v.numel(), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        summary = [float(v.sum()).hex(), float(v.abs().sum()).hex(), float((v * w).sum()).hex()]
    return [digest.hexdigest()[:12], summary]


def machine() -> str:
    """What the stored hashes depend on: the processor, PyTorch's version, the instruction set its
    kernels use and MKL's settings (MKL picks its kernels by processor too)."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() \
        else platform.processor()
    mkl = ",".join(f"{k}={os.environ[k]}" for k in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR") if k in os.environ)
    return f"{model} | torch {torch.__version__} | {torch.backends.cpu.get_cpu_capability()} | {mkl or 'MKL default'}"


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]


def _digests(texts: list[str]) -> list[str]:
    """``[digest of the texts, digest with every number in them replaced by #]``: the messages that
    state amounts (relevance lost, ...) are compared by their words on another processor."""
    return [_digest(texts), _digest(sorted(_NUMBER.sub("#", t) for t in texts))]


def _tensors(explanation) -> dict:
    if isinstance(explanation, HeteroExplanation):
        stores = [(f"{t}:", explanation[t]) for t in explanation.node_types + explanation.edge_types]
        stores = [("", explanation)] + stores
    else:
        stores = [("", explanation)]
    found = {}
    for prefix, store in stores:
        for key in store.keys():
            value = store[key]
            if isinstance(value, torch.Tensor) and key not in INPUTS:
                found[f"{prefix}{key}"] = fingerprint(value)
    return found


def _run(call) -> dict:
    """``{"tensors": {name: fingerprint}, "warnings": digest, "explained_output": ...}``, or
    ``{"error": digest of the error's type and message, "warnings": ...}``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call()
        except Exception as e:  # noqa: BLE001 - the error is what is kept
            return {"error": _digests([f"{type(e).__name__}: {e}"]), "warnings": _digests(sorted(
                str(w.message) for w in caught))}
    return {"tensors": _tensors(out), "warnings": _digests(sorted(str(w.message) for w in caught)),
            "explained_output": getattr(out, "explained_output", None)}


def built(spec, level, edge_attr):
    """``(model, inputs)`` of one zoo case, or None where the unmodified model fails on the zoo's inputs (the zoo
    skips it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, inputs = bc.build_case(spec, level, edge_attr)
            bc.reference(model, inputs, level)
        except Exception:  # noqa: BLE001
            return None
    return model, inputs


def zoo_case(spec, level, edge_attr, rule, **options) -> dict | None:
    """The explanation of one zoo case with one rule (None: the unmodified model fails, as the zoo skips it)."""
    case = built(spec, level, edge_attr)
    if case is None:
        return None
    model, inputs = case
    explainer = Explainer(model, algorithm=LRPExplainer(rule=RULES[rule], mask="relevance", **options),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="regression", task_level=level, return_type="raw"))
    return _run(lambda: explainer(inputs["x"], inputs["edge_index"], index=None if level == "graph" else bc.NODE,
                                  **bc._kwargs(inputs)))


class Net(nn.Module):
    def __init__(self, conv, features=5, hidden=6, classes=3, layers=3):
        super().__init__()
        dims = [features] + [hidden] * layers
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.lin = nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.lin(x)


CONVS = {
    "gcn": GCNConv,
    "gin": lambda a, b: GINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b))),
    "gat": lambda a, b: GATConv(a, b, heads=1),
    "sage": lambda a, b: SAGEConv(a, b, aggr="mean"),
}
#: (network, rule, accounts, chunk_size) of the per_index=True cases
PER_INDEX = [(conv, rule, accounts, chunk) for conv in CONVS for rule in ("zplus", "epsilon")
             for accounts, chunk in (("each", None), ("total", 3))]


def per_index_keys() -> list[str]:
    return [f"per_index|{conv}|{rule}|{accounts}|{chunk}" for conv, rule, accounts, chunk in PER_INDEX]


def per_index_case(conv, rule, accounts, chunk, **options) -> dict:
    torch.manual_seed(0)
    model = Net(CONVS[conv]).double().eval()
    with torch.no_grad():
        for p in model.parameters():  # non-zero biases: their shares are kept and accounted per target
            if p.dim() == 1:
                p.uniform_(-0.3, 0.3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 5, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, 60, (2, 240), generator=g)
    explainer = Explainer(model, algorithm=LRPExplainer(rule=rule, per_index=True, chunk_size=chunk,
                                                        accounts=accounts, mask="relevance", **options),
                          explanation_type="model", node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    return _run(lambda: explainer(x, edge_index, index=torch.tensor([0, 7, 7, 13, 59, 21, 2, 33])))


def cases(**options):
    """``(key, function of no argument giving the case's record)`` for every stored case (``options``:
    more arguments of LRPExplainer, for a version that has them)."""
    for (spec, level, ea), keys in zip(ZOO, [zoo_keys()[i:i + len(RULES)] for i in range(0, len(zoo_keys()),
                                                                                       len(RULES))]):
        for rule, key in zip(RULES, keys):
            yield key, (lambda s=spec, lv=level, e=ea, r=rule: zoo_case(s, lv, e, r, **options))
    for case, key in zip(PER_INDEX, per_index_keys()):
        yield key, (lambda c=case: per_index_case(*c, **options))


def main() -> None:
    """``python tests/explain/make_zoo_relevance.py [COMMIT]``: every case; ``--update NAME [NAME ...]``: only
    the cases of those zoo entries, written into the stored file with this machine and commit noted per case
    (``machines``, ``commits``), the other cases left as they were made."""
    torch.set_num_threads(1)
    import lrp_lib
    root = Path(lrp_lib.__file__).resolve().parents[1]
    args = sys.argv[1:]
    update = args[args.index("--update") + 1:] if "--update" in args else None
    args = args[:args.index("--update")] if update is not None else args
    commit = args[0] if args else subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    if update is not None:
        stored = json.loads(gzip.open(PATH, "rt").read())
        keys = [key for key, make in cases() if key.split("|")[0] in update]
        if not keys:
            raise SystemExit(f"no case of {update}; the zoo's names are in benchmarks/bench_coverage.py")
        made = dict(cases())
        for key in keys:
            stored["records"][key] = made[key]()
            stored.setdefault("machines", {})[key] = machine()
            stored.setdefault("commits", {})[key] = commit or str(root)
        with gzip.open(PATH, "wt") as f:
            json.dump(stored, f, separators=(",", ":"), sort_keys=True)
        print(f"updated {PATH}: {len(keys)} cases of {', '.join(update)} from {commit or root}")
        return
    records = {key: make() for key, make in cases()}
    PATH.parent.mkdir(exist_ok=True)
    with gzip.open(PATH, "wt") as f:
        json.dump({"commit": commit or str(root), "torch": torch.__version__, "machine": machine(),
                   "records": records}, f,
                  separators=(",", ":"), sort_keys=True)
    print(f"wrote {PATH}: {len(records)} cases from {commit or root}")


if __name__ == "__main__":
    main()
