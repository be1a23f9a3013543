"""Reproducible repositories built from real published content.

Two sources of real content:

- ``pip_releases``: successive releases of pip (the pure-Python wheels
  listed in ``data/pip-releases.tsv`` with their sha256 and upload time),
  downloaded once with pip into a cache and committed in release order with
  their release dates.  This is the test suite's real-content repository.
- ``installed_sources``: the Python sources of installed distributions
  (Mercurial, dulwich, ...), one changeset per directory.  It needs no
  network, which is what the demo wants.

Either is a sequence of ``Snapshot`` trees; ``write_hg`` and ``write_git``
commit them with the real ``hg`` and ``git`` binaries.  ``spread`` picks
revisions of a history to check out.
"""

import concurrent.futures
import heapq
import importlib.metadata
import itertools
import os
import sys
import tempfile
import zipfile
from calendar import timegm
from time import strptime

from vcsperf.core.bundlestore import sha256_file
from vcsperf.core.process import run

AUTHOR = "vcsperf history <history@vcsperf.invalid>"
RELEASES_TABLE = os.path.join(os.path.dirname(__file__), "data",
                              "pip-releases.tsv")


class Snapshot:
    """One commit: a full tree of ``files`` (path -> bytes) at ``date``
    (seconds since the epoch, UTC) with ``message``."""

    __slots__ = ("date", "message", "files")

    def __init__(self, date, message, files):
        self.date = date
        self.message = message
        self.files = files


class Release:
    __slots__ = ("version", "date", "filename", "sha256", "size")

    def __init__(self, version, date, filename, sha256, size):
        self.version = version
        self.date = date
        self.filename = filename
        self.sha256 = sha256
        self.size = size


def pip_release_table(path=RELEASES_TABLE):
    """The fixed list of releases, oldest first."""
    releases = []
    with open(path) as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            version, stamp, filename, sha256, size = line.split("\t")
            date = timegm(strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
            releases.append(Release(version, date, filename, sha256,
                                    int(size)))
    return releases


def default_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.environ.get("VCSPERF_CACHE") or os.path.join(base, "vcsperf")


def _download(release, wheel_dir):
    """Download one wheel with pip unless a verified copy is cached."""
    final = os.path.join(wheel_dir, release.filename)
    if os.path.exists(final) and sha256_file(final)[0] == release.sha256:
        return final
    os.makedirs(wheel_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheel_dir) as tmp:
        fetched = pip_download("pip==%s" % release.version, release.filename,
                               release.sha256, tmp, "--only-binary", ":all:")
        os.replace(fetched, final)
    return final


def pip_download(requirement, filename, sha256, dest, *options, env=None):
    """Download ``requirement`` (without its dependencies) with pip into
    the directory ``dest`` and check that its file ``filename`` has
    ``sha256``; returns the file's path."""
    run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--dest", dest, *options, requirement], env)
    path = os.path.join(dest, filename)
    actual = sha256_file(path)[0]
    if actual != sha256:
        raise RuntimeError("%s has sha256 %s, expected %s"
                           % (filename, actual, sha256))
    return path


def cached_directory(path, build):
    """``path``, a directory made once: ``build(scratch)`` makes it in an
    empty scratch directory beside ``path`` and returns where, and that is
    renamed to ``path``, so that an interrupted build leaves nothing behind
    and of two concurrent builds one wins whole."""
    if not os.path.isdir(path):
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=parent) as scratch:
            built = build(scratch)
            try:
                os.rename(built, path)
            except OSError:
                if not os.path.isdir(path):
                    raise
    return path


def fetch_pip_releases(cache_dir=None, limit=None, jobs=4):
    """Download (or reuse) the wheels of the release table; returns
    ``[(release, wheel_path)]`` oldest first.  Hashes are always checked."""
    releases = pip_release_table()[:limit]
    wheel_dir = os.path.join(cache_dir or default_cache_dir(), "pip-wheels")
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        paths = list(pool.map(lambda r: _download(r, wheel_dir), releases))
    return list(zip(releases, paths))


def pip_releases(cache_dir=None, limit=None):
    """Snapshots of successive pip releases, oldest first."""
    for release, wheel in fetch_pip_releases(cache_dir, limit):
        with zipfile.ZipFile(wheel) as archive:
            files = {info.filename: archive.read(info)
                     for info in archive.infolist() if not info.is_dir()}
        yield Snapshot(release.date, "pip %s" % release.version, files)


def installed_sources(distributions=("mercurial", "dulwich", "cffi",
                                     "pycparser"),
                      start=1262304000, step=3600):
    """Snapshots adding the installed ``.py`` files of ``distributions``
    one directory at a time, in a fixed order with fixed dates."""
    tree = {}
    date = start
    for name in distributions:
        dist = importlib.metadata.distribution(name)
        by_dir = {}
        for entry in dist.files or ():
            if entry.suffix == ".py" and "__pycache__" not in entry.parts:
                by_dir.setdefault(os.path.dirname(str(entry)), []).append(entry)
        for directory in sorted(by_dir):
            for entry in sorted(by_dir[directory], key=str):
                with open(dist.locate_file(entry), "rb") as fh:
                    tree[str(entry)] = fh.read()
            date += step
            yield Snapshot(date, "%s %s: %s" % (name, dist.version, directory),
                           dict(tree))


def _update_tree(workdir, old, new):
    """Make the files of ``workdir`` go from tree ``old`` to tree ``new``."""
    for rel in old.keys() - new.keys():
        os.unlink(os.path.join(workdir, rel))
    for rel, data in new.items():
        if old.get(rel) != data:
            path = os.path.join(workdir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)


def write_hg(snapshots, dest, hg="hg", env=None, progress=None):
    """Commit ``snapshots`` into a new Mercurial repository at ``dest``."""
    run([hg, "init", dest], env)
    tree = {}
    for count, snap in enumerate(snapshots, 1):
        _update_tree(dest, tree, snap.files)
        tree = snap.files
        run([hg, "-R", dest, "commit", "-A", "-q", "-u", AUTHOR, "-d",
             "%d 0" % snap.date, "-m", snap.message], env, cwd=dest)
        if progress:
            progress(count, snap)


def write_git(snapshots, dest, git="git", env=None, progress=None):
    """Commit ``snapshots`` into a new Git repository at ``dest``."""
    run([git, "init", "-q", "-b", "main", dest], env)
    name, email = AUTHOR[:-1].split(" <")
    commit_env = dict(env or os.environ, GIT_AUTHOR_NAME=name,
                      GIT_AUTHOR_EMAIL=email, GIT_COMMITTER_NAME=name,
                      GIT_COMMITTER_EMAIL=email)
    tree = {}
    for count, snap in enumerate(snapshots, 1):
        _update_tree(dest, tree, snap.files)
        tree = snap.files
        stamp = "@%d +0000" % snap.date
        commit_env["GIT_AUTHOR_DATE"] = commit_env["GIT_COMMITTER_DATE"] = stamp
        run([git, "-C", dest, "add", "-A"], commit_env)
        run([git, "-C", dest, "commit", "-q", "--allow-empty", "-m",
             snap.message], commit_env)
        if progress:
            progress(count, snap)


def spread(revisions, count, newest=1.0, usable=None):
    """Up to ``count`` of ``revisions`` (a sequence, the newest first)
    spread over the newest ``newest`` share of them (and never fewer than
    ``count`` of them): the newest first, then each one as far from those
    picked before, and from the end of that share, as it can be.  With
    ``usable``, only revisions it accepts, of the first ``count + 16`` it
    is asked about."""
    window = min(len(revisions), max(count, int(len(revisions) * newest)))
    candidates = (revisions[i] for i in _farthest_first(window))
    if usable is not None:
        candidates = filter(usable, itertools.islice(candidates, count + 16))
    return list(itertools.islice(candidates, count))


def _farthest_first(size):
    """``0 .. size - 1``: 0 first, then each as far from those before and
    from ``size`` as it can be (of two as far, the lower)."""
    if size > 0:
        yield 0
    gaps = [(-size, 0, size)]
    while gaps:
        _, low, high = heapq.heappop(gaps)
        if high - low > 1:
            middle = (low + high) // 2
            yield middle
            heapq.heappush(gaps, (low - middle, low, middle))
            heapq.heappush(gaps, (middle - high, middle, high))
