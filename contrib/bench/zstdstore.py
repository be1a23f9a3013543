#!/usr/bin/env python3
"""Store benchmark: core Mercurial's zlib and zstd revlogs beside zstdstore
(zstd with trained dictionaries), on copies of one repository, in one run.

    python contrib/bench/zstdstore.py /path/to/repo [--json out.json]

Each engine gets a hardlinked clone converted with ``hg debugupgraderepo``
(the same deltas, recompressed); zstdstore's copy is then trained and
recompressed.  Reported per engine: store bytes per revlog class (with the
dictionaries), the read throughput of every chunk through the revlog's
batch chunk read (``contrib/bench/chunkread.py``), the wall time of
``hg log -T '{desc}'`` over the whole history, and ``hg verify``.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = ("zlib", "zstd", "zstd-dict")
CLASSES = ("changelog", "manifest", "filelog")
TARGETS = (
    ("changelog bytes vs core zstd", "changelog_bytes", "<=", 0.75),
    ("store bytes vs core zstd", "total_bytes", "<=", 0.92),
    ("changelog read speed vs core zstd", "changelog_speed", ">=", 2.5),
    ("changelog read speed vs zlib", "changelog_speed_zlib", ">=", 3.5),
    ("hg log time vs core zstd", "log_seconds", "<=", 1.0),
)


def hg(args, env, **kwargs):
    return subprocess.run([shutil.which("hg", path=os.path.dirname(
        sys.executable) + os.pathsep + os.environ["PATH"])] + args, env=env,
        check=True, capture_output=True, text=True, **kwargs).stdout


def store_bytes(repo):
    sizes = dict.fromkeys(CLASSES + ("dictionaries",), 0)
    store = os.path.join(repo, ".hg", "store")
    for root, _, files in os.walk(store):
        rel = os.path.relpath(root, store)
        for name in files:
            size = os.path.getsize(os.path.join(root, name))
            if rel.startswith("zstd-dicts"):
                sizes["dictionaries"] += size
            elif rel.startswith("data"):
                sizes["filelog"] += size
            elif name.startswith("00changelog"):
                sizes["changelog"] += size
            elif name.startswith("00manifest") or rel.startswith("meta"):
                sizes["manifest"] += size
    sizes["total"] = sum(sizes.values())
    return sizes


def best_of(runs, fn):
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def prepare(source, dest, engine, env):
    start = time.perf_counter()
    hg(["clone", "-q", "-U", source, dest], env)
    hg(["debugupgraderepo", "--run", "--no-backup", "-q", "--config",
        "format.revlog-compression=%s" % engine], env, cwd=dest)
    if engine == "zstd-dict":
        hg(["zstd-train"], env, cwd=dest)
        hg(["zstd-recompress"], env, cwd=dest)
    return time.perf_counter() - start


def measure(repo, env, repeat):
    reads = json.loads(hg(["--config", "extensions.chunkread=%s"
                           % os.path.join(HERE, "chunkread.py"),
                           "bench-chunkread", "--repeat", str(repeat)], env,
                          cwd=repo))
    log = best_of(3, lambda: hg(["log", "-T", "{desc}\n"], env, cwd=repo))
    start = time.perf_counter()
    verify = subprocess.run(
        [shutil.which("hg", path=os.path.dirname(sys.executable) + os.pathsep
                      + os.environ["PATH"]), "verify", "-q"],
        env=env, cwd=repo, capture_output=True, text=True)
    return {"reads": reads, "log_seconds": log,
            "verify_seconds": time.perf_counter() - start,
            "verify_ok": verify.returncode == 0, "store": store_bytes(repo)}


def ratios(results):
    ours, zstd, zlib = (results[e] for e in ("zstd-dict", "zstd", "zlib"))

    def speed(r, name):
        read = r["reads"][name]
        return read["bytes"] / read["seconds"]
    return {
        "changelog_bytes": ours["store"]["changelog"]
        / zstd["store"]["changelog"],
        "total_bytes": ours["store"]["total"] / zstd["store"]["total"],
        "changelog_speed": speed(ours, "changelog") / speed(zstd, "changelog"),
        "changelog_speed_zlib": speed(ours, "changelog")
        / speed(zlib, "changelog"),
        "log_seconds": ours["log_seconds"] / zstd["log_seconds"],
    }


def report(source, results, table_ratios):
    print("repository: %s" % source)
    print("%-10s %10s %10s %10s %8s %10s | %9s %9s %9s | %7s %7s %s"
          % ("engine", "changelog", "manifest", "filelogs", "dicts",
             "total KiB", "cl MB/s", "mf MB/s", "fl MB/s", "log s",
             "verify", "ok"))
    for engine in ENGINES:
        r = results[engine]
        s = r["store"]
        speeds = [r["reads"][c]["bytes"] / r["reads"][c]["seconds"] / 1e6
                  for c in CLASSES]
        print("%-10s %10.0f %10.0f %10.0f %8.0f %10.0f | %9.0f %9.0f %9.0f |"
              " %7.2f %7.2f %s"
              % (engine, s["changelog"] / 1024, s["manifest"] / 1024,
                 s["filelog"] / 1024, s["dictionaries"] / 1024,
                 s["total"] / 1024, speeds[0], speeds[1], speeds[2],
                 r["log_seconds"], r["verify_seconds"],
                 "yes" if r["verify_ok"] else "NO"))
    print()
    for label, key, op, target in TARGETS:
        value = table_ratios[key]
        met = value <= target if op == "<=" else value >= target
        print("%-36s %6.3f  target %s %.2f  %s"
              % (label, value, op, target, "met" if met else "MISSED"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--repeat", type=int, default=5,
                        help="read runs per class (best is kept)")
    parser.add_argument("--workdir", help="where the copies go (default: a "
                        "temporary directory, removed afterwards)")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="vcsperf-bench-")
    hgrc = os.path.join(work, "hgrc")
    with open(hgrc, "w") as fh:
        fh.write("[extensions]\nzstdstore =\n")
    env = dict(os.environ, HGRCPATH=hgrc, HGPLAIN="1")
    results = {}
    try:
        for engine in ENGINES:
            dest = os.path.join(work, engine)
            seconds = prepare(os.path.abspath(args.repo), dest, engine, env)
            results[engine] = measure(dest, env, args.repeat)
            results[engine]["prepare_seconds"] = seconds
        table_ratios = ratios(results)
        report(args.repo, results, table_ratios)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"repo": args.repo, "results": results,
                           "ratios": table_ratios}, fh, indent=2)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
