"""The teaching ops' share R / stab(z), element by element from its definition."""
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lrp_lib.core.stabilizer import LostRelevanceWarning, stabilize
from lrp_lib.teach.share import relevance_share

values = st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, 1e-8, -3e-7, 4.0]), min_size=1, max_size=8)


def denominator(z: float, eps: float) -> float:
    """z + eps sign z, sign(0) = +1 (and -1 for -0.0)."""
    return z + eps * (-1.0 if str(z).startswith("-") else 1.0)


def reference(r: float, z: float, eps: float) -> float:
    """R / (z + eps sign z); 0 where that denominator is 0 (the relevance is lost)."""
    d = denominator(z, eps)
    return 0.0 if d == 0 else r / d


@settings(max_examples=60, deadline=None)
@given(zs=values, eps=st.sampled_from([0.0, 1e-6, 0.5]), check=st.booleans())
def test_share_is_the_definition(zs, eps, check):
    z = torch.tensor(zs, dtype=torch.float64)
    r = torch.arange(1.0, len(zs) + 1, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = relevance_share("t", r, z, eps=eps, check=check)
    want = [reference(float(ri), zi, eps) for ri, zi in zip(r, zs)]
    assert got.tolist() == pytest.approx(want, rel=1e-15, abs=0)
    lost = [float(ri) for ri, zi in zip(r, zs) if denominator(zi, eps) == 0]
    warned = [w for w in caught if issubclass(w.category, LostRelevanceWarning)]
    assert len(warned) == (1 if check and lost else 0)
    if warned:
        assert f"{sum(lost):.4g}" in str(warned[0].message)


def test_the_scratch_denominator_gives_the_same_share():
    z, r = torch.tensor([2.0, -2.0, 0.0]), torch.tensor([1.0, 1.0, 1.0])
    torch.testing.assert_close(relevance_share("t", r, z, stabilize(z, 0.5)), relevance_share("t", r, z, eps=0.5))
    torch.testing.assert_close(relevance_share("t", r, z, eps=0.5), torch.tensor([1 / 2.5, -1 / 2.5, 2.0]))


def test_checked_share_refuses_nan_and_unchecked_does_not_synchronise_on_it():
    z, r = torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 1.0])
    with pytest.raises(ValueError, match="NaN or Inf"):
        relevance_share("t", r, z)
    assert torch.isnan(relevance_share("t", r, z, check=False)[1])  # the explainer checks at the end
