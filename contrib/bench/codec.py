#!/usr/bin/env python3
"""Codec benchmark: core Mercurial's zlib-6 and zstd-3 against zstd-3 with
a trained dictionary, on the revlog chunks of any Mercurial repository.

    python contrib/bench/codec.py /path/to/repo [--json out.json]

The dictionary is trained on the older 80% of each revlog class and every
codec is measured on the newest 20%, in one run, on the same chunks.
"""

import argparse
import json
import sys
import time

import zstandard

from vcsperf import codecbench, hgchunks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    start = time.perf_counter()
    classes = hgchunks.chunks_by_class(args.repo)
    read_seconds = time.perf_counter() - start
    results = [codecbench.compare(name, chunks)
               for name, chunks in classes.items() if len(chunks) >= 50]
    print("repository: %s  (read %d chunks in %.1fs; zstandard %s, %s backend)"
          % (args.repo, sum(len(c) for c in classes.values()), read_seconds,
             zstandard.__version__, zstandard.backend))
    print(codecbench.format_table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"repo": args.repo, "zstandard": zstandard.__version__,
                       "backend": zstandard.backend,
                       "classes": codecbench.as_dict(results)}, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())
