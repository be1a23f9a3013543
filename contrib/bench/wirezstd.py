#!/usr/bin/env python3
"""Bundles, clones and the wire: core Mercurial beside our extensions.

wirezstd and bundlegen beside core Mercurial, on one repository, in one
run.

    python contrib/bench/wirezstd.py /path/to/repo [--json out.json]

See vcsperf/wirebench.py for what is measured and how.
"""

import sys

from vcsperf import benchcli, wirebench

if __name__ == "__main__":
    sys.exit(benchcli.main(__doc__, wirebench.run, wirebench.format_report, [
        ("level", dict(type=int, default=wirebench.MAX_LEVEL,
                       help="zstd-max's level, and core's high-level zstd")),
    ]))
