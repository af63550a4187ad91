"""Residual block: same output as the ordinary block, relevance equal to a reference composed
from each rule's definition, conserved across the skip (where a plain ``+`` counts it twice)."""
import pytest
import torch
import torch.nn.functional as F

from lrp_lib.core import rules
from lrp_lib.teach import linear_maps
from lrp_lib.teach.ops import LostRelevanceWarning
from lrp_lib.teach.residual import ResidualBlock, skip_add
from rule_references import conv_matrix, ref_rule


def make_block(bias, seed=0):
    torch.manual_seed(seed)
    return ResidualBlock(2, bias=bias).double()


def block_reference(block, x, R, rule):
    """The block's input relevance composed from dense matrices, one sample at a time:
    R_y -> relu (passes where active) -> proportional split of the sum -> conv2's rule ->
    relu -> conv1's rule, plus the skip's share."""
    A1, _ = conv_matrix(x.shape[1:], block.conv1.weight.detach(), (1, 1), (1, 1), (1, 1), 1)
    A2, _ = conv_matrix(x.shape[1:], block.conv2.weight.detach(), (1, 1), (1, 1), (1, 1), 1)
    n_pos = x.shape[2] * x.shape[3]
    b1 = b2 = None
    if block.conv1.bias is not None:
        b1 = block.conv1.bias.detach().repeat_interleave(n_pos)
        b2 = block.conv2.bias.detach().repeat_interleave(n_pos)
    X = x.reshape(x.shape[0], -1)
    h = (X @ A1.T + (0 if b1 is None else b1)).clamp(min=0)
    g = h @ A2.T + (0 if b2 is None else b2)
    s = g + X
    R_s = R.reshape(X.shape) * (s > 0)
    R_g, R_skip = g / s * R_s, X / s * R_s
    R_h = ref_rule(rule, h, A2, b2, R_g) * (h > 0)
    return (ref_rule(rule, X, A1, b1, R_h) + R_skip).reshape(x.shape)


@pytest.mark.parametrize("rule", [rules.Epsilon(0.0), rules.Epsilon(0.1), rules.Gamma(0.5), rules.ZPlus(),
                                  rules.AlphaBeta(2, 1)], ids=repr)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.filterwarnings("ignore::lrp_lib.core.stabilizer.LostRelevanceWarning")  # z+ and alpha-beta lose the share of
def test_block_matches_reference(rule, bias):                          # outputs without positive terms (so does the reference)
    block = make_block(bias)
    x = torch.rand(2, 2, 5, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    out = block(leaf, rule=rule)
    torch.testing.assert_close(out, block(x))
    torch.testing.assert_close(block(x), torch.relu(x + block.conv2(torch.relu(block.conv1(x)))))
    R = torch.rand(out.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * (out > 0)
    out.backward(R)
    torch.testing.assert_close(leaf.grad, block_reference(block, x, R, rule))


@pytest.mark.parametrize("rule", ["z", rules.Gamma(0.25, eps=0.0)], ids=str)
def test_bias_free_block_conserves_and_plus_double_counts(rule):
    block = make_block(bias=False)
    x = torch.rand(3, 2, 6, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    out = block(block(leaf, rule=rule), rule=rule)  # two blocks in a row
    R = out.detach()  # start from the output itself
    out.backward(R)
    torch.testing.assert_close(leaf.grad.sum(), R.sum())

    # the same block with a plain `+` on the skip: the relevance is counted twice
    plain = x.clone().requires_grad_(True)
    h = F.relu(linear_maps.conv2d(plain, block.conv1.weight, padding=1, rule=rule))
    g = linear_maps.conv2d(h, block.conv2.weight, padding=1, rule=rule)
    y = g + plain
    R = y.detach() * (y > 0)
    with pytest.warns(LostRelevanceWarning):  # where the branch's output is 0 it cannot take its copy
        y.backward(R)
    # the skip gets all of R, and the branch all of R again wherever its output is not 0
    torch.testing.assert_close(plain.grad.sum(), R.sum() + (R * (g != 0)).sum())
    assert float(plain.grad.sum()) > 1.8 * float(R.sum())  # close to twice


def test_skip_add_splits_in_proportion():
    branch = torch.tensor([4.0, 1.0], dtype=torch.float64, requires_grad=True)
    skip = torch.tensor([1.0, 3.0], dtype=torch.float64, requires_grad=True)
    skip_add(branch, skip).backward(torch.ones(2))
    assert branch.grad.tolist() == [0.8, 0.25] and skip.grad.tolist() == [0.2, 0.75]


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: ResidualBlock(3)(torch.ones(1, 2, 4, 4)), ValueError, r"x must have shape \(N, 3, H, W\)"),
        (lambda: ResidualBlock(3, kernel_size=2), ValueError, "kernel_size must be a positive odd int"),
        (lambda: ResidualBlock(2)(torch.ones(1, 2, 4, 4), rule="nope"), ValueError, "rule 'nope' is not known"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
