"""``python -m lrp_lib.explain.jobs``: the ``lrp-explain`` command."""
import sys

from lrp_lib.explain.jobs import main

if __name__ == "__main__":
    sys.exit(main())
