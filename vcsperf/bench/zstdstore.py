"""Store benchmark: core Mercurial's zlib and zstd revlogs beside zstdstore
(zstd with trained dictionaries), on copies of one repository, in one run.

    vcsperf bench zstdstore /path/to/repo [--json out.json]

Each engine gets a hardlinked clone converted with ``hg debugupgraderepo``
(the same deltas, recompressed); zstdstore's copy is converted in one
pass: ``hg zstd-train`` on the clone as it is, then the upgrade writes
every chunk with the dictionaries, or, with ``--conversion in-place``,
``hg zstd-recompress --convert`` rewrites each revlog's chunks where they
are (the path for stores too large for the upgrade's memory; the store's
own deltas are kept).  Measured per engine: the time and peak
memory of each conversion step, store bytes per revlog class (with the
dictionaries), the read throughput of every chunk through the revlog's
batch chunk read (``chunkread``, an hg extension), and the wall time of
end-to-end commands (``COMMANDS``); reads and commands run in turns (zlib,
zstd, zstd-dict, zlib...) so that a machine whose speed drifts shifts all
three alike.
Store bytes are ``harness.measure``'s, which ``vcsperf check`` takes too.

At Firefox's size (463,000 revlog files, a 4.8 GB checkout) a whole run
takes hours, so parts of it can be chosen: ``--engines zstd,zstd-dict``
leaves zlib out, ``--commands "update null->tip,status"`` runs only those
end-to-end commands, ``--repeat 0`` skips the chunk reads, and
``--reuse`` measures the copies a run left in ``--workdir``.  Each timed
run is also printed as it ends, so a run stopped midway keeps what it
measured.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from vcsperf.bench import benchcli, chunkread, hgchunks, quietdisk
from vcsperf.core.errors import Abort
from vcsperf.harness import servers, tools
from vcsperf.harness.measure import CLASSES, store_bytes

ENGINES = ("zlib", "zstd", "zstd-dict")
TARGETS = (
    ("changelog bytes vs core zstd", "changelog_bytes", "<=", 0.75),
    ("store bytes vs core zstd", "total_bytes", "<=", 0.92),
    ("changelog read speed vs core zstd", "changelog_speed", ">=", 2.5),
    ("changelog read speed vs zlib", "changelog_speed_zlib", ">=", 3.5),
    ("changelog read speed vs zlib (5x)", "changelog_speed_zlib", ">=", 5.0),
    ("manifest read speed vs core zstd", "manifest_speed", ">=", 1.0),
    ("filelog read speed vs core zstd", "filelog_speed", ">=", 1.0),
    ("hg log time vs core zstd", "log_seconds", "<=", 1.0),
)


def timed(argv, env, cwd=None):
    """Run ``argv`` (its output discarded); returns its wall seconds and
    the peak resident memory of the process in MiB.  Raises
    ``CommandError`` when it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise tools.CommandError(proc.returncode, argv, "", stderr.decode(
            "utf-8", "replace"))
    return seconds, usage.ru_maxrss / 1024


#: How zstdstore's copy is converted: core's upgrade, or in place.
CONVERSIONS = ("upgrade", "in-place")


def prepare(source, dest, engine, env, conversion="upgrade"):
    """Make ``dest`` a copy of ``source`` stored with ``engine`` (for
    zstd-dict, by ``conversion``); returns ``{step: {"seconds",
    "peak_mib"}}``."""
    hg = tools.executable("hg")
    steps = {}
    steps["clone"] = timed([hg, "clone", "-q", "-U", source, dest], env)
    if engine == "zstd-dict":
        # Trained on the store as it is: one rewrite converts.
        steps["train"] = timed([hg, "zstd-train"], env, cwd=dest)
    if engine == "zstd-dict" and conversion == "in-place":
        steps["convert"] = timed([hg, "zstd-recompress", "--convert", "-q"],
                                 env, cwd=dest)
    else:
        steps["upgrade"] = timed([hg, "debugupgraderepo", "--run",
                                  "--no-backup", "-q", "--config",
                                  "format.revlog-compression=%s" % engine],
                                 env, cwd=dest)
    return {step: {"seconds": seconds, "peak_mib": peak}
            for step, (seconds, peak) in steps.items()}


def most_revised_file(repo):
    """The file of the tip manifest with the most revisions, and how many
    files the tip has."""
    hgrepo = hgchunks.open_repo(repo)
    files = hgrepo[b"tip"].manifest().keys()
    return max(files, key=lambda f: len(hgrepo.file(f))).decode(
        "utf-8", "surrogateescape"), len(files)


_TO_NULL = ["update", "-q", "-r", "null"]
_TO_TIP = ["update", "-q", "-r", "tip"]

#: The end-to-end commands: ``(name, hg arguments, setup, teardown)``,
#: where setup and teardown (arguments run before and after each timed
#: run, untimed) may be None.  FILE stands for the most revised file, URL
#: for ``hg serve``'s.  Every working copy goes back to null after its
#: command, so that a run at Firefox scale (4.8 GB a checkout) holds one
#: checkout at a time, not one per engine.
COMMANDS = (
    ("log desc", ["log", "-T", "{desc}\n"], None, None),
    ("log -p 1000", ["log", "-p", "-l", "1000"], None, None),
    ("annotate", ["annotate", "-r", "tip", "FILE"], None, None),
    ("update null->tip", _TO_TIP, _TO_NULL, _TO_NULL),
    ("status", ["status"], _TO_TIP, _TO_NULL),
    ("verify", ["verify", "-q"], None, None),
    ("clone --stream", ["clone", "-q", "-U", "--stream", "URL", "DEST"],
     None, None),
)


def end_to_end(copies, envs, rounds, commands=COMMANDS):
    """``{command: {engine: [seconds, ...]}}`` of ``commands``, each run
    ``rounds`` times for every engine in turns, the order reversed every
    other round; before each timed run the disk settles (``quietdisk``)
    after what the last one deleted: at Firefox scale a stream clone
    timed right after another's 463,000 files were deleted took 136 to
    199 s, otherwise 67 to 84 s, and the engine timed second always
    came after the first's deletions."""
    hg = tools.executable("hg")
    target, tip_files = most_revised_file(copies["zstd"])
    times = {name: {engine: [] for engine in copies}
             for name, _, _, _ in commands}
    served = {}
    try:
        # only clone --stream needs a server
        if any("URL" in args for _, args, _, _ in commands):
            for engine, repo in copies.items():
                served[engine] = servers.HgServer(envs[engine], repo)
        urls = {engine: server.url for engine, server in served.items()}
        deleted = 0
        for name, args, setup, teardown in commands:
            for round_number in range(rounds):
                order = list(copies.items())
                if round_number % 2:
                    order.reverse()
                for engine, repo in order:
                    dest = repo + ".clone"
                    deleted += quietdisk.remove_tree(dest)
                    argv = [hg] + [
                        {"FILE": target, "URL": urls.get(engine),
                         "DEST": dest}.get(a, a) for a in args]
                    if setup:
                        tools.hg(setup, envs[engine], cwd=repo)
                    quietdisk.settle(
                        repo if deleted >= quietdisk.BIG_DELETE else None)
                    deleted = 0
                    seconds, _ = timed(argv, envs[engine], cwd=repo)
                    times[name][engine].append(seconds)
                    print("(%s, %s: %.2f s)" % (name, engine, seconds),
                          file=sys.stderr, flush=True)
                    if teardown:
                        tools.hg(teardown, envs[engine], cwd=repo)
                        if teardown == _TO_NULL:
                            deleted += tip_files
                    deleted += quietdisk.remove_tree(dest)
    finally:
        for server in served.values():
            server.stop()
    return {"file": target, "times": times}


def read_all(copies, envs, repeat):
    """``{engine: chunkread figures}``, the best of ``repeat`` runs of
    each class; the engines take turns, run by run."""
    reads = {}
    for _ in range(repeat):
        for engine, repo in copies.items():
            figures = json.loads(tools.hg(
                ["--config", "extensions.chunkread=%s" % chunkread.__file__,
                 "bench-chunkread", "--repeat", 1], envs[engine], cwd=repo))
            best = reads.setdefault(engine, figures)
            for name, read in figures.items():
                if read["seconds"] < best[name]["seconds"]:
                    best[name] = read
    return reads


def paired_ratio(commands, name, engine, base):
    """The median, over rounds, of one engine's time over another's."""
    times = commands["times"][name]
    return statistics.median(a / b for a, b in zip(times[engine],
                                                    times[base]))


def ratios(results, commands):
    """The ratios of ``TARGETS`` that the run measured: read speeds need
    the chunk reads, ``log_seconds`` the ``log desc`` command, the zlib
    ratio the zlib copy."""
    ours, zstd = results["zstd-dict"], results["zstd"]
    found = {
        "changelog_bytes": ours["store"]["changelog"]
        / zstd["store"]["changelog"],
        "total_bytes": ours["store"]["total"] / zstd["store"]["total"],
    }

    def speed(r, name):
        read = r["reads"][name]
        return read["bytes"] / read["seconds"]
    if ours.get("reads") and zstd.get("reads"):
        found.update(
            changelog_speed=speed(ours, "changelog")
            / speed(zstd, "changelog"),
            manifest_speed=speed(ours, "manifest") / speed(zstd, "manifest"),
            filelog_speed=speed(ours, "filelog") / speed(zstd, "filelog"))
        if results.get("zlib", {}).get("reads"):
            found["changelog_speed_zlib"] = speed(ours, "changelog") / speed(
                results["zlib"], "changelog")
    if "log desc" in commands["times"]:
        found["log_seconds"] = paired_ratio(commands, "log desc",
                                            "zstd-dict", "zstd")
    return found


def format_report(source, results, table_ratios):
    """The figures as tables, core Mercurial's engines first, then the
    ratios against the targets the run measured."""
    engines = results["engines"]
    commands = results["commands"]
    measured = [e for e in ENGINES if e in engines]
    lines = ["repository: %s" % source]
    lines.append("%-10s %10s %10s %10s %8s %10s | %9s %9s %9s"
                 % ("engine", "changelog", "manifest", "filelogs", "dicts",
                    "total KiB", "cl MB/s", "mf MB/s", "fl MB/s"))
    for engine in measured:
        r = engines[engine]
        s = r["store"]
        speeds = ["%9.0f" % (r["reads"][c]["bytes"] / r["reads"][c]["seconds"]
                             / 1e6) if r.get("reads") else "%9s" % "-"
                  for c in CLASSES]
        lines.append("%-10s %10.0f %10.0f %10.0f %8.0f %10.0f | %s"
                     % (engine, s["changelog"] / 1024, s["manifest"] / 1024,
                        s["filelog"] / 1024, s["dictionaries"] / 1024,
                        s["total"] / 1024, " ".join(speeds)))
    lines.append("")
    lines.append("conversion (seconds, peak MiB)")
    for engine in measured:
        steps = engines[engine]["prepare"]
        lines.append("%-10s %s" % (engine, "  ".join(
            "%s %.1f s %.0f MiB" % (step, f["seconds"], f["peak_mib"])
            for step, f in steps.items())))
    lines.append("")
    lines.append("end-to-end (median seconds; ratios are medians of paired "
                 "runs)  annotate: %s" % commands["file"])
    lines.append("%-18s %s | %9s %9s" % (
        "command", " ".join("%9s" % e for e in measured), "/zstd", "/zlib"))
    for name, times in commands["times"].items():
        lines.append("%-18s %s | %9.3f %9s" % (
            name, " ".join("%9.2f" % statistics.median(times[e])
                           for e in measured),
            paired_ratio(commands, name, "zstd-dict", "zstd"),
            "%9.3f" % paired_ratio(commands, name, "zstd-dict", "zlib")
            if "zlib" in times else "-"))
    lines.append("")
    lines += benchcli.target_lines(
        [t for t in TARGETS if t[1] in table_ratios], table_ratios, width=36)
    return "\n".join(lines)


def _chosen(text, known, what):
    """The comma-separated names of ``text`` (None: all of ``known``),
    each one of ``known``; ``Abort`` on any other."""
    if text is None:
        return list(known)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise Abort("unknown %s: %s" % (what, ", ".join(unknown) or "none"),
                    hint="choose among: %s" % ", ".join(known))
    return names


def run(source, workdir, repeat=5, rounds=3, reuse=False, engines=None,
        commands=None, conversion="upgrade"):
    """Prepare one copy of ``source`` per engine under ``workdir`` (or, with
    ``reuse``, take those a previous run left there) and measure each;
    returns ``(results, ratios)``."""
    chosen = _chosen(engines, ENGINES, "engine")
    if conversion not in CONVERSIONS:
        raise Abort("unknown conversion: %s" % conversion,
                    hint="choose among: %s" % ", ".join(CONVERSIONS))
    if not {"zstd", "zstd-dict"} <= set(chosen):
        raise Abort("--engines must name zstd and zstd-dict",
                    hint="the ratios are zstd-dict's against core zstd")
    names = _chosen(commands, [c[0] for c in COMMANDS], "command")
    hgrc = os.path.join(workdir, "hgrc")
    with open(hgrc, "w") as fh:
        fh.write("[extensions]\nzstdstore =\n")
    ours = tools.isolated_env(workdir, hgrc)
    # Core's engines are measured with no extension loaded at all.
    core = tools.isolated_env(workdir)
    envs = {engine: ours if engine == "zstd-dict" else core
            for engine in chosen}
    copies = {engine: os.path.join(workdir, engine) for engine in ENGINES
              if engine in chosen}
    measured = {}
    for engine, dest in copies.items():
        steps_file = dest + ".prepare.json"
        if reuse and os.path.exists(steps_file):
            with open(steps_file) as fh:
                steps = json.load(fh)
        else:
            steps = prepare(os.path.abspath(source), dest, engine,
                            envs[engine], conversion)
            with open(steps_file, "w") as fh:
                json.dump(steps, fh)
        measured[engine] = {"prepare": steps, "store": store_bytes(dest)}
    for engine, reads in read_all(copies, envs, repeat).items():
        measured[engine]["reads"] = reads
    timed_commands = end_to_end(copies, envs, rounds, [
        c for c in COMMANDS if c[0] in names])
    results = {"engines": measured, "commands": timed_commands}
    return results, ratios(measured, timed_commands)


def main(argv=None):
    return benchcli.main(sys.modules[__name__], [
        ("repeat", dict(type=int, default=5,
                        help="read runs per class (best is kept; 0 skips "
                              "the reads)")),
        ("rounds", dict(type=int, default=3,
                        help="runs of each end-to-end command per engine")),
        ("reuse", dict(action="store_true",
                       help="measure the copies a previous run left in "
                            "--workdir instead of preparing them again")),
        ("engines", dict(help="comma-separated engines to prepare and "
                              "measure, zstd and zstd-dict among them "
                              "(default: %s)" % ",".join(ENGINES))),
        ("commands", dict(help="comma-separated end-to-end commands to "
                               "time (default: all of %s)"
                               % ", ".join(c[0] for c in COMMANDS))),
        ("conversion", dict(default="upgrade",
                            help="how zstd-dict's copy is converted: "
                                 "upgrade (hg debugupgraderepo) or "
                                 "in-place (hg zstd-recompress --convert, "
                                 "for stores too large for the upgrade's "
                                 "memory)")),
    ], argv)
