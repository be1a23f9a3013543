#!/usr/bin/env python3
"""Import benchmark of the bytes-literal importer: plain import of
pre-rewritten source beside Mercurial 5.1's own hook and pastbytes, cold
and warm, on Mercurial 5.1.2's sources, in one run.

    python contrib/bench/pastbytes.py [--repeat 5] [--json out.json]

See vcsperf/pastbytesbench.py for what is measured and how.
"""

import argparse
import json
import shutil
import sys
import tempfile

from vcsperf import pastbytesbench


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each phase (best is kept)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    corpus = pastbytesbench.fetch_sdist("mercurial")
    work = tempfile.mkdtemp(prefix="vcsperf-pastbytes-")
    try:
        results, figures = pastbytesbench.run(corpus, work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(pastbytesbench.format_report(results, figures))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": results, "corpus": figures}, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())
