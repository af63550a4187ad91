# %% [markdown]
# # Case study: solubility
#
# The infection chapter had a ground truth to score explanations against. Real data rarely does,
# but chemistry comes close: a century of measurements says which parts of a molecule make it
# dissolve in water (hydroxyl and amine groups that form hydrogen bonds) and which keep it out
# (carbon skeletons and halogens). The second case study of Baldassarre and Azizpour
# {cite}`baldassarre2019explainability` trains a graph network to predict aqueous solubility on
# the ESOL data set {cite}`delaney2004esol` and asks LRP which atoms and bonds the prediction
# comes from. If the model has learned chemistry, the relevance should say so; if it has learned
# a shortcut (say, "big molecules are insoluble"), that should show too.
#
# ```{admonition} Audience & Objectives
# :class: tip
# This chapter assumes the graph-network layers of `lrp_lib.teach.graph` and the relevance mode from the
# [The autograd trick for graph layers](02_graph_layers.ipynb), and the infection case study.
# After reading it you should be able to
# - load ESOL as PyTorch Geometric graphs with atom, bond and molecule features (`lrp_lib.book.datasets.esol`);
# - train a graph-network regressor with ordinary gradients and explain its predictions with LRP;
# - explain every molecule of a data set in one backward pass;
# - turn relevance into per-atom and per-bond pictures of a molecule, and into a per-element
#   summary over the data set;
# - read such a summary critically: what it says about the model, and what it does not.
# ```

# %% tags=["hide-input"]
import inspect
import random
import warnings

warnings.filterwarnings(
    "ignore", message="IProgress not found"
)  # tqdm's notebook notice, via PyG

import matplotlib.pyplot as plt
import numpy as np
import torch
from myst_nb import glue
from rdkit import Chem, RDLogger
from rdkit.Chem import rdDepictor
from torch import nn
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader
from tqdm.auto import trange

import lrp_lib
from lrp_lib.teach import graph
from lrp_lib.book.datasets import esol
from lrp_lib.book.datasets.esol import (
    ATOM_TYPES,
    EDGE_FEATURES,
    NODE_FEATURES,
    smiles_to_graph,
)
from lrp_lib.book.plotting import (
    BOOK_DPI,
    BOOK_WIDTH,
    bond_values,
    book_style,
    draw_molecule,
)
from lrp_lib.book.pretrained import load_or_train

RDLogger.DisableLog("rdApp.*")
book_style()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)

# %% [markdown]
# ## The data
#
# ESOL {cite}`delaney2004esol` lists 1,128 organic molecules with their measured solubility in
# water, as $\log_{10}$ of mol/L (from $-11.6$, nearly insoluble, to $+1.6$). It is part of
# MoleculeNet {cite}`wu2018moleculenet`. `lrp_lib.book.datasets.esol()` reads MoleculeNet's csv from
# `$LRP_DATA_ROOT` when that is set and downloads it otherwise, and parses each SMILES string with
# RDKit into a graph:
#
# - a node per heavy atom, $x_v$ = element one-hot (C, N, O, S, F, Cl, Br, I, P, other),
#   aromatic, in a ring, number of attached hydrogens (0, 1, 2, 3+), formal charge;
# - two directed edges per bond, $e_k$ = bond type one-hot (single, double, triple, aromatic),
#   conjugated, in a ring; edges $2b$ and $2b+1$ are the two directions of bond $b$;
# - molecule features $u$ (molecular weight / 100, number of rings), which the model below
#   deliberately does not read (exercise 3);
# - $y$ = the measured log solubility.

# %%
molecules = (
    esol()
)  # $LRP_DATA_ROOT/delaney-processed.csv, or downloaded to ~/.cache/lrp_lib/data
y_all = torch.cat([m.y for m in molecules])
print(f"{len(molecules)} molecules, {sum(m.num_nodes for m in molecules)} atoms")
print(
    f"log solubility from {y_all.min():.2f} to {y_all.max():.2f}, mean"
    f" {y_all.mean():.2f}, std {y_all.std():.2f}"
)
print("node features:", ", ".join(NODE_FEATURES))
print("edge features:", ", ".join(EDGE_FEATURES))
phenol = next(m for m in molecules if m.name == "Phenol")
print(
    phenol.name,
    phenol.smiles,
    phenol.num_nodes,
    "atoms,",
    phenol.num_edges,
    "directed edges",
)

# %% [markdown]
# A random split, the same in every run (a permutation from a fixed generator): 80% for training, 10% for validation, 10% for testing.

# %%
order = torch.randperm(
    len(molecules), generator=torch.Generator().manual_seed(0)
).tolist()
n_tenth = len(molecules) // 10
val_set = [molecules[i] for i in order[:n_tenth]]
test_set = [molecules[i] for i in order[n_tenth:2 * n_tenth]]
train_set = [molecules[i] for i in order[2 * n_tenth:]]
print(f"train {len(train_set)}, validation {len(val_set)}, test {len(test_set)}")

# %% [markdown]
# ## The model
#
# A graph network in the style of the paper, on `lrp_lib.teach.graph` layers: an encoder for atoms and
# bonds, two message-passing blocks with sum aggregation, and a read-out that **sums** the atom
# embeddings of each molecule and maps them to one number,
#
# $$ \hat y = w^\top \sum_{v} h_v + b . $$
#
# A sum read-out fits what chemists know about solubility, which is roughly additive over a
# molecule's fragments, and it makes LRP's answer easy to read: each atom's relevance is its share
# of $\hat y - b$ (plus the share of the bonds). All layers but the read-out are bias-free, so only
# $b$ takes relevance away from the atoms and bonds.
#
# Fifteen epochs of Adam with ordinary gradients train it. As in every chapter, `load_or_train`
# loads the weights the book stores, so that the outputs below are the same on every machine, and
# trains from scratch only when `LRP_BOOK_RETRAIN=1` is set.

# %% tags=["train"]
from lrp_lib.book.models import (
    SolubilityGN,
)  # written once in the library: later pages load these weights

print(inspect.getsource(SolubilityGN))


def rmse(model, graphs):
    batch = Batch.from_data_list(graphs).to(device)
    with torch.no_grad():
        return (model(batch) - batch.y).pow(2).mean().sqrt().item()


torch.manual_seed(0)
model = SolubilityGN().to(device)


def train_solubility(model, epochs=15):
    """Adam with ordinary gradients; validation RMSE after epochs 5, 10 and 15,
    test RMSE at the end."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = DataLoader(
        train_set, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    metrics = {}
    for epoch in trange(epochs, desc="training"):
        model.train()
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(batch), batch.y).backward()
            optimizer.step()
        if epoch + 1 in (5, 10, 15):
            metrics[f"validation_rmse_epoch_{epoch + 1}"] = rmse(model, val_set)
    metrics["test_rmse"] = rmse(model, test_set)
    return {"metrics": metrics}


record = load_or_train("esol-gn", model, train_solubility)
for p in model.parameters():
    p.requires_grad_(False)
print(
    "validation RMSE after epochs 5, 10, 15: "
    + ", ".join(
        f"{record['metrics'][f'validation_rmse_epoch_{e}']:.2f}" for e in (5, 10, 15)
    )
)

# %%
test_rmse = rmse(model, test_set)
mean_train = torch.cat([m.y for m in train_set]).mean()
baseline = torch.cat([m.y for m in test_set]).sub(mean_train).pow(2).mean().sqrt().item()
print(
    f"test RMSE {test_rmse:.2f} log units (predicting the training mean: {baseline:.2f})"
)

# Delaney's own ESOL equation (a linear model on logP, weight, rotatable bonds and
# aromatic proportion) is a column of the same csv: its error on the same test molecules
import csv
from lrp_lib.book.datasets.esol import FILENAME, default_root
with open(default_root() / FILENAME, newline="") as f:  # rows in the order of `molecules`
    esol_equation = [
        float(r["ESOL predicted log solubility in mols per litre"])
        for r in csv.DictReader(f)
    ]
delaney = torch.tensor([esol_equation[i] for i in order[n_tenth:2 * n_tenth]])
delaney_rmse = (delaney - torch.cat([m.y for m in test_set])).pow(2).mean().sqrt().item()
print(f"Delaney's ESOL equation on the same test molecules: RMSE {delaney_rmse:.2f}")

# %% tags=["remove-cell"]
glue("esol_test_rmse", f"{test_rmse:.2f}", display=False)
glue("esol_baseline_rmse", f"{baseline:.2f}", display=False)
glue("esol_delaney_rmse", f"{delaney_rmse:.2f}", display=False)

# %% [markdown]
# A test error of {glue:text}`esol_test_rmse` log units, against {glue:text}`esol_baseline_rmse`
# for a constant and {glue:text}`esol_delaney_rmse` for Delaney's equation on hand-picked
# descriptors: the model has learned *something* about solubility. What?
#
# ## Relevance of atoms and bonds
#
# We explain the prediction $\hat y$ itself: run the forward pass in relevance mode, start the
# backward pass from $R = \hat y$, and read the relevance of each atom (the sum over its features)
# and of each bond (the sum over the features of its two directed edges). Negative relevance
# pushes the prediction down (less soluble), positive up. Conservation gives
#
# $$ \hat y = \sum_{\text{atoms}} R_v + \sum_{\text{bonds}} R_b + R_{\text{bias}} , $$
#
# where $R_{\text{bias}}$ is what the read-out bias keeps, together with the tiny share the
# stabiliser $\epsilon$ of the epsilon rule absorbs in each layer (the layers' default $\epsilon$
# is far below the printed digits, so the equation holds to them, though not exactly).
#
# The molecules of a batch share nothing, so one backward pass explains all of them at once.

# %%
def explain(graphs):
    """LRP of each molecule's prediction: (predictions, per-atom list, per-bond list,
    bias shares)."""
    batch = graph.relevance_inputs(
        Batch.from_data_list(graphs).to(device), ("x", "edge_attr")
    )
    with lrp_lib.teach.relevance():
        out = model(batch)
    out.backward(out.detach())  # R = the prediction of each molecule
    rel = graph.read_relevance(batch)
    atoms = rel.node.cpu().split([g.num_nodes for g in graphs])
    edges = rel.edge.cpu().split([g.num_edges for g in graphs])
    bonds = [
        torch.as_tensor(
            bond_values(Chem.MolFromSmiles(g.smiles), g.edge_index, e)
        )  # per RDKit bond
        for g, e in zip(graphs, edges)
    ]
    bias = out.detach().cpu() - rel.per_graph().cpu()
    return out.detach().cpu(), atoms, bonds, bias


examples = {
    "sucrose": "OCC2OC(OC1(CO)OC(CO)C(O)C1O)C(O)C(O)C2O",
    "benzene": "c1ccccc1",
    "phenol": "c1ccccc1O",
    "pentachlorophenol": "Oc1c(Cl)c(Cl)c(Cl)c(Cl)c1Cl",
    "ethanol": "CCO",
    "p-nitroaniline": "Nc1ccc(cc1)N(=O)=O",
}
graphs = [smiles_to_graph(s) for s in examples.values()]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pred, atom_rel, bond_rel, bias_rel = explain(graphs)
print(f"lost-relevance warnings: {len(caught)}")
measured = {m.smiles: m.y.item() for m in molecules}
for (name, smiles), p, a, b, c in zip(
    examples.items(), pred, atom_rel, bond_rel, bias_rel
):
    known = f"{measured[smiles]:6.2f}" if smiles in measured else "   n/a"
    print(
        f"{name:18s} measured {known}  predicted {p:6.2f} = atoms {a.sum():6.2f} + bonds"
        f" {b.sum():5.2f} + bias {c:5.2f}"
    )

# %% tags=["hide-input"]
# the numbers the discussion below names
def signed(value, digits=2):
    """A number for the prose: a true minus sign, and no "-0.00"."""
    text = f"{float(value):.{digits}f}"
    return text.lstrip("-") if float(text) == 0 else text.replace("-", "\u2212")


example = {
    name: (p.item(), a, b) for name, p, a, b in zip(examples, pred, atom_rel, bond_rel)
}
atom_of = {
    name: Chem.MolFromSmiles(smiles).GetAtoms() for name, smiles in examples.items()
}


def atoms_where(name, test):
    """Relevance of the atoms of an example molecule for which test(atom) holds."""
    return torch.stack([example[name][1][a.GetIdx()] for a in atom_of[name] if test(a)])


def is_ring_carbon_next_to(symbol):
    return lambda a: a.GetSymbol() == "C" and a.GetIsAromatic() and any(
        n.GetSymbol() == symbol and not n.GetIsAromatic() for n in a.GetNeighbors())


benzene_c = example["benzene"][1]
phenol_o = atoms_where("phenol", lambda a: a.GetSymbol() == "O")[0]
phenol_c_o = atoms_where("phenol", is_ring_carbon_next_to("O"))[0]
pcp_c_o = atoms_where("pentachlorophenol", is_ring_carbon_next_to("O"))[0]
pna_n = atoms_where(
    "p-nitroaniline", lambda a: a.GetSymbol() == "N" and a.GetTotalNumHs() == 2
)[0]
pna_c_n = atoms_where("p-nitroaniline", lambda a: a.GetSymbol() == "C" and any(
    n.GetTotalNumHs() == 2 for n in a.GetNeighbors()))[0]
pcp_cl = atoms_where("pentachlorophenol", lambda a: a.GetSymbol() == "Cl")
sucrose_oh = atoms_where(
    "sucrose", lambda a: a.GetSymbol() == "O" and a.GetTotalNumHs() == 1
)
sucrose_other_o = atoms_where(
    "sucrose", lambda a: a.GetSymbol() == "O" and a.GetTotalNumHs() == 0
)
sucrose_c = atoms_where("sucrose", lambda a: a.GetSymbol() == "C")
ethanol = dict(zip(["CH3", "CH2", "O"], example["ethanol"][1].tolist()))
print(
    f"benzene carbons {benzene_c.min():.3f} to {benzene_c.max():.3f}; phenol: O"
    f" {phenol_o:.3f}, its ring carbon {phenol_c_o:.3f}"
)
print(
    f"pentachlorophenol: ring carbon at O {pcp_c_o:.3f}, Cl {pcp_cl.min():.3f} to"
    f" {pcp_cl.max():.3f}"
)
print(f"p-nitroaniline: NH2 {pna_n:.3f}, its ring carbon {pna_c_n:.3f}")
print(
    f"sucrose: {len(sucrose_oh)} hydroxyl O from {sucrose_oh.min():.3f} to"
    f" {sucrose_oh.max():.3f}, other O {sucrose_other_o.min():.3f} to"
    f" {sucrose_other_o.max():.3f},\n         C {sucrose_c.min():.3f} to"
    f" {sucrose_c.max():.3f}"
)
print("ethanol:", ", ".join(f"{k} {v:.3f}" for k, v in ethanol.items()))

# %% tags=["remove-cell"]
for key, value in {
    "benzene_pred": example["benzene"][0],
    "phenol_minus_benzene": example["phenol"][0] - example["benzene"][0],
    "pcp_cl_mean": pcp_cl.mean().item(),
    "pcp_pred": example["pentachlorophenol"][0],
    "pcp_measured": measured[examples["pentachlorophenol"]],
    "sucrose_atoms": example["sucrose"][1].sum().item(),
    "sucrose_bonds": example["sucrose"][2].sum().item(),
    "sucrose_bias": float(bias_rel[list(examples).index("sucrose")]),
    "sucrose_pred": example["sucrose"][0],
    "sucrose_measured": measured[examples["sucrose"]],
    "ethanol_gap": measured[examples["ethanol"]] - example["ethanol"][0],
}.items():
    glue(f"esol_{key}", signed(value), display=False)
glue("esol_sucrose_oh", f"{len(sucrose_oh)}", display=False)
for key, value in {
    "benzene_c": benzene_c[0],
    "phenol_o": phenol_o,
    "phenol_c_o": phenol_c_o,
    "pcp_c_o": pcp_c_o,
    "pna_n": pna_n,
    "pna_c_n": pna_c_n,
    "ethanol_ch3": ethanol["CH3"],
    "ethanol_ch2": ethanol["CH2"],
    "ethanol_o": ethanol["O"],
}.items():
    glue(f"esol_{key}", signed(value), display=False)

# %% [markdown]
# The drawings are RDKit 2D depictions, as chemists draw molecules, with `lrp_lib.book.plotting.draw_molecule`:
# atoms and bonds are coloured on one zero-centred scale shared by all six molecules, red for
# positive relevance (towards soluble), blue for negative. A graph's node $i$ is RDKit's atom $i$
# (the graphs are built from `Chem.MolFromSmiles`, hydrogens implicit), and `bond_values` adds the
# two directed edges of each bond.

# %% tags=["hide-input"]
def extent(mol):
    """Width and height of RDKit's 2D depiction of mol, in its coordinate units
    (bond length 1.5)."""
    mol = Chem.Mol(mol)
    rdDepictor.Compute2DCoords(mol, canonOrient=True, sampleSeed=0, forceRDKit=True)
    xy = mol.GetConformer().GetPositions()[:, :2]
    return xy.max(0) - xy.min(0) + 1.6  # plus room for the atom labels and highlights


# Each panel is drawn at the pixel size it is shown at, and all six molecules at one scale
# (the largest scale at which each still fits its panel): a panel's padding grows as its
# molecule shrinks.
width_px = BOOK_WIDTH * BOOK_DPI
panels = {"sucrose": (0, 0, 780, 255)} | {
    name: (265 * (k % 3), 300 + 285 * (k // 3), 250, 235)
    for k, name in enumerate(
        ["benzene", "phenol", "pentachlorophenol", "ethanol", "p-nitroaniline"]
    )
}
height_px = max(y + h for _, y, _, h in panels.values()) + 45
mols = {name: Chem.MolFromSmiles(smiles) for name, smiles in examples.items()}
fit = {
    name: min(
        (panels[name][2] * 0.84) / extent(mol)[0],
        (panels[name][3] * 0.84) / extent(mol)[1],
    )
    for name, mol in mols.items()
}
px_per_unit = min(fit.values())
vmax = max(
    max(float(a.abs().max()), float(b.abs().max()) if len(b) else 0.0)
    for a, b in zip(atom_rel, bond_rel)
)
fig = plt.figure(figsize=(width_px / BOOK_DPI, height_px / BOOK_DPI))
for (name, mol), p, a, b in zip(mols.items(), pred, atom_rel, bond_rel):
    assert mol.GetNumAtoms() == len(a) and mol.GetNumBonds() == len(
        b
    ), name  # node i is atom i
    x, y, w, h = panels[name]
    ax = fig.add_axes(
        [x / width_px, 1 - (y + 40 + h) / height_px, w / width_px, h / height_px]
    )
    padding = 0.5 * (1 - px_per_unit / fit[name] * 0.84)
    scale = draw_molecule(
        mol,
        a,
        b,
        ax=ax,
        vmax=vmax,
        colorbar=False,
        size=(w, h),
        padding=padding,
        title=f"{name}\npredicted {signed(p)}",
    )
cax = fig.add_axes([(265 * 2 + 20) / width_px, 1 - (300 + 285 + 40 + 130) / height_px,
                    220 / width_px, 14 / height_px])
fig.colorbar(scale, cax=cax, orientation="horizontal",
             label="LRP relevance of the predicted\nlog solubility (atoms and bonds)")
plt.show()

# %% [markdown]
# Read the pictures with the conservation equation in mind: each atom's colour is its share of
# the prediction, on one scale for all six molecules.
#
# - In **benzene** the six carbons get the same negative relevance ({glue:text}`esol_benzene_c`
#   each: they are equivalent, and so are their explanations); together with the bonds they make
#   the prediction of {glue:text}`esol_benzene_pred`.
# - In **phenol** the hydroxyl oxygen is clearly positive ({glue:text}`esol_phenol_o`), and the
#   prediction is {glue:text}`esol_phenol_minus_benzene` log units above benzene's. But the carbon
#   that carries it is clearly *negative* ({glue:text}`esol_phenol_c_o`), more than any carbon of
#   benzene: part of what the oxygen adds, the model takes back through its neighbour. The same
#   pattern shows in pentachlorophenol (the carbon at the hydroxyl: {glue:text}`esol_pcp_c_o`) and
#   on the amine of p-nitroaniline ({glue:text}`esol_pna_n` on the nitrogen,
#   {glue:text}`esol_pna_c_n` on its ring carbon). LRP does not say the carbon is hydrophobic here;
#   it says this model encodes "hydroxyl on an aromatic ring" partly in the ring atom's embedding,
#   and with a negative weight.
# - In **pentachlorophenol** every chlorine adds about {glue:text}`esol_pcp_cl_mean`: halogens make
#   a molecule less soluble, and five of them put the prediction at {glue:text}`esol_pcp_pred`
#   (measured {glue:text}`esol_pcp_measured`).
# - In **sucrose** the {glue:text}`esol_sucrose_oh` hydroxyl oxygens are the positive atoms; the
#   ring and bridge oxygens are nearly neutral and the carbons negative. The atoms sum to
#   {glue:text}`esol_sucrose_atoms` but the bonds take {glue:text}`esol_sucrose_bonds` (and the bias
#   {glue:text}`esol_sucrose_bias`), so the prediction ends at {glue:text}`esol_sucrose_pred`, below the measured
#   {glue:text}`esol_sucrose_measured`: for the largest molecule here, bonds matter as much as atoms.
# - **Ethanol** is nearly balanced: both carbons are negative, the one next to the oxygen more so
#   ({glue:text}`esol_ethanol_ch3` on the methyl, {glue:text}`esol_ethanol_ch2` on the CH₂, the
#   pattern of phenol again), the oxygen positive ({glue:text}`esol_ethanol_o`). The model predicts
#   it {glue:text}`esol_ethanol_gap` log units less soluble than it is.
#
# ## Relevance per element over the data set
#
# One picture per molecule does not say what the model does in general. Explaining all
# {glue:text}`esol_molecules` molecules (one backward pass) and pooling the atom relevance by element does.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pred_all, atom_all, bond_all, bias_all = explain(molecules)
print(f"lost-relevance warnings: {len(caught)}")
x_all = torch.cat([m.x for m in molecules])
r_all = torch.cat(atom_all)
element = x_all[:, :len(ATOM_TYPES) + 1].argmax(1)
names = ATOM_TYPES + ["other"]
atoms_abs, bonds_abs = torch.cat(atom_all).abs().sum(), torch.cat(bond_all).abs().sum()
bond_share = (bonds_abs / (atoms_abs + bonds_abs)).item()
print(
    f"per molecule on average: atoms {torch.cat(atom_all).sum() / len(molecules):.3f},"
    f" bonds {torch.cat(bond_all).sum() / len(molecules):.3f}, read-out bias"
    f" {bias_all.mean():.3f}"
)
print(
    "share of the bonds in the absolute relevance of atoms and bonds:"
    f" {100 * bond_share:.1f} %"
)
print(f"{'element':8s} {'atoms':>6s} {'mean R':>8s} {'std R':>7s} {'total R':>9s}")
rows = []
for k, name in enumerate(names):
    r = r_all[element == k]
    if len(r):
        rows.append(
            (
                name,
                len(r),
                r.mean().item(),
                r.std().item() if len(r) > 1 else 0.0,
                r.sum().item(),
            )
        )
        print(f"{name:8s} {len(r):6d} {r.mean():8.3f} {rows[-1][3]:7.3f} {r.sum():9.1f}")
stats = {row[0]: row for row in rows}
halogens = sorted(
    ["F", "Cl", "Br", "I"], key=lambda h: -stats[h][2]
)  # least negative first
# carbon by environment
aromatic = x_all[:, NODE_FEATURES.index("aromatic")] == 1
hydrogens = x_all[:, 12:16].argmax(1)
environments = {
    "C aromatic": (element == 0) & aromatic,
    "C aliphatic": (element == 0) & ~aromatic,
    "O with H": (element == 2) & (hydrogens > 0),
    "O without H": (element == 2) & (hydrogens == 0),
    "N with H": (element == 1) & (hydrogens > 0),
    "N without H": (element == 1) & (hydrogens == 0),
}
for label, mask in environments.items():
    print(
        f"{label:12s} {int(mask.sum()):6d} atoms, mean relevance"
        f" {r_all[mask].mean():7.3f}"
    )

# %% tags=["remove-cell"]
for label, mask in environments.items():
    glue(f"esol_env_{label.replace(' ', '_')}", signed(r_all[mask].mean()), display=False)
glue("esol_bias_mean", signed(bias_all.mean(), 3), display=False)
glue("esol_bond_share", f"{100 * bond_share:.0f} %", display=False)
glue("esol_molecules", f"{len(molecules):,}", display=False)
for name in ("C", "N", "O", "S", "Cl"):
    glue(f"esol_mean_{name}", signed(stats[name][2]), display=False)
glue("esol_std_Cl", f"{stats['Cl'][3]:.3f}", display=False)
glue("esol_halogen_order", ", ".join(halogens), display=False)
glue("esol_halogen_size", "the order of their size" if halogens == ["F", "Cl", "Br", "I"]
     else "not quite the order of their size", display=False)

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(BOOK_WIDTH, 3.4))
labels, means, stds = [r[0] for r in rows], [r[2] for r in rows], [r[3] for r in rows]
ax.bar(
    labels,
    means,
    yerr=stds,
    color=["tab:red" if m > 0 else "tab:blue" for m in means],
    capsize=3,
)
ax.axhline(0, color="black", lw=0.8)
ax.set_ylabel("mean LRP relevance per atom\n(log solubility units)")
ax.set_title("Atom relevance by element over ESOL (error bars: one std)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What it says about the model
#
# The table is a summary of the model, not of chemistry, and it should be read that way.
#
# - **Carbon** atoms carry negative relevance on average ({glue:text}`esol_mean_C` per atom), and
#   the halogens more negative still; from the least to the most negative they come as
#   {glue:text}`esol_halogen_order`, {glue:text}`esol_halogen_size`. The model lowers its
#   prediction for every hydrophobic atom, the bigger the more, the same direction as the atom
#   contributions of classical logP models (solubility falls as lipophilicity rises). Sulfur and
#   phosphorus are negative too.
# - **Oxygen** is positive on average ({glue:text}`esol_mean_O`), and most positive when it carries
#   a hydrogen ({glue:text}`esol_env_O_with_H` against {glue:text}`esol_env_O_without_H`: hydroxyl
#   groups donate hydrogen bonds to water); **nitrogen** is positive but close to zero on average
#   ({glue:text}`esol_mean_N`), with a wide spread, again higher with a hydrogen (amines,
#   {glue:text}`esol_env_N_with_H`) than without ({glue:text}`esol_env_N_without_H`).
# - The spread within an element is large for C, N, O and S (environment matters, which is what
#   the message-passing blocks are for) and small for the halogens, which are always terminal
#   atoms with a single bond: the model gives every chlorine nearly the same
#   {glue:text}`esol_mean_Cl` (standard deviation {glue:text}`esol_std_Cl`).
# - The read-out is a **sum** over atoms, and most atoms are carbons with negative relevance, so
#   the prediction falls with every carbon added: size alone pushes it down. Real solubility does
#   fall with size among similar compounds, but LRP shows that the model relies on it, not that it
#   is right to.
# - Almost nothing goes to the read-out bias ({glue:text}`esol_bias_mean` per molecule on
#   average), and the bonds carry {glue:text}`esol_bond_share` of the absolute relevance of atoms
#   and bonds together: the explanation is carried by the atoms.
#
# Relevance tells us what the model *uses*. Whether that is what a chemist would use is a
# separate question, which the agreement with known group contributions answers here only in
# broad strokes: there is no ground truth at the level of single atoms.
#
# ## Summary
#
# - `lrp_lib.book.datasets.esol` turns the ESOL csv into PyG graphs with atom, bond and molecule
#   features, reading a local copy when `LRP_DATA_ROOT` is set.
# - A graph network on `lrp_lib.teach.graph` layers reaches a test RMSE of {glue:text}`esol_test_rmse`
#   log units after a short training with ordinary gradients (predicting the mean:
#   {glue:text}`esol_baseline_rmse`); the same model is
#   explained with LRP by switching the mode.
# - With a sum read-out, each atom's relevance is its share of the prediction; one backward pass
#   explains the whole data set.
# - Pooled by element, the relevance agrees with textbook chemistry in sign (hydrophobic carbon
#   and halogens against solubility, hydroxyl and amine groups for it) and shows the model's
#   reliance on molecule size. Single molecules show details a summary hides, such as the
#   negative carbon next to each hydroxyl group.
#
# ## Exercises
#
# 1. Replace the sum read-out by a mean (`GlobalLinear(..., aggregation="mean")`). How do the test
#    RMSE and the per-element table change? What happens to the size effect?
# 2. Start the backward pass from $R = \hat y - \bar y$, the deviation from the training mean
#    $\bar y$, instead of $R = \hat y$. The forward pass is the same, and for a fixed forward pass
#    the epsilon rule is linear in the starting relevance (each layer multiplies it by ratios
#    $x_i w_{ij} / (z_j + \epsilon\,\mathrm{sign}(z_j))$ that the forward pass fixed). So every
#    atom's and bond's relevance in a molecule is multiplied by the same factor
#    $(\hat y - \bar y) / \hat y$ (for $\hat y \neq 0$). Check this on benzene: which atoms now carry positive
#    relevance, and why? Why is this a rescaled explanation of $\hat y$, not an explanation of
#    what makes benzene more or less soluble than the average molecule (for that, compare with a
#    reference input, as DeepLIFT does)?
# 3. Feed the molecule features $u$ (molecular weight, rings) to the read-out
#    (`GlobalLinear(1, node_features=32, global_features=2)`), retrain, and let `explain` read their
#    relevance too (`graph.relevance_inputs(..., ("x", "edge_attr", "u"))`). How much
#    relevance moves from the atoms to $u$, and what does that say about the shortcut "heavy means
#    insoluble"?
# 4. Group the atom relevance by functional group rather than element (RDKit's `MolFromSmarts`
#    with patterns for hydroxyl, carbonyl, nitro and halogen groups). Do groups explain more of
#    the variance than elements?
# 5. Compare LRP's per-element table with gradient × input, summed the same way. For this model
#    (ReLUs and sum aggregations) the epsilon rule with $\epsilon = 0$ gives exactly
#    gradient × input at the inputs, so how large is the difference with the layers' small
#    default $\epsilon$? Rebuild the model with a large $\epsilon$ (the layers' `eps` argument,
#    for example 0.1, weights unchanged): where do the two now disagree, and how much relevance
#    does the stabiliser absorb, so that conservation no longer holds?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
