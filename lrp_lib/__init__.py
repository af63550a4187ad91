__version__ = '0.1.0'
from .mode import relevance, is_relevance_mode


def __getattr__(name):
    # lrp_lib.explain_dataset / read_explanations load lrp_lib.jobs (PyG, pyarrow) on first use only,
    # lrp_lib.Explainer / LRPExplainer / Composite load PyG on first use only
    if name in ("explain_dataset", "read_explanations"):
        from . import jobs
        return getattr(jobs, name)
    if name in ("Explainer", "LRPExplainer"):
        from . import explain
        return getattr(explain, name)
    if name == "Composite":
        from . import composites
        return composites.Composite
    raise AttributeError(f"module 'lrp_lib' has no attribute {name!r}")
