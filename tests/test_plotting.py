"""draw_graph: colours follow the relevance on a scale centred at zero; bad input is refused."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from lrp_lib.plotting import draw_graph  # noqa: E402

EDGE_INDEX = torch.tensor([[0, 1, 2, 3], [1, 2, 0, 0]])


def _node_colors(ax):
    return ax.collections[0].get_facecolors()


def test_colours_are_centred_at_zero():
    node_rel = torch.tensor([2.0, 0.0, -1.0, 0.5])
    edge_rel = torch.tensor([-2.0, 1.0, 0.0, 0.0])
    fig, ax = plt.subplots()
    draw_graph(EDGE_INDEX, 4, node_rel, edge_rel, ax=ax)
    cmap = plt.get_cmap("RdBu_r")
    colors = _node_colors(ax)
    # shared scale: vmax = 2 over nodes and edges, so 0 -> the middle, +2 -> the top, -1 -> a quarter
    np.testing.assert_allclose(colors[1], cmap(0.5), atol=1e-6)
    np.testing.assert_allclose(colors[0], cmap(1.0), atol=1e-6)
    np.testing.assert_allclose(colors[2], cmap(0.25), atol=1e-6)
    edge_patches = [p for p in ax.patches]
    assert len(edge_patches) == 4  # one arrow per edge, in edge order
    np.testing.assert_allclose(edge_patches[0].get_edgecolor(), cmap(0.0), atol=1e-6)
    np.testing.assert_allclose(edge_patches[2].get_edgecolor(), cmap(0.5), atol=1e-6)
    cbar_ax = fig.axes[-1]
    assert cbar_ax is not ax and cbar_ax.get_ylim() == pytest.approx((-2.0, 2.0))
    plt.close(fig)


def test_data_labels_positions_and_no_relevance():
    data = Data(edge_index=EDGE_INDEX, num_nodes=5)  # node 4 has no edges
    pos = {i: (float(i), 0.0) for i in range(5)}
    ax = draw_graph(data, labels=["a", "b", "c", "d", "e"], pos=pos, colorbar=False, title="t")
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == ["a", "b", "c", "d", "e"]
    np.testing.assert_allclose(ax.collections[0].get_offsets()[:, 0], [0, 1, 2, 3, 4])
    assert ax.get_title() == "t"
    plt.close(ax.figure)


def test_bad_input():
    with pytest.raises(ValueError, match=r"node_relevance must have one value per node \(4\)"):
        draw_graph(EDGE_INDEX, 4, node_relevance=torch.zeros(3))
    with pytest.raises(ValueError, match=r"edge_relevance must have one value per edge \(4\)"):
        draw_graph(EDGE_INDEX, 4, edge_relevance=torch.zeros(5))
    with pytest.raises(ValueError, match=r"edge_index must have shape \(2, E\)"):
        draw_graph(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="num_nodes=3"):
        draw_graph(EDGE_INDEX, 3)
    plt.close("all")


# ------------------------------------------------------------------ draw_molecule
def _nitro():
    """C-N(-O)(-O) as directed edge pairs; x one-hot over the Mutagenicity atoms (C=0, O=1, N=4)."""
    from lrp_lib.datasets.mutagenicity import ATOMS
    kinds = [ATOMS.index(a) for a in ("C", "N", "O", "O")]
    x = torch.nn.functional.one_hot(torch.tensor(kinds), len(ATOMS)).float()
    edge_index = torch.tensor([[0, 1, 1, 2, 1, 3], [1, 0, 2, 1, 3, 1]])
    return Data(x=x, edge_index=edge_index, edge_gt=torch.tensor([0, 0, 1, 1, 1, 1]))


def test_draw_molecule_labels_atoms_and_colours_bonds_by_summed_scores():
    from lrp_lib.plotting import draw_molecule

    mol = _nitro()
    score = torch.tensor([1.0, 1.0, 2.0, 2.0, -0.5, 0.0])  # bonds: C-N 2, N-O 4, N-O -0.5
    ax = draw_molecule(mol, score, ground_truth=mol.edge_gt, pos={i: (float(i), 0.0) for i in range(4)})
    assert sorted(t.get_text() for t in ax.texts) == ["C", "N", "O", "O"]
    bonds = ax.collections[1]  # [0] = dashed ground-truth outline, [1] = the scored bonds, [2] = atoms
    assert len(bonds.get_paths()) == 3 and len(ax.collections[0].get_paths()) == 2
    cmap, top = plt.get_cmap("RdBu_r"), 4.0  # a negative score: diverging scale centred at 0
    np.testing.assert_allclose(bonds.get_colors()[0], cmap((2.0 / top + 1) / 2), atol=1e-6)
    np.testing.assert_allclose(bonds.get_colors()[1], cmap(1.0), atol=1e-6)
    np.testing.assert_allclose(bonds.get_linewidths(), [1 + 5 * 2 / 4, 6.0, 1 + 5 * 0.5 / 4])
    plt.close(ax.figure)


def test_draw_molecule_bad_input():
    from lrp_lib.plotting import draw_molecule

    mol = _nitro()
    with pytest.raises(ValueError, match=r"edge_score must have one value per edge \(6\)"):
        draw_molecule(mol, torch.zeros(5))
    with pytest.raises(ValueError, match=r"ground_truth must have one value per edge \(6\)"):
        draw_molecule(mol, ground_truth=torch.zeros(4))
    with pytest.raises(ValueError, match="combine must be"):
        draw_molecule(mol, torch.zeros(6), combine="median")
    with pytest.raises(ValueError, match=r"data.x must be one-hot with 14 columns"):
        draw_molecule(Data(x=torch.zeros(4, 3), edge_index=mol.edge_index))
    plt.close("all")
