"""``python -m gitbridge``: the ``gitbridge`` command, for a Python whose
scripts directory is not on PATH."""

import sys

from gitbridge.cli import main

sys.exit(main())
