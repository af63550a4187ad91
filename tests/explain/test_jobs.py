"""lrp_lib.explain.jobs: explain a whole data set to Parquet; values, resume after a kill, 2-process sharding."""
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

pa = pytest.importorskip("pyarrow")
pyg = pytest.importorskip("torch_geometric")

from torch_geometric.data import Batch  # noqa: E402
from torch_geometric.loader import DataLoader  # noqa: E402

from lrp_lib.explain import jobs  # noqa: E402
from lrp_lib.explain.explainer import Explainer, LRPExplainer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# The model and data set of the subprocess tests, loaded by the command line from this file's text
FACTORIES = textwrap.dedent('''
    import os, time
    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv, global_mean_pool

    class GCN(torch.nn.Module):
        def __init__(self, features=5, hidden=8, classes=1):
            super().__init__()
            self.conv1 = GCNConv(features, hidden)
            self.conv2 = GCNConv(hidden, hidden)
            self.head = torch.nn.Linear(hidden, classes)

        def forward(self, x, edge_index, batch=None):
            x = F.relu(self.conv1(x, edge_index))
            x = F.relu(self.conv2(x, edge_index))
            return self.head(global_mean_pool(x, batch))

    def graphs(n=37, features=5, seed=0):
        g = torch.Generator().manual_seed(seed)
        out = []
        for i in range(n):
            nodes = int(torch.randint(3, 10, (1,), generator=g))
            src = torch.randint(0, nodes, (2 * nodes,), generator=g)
            dst = torch.randint(0, nodes, (2 * nodes,), generator=g)
            keep = src != dst
            edge_index = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
            out.append(Data(x=torch.randn(nodes, features, generator=g), edge_index=edge_index,
                            y=torch.tensor([i % 2])))
        return out

    class Slow(torch.utils.data.Dataset):
        """graphs() read slowly, so that a run can be killed in the middle."""
        def __init__(self, items, delay):
            self.items, self.delay = items, delay
        def __len__(self):
            return len(self.items)
        def __getitem__(self, i):
            time.sleep(self.delay)
            return self.items[i]

    def model():
        torch.manual_seed(0)
        m = GCN()
        with torch.no_grad():  # centre the logits, so that both classes are predicted
            from torch_geometric.data import Batch
            b = Batch.from_data_list(graphs())
            m.head.weight *= 100  # logits of order 1 and both signs
            m.head.bias -= m(b.x, b.edge_index, b.batch).median() + 0.01
        return m

    def dataset():
        return Slow(graphs(), float(os.environ.get("JOB_TEST_DELAY", "0")))
''')


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    path = tmp_path_factory.mktemp("factories") / "job_factories.py"
    path.write_text(FACTORIES)
    spec = importlib.util.spec_from_file_location("job_factories", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["job_factories"] = module  # LRPExplainer swaps the pools in the model's module
    spec.loader.exec_module(module)
    yield path, vars(module)
    del sys.modules["job_factories"]


def run_cli(args, env_extra=None, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def as_rows(table):
    return table.to_pylist()


def test_rows_equal_the_explainer_of_each_batch(tmp_path, factories):
    _, ns = factories
    model, data = ns["model"](), ns["graphs"]()
    summary = jobs.explain_dataset(model, data, tmp_path / "out", mode="binary_classification", batch_size=8,
                                   progress=False)
    assert summary["written"] == 5 and summary["graphs"] == 37
    table = jobs.read_explanations(tmp_path / "out")
    assert table.column_names == list(jobs.COLUMNS)
    assert table.column("graph_id").to_pylist() == list(range(37))
    # one row group per batch, one batch per part file
    import pyarrow.parquet as pq
    parts = sorted((tmp_path / "out").glob("part-*.parquet"))
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in parts] == [1] * 5
    assert [pq.ParquetFile(p).metadata.num_rows for p in parts] == [8, 8, 8, 8, 5]

    explainer = Explainer(model, algorithm=LRPExplainer(rule="epsilon"), explanation_type="model",
                          node_mask_type="object",
                          edge_mask_type="object",
                          model_config=dict(mode="binary_classification", task_level="graph", return_type="raw"))
    rows = as_rows(table)
    assert {r["target"] for r in rows} == {0, 1}  # both signs are checked
    for start in range(0, 37, 8):
        batch = Batch.from_data_list(data[start:start + 8])
        expl = explainer(batch.x, batch.edge_index, batch=batch.batch)
        logits = model(batch.x, batch.edge_index, batch=batch.batch).detach().view(-1)
        for k, g in enumerate(batch.to_data_list()):
            row = rows[start + k]
            nodes = batch.batch == k
            edges = nodes[batch.edge_index[0]]
            assert row["target"] == int(logits[k] > 0) == int(expl.target[k])
            assert row["explained_value"] == pytest.approx(abs(float(logits[k])), rel=1e-6, abs=1e-6)
            # exactly: the job negates the relevance of the raw logit where class 0 is explained, which
            # equals LRPExplainer started from -z bit for bit (the backward is linear, negation exact)
            assert torch.equal(torch.tensor(row["node_relevance"]), expl.node_relevance.view(-1)[nodes])
            assert torch.equal(torch.tensor(row["edge_relevance"]), expl.edge_relevance[edges])
            assert row["bias_relevance"] == pytest.approx(
                row["explained_value"] - sum(row["node_relevance"]), abs=1e-5)


def test_label_and_multiclass_targets(tmp_path, factories):
    _, ns = factories
    data = ns["graphs"](12)
    torch.manual_seed(1)
    model = ns["GCN"](classes=3)
    jobs.explain_dataset(model, data, tmp_path / "pred", mode="multiclass_classification", batch_size=5,
                         progress=False)
    jobs.explain_dataset(model, data, tmp_path / "two", mode="multiclass_classification", batch_size=5,
                         target=2, progress=False)
    pred, two = jobs.read_explanations(tmp_path / "pred"), jobs.read_explanations(tmp_path / "two")
    batch = Batch.from_data_list(data)
    logits = model(batch.x, batch.edge_index, batch=batch.batch).detach()
    assert pred.column("target").to_pylist() == logits.argmax(-1).tolist()
    assert two.column("target").to_pylist() == [2] * 12
    torch.testing.assert_close(torch.tensor(two.column("explained_value").to_pylist(), dtype=torch.float64),
                               logits[:, 2].double())
    # binary labels: the relevance of target 0 is the negative of that of target 1
    model1 = ns["model"]()
    jobs.explain_dataset(model1, data, tmp_path / "label", mode="binary_classification", target="label",
                         batch_size=5, progress=False)
    jobs.explain_dataset(model1, data, tmp_path / "one", mode="binary_classification", target=1,
                         batch_size=5, progress=False)
    label, one = as_rows(jobs.read_explanations(tmp_path / "label")), as_rows(jobs.read_explanations(tmp_path / "one"))
    for i, (a, b) in enumerate(zip(label, one)):
        sign = 1 if i % 2 else -1
        assert a["target"] == i % 2
        assert a["node_relevance"] == [sign * v for v in b["node_relevance"]]
        assert a["explained_value"] == sign * b["explained_value"]


def test_lrp_lib_graph_model(tmp_path):
    from torch_geometric.data import Data

    import lrp_lib
    from lrp_lib.teach import graph

    class GN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.edge = graph.EdgeLinear(4, edge_features=2, sender_features=3, bias=False)
            self.node = graph.NodeLinear(4, node_features=3, incoming_features=4, aggregation="sum", bias=False)
            self.relu = graph.NodeReLU()
            self.out = graph.GlobalLinear(1, node_features=4, aggregation="sum", bias=True)

        def forward(self, data):
            return self.out(self.relu(self.node(self.edge(data)))).u.view(-1)

    torch.manual_seed(0)
    model = GN()
    data = []
    for i in range(9):
        n = 3 + i % 4
        ei = torch.stack([torch.arange(n), torch.arange(n).roll(1)])
        data.append(Data(x=torch.randn(n, 3), edge_index=ei, edge_attr=torch.randn(n, 2), y=torch.randn(1)))
    jobs.explain_dataset(model, data, tmp_path / "out", mode="regression", batch_size=4, progress=False)
    rows = as_rows(jobs.read_explanations(tmp_path / "out"))
    batch = graph.relevance_inputs(Batch.from_data_list(data), ("x", "edge_attr"))
    with lrp_lib.teach.relevance():
        out = model(batch)
    out.backward(out.detach())
    rel = graph.read_relevance(batch)
    for k, row in enumerate(rows):
        assert row["target"] == -1
        assert row["explained_value"] == pytest.approx(float(out[k].detach()), rel=1e-6)
        torch.testing.assert_close(torch.tensor(row["node_relevance"]), rel.node[rel.node_graph == k])
        torch.testing.assert_close(torch.tensor(row["edge_relevance"]), rel.edge[rel.edge_graph == k])
        inputs = sum(row["node_relevance"]) + sum(row["edge_relevance"])
        assert row["bias_relevance"] == pytest.approx(row["explained_value"] - inputs, abs=1e-5)
    assert float(model.out.bias.detach()) != 0 and abs(rows[0]["bias_relevance"]) > 1e-4  # the bias keeps a share


class Failing(torch.utils.data.Dataset):
    def __init__(self, items, fail_at):
        self.items, self.fail_at = items, fail_at

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if i == self.fail_at:
            raise RuntimeError("injected failure")
        return self.items[i]


def test_resume_after_an_injected_failure(tmp_path, factories):
    _, ns = factories
    model, data = ns["model"](), ns["graphs"]()
    jobs.explain_dataset(model, data, tmp_path / "whole", mode="binary_classification", batch_size=4,
                         progress=False)
    with pytest.raises(RuntimeError, match="injected failure"):
        jobs.explain_dataset(model, Failing(data, 21), tmp_path / "resumed", mode="binary_classification",
                             batch_size=4, progress=False)
    partial = jobs.read_explanations(tmp_path / "resumed")
    assert partial.column("graph_id").to_pylist() == list(range(20))  # batches 0-4 written, 5 failed
    summary = jobs.explain_dataset(model, data, tmp_path / "resumed", mode="binary_classification",
                                   batch_size=4, progress=False)
    assert (summary["skipped"], summary["written"]) == (5, 5)
    assert jobs.read_explanations(tmp_path / "resumed").equals(jobs.read_explanations(tmp_path / "whole"))
    again = jobs.explain_dataset(model, data, tmp_path / "resumed", mode="binary_classification",
                                 batch_size=4, progress=False)
    assert (again["skipped"], again["written"]) == (10, 0)


def test_resume_after_sigkill(tmp_path, factories):
    path, ns = factories
    whole = tmp_path / "whole"
    jobs.explain_dataset(ns["model"](), ns["graphs"](), whole, mode="binary_classification", batch_size=3,
                         progress=False)
    out = tmp_path / "killed"
    args = ["-m", "lrp_lib.explain.jobs", "--model", f"{path}:model", "--dataset", f"{path}:dataset", "--out", str(out),
            "--mode", "binary_classification", "--batch-size", "3", "--device", "cpu"]
    proc = run_cli(args, {"JOB_TEST_DELAY": "0.1"})  # 0.3 s per batch of 3, 13 batches
    deadline = time.time() + 60
    while len(list(out.glob("part-*.parquet"))) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"the job ended before it could be killed: {proc.communicate()[1][-2000:]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = jobs.read_explanations(out)
    assert 0 < len(partial) < 37
    proc = run_cli(args)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(err.strip().splitlines()[-1])
    # the batches the manifest recorded are skipped (a part file renamed just before the kill but not
    # yet recorded is written again, under the same name)
    assert summary["skipped"] * 3 == len(partial) and summary["skipped"] + summary["written"] == 13
    assert jobs.read_explanations(out).equals(jobs.read_explanations(whole))
    assert not list(out.glob(".*.tmp"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_with_torchrun(tmp_path, factories):
    path, ns = factories
    single = tmp_path / "single"
    jobs.explain_dataset(ns["model"](), ns["graphs"](), single, mode="binary_classification", batch_size=4,
                         progress=False)
    out = tmp_path / "sharded"
    proc = run_cli(["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                    "--master_port", str(free_port()), "-m", "lrp_lib.explain.jobs", "--model", f"{path}:model",
                    "--dataset", f"{path}:dataset", "--out", str(out), "--mode", "binary_classification",
                    "--batch-size", "4", "--device", "cpu", "--no-progress"])
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    manifests = [json.loads(p.read_text()) for p in sorted(out.glob("manifest-rank*.json"))]
    assert [(m["rank"], m["world_size"]) for m in manifests] == [(0, 2), (1, 2)]
    batches = [set(map(int, m["batches"])) for m in manifests]
    assert batches == [{0, 2, 4, 6, 8}, {1, 3, 5, 7, 9}]  # disjoint, together all 10
    assert jobs.read_explanations(out).equals(jobs.read_explanations(single))


def test_resume_with_another_number_of_processes(tmp_path, factories, monkeypatch):
    """Rank 0 of 2 runs alone (rank 1 never comes), rank 2 of 3 follows; one process finishes the job."""
    _, ns = factories
    model, data = ns["model"](), ns["graphs"]()
    kw = dict(mode="binary_classification", batch_size=4, progress=False)
    jobs.explain_dataset(model, data, tmp_path / "single", **kw)
    out = tmp_path / "mixed"
    for rank, world in ((0, 2), (2, 3)):
        monkeypatch.setattr(jobs, "_distributed", lambda: (rank, world))
        jobs.explain_dataset(model, data, out, **kw)
    monkeypatch.setattr(jobs, "_distributed", lambda: (0, 1))
    summary = jobs.explain_dataset(model, data, out, **kw)
    done_before = {0, 2, 4, 6, 8} | {5}  # rank 2 of 3 skips 2 and 8, written by rank 0 of 2
    assert summary["skipped"] == len(done_before) and summary["written"] == 10 - len(done_before)
    assert jobs.read_explanations(out).equals(jobs.read_explanations(tmp_path / "single"))


def test_bad_arguments(tmp_path, factories):
    _, ns = factories
    model, data = ns["model"](), ns["graphs"](6)
    kw = dict(mode="binary_classification", progress=False)
    with pytest.raises(ValueError, match="mode must be one of"):
        jobs.explain_dataset(model, data, tmp_path / "a", mode="binary")
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        jobs.explain_dataset(model, data, tmp_path / "a", batch_size=0, **kw)
    with pytest.raises(ValueError, match="target must be"):
        jobs.explain_dataset(model, data, tmp_path / "a", target="everything", **kw)
    with pytest.raises(ValueError, match="target must be 0 or 1"):
        jobs.explain_dataset(model, data, tmp_path / "a", target=3, **kw)
    with pytest.raises(ValueError, match="target must be 'prediction' for mode='regression'"):
        jobs.explain_dataset(model, data, tmp_path / "a", mode="regression", target="label")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        jobs.explain_dataset(lambda x: x, data, tmp_path / "a", **kw)
    with pytest.raises(TypeError, match="dataset_or_loader must be"):
        jobs.explain_dataset(model, 5, tmp_path / "a", **kw)
    with pytest.raises(ValueError, match="must not shuffle"):
        jobs.explain_dataset(model, DataLoader(data, batch_size=2, shuffle=True), tmp_path / "a", **kw)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="out must be a folder"):
        jobs.explain_dataset(model, data, tmp_path / "file", **kw)
    with pytest.raises(TypeError, match="out must be a folder path"):
        jobs.explain_dataset(model, data, 3, **kw)
    class NodeLevel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(5, 1)

        def forward(self, x, edge_index, batch=None):
            return self.lin(x)

    with pytest.raises(ValueError, match="model: explain_dataset explains graph-level models"):
        jobs.explain_dataset(NodeLevel(), data, tmp_path / "n", **kw)
    # a resumed job must keep the arguments that shape its rows
    jobs.explain_dataset(model, DataLoader(data, batch_size=2), tmp_path / "b", **kw)
    with pytest.raises(ValueError, match="this call has batch_size=3: batch_size differs"):
        jobs.explain_dataset(model, data, tmp_path / "b", batch_size=3, **kw)
    with pytest.raises(ValueError, match="target differs"):
        jobs.explain_dataset(model, data, tmp_path / "b", batch_size=2, target="label", **kw)
    with pytest.raises(ValueError, match="rule differs"):
        jobs.explain_dataset(model, data, tmp_path / "b", batch_size=2, rule="gamma", **kw)
    from lrp_lib.core.rules import Epsilon
    assert jobs.explain_dataset(model, data, tmp_path / "b", batch_size=2, rule=Epsilon(), **kw)["skipped"] == 3
    with pytest.raises(ValueError, match="rule 'nonsense' is not known"):
        jobs.explain_dataset(model, data, tmp_path / "d", rule="nonsense", **kw)
    with pytest.raises(ValueError, match="--model must be 'module:callable'"):
        jobs.main(["--model", "nothing", "--dataset", "x:y", "--out", str(tmp_path / "c"),
                   "--mode", "regression"])


def test_import_stays_light():
    code = ("import sys, lrp_lib; heavy = [m for m in ('torch_geometric', 'pyarrow', 'lrp_lib.explain.jobs') "
            "if m in sys.modules]; assert not heavy, heavy; assert callable(lrp_lib.explain_dataset)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


def test_jobs_does_not_import_teach():
    """The product finds a Graph Network model's relevance entry point on the model (duck typing):
    explaining a PyG model through explain_dataset loads no lrp_lib.teach module."""
    code = ("import sys; from lrp_lib.explain import jobs; import lrp_lib.explain.explainer; "
            "bad = [m for m in sys.modules if m.startswith('lrp_lib.teach')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
