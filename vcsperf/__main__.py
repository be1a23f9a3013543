"""``python -m vcsperf``: the ``vcsperf`` command, for a Python whose
scripts directory is not on PATH."""

import sys

from vcsperf.cli import main

sys.exit(main())
