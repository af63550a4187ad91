"""The tasks of ``bench_quality.py``: data with a ground-truth explanation, a model, its training.

Every task is generated (or read from ``$LRP_DATA_ROOT``) reproducibly from a seed; nothing downloads.

Node-level (edge ground truth, PyG's BA-Shapes protocol: the edges of the 3-hop subgraph of each
explained node, scored against the motif's edges):

* ``ba_shapes``: ``ExplainerDataset(BAGraph(300, 5), HouseMotif(), 80)``, constant features;
  classes: base, house top / middle / bottom.
* ``ba_community``: two BA-Shapes graphs joined by 350 random edges; features drawn from one
  Gaussian per community (Ying et al., 2019); 8 classes (4 per community).
* ``tree_cycles``: ``TreeGraph(depth 8)`` + 60 six-cycles; 2 classes (GCN without normalisation, see UNNORMALISED).
* ``tree_grid``: ``TreeGraph(depth 8)`` + 80 3x3 grids; 2 classes.
* ``infection``: PyG's ``InfectionDataset(ERGraph(400, 0.006), 40 infected, path length 3)``; the
  class is the distance to the nearest infected node (0..3, 4 = further); the ground truth of node
  ``v`` is the edges on shortest paths from an infected node to ``v`` (computed here per node;
  PyG's own ``edge_mask`` is the union over all nodes).

Graph-level:

* ``ba_2motifs``: 20-node BA graphs with a house (class 0) or a five-cycle (class 1); edge ground truth.
* ``benzene``, ``fluoride_carbonyl``, ``alkane_carbonyl``, ``amine_ether_benzene``: the molecules of
  Sanchez-Lengeling et al. (2020) from ``$LRP_DATA_ROOT/graph-attribution``, labels from the stored
  ground truth (``globals``), atom ground truth with alternatives (the best AUROC of them counts).
* ``mutagenicity``: chapter 5's data, split and stored model (``mutagenicity-gcn``); edge ground
  truth NO2/NH2 on the test mutagens.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.datasets import ExplainerDataset, InfectionDataset
from torch_geometric.datasets.graph_generator import BAGraph, ERGraph, TreeGraph
from torch_geometric.datasets.motif_generator import CycleMotif, GridMotif, HouseMotif
from torch_geometric.nn import GATConv, GCNConv, global_mean_pool  # module level: LRPExplainer finds the pool here
from torch_geometric.utils import k_hop_subgraph

NODE_TASKS = ["ba_shapes", "ba_community", "tree_cycles", "tree_grid", "infection"]
GRAPH_TASKS = ["ba_2motifs"]
MOLECULE_TASKS = ["benzene", "fluoride_carbonyl", "alkane_carbonyl", "amine_ether_benzene"]
ALL_TASKS = NODE_TASKS + GRAPH_TASKS + MOLECULE_TASKS + ["mutagenicity"]
#: Tasks whose GCN sums its messages (``GCNConv(normalize=False)``): with constant features, the symmetric
#: normalisation makes every node of a regular neighbourhood (a cycle, a grid, a tree's inside) look the same,
#: so the normalised GCN stays at chance on these (test accuracy 0.57 on Tree-Cycles, majority class 0.59).
UNNORMALISED = ("tree_cycles", "tree_grid", "ba_2motifs")
MOLECULE_FOLDERS = {"benzene": "benzene", "fluoride_carbonyl": "logic7", "alkane_carbonyl": "logic8",
                    "amine_ether_benzene": "logic10"}


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)


class NodeGCN(nn.Module):
    """GCN layers with ReLU modules (one per layer, so that Captum's guided backprop hooks them) and a linear head."""

    def __init__(self, in_features: int, classes: int, hidden: int = 20, layers: int = 3, normalize: bool = True):
        super().__init__()
        self.convs = nn.ModuleList(GCNConv(in_features if i == 0 else hidden, hidden, normalize=normalize)
                                   for i in range(layers))
        self.relus = nn.ModuleList(nn.ReLU() for _ in range(layers))
        self.head = nn.Linear(hidden, classes)

    def embed(self, x, edge_index, edge_weight=None):
        for conv, relu in zip(self.convs, self.relus):
            x = relu(conv(x, edge_index, edge_weight))
        return x

    def forward(self, x, edge_index, edge_weight=None):
        return self.head(self.embed(x, edge_index, edge_weight))


class GraphGCN(NodeGCN):
    """The same layers, a global mean pool and a linear head: CAM applies (head contribution per node)."""

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        return self.head(global_mean_pool(self.embed(x, edge_index, edge_weight), batch))


class NodeGAT(nn.Module):
    """GAT layers (one head each) with ReLU and a linear head: its attention weights are an explanation."""

    def __init__(self, in_features: int, classes: int, hidden: int = 20, layers: int = 3, graph: bool = False):
        super().__init__()
        self.convs = nn.ModuleList(GATConv(in_features if i == 0 else hidden, hidden) for i in range(layers))
        self.head = nn.Linear(hidden, classes)
        self.graph = graph

    def forward(self, x, edge_index, batch=None):
        for conv in self.convs:
            x = torch.relu(conv(x, edge_index))
        if self.graph:
            x = global_mean_pool(x, batch)
        return self.head(x)


@dataclass
class Task:
    name: str
    level: str                # "node" or "graph"
    truth: str                # "edge" or "atom" (node ground truth, with alternatives)
    model: nn.Module
    accuracy: float
    mode: str = "multiclass_classification"
    data: Data | None = None  # node-level: the one graph
    instances: list = field(default_factory=list)  # node-level: node ids; graph-level: Data with truth
    train_seconds: float = 0.0
    gat: nn.Module | None = None  # the same task learnt by a GAT (attention explanations)
    gat_accuracy: float | None = None


# ----------------------------------------------------------------------------------------- node level

def _ba_shapes_graph(rng_seed: int) -> Data:
    seed_all(rng_seed)
    data = ExplainerDataset(graph_generator=BAGraph(num_nodes=300, num_edges=5), motif_generator=HouseMotif(),
                            num_motifs=80)[0]
    return Data(edge_index=data.edge_index, y=data.y, edge_mask=data.edge_mask.float(),
                node_mask=data.node_mask.float(), num_nodes=data.num_nodes)


def make_node_data(name: str, seed: int) -> tuple[Data, list[int]]:
    """The graph (x, edge_index, y, edge_mask) and the nodes to explain (those in a motif / infected by a path)."""
    seed_all(seed)
    if name == "ba_shapes":
        data = _ba_shapes_graph(seed)
        data.x = torch.ones(data.num_nodes, 10)
    elif name == "ba_community":
        a, b = _ba_shapes_graph(seed), _ba_shapes_graph(seed + 1000)
        n = a.num_nodes
        edge_index = torch.cat([a.edge_index, b.edge_index + n], 1)
        g = torch.Generator().manual_seed(seed)
        src = torch.randint(0, n, (350,), generator=g)
        dst = torch.randint(0, b.num_nodes, (350,), generator=g) + n
        extra = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
        edge_index = torch.cat([edge_index, extra], 1)
        edge_mask = torch.cat([a.edge_mask, b.edge_mask, torch.zeros(700)])
        y = torch.cat([a.y, b.y + 4])
        means = torch.tensor([-1.0, 1.0])
        community = torch.cat([torch.zeros(n), torch.ones(b.num_nodes)]).long()
        x = torch.randn(2 * n, 10, generator=g) * 0.5 + means[community].unsqueeze(1)
        data = Data(x=x, edge_index=edge_index, y=y, edge_mask=edge_mask, num_nodes=2 * n)
    elif name in ("tree_cycles", "tree_grid"):
        motif, count = (CycleMotif(6), 60) if name == "tree_cycles" else (GridMotif(), 80)
        d = ExplainerDataset(graph_generator=TreeGraph(depth=8), motif_generator=motif, num_motifs=count)[0]
        data = Data(x=torch.ones(d.num_nodes, 10), edge_index=d.edge_index, y=(d.y > 0).long(),
                    edge_mask=d.edge_mask.float(), num_nodes=d.num_nodes)
    elif name == "infection":
        d = InfectionDataset(graph_generator=ERGraph(num_nodes=400, edge_prob=0.006), num_infected_nodes=40,
                             max_path_length=3)[0]
        data = Data(x=d.x, edge_index=d.edge_index, y=d.y, num_nodes=d.num_nodes)
        data.edge_mask = torch.zeros(d.edge_index.shape[1])  # per node, see infection_truth
        data.infected = d.x[:, 1] > 0.5
    else:
        raise ValueError(f"unknown node-level task {name!r}")
    if name == "infection":
        nodes = ((data.y >= 1) & (data.y <= 3)).nonzero().view(-1)
    else:
        nodes = (data.y > 0).nonzero().view(-1) if name != "ba_community" else (data.y % 4 > 0).nonzero().view(-1)
    return data, nodes.tolist()


def infection_truth(data: Data, node: int) -> torch.Tensor:
    """Edges (u -> w) on a shortest path from an infected node to ``node``: d(u) + 1 = d(w), w within reach of node."""
    n = data.num_nodes
    src, dst = data.edge_index
    inf = torch.full((n,), 10**6)
    inf[data.infected] = 0
    for _ in range(4):  # distance from the infected nodes, along message direction src -> dst
        inf = torch.minimum(inf, torch.full((n,), 10**6).scatter_reduce(0, dst, inf[src] + 1, "amin"))
    to_v = torch.full((n,), 10**6)  # distance w -> node
    to_v[node] = 0
    for _ in range(4):
        to_v = torch.minimum(to_v, torch.full((n,), 10**6).scatter_reduce(0, src, to_v[dst] + 1, "amin"))
    d = int(inf[node])
    return ((inf[src] + 1 == inf[dst]) & (inf[dst] + to_v[dst] == d)).float()


def node_truth(task: Task, node: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(edges of the 3-hop subgraph of ``node`` as a boolean mask, ground truth over all edges)."""
    data = task.data
    _, _, _, hard = k_hop_subgraph(int(node), 3, data.edge_index, num_nodes=data.num_nodes)
    truth = infection_truth(data, int(node)) if task.name == "infection" else data.edge_mask
    return hard, truth


def train_node_model(model: nn.Module, data: Data, seed: int, epochs: int = 1000) -> dict:
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(data.num_nodes, generator=g)
    split = int(0.8 * data.num_nodes)
    train_idx, test_idx = perm[:split], perm[split:]
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    model.train()
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.cross_entropy(model(data.x, data.edge_index)[train_idx], data.y[train_idx])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(-1)
    return {"metrics": {"test_accuracy": float((pred[test_idx] == data.y[test_idx]).float().mean()),
                        "train_accuracy": float((pred[train_idx] == data.y[train_idx]).float().mean())},
            "test_index": test_idx}


# ---------------------------------------------------------------------------------------- graph level

def make_ba_2motifs(seed: int, per_class: int = 250) -> list[Data]:
    seed_all(seed)
    graphs = []
    for label, motif in enumerate([HouseMotif(), CycleMotif(5)]):
        part = ExplainerDataset(graph_generator=BAGraph(num_nodes=20, num_edges=1), motif_generator=motif,
                                num_motifs=1, num_graphs=per_class)
        for d in part:
            graphs.append(Data(x=torch.ones(d.num_nodes, 10), edge_index=d.edge_index,
                               y=torch.tensor([label]), edge_gt=d.edge_mask.float(), num_nodes=d.num_nodes))
    return graphs


def molecules(name: str, root: str | os.PathLike | None = None) -> tuple[list[Data], list[int], list[int]]:
    """The molecules of a graph-attribution task with ``y`` = the stored rule label and ``atom_gt`` (atoms, k)."""
    import csv

    from lrp_lib.datasets.esol import smiles_to_graph
    root = Path(root or os.environ.get("LRP_DATA_ROOT", "")) / "graph-attribution" / MOLECULE_FOLDERS[name]
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found: set LRP_DATA_ROOT to the folder holding graph-attribution/")
    stem = MOLECULE_FOLDERS[name]
    with open(root / f"{stem}_smiles.csv") as f:
        rows = list(csv.DictReader(f))
    truth = np.load(root / "true_raw_attribution_datadicts.npz", allow_pickle=True)["datadict_list"]
    split = np.load(root / f"{stem}_traintest_indices.npz")
    graphs = []
    for row, d in zip(rows, truth[:, 0]):
        g = smiles_to_graph(row["smiles"])
        g.y = torch.tensor([int(np.asarray(d["globals"]).reshape(-1)[0] > 0.5)])
        g.atom_gt = torch.as_tensor(np.asarray(d["nodes"]), dtype=torch.float).reshape(g.num_nodes, -1)
        del g.edge_attr, g.u
        graphs.append(g)
    return graphs, split["train_index"].tolist(), split["test_index"].tolist()


def train_graph_model(model: nn.Module, train: list[Data], test: list[Data], seed: int, epochs: int,
                      binary: bool = False, lr: float = 0.005) -> dict:
    from torch_geometric.loader import DataLoader
    torch.manual_seed(seed)
    loader = DataLoader([plain(g) for g in train], batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        for b in loader:
            opt.zero_grad()
            out = model(b.x, b.edge_index, b.batch)
            loss = F.binary_cross_entropy_with_logits(out.view(-1), b.y.float()) if binary else \
                F.cross_entropy(out, b.y)
            loss.backward()
            opt.step()
    model.eval()
    return {"metrics": {"test_accuracy": graph_accuracy(model, test, binary)}}


def plain(g: Data) -> Data:
    """x, edge_index and y only (the ground truths differ in shape from graph to graph)."""
    return Data(x=g.x, edge_index=g.edge_index, y=g.y)


@torch.no_grad()
def graph_accuracy(model: nn.Module, graphs: list[Data], binary: bool = False) -> float:
    b = Batch.from_data_list([plain(g) for g in graphs])
    out = model(b.x, b.edge_index, b.batch)
    pred = (out.view(-1) > 0).long() if binary else out.argmax(-1)
    return float((pred == b.y.view(-1)).float().mean())


# -------------------------------------------------------------------------------------------- loading

def _load_or_train(name: str, model: nn.Module, train) -> dict:
    from lrp_lib.pretrained import load_or_train, weights_path
    retrain = True if not weights_path(name).exists() else None
    return load_or_train(name, model, train, retrain=retrain)


def build_task(name: str, seed: int, instances: int, rng: np.random.Generator, gat: bool = False) -> Task:
    """Train (or load ``lrp_lib/weights/quality_<name>_s<seed>.pt``) the model of a task and pick ``instances``.

    ``gat``: also train (or load ``quality_<name>_s<seed>_gat``) a GAT on the synthetic tasks."""
    weights = f"quality_{name}_s{seed}"
    if name in NODE_TASKS:
        data, nodes = make_node_data(name, seed)
        classes = int(data.y.max()) + 1
        seed_all(seed)
        layers = 3
        model = NodeGCN(data.num_features, classes, hidden=20, layers=layers, normalize=name not in UNNORMALISED)
        record = _load_or_train(weights, model, lambda m: train_node_model(m, data, seed))
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(-1)
        test = set(record["test_index"].tolist())
        correct = [v for v in nodes if pred[v] == data.y[v] and v in test] or [v for v in nodes if pred[v] == data.y[v]]
        picked = sorted(rng.choice(correct, min(instances, len(correct)), replace=False).tolist())
        task = Task(name, "node", "edge", model, record["metrics"]["test_accuracy"], data=data, instances=picked)
        if gat:
            seed_all(seed)
            task.gat = NodeGAT(data.num_features, classes, hidden=20, layers=layers)
            task.gat_accuracy = _load_or_train(weights + "_gat", task.gat, lambda m: train_node_model(
                m, data, seed, epochs=1000))["metrics"]["test_accuracy"]
        return task
    if name == "ba_2motifs":
        graphs = make_ba_2motifs(seed)
        perm = np.random.default_rng(seed).permutation(len(graphs))
        train, test = [graphs[i] for i in perm[:400]], [graphs[i] for i in perm[400:]]
        seed_all(seed)
        model = GraphGCN(10, 2, hidden=20, layers=3, normalize=False)
        record = _load_or_train(weights, model, lambda m: train_graph_model(m, train, test, seed, epochs=500, lr=0.003))
        task = Task(name, "graph", "edge", model, record["metrics"]["test_accuracy"],
                    instances=_correct_sample(model, test, instances, rng))
        if gat:
            seed_all(seed)
            task.gat = NodeGAT(10, 2, hidden=20, layers=3, graph=True)
            task.gat_accuracy = _load_or_train(weights + "_gat", task.gat, lambda m: train_graph_model(
                m, train, test, seed, epochs=500, lr=0.003))["metrics"]["test_accuracy"]
        return task
    if name in MOLECULE_TASKS:
        graphs, train_idx, test_idx = molecules(name)
        train = [graphs[i] for i in np.random.default_rng(seed).permutation(train_idx)[:4000]]
        test = [graphs[i] for i in test_idx]
        seed_all(seed)
        model = GraphGCN(graphs[0].num_features, 2, hidden=64, layers=3)
        record = _load_or_train(weights, model, lambda m: train_graph_model(m, train, test, seed, epochs=25))
        positives = [g for g in test if int(g.y) == 1 and 0 < float(g.atom_gt.max(1).values.mean()) < 1]
        return Task(name, "graph", "atom", model, record["metrics"]["test_accuracy"],
                    instances=_correct_sample(model, positives, instances, rng))
    if name == "mutagenicity":
        return mutagenicity_task(instances, rng)
    raise ValueError(f"unknown task {name!r}; tasks: {', '.join(ALL_TASKS)}")


def _correct_sample(model, graphs, k, rng, binary=False):
    with torch.no_grad():
        b = Batch.from_data_list([plain(g) for g in graphs])
        out = model(b.x, b.edge_index, b.batch)
        pred = (out.view(-1) > 0).long() if binary else out.argmax(-1)
    ok = [g for g, p in zip(graphs, pred.tolist()) if p == int(g.y)]
    return [ok[i] for i in sorted(rng.choice(len(ok), min(k, len(ok)), replace=False).tolist())]


def mutagenicity_task(instances: int, rng) -> Task:
    """Chapter 5's model (stored weights ``mutagenicity-gcn``), split and evaluation set (test mutagens with NO2/NH2)."""
    from sklearn.model_selection import train_test_split

    from lrp_lib.datasets import mutagenicity
    from lrp_lib.models import MutagenicityGCN
    from lrp_lib.pretrained import load_or_train
    dataset = mutagenicity()
    labels = dataset._data.y.tolist()
    _, test_idx = train_test_split(list(range(len(dataset))), stratify=labels, test_size=0.25, random_state=11)
    test = [dataset[i] for i in test_idx]
    model = MutagenicityGCN(dataset.num_features)

    def refuse(m):
        raise RuntimeError("bench_quality loads chapter 5's stored weights; build chapter 5 to train them")
    load_or_train("mutagenicity-gcn", model, refuse, retrain=False)
    evaluation = [Data(x=g.x, edge_index=g.edge_index, y=g.y, edge_gt=g.edge_gt.float())
                  for g in test if int(g.y) == 0 and bool(g.edge_gt.any())]
    acc = graph_accuracy(model, [Data(x=g.x, edge_index=g.edge_index, y=g.y) for g in test], binary=True)
    return Task("mutagenicity", "graph", "edge", model, acc, mode="binary_classification",
                instances=_correct_sample(model, evaluation, instances, rng, binary=True))
