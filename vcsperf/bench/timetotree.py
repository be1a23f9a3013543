"""Time to tree: Mozilla run-task's Git checkout (shallow; shallow,
blobless and cone-mode sparse; its cached checkout refreshed and purged,
full and sparse) beside ``gitbridge checkout`` (a cold pool, a warm pool
with a new directory, a ready tree of the warm pool taken into a new
directory, a warm pool reusing a directory some commits behind, with and
without ``--purge``; and sparse: ``--filter blob:none --sparse-dirs``
into a cold blobless pool, a new directory from it, and a reuse some
commits behind, purged), on one Git repository served over smart HTTP on
127.0.0.1 behind a proxy that counts the bytes, in one run.

    vcsperf bench timetotree [--repo PATH] [--behind 50] [--junk-files 2000]
        [--sparse DIR,DIR] [--paths NAME,NAME] [--keep] [--json FILE]
        [--workdir DIR]

Without ``--repo`` it builds (once, cached) a Git history from the
installed sources of Mercurial, dulwich, cffi and pycparser, with no
network.  The repository is only read: it is served through a bare
repository of the work directory that borrows its objects
(``objects/info/alternates``) and holds one branch: at the tip for every
timed path, and moved ``--behind`` commits back while run-task's cached
checkout and each reused gitbridge checkout (with its own pool) are made,
untimed, just before their path.  The server allows what GitHub allows
(``uploadpack.allowFilter``, ``uploadpack.allowAnySHA1InWant``).

``--paths`` runs some of the paths (``refresh,reuse``: run-task's
cached checkout refreshed and gitbridge's reused ones) and judges the
ratios whose paths ran.  For each path: wall seconds per step
(run-task's git commands; gitbridge's own ``--timings`` steps), total
seconds, bytes received from the origin
(the proxy's count of response bodies; server and proxy stream, as a
real server does, so run-task's low-speed limit sees bytes while a big
pack is made), disk of the checkout plus its pool (each inode
once), and a final check of the tree (HEAD is the target, ``git status
--porcelain`` empty, with untracked and ignored files where the path
purges).  The warm-reuse path of each tool runs with ``GIT_TRACE2_EVENT``
and its seconds are broken down into git processes and trace2 regions.
The sparse paths check out the ``--sparse`` directories in cone mode,
both tools from blobless clones (run-task's shallow, gitbridge's pool).
"""

import collections
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

from vcsperf.bench import benchcli
from vcsperf.bench.quietdisk import (
    BIG_DELETE,
    drop_caches,
    remove_tree,
    settle,
)
from vcsperf.core import pooling
from vcsperf.core.errors import Abort
from vcsperf.harness import history, tools
from vcsperf.harness.proxies import CountingProxy
from vcsperf.harness.servers import FileServer, GitServer

#: ``(label, ratio key, op, target)``, the targets of issue 29.
TARGETS = (
    ("warm reuse, gitbridge --purge / run-task", "warm_reuse", "<=", 0.5),
    ("new dir from warm pool / whole-tree write", "warm_new", "<=", 0.25),
    ("new dir from a ready tree / whole-tree write", "ready_new", "<=",
     0.25),
    ("cold, bytes from origin / full clone", "cold_bytes", "<=", 0.02),
    ("cold, wall / run-task shallow", "cold_time", "<=", 1.0),
    ("cold from bundles, bytes from origin / cold (full) clone",
     "cold_bundle_bytes", "<=", 0.02),
    ("cold from bundles, wall / run-task shallow", "cold_bundle_time", "<=",
     1.0),
)
#: Ratios of the sparse paths, reported beside the targets: ``(label,
#: key)``.
SPARSE_RATIOS = (
    ("sparse, cold: gitbridge / run-task blobless", "sparse_cold"),
    ("sparse, warm reuse: gitbridge --purge / run-task", "sparse_warm"),
)
#: run-task's environment for git (``GIT_HTTP_LOW_SPEED_*``).
RUNTASK_ENV = {"GIT_HTTP_LOW_SPEED_LIMIT": "1024",
               "GIT_HTTP_LOW_SPEED_TIME": "60"}


# The repository --------------------------------------------------------------

def default_repository(cache_dir=None):
    """The cached bare Git history of the installed sources (no network),
    built on first use."""
    snapshots = list(history.installed_sources())
    key = hashlib.sha256("\n".join(
        s.message for s in snapshots).encode()).hexdigest()[:16]
    cache = cache_dir or history.default_cache_dir()

    def build(scratch):
        env = tools.isolated_env(scratch)
        work = os.path.join(scratch, "work")
        history.write_git(snapshots, work, git=tools.executable("git"),
                          env=env)
        bare = os.path.join(scratch, "bare.git")
        tools.run(["git", "clone", "-q", "--bare", work, bare], env)
        tools.run(["git", "-C", bare, "repack", "-a", "-d", "-q"], env)
        return bare
    return history.cached_directory(
        os.path.join(cache, "installed-sources-git-%s.git" % key), build)


def git_objects(repo, env):
    """The absolute objects directory of the Git repository ``repo``
    (bare, or a checkout's top directory); ``Abort`` when it is none (a
    directory inside another repository is none)."""
    git = tools.executable("git")
    found = tools.completed([git, "-C", repo, "rev-parse",
                             "--path-format=absolute", "--git-common-dir",
                             "--absolute-git-dir"], env)
    where = found.stdout.split("\n")
    top = tools.completed([git, "-C", repo, "rev-parse", "--show-toplevel"],
                          env).stdout.strip()
    if found.returncode or os.path.realpath(repo) not in (
            where[1], os.path.realpath(top or "/nonexistent")):
        raise Abort("%s is not a Git repository" % repo,
                    hint="give a bare repository or a checkout's top "
                    "directory")
    return os.path.join(where[0], "objects")


def served_copy(repo, root, env):
    """A bare ``root/repo.git`` borrowing ``repo``'s objects, configured as
    GitHub serves; returns ``(path, branch, first-parent commits from the
    tip)``; its branch is set with ``set_branch``."""
    git = tools.executable("git")
    objects = git_objects(repo, env)
    branch = tools.completed([git, "-C", repo, "symbolic-ref", "--short",
                              "HEAD"], env).stdout.strip() or "main"
    commits = tools.run([git, "-C", repo, "rev-list", "--first-parent",
                         "HEAD"], env).split()
    served = os.path.join(root, "repo.git")
    tools.run([git, "init", "-q", "--bare", served], env)
    with open(os.path.join(served, "objects", "info", "alternates"),
              "w") as fh:
        fh.write(objects + "\n")
    for name in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
        tools.run([git, "-C", served, "config", name, "true"], env)
    tools.run([git, "-C", served, "symbolic-ref", "HEAD",
               "refs/heads/" + branch], env)
    return served, branch, commits


def set_branch(served, branch, commit, env):
    tools.run([tools.executable("git"), "-C", served, "update-ref",
               "refs/heads/" + branch, commit], env)


# run-task's way ----------------------------------------------------------------

def runtask_checkout(url, dest, branch, rev, env, sparse=None):
    """Our rendering of run-task's ``git_checkout``: a shallow clone with no
    checkout (blobless when ``sparse``, a list of directories), or, when
    DEST is a checkout already, its origin set to ``url``; a shallow fetch
    of the branch and the commit; cone-mode sparse; a forced checkout of
    the commit as the branch; a purge of what ``git clean -nxdff`` lists.
    ``git config --global checkout.workers`` comes from
    ``RUN_TASK_GIT_CHECKOUT_WORKERS`` (default 0, one per core), so
    ``env``'s HOME must be a scratch directory.  Returns seconds per step
    and what was purged."""
    git = tools.executable("git")
    env = dict(env, **RUNTASK_ENV)
    steps = collections.OrderedDict()

    def step(name, args, cwd=None, stdin=None):
        start = time.monotonic()
        out = tools.run(args, env, cwd=cwd, input=stdin)
        steps[name] = steps.get(name, 0.0) + time.monotonic() - start
        return out

    step("config", [git, "config", "--global", "checkout.workers",
                    os.environ.get("RUN_TASK_GIT_CHECKOUT_WORKERS", "0")])
    if os.path.isdir(os.path.join(dest, ".git")):
        step("set-url", [git, "remote", "set-url", "origin", url], cwd=dest)
    else:
        step("clone", [git, "clone", "-q", "--depth=1"]
             + (["--filter=blob:none"] if sparse else [])
             + ["--no-checkout", url, dest])
    step("fetch", [git, "fetch", "-q", "--depth=1", "origin", branch, rev],
         cwd=dest)
    if sparse:
        step("sparse", [git, "sparse-checkout", "set", "--cone",
                        "--sparse-index", "--stdin"], cwd=dest,
             stdin="".join(d + "\n" for d in sparse))
    step("checkout", [git, "checkout", "-q", "-f", "-B", branch, rev],
         cwd=dest)
    start = time.monotonic()
    listed = tools.run([git, "clean", "-nxdff"], env, cwd=dest)
    removed = 0
    for line in listed.splitlines():
        if not line.startswith("Would remove "):
            continue
        path = os.path.join(dest, line[len("Would remove "):].rstrip("/"))
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
        removed += 1
    steps["purge"] = time.monotonic() - start
    return steps, removed


# gitbridge checkout ------------------------------------------------------------

def gitbridge_checkout(url, pool, dest, rev, env, purge=False, options=()):
    """``gitbridge checkout --timings`` (with ``options``): its steps, our
    wall time, and its facts (cloned, pulled, whether --purge read the
    record of a clean tree)."""
    args = [tools.executable("gitbridge"), "checkout", "--sharebase", pool,
            "-r", rev, "--timings"] + (["--purge"] if purge else []) \
        + list(options) + [url, dest]
    start = time.monotonic()
    out = tools.run(args, env, cwd=os.path.dirname(pool))
    wall = time.monotonic() - start
    line = [line for line in out.splitlines() if line.startswith("{")][-1]
    timings = json.loads(line)["checkout"]
    return timings["steps"], wall, {
        "cloned": timings.get("cloned"), "pulled": timings.get("pulled"),
        "purge_from_record": timings.get("purge_from_record"),
        "own_total": timings.get("total"),
        **({"bundles": timings["bundles"]} if "bundles" in timings else {})}


# Measures ----------------------------------------------------------------------

def tree_check(dest, target, env, untracked=True):
    """HEAD is ``target`` and ``git status --porcelain`` is empty (with
    untracked and ignored files when ``untracked``)."""
    git = tools.executable("git")
    head = tools.run([git, "rev-parse", "HEAD"], env, cwd=dest).strip()
    flags = ["--untracked-files=all", "--ignored"] if untracked \
        else ["--untracked-files=no"]
    dirty = tools.run([git, "status", "--porcelain"] + flags, env,
                      cwd=dest).splitlines()
    return {"head_is_target": head == target, "status_entries": len(dirty),
            "untracked_checked": untracked,
            "passed": head == target and not dirty}


def leftover(dest, env):
    """Untracked and ignored entries left in DEST."""
    return len(tools.run([tools.executable("git"), "status", "--porcelain",
                          "--untracked-files=all", "--ignored"], env,
                         cwd=dest).splitlines())


def write_junk(dest, count, env):
    """``count`` build products written into the checkout DEST: a quarter
    as ``__pycache__/*.pyc`` beside tracked directories, the rest under
    ``obj-build/`` in directories of 100."""
    dirs = tools.run([tools.executable("git"), "ls-tree", "-d", "-r",
                      "--name-only", "HEAD"], env, cwd=dest).split("\n")
    dirs = [d for d in dirs if d] or [""]
    pyc = count // 4
    for n in range(count):
        if n < pyc:
            where = os.path.join(dest, dirs[n * len(dirs) // pyc],
                                 "__pycache__")
            name = "m%d.cpython-311.pyc" % n
        else:
            where = os.path.join(dest, "obj-build", "dir%03d" % (n // 100))
            name = "unit%d.o" % n
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, name), "wb") as fh:
            fh.write(hashlib.sha256(b"%d" % n).digest() * 64)


class Origin:
    """Bytes and requests the proxy passed from the origin since the last
    ``take``."""

    def __init__(self, proxy):
        self.proxy = proxy

    def take(self):
        requests, nbytes = self.proxy.take()
        return {"bytes_from_origin": nbytes, "requests": requests}


def phases(trace, wall, top=8):
    """Where the seconds of a path went, from a ``GIT_TRACE2_EVENT`` file:
    each git process (its command, seconds), the main-thread trace2
    regions summed by process command, category and label (top ``top``),
    and the wall time outside any top-level git process."""
    starts, elapsed, regions = {}, {}, collections.Counter()
    if not os.path.exists(trace):
        return None
    with open(trace) as fh:
        for line in fh:
            event = json.loads(line)
            kind, sid = event.get("event"), event.get("sid")
            if kind == "start":
                starts[sid] = _command(event["argv"])
            elif kind == "exit":
                elapsed[sid] = event["t_abs"]
            elif kind == "region_leave" and event.get("thread") == "main" \
                    and "t_rel" in event:
                regions[(sid, event.get("category", ""),
                         event.get("label", ""),
                         event.get("nesting", 1))] += event["t_rel"]
    processes = collections.Counter()
    for sid, seconds in elapsed.items():
        depth = sid.count("/")
        processes[("  " * depth) + starts.get(sid, "?")] += seconds
    by_label = collections.Counter()
    for (sid, category, label, nesting), seconds in regions.items():
        by_label["%s: %s/%s (depth %d)" % (starts.get(sid, "?"), category,
                                           label, nesting)] += seconds
    in_git = sum(s for sid, s in elapsed.items() if "/" not in sid)
    return {
        "wall": wall,
        "outside_git": max(0.0, wall - in_git),
        "processes": [[name, round(s, 3)]
                      for name, s in processes.most_common()],
        "regions": [[name, round(s, 3)]
                    for name, s in by_label.most_common(top)],
    }


def _command(argv):
    """``git fetch`` of ``["git", "-C", DIR, "fetch", ...]``;
    ``git-remote-http`` of a remote helper's argv."""
    name = os.path.basename(argv[0]) if argv else "git"
    if name.startswith("git-"):
        return name
    args = list(argv[1:])
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in ("-C", "-c", "--shallow-file", "--git-dir",
                      "--work-tree") and args:
            args.pop(0)
    return "git " + (args[0] if args else "")


# The run -----------------------------------------------------------------------

#: The paths ``--paths`` selects from, in the order they run.
PATHS = ("full", "shallow", "blobless-sparse", "refresh", "sparse-refresh",
         "cold", "new", "ready", "cold-bundle", "reuse", "reuse-purge",
         "sparse-cold", "sparse-new", "sparse-reuse")
#: ``--paths`` names that stand for several paths: both reuse paths; a
#: new directory, or a ready tree, from the pool that the cold path warms
#: (the same for sparse); every sparse path.
PATH_GROUPS = {"reuse": ("reuse", "reuse-purge"), "new": ("cold", "new"),
               "ready": ("cold", "ready"),
               "sparse-new": ("sparse-cold", "sparse-new"),
               "sparse": ("blobless-sparse", "sparse-refresh", "sparse-cold",
                          "sparse-new", "sparse-reuse")}
#: The paths that share the cold path's pool, which goes after the last.
COLD_POOL_PATHS = ("cold", "new", "ready")
SPARSE_POOL_PATHS = ("sparse-cold", "sparse-new")
#: The paths each ratio of ``TARGETS`` divides.
RATIO_PATHS = {"warm_reuse": ("reuse-purge", "refresh"),
               "warm_new": ("new", "shallow"),
               "ready_new": ("ready", "shallow"),
               "cold_bytes": ("cold", "full"),
               "cold_time": ("cold", "shallow"),
               "cold_bundle_bytes": ("cold-bundle", "cold"),
               "cold_bundle_time": ("cold-bundle", "shallow"),
               "sparse_cold": ("sparse-cold", "blobless-sparse"),
               "sparse_warm": ("sparse-reuse", "sparse-refresh")}


def selected_paths(text):
    """The paths a ``--paths`` value (``NAME,NAME``; None: every path)
    names, in ``PATHS`` order; ``Abort`` on a name that is none."""
    if text is None:
        return PATHS
    wanted = set()
    for name in (n.strip() for n in text.split(",")):
        if name not in PATHS and name not in PATH_GROUPS:
            raise Abort("unknown path %r in --paths" % name,
                        hint="paths are %s, and sparse for every sparse "
                        "path" % ", ".join(PATHS))
        wanted.update(PATH_GROUPS.get(name, (name,)))
    return tuple(name for name in PATHS if name in wanted)


def run(repo, work, behind=50, junk=2000, sparse=None, paths=PATHS,
        keep=False, bundle_parts=4):
    """The ``paths`` (``PATHS`` names), in one run; returns ``(results,
    ratios)``: the ratios whose paths all ran.  Each path's checkouts
    are removed before the next path, unless ``keep``."""
    git = tools.executable("git")
    base_env = tools.isolated_env(os.path.join(work, "home-setup"))
    os.makedirs(base_env["HOME"])
    root = os.path.join(work, "served")
    os.makedirs(root)
    served, branch, commits = served_copy(repo, root, base_env)
    if len(commits) < 2:
        raise Abort("%s has %d commit(s) on its first-parent line: the "
                    "warm paths need two or more" % (repo, len(commits)))
    behind = min(behind, len(commits) - 1)
    tip, base = commits[0], commits[behind]
    if not sparse:
        # directories of both the tip and the warm paths' base: gitbridge
        # refuses a directory its commit lacks
        at_base = tools.run([git, "-C", served, "ls-tree", "-d",
                             "--name-only", base], base_env).split()
        tops = [top for top in tools.run(
            [git, "-C", served, "ls-tree", "-d", "--name-only", tip],
            base_env).split() if top in at_base]
        sparse = [top for top in tops if not top.startswith(".")][:2] \
            or tops[:2]
    homes = {}
    for name in ("runtask", "gitbridge"):
        homes[name] = tools.isolated_env(os.path.join(work, "home-" + name))
        os.makedirs(homes[name]["HOME"])
    d = lambda *names: os.path.join(work, "co", *names)  # noqa: E731
    os.makedirs(d())

    #: Files deleted since the last timed path began, and the seconds
    #: the path waited, untimed, for the disk to settle before it, and
    #: whether the kernel's caches were dropped then.
    deleted, settled, dropped = [0], [0.0], [False]

    def remove(*names):
        for name in () if keep else names:
            deleted[0] += remove_tree(d(name))
    results = collections.OrderedDict()
    #: The row of each path that ran, by its ``PATHS`` name.
    rows = {}
    found_phases = {}

    def record(key, name, steps, total, origin, dest, pool=None,
               check=None, **facts):
        disk = pooling.disk_usage(*[p for p in (dest, pool) if p])
        results[name] = rows[key] = dict(
            steps={k: round(v, 3) for k, v in steps.items()},
            total=round(total, 3), disk=disk,
            checkout_disk=pooling.disk_usage(dest) if pool else disk,
            check=check, settled_seconds=round(settled[0], 1),
            caches_dropped=dropped[0],
            **dict(origin, **facts))
        print("timetotree: %s: %.2f s" % (name, total), file=sys.stderr,
              flush=True)

    with GitServer(root, stream=True) as server, \
            CountingProxy(server.url) as proxy:
        url = proxy.url + "repo.git"
        origin = Origin(proxy)

        def behind_tip(make):
            """Untimed: ``make()`` a cache as it was N commits ago (the
            origin's branch there), then the origin back at the tip."""
            set_branch(served, branch, base, base_env)
            make()
            origin.take()
            set_branch(served, branch, tip, base_env)
            # a worker's cache was written long before its next task: its
            # writeback must not land on the timed refresh
            settle()

        def full_clone():
            start = time.monotonic()
            tools.run([git, "clone", "-q", "--bare", url, d("full.git")],
                      base_env)
            record("full", "full clone (git clone --bare)",
                   {"clone": time.monotonic() - start},
                   time.monotonic() - start, origin.take(), d("full.git"))
            remove("full.git")

        def runtask_fresh(key, name, dirs):
            dest = d(name.replace(" ", "-"))
            start = time.monotonic()
            steps, _ = runtask_checkout(url, dest, branch, tip,
                                        homes["runtask"], sparse=dirs)
            record(key, name, steps, time.monotonic() - start,
                   origin.take(), dest,
                   check=tree_check(dest, tip, base_env), sparse=dirs)
            remove(dest)

        def runtask_refresh():
            def cached():
                runtask_checkout(url, d("runtask-cached"), branch, base,
                                 homes["runtask"])
                write_junk(d("runtask-cached"), junk, base_env)
            behind_tip(cached)
            trace = os.path.join(work, "trace-runtask.json")
            start = time.monotonic()
            steps, removed = runtask_checkout(
                url, d("runtask-cached"), branch, tip,
                dict(homes["runtask"], GIT_TRACE2_EVENT=trace,
                     GIT_TRACE2_EVENT_NESTING="10"))
            wall = time.monotonic() - start
            record("refresh", "run-task cached, %d behind, purged" % behind,
                   steps, wall, origin.take(), d("runtask-cached"),
                   check=tree_check(d("runtask-cached"), tip, base_env),
                   purged=removed)
            found_phases["run-task cached refresh"] = phases(trace, wall)
            remove("runtask-cached")

        def runtask_sparse_refresh():
            dest = d("runtask-sparse")

            def cached():
                runtask_checkout(url, dest, branch, base, homes["runtask"],
                                 sparse=sparse)
                write_junk(dest, junk, base_env)
            behind_tip(cached)
            start = time.monotonic()
            steps, removed = runtask_checkout(url, dest, branch, tip,
                                              homes["runtask"], sparse=sparse)
            record("sparse-refresh", "run-task cached blobless sparse, %d "
                   "behind, purged" % behind, steps,
                   time.monotonic() - start, origin.take(), dest,
                   check=tree_check(dest, tip, base_env), purged=removed,
                   sparse=sparse)
            remove("runtask-sparse")

        sparse_options = ("--filter", "blob:none", "--sparse-dirs",
                          ",".join(sparse))

        def gitbridge_sparse_fresh(key, name, dest):
            pool = d("pool-sparse")
            steps, wall, facts = gitbridge_checkout(
                url, pool, d(dest), tip, homes["gitbridge"],
                options=sparse_options)
            record(key, name, steps, wall, origin.take(), d(dest), pool,
                   check=tree_check(d(dest), tip, base_env), sparse=sparse,
                   **facts)

        def gitbridge_sparse_reuse():
            name, pool = "sparse-reuse", d("pool-sparse-reuse")

            def reused():
                gitbridge_checkout(url, pool, d(name), base,
                                   homes["gitbridge"], options=sparse_options)
                write_junk(d(name), junk, base_env)
            behind_tip(reused)
            trace = os.path.join(work, "trace-gitbridge-sparse.json")
            steps, wall, facts = gitbridge_checkout(
                url, pool, d(name), tip,
                dict(homes["gitbridge"], GIT_TRACE2_EVENT=trace,
                     GIT_TRACE2_EVENT_NESTING="10"), purge=True,
                options=sparse_options)
            found_phases["gitbridge sparse reuse --purge"] = phases(trace,
                                                                   wall)
            record(name, "gitbridge blobless sparse, reuse %d behind, "
                   "--purge" % behind, steps, wall, origin.take(), d(name),
                   pool, check=tree_check(d(name), tip, base_env),
                   left_untracked=leftover(d(name), base_env), sparse=sparse,
                   **facts)
            remove(name, "pool-sparse-reuse")

        def gitbridge_fresh(key, name, dest):
            pool = d("pool-cold")
            steps, wall, facts = gitbridge_checkout(url, pool, d(dest), tip,
                                                    homes["gitbridge"])
            record(key, name, steps, wall, origin.take(), d(dest), pool,
                   check=tree_check(d(dest), tip, base_env), **facts)

        def gitbridge_ready():
            # A ready tree of the warm pool (gitbridge ready-trees), made
            # off the clock at the commit N behind; the timed path takes
            # it into a new directory and brings it to the tip.
            pool = d("pool-cold")
            start = time.monotonic()
            tools.run([tools.executable("gitbridge"), "ready-trees",
                       "--sharebase", pool, "--count", "1", "-r", base, url],
                      homes["gitbridge"], cwd=work)
            refill = time.monotonic() - start
            ready_bytes = pooling.disk_usage(os.path.join(pool, "ready"))
            origin.take()
            steps, wall, facts = gitbridge_checkout(url, pool, d("ready"),
                                                    tip, homes["gitbridge"])
            record("ready", "gitbridge ready tree, new dir", steps, wall,
                   origin.take(), d("ready"), pool,
                   check=tree_check(d("ready"), tip, base_env),
                   refill_seconds=round(refill, 3),
                   ready_tree_bytes=ready_bytes, **facts)

        def gitbridge_bundles():
            # Published off the clock, as a nightly job would: a full
            # bundle at the commit N behind, served by a plain HTTP host
            # behind its own byte count; the timed path seeds a new pool
            # from its list and fetches the rest from the origin.
            output = os.path.join(work, "bundles")
            os.makedirs(output)
            tools.run([git, "-C", served, "config", "bundlegen.parts",
                       str(bundle_parts)], base_env)
            with FileServer(output) as host, \
                    CountingProxy(host.url) as counted:
                def publish():
                    tools.run([tools.executable("gitbridge"), "bundlegen",
                               "--repo", served, "--output", output,
                               "--base-url", counted.url.rstrip("/")],
                              homes["gitbridge"], cwd=work)
                start = time.monotonic()
                behind_tip(publish)
                publish_seconds = time.monotonic() - start
                settle()
                pool = d("pool-bundle")
                steps, wall, facts = gitbridge_checkout(
                    url, pool, d("cold-bundle"), tip, homes["gitbridge"],
                    options=("--bundle-uri", counted.url + "bundle-list"))
                host_requests, host_bytes = counted.take()
            record("cold-bundle", "gitbridge cold pool from bundles", steps,
                   wall, origin.take(), d("cold-bundle"), pool,
                   check=tree_check(d("cold-bundle"), tip, base_env),
                   bytes_from_bundle_host=host_bytes,
                   bundle_host_requests=host_requests,
                   bundle_bytes_published=pooling.disk_usage(output),
                   bundle_parts=bundle_parts,
                   publish_seconds=round(publish_seconds, 3), **facts)
            deleted[0] += remove_tree(output)
            remove("cold-bundle", "pool-bundle")

        def gitbridge_reuse(key, purge):
            name = key

            def reused():
                gitbridge_checkout(url, d("pool-" + name), d(name), base,
                                   homes["gitbridge"])
                write_junk(d(name), junk, base_env)
            behind_tip(reused)
            env = homes["gitbridge"]
            trace = os.path.join(work, "trace-gitbridge.json")
            if purge:
                env = dict(env, GIT_TRACE2_EVENT=trace,
                           GIT_TRACE2_EVENT_NESTING="10")
            steps, wall, facts = gitbridge_checkout(
                url, d("pool-" + name), d(name), tip, env, purge=purge)
            record(key, "gitbridge warm pool, reuse %d behind%s"
                   % (behind, ", --purge" if purge else ""), steps, wall,
                   origin.take(), d(name), d("pool-" + name),
                   check=tree_check(d(name), tip, base_env,
                                    untracked=purge),
                   left_untracked=leftover(d(name), base_env), **facts)
            if purge:
                found_phases["gitbridge reuse --purge"] = phases(trace, wall)
            remove(name, "pool-" + name)

        set_branch(served, branch, tip, base_env)
        # Timed, the origin at the tip; each cache made just before its
        # path, so that at most one path's checkouts take disk at a time.
        steps = {
            "full": full_clone,
            "shallow": lambda: runtask_fresh("shallow", "run-task shallow",
                                             None),
            "blobless-sparse": lambda: runtask_fresh(
                "blobless-sparse", "run-task shallow blobless sparse",
                sparse),
            "refresh": runtask_refresh,
            "sparse-refresh": runtask_sparse_refresh,
            "cold": lambda: gitbridge_fresh("cold", "gitbridge cold pool",
                                            "cold"),
            "new": lambda: gitbridge_fresh(
                "new", "gitbridge warm pool, new dir", "new"),
            "ready": gitbridge_ready,
            "cold-bundle": gitbridge_bundles,
            "reuse": lambda: gitbridge_reuse("reuse", False),
            "reuse-purge": lambda: gitbridge_reuse("reuse-purge", True),
            "sparse-cold": lambda: gitbridge_sparse_fresh(
                "sparse-cold", "gitbridge blobless sparse, cold pool",
                "sparse-cold"),
            "sparse-new": lambda: gitbridge_sparse_fresh(
                "sparse-new", "gitbridge blobless sparse, warm pool, new dir",
                "sparse-new"),
            "sparse-reuse": gitbridge_sparse_reuse,
        }
        last_cold = [key for key in paths if key in COLD_POOL_PATHS][-1:]
        last_sparse = [key for key in paths if key in SPARSE_POOL_PATHS][-1:]
        objects = git_objects(repo, base_env)
        for key in paths:
            big = deleted[0] >= BIG_DELETE
            settled[0] = settle(work if big else None)
            # after a checkout's deletion, ext4 makes the next whole-tree
            # write pay for it (quietdisk.drop_caches): at Firefox scale
            # gitbridge's cold update took 89 s after run-task's shallow
            # checkout was deleted, which had written the tree in 32
            dropped[0] = big and drop_caches([objects])
            deleted[0] = 0
            steps[key]()
            if [key] == last_cold:
                remove("cold", "new", "ready", "pool-cold")
            if [key] == last_sparse:
                remove("sparse-cold", "sparse-new", "pool-sparse")

    ratios = {}
    for key, (top, bottom) in RATIO_PATHS.items():
        if top in rows and bottom in rows:
            ratios[key] = _ratio(key, rows[top], rows[bottom])
    summary = {
        "repo": repo, "branch": branch, "tip": tip, "base": base,
        "behind": behind, "junk_files": junk, "sparse": sparse,
        "first_parent_commits": len(commits),
        "tip_files": len(tools.run([git, "-C", served, "ls-tree", "-r",
                                    "--name-only", tip],
                                   base_env).splitlines()),
        "checkout_workers": {
            "run-task": os.environ.get("RUN_TASK_GIT_CHECKOUT_WORKERS", "0"),
            "gitbridge": "0 unless configured"},
        "gitbridge_sparse": "gitbridge checkout --filter blob:none "
                            "--sparse-dirs " + ",".join(sparse),
        "paths": results,
        "phases": found_phases,
    }
    return summary, ratios


def _ratio(key, top, bottom):
    if key in ("warm_new", "ready_new"):
        return top["total"] / bottom["steps"]["checkout"]
    if key in ("cold_bytes", "cold_bundle_bytes"):
        return top["bytes_from_origin"] / bottom["bytes_from_origin"]
    return top["total"] / bottom["total"]


# Report --------------------------------------------------------------------------

def format_report(summary, ratios):
    mb = lambda n: "%.1f MB" % (n / 2 ** 20)  # noqa: E731
    lines = ["time to tree: %s, branch %s, tip %s, %d files; warm paths "
             "from %d commits behind, %d junk files"
             % (summary["repo"], summary["branch"], summary["tip"][:12],
                summary["tip_files"], summary["behind"],
                summary["junk_files"]), "",
             "| path | steps (s) | total | from origin | requests | from "
             "bundle host | disk (checkout + pool) | tree check |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in summary["paths"].items():
        steps = ", ".join("%s %.2f" % kv for kv in row["steps"].items())
        check = row["check"]
        verdict = "-" if check is None else (
            ("passed" if check["passed"] else "FAILED")
            + ("" if check["untracked_checked"] else " (junk kept: %d)"
               % row.get("left_untracked", 0)))
        host = row.get("bytes_from_bundle_host")
        lines.append("| %s | %s | %.2f s | %s | %d | %s | %s | %s |" % (
            name, steps, row["total"], mb(row["bytes_from_origin"]),
            row["requests"], "-" if host is None else mb(host),
            mb(row["disk"]), verdict))
    lines += ["", "sparse directories (cone mode, both tools): %s"
              % ", ".join(summary["sparse"]),
              "gitbridge sparse: " + summary["gitbridge_sparse"],
              "checkout.workers: run-task %s (0 = one per core), gitbridge "
              "%s" % (summary["checkout_workers"]["run-task"],
                      summary["checkout_workers"]["gitbridge"]),
              "whole-tree write = run-task shallow's checkout step", ""]
    lines += benchcli.target_lines(
        [target for target in TARGETS if target[1] in ratios], ratios,
        width=44)
    lines += ["%-48s %.2fx" % (label + ":", ratios[key])
              for label, key in SPARSE_RATIOS if key in ratios]
    for name, found in summary["phases"].items():
        if not found:
            continue
        lines += ["", "where the seconds go, %s (%.2f s; %.2f s outside "
                  "git):" % (name, found["wall"], found["outside_git"])]
        lines += ["  %7.3f s  process %s" % (s, proc) for proc, s
                  in found["processes"][:8]]
        lines += ["  %7.3f s  region  %s" % (s, region) for region, s
                  in found["regions"]]
    return "\n".join(lines)


def main(argv=None):
    parser = benchcli.command_line(sys.modules[__name__])
    parser.add_argument("--repo", help="Git repository, bare or not "
                        "(default: a history of the installed sources, "
                        "built once and cached)")
    parser.add_argument("--behind", type=int, default=50,
                        help="commits the warm checkouts are behind the "
                        "tip (default 50)")
    parser.add_argument("--junk-files", type=int, default=2000,
                        help="build products written into each reused "
                        "checkout before its refresh (default 2000)")
    parser.add_argument("--sparse", help="DIR,DIR: run-task's cone-mode "
                        "directories (default: the first two top-level "
                        "directories not named .*)")
    parser.add_argument("--paths", help="NAME,NAME: run only these paths "
                        "(%s; reuse is both reuse paths, new needs cold; "
                        "sparse is every sparse path; "
                        "default: all); a ratio is judged when both its "
                        "paths ran"
                        % ", ".join(PATHS))
    parser.add_argument("--keep", action="store_true", help="leave every "
                        "path's checkouts and pools in the work directory "
                        "(with --workdir) instead of removing them before "
                        "the next path: where removing 400,000 files takes "
                        "minutes, and there is disk for all of them")
    parser.add_argument("--bundle-parts", type=int, default=4,
                        help="bundlegen.parts of the cold-from-bundles "
                        "path: how many packs the full bundle is also "
                        "published as, for the checkout to index side by "
                        "side (default 4; 0: the bundle alone)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--workdir", help="where everything goes (default: "
                        "a temporary directory, removed afterwards)")
    args = parser.parse_args(argv)
    if args.behind < 1 or args.junk_files < 0 or args.bundle_parts < 0:
        raise Abort("--behind must be 1 or more, --junk-files and "
                    "--bundle-parts 0 or more")
    paths = selected_paths(args.paths)
    repo = os.path.abspath(args.repo) if args.repo else None
    if repo:
        git_objects(repo, tools.isolated_env(tempfile.gettempdir()))
    else:
        repo = default_repository()
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="vcsperf-timetotree-",
                            dir=args.workdir)
    try:
        summary, ratios = run(
            repo, work, args.behind, args.junk_files,
            [s for s in (args.sparse or "").split(",") if s] or None,
            paths, keep=args.keep and bool(args.workdir),
            bundle_parts=args.bundle_parts)
        print(format_report(summary, ratios))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"results": summary, "ratios": ratios,
                           "targets": {key: {"op": op, "target": target,
                                             "met": _met(ratios[key], op,
                                                         target)}
                                       for _l, key, op, target in TARGETS
                                       if key in ratios}},
                          fh, indent=2)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _met(value, op, target):
    return value <= target if op == "<=" else value >= target
