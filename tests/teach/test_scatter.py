"""Plain scatter reductions: against loops, against torch_scatter where installed, and their errors."""
import pytest
import torch

from lrp_lib.teach import scatter


def loop_reference(src, index, dim_size, reduce):
    """Group rows of a 2-D ``src`` by a 1-D ``index`` with Python loops."""
    out = torch.zeros(dim_size, src.shape[1], dtype=src.dtype)
    arg = torch.full((dim_size, src.shape[1]), src.shape[0], dtype=torch.long)
    for g in range(dim_size):
        rows = [i for i in range(src.shape[0]) if index[i] == g]
        if not rows:
            continue
        for f in range(src.shape[1]):
            vals = [float(src[i, f]) for i in rows]
            if reduce == "sum":
                out[g, f] = sum(vals)
            elif reduce == "mean":
                out[g, f] = sum(vals) / len(vals)
            else:
                best = max(vals)
                out[g, f] = best
                arg[g, f] = max(i for i in rows if float(src[i, f]) == best)  # ties: last
    return out, arg


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_against_loops_with_empty_groups(reduce, gen):
    src = torch.randint(-3, 4, (20, 3), generator=gen).double()  # small ints: many ties
    index = torch.randint(0, 6, (20,), generator=gen)
    index[index == 4] = 5  # group 4 is empty
    expected, expected_arg = loop_reference(src, index, 7, reduce)  # group 6 too
    if reduce == "sum":
        out = scatter.scatter_add(src, index, 0, 7)
    elif reduce == "mean":
        out = scatter.scatter_mean(src, index, 0, 7)
    else:
        out, arg = scatter.scatter_max(src, index, 0, 7)
        assert torch.equal(arg, expected_arg)
    torch.testing.assert_close(out, expected)


def test_other_dims_and_full_index(gen):
    src = torch.randn(3, 8, 2, generator=gen, dtype=torch.float64)
    index = torch.randint(0, 4, (8,), generator=gen)
    out = scatter.scatter_add(src, index, dim=1, dim_size=4)
    ref = torch.stack([src[:, index == g].sum(1) for g in range(4)], dim=1)
    torch.testing.assert_close(out, ref)
    # the same with an index of the shape of src, and with a negative dim
    full = index.view(1, 8, 1).expand_as(src).contiguous()
    torch.testing.assert_close(scatter.scatter_add(src, full, dim=-2, dim_size=4), ref)
    mean_ref = torch.stack([src[:, index == g].mean(1) if (index == g).any() else torch.zeros(3, 2, dtype=src.dtype)
                            for g in range(4)], dim=1)
    torch.testing.assert_close(scatter.scatter_mean(src, full, dim=1, dim_size=4), mean_ref)
    torch.testing.assert_close(scatter.scatter_mean(src, index, dim=1, dim_size=4), mean_ref)


def test_default_dim_size():
    src = torch.ones(4)
    assert scatter.scatter_add(src, torch.tensor([0, 2, 2, 0])).shape == (3,)
    assert scatter.scatter_add(torch.ones(0, 2), torch.zeros(0, dtype=torch.long)).shape == (0, 2)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(index=torch.tensor([0.0, 1.0])), TypeError, "index must have an integer dtype"),
        (dict(index=torch.tensor([0, -1])), IndexError, "negative"),
        (dict(index=torch.tensor([0, 5]), dim_size=3), IndexError, "out of range for size 3"),
        (dict(index=torch.tensor([0, 1, 1])), ValueError, "index has 3 entries"),
        (dict(index=torch.tensor([0, 1]), dim=2), IndexError, "dim=2 is out of range"),
        (dict(index=torch.tensor([0, 1]), dim_size=-1), ValueError, "dim_size"),
    ],
)
def test_bad_input(kwargs, error, match):
    src = torch.ones(2, 3)
    args = dict(dim=0, dim_size=None) | kwargs
    for fn in (scatter.scatter_add, scatter.scatter_mean, scatter.scatter_max):
        with pytest.raises(error, match=match):
            fn(src, **args)


def test_against_torch_scatter(gen):
    ts = pytest.importorskip("torch_scatter")
    src = torch.randn(50, 4, generator=gen)
    index = torch.randint(0, 9, (50,), generator=gen)
    torch.testing.assert_close(scatter.scatter_add(src, index, 0, 10), ts.scatter_add(src, index, 0, dim_size=10))
    torch.testing.assert_close(scatter.scatter_mean(src, index, 0, 10), ts.scatter_mean(src, index, 0, dim_size=10))
    out, arg = scatter.scatter_max(src, index, 0, 10)
    ts_out, ts_arg = ts.scatter_max(src, index, 0, dim_size=10)
    torch.testing.assert_close(out, ts_out)
    torch.testing.assert_close(arg, ts_arg)  # random floats: no ties


def test_scatter_max_gradient_goes_to_the_winner_only():
    """As in torch_scatter (and the seed): ties do not share the gradient."""
    src = torch.tensor([1.0, 1, 1, 1, 2, 8, 1, 1, -2], requires_grad=True)
    out, _ = scatter.scatter_max(src, torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2]), dim=0, dim_size=4)
    out.backward(torch.ones(4))
    assert src.grad.tolist() == [0, 0, 0, 1, 0, 1, 0, 1, 0]
    assert out.tolist() == [1, 8, 1, 0]
