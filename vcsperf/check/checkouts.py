"""The ``checkouts`` and ``git checkouts`` features of ``vcsperf check``:
pooled checkouts of several revisions beside plain clones."""

import os
import shutil
import time

from vcsperf.check.outcome import Failed
from vcsperf.core import pooling
from vcsperf.harness import history, servers, tools


def _usable_node(check, env, rev):
    """The node of revision ``rev`` of the copy when a stock clone can
    check it out: visible (a hidden changeset is not served) and without
    subrepositories, whose checkout would reach for their servers (a
    converted Git submodule aborts: git subrepos are not allowed by
    default); else None."""
    return check.hg(["log", "-R", check.base, "-r",
                     "%d and not contains('path:.hgsub')" % rev,
                     "-T", "{node}"], env, check=False).strip() or None


#: Both clients take obsolescence markers, as a user's of a repository
#: that has them does: robustcheckout stream-clones its pool, which a
#: server with markers refuses to a client that cannot take them.
CLIENT_CONFIG = "[experimental]\nevolution = all\n"
#: The fact that names the revisions checked out, which the report of a
#: quick run gives with its sample.
REVISIONS = "revisions"


def checkouts(check, work):
    core = check.hg_env()
    plain = check.hg_env(config=CLIENT_CONFIG)
    ours = check.hg_env(["sharepool", "share"], CLIENT_CONFIG)
    # Revision numbers count hidden changesets too.
    tip = int(check.hg(["log", "-R", check.base, "-r", "tip", "-T",
                        "{rev}"], core))
    nodes = {}

    def usable(rev):
        nodes[rev] = _usable_node(check, core, rev)
        return nodes[rev] is not None

    revs = history.spread(range(tip, -1, -1), check.checkouts_count(),
                          usable=usable)
    if len(revs) < 2:
        return "fewer than 2 visible revisions without subrepositories"
    nodes = [nodes[rev] for rev in revs]
    with servers.HgServer(core, check.base) as server:
        _pooled_checkouts(
            check, work, nodes, "hg clone",
            lambda node, dest: check.hg(["clone", "-q", "-u", node,
                                         server.url, dest], plain),
            "robustcheckout",
            lambda node, dest, pool: check.hg([
                "robustcheckout", "--sharebase", pool, "-r", node,
                server.url, dest], ours),
            lambda dest: (
                check.hg(["log", "-R", dest, "-r", ".", "-T", "{node}"],
                         ours),
                check.hg(["status", "-R", dest], ours)))
    check.fact(REVISIONS, revs)


def _pooled_checkouts(check, work, targets, plain_name, plain, pooled_name,
                      pooled, state):
    """Time ``plain(target, dest)`` (a whole clone) for the first target,
    then ``pooled(target, dest, pool)`` for each, checking that
    ``state(dest)`` (the node checked out, the local changes) is right."""
    with check.step("plain %s, checked out" % plain_name):
        dest = os.path.join(work, "plain")
        start = time.perf_counter()
        plain(targets[0], dest)
        plain_seconds = time.perf_counter() - start
        plain_bytes = pooling.disk_usage(dest)
        shutil.rmtree(dest)
    pool = os.path.join(work, "pool")
    dests = [os.path.join(work, "checkout-%d" % i)
             for i in range(len(targets))]
    times = []
    for index, (target, dest) in enumerate(zip(targets, dests)):
        with check.step("%s %d of %d" % (pooled_name, index + 1,
                                         len(targets))):
            start = time.perf_counter()
            pooled(target, dest, pool)
            times.append(time.perf_counter() - start)
        found, changes = state(dest)
        if found.strip() != target:
            raise Failed("checkout %d is at %s, not %s"
                         % (index + 1, found.strip()[:12], target[:12]))
        if changes.strip():
            raise Failed("checkout %d has local changes" % (index + 1))
    check.compare("first checkout, seconds", plain_seconds, times[0],
                  "seconds", "lower", plain_name)
    check.compare("each later checkout, seconds", plain_seconds,
                  sum(times[1:]) / len(times[1:]), "seconds", "lower",
                  plain_name)
    check.compare("disk for %d checkouts" % len(targets),
                  plain_bytes * len(targets),
                  pooling.disk_usage(pool, *dests), "bytes", "lower",
                  "%s each" % plain_name)


def git_checkouts(check, work):
    env = check.hg_env()
    commits = tools.run(["git", "-C", check.git, "rev-list",
                         "--first-parent", "HEAD"], env).split()
    picks = history.spread(commits, check.checkouts_count())
    url = "file://" + check.git

    def plain(commit, dest):
        tools.run(["git", "clone", "-q", "--no-checkout", url, dest], env)
        tools.run(["git", "-C", dest, "checkout", "-q", commit], env)

    _pooled_checkouts(
        check, work, picks, "git clone", plain, "gitbridge checkout",
        lambda commit, dest, pool: check.command([
            tools.executable("gitbridge"), "checkout", "--sharebase", pool,
            "-r", commit, url, dest], env),
        lambda dest: (
            tools.run(["git", "-C", dest, "rev-parse", "HEAD"], env),
            tools.run(["git", "-C", dest, "status", "--porcelain"], env)))
