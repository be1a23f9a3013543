"""A fleet of concurrent Git fetches of the same new commits, served over
smart HTTP with and without the gitbridge pack cache as Git's
packObjectsHook: server CPU seconds and bytes per client.

    vcsperf bench packcache GIT_REPO [--clients 32] [--behind 5]
        [--loose] [--json out.json]

A server repository gets the history up to ``--behind`` commits back
(copied), then a push of the rest; ``--clients`` clients at that commit
(sharing the objects of a copy made before the push) fetch the same
commits at once, over smart HTTP
(``vcsperf.harness.servers.GitServer``: each request runs ``git
http-backend``), once with the hook in the server's global config and
once without.  The server's CPU is what every process it ran (the
backend, upload-pack, pack-objects, the hook) cost: all CPU of this
process's children less the clients' own (each client's, read when it
is reaped).  ``--loose`` unpacks the pushed objects (as a push of fewer
than ``receive.unpackLimit`` objects leaves them); otherwise the push is
kept as a pack, which pack-objects mostly copies.  Every client's branch
is checked, and the first client is checked by ``git fsck``.
"""

import os
import resource
import shutil
import subprocess
import sys
import time

from vcsperf.bench import benchcli
from vcsperf.core.errors import Abort
from vcsperf.harness import servers, tools

TARGETS = (
    ("server CPU per client, hook vs none", "cpu", "<=", 0.2),
    ("bytes per client, hook vs none", "bytes", "<=", 0.9),
)


def _cpu(usage):
    return usage.ru_utime + usage.ru_stime


def _fleet(clients, env, url):
    """Fetch in every client at once; (server CPU seconds, wall
    seconds)."""
    before = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
    start = time.perf_counter()
    procs = [subprocess.Popen(
        ["git", "-C", client, "fetch", "-q", url,
         "+refs/heads/main:refs/heads/main"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for client in clients]
    client_cpu = 0.0
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        client_cpu += _cpu(usage)
        if proc.returncode:
            raise Abort("a client's git fetch failed (exit %d)"
                        % proc.returncode)
    wall = time.perf_counter() - start
    total = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - before
    return total - client_cpu, wall


def run(repo, work, clients, behind, loose):
    if not 1 <= clients <= 512 or behind < 1:
        raise Abort("--clients must be 1 to 512 and --behind 1 or more")
    env = tools.isolated_env(work)
    root = os.path.join(work, "root")
    served = os.path.join(root, "repo.git")
    head = tools.run(["git", "-C", repo, "rev-parse", "HEAD"], env).strip()
    base = tools.run(["git", "-C", repo, "rev-parse", "HEAD~%d" % behind],
                     env).strip()

    os.makedirs(root)
    # the server holds the base commit's history only, then the push;
    # the clients share the objects of a copy made before it
    tools.run(["git", "init", "-q", "--bare", "-b", "main", served], env)
    tools.run(["git", "-C", served, "fetch", "-q", repo,
               "%s:refs/heads/main" % base], env)
    before = os.path.join(work, "before.git")
    tools.run(["git", "clone", "-q", "--bare", served, before], env)
    if loose:
        tools.run(["git", "-C", served, "config", "receive.unpackLimit",
                   "1000000000"], env)
    tools.run(["git", "-C", repo, "push", "-q", served,
               "%s:refs/heads/main" % head], env)
    results = {}
    gitbridge = tools.executable("gitbridge")
    for name in ("none", "hook"):
        with open(os.path.join(root, ".gitconfig"), "w") as fh:
            if name == "hook":
                fh.write("[uploadpack]\n\tpackObjectsHook = %s pack-cache "
                         "--dir %s\n" % (gitbridge,
                                         os.path.join(work, "cache")))
        fleet = []
        for number in range(clients):
            path = os.path.join(work, "%s-%d.git" % (name, number))
            tools.run(["git", "clone", "-q", "--bare", "--shared", before,
                       path], env)
            fleet.append(path)
        with servers.GitServer(root) as server:
            sent = server.bytes_sent
            cpu, wall = _fleet(fleet, env, server.url + "repo.git")
            sent = server.bytes_sent - sent
        for path in fleet:
            if tools.run(["git", "-C", path, "rev-parse", "main"],
                         env).strip() != head:
                raise Abort("a client did not get %s" % head)
        tools.run(["git", "-C", fleet[0], "fsck", "--no-progress"], env)
        results[name] = {"clients": clients,
                         "server_cpu_per_client": cpu / clients,
                         "bytes_per_client": sent / clients,
                         "wall_seconds": wall}
        for path in fleet:
            shutil.rmtree(path)
    ratios = {"cpu": results["hook"]["server_cpu_per_client"]
              / results["none"]["server_cpu_per_client"],
              "bytes": results["hook"]["bytes_per_client"]
              / results["none"]["bytes_per_client"]}
    return results, ratios


def format_report(repo, results, ratios):
    lines = ["%d concurrent fetches of %s" % (results["hook"]["clients"],
                                              repo),
             "%-6s %22s %18s %10s" % ("", "server CPU/client (s)",
                                      "bytes/client", "wall (s)")]
    for name in ("none", "hook"):
        row = results[name]
        lines.append("%-6s %22.4f %18d %10.2f" % (
            name, row["server_cpu_per_client"], row["bytes_per_client"],
            row["wall_seconds"]))
    lines += benchcli.target_lines(TARGETS, ratios)
    return "\n".join(lines)


def main(argv=None):
    return benchcli.main(sys.modules[__name__], (
        ("clients", {"type": int, "default": 32,
                     "help": "concurrent fetches (default 32)"}),
        ("behind", {"type": int, "default": 5,
                    "help": "commits pushed after the clients' (default 5)"}),
        ("loose", {"action": "store_true",
                   "help": "leave the pushed objects loose"}),
    ), argv, repository=benchcli.git_repository)
