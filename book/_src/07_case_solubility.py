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
# This chapter assumes the graph-network layers of `lrp_lib.graph` and the relevance mode from the
# earlier chapters, and the infection case study. After reading it you should be able to
# - load ESOL as PyTorch Geometric graphs with atom, bond and molecule features (`lrp_lib.datasets.esol`);
# - train a graph-network regressor with ordinary gradients and explain its predictions with LRP;
# - explain every molecule of a data set in one backward pass;
# - turn relevance into per-atom and per-bond pictures of a molecule, and into a per-element
#   summary over the data set;
# - read such a summary critically: what it says about the model, and what it does not.
# ```

# %%
import random
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook notice, via PyG

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import Normalize
from rdkit import Chem, RDLogger
from rdkit.Chem import AllChem
from torch import nn
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader

import lrp_lib
from lrp_lib import graph
from lrp_lib.datasets import esol
from lrp_lib.datasets.esol import ATOM_TYPES, EDGE_FEATURES, NODE_FEATURES, smiles_to_graph

RDLogger.DisableLog("rdApp.*")
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)

# %% [markdown]
# ## The data
#
# ESOL {cite}`delaney2004esol` lists 1,128 organic molecules with their measured solubility in
# water, as $\log_{10}$ of mol/L (from $-11.6$, nearly insoluble, to $+1.6$). It is part of
# MoleculeNet {cite}`wu2018moleculenet`. `lrp_lib.datasets.esol()` reads MoleculeNet's csv from
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
molecules = esol()  # $LRP_DATA_ROOT/delaney-processed.csv, or downloaded to ~/.cache/lrp_lib/data
y_all = torch.cat([m.y for m in molecules])
print(f"{len(molecules)} molecules, {sum(m.num_nodes for m in molecules)} atoms; "
      f"log solubility from {y_all.min():.2f} to {y_all.max():.2f}, mean {y_all.mean():.2f}, std {y_all.std():.2f}")
print("node features:", NODE_FEATURES)
print("edge features:", EDGE_FEATURES)
phenol = next(m for m in molecules if m.name == "Phenol")
print(phenol.name, phenol.smiles, phenol)

# %% [markdown]
# A random split, fixed by a seed: 80% for training, 10% for validation, 10% for testing.

# %%
order = torch.randperm(len(molecules), generator=torch.Generator().manual_seed(0)).tolist()
n_tenth = len(molecules) // 10
val_set = [molecules[i] for i in order[:n_tenth]]
test_set = [molecules[i] for i in order[n_tenth:2 * n_tenth]]
train_set = [molecules[i] for i in order[2 * n_tenth:]]
print(f"train {len(train_set)}, validation {len(val_set)}, test {len(test_set)}")

# %% [markdown]
# ## The model
#
# A graph network in the style of the paper, on `lrp_lib.graph` layers: an encoder for atoms and
# bonds, two message-passing blocks with sum aggregation, and a read-out that **sums** the atom
# embeddings of each molecule and maps them to one number,
#
# $$ \hat y = w^\top \sum_{v} h_v + b . $$
#
# A sum read-out fits what chemists know about solubility, which is roughly additive over a
# molecule's fragments, and it makes LRP's answer easy to read: each atom's relevance is its share
# of $\hat y - b$ (plus the share of the bonds). All layers but the read-out are bias-free, so only
# $b$ takes relevance away from the atoms and bonds.

# %%
class SolubilityGN(nn.Module):
    """Encoder, two message-passing blocks (sum aggregation), sum read-out to one number per molecule."""

    def __init__(self, hidden=32, edge_hidden=16, blocks=2):
        super().__init__()
        self.encode = nn.Sequential(
            graph.EdgeLinear(edge_hidden, edge_features=len(EDGE_FEATURES), bias=False), graph.EdgeReLU(),
            graph.NodeLinear(hidden, node_features=len(NODE_FEATURES), bias=False), graph.NodeReLU())
        layers = []
        for _ in range(blocks):
            layers += [
                graph.EdgeLinear(edge_hidden, edge_features=edge_hidden, sender_features=hidden, bias=False),
                graph.EdgeReLU(),
                graph.NodeLinear(hidden, node_features=hidden, incoming_features=edge_hidden, aggregation="sum",
                                 bias=False),
                graph.NodeReLU()]
        self.blocks = nn.Sequential(*layers)
        self.readout = graph.GlobalLinear(1, node_features=hidden, aggregation="sum", bias=True)

    def forward(self, data):
        return self.readout(self.blocks(self.encode(data))).u.view(-1)  # u: one row per molecule


def rmse(model, graphs):
    batch = Batch.from_data_list(graphs).to(device)
    with torch.no_grad():
        return (model(batch) - batch.y).pow(2).mean().sqrt().item()


model = SolubilityGN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
for epoch in range(15):
    for batch in loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(batch), batch.y).backward()
        optimizer.step()
    if epoch in (4, 9, 14):
        print(f"epoch {epoch + 1:2d}: validation RMSE {rmse(model, val_set):.2f}")
model.eval()
for p in model.parameters():
    p.requires_grad_(False)
mean_train = torch.cat([m.y for m in train_set]).mean()
baseline = torch.cat([m.y for m in test_set]).sub(mean_train).pow(2).mean().sqrt()
print(f"test RMSE {rmse(model, test_set):.2f} log units (predicting the training mean: {baseline:.2f})")

# Delaney's own ESOL equation (a linear model on logP, weight, rotatable bonds and aromatic
# proportion) is a column of the same csv: its error on the same test molecules
import csv
from lrp_lib.datasets.esol import FILENAME, default_root
with open(default_root() / FILENAME, newline="") as f:  # rows in the order of `molecules`
    esol_equation = [float(r["ESOL predicted log solubility in mols per litre"]) for r in csv.DictReader(f)]
delaney = torch.tensor([esol_equation[i] for i in order[n_tenth:2 * n_tenth]])
print(f"Delaney's ESOL equation on the same test molecules: RMSE "
      f"{(delaney - torch.cat([m.y for m in test_set])).pow(2).mean().sqrt():.2f}")

# %% [markdown]
# A test error of 0.78 log units, against 1.86 for a constant and 0.85 for Delaney's equation on
# hand-picked descriptors: the model has learned *something* about solubility. What?
#
# ## Relevance of atoms and bonds
#
# We explain the prediction $\hat y$ itself: run the forward pass in relevance mode, start the
# backward pass from $R = \hat y$, and read the relevance of each atom (the sum over its features)
# and of each bond (the sum over the features of its two directed edges). Negative relevance
# pushes the prediction down (less soluble), positive up. Conservation gives
#
# $$ \hat y = \sum_{\text{atoms}} R_v + \sum_{\text{bonds}} R_b + R_{\text{bias}} . $$
#
# The molecules of a batch share nothing, so one backward pass explains all of them at once.

# %%
def explain(graphs):
    """LRP of each molecule's prediction: (predictions, per-atom list, per-bond list, bias shares)."""
    batch = graph.relevance_inputs(Batch.from_data_list(graphs).to(device), ("x", "edge_attr"))
    with lrp_lib.relevance():
        out = model(batch)
    out.backward(out.detach())  # R = the prediction of each molecule
    rel = graph.read_relevance(batch)
    atoms = rel.node.cpu().split([g.num_nodes for g in graphs])
    edges = rel.edge.cpu().split([g.num_edges for g in graphs])
    bonds = [e.view(-1, 2).sum(1) for e in edges]  # edges 2b and 2b+1 are bond b
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
for (name, smiles), p, a, b, c in zip(examples.items(), pred, atom_rel, bond_rel, bias_rel):
    known = f"{measured[smiles]:6.2f}" if smiles in measured else "   n/a"
    print(f"{name:18s} measured {known}  predicted {p:6.2f} = atoms {a.sum():6.2f} + bonds {b.sum():5.2f}"
          f" + bias {c:5.2f}")

# %% [markdown]
# The drawing puts each atom at its RDKit 2D position and colours atoms and bonds on one shared,
# zero-centred scale per molecule: red for positive relevance (towards soluble), blue for negative.
# (`lrp_lib.plotting.draw_molecule` colours bonds only, for edge-mask explainers; here most of the
# relevance sits on the atoms, so a small helper in this chapter colours both.)

# %% tags=["hide-input"]
def draw_molecule(ax, smiles, atoms, bonds, title):
    mol = Chem.MolFromSmiles(smiles)
    AllChem.Compute2DCoords(mol)
    xy = np.array([list(mol.GetConformer().GetAtomPosition(i))[:2] for i in range(mol.GetNumAtoms())])
    vmax = max(float(atoms.abs().max()), float(bonds.abs().max()) if len(bonds) else 0.0, 1e-6)
    norm, cmap = Normalize(-vmax, vmax), plt.get_cmap("RdBu_r")
    for b, bond in enumerate(mol.GetBonds()):
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        ax.plot(xy[[i, j], 0], xy[[i, j], 1], color=cmap(norm(float(bonds[b]))), lw=6, zorder=1,
                solid_capstyle="round")
        ax.plot(xy[[i, j], 0], xy[[i, j], 1], color="black", lw=0.6, zorder=2)
    ax.scatter(xy[:, 0], xy[:, 1], s=330, c=[cmap(norm(float(r))) for r in atoms], edgecolors="black",
               linewidths=0.8, zorder=3)
    for i, atom in enumerate(mol.GetAtoms()):
        ax.text(xy[i, 0], xy[i, 1], atom.GetSymbol(), ha="center", va="center", fontsize=8, zorder=4)
    ax.set_title(title, fontsize=10)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.figure.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.6)


fig, axes = plt.subplots(2, 3, figsize=(15, 9))
for ax, (name, smiles), p, a, b in zip(axes.flat, examples.items(), pred, atom_rel, bond_rel):
    draw_molecule(ax, smiles, a, b, f"{name}: predicted {p:.2f}")
fig.tight_layout()
plt.show()

# %% [markdown]
# Read the pictures with the conservation equation in mind: each atom's colour is its share of
# the prediction, on a scale of its own per molecule.
#
# - In **benzene** the six carbons get the same negative relevance (they are equivalent, and so
#   are their explanations); together with the bonds they make the prediction of $-1.45$.
# - In **phenol** the hydroxyl oxygen is clearly positive, and the prediction is half a log unit
#   above benzene's. But the carbon that carries it is clearly *negative*, more than any carbon of
#   benzene: part of what the oxygen adds, the model takes back through its neighbour. The same
#   pattern shows in pentachlorophenol and on the amine of p-nitroaniline. LRP does not say the
#   carbon is hydrophobic here; it says this model encodes "hydroxyl on an aromatic ring" partly
#   in the ring atom's embedding, and with a negative weight.
# - In **pentachlorophenol** every chlorine adds about $-0.5$: halogens make a molecule less
#   soluble, and five of them put the prediction at $-4.26$ (measured $-4.28$).
# - In **sucrose** the eight hydroxyl oxygens are the positive atoms; the ring and bridge oxygens
#   are nearly neutral and the carbons negative. The atoms sum to $+0.64$ but the bonds take
#   $-0.63$, so the prediction ends near zero, below the measured $0.79$: for the largest
#   molecule here, bonds matter as much as atoms.
# - **Ethanol** is nearly balanced (a negative methyl carbon, a positive oxygen), and is
#   predicted a log unit less soluble than it is.
#
# ## Relevance per element over the data set
#
# One picture per molecule does not say what the model does in general. Explaining all 1,128
# molecules (one backward pass) and pooling the atom relevance by element does.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pred_all, atom_all, bond_all, bias_all = explain(molecules)
print(f"lost-relevance warnings: {len(caught)}")
x_all = torch.cat([m.x for m in molecules])
r_all = torch.cat(atom_all)
element = x_all[:, :len(ATOM_TYPES) + 1].argmax(1)
names = ATOM_TYPES + ["other"]
print(f"read-out bias share per molecule: {bias_all.mean():.3f}; atoms {torch.cat(atom_all).sum() / len(molecules):.3f}"
      f" and bonds {torch.cat(bond_all).sum() / len(molecules):.3f} per molecule on average")
print(f"{'element':8s} {'atoms':>6s} {'mean R':>8s} {'std R':>7s} {'total R':>9s}")
rows = []
for k, name in enumerate(names):
    r = r_all[element == k]
    if len(r):
        rows.append((name, len(r), r.mean().item(), r.std().item() if len(r) > 1 else 0.0, r.sum().item()))
        print(f"{name:8s} {len(r):6d} {r.mean():8.3f} {rows[-1][3]:7.3f} {r.sum():9.1f}")
# carbon by environment
aromatic = x_all[:, NODE_FEATURES.index("aromatic")] == 1
hydrogens = x_all[:, 12:16].argmax(1)
for label, mask in [("C aromatic", (element == 0) & aromatic), ("C aliphatic", (element == 0) & ~aromatic),
                    ("O with H", (element == 2) & (hydrogens > 0)), ("O without H", (element == 2) & (hydrogens == 0)),
                    ("N with H", (element == 1) & (hydrogens > 0)), ("N without H", (element == 1) & (hydrogens == 0))]:
    print(f"{label:12s} {int(mask.sum()):6d} atoms, mean relevance {r_all[mask].mean():7.3f}")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(7, 3.5))
labels, means, stds = [r[0] for r in rows], [r[2] for r in rows], [r[3] for r in rows]
ax.bar(labels, means, yerr=stds, color=["tab:red" if m > 0 else "tab:blue" for m in means], capsize=3)
ax.axhline(0, color="black", lw=0.8)
ax.set_ylabel("mean relevance per atom")
ax.set_title("Atom relevance by element over ESOL (error bars: one std)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What it says about the model
#
# The table is a summary of the model, not of chemistry, and it should be read that way.
#
# - **Carbon** atoms carry negative relevance on average, and the halogens more negative still,
#   in the order of their size: F, Cl, Br, I. The model lowers its prediction for every
#   hydrophobic atom, the bigger the more, the same direction as the atom contributions of
#   classical logP models (solubility falls as lipophilicity rises). Sulfur and phosphorus are
#   negative too.
# - **Oxygen** is positive on average, and most positive when it carries a hydrogen (hydroxyl
#   groups donate hydrogen bonds to water); **nitrogen** is positive but close to zero on
#   average, with a wide spread, again higher with a hydrogen (amines) than without.
# - The spread within an element is large for C, N, O and S (environment matters, which is what
#   the message-passing blocks are for) and tiny for the halogens, which are always terminal
#   atoms with a single bond: the model gives every chlorine nearly the same $-0.48$.
# - The read-out is a **sum** over atoms, and most atoms are carbons with negative relevance, so
#   the prediction falls with every carbon added: size alone pushes it down. Real solubility does
#   fall with size among similar compounds, but LRP shows that the model relies on it, not that it
#   is right to.
# - Almost nothing goes to the read-out bias ($-0.02$ per molecule), and about a tenth of the
#   relevance goes to the bonds: the explanation is carried by the atoms.
#
# Relevance tells us what the model *uses*. Whether that is what a chemist would use is a
# separate question, which the agreement with known group contributions answers here only in
# broad strokes: there is no ground truth at the level of single atoms.
#
# ## Summary
#
# - `lrp_lib.datasets.esol` turns the ESOL csv into PyG graphs with atom, bond and molecule
#   features, reading a local copy when `LRP_DATA_ROOT` is set.
# - A graph network on `lrp_lib.graph` layers reaches a test RMSE of about 0.8 log units after a
#   short training with ordinary gradients (predicting the mean: 1.86); the same model is
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
# 2. Explain the *deviation* from the training mean instead of the prediction: start the backward
#    pass from $R = \hat y - \bar y$. Which atoms now carry positive relevance in benzene?
# 3. Feed the molecule features $u$ (molecular weight, rings) to the read-out
#    (`GlobalLinear(1, node_features=32, global_features=2)`) and keep them in the input. How much
#    relevance moves from the atoms to $u$, and what does that say about the shortcut "heavy means
#    insoluble"?
# 4. Group the atom relevance by functional group rather than element (RDKit's `MolFromSmarts`
#    with patterns for hydroxyl, carbonyl, nitro and halogen groups). Do groups explain more of
#    the variance than elements?
# 5. Compare LRP's per-element table with the gradient times input, summed the same way. Where do
#    they disagree?
#
# ## References
#
# ```{bibliography}
# :filter: docname in docnames
# ```
