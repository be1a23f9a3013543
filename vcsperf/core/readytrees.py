"""Ready trees: fully written checkouts a pool keeps, handed out whole.

Writing a whole working tree is the cost of a new checkout from a warm
pool (about 33 s for 408,000 files).  A pooled store's ready trees are
complete checkouts of it (a working tree and its own index or dirstate,
made by the pooled-checkout engine like any checkout), kept in
``<sharebase>/ready/<store name>/``; a new checkout takes one with a
``rename`` onto DEST and brings it to the wanted revision the way a
reused checkout is brought (purge, update of what changed, verify), so
it writes only what differs.  A refill, off the task's clock, brings
each ready tree to the pool's revision and makes new ones up to a count.

The guarantees, and how they hold:

- A tree is handed out once: the take is one ``rename`` out of the ready
  directory; of two takers (or a taker and a refill), exactly one
  succeeds, the other finds the name gone and tries the next.
- A crash leaves no half tree and loses none: a take is that one rename
  (before it the tree is the pool's, after it DEST's, and its seal goes
  with it until the taker has brought it to its commit, so a rerun into
  DEST knows to purge it); a refill works on a tree under a busy name
  (``.busy-NAME``, renamed out first) that the next refill resumes.
- A tree changed behind the pool's back is never handed out as it is:
  each ready tree carries a seal of its metadata directory (every
  entry, the digest of every file -- HEAD, config, hooks, where its
  objects are -- and the stat identity and trailing checksum of its
  index); a tree whose
  seal does not hold, or that is not a plain directory, is set aside
  (``.damaged-NAME``) before anything runs in it, for the next refill to
  delete.  Files changed, added or removed in the working tree are what
  a reused checkout meets: the taker purges, updates and verifies.
- A task's writes never reach the pool: the tree handed out is no
  longer in it, and nothing in the pool links to it.
- Disk is bounded: a refill keeps exactly the count it is given and
  deletes what killed runs and takers set aside.

Copy-on-write clones (``FICLONE``, reflink on btrfs and XFS) make a new
ready tree from another one without writing its data again; where the
filesystem has none, a refill says so in one line and writes each tree
in full.  A take never copies: one rename costs the same on every
filesystem, and a clone of hundreds of thousands of files costs seconds.
What the filesystem cannot do for a take (DEST on another filesystem
than the ready trees) falls back to writing the whole tree, said in one
line.

The engine (``vcsperf.core.pooledcheckout``) takes a ready tree when its
adapter names one (``PooledCheckout.ready_trees``); an adapter's refill
command runs ``refill`` with a function that brings one tree, by path, to
the pool's revision.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import subprocess
import tempfile
from typing import Callable, NamedTuple, Sequence

from vcsperf.core import pooling

#: Where the ready trees of the pooled store ``NAME`` live in a share
#: base: ``<sharebase>/ready/NAME``.
READY_DIR = "ready"
#: A ready tree's name.
_TREE = re.compile(r"t-[0-9a-f]{16}")
BUSY = ".busy-"
DAMAGED = ".damaged-"
#: What ``pooling.discard`` leaves when killed before its deletion ends.
_DISCARDED = re.compile(r"\..+\.discarded-[0-9]+-[0-9]+")
#: The seal's file, in the tree's metadata directory (``.git``, ``.hg``).
SEAL = "vcsperf-ready-seal"
#: How many bytes of a sealed file are read: they are small (HEAD, a
#: config, a path); a bigger one is damage.
_SEALED_LIMIT = 1 << 20
#: How many entries of a metadata directory a seal holds: a checkout's
#: has a few dozen; more is damage.
_METADATA_ENTRIES = 10000
#: How many trailing bytes of a stamped file (an index's checksum) the
#: seal holds.
_TRAILER = 32
#: ``FICLONE`` from linux/fs.h: ``_IOW(0x94, 9, int)``.
FICLONE = 0x40049409


class Taken(NamedTuple):
    """A take: the tree handed out (None when none was), its sealed
    revision, the trees set aside on the way (``(name, problem)``), and
    why none was handed out when that is not the lack of a tree."""

    name: str | None
    revision: str | None
    set_aside: list[tuple[str, str]]
    refused: str | None = None


class ReadyTrees:
    """The ready trees of one pooled store, in ``directory``.

    ``metadir`` is the checkout's metadata directory (``.git``, ``.hg``):
    the seal holds all of it (what each entry is, the bytes of each file,
    a symlink's target), but for the big files in ``stamped`` (an index,
    a dirstate: paths under the tree), whose stat identity and trailing
    bytes it holds instead."""

    def __init__(self, directory: str, metadir: str,
                 stamped: Sequence[str]) -> None:
        self.directory = directory
        self.metadir = metadir
        self.stamped = tuple(stamped)

    @classmethod
    def of_store(cls, sharebase: str, store: str, metadir: str,
                 stamped: Sequence[str]) -> ReadyTrees:
        return cls(os.path.join(sharebase, READY_DIR,
                                os.path.basename(store)),
                   metadir, stamped)

    # Reading the pool ----------------------------------------------------

    def exists(self) -> bool:
        """Whether the pool keeps ready trees of this store (a refill
        made the directory)."""
        return os.path.isdir(self.directory)

    def names(self) -> list[str]:
        """The ready trees' names, lowest slot first."""
        try:
            entries = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(name for name in entries if _TREE.fullmatch(name))

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def same_filesystem(self, dest: str) -> bool:
        """Whether DEST (or the directory that will hold it) is on the
        ready trees' filesystem, where a rename moves a tree."""
        probe = os.path.abspath(dest)
        while not os.path.exists(probe):
            parent = os.path.dirname(probe)
            if parent == probe:
                return False
            probe = parent
        return os.stat(probe).st_dev == os.stat(self.directory).st_dev

    # Seals ----------------------------------------------------------------

    def seal(self, tree: str, revision: str) -> None:
        """Write the seal of ``tree``, at ``revision``, as it is now."""
        record = {"revision": revision, "files": self._fingerprint(tree)}
        path = os.path.join(tree, self.metadir, SEAL)
        # a new file (O_CREAT|O_EXCL|O_NOFOLLOW): never through a link
        # planted under the temporary name
        fd, tmp = tempfile.mkstemp(prefix=SEAL + ".tmp-",
                                   dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(record, fh, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def seal_problem(self, tree: str) -> tuple[str | None, str | None]:
        """``(revision, None)`` when ``tree``'s seal holds, else ``(None,
        what does not hold)``; reads the metadata directory, follows no
        symlink and opens nothing but regular files."""
        for directory in (tree, os.path.join(tree, self.metadir)):
            try:
                mode = os.lstat(directory).st_mode
            except OSError as err:
                return None, "%s: %s" % (os.path.relpath(directory, tree),
                                         err.strerror)
            if not stat.S_ISDIR(mode):
                return None, "%s is not a directory" % (
                    os.path.relpath(directory, tree))
        raw, problem = _read_regular(os.path.join(tree, self.metadir, SEAL),
                                     _SEALED_LIMIT)
        if problem:
            return None, "seal: %s" % problem
        try:
            record = json.loads(raw)
            revision, files = record["revision"], record["files"]
        except (ValueError, KeyError, TypeError):
            return None, "seal: not a seal"
        if not isinstance(revision, str) or not isinstance(files, dict):
            return None, "seal: not a seal"
        now = self._fingerprint(tree)
        if now == files:
            return revision, None
        for name in sorted(set(now) | set(files)):
            if files.get(name) != now.get(name):
                return None, "%s differs from the sealed one" % name
        return None, "seal: not a seal"

    def _fingerprint(self, tree: str) -> dict[str, object]:
        """Each entry under the metadata directory but the seal: a
        directory as such, a symlink by its target, a file by its digest
        (a stamped one by ``_stamp``), anything else by its kind."""
        found: dict[str, object] = {}
        top = os.path.join(tree, self.metadir)
        stamped = {os.path.normpath(name) for name in self.stamped}
        for folder, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, tree)
                if rel == os.path.join(self.metadir, SEAL):
                    continue
                if len(found) >= _METADATA_ENTRIES:
                    found["..."] = "more than %d entries" % (
                        _METADATA_ENTRIES)
                    return found
                try:
                    mode = os.lstat(path).st_mode
                except FileNotFoundError:
                    found[rel] = "missing"
                    continue
                if stat.S_ISLNK(mode):
                    found[rel] = "-> " + os.readlink(path)
                elif stat.S_ISDIR(mode):
                    found[rel] = "directory"
                elif rel in stamped:
                    found[rel] = _stamp(path)
                else:
                    data, problem = _read_regular(path, _SEALED_LIMIT)
                    found[rel] = problem or hashlib.sha256(
                        data).hexdigest()
        for name in stamped:
            found.setdefault(name, "missing")
        return found

    # The take ----------------------------------------------------------------

    def take(self, dest: str) -> Taken:
        """Hand one ready tree out: rename it to DEST (absent, or an empty
        directory).  Trees whose seal does not hold are set aside on the
        way; a tree another taker or a refill got first is skipped."""
        set_aside: list[tuple[str, str]] = []
        for name in self.names():
            path = self.path(name)
            revision, problem = self.seal_problem(path)
            if problem:
                if self._set_aside(name):
                    set_aside.append((name, problem))
                continue
            try:
                os.rename(path, dest)
            except FileNotFoundError:
                continue  # taken by another, or being refreshed
            except OSError as err:
                if err.errno == errno.EXDEV:
                    why = "DEST is on another filesystem"
                elif err.errno in (errno.ENOTEMPTY, errno.EEXIST,
                                   errno.ENOTDIR, errno.EISDIR):
                    why = "DEST is not an empty directory"
                else:
                    why = "cannot move a ready tree to DEST: %s" % (
                        err.strerror)
                return Taken(None, None, set_aside, why)
            return Taken(name, revision, set_aside)
        return Taken(None, None, set_aside)

    def taken_unfinished(self, dest: str) -> bool:
        """Whether DEST is a ready tree whose taker ended before it was
        brought to its commit: the seal goes with the tree until then."""
        return os.path.lexists(os.path.join(dest, self.metadir, SEAL))

    def finished(self, dest: str) -> None:
        """DEST, a tree taken, is now the checkout its taker wanted."""
        try:
            os.unlink(os.path.join(dest, self.metadir, SEAL))
        except FileNotFoundError:
            pass

    def _set_aside(self, name: str) -> bool:
        try:
            os.rename(self.path(name), self.path(DAMAGED + name))
            return True
        except FileNotFoundError:
            return False


# The refill ----------------------------------------------------------------------

class Refilled(NamedTuple):
    """What a refill did: ``(name, how)`` per tree kept (how: "refreshed",
    "resumed", "made", "cloned"), and the names deleted."""

    kept: list[tuple[str, str]]
    deleted: list[str]


def refill(trees: ReadyTrees, count: int, bring: Callable[[str], str],
           cloning: bool) -> Refilled:
    """Keep exactly ``count`` sealed ready trees, run under the refill's
    lock (``trees.directory + ".lock"``, the caller's).

    ``bring(path)`` makes the checkout at ``path`` (absent, a ready tree,
    or one a killed refill left) a clean checkout of the pool's revision
    and returns that revision.  Trees a killed refill left busy are
    resumed; trees beyond ``count``, and those takers set aside, are
    deleted; each kept tree is brought to the revision (renamed out
    first, so no taker gets it half done), sealed and put back; new trees
    are cloned from a kept one when ``cloning`` (copy-on-write), else
    written by ``bring``."""
    os.makedirs(trees.directory, exist_ok=True)
    kept: list[tuple[str, str]] = []
    deleted: list[str] = []
    try:
        entries = sorted(os.listdir(trees.directory))
    except FileNotFoundError:
        entries = []
    busy = [e[len(BUSY):] for e in entries if e.startswith(BUSY)
            and _TREE.fullmatch(e[len(BUSY):])]
    for entry in entries:
        if entry.startswith(DAMAGED) and _TREE.fullmatch(
                entry[len(DAMAGED):]) or _DISCARDED.fullmatch(entry):
            _remove(trees.path(entry))
            deleted.append(entry)
    work = [(name, "resumed") for name in busy] + [
        (name, "refreshed") for name in trees.names()]
    for name, how in work:
        if len(kept) >= count:
            _remove(trees.path(BUSY + name if how == "resumed" else name))
            deleted.append(name)
            continue
        if how == "refreshed":
            try:
                os.rename(trees.path(name), trees.path(BUSY + name))
            except FileNotFoundError:
                continue  # taken meanwhile
        _finish(trees, name, bring)
        kept.append((name, how))
    while len(kept) < count:
        name = _free_slot(trees, {kept_name for kept_name, _ in kept})
        busy_path = trees.path(BUSY + name)
        how = "made"
        if cloning and kept:
            clone_tree(trees.path(kept[0][0]), busy_path)
            how = "cloned"
        _finish(trees, name, bring)
        kept.append((name, how))
    return Refilled(kept, deleted)


def _free_slot(trees: ReadyTrees, kept: set[str]) -> str:
    """The lowest tree name in use by no tree: names are slots, so the
    refs a system keeps per checkout path (Git's ``refs/checkouts/``)
    number at most the most trees a pool kept."""
    taken = kept | set(os.listdir(trees.directory))
    slot = 0
    while _slot(slot) in taken or BUSY + _slot(slot) in taken:
        slot += 1
    return _slot(slot)


def _slot(number: int) -> str:
    return "t-%016x" % number


def _finish(trees: ReadyTrees, name: str,
            bring: Callable[[str], str]) -> None:
    busy = trees.path(BUSY + name)
    revision = bring(busy)
    trees.seal(busy, revision)
    os.rename(busy, trees.path(name))


# Copy-on-write ------------------------------------------------------------------

def reflink_problem(directory: str) -> str | None:
    """None when files in ``directory`` can be cloned copy-on-write
    (``FICLONE``), else why not, from the kernel's answer."""
    source = target = None
    try:
        source = tempfile.NamedTemporaryFile(dir=directory,
                                             prefix=".reflink-probe-")
        source.write(b"probe\n")
        source.flush()
        target = tempfile.NamedTemporaryFile(dir=directory,
                                             prefix=".reflink-probe-")
        fcntl.ioctl(target.fileno(), FICLONE, source.fileno())
        return None
    except OSError as err:
        return "FICLONE: %s" % (err.strerror or err)
    finally:
        for handle in (source, target):
            if handle is not None:
                handle.close()


def clone_tree(source: str, target: str) -> None:
    """A copy-on-write clone of the tree ``source`` at ``target``
    (``cp --reflink=always``: it fails rather than copy data)."""
    pooling.discard(target)
    subprocess.run(["cp", "-a", "--reflink=always", "--", source, target],
                   check=True, capture_output=True)


# Helpers ----------------------------------------------------------------------

def _remove(path: str) -> None:
    """Delete a tree of the pool's, or what was put in its place (a
    symlink is removed, not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        pooling.discard(path)
    else:
        os.unlink(path)


def _read_regular(path: str, limit: int) -> tuple[bytes, str | None]:
    """The bytes of the regular file ``path``, or ``(b"", problem)`` when
    it is missing, a symlink, a special file or bigger than ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        return b"", "%s: %s" % (os.path.basename(path),
                                err.strerror or err)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", "%s is not a regular file" % os.path.basename(path)
        if st.st_size > limit:
            return b"", "%s is %d bytes" % (os.path.basename(path),
                                            st.st_size)
        return os.read(fd, limit + 1), None
    finally:
        os.close(fd)


def _stamp(path: str) -> object:
    """What a rewrite of the big file ``path`` changes: its stat identity
    and trailing bytes (an index's checksum)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        return err.strerror or str(err)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        os.lseek(fd, max(0, st.st_size - _TRAILER), os.SEEK_SET)
        trailer = os.read(fd, _TRAILER)
        return [st.st_size, st.st_mtime_ns, st.st_ino, trailer.hex()]
    finally:
        os.close(fd)

