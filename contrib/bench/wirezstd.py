#!/usr/bin/env python3
"""Wire and clone-bundle benchmark: core Mercurial beside wirezstd and bundlegen
on one repository, in one run.

    python contrib/bench/wirezstd.py /path/to/repo [--json out.json]

See vcsperf/wirebench.py for what is measured and how.
"""

import argparse
import json
import shutil
import sys
import tempfile

from vcsperf import wirebench


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--level", type=int, default=wirebench.MAX_LEVEL,
                        help="zstd-max level, and core's high-level zstd")
    parser.add_argument("--workdir", help="where the bundles and clones go (default: a "
                        "temporary directory, removed afterwards)")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="vcsperf-bench-")
    try:
        results, ratios = wirebench.run(args.repo, work, args.level)
        print(wirebench.format_report(args.repo, results, ratios))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"repo": args.repo, "results": results,
                           "ratios": ratios}, fh, indent=2)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
