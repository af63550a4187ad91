"""``python -m lrp_lib.explain.jobs``: the ``lrp-explain`` command."""
import sys

from lrp_lib.explain.jobs import main

sys.exit(main())
