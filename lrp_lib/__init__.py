__version__ = '0.1.0'
from .mode import relevance, is_relevance_mode


def __getattr__(name):
    # lrp_lib.explain_dataset / read_explanations load lrp_lib.jobs (PyG, pyarrow) on first use only
    if name in ("explain_dataset", "read_explanations"):
        from . import jobs
        return getattr(jobs, name)
    raise AttributeError(f"module 'lrp_lib' has no attribute {name!r}")
