"""The relevance of this version against the stored relevance of an earlier one
(``tests/explain/data/zoo_relevance.json.gz``, made by ``tests/explain/make_zoo_relevance.py``, which names
the commit): every case of the coverage zoo under five rules and sixteen ``per_index=True``
explanations must give the same tensors (``torch.equal``: a hash of each tensor's values, a zero's sign
aside), the same warnings and the same errors.  On
another processor than the file's (``machine``), each tensor's sums must agree to rounding instead
(:data:`RTOL`), and the messages but for the numbers in them.  Changes that only save work (fewer passes, products
written in place, fewer checks of the same tensor) must not change a single value."""
import gzip
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_zoo_relevance as zoo  # noqa: E402

STORED = json.loads(gzip.open(zoo.PATH, "rt").read())
CASES = dict(zoo.cases())


def test_the_stored_cases_are_the_cases():
    assert sorted(STORED["records"]) == sorted(CASES)
    explained = [r for r in STORED["records"].values() if r is not None and "tensors" in r]
    assert len(explained) > 1500 and all(any(k.endswith("node_relevance") for k in r["tensors"]) for r in explained)


@pytest.fixture
def one_thread():
    """The stored file was made with one thread (its ``main``); with more, a reduction may split its sum
    differently and round otherwise (PMLP's batch statistics)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_relevance_is_the_stored_relevance(key, one_thread):
    _compare(CASES[key](), STORED["records"][key], same_machine(key))


#: Whether this processor is the one that made the stored file: then every value must be the same to
#: the bit; on another, whose matrix products round differently (MKL picks its kernels by processor),
#: each tensor's sums must agree to rounding and the messages in their words.
SAME_MACHINE = STORED.get("machine") == zoo.machine()


def same_machine(key: str) -> bool:
    """Whether this processor made the stored record of ``key`` (a case updated since the file was made
    notes its own, ``machines``)."""
    return STORED.get("machines", {}).get(key, STORED.get("machine")) == zoo.machine()
#: How far another processor's sums may be, relative to the sum of the magnitudes: the sum itself
#: (float32 rounding through a few layers; edge relevance, summed over layers, is not conserved), and
#: the sum of magnitudes and the weighted sum,
#: which move where rounding decides between two entries within rounding of each other (a max
#: aggregation's winner, jumping knowledge's max) and relevance goes to the other one.
RTOL = (1e-3, 1e-2, 1e-2)


def _close(got: list, want: list, scale: float, same: bool = SAME_MACHINE) -> bool:
    """Equal hashes; on another processor (``same`` false), sums within :data:`RTOL` of the tensor's magnitude,
    or within ``1e-9`` of ``scale`` (the record's largest magnitude: a residual that is rounding, ~1e-16, has
    another sign elsewhere)."""
    if same or want[1] is None or got[1] is None:
        return got[0] == want[0]
    g, w = [float.fromhex(v) for v in got[1]], [float.fromhex(v) for v in want[1]]
    return all(a == b or abs(a - b) <= rtol * abs(w[1]) + 1e-9 * scale for a, b, rtol in zip(g, w, RTOL))


def _scale(tensors: dict) -> float:
    return max([abs(float.fromhex(v[1][1])) for v in tensors.values() if v[1] is not None] or [0.0])


def _compare(got, want, same: bool = SAME_MACHINE):
    if want is None:
        assert got is None
        return
    assert got.keys() == want.keys()
    which = 0 if same else 1  # the messages' digests: exact, or with their numbers left out
    if "error" in want:
        assert got["error"][which] == want["error"][which] and got["warnings"][which] == want["warnings"][which]
        return
    assert got["warnings"][which] == want["warnings"][which]
    assert got["explained_output"] == want["explained_output"]
    scale = _scale(want["tensors"])
    differ = sorted(k for k in want["tensors"] if k not in got["tensors"] or not _close(got["tensors"][k],
                                                                                        want["tensors"][k], scale, same))
    assert not differ and got["tensors"].keys() == want["tensors"].keys(), differ
