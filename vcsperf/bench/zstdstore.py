"""Store benchmark: core Mercurial's zlib and zstd revlogs beside zstdstore
(zstd with trained dictionaries), on copies of one repository, in one run.

    vcsperf bench zstdstore /path/to/repo [--json out.json]

Each engine gets a hardlinked clone converted with ``hg debugupgraderepo``
(the same deltas, recompressed); zstdstore's copy is then trained and
recompressed.  Measured per engine: store bytes per revlog class (with the
dictionaries), the read throughput of every chunk through the revlog's
batch chunk read (``chunkread``, an hg extension), the wall time of
``hg log -T '{desc}'`` over the whole history, and ``hg verify``.
``store_bytes`` serves ``vcsperf check`` too.
"""

import json
import os
import sys
import time

from vcsperf.bench import benchcli, chunkread
from vcsperf.harness import tools

ENGINES = ("zlib", "zstd", "zstd-dict")
CLASSES = ("changelog", "manifest", "filelog")
TARGETS = (
    ("changelog bytes vs core zstd", "changelog_bytes", "<=", 0.75),
    ("store bytes vs core zstd", "total_bytes", "<=", 0.92),
    ("changelog read speed vs core zstd", "changelog_speed", ">=", 2.5),
    ("changelog read speed vs zlib", "changelog_speed_zlib", ">=", 3.5),
    ("hg log time vs core zstd", "log_seconds", "<=", 1.0),
)


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
    tools.hg(["clone", "-q", "-U", source, dest], env)
    tools.hg(["debugupgraderepo", "--run", "--no-backup", "-q", "--config",
              "format.revlog-compression=%s" % engine], env, cwd=dest)
    if engine == "zstd-dict":
        tools.hg(["zstd-train"], env, cwd=dest)
        tools.hg(["zstd-recompress"], env, cwd=dest)
    return time.perf_counter() - start


def measure(repo, env, repeat):
    reads = json.loads(tools.hg(["--config", "extensions.chunkread=%s"
                                 % chunkread.__file__, "bench-chunkread",
                                 "--repeat", repeat], env, cwd=repo))
    log = best_of(3, lambda: tools.hg(["log", "-T", "{desc}\n"], env,
                                      cwd=repo))
    start = time.perf_counter()
    verify = tools.completed([tools.executable("hg"), "verify", "-q"], env,
                             cwd=repo)
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


def format_report(source, results, table_ratios):
    """The figures as a table, core Mercurial's engines first, then the
    ratios against the targets."""
    lines = ["repository: %s" % source]
    lines.append("%-10s %10s %10s %10s %8s %10s | %9s %9s %9s | %7s %7s %s"
          % ("engine", "changelog", "manifest", "filelogs", "dicts",
             "total KiB", "cl MB/s", "mf MB/s", "fl MB/s", "log s",
             "verify", "ok"))
    for engine in ENGINES:
        r = results[engine]
        s = r["store"]
        speeds = [r["reads"][c]["bytes"] / r["reads"][c]["seconds"] / 1e6
                  for c in CLASSES]
        lines.append("%-10s %10.0f %10.0f %10.0f %8.0f %10.0f | %9.0f %9.0f %9.0f |"
              " %7.2f %7.2f %s"
              % (engine, s["changelog"] / 1024, s["manifest"] / 1024,
                 s["filelog"] / 1024, s["dictionaries"] / 1024,
                 s["total"] / 1024, speeds[0], speeds[1], speeds[2],
                 r["log_seconds"], r["verify_seconds"],
                 "yes" if r["verify_ok"] else "NO"))
    lines.append("")
    lines += benchcli.target_lines(TARGETS, table_ratios, width=36)
    return "\n".join(lines)


def run(source, workdir, repeat=5):
    """Prepare one copy of ``source`` per engine under ``workdir`` and
    measure each; returns ``(results, ratios)``."""
    hgrc = os.path.join(workdir, "hgrc")
    with open(hgrc, "w") as fh:
        fh.write("[extensions]\nzstdstore =\n")
    ours = tools.isolated_env(workdir, hgrc)
    # Core's engines are measured with no extension loaded at all.
    core = tools.isolated_env(workdir)
    results = {}
    for engine in ENGINES:
        dest = os.path.join(workdir, engine)
        env = ours if engine == "zstd-dict" else core
        seconds = prepare(os.path.abspath(source), dest, engine, env)
        results[engine] = measure(dest, env, repeat)
        results[engine]["prepare_seconds"] = seconds
    return results, ratios(results)


def main(argv=None):
    return benchcli.main(sys.modules[__name__], [
        ("repeat", dict(type=int, default=5,
                        help="read runs per class (best is kept)")),
    ], argv)
