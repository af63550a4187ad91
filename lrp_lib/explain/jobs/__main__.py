"""``python -m lrp_lib.explain.jobs``: the ``lrp-explain`` command."""
from lrp_lib.explain.jobs import main

if __name__ == "__main__":
    raise SystemExit(main())
