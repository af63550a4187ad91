"""The relevance() context: on inside, off outside, restored after exceptions, nested, per thread."""
import threading

import pytest

import lrp_lib
from lrp_lib.teach.mode import is_relevance_mode, relevance


def test_on_inside_off_outside():
    assert lrp_lib.teach.relevance is relevance and lrp_lib.teach.is_relevance_mode is is_relevance_mode
    assert not is_relevance_mode()
    with relevance():
        assert is_relevance_mode()
    assert not is_relevance_mode()


def test_restored_when_an_exception_leaves_the_block():
    with pytest.raises(KeyError):
        with relevance():
            raise KeyError("boom")
    assert not is_relevance_mode()
    with relevance():
        with pytest.raises(ValueError):
            with relevance(False):
                assert not is_relevance_mode()
                raise ValueError
        assert is_relevance_mode()  # the outer block's mode is back
    assert not is_relevance_mode()


def test_nesting():
    seen = []
    with relevance():
        seen.append(is_relevance_mode())
        with relevance(False):
            seen.append(is_relevance_mode())
            with relevance():
                seen.append(is_relevance_mode())
            seen.append(is_relevance_mode())
        seen.append(is_relevance_mode())
    seen.append(is_relevance_mode())
    assert seen == [True, False, True, False, True, False]


def test_mode_is_per_thread():
    seen = []
    with relevance():
        t = threading.Thread(target=lambda: seen.append(is_relevance_mode()))
        t.start()
        t.join()
        assert is_relevance_mode()
    assert seen == [False]


def test_enabled_must_be_bool():
    with pytest.raises(TypeError, match="enabled must be a bool, got int"):
        with relevance(1):
            pass
    assert not is_relevance_mode()
