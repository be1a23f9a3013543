"""Measurements the benchmarks and ``vcsperf check`` both take: a store's
bytes per revlog class, and pulls by core zstd beside wirezstd (bytes
received, server CPU)."""

import os
import re
import shutil
import time

from vcsperf.harness import servers, tools

#: The revlog classes, in the order tables show them.
CLASSES = ("changelog", "manifest", "filelog")
_RECEIVED = re.compile(r"received (\d+) bytes in responses")


def store_bytes(repo):
    """Bytes of the store of ``repo`` per revlog class, its zstdstore
    dictionaries, and their ``total``."""
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


def cpu_seconds(pid):
    """CPU time (user + system) that process ``pid`` has used so far."""
    with open("/proc/%d/stat" % pid) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid):
    """CPU time (user + system) that process ``pid`` and every process
    below it have used so far (children already reaped are in their
    parent's figure)."""
    below = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        below.setdefault(parent, []).append(int(name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        todo.extend(below.get(current, ()))
    return total


def pull(env, repo, dest, serve_args, base):
    """Bytes received and server CPU seconds for pulling ``repo`` into
    ``dest`` (a local clone of the repository ``base``, or an empty
    repo)."""
    if base:
        tools.hg(["clone", "-q", "-U", base, dest], env)
    else:
        tools.hg(["init", dest], env)
    with servers.HgServer(env, repo, *serve_args) as server:
        before = cpu_seconds(server.pid)
        start = time.perf_counter()
        out = tools.hg(["pull", "--debug", "-R", dest, server.url], env)
        seconds = time.perf_counter() - start
        cpu = cpu_seconds(server.pid) - before
    changesets = int(tools.hg(["log", "-R", dest, "-r", "tip", "-T",
                               "{rev}"], env)) + 1
    shutil.rmtree(dest, ignore_errors=True)
    received = int(_RECEIVED.search(out).group(1))
    return {"bytes": received, "server_cpu": cpu, "seconds": seconds,
            "changesets": changesets}


def measure_wire(repo, work, core, ours):
    """Pulls of the whole history and of the last 100 changesets, by core
    zstd and by wirezstd."""
    results = {}
    last100 = tools.hg(["log", "-R", repo, "-r", "first(last(all(), 101))",
                        "-T", "{node}"], core)
    # All but the last 100, made once and cloned by hardlinks for each
    # side: a hardlinked clone with the rest stripped (Mercurial breaks a
    # hardlink before it writes; a clone -r pulls, and costs what a full
    # pull does).
    older = os.path.join(work, "all-but-100")
    tools.hg(["clone", "-q", "-U", repo, older], core)
    tools.hg(["-R", older, "debugstrip", "-q", "--no-backup", "-r",
              "not ::%s" % last100], core)
    for label, base in (("full pull", None), ("pull of last 100", older)):
        for side, env, config in (("core zstd", core, ()),
                                  ("wirezstd", ours,
                                   ("--config", "extensions.wirezstd="))):
            results["%s, %s" % (label, side)] = pull(
                env, repo, os.path.join(work, "pulled"), config, base)
    return results
