"""Commit-ID benchmark: what adding IDs costs, beside core hg and git, in
one run.

    vcsperf bench commitid HG_REPO GIT_REPO [--commits 40]
        [--bulk 1000]

1. Per commit: clones of HG_REPO and GIT_REPO (with working copies) get
   ``--commits`` commits each way, alternating: plain ``hg commit`` against
   ``hg commit`` with the commitid extension, plain ``git commit`` against
   ``git commit`` with the commit-msg hook.  Each commit changes one file.
   Medians of CPU time (user + system, of the command and its children,
   such as the hook) give the overhead; wall-clock medians are shown too.
2. Bulk: a repository with ``--bulk`` draft changesets without IDs gets
   them from ``hg commitid-add`` (with and without evolution), beside core
   hg rewriting the same changesets (an in-memory ``hg rebase``); a Git
   branch of as many commits gets them from ``gitbridge commitid-add``,
   beside core git's ``filter-branch --msg-filter cat``.
"""

import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

from vcsperf.bench import benchcli
from vcsperf.harness import tools


def timed(args, env, cwd):
    """Wall-clock seconds of a command."""
    return measured(args, env, cwd)[0]


def measured(args, env, cwd):
    """Wall-clock and CPU (user + system) seconds of a command.  On a
    shared machine wall-clock time of a 20 ms command swings by more than
    the overhead measured; CPU time holds still."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    tools.run(args, env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime
                  - before.ru_utime - before.ru_stime)


def per_commit(hg_source, git_source, work, env, count):
    hg, git = tools.executable("hg"), tools.executable("git")
    hg_repo, git_repo = os.path.join(work, "hg"), os.path.join(work, "git")
    tools.run([hg, "clone", "-q", hg_source, hg_repo], env)
    tools.run([git, "clone", "-q", git_source, git_repo], env)
    none_hooks = os.path.join(work, "no-hooks")
    os.makedirs(none_hooks)
    hook = tools.run([tools.executable("gitbridge"), "install-hook"], env,
                     cwd=git_repo).split()[-1]
    id_hooks = os.path.dirname(hook)
    variants = {
        "hg commit": lambda i: [hg, "commit", "-q", "-m", "change %d" % i],
        "hg commit + commitid": lambda i: [
            hg, "--config", "extensions.commitid=", "commit", "-q", "-m",
            "change %d" % i],
        "git commit": lambda i: [git, "-c", "core.hooksPath=" + none_hooks,
                                 "commit", "-q", "-a", "-m", "change %d" % i],
        "git commit + hook": lambda i: [
            git, "-c", "core.hooksPath=" + id_hooks, "commit", "-q", "-a",
            "-m", "change %d" % i],
    }
    times = {name: [] for name in variants}
    files = {"hg": _tracked_file(hg_repo), "git": _tracked_file(git_repo)}
    for i in range(count):
        for name, command in variants.items():
            repo = hg_repo if name.startswith("hg") else git_repo
            with open(files[name[:name.index(" ")]], "a") as fh:
                fh.write("benchmark line %d\n" % i)
            times[name].append(measured(command(i), env, repo))
    return {name: [statistics.median(t[kind] for t in runs)
                   for kind in (0, 1)]
            for name, runs in times.items()}


def _tracked_file(repo):
    # A small file near the top of the tree, as a typical change touches.
    for name in sorted(os.listdir(repo)):
        path = os.path.join(repo, name)
        if os.path.isfile(path) and not name.startswith("."):
            return path
    raise SystemExit("no file at the top of %s" % repo)


def bulk_hg(work, env, count):
    hg = tools.executable("hg")
    results = {}
    for name, config in [
            ("hg rebase (core)", ["--config", "extensions.rebase=",
                                  "--config",
                                  "rebase.experimental.inmemory=yes"]),
            ("hg commitid-add, evolution", [
                "--config", "extensions.commitid=", "--config",
                "experimental.evolution=all"]),
            ("hg commitid-add, backup bundle", [
                "--config", "extensions.commitid="])]:
        repo = os.path.join(work, "bulk-%d" % len(results))
        tools.run([hg, "init", repo], env)
        tools.run([hg, "debugbuilddag", "-q", "-n", "+1+%d" % count], env,
                  cwd=repo)
        tools.run([hg, "update", "-q", "tip"], env, cwd=repo)
        tools.run([hg, "phase", "--public", "-r", "0"], env, cwd=repo)
        if name.startswith("hg rebase"):
            # Onto a new sibling of the drafts' root.
            tools.run([hg, "update", "-q", "0"], env, cwd=repo)
            tools.run([hg, "commit", "-q", "--config",
                       "ui.allowemptycommit=yes", "-m", "new base"], env,
                      cwd=repo)
            command = [hg, *config, "rebase", "-q", "-s", "1", "-d", "tip"]
        else:
            command = [hg, *config, "commitid-add"]
        results[name] = timed(command, env, repo)
    return results


def bulk_git(work, env, count):
    git = tools.executable("git")
    results = {}
    for name in ("git filter-branch (core)", "gitbridge commitid-add"):
        repo = os.path.join(work, "bulk-git-%d" % len(results))
        tools.run([git, "init", "-q", "-b", "main", repo], env)
        _fast_import(git, repo, env, count)
        tools.run([git, "checkout", "-q", "-f", "topic"], env, cwd=repo)
        if name.startswith("git filter-branch"):
            command = [git, "filter-branch", "-f", "--msg-filter", "cat",
                       "main..topic"]
        else:
            command = [tools.executable("gitbridge"), "commitid-add",
                       "--base", "main"]
        env = dict(env, FILTER_BRANCH_SQUELCH_WARNING="1")
        results[name] = timed(command, env, repo)
    return results


def _fast_import(git, repo, env, count):
    """``main`` with one commit, ``topic`` with ``count`` more."""
    stream = ["commit refs/heads/main", "mark :1",
              "committer b <b@x> 946684800 +0000", "data 4", "base",
              "M 644 inline base", "data 5", "base", ""]
    for i in range(count):
        message = "change %d" % i
        content = "%d\n" % i
        stream += ["commit refs/heads/topic", "mark :%d" % (i + 2),
                   "committer b <b@x> %d +0000" % (946684801 + i),
                   "data %d" % len(message), message,
                   "from :%d" % (i + 1),
                   "M 644 inline f%d" % i, "data %d" % len(content),
                   content]
    tools.run([git, "fast-import", "--quiet"], env, cwd=repo,
              input="\n".join(stream))


def table(rows, header):
    widths = [max(len(str(r[i])) for r in rows + [header])
              for i in range(len(header))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths))
              for r in rows]
    return "\n".join(lines)


def main(argv=None):
    parser = benchcli.command_line(sys.modules[__name__])
    parser.add_argument("hg_repo")
    parser.add_argument("git_repo")
    parser.add_argument("--commits", type=int, default=40,
                        help="commits per variant (median kept)")
    parser.add_argument("--bulk", type=int, default=1000,
                        help="draft commits for the bulk command")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="vcsperf-bench-commitid-")
    try:
        env = tools.isolated_env(work)
        commits = per_commit(args.hg_repo, args.git_repo, work, env,
                             args.commits)
        rows = []
        for core in ("hg commit", "git commit"):
            feature = [n for n in commits if n.startswith(core + " +")][0]
            (core_wall, core_cpu), (wall, cpu) = commits[core], \
                commits[feature]
            rows.append([core, "%.1f / %.1f ms" % (core_cpu * 1000,
                                                   core_wall * 1000),
                         feature, "%.1f / %.1f ms" % (cpu * 1000,
                                                      wall * 1000),
                         "%+.1f ms" % ((cpu - core_cpu) * 1000),
                         "%.3f" % (cpu / core_cpu)])
        print("Per commit, medians of %d (CPU / wall-clock time; overhead "
              "and ratio in CPU time), %s and %s:" % (
                  args.commits, args.hg_repo, args.git_repo))
        print(table(rows, ["core", "CPU / wall", "with IDs", "CPU / wall",
                           "overhead", "ratio"]))
        print()
        bulk = dict(bulk_hg(work, env, args.bulk))
        bulk.update(bulk_git(work, env, args.bulk))
        rows = []
        for core, features in [
                ("hg rebase (core)", ["hg commitid-add, evolution",
                                      "hg commitid-add, backup bundle"]),
                ("git filter-branch (core)", ["gitbridge commitid-add"])]:
            for feature in features:
                rows.append([core, "%.2f s" % bulk[core], feature,
                             "%.2f s" % bulk[feature],
                             "%.2f" % (bulk[feature] / bulk[core])])
        print("Rewriting %d draft commits:" % args.bulk)
        print(table(rows, ["core rewrite", "time", "adding IDs", "time",
                           "ratio"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)

