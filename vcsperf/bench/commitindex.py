"""Commit-index benchmark: lookups by commit ID, review and bug from the
index beside reading every description, in one run.

    vcsperf bench commitindex HG_REPO... [--git GIT_REPO]... [--runs 5]
        [--new 100]

For each Mercurial repository (copied first; the source is not written):

- the keys it holds (commit IDs, reviews, bugs) and the time ``hg log -T
  '{desc}'`` takes to read every description (what any scan pays);
- one lookup by commit ID, review and bug in a fresh process (``hg log -r
  'review(D...)' -T '{node}'``): with the index, and in a copy without
  one (the revsets' scan, today's ``commitid()``), beside ``hg log -r tip``;
- 1,000 lookups in one process (``hg commitid-lookup`` with 1,000 keys,
  less the same command with one key), the scan's per key extrapolated;
- building the index from nothing (``hg debugupdatecaches``; hg's
  ``--debug`` line gives the CPU time it spent, and how much of it went
  on reading the descriptions), beside ``hg log -T '{desc}'`` less its
  start-up;
- ``hg commit`` and a pull of 100 changesets, with ``commitid.index`` off
  and on, and the CPU time of the update itself (``--debug``);
- the index's bytes per changeset and per key.

For each Git repository (mirrored first, its ref then set ``--new``
commits back): the first ``gitbridge commitid-lookup`` (which builds the
index), the lookup after a ``git fetch`` of the ``--new`` commits (which
brings the index up to date), one lookup by commit ID, review and bug
beside ``git log --all -F --grep``, and 1,000 lookups in one process.

The peak resident memory of the build (``hg debugupdatecaches``, the
first Git lookup) is the largest of its runs, from ``wait4``.  Commands
alternate, run by run; medians of CPU time (user + system, the
command's and its children's): the machine may be shared.  All six
extensions are enabled, as users run them.

At a million changesets, the histories of ``vcsperf.harness.longhistory``
(real messages with Mozilla's trailers), a scan takes a minute or more
per lookup, so one run of each command::

    python -m vcsperf.harness.longhistory --dir /work/data/long
    vcsperf bench commitindex --runs 1 /work/data/long/long-hg \
        --git /work/data/long/long.git
"""

import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from vcsperf.bench import benchcli
from vcsperf.bench.commitid import measured
from vcsperf.core.commitid import message_keys
from vcsperf.core.commitkeys import BUG, ID, REVIEW
from vcsperf.core.process import CommandError
from vcsperf.harness import tools

SUITE = ("zstdstore", "wirezstd", "bundlegen", "sharepool", "commitid",
         "pastbytes")
INDEX_OFF = ["--config", "commitid.index=no"]


def timed(args, env, cwd=None):
    """CPU seconds (user + system) of a command: on a shared machine its
    wall-clock time swings by more than the differences measured."""
    return measured(args, env, cwd)[1]


_OWN = re.compile(r"^commitid: .* in ([0-9.]+) ms of CPU(?:, ([0-9.]+) of "
                  r"them reading descriptions)?$", re.M)


#: Runs ``sys.argv[1:]`` and writes its peak memory on stderr.  Linux
#: hands the memory of a process that forks and execs to the child's
#: peak: this small process is the one that forks, not the benchmark,
#: which holds every description read.
_PEAK = """import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
sys.stderr.write("peak %d\\n" % usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss(args, env, cwd=None):
    """The peak resident memory of a command, in bytes (that of the
    largest of its processes, as the kernel counts it for ``wait4``),
    and its stderr."""
    process = subprocess.run([sys.executable, "-c", _PEAK, *args], env=env,
                             cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    if process.returncode:
        raise CommandError(process.returncode, args, "", process.stderr)
    peak = int(re.findall(r"^peak (\d+)$", process.stderr, re.M)[-1])
    return peak * 1024, process.stderr


#: Runs a Python script (``sys.argv[1]``, with the arguments after it)
#: and writes the peak memory of this process alone on stderr: that of
#: ``gitbridge``, apart from the git it runs.
_OWN_PEAK = """import resource, runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    sys.stderr.write("own peak %d\\n" % resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss)
"""


def own_ms(args, env, cwd, runs=1, before=None, reading=False):
    """The median CPU milliseconds that hg says (``--debug``) it spent on
    the index in ``args``: its update, or its lookups; with ``reading``,
    the median of the milliseconds an update spent reading descriptions
    too."""
    values = []
    for _ in range(runs):
        if before:
            before("index on")
        out = tools.run([*args, "--debug"], env, cwd=cwd)
        values.append([float(v or 0) for v in _OWN.findall(out)[-1]])
    medians = [statistics.median(column) for column in zip(*values)]
    return medians if reading else medians[0]


def alternating(commands, runs, before=None):
    """{name: median CPU seconds} of ``commands`` ({name: (args, env,
    cwd)}), run in turn ``runs`` times; ``before(name)`` runs untimed
    first."""
    times = collections.defaultdict(list)
    for _ in range(runs):
        for name, (args, env, cwd) in commands.items():
            if before:
                before(name)
            times[name].append(timed(args, env, cwd))
    return {name: statistics.median(values) for name, values in times.items()}


def repo_keys(texts):
    """{kind: [key, ...]} in history order, and the number of keys."""
    keys = collections.defaultdict(list)
    for text in texts:
        for kind, key in sorted(message_keys(text)):
            keys[kind].append(key)
    return keys, sum(len(v) for v in keys.values())


def typed(kind, key):
    return "%s:%s" % (kind, key)


def sample_keys(keys, count):
    """``count`` keys spread over history, the kinds taking turns."""
    spread = {kind: values[::max(1, len(values) * len(keys) // count)]
              for kind, values in keys.items() if values}
    mixed = [typed(kind, key) for group in zip(*spread.values())
             for kind, key in zip(spread, group)]
    return (mixed * (count // max(1, len(mixed)) + 1))[:count]


REVSETS = {ID: "commitid(%s)", REVIEW: "review(%s)", BUG: "bug(%s)"}


def index_files(repo):
    cache = os.path.join(repo, ".hg", "cache")
    return [os.path.join(cache, name) for name in os.listdir(cache)
            if name.startswith("commitindex")]


def remove_index(repo):
    for path in index_files(repo):
        os.unlink(path)


def bench_hg(source, work, env, runs, new=100):
    hg = tools.executable("hg")
    ours, scan = os.path.join(work, "ours"), os.path.join(work, "scan")
    for copy in (ours, scan):
        tools.run([hg, *INDEX_OFF, "clone", "-q", "-U", source, copy], env)
        tools.run([hg, *INDEX_OFF, "debugupdatecaches"], env, cwd=copy)
    count = int(tools.run([hg, "log", "-r", "tip", "-T", "{rev}"], env,
                          cwd=ours)) + 1
    read_all = timed([hg, "log", "-T", "{desc}"], env, scan)
    out = tools.run([hg, "log", "-T", "{desc}\\0"], env, cwd=scan)
    keys, key_count = repo_keys(out.split("\0"))
    results = {"changesets": count, "read descriptions": read_all,
               "keys": {kind: len(v) for kind, v in keys.items()},
               "key count": key_count}

    # Build from nothing (the descriptions read in hg, as a scan does),
    # beside hg log reading them less its start-up.
    results["read less start"] = read_all - timed(
        [hg, "log", "-r", "tip", "-T", "{desc}"], env, scan)
    results["build"], results["build reading"] = own_ms(
        [hg, "debugupdatecaches"], env, ours, runs,
        before=lambda name: remove_index(ours), reading=True)
    remove_index(ours)
    results["build peak"] = peak_rss([hg, "debugupdatecaches"], env,
                                     ours)[0]
    size = sum(os.path.getsize(p) for p in index_files(ours))
    results["bytes"] = size

    # One lookup per kind in a fresh process.
    cold = {"hg log -r tip": ([hg, "log", "-r", "tip", "-T", "{node}"],
                              env, ours)}
    for kind in (ID, REVIEW, BUG):
        key = keys[kind][len(keys[kind]) // 2] if keys[kind] else \
            {ID: "absentId000", REVIEW: "D999999999", BUG: "999999999"}[kind]
        revset = REVSETS[kind] % key
        for name, repo in (("scan", scan), ("index", ours)):
            cold["%s %s" % (kind, name)] = (
                [hg, "log", "-r", revset, "-T", "{node}"], env, repo)
        if kind == REVIEW:
            # What a user of core hg types: a substring of descriptions.
            cold["desc"] = ([hg, "log", "-r", "desc(%r)" % key, "-T",
                             "{node}"], env, scan)
    results["cold"] = alternating(cold, runs)

    # 1,000 lookups in one process.
    sample = sample_keys(keys, 1000)
    lookups = alternating({
        "index 1": ([hg, "commitid-lookup", sample[0]], env, ours),
        "index 1000": ([hg, "commitid-lookup", *sample], env, ours),
    }, runs)
    # The scan's: three revsets in one expression, each reading every
    # description (as today's commitid() does), less no revset at all.
    few = [REVSETS[kind] % key for kind, key in
           (entry.split(":", 1) for entry in sample[:3])]
    scan_few = alternating({
        "scan 0": ([hg, "log", "-r", "null", "-T", "{node}"], env, scan),
        "scan 3": ([hg, "log", "-r", " or ".join(few), "-T", "{node}"], env,
                   scan),
    }, max(1, runs // 2))
    own = {count: own_ms([hg, "commitid-lookup", *sample[:count]], env, ours,
                         runs) for count in (1, 1000)}
    results["in process"] = {
        "index per key": (own[1000] - own[1]) / 999 / 1000,
        "index 1000": own[1000] / 1000,
        "process 1000": lookups["index 1000"],
        "scan per key": (scan_few["scan 3"] - scan_few["scan 0"]) / 3}

    # hg commit and a pull of 100 changesets, index off and on.
    tools.run([hg, "update", "-q", "tip"], env, cwd=ours)
    tracked = tools.run([hg, "files", "-r", "."], env, cwd=ours).split()[0]
    counter = [0]

    def change(name):
        counter[0] += 1
        with open(os.path.join(ours, tracked), "a") as fh:
            fh.write("bench %d\n" % counter[0])

    results["commit"] = alternating({
        "index off": ([hg, *INDEX_OFF, "commit", "-q", "-m", "bench"], env,
                      ours),
        "index on": ([hg, "commit", "-q", "-m", "bench"], env, ours)},
        runs, before=change)
    results["commit"]["update"] = own_ms(
        [hg, "commit", "-q", "-m", "bench"], env, ours, runs,
        before=change) / 1000
    tools.run([hg, "strip", "-q", "--no-backup", "-r", "%d:" % count], env,
              cwd=ours)
    cut = "%d:" % max(1, count - new)

    def strip(name):
        off = INDEX_OFF if name == "index off" else []
        tools.run([hg, *off, "strip", "-q", "--no-backup", "-r", cut], env,
                  cwd=ours)

    results["new"] = min(new, count - 1)
    results["pull"] = alternating({
        "index off": ([hg, *INDEX_OFF, "pull", "-q", source], env, ours),
        "index on": ([hg, "pull", "-q", source], env, ours)},
        max(1, runs // 2), before=strip)
    results["pull"]["update"] = own_ms(
        [hg, "pull", "-q", source], env, ours, max(1, runs // 2),
        before=strip) / 1000
    return results


def bench_git(source, work, env, runs, new=100):
    git = tools.executable("git")
    gitbridge = tools.executable("gitbridge")
    mirror = os.path.join(work, "mirror.git")
    tools.run([git, "clone", "-q", "--mirror", source, mirror], env)
    read_all = timed([git, "log", "--all", "-z", "--format=%B"], env,
                     mirror)
    out = tools.run([git, "log", "--all", "-z", "--format=%B"], env,
                    cwd=mirror)
    keys, key_count = repo_keys(out.split("\0"))
    commits = int(tools.run([git, "rev-list", "--all", "--count"], env,
                            cwd=mirror))
    lookup = [gitbridge, "commitid-lookup", "-C", mirror]
    picked = {kind: typed(kind, keys[kind][len(keys[kind]) // 2])
              for kind in (ID, REVIEW, BUG) if keys[kind]}
    key = picked.get(REVIEW) or next(iter(picked.values()))
    results = {"commits": commits, "read messages": read_all,
               "key count": key_count}

    # The first lookup builds the index of every ref but the newest
    # ``new`` commits of each branch; a fetch brings them.
    new = min(new, commits - 1)
    branches = tools.run([git, "for-each-ref", "--format=%(refname)",
                          "refs/heads/"], env, cwd=mirror).split()
    tips = {ref: tools.run([git, "rev-parse", ref], env, cwd=mirror).strip()
            for ref in branches}

    def behind():
        for ref in branches:
            tools.run([git, "update-ref", ref, "%s~%d" % (tips[ref], new)],
                      env, cwd=mirror)

    def index_names():
        return [name for name in os.listdir(mirror)
                if name.startswith("commitindex")]

    behind()
    results["build"] = timed([*lookup, key], env)
    saved = os.path.join(work, "index-behind")
    os.makedirs(saved)
    for name in index_names():
        shutil.copy2(os.path.join(mirror, name), saved)

    def restore(name):
        for stale in index_names():
            os.unlink(os.path.join(mirror, stale))
        for file in os.listdir(saved):
            shutil.copy2(os.path.join(saved, file), mirror)
        behind()
        if name == "after fetch":
            tools.run([git, "fetch", "-q", source,
                       "+refs/heads/*:refs/heads/*"], env, cwd=mirror)

    results["after fetch"] = alternating({
        "after fetch": ([*lookup, key], env, mirror)}, runs,
        before=restore)["after fetch"]
    restore("behind")
    tree, stderr = peak_rss([sys.executable, "-c", _OWN_PEAK, *lookup,
                             "--rebuild", key], env, mirror)
    results["build peak"] = tree
    results["build own peak"] = int(
        re.findall(r"^own peak (\d+)$", stderr, re.M)[-1]) * 1024
    tools.run([git, "fetch", "-q", source, "+refs/heads/*:refs/heads/*"],
              env, cwd=mirror)
    tools.run([*lookup, key], env)

    cold = {"git rev-parse HEAD": ([git, "rev-parse", "HEAD"], env, mirror)}
    for kind, typed_key in picked.items():
        cold["%s grep" % kind] = ([git, "log", "--all", "-F", "--grep",
                                   typed_key.split(":", 1)[1],
                                   "--format=%H"], env, mirror)
        cold["%s index" % kind] = ([*lookup, typed_key], env, mirror)
    results["cold"] = alternating(cold, runs)
    results["kinds"] = list(picked)
    sample = sample_keys(keys, 1000)
    results["in process"] = alternating({
        "index 1": ([*lookup, sample[0]], env, mirror),
        "index 1000": ([*lookup, *sample], env, mirror)}, runs)
    results["new"] = new
    results["bytes"] = sum(os.path.getsize(os.path.join(mirror, name))
                           for name in index_names())
    return results


def ms(seconds):
    return "%.1f ms" % (seconds * 1000)


def report_hg(repo, r):
    cold = r["cold"]
    lines = ["%s: %d changesets, keys %s (%d); reading every description "
             "(hg log -T '{desc}'): %s" % (
                 repo, r["changesets"], dict(r["keys"]), r["key count"],
                 ms(r["read descriptions"])),
             "| operation (CPU time) | scan (no index) | index |",
             "|---|---|---|"]
    for kind in (ID, REVIEW, BUG):
        lines.append("| one lookup by %s, fresh process | %s | %s |" % (
            kind, ms(cold["%s scan" % kind]), ms(cold["%s index" % kind])))
    lines.append("| one lookup by review with core hg (hg log -r "
                 "'desc(...)') | %s | |" % ms(cold["desc"]))
    lines.append("| hg log -r tip (the yardstick) | %s | |"
                 % ms(cold["hg log -r tip"]))
    inproc = r["in process"]
    lines.append("| 1,000 lookups in one process | %.0f s (%s a key, "
                 "extrapolated) | %s in hg, %s the whole command (%.1f µs "
                 "a key) |" % (
                     inproc["scan per key"] * 1000,
                     ms(inproc["scan per key"]), ms(inproc["index 1000"]),
                     ms(inproc["process 1000"]),
                     inproc["index per key"] * 1e6))
    lines.append("| build from nothing, descriptions read included | %s "
                 "(hg log -T '{desc}' less its start-up) | %s |" % (
                     ms(r["read less start"]), ms(r["build"] / 1000)))
    beyond = (r["build"] - r["build reading"]) / 1000
    lines.append("| build beyond reading the descriptions (%s of it) | | "
                 "%s (%.2f s per 100,000 changesets) |" % (
                     ms(r["build reading"] / 1000), ms(beyond),
                     beyond * 100000 / r["changesets"]))
    for name, label in (("commit", "hg commit"),
                        ("pull", "hg pull of %d changesets" % r["new"])):
        row = r[name]
        lines.append("| %s | %s (index off) | %s (index on); the update "
                     "%s, %.2f%% |" % (
                         label, ms(row["index off"]), ms(row["index on"]),
                         ms(row["update"]),
                         100 * row["update"] / row["index off"]))
    lines.append("| index bytes | | %d (%.1f a changeset, %.1f a key) |" % (
        r["bytes"], r["bytes"] / r["changesets"],
        r["bytes"] / max(1, r["key count"])))
    lines.append("| peak memory of the build (hg debugupdatecaches) | | "
                 "%s |" % mib(r["build peak"]))
    return "\n".join(lines)


def mib(size):
    return "%.0f MiB" % (size / 2 ** 20)


def report_git(repo, r):
    cold = r["cold"]
    lines = [
        "%s: %d commits, %d keys; git log --all -z --format=%%B: %s" % (
            repo, r["commits"], r["key count"], ms(r["read messages"])),
        "| operation (CPU time) | git | gitbridge |", "|---|---|---|"]
    for kind in r["kinds"]:
        lines.append("| one lookup by %s, fresh process | %s (git log --all "
                     "-F --grep) | %s |" % (kind, ms(cold["%s grep" % kind]),
                                            ms(cold["%s index" % kind])))
    inproc = r["in process"]
    lines += [
        "| git rev-parse HEAD (the yardstick) | %s | |"
        % ms(cold["git rev-parse HEAD"]),
        "| 1,000 lookups in one process | %.0f s (one git log --grep a "
        "key, extrapolated) | %s (%.1f µs a key beyond one lookup) |" % (
            (1000 * statistics.median(
                [cold["%s grep" % kind] for kind in r["kinds"]])),
            ms(inproc["index 1000"]),
            (inproc["index 1000"] - inproc["index 1"]) / 999 * 1e6),
        "| first lookup (builds the index of all but %d commits) | | %s |"
        % (r["new"], ms(r["build"])),
        "| lookup after a fetch of %d commits (updates the index) | | %s |"
        % (r["new"], ms(r["after fetch"])),
        "| index bytes | | %d (%.1f a commit) |" % (
            r["bytes"], r["bytes"] / r["commits"]),
        "| peak memory of the build (commitid-lookup --rebuild) | | %s "
        "in its own process, %s in its largest (git log, which keeps "
        "every commit it walks) |" % (mib(r["build own peak"]),
                                      mib(r["build peak"]))]
    return "\n".join(lines)


def main(argv=None):
    parser = benchcli.command_line(sys.modules[__name__])
    parser.add_argument("hg_repos", nargs="*", metavar="HG_REPO")
    parser.add_argument("--git", action="append", default=[],
                        metavar="GIT_REPO")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--new", type=int, default=100,
                        help="how many changesets or commits the pull or "
                             "fetch brings (default 100)")
    args = parser.parse_args(argv)
    # Absolute: pulls and fetches run inside the copies.
    args.hg_repos = [os.path.abspath(path) for path in args.hg_repos]
    args.git = [os.path.abspath(path) for path in args.git]
    for source in args.hg_repos + args.git:
        work = tempfile.mkdtemp(prefix="vcsperf-bench-commitindex-")
        try:
            hgrc = os.path.join(work, "hgrc")
            with open(hgrc, "w") as fh:
                fh.write("[extensions]\n%sstrip =\n" % "".join(
                    "%s =\n" % name for name in SUITE))
            env = tools.isolated_env(work, hgrc)
            if source in args.hg_repos:
                print(report_hg(source, bench_hg(source, work, env,
                                                 args.runs, args.new)))
            else:
                print(report_git(source, bench_git(source, work, env,
                                                   args.runs, args.new)))
            print()
            sys.stdout.flush()
        finally:
            shutil.rmtree(work, ignore_errors=True)
