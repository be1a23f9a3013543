"""``vcsperf demo``: build a repository from real content with no network,
run every feature the suite has so far beside core Mercurial, and print the
figures."""

import os
import shutil
import sys
import tempfile
import time

import zstandard

from . import codecbench, hgchunks, history, storebench, tools, wirebench


def _status(message):
    print(message, flush=True)


def _progress(total):
    if not sys.stderr.isatty():
        return None

    def report(count, snapshot):
        sys.stderr.write("\r  committing %d/%d: %-60.60s"
                         % (count, total, snapshot.message))
        if count == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return report


def build_demo_repo(dest, env):
    snapshots = list(history.installed_sources())
    history.write_hg(snapshots, dest, hg=tools.executable("hg"), env=env,
                     progress=_progress(len(snapshots)))
    return snapshots


#: Level 19 takes minutes even on the demo's history; 12 shows the same
#: comparison in seconds.
DEMO_BUNDLE_LEVEL = 12


def run_demo(workdir=None, keep=False):
    scratch = workdir or tempfile.mkdtemp(prefix="vcsperf-demo-")
    try:
        env = tools.isolated_env(scratch)
        repo = os.path.join(scratch, "repo")
        _status("vcsperf demo: a history built from the installed sources of "
                "Mercurial, dulwich,\n  cffi and pycparser (no network)")
        start = time.perf_counter()
        snapshots = build_demo_repo(repo, env)
        seconds = time.perf_counter() - start
        _status("  %d changesets, %d files, store %.1f MiB with core "
                "Mercurial, built in %.1fs"
                % (len(snapshots), len(snapshots[-1].files),
                   storebench.store_bytes(repo)["total"] / 2**20, seconds))
        _status("\nRevlog chunk codecs: core zlib-6 and zstd-3 beside zstd-3 "
                "with a dictionary\n(trained on the older 80%% of each "
                "class, measured on the newest 20%%; zstandard %s, %s)"
                % (zstandard.__version__, zstandard.backend))
        classes = hgchunks.chunks_by_class(repo)
        results = [codecbench.compare(name, chunks)
                   for name, chunks in classes.items() if len(chunks) >= 50]
        _status(codecbench.format_table(results))
        _status("\nd/zlib, d/zstd: stored size with the dictionary over core's "
                "(lower is better);\nxzlib, xzstd: decompression speed over "
                "core's (higher is better).")
        _status("\nzstdstore: the same repository stored by core's zlib and "
                "zstd engines and by\nzstd-dict (trained, recompressed), "
                "read back, logged and verified:")
        bench = os.path.join(scratch, "storebench")
        os.mkdir(bench)
        results, ratios = storebench.run(repo, bench, repeat=3)
        _status(storebench.format_report(repo, results, ratios))
        _status("(the targets are for large histories: here 118 KiB of "
                "dictionaries weigh on a\nsmall store, and reads are too "
                "short to time well; see BENCHMARKS.md)")
        _status("\nwirezstd and bundlegen: bundles, clones by a stock hg over "
                "HTTP on 127.0.0.1,\nand bytes on the wire, core beside "
                "ours (zstd-max at level %d here, %d in production):"
                % (DEMO_BUNDLE_LEVEL, wirebench.MAX_LEVEL))
        wire = os.path.join(scratch, "wirebench")
        os.mkdir(wire)
        results, ratios = wirebench.run(repo, wire, DEMO_BUNDLE_LEVEL)
        _status(wirebench.format_report(repo, results, ratios))
        _status("(the targets are for large histories, where long-distance "
                "matching finds\nrepeats that a small one does not have; "
                "see BENCHMARKS.md)")
        if keep:
            _status("\nkept: %s" % scratch)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0
