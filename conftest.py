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
