"""draw_graph: colours follow the relevance on a scale centred at zero; bad input is refused."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

from lrp_lib.book.plotting import draw_graph  # noqa: E402

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


def test_graph_colour_bar_says_what_it_shows():
    fig, ax = plt.subplots()
    draw_graph(EDGE_INDEX, 4, torch.tensor([1.0, 0.0, -1.0, 0.5]), label="relevance of the 'sick' logit", ax=ax)
    assert fig.axes[-1].get_ylabel() == "relevance of the 'sick' logit"
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


# ------------------------------------------------------------------ draw_molecule (RDKit)
def _pixel_beside_bond(image, xy, bond, offset=3.0):
    """The image's colour a few pixels beside the middle of a bond (inside its highlight)."""
    i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
    d = xy[j] - xy[i]
    p = (xy[i] + xy[j]) / 2 + offset * np.array([-d[1], d[0]]) / np.linalg.norm(d)
    return image[int(round(p[1])), int(round(p[0])), :3]


def test_bond_values_sums_both_directions_in_rdkit_bond_order():
    from rdkit import Chem

    from lrp_lib.book.plotting import bond_values

    mol = Chem.MolFromSmiles("CCO")  # bonds: 0 = C0-C1, 1 = C1-O2
    edge_index = torch.tensor([[2, 0, 1, 1], [1, 1, 0, 2]])  # O->C1, C0->C1, C1->C0, C1->O
    values = torch.tensor([1.0, 2.0, -0.5, 4.0])
    np.testing.assert_allclose(bond_values(mol, edge_index, values), [1.5, 5.0])
    np.testing.assert_allclose(bond_values(mol, edge_index, values, combine="mean"), [0.75, 2.5])
    np.testing.assert_allclose(bond_values(mol, edge_index, values, combine="max"), [2.0, 4.0])


def test_bond_values_bad_input_names_the_argument():
    from rdkit import Chem

    from lrp_lib.book.plotting import bond_values

    mol = Chem.MolFromSmiles("CCO")
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(ValueError, match=r"edge_index\[:, 2\] = \(0, 2\) is not a bond of mol"):
        bond_values(mol, torch.tensor([[0, 1, 0], [1, 0, 2]]), torch.zeros(3))
    with pytest.raises(ValueError, match=r"edge_values must have one value per edge of edge_index \(4\)"):
        bond_values(mol, edge_index, torch.zeros(3))
    with pytest.raises(ValueError, match=r"edge_index has no edge for bond 1 \(1-2\)"):
        bond_values(mol, edge_index[:, :2], torch.zeros(2))
    with pytest.raises(ValueError, match="edge_index must have shape"):
        bond_values(mol, torch.zeros(3, 4, dtype=torch.long), torch.zeros(4))
    with pytest.raises(ValueError, match="combine must be"):
        bond_values(mol, edge_index, torch.zeros(4), combine="median")
    with pytest.raises(TypeError, match="mol must be an rdkit.Chem.Mol"):
        bond_values("CCO", edge_index, torch.zeros(4))


def test_one_scale_for_atoms_and_bonds_centred_at_zero():
    from rdkit import Chem

    from lrp_lib.book.plotting import relevance_colours

    mol = Chem.MolFromSmiles("CCCO")
    mappable, atoms, bonds = relevance_colours(mol, [2.0, 0.0, -1.0, 0.5], [0.0, -4.0, 1.0])
    cmap = plt.get_cmap("bwr")
    assert mappable.norm.vmin == -4.0 and mappable.norm.vmax == 4.0  # the largest |value| of atoms and bonds
    np.testing.assert_allclose(bonds[1], cmap(0.0)[:3])  # the most relevant bond: the extreme of the scale
    np.testing.assert_allclose(atoms[0], cmap(0.75)[:3])  # 2 on a scale of +-4
    np.testing.assert_allclose(bonds[0], cmap(0.5)[:3])  # zero: the middle (white)
    _, atoms, bonds = relevance_colours(mol, [2.0, 0.0, -1.0, 0.5], None, vmax=8.0)
    assert bonds == {} and np.allclose(atoms[0], cmap(0.625)[:3])


def test_depiction_shows_the_colours_and_keeps_every_atom_inside():
    from rdkit import Chem

    from lrp_lib.book.plotting import depict, relevance_colours

    mol = Chem.MolFromSmiles("CCCO")
    _, atoms, bonds = relevance_colours(mol, None, [0.0, -1.0, 2.0])
    image, xy = depict(mol, atoms, bonds, size=(400, 300))
    assert image.shape[:2] == (300, 400)
    np.testing.assert_allclose(_pixel_beside_bond(image, xy, mol.GetBondWithIdx(2)), [1.0, 0.0, 0.0], atol=0.02)
    np.testing.assert_allclose(_pixel_beside_bond(image, xy, mol.GetBondWithIdx(1)), [0.5, 0.5, 1.0], atol=0.02)
    np.testing.assert_allclose(_pixel_beside_bond(image, xy, mol.GetBondWithIdx(0)), [1.0, 1.0, 1.0], atol=0.02)
    margin = 20  # padding: no atom (nor its label) at the image's edge
    assert (xy[:, 0] > margin).all() and (xy[:, 0] < 400 - margin).all()
    assert (xy[:, 1] > margin).all() and (xy[:, 1] < 300 - margin).all()
    again, xy_again = depict(mol, atoms, bonds, size=(400, 300))
    assert np.array_equal(image, again) and np.array_equal(xy, xy_again)  # deterministic


def test_draw_molecule_shows_the_depiction_with_a_labelled_colour_bar():
    from rdkit import Chem

    from lrp_lib.book.plotting import depict, draw_molecule, relevance_colours

    mol = Chem.MolFromSmiles("CCCO")
    fig, ax = plt.subplots()
    mappable = draw_molecule(mol, [0.0, 0.5, 0.0, -3.0], [0.0, -1.0, 2.0], ax=ax, label="edge relevance (LRP)",
                             title="t")
    assert mappable.norm.vmin == -3.0 and mappable.norm.vmax == 3.0
    _, atoms, bonds = relevance_colours(mol, [0.0, 0.5, 0.0, -3.0], [0.0, -1.0, 2.0])
    expected, _ = depict(mol, atoms, bonds)
    assert np.array_equal(ax.images[0].get_array(), expected)
    assert not ax.axison and ax.get_title() == "t"
    colorbars = [a for a in fig.axes if a is not ax]
    assert len(colorbars) == 1 and colorbars[0].get_ylabel() == "edge relevance (LRP)"
    # a ground-truth panel: marked bonds in one colour, no colour bar
    fig2, ax2 = plt.subplots()
    draw_molecule(mol, marked_bonds=[2], ax=ax2)
    assert len(fig2.axes) == 1
    image = ax2.images[0].get_array()
    _, xy = depict(mol)
    np.testing.assert_allclose(_pixel_beside_bond(image, xy, mol.GetBondWithIdx(2)), [1.0, 0.75, 0.0], atol=0.02)
    plt.close("all")


def test_draw_molecule_bad_input_names_the_argument():
    from rdkit import Chem

    from lrp_lib.book.plotting import draw_molecule

    mol = Chem.MolFromSmiles("CCCO")
    with pytest.raises(ValueError, match=r"atom_relevance must have one value per atom of mol \(4\)"):
        draw_molecule(mol, torch.zeros(5))
    with pytest.raises(ValueError, match=r"bond_relevance must have one value per bond of mol \(3\)"):
        draw_molecule(mol, None, torch.zeros(6))
    with pytest.raises(ValueError, match="bond_relevance must be finite"):
        draw_molecule(mol, None, [0.0, float("nan"), 1.0])
    with pytest.raises(ValueError, match="vmax must be positive"):
        draw_molecule(mol, None, torch.zeros(3), vmax=-1.0)
    with pytest.raises(ValueError, match=r"marked_bonds must be bond indices of mol \(0..2\)"):
        draw_molecule(mol, marked_bonds=[3])
    with pytest.raises(TypeError, match="mol must be an rdkit.Chem.Mol"):
        draw_molecule("CCCO")
    plt.close("all")


def test_smallest_text_counts_what_is_drawn_at_the_saved_resolution():
    from lrp_lib.book.plotting import smallest_text_px
    fig, (a, b) = plt.subplots(1, 2, dpi=72)
    a.plot([0, 1], [0, 1])
    a.tick_params(labelsize=11)
    a.set_xlabel("x", fontsize=12)
    a.set_title("title", fontsize=14)
    # an axis switched off: its tick labels (fontsize 4) and label are not drawn; its text is
    b.tick_params(labelsize=4)
    b.set_ylabel("hidden", fontsize=3)
    b.axis("off")
    b.text(0.5, 0.5, "shown", fontsize=10)
    fig.text(0.1, 0.1, " ")  # empty: not counted
    assert smallest_text_px(fig) == pytest.approx(10.0)  # points = pixels at 72 dpi
    assert smallest_text_px(fig, dpi=144) == pytest.approx(20.0)
    b.texts[0].set_visible(False)
    assert smallest_text_px(fig) == pytest.approx(11.0)
    plt.close(fig)


def test_the_png_records_its_smallest_text():
    import io

    from PIL import Image

    from lrp_lib.book.plotting import TEXT_SIZE_KEY, png_with_text_size
    fig, ax = plt.subplots(figsize=(2, 1.5), dpi=100)
    ax.plot([0, 1])
    ax.tick_params(labelsize=9)
    ax.text(0.2, 0.5, "small", fontsize=6)
    image = Image.open(io.BytesIO(png_with_text_size(fig)))
    assert float(image.text[TEXT_SIZE_KEY]) == pytest.approx(6 * 100 / 72, abs=0.01)
    plt.close(fig)
