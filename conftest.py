"""Run-wide settings for `pytest` (unit tests and nbval over the chapters alike)."""
import os
import shutil
import tempfile

_TEMPORARY = {}


def pytest_configure(config):
    """Keep every temporary file of the run in one folder that is removed at the end.

    Libraries write temporary files of their own under ``tempfile.gettempdir()`` and leave them
    there: PyG a generated module per message-passing class, torch.compile its cache. Point the
    temporary directory (and ``$TMPDIR``, inherited by the notebook kernels that nbval starts) at
    a fresh folder for the duration of the run, so that nothing is left in /tmp. Tests that need
    a folder of their own use pytest's ``tmp_path``.
    """
    folder = tempfile.mkdtemp(prefix="lrp-book-tests-")
    _TEMPORARY.update(folder=folder, tempdir=tempfile.tempdir,
                      env={k: os.environ.get(k) for k in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")})
    tempfile.tempdir = folder
    os.environ["TMPDIR"] = folder
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "torchinductor")


def pytest_unconfigure(config):
    if not _TEMPORARY:
        return
    tempfile.tempdir = _TEMPORARY["tempdir"]
    for key, value in _TEMPORARY["env"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(_TEMPORARY["folder"], ignore_errors=True)
    _TEMPORARY.clear()


# ------------------------------------------------------------------ Hypothesis profiles
# The property-based tests (tests/*/test_properties_*.py) run under the profile named by
# $HYPOTHESIS_PROFILE: "ci" (the default) draws few examples from a fixed seed, so every run of CI
# tests the same inputs and a failure reproduces; "thorough" draws 500 fresh random examples per
# property (minutes): run it before a release or after changing a rule. Neither writes an example
# database into the tree; a failure prints the falsifying example and a @reproduce_failure blob.
from hypothesis import HealthCheck, settings  # noqa: E402

_PROPERTY_SETTINGS = dict(deadline=None, print_blob=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=40, derandomize=True, **_PROPERTY_SETTINGS)
settings.register_profile("thorough", max_examples=500, derandomize=False, **_PROPERTY_SETTINGS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_sessionstart(session):
    """Hypothesis caches data under ``./.hypothesis``: keep it in the run's temporary folder."""
    if _TEMPORARY:
        from hypothesis.configuration import set_hypothesis_home_dir
        set_hypothesis_home_dir(os.path.join(_TEMPORARY["folder"], "hypothesis"))
