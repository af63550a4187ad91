"""The one stabiliser, element by element from its definition."""
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lrp_lib.core.stabilizer import stabilize


@settings(max_examples=60, deadline=None)
@given(zs=st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, 1e-8, -3e-7, 4.0]), min_size=1, max_size=8),
       eps=st.sampled_from([1e-6, 0.5]))
def test_stabilize_adds_eps_times_the_sign_with_zero_positive(zs, eps):
    z = torch.tensor(zs, dtype=torch.float64)
    got = stabilize(z, eps)
    assert got.tolist() == [zi + math.copysign(eps, zi) for zi in zs]  # copysign: +0.0 -> +eps, -0.0 -> -eps
    assert got.data_ptr() != z.data_ptr() and z.tolist() == zs  # a new tensor, z untouched


def test_stabilize_with_eps_zero_is_z_itself():
    z = torch.tensor([0.0, -1.0])
    assert stabilize(z, 0.0) is z
