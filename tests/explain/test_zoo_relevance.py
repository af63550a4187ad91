"""The relevance of this version against the stored relevance of an earlier one
(``tests/explain/data/zoo_relevance.json.gz``, made by ``tests/explain/make_zoo_relevance.py``, which names
the commit): every case of the coverage zoo under five rules and sixteen ``per_index=True``
explanations must give the same tensors (``torch.equal``: a hash of each tensor's values, a zero's sign
aside), the same warnings and the same errors, also with the messages recomputed in backward.  Changes that only save work (fewer passes, products
written in place, fewer checks of the same tensor) must not change a single value."""
import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_zoo_relevance as zoo  # noqa: E402

STORED = json.loads(gzip.open(zoo.PATH, "rt").read())
CASES = dict(zoo.cases())
RECOMPUTED = dict(zoo.cases(recompute=True))


def test_the_stored_cases_are_the_cases():
    assert sorted(STORED["records"]) == sorted(CASES)
    explained = [r for r in STORED["records"].values() if r is not None and "tensors" in r]
    assert len(explained) > 1500 and all(any(k.endswith("node_relevance") for k in r["tensors"]) for r in explained)


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_relevance_is_the_stored_relevance(key):
    _compare(CASES[key](), STORED["records"][key])


@pytest.mark.parametrize("key", sorted(k for k in RECOMPUTED if k.endswith(("|zplus", "|z"))
                                      or k.startswith("per_index")))
def test_recomputed_messages_give_the_stored_relevance(key):
    """``LRPExplainer(recompute=True)``: the messages recomputed in backward, the same values."""
    _compare(RECOMPUTED[key](), STORED["records"][key])


def _compare(got, want):
    if want is None:
        assert got is None
        return
    assert got.keys() == want.keys()
    if "error" in want:
        assert got == want
        return
    assert got["warnings"] == want["warnings"]
    assert got["explained_output"] == want["explained_output"]
    differ = sorted(k for k in want["tensors"] if got["tensors"].get(k) != want["tensors"][k])
    assert not differ and got["tensors"].keys() == want["tensors"].keys(), differ
