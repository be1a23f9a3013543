"""Pooled checkouts benchmark: plain ``hg clone`` / ``git clone`` beside
``hg robustcheckout`` and ``gitbridge checkout`` (alternates and worktree
layouts), against servers on 127.0.0.1, in one run.

    vcsperf bench sharepool --hg REPO --git BARE.git [--jobs 8]

For each side it measures wall time and disk (hardlinked files counted
once) of: a first checkout into an empty pool, a second checkout of
another revision into a new directory, and ``--jobs`` concurrent checkouts
of different revisions into one empty pool (with the number of clones the
server saw).  The core command does the same work without a pool.
``--dulwich`` adds dulwich's clone and checkout beside git's, which is how
gitbridge chose the git binary for both.

The repositories are cloned (hardlinked) into the work directory first and
served from there; the originals are only read.

``--upstream DIR`` (version-control-tools' ``hgext/robustcheckout``) puts
Mozilla's extension beside ours instead, each with a pool of its own,
against one ``hg serve`` of ``--hg`` (hardlinked, so a Firefox-sized
repository is served without a copy):

    vcsperf bench sharepool --hg REPO --upstream VCT/hgext/robustcheckout \
        [--behind 50] [--rounds 3] [--cold-rounds 2] [--junk 2000]

cold: into an empty pool, at the revision ``--behind`` changesets before
the tip (a stream clone when the server allows it, then the whole tree),
``--cold-rounds`` times, the sides taking turns to go first (the side
timed second on a disk that just deleted the other's checkout is the
slower at Firefox scale, whichever it is);
reuse-purge: that checkout, with ``--junk`` unknown and ignored files
added, moved to the tip with ``--purge``; ``--rounds`` times, the two
sides in alternating order, each moved back untimed before a round.
cold-bundle: into an empty pool again, the store from a stream clone
bundle on object storage, as Firefox CI clones from hg.mozilla.org's
bundles: ``hg bundlegen`` publishes one of the served repository to the S3
server of ``vcsperf.harness.objectstore`` and ``hg serve`` hands out its
clonebundles manifest; each side's row gives the bytes it took from the
origin and from the bundle host (counted by a proxy in front of each);
``--cold-rounds`` times too.
``--paths`` picks them; reuse-purge alone reuses the checkouts that an
earlier run left in ``--workdir`` (a cold checkout of a Firefox-sized
tree takes many minutes on a loaded machine).  Without reuse-purge, each
cold checkout and its pool are deleted as soon as they are timed (a
Firefox-sized one takes 6 GB).  Each
row gives the wall time and the user+system CPU seconds (the steadier
figure on a loaded machine), and the steps both extensions report in
their ``PERFHERDER_DATA`` line; each path's rows are also printed to
stderr as soon as it is done.
"""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from vcsperf.bench import benchcli, bundlegen, quietdisk
from vcsperf.core import pooling
from vcsperf.core.errors import Abort
from vcsperf.harness import history, objectstore, tools
from vcsperf.harness.proxies import CountingProxy
from vcsperf.harness.servers import GitServer, HgServer


def timed(args, env, cwd=None):
    start = time.monotonic()
    tools.run(args, env, cwd=cwd)
    return time.monotonic() - start


def timed_concurrently(commands, env):
    start = time.monotonic()
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for args in commands]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError("%s failed: %s" % (proc.args, err.decode()))
    return time.monotonic() - start


# Mercurial -------------------------------------------------------------------

def bench_hg(repo, work, jobs):
    hg = tools.executable("hg")
    home = os.path.join(work, "hg-home")
    os.makedirs(home)
    hgrc = os.path.join(home, "hgrc")
    with open(hgrc, "w") as fh:
        fh.write("[extensions]\nsharepool =\n[sharepool]\ndisk-report = "
                 "false\n")
    env = tools.isolated_env(home, hgrc)
    served = os.path.join(work, "hg-served")
    tools.run([hg, "clone", "-q", "-U", repo, served], env)
    log = os.path.join(work, "hg-access.log")
    with HgServer(env, served, "--accesslog", log) as server:
        url = server.url
        nodes = tools.run([hg, "log", "-R", served, "-T", "{node}\n"],
                          env).split()
        tip, other = nodes[0], nodes[len(nodes) // 50]
        d = lambda *names: os.path.join(work, "hg", *names)  # noqa: E731
        os.makedirs(d())
        core = {
            "first": timed([hg, "clone", "-q", "-u", tip, url, d("plain1")],
                           env),
            "second": timed([hg, "clone", "-q", "-u", other, url,
                             d("plain2")], env),
        }
        core_disk = pooling.disk_usage(d("plain1"))
        robust = [hg, "robustcheckout", "--sharebase"]
        ours = {
            "first": timed(robust + [d("pool"), "-r", tip, url, d("co1")],
                           env),
            "second": timed(robust + [d("pool"), "-r", other, url, d("co2")],
                            env),
        }
        first_disk = pooling.disk_usage(d("pool"), d("co1"))
        second_disk = pooling.disk_usage(d("co2"))
        before = _hg_clones(log)
        revs = history.spread(nodes, jobs, newest=0.1)
        ours["concurrent"] = timed_concurrently(
            [robust + [d("pool8"), "-r", rev, url, d("job%d" % n)]
             for n, rev in enumerate(revs)], env)
        clones = _hg_clones(log) - before
        concurrent_disk = pooling.disk_usage(
            d("pool8"), *[d("job%d" % n) for n in range(jobs)])
        core["concurrent"] = timed_concurrently(
            [[hg, "clone", "-q", "-u", rev, url, d("plainjob%d" % n)]
             for n, rev in enumerate(revs)], env)
        core_concurrent_disk = pooling.disk_usage(
            *[d("plainjob%d" % n) for n in range(jobs)])
    return {
        "changesets": len(nodes),
        "rows": [
            ("first checkout (empty pool)", core["first"], ours["first"]),
            ("second checkout, other revision, new dir", core["second"],
             ours["second"]),
            ("%d concurrent checkouts (empty pool)" % jobs,
             core["concurrent"], ours["concurrent"]),
        ],
        "disk": [
            ("first checkout", core_disk, first_disk),
            ("second checkout (added)", pooling.disk_usage(d("plain2")),
             second_disk),
            ("%d concurrent checkouts" % jobs, core_concurrent_disk,
             concurrent_disk),
        ],
        "clones_seen_by_server": clones,
        "one_store_plus_working_copies": _one_store_plus(
            d("pool8"), [d("job%d" % n) for n in range(jobs)]),
    }


def _hg_clones(log):
    """Requests that transferred history; a new share's pull of bookmarks
    and phases (cg=0, as hg clone with a pool does) is none."""
    with open(log) as fh:
        return sum(("cmd=getbundle" in line
                    and ("cg=0" not in line or "stream=1" in line))
                   or "cmd=stream_out" in line for line in fh)


def _one_store_plus(pool, checkouts):
    """Disk of one store plus each working copy without its metadata: the
    floor a pool can reach."""
    stores = [os.path.join(pool, name) for name in os.listdir(pool)
              if re.match(r"^[0-9a-f]{40}(\.git)?$", name)]
    working = 0
    for checkout in checkouts:
        for entry in os.scandir(checkout):
            if entry.name not in (".hg", ".git"):
                working += pooling.disk_usage(entry.path)
    return pooling.disk_usage(*stores) + working


# Mercurial: ours against Mozilla's robustcheckout ----------------------------

#: The sides of the upstream comparison, in the order of the first round.
SIDES = ("upstream", "ours")
#: What the upstream comparison times (``--paths``), in the order run.
PATHS = ("cold", "reuse-purge", "cold-bundle")
#: The bucket and prefix the cold-bundle path publishes to.
BUNDLE_BUCKET, BUNDLE_PREFIX = "hg-bundles", "repo"


def timed_run(args, env):
    """Wall and CPU (user + system) seconds of the command ``args``, and
    the steps of its ``PERFHERDER_DATA`` line (name: seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = tools.run(args, env)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime
           + after.ru_stime - before.ru_stime)
    steps = {}
    for line in out.splitlines():
        if line.startswith("PERFHERDER_DATA: "):
            steps = {suite["name"]: suite["value"] for suite in json.loads(
                line.split(" ", 1)[1])["suites"]}
    return {"wall": wall, "cpu": cpu, "steps": steps}


def hardlinked_copy(repo, dest):
    """``repo``'s .hg with every file hardlinked (Mercurial breaks a link
    before it writes to a file) but its caches, copied: serving it writes
    nothing into ``repo``."""
    os.makedirs(dest)
    hgdir = os.path.join(repo, ".hg")
    tools.run(["cp", "-al", hgdir, os.path.join(dest, ".hg")], None)
    for cache in ("cache", "wcache"):
        linked = os.path.join(dest, ".hg", cache)
        if os.path.isdir(linked):
            shutil.rmtree(linked)
            shutil.copytree(os.path.join(hgdir, cache), linked)


def add_junk(checkout, count):
    """``count`` files a build would leave in ``checkout``, in 50
    directories: those of d00 to d09 are ignored (``JUNK_IGNORE``), the
    others unknown."""
    junk = os.path.join(checkout, "obj-bench-junk")
    for n in range(count):
        path = os.path.join(junk, "d%02d" % (n % 50), "f%05d.o" % n)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"%d\n" % n)


#: The ignore file both sides read (``ui.ignore``).
JUNK_IGNORE = "syntax: glob\nobj-bench-junk/d0*\n"


def alternated(round_number, sides=SIDES):
    """The order the sides run in a round: each goes first in every other
    round.  At Firefox scale the side timed second after a deletion of
    850,000 files took 1.8 times as long, whichever it was (upstream's
    cold checkout 180.8 s first, 326.5 s second; ours 174.4 s first,
    330.9 s second), so a path compared once says which ran first."""
    return sides if round_number % 2 == 0 else sides[::-1]


def bench_hg_upstream(repo, work, upstream, behind, rounds, junk,
                      paths=PATHS, cold_rounds=2):
    unknown = sorted(set(paths) - set(PATHS))
    if unknown or not paths:
        raise Abort("unknown path %s" % ",".join(unknown) if unknown
                    else "no path to run", hint="--paths takes %s"
                    % ",".join(PATHS))
    d = lambda *names: os.path.join(work, "hg", *names)  # noqa: E731
    keep = "reuse-purge" in paths
    if keep and "cold" not in paths and not all(
            os.path.isdir(d("co-" + side)) for side in SIDES):
        raise Abort("reuse-purge alone needs the checkouts of an earlier "
                    "run in %s" % d(), hint="run with --paths "
                    "cold,reuse-purge and --workdir first")
    hg = tools.executable("hg")
    home = os.path.join(work, "hg-home")
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "hgignore"), "w") as fh:
        fh.write(JUNK_IGNORE)
    envs = {}
    for side, line in (("upstream", "robustcheckout = %s" % upstream),
                       ("ours", "robustcheckout =")):
        hgrc = os.path.join(home, "hgrc-" + side)
        with open(hgrc, "w") as fh:
            fh.write("[extensions]\n%s\n[ui]\nignore = %s\n"
                     % (line, os.path.join(home, "hgignore")))
        envs[side] = tools.isolated_env(home, hgrc)
        # both extensions print their steps' seconds then
        envs[side]["TASKCLUSTER_INSTANCE_TYPE"] = "vcsperf-bench"
    os.makedirs(d(), exist_ok=True)
    served = os.path.join(work, "hg-served")
    if not os.path.isdir(served):
        hardlinked_copy(repo, served)
    # what an interrupted cold-bundle run published: the cold path clones
    # from the origin alone
    withdraw_bundles(served)
    # a checkout of a small one leaves nothing for the kernel to skip
    big = sum(len(names) for _top, _dirs, names in os.walk(
        os.path.join(served, ".hg", "store"))) >= quietdisk.BIG_DELETE
    result = {"behind": behind, "junk": junk,
              "cold": {side: [] for side in SIDES},
              "reuse_purge": {side: [] for side in SIDES},
              "cold_bundle": {}}
    # hg serve offers the clonebundles manifest while there is one
    with HgServer(envs["ours"], served, "--config",
                  "extensions.clonebundles=") as server:
        tip, old = tools.run([hg, "log", "-R", served, "-r", "tip + tip~%d"
                              % behind, "-T", "{node}\n"],
                             envs["ours"]).split()

        def checkout(side, node, purge=False, url=server.url, kind=""):
            args = [hg, "robustcheckout", "--sharebase",
                    d("pool-" + kind + side), "-r", node, url,
                    d("co-" + kind + side)]
            return timed_run(args + ["--purge"] * purge, envs[side])

        def discard_settled(*paths):
            # off the clock: the next side must not write behind the
            # discards of the files just deleted, nor allocate inodes past
            # them (at Firefox scale 850,000 files, and the side timed
            # second was 1.8 times slower, whichever it was)
            discard(*paths)
            quietdisk.settle(work)
            if big:
                result["caches_dropped"] = quietdisk.drop_caches([served])

        if "cold" in paths:
            discard_settled()
            for number in range(cold_rounds):
                for side in alternated(number):
                    result["cold"][side].append(checkout(side, old))
                    progress(result, "cold")
                    check_parent(hg, d("co-" + side), old, envs[side])
                    # reuse-purge starts from the last round's checkouts
                    if not keep or number < cold_rounds - 1:
                        discard_settled(d("co-" + side), d("pool-" + side))
        reuse = result["reuse_purge"]
        for number in range(rounds if keep else 0):
            order = alternated(number)
            if number or "cold" not in paths:
                for side in order:
                    checkout(side, old, purge=True)
            for side in order:
                add_junk(d("co-" + side), junk)
                reuse[side].append(checkout(side, tip, purge=True))
        if keep:
            for side in SIDES:
                check_parent(hg, d("co-" + side), tip, envs[side])
            progress(result, "reuse_purge")
        if "cold-bundle" in paths:
            result["cold_bundle"] = cold_from_bundle(
                served, work, home, server.url, old, cold_rounds,
                discard_settled,
                lambda side, url: checkout(side, old, url=url,
                                           kind="bundle-"),
                lambda side: check_parent(hg, d("co-bundle-" + side), old,
                                          envs[side]),
                lambda side: discard_settled(d("co-bundle-" + side),
                                     d("pool-bundle-" + side)))
            progress(result, "cold_bundle")
    result["changesets"] = int(tools.run(
        [hg, "log", "-R", served, "-r", "tip", "-T", "{rev}"],
        envs["ours"])) + 1
    return result


def check_parent(hg, checkout, node, env):
    """The checkout stands on ``node``, or the run fails."""
    parent = tools.run([hg, "log", "-R", checkout, "-r", ".", "-T",
                        "{node}"], env)
    if parent != node:
        raise RuntimeError("%s ended at %s, not %s" % (checkout, parent,
                                                       node))


def discard(*paths):
    """Delete checkouts and pools this benchmark made, once timed, with
    rm (C, unlinkat): shutil.rmtree took 5 minutes over a Firefox-sized
    checkout at load 8, and its pool more than 3."""
    tools.run(["rm", "-rf", "--", *paths], None)


def progress(result, key):
    """A path's rows on stderr as soon as each is done: a run stopped
    later (a machine window ends) keeps them."""
    print(json.dumps({key: result[key]}), file=sys.stderr, flush=True)


def withdraw_bundles(served):
    """Remove the clonebundles manifest ``publish_stream_bundle`` wrote
    into the served copy (the benchmark's own file)."""
    for name in ("clonebundles.manifest", "clonebundles.manifest.old"):
        path = os.path.join(served, ".hg", name)
        if os.path.exists(path):
            os.unlink(path)


def publish_stream_bundle(served, work, home, store, base_url):
    """Publish a stream clone bundle of ``served`` with ``hg bundlegen`` to
    a bucket of ``store`` (an ``objectstore.ObjectServer``), the manifest
    sending clients to ``base_url`` (a proxy in front of it); returns the seconds and the
    bytes uploaded.  The configuration goes in a file of the benchmark's
    (the served copy's ``.hg/hgrc`` may be a hardlink of the original's),
    and the local copy of the bundle is deleted once uploaded."""
    store.make_bucket(BUNDLE_BUCKET)
    output = os.path.join(work, "bundlegen-output")
    hgrc = os.path.join(home, "hgrc-bundlegen")
    with open(hgrc, "w") as fh:
        fh.write("\n".join([
            "[extensions]", "bundlegen =", "[bundlegen]",
            "output = %s" % output, "formats = stream",
            "[bundlegen-destinations]",
            "s3.url = s3://%s/%s" % (BUNDLE_BUCKET, BUNDLE_PREFIX),
            "s3.region = %s" % objectstore.REGION,
            "s3.endpoint = %s" % store.url.rstrip("/"),
            "s3.base-url = %s" % base_url]) + "\n")
    env = dict(tools.isolated_env(home, hgrc), **store.environ())
    start = time.monotonic()
    tools.run([tools.executable("hg"), "-R", served, "bundlegen",
               "--force"], env)
    seconds = time.monotonic() - start
    shutil.rmtree(output, ignore_errors=True)
    return {"seconds": seconds,
            "bytes": bundlegen.bucket_bytes(store, BUNDLE_BUCKET)}


def cold_from_bundle(served, work, home, origin_url, node, rounds,
                     settle, checkout, check, remove):
    """The cold-bundle path: publish, ``settle()``, then ``rounds`` times
    for each side (ours first in the first round, the other order than
    cold's) a cold ``checkout(side, url)`` through a counting proxy in
    front of the origin, the bundle downloaded through one in front of
    the object store; ``check(side)`` then ``remove(side)``.  A side that
    took no byte from the bundle host did not test it: the run fails."""
    root = os.path.join(work, "s3")
    result = {side: [] for side in SIDES}
    try:
        with objectstore.ObjectServer(root) as store, \
                CountingProxy(store.url) as bundles, \
                CountingProxy(origin_url) as origin:
            result["publish"] = publish_stream_bundle(
                served, work, home, store, "%s%s/%s" % (
                    bundles.url, BUNDLE_BUCKET, BUNDLE_PREFIX))
            progress(result, "publish")
            # the publication's snapshot, deleted: as after a checkout
            settle()
            bundles.take()
            for number in range(rounds):
                for side in alternated(number, SIDES[::-1]):
                    origin.take()
                    run = checkout(side, origin.url)
                    run["origin_requests"], run["origin_bytes"] = \
                        origin.take()
                    run["bundle_requests"], run["bundle_bytes"] = \
                        bundles.take()
                    if not run["bundle_bytes"]:
                        raise RuntimeError("%s's checkout took nothing from "
                                           "the bundle host" % side)
                    check(side)
                    remove(side)
                    result[side].append(run)
                    progress(result, side)
    finally:
        withdraw_bundles(served)
        # the bucket; its logs stay
        shutil.rmtree(os.path.join(root, "data"), ignore_errors=True)
    return result


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return (values[middle] if len(values) % 2
            else (values[middle - 1] + values[middle]) / 2)


#: The upstream comparison's paths in the report: result key, row label,
#: step table label.
REPORTED = (("cold", "cold (empty pool)", "cold"),
            ("cold_bundle", "cold from a stream clone bundle", "cold-bundle"),
            ("reuse_purge", "reuse --purge", "reuse"))


def format_upstream_report(result):
    lines = ["## hg robustcheckout: ours against Mozilla's (%d changesets, "
             "%d behind, %d junk files)" % (result["changesets"],
                                             result["behind"],
                                             result["junk"]), "",
             "Each path's sides alternate which runs first, round by round; "
             "the kernel's caches were %s between sides." % (
                 "dropped" if result.get("caches_dropped")
                 else "not dropped (a small store, or not root)"), "",
             "| path | upstream wall | ours wall | ours / upstream | "
             "upstream CPU | ours CPU | ours / upstream |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    rows, runs = [], []
    for key, label, step_label in REPORTED:
        sides = result.get(key) or {}
        pairs = list(zip(sides.get("upstream", []), sides.get("ours", [])))
        for number, (up, ours) in enumerate(pairs):
            rows.append(("%s, round %d" % (label, number + 1), up, ours))
            runs.append(("%s round %d" % (step_label, number + 1), up, ours))
        if pairs:
            up, ours = ({what: median([run[what] for run in sides[side]])
                         for what in ("wall", "cpu")} for side in SIDES)
            rows.append(("%s, median" % label, up, ours))
    for name, up, ours in rows:
        lines.append("| %s | %.2f s | %.2f s | %.2f | %.2f s | %.2f s | "
                     "%.2f |" % (name, up["wall"], ours["wall"],
                                 ours["wall"] / up["wall"], up["cpu"],
                                 ours["cpu"], ours["cpu"] / up["cpu"]))
    bundle = result.get("cold_bundle") or {}
    if bundle:
        lines += ["", "stream clone bundle published by hg bundlegen in "
                  "%.2f s, %d bytes on the object store" % (
                      bundle["publish"]["seconds"],
                      bundle["publish"]["bytes"]), "",
                  "| cold from the bundle, each round | upstream | ours |",
                  "| --- | --- | --- |"]
        for what, key in (("requests to the origin", "origin_requests"),
                          ("bytes from the origin", "origin_bytes"),
                          ("requests to the bundle host", "bundle_requests"),
                          ("bytes from the bundle host", "bundle_bytes")):
            lines.append("| %s | %s | %s |" % ((what,) + tuple(
                " / ".join(str(run[key]) for run in bundle[side])
                for side in SIDES)))
    lines += ["", "| step (PERFHERDER_DATA, s) | path | upstream | ours |",
              "| --- | --- | --- | --- |"]
    for path, up, ours in runs:
        for step in ("clone", "pull", "purge", "update", "overall"):
            if step in up["steps"] or step in ours["steps"]:
                lines.append("| %s | %s | %s | %s |" % (
                    step, path, _seconds(up["steps"].get(step)),
                    _seconds(ours["steps"].get(step))))
    return "\n".join(lines)


def _seconds(value):
    return "-" if value is None else "%.2f" % value


# Git -------------------------------------------------------------------------

def bench_git(repo, work, jobs, with_dulwich):
    git = tools.executable("git")
    gitbridge = tools.executable("gitbridge")
    home = os.path.join(work, "git-home")
    os.makedirs(home)
    env = tools.isolated_env(home)
    with open(os.path.join(home, ".gitconfig"), "w") as fh:
        fh.write("[sharepool]\n\tdisk-report = false\n")
    root = os.path.join(work, "git-served")
    os.makedirs(root)
    tools.run([git, "clone", "-q", "--bare", "--local", repo,
               os.path.join(root, "repo.git")], env)
    commits = tools.run([git, "-C", os.path.join(root, "repo.git"),
                         "rev-list", "--first-parent", "HEAD"], env).split()
    tip, other = commits[0], commits[len(commits) // 50]
    d = lambda *names: os.path.join(work, "git", *names)  # noqa: E731
    os.makedirs(d())
    rows, disk = [], []
    with GitServer(root) as server:
        url = server.url + "repo.git"
        core = {"first": timed([git, "clone", "-q", "--no-checkout", url,
                                d("plain1")], env)
                + timed([git, "-C", d("plain1"), "checkout", "-q", tip], env)}
        core["second"] = timed([git, "clone", "-q", "--no-checkout", url,
                                d("plain2")], env) + timed(
            [git, "-C", d("plain2"), "checkout", "-q", other], env)
        results = {}
        for layout in ("alternates", "worktree"):
            base = [gitbridge, "checkout", "--layout", layout, "--sharebase"]
            pool = d("pool-" + layout)
            first = timed(base + [pool, "-r", tip, url, d(layout + "1")],
                          env)
            second = timed(base + [pool, "-r", other, url, d(layout + "2")],
                           env)
            results[layout] = (first, second,
                               pooling.disk_usage(pool, d(layout + "1")),
                               pooling.disk_usage(d(layout + "2")))
        before = len(server.fetches())
        revs = history.spread(commits, jobs, newest=0.1)
        concurrent = timed_concurrently(
            [[gitbridge, "checkout", "--sharebase", d("pool8"), "-r", rev,
              url, d("job%d" % n)] for n, rev in enumerate(revs)], env)
        clones = len(server.fetches()) - before
        concurrent_disk = pooling.disk_usage(
            d("pool8"), *[d("job%d" % n) for n in range(jobs)])
        core["concurrent"] = timed_concurrently(
            [["sh", "-c", "git clone -q --no-checkout %s %s && "
              "git -C %s checkout -q %s" % (url, d("plainjob%d" % n),
                                            d("plainjob%d" % n), rev)]
             for n, rev in enumerate(revs)], env)
        core_concurrent_disk = pooling.disk_usage(
            *[d("plainjob%d" % n) for n in range(jobs)])
        dulwich = bench_dulwich(url, tip, d(), env) if with_dulwich else None
    alt, wt = results["alternates"], results["worktree"]
    rows = [
        ("first checkout (empty pool)", core["first"], alt[0], wt[0]),
        ("second checkout, other revision, new dir", core["second"], alt[1],
         wt[1]),
        ("%d concurrent checkouts (empty pool)" % jobs, core["concurrent"],
         concurrent, None),
    ]
    disk = [
        ("first checkout", pooling.disk_usage(d("plain1")), alt[2], wt[2]),
        ("second checkout (added)", pooling.disk_usage(d("plain2")), alt[3],
         wt[3]),
        ("%d concurrent checkouts" % jobs, core_concurrent_disk,
         concurrent_disk, None),
    ]
    return {"commits": len(commits), "rows": rows, "disk": disk,
            "clones_seen_by_server": clones, "dulwich": dulwich,
            "one_store_plus_working_copies": _one_store_plus(
                d("pool8"), [d("job%d" % n) for n in range(jobs)])}


def bench_dulwich(url, tip, where, env):
    """dulwich's clone and checkout beside git's, same server and commit."""
    git = tools.executable("git")
    code = ("import sys; from dulwich import porcelain; "
            "porcelain.clone(sys.argv[1], sys.argv[2], bare=True, "
            "errstream=open('/dev/null', 'wb'))")
    dulwich_clone = timed([sys.executable, "-c", code, url,
                           os.path.join(where, "dulwich.git")], env)
    git_clone = timed([git, "clone", "-q", "--bare", url,
                       os.path.join(where, "gitbare.git")], env)
    checkout = ("import sys; from dulwich.repo import Repo; "
                "from dulwich.index import build_index_from_tree; "
                "r = Repo.init(sys.argv[2], mkdir=True); "
                "src = Repo(sys.argv[1]); "
                "build_index_from_tree(r.path, r.index_path(), "
                "src.object_store, src[sys.argv[3].encode()].tree)")
    dulwich_checkout = timed([sys.executable, "-c", checkout,
                              os.path.join(where, "gitbare.git"),
                              os.path.join(where, "dulwich-wc"), tip], env)
    tools.run([git, "init", "-q", os.path.join(where, "git-wc")], env)
    with open(os.path.join(where, "git-wc", ".git", "objects", "info",
                           "alternates"), "w") as fh:
        fh.write(os.path.join(where, "gitbare.git", "objects") + "\n")
    git_checkout = timed([git, "-C", os.path.join(where, "git-wc"),
                          "checkout", "-q", tip], env)
    return [("bare clone over HTTP", git_clone, dulwich_clone),
            ("check out the tip from a local store", git_checkout,
             dulwich_checkout)]


# Report ----------------------------------------------------------------------

def ratio(base, value):
    return "%.2fx" % (base / value) if value else "-"


def format_report(hg_result, git_result, jobs):
    mb = lambda n: "%.1f MB" % (n / 2 ** 20)  # noqa: E731
    lines = []
    if hg_result:
        lines += [
            "## Mercurial (%d changesets)" % hg_result["changesets"], "",
            "| wall time | hg clone (core) | hg robustcheckout | speed-up |",
            "| --- | --- | --- | --- |"]
        lines += ["| %s | %.2f s | %.2f s | %s |" % (name, core, ours,
                                                     ratio(core, ours))
                  for name, core, ours in hg_result["rows"]]
        lines += ["", "| disk | hg clone (core) | hg robustcheckout | "
                  "fraction |", "| --- | --- | --- | --- |"]
        lines += ["| %s | %s | %s | %.2f |" % (name, mb(core), mb(ours),
                                               ours / core)
                  for name, core, ours in hg_result["disk"]]
        lines += ["", "clones the server saw for the %d concurrent "
                  "checkouts: %d; one store plus %d working copies: %s"
                  % (jobs, hg_result["clones_seen_by_server"], jobs,
                     mb(hg_result["one_store_plus_working_copies"])), ""]
    if git_result:
        lines += [
            "## Git (%d first-parent commits)" % git_result["commits"], "",
            "| wall time | git clone + checkout (core) | gitbridge "
            "alternates | gitbridge worktree | speed-up (alternates) |",
            "| --- | --- | --- | --- | --- |"]
        for name, core, alt, wt in git_result["rows"]:
            lines.append("| %s | %.2f s | %.2f s | %s | %s |" % (
                name, core, alt, "%.2f s" % wt if wt is not None else "-",
                ratio(core, alt)))
        lines += ["", "| disk | git clone (core) | gitbridge alternates | "
                  "gitbridge worktree | fraction (alternates) |",
                  "| --- | --- | --- | --- | --- |"]
        for name, core, alt, wt in git_result["disk"]:
            lines.append("| %s | %s | %s | %s | %.2f |" % (
                name, mb(core), mb(alt), mb(wt) if wt is not None else "-",
                alt / core))
        lines += ["", "clones the server saw for the %d concurrent "
                  "checkouts: %d; one store plus %d working copies: %s"
                  % (jobs, git_result["clones_seen_by_server"], jobs,
                     mb(git_result["one_store_plus_working_copies"]))]
        if git_result["dulwich"]:
            lines += ["", "| operation | git | dulwich | dulwich / git |",
                      "| --- | --- | --- | --- |"]
            lines += ["| %s | %.2f s | %.2f s | %.1fx |" % (
                name, g, dw, dw / g) for name, g, dw in git_result["dulwich"]]
    return "\n".join(lines)


def main(argv=None):
    parser = benchcli.command_line(sys.modules[__name__])
    parser.add_argument("--hg", help="Mercurial repository to serve")
    parser.add_argument("--git", help="bare Git repository to serve")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--upstream", help="Mozilla's robustcheckout "
                        "(version-control-tools' hgext/robustcheckout): "
                        "time it beside ours on --hg instead")
    parser.add_argument("--behind", type=int, default=50,
                        help="changesets the reused checkout is behind")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of reuse-purge")
    parser.add_argument("--cold-rounds", type=int, default=2,
                        help="with --upstream: rounds of cold and "
                        "cold-bundle (the sides take turns going first)")
    parser.add_argument("--paths", default="cold,reuse-purge",
                        help="with --upstream: any of %s, comma-separated "
                        "(reuse-purge alone reuses --workdir's checkouts)"
                        % ", ".join(PATHS))
    parser.add_argument("--junk", type=int, default=2000,
                        help="unknown and ignored files purge removes each "
                        "round")
    parser.add_argument("--dulwich", action="store_true",
                        help="also time dulwich's clone and checkout")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--workdir", help="where everything goes (default: "
                        "a temporary directory, removed afterwards)")
    args = parser.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="vcsperf-sharepool-")
    try:
        if args.upstream:
            result = bench_hg_upstream(
                benchcli.hg_repository(args.hg), work,
                os.path.abspath(args.upstream), args.behind, args.rounds,
                args.junk, args.paths.split(","), args.cold_rounds)
            print(format_upstream_report(result))
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump({"hg_upstream": result}, fh, indent=2)
            return
        hg_result = bench_hg(args.hg, work, args.jobs) if args.hg else None
        git_result = (bench_git(args.git, work, args.jobs, args.dulwich)
                      if args.git else None)
        print(format_report(hg_result, git_result, args.jobs))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"hg": hg_result, "git": git_result}, fh, indent=2)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

