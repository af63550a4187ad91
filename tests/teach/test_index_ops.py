"""Relevance ops that move values along an index (:mod:`lrp_lib.teach.index_ops`): the segment
sum, mean and max against a slow reference from each rule's definition, conservation, and the
copies (``index_select``, ``cat``, ``repeat_tensor``).  The errors for bad input are in test_ops."""
import warnings

import pytest
import torch

from lrp_lib.teach import index_ops as ops
from lrp_lib.teach.ops import LostRelevanceWarning
from test_ops import proportional_split, rand, relevance


def ref_scatter(src, index, R, reduce):
    """Rows of ``src`` (N x F) grouped by ``index``: proportional split, or winner takes all."""
    Rs = torch.zeros_like(src)
    for g in range(R.shape[0]):
        rows = [i for i in range(src.shape[0]) if index[i] == g]
        for f in range(src.shape[1]):
            vals = [float(src[i, f]) for i in rows]
            if not rows:
                continue
            if reduce == "max":
                best = max(vals)
                winner = max(i for i in rows if float(src[i, f]) == best)
                Rs[winner, f] = float(R[g, f]) if best != 0 else 0.0
            else:  # sum and mean split the same way: x_i / n over mean = x_i / sum
                for i, share in zip(rows, proportional_split(vals, float(R[g, f]))):
                    Rs[i, f] = share
    return Rs


@pytest.mark.parametrize("name", ["scatter_add", "scatter_mean", "scatter_max"])
def test_scatter_reference(name, gen):
    src = torch.randint(-3, 4, (30, 3), generator=gen).double() + 0.5 * (torch.arange(3) == 2)  # ties in cols 0, 1
    index = torch.randint(0, 8, (30,), generator=gen)
    index[index == 5] = 6  # empty group 5
    fn = getattr(ops, name)
    reduce = name.split("_")[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LostRelevanceWarning)  # groups summing to 0 lose their share
        out, R, (Rs,) = relevance(lambda s: fn(s, index, 0, 9), [src])
    torch.testing.assert_close(Rs, ref_scatter(src, index, R, reduce))
    torch.testing.assert_close(Rs.sum(), (R * (out != 0)).sum())  # conserved except where out == 0


def test_scatter_max_returns_argmax_and_handles_empty_groups():
    src = torch.tensor([1.0, 1, 1, 1, 2, 8, 0, 0, 0], requires_grad=True)
    out, argmax = ops.scatter_max(src, torch.tensor([0, 0, 0, 0, 1, 1, 3, 3, 3]), dim=0)
    assert out.tolist() == [1, 8, 0, 0]
    assert argmax.tolist() == [3, 5, 9, 8]  # empty group 2 -> src.size(0); ties -> last
    assert not argmax.requires_grad


def test_scatter_other_dim(gen, device, dtype):
    src = rand(2, 10, 3, gen=gen, device=device, dtype=dtype)
    index = (torch.arange(10) % 4).to(device)  # every group filled: nothing lost
    for fn in (ops.scatter_add, ops.scatter_mean):
        out, R, (Rs,) = relevance(lambda s: fn(s, index, 1, 4), [src])
        moved = ref_scatter(src.movedim(1, 0).reshape(10, 6).double().cpu(), index.cpu(),
                            R.movedim(1, 0).reshape(4, 6).double().cpu(), "sum")
        torch.testing.assert_close(Rs.movedim(1, 0).reshape(10, 6).double().cpu(), moved,
                                   rtol=1e-4 if dtype == torch.float32 else 1e-7, atol=1e-5)
    out, R, (Rs,) = relevance(lambda s: ops.scatter_max(s, index, -2, 4), [src])
    torch.testing.assert_close(Rs.sum(), R.sum())


def test_copy_ops_reference(gen):
    src = rand(5, 2, gen=gen)
    index = torch.tensor([2, 4, 4, 0, 4])
    out, R, (Rs,) = relevance(lambda s: ops.index_select(s, 0, index), [src])
    ref = torch.zeros_like(src)
    for k, j in enumerate(index.tolist()):
        ref[j] += R[k]
    torch.testing.assert_close(Rs, ref)
    torch.testing.assert_close(out, src[index])

    a, b = rand(2, 3, gen=gen), rand(2, 1, gen=gen)
    out, R, (Ra, Rb) = relevance(lambda s, t: ops.cat([s, t], dim=-1), [a, b])
    torch.testing.assert_close(Ra, R[:, :3])
    torch.testing.assert_close(Rb, R[:, 3:])

    repeats = torch.tensor([3, 0, 2, 1, 0])
    out, R, (Rs,) = relevance(lambda s: ops.repeat_tensor(s, repeats, dim=0), [src])
    torch.testing.assert_close(out, src.repeat_interleave(repeats, dim=0))
    ref = torch.stack([R[sum(repeats[:j]):sum(repeats[: j + 1])].sum(0) for j in range(5)])
    torch.testing.assert_close(Rs, ref)
    out, R, (Rs,) = relevance(lambda s: ops.repeat_tensor(s, 2, dim=1), [src])
    torch.testing.assert_close(Rs, R[:, 0::2] + R[:, 1::2])
