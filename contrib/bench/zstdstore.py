#!/usr/bin/env python3
"""Store benchmark: core Mercurial's zlib and zstd revlogs beside zstdstore
(zstd with trained dictionaries), on copies of one repository, in one run.

    python contrib/bench/zstdstore.py /path/to/repo [--json out.json]

See vcsperf/storebench.py for what is measured and how.
"""

import sys

from vcsperf import benchcli, storebench

if __name__ == "__main__":
    sys.exit(benchcli.main(__doc__, storebench.run, storebench.format_report, [
        ("repeat", dict(type=int, default=5,
                        help="read runs per class (best is kept)")),
    ]))
