"""What ``gitbridge checkout`` knows of a checkout it left clean, so that
the next ``--purge`` lists only the directories changed since.

``git clean -ffdx`` reads every directory of the working tree to find
what the index does not hold: at Firefox's size 40,000 directories and
427,000 names, seconds on every reuse.  A directory's stat data (inode,
mtime, ctime) changes whenever a name in it is added, removed or renamed,
so a directory whose stat data is what it was when the tree was known
clean holds the same names: all tracked.  Only the others need reading.

The record, ``<git dir>/gitbridge-clean-tree``, is written after a
checkout that left the tree holding nothing but the index: one written
into a new directory, or one purged and verified.  It holds the commit
checked out, the checksum of the index then, a time read from the
filesystem before any directory was examined, and the stat data of every
directory of the commit's tree.  After a purge from the record, a
directory the purge found unchanged and the checkout did not touch keeps
its stat data unexamined, and every other is recorded racy: at Firefox's
size that saves an lstat of 40,000 directories, and nothing written into
DEST while that run went on is recorded clean.  A record made afresh
(after a new checkout, or ``git clean``) reads its clock once the
checkout is verified: what another process writes into DEST during
that checkout, while the run holds DEST's lock, may be missed.  It is
used while the index's checksum is unchanged or, once a stock ``git``
rewrote the index (``git status`` does, to drop what the monitor below
left in it), while the index still holds exactly the commit's tree
(``git diff-index --cached``: 0.07 s at Firefox's size); an index
holding other entries (``git add``, ``git rm --cached``) voids it.
Racy timestamps as in Git: a directory whose mtime or ctime is not
before the recorded time may have changed in the same clock tick as it
was examined, so it counts as changed.  A
change to a directory moves its ctime to the present, which
``touch``/``utime`` cannot set back, so stat data equal to the record's
means no name changed.

The purge removes exactly what ``git clean -ffdx`` removes, and keeps
what it keeps: in a tracked directory, a regular file or symbolic link
the commit does not hold, and a directory that is no directory of the
commit (removed whole, nested repositories too); never an entry named
``.git``, nor a FIFO, socket or device (git skips them); a submodule's
directory, or a directory where the commit has a file, is left whole.  Anything it cannot do exactly (no record, a
different index, a sparse checkout, a removal that fails) is ``Fallback``:
the caller runs ``git clean -ffdx``.

The tracked files are compared with the index once, beside the pull
(``changed_files``, at the lowest CPU priority, so the pull keeps its
core): ``git checkout --force`` would otherwise lstat every one of them
after it (``preload``: half a second of its second at Firefox's 408,000
files on two cores), and nothing in that comparison needs what the pull
brings.  The checkout learns the result
through the one way git lets another process tell it which files
changed, a filesystem monitor hook (``core.fsmonitor``, version 2):
here no monitor, but a command that prints the list just found
(``trusting_all_but``).  Git then lstats those files only, and the
ones it writes.  The list holds while the index is the one it was found
against (its checksum); a tracked file changed between the comparison
and the checkout, while the run holds DEST's lock, is missed, as the
record misses a name added then.  Git keeps, in the index, which
entries the monitor vouched for (its ``FSMN`` extension) and trusts
them only under a monitor: a stock git without ``core.fsmonitor``
drops them, and the next checkout lstats every file once more.  Git
leaves the files it writes for the monitor to vouch for, so a new
checkout compares its files once more at its end (``git update-index
--refresh`` under the same hook), or its first reuse would lstat them
all.
"""

import array
import collections
import concurrent.futures
import contextlib
import glob
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time

#: The record's file name under the checkout's git directory.
NAME = "gitbridge-clean-tree"
_MAGIC = b"gitbridge-clean-tree 1\n"
#: The largest record read: 24 bytes of stat data and a name for each of
#: 40,000 directories take 3 MB at Firefox's size.
_LARGEST = 256 * 2**20
#: A commit's full hash (SHA-1 or SHA-256).
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
#: Stat data no directory has: a directory recorded racily.
_RACY = (-1, -1, -1)
#: Stat data is kept as native 64-bit integers (the record is local).
_ARRAY = "q"
_LIMIT = 2 ** 63
#: Removals at a time (see ``_remove``).
_REMOVERS = 8
#: Components no directory of a tree has (between NULs once the record's
#: names are lowered and split at "/"): empty (an absolute path, "a//b"),
#: ".", ".." or ".git".
_NOT_A_TREE_COMPONENT = (b"\0\0", b"\0.\0", b"\0..\0", b"\0.git\0")


class Fallback(Exception):
    """The purge cannot be done exactly from the record: ``git clean``."""


def _git(repo, *args, input=None, nice=False):
    """git's output in ``repo``, as bytes (paths are bytes to the
    filesystem); ``nice``: at the lowest CPU priority.  Objects are read
    as they are: a replace ref planted in DEST (where the purge may read
    trees) must not make a tracked file look untracked."""
    command = ("nice", "-n", "19", "git") if nice and shutil.which(
        "nice") else ("git",)
    try:
        proc = subprocess.run(command + args, cwd=repo, input=input,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(os.environ, GIT_LITERAL_PATHSPECS="1",
                                       GIT_NO_REPLACE_OBJECTS="1"))
    except OSError as failure:
        raise Fallback(str(failure))
    if proc.returncode:
        name = next(arg for arg in args
                    if not arg.startswith("-") and "=" not in arg)
        raise Fallback("git %s failed: %s" % (name, os.fsdecode(
            proc.stderr).strip()))
    return proc.stdout


def index_checksum(index):
    """The trailing checksum of the index file ``index``, or None when it
    has none (missing, or written with ``index.skipHash``)."""
    try:
        with open(index, "rb") as fh:
            fh.seek(-32, os.SEEK_END)
            tail = fh.read()
    except OSError:
        return None
    # SHA-1 (20 bytes) or SHA-256 (32): the last 20 are in both
    return None if tail[-20:] == bytes(20) else tail.hex()


def changed_files(dest, index):
    """``(index checksum, names)``: the tracked files of DEST that differ
    from its index (``git diff-files``, every file compared, as ``git
    checkout --force`` compares them, and no monitor trusted), each name
    ending in NUL; ``index``: the index's path.  ``Fallback`` when git
    fails, or the index changed while git read it."""
    before = index_checksum(index)
    # at the lowest priority: the pull beside it comes first, and the
    # comparison takes what cores it leaves
    names = _git(dest, "-c", "core.fsmonitor=false", "diff-files",
                 "--name-only", "-z", nice=True)
    if before is None or index_checksum(index) != before:
        raise Fallback("the index changed while it was compared")
    return before, names


@contextlib.contextmanager
def trusting_all_but(changed):
    """git's ``-c`` options under which a checkout lstats only the files
    ``changed`` names of the index's: ``changed`` is ``(answer, names)``,
    ``names`` as ``changed_files`` gives them, told to git by a monitor
    hook that prints them from the file ``answer`` (written anew, removed
    afterwards).  None of them where ``changed`` is None, or ``answer``
    cannot be written."""
    if changed is None:
        yield []
        return
    answer, names = changed
    # under DEST's lock: another's temporary answer is a killed run's
    for leftover in glob.glob(glob.escape(answer) + ".tmp-*"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)
    tmp = "%s.tmp-%d" % (answer, os.getpid())
    # the token git keeps in the index and hands back next time: ignored
    token = b"gitbridge:%d\0" % time.time_ns()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                     | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(token + names)
        os.replace(tmp, answer)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        yield []
        return
    try:
        # git runs the hook through the shell, appending its version and
        # token: ":" takes them
        yield ["-c", "core.fsmonitor=cat %s; :" % shlex.quote(answer),
               "-c", "core.fsmonitorHookVersion=2"]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(answer)


def directories(store, commit):
    """Every directory of ``commit``'s tree (b"" for the top)."""
    out = _git(store, "ls-tree", "-r", "-d", "-z", commit)
    # ``-d`` lists submodules too: their directories are no tree's, the
    # purge leaves them whole (and a record naming one is no record)
    return [b""] + [line.partition(b"\t")[2] for line in out.split(b"\0")
                    if line.startswith(b"040000 tree ")]


def changed_directories(store, old, new, dirs):
    """``(directories, touched)``: ``dirs``, the directories of ``old``'s
    tree, as they are in ``new``'s, and those of them whose entries
    differ between the two (the top among them), where a checkout from
    ``old`` to ``new`` wrote or removed something: ``git diff-tree -t``
    lists the trees added, deleted and changed."""
    out = _git(store, "diff-tree", "-t", "-z", "--no-renames", "--raw", old,
               new)
    fields = out.split(b"\0")
    found, touched = set(dirs), {b""}
    for info, path in zip(fields[0::2], fields[1::2]):
        old_mode, new_mode = info.lstrip(b":").split(b" ")[:2]
        if old_mode == b"040000" and new_mode != b"040000":
            found.discard(path)
        elif new_mode == b"040000":
            found.add(path)
            touched.add(path)
    return sorted(found), touched


def leftovers(dest, store, old, new, kept):
    """What a purge from the record leaves that ``git checkout`` from
    ``old`` to ``new`` cannot take away: the paths ``old`` has and ``new``
    lacks where something is still in DEST (``git checkout`` only warns
    when it cannot unlink a directory put where a file was, or a
    submodule's), and the directories the purge kept (``kept``, where
    the index had a file) that ``new`` makes directories, holding what
    the index never had.  Only the paths the commits differ in are
    looked at: one ``lstat`` each.  What lies there is untracked; the
    caller runs ``git clean``."""
    out = _git(store, "diff-tree", "-r", "-t", "-z", "--no-renames", "--raw",
               old, new)
    fields = out.split(b"\0")
    present, trees, deleted = set(), set(), []
    for info, path in zip(fields[0::2], fields[1::2]):
        new_mode = info.lstrip(b":").split(b" ")[1]
        if new_mode == b"000000":
            deleted.append(path)
        else:
            present.add(path)
            if new_mode == b"040000":
                trees.add(path)
    found = [name for name in kept if name in trees]
    dest = os.fsencode(dest)
    for name in deleted:
        if name not in present and os.path.lexists(os.path.join(dest, name)):
            found.append(name)
    return found


def write(path, dest, commit, index, dirs, recorded=None):
    """Record that DEST, at ``commit`` with the index checksum ``index``,
    holds nothing but the index; ``dirs``: the commit's directories, each
    examined now, or, with ``recorded`` (``Found.still_recorded``), none:
    those it holds keep their stat data, the others are recorded racy,
    to be read by the next purge (they changed since that purge began
    reading DEST, so what was found in them then may not be all)."""
    with _replacing(path) as fh, _directory(dest) as top:
        # the filesystem's clock before any directory is examined
        now = os.fstat(fh.fileno()).st_mtime_ns
        data = array.array(_ARRAY)
        for name in dirs:
            if recorded is not None:
                data.extend(recorded.get(name, _RACY))
                continue
            try:
                st = os.lstat(name or b".", dir_fd=top)
                found = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
                if st.st_mtime_ns >= now or st.st_ctime_ns >= now \
                        or st.st_ino >= _LIMIT \
                        or not stat.S_ISDIR(st.st_mode):
                    found = _RACY
            except FileNotFoundError:
                found = _RACY
            data.extend(found)
        fh.write(_MAGIC + b"%s %s %d %d\n" % (
            commit.encode(), index.encode(), now, len(dirs)))
        fh.write(data.tobytes())
        fh.write(b"\0".join(dirs))


@contextlib.contextmanager
def _replacing(path):
    """A new file, open for writing, that replaces ``path`` once written
    whole, and is removed if the writing fails.  Under DEST's lock:
    another's temporary file there is a killed run's, removed first.  A
    new file (O_CREAT|O_EXCL|O_NOFOLLOW): never written through a link
    planted under the temporary name."""
    for leftover in glob.glob(glob.escape(path) + ".tmp-*"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-",
                               dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _directory(path):
    """An open descriptor of the directory ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def read(path):
    """``(commit, index checksum, directories, their stat data)`` of the
    record ``path`` (stat data: an array of inode, mtime and ctime in
    nanoseconds for each directory), or None when it is missing or not
    one (a link, a FIFO or a device in its place is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = fh.read(_LARGEST + 1)
    if not data.startswith(_MAGIC) or len(data) > _LARGEST:
        return None
    head, _, body = data[len(_MAGIC):].partition(b"\n")
    try:
        commit, index, _now, count = head.decode("ascii").split(" ")
        count = int(count)
        if not _COMMIT.fullmatch(commit):
            # it goes to git as an argument
            return None
        stats = array.array(_ARRAY)
        size = 3 * count * stats.itemsize
        stats.frombytes(body[:size])
    except (ValueError, UnicodeDecodeError):
        return None
    names = body[size:]
    # the top (b"") first, then names of trees only: nothing the purge
    # reads may lie outside DEST or in a .git
    if count > 1 and (not names.startswith(b"\0")
                      or _holds_no_tree_path(names[1:])):
        return None
    dirs = names.split(b"\0")
    if len(dirs) != count or len(stats) != 3 * count or dirs[0]:
        return None
    return commit, index, dirs, stats


def _holds_no_tree_path(names):
    """Whether the NUL-separated ``names`` hold one no tree can hold."""
    components = b"\0%s\0" % names.lower().replace(b"/", b"\0")
    return any(bad in components for bad in _NOT_A_TREE_COMPONENT)


class Found:
    """What ``find`` found in DEST: ``files`` (files and links) and
    ``trees`` (directories, removed whole) to remove; ``kept``, the
    directories left whole where the index has a file, link or submodule
    (see ``leftovers``); ``index``, the index's checksum it was found
    with; and which of the record's directories had their stat data
    unchanged, which a new record may keep (``still_recorded``)."""

    def __init__(self, dest, record, index, unchanged, read, files, trees,
                 kept):
        self.dest, self.record, self.unchanged = dest, record, unchanged
        self.read, self.index = read, index
        self.files, self.trees, self.kept = files, trees, kept

    def remove(self):
        """Remove what was found; how many entries (a directory counts
        once, as git clean says).  It may have been found a while ago
        (beside the pull): the directories it was found in are looked at
        again first, and if one is no longer a directory below DEST (a
        symbolic link put in its place, or in a parent's, would lead the
        removal out of DEST), ``Fallback``."""
        _real_directories(self.dest, self.read)
        removed = len(self.files) + len(self.trees)
        _remove(list(self.files), self.trees)
        return removed

    def still_recorded(self, touched):
        """``{directory: stat data}`` of the record's directories found
        unchanged, but those in ``touched``: a new record may keep them
        without examining them again.  Their ctimes are before the
        record's clock, so any later change gives them another."""
        _commit, _index, dirs, stats = self.record
        return {dirs[at]: tuple(stats[3 * at:3 * at + 3])
                for at in self.unchanged if dirs[at] not in touched}


def find(dest, store, record, index):
    """What ``git clean -ffdx`` would remove from DEST (a ``Found``),
    reading only the directories changed since ``record`` (``read``);
    ``index``: the index's checksum now; ``store``: a repository holding
    the record's commit.  Removes nothing; ``Fallback`` when it cannot be
    exact."""
    if record is None:
        raise Fallback("no record of a clean tree")
    commit, recorded_index, dirs, stats = record
    if index is None:
        raise Fallback("no index")
    if index != recorded_index:
        # rewritten: by a stock git (``git status`` refreshing it), or
        # with other entries (``git add``, ``git rm --cached``)
        try:
            _git(dest, "diff-index", "--cached", "--quiet", commit)
        except Fallback:
            raise Fallback("the index changed since the tree was clean")
    dest = os.fsencode(dest)
    changed, unchanged = [], []
    # directories that are gone or no longer directories (a symbolic link
    # put in a directory's place must not lead the purge out of DEST):
    # what lies under them is not looked at, their parents changed
    gone = []
    with _directory(dest) as top:
        for at, name in enumerate(dirs):
            if gone and _under(name, gone):
                continue
            try:
                st = os.lstat(name or b".", dir_fd=top)
            except FileNotFoundError:
                gone.append(name + b"/")
                continue
            except OSError as failure:
                raise Fallback(str(failure))
            if not stat.S_ISDIR(st.st_mode):
                gone.append(name + b"/")
                continue
            if st.st_ctime_ns != stats[3 * at + 2] \
                    or st.st_mtime_ns != stats[3 * at + 1] \
                    or st.st_ino != stats[3 * at]:
                changed.append(name)
            else:
                unchanged.append(at)
    recorded = set(dirs)
    files, trees, kept, read = [], [], [], []
    while changed:
        tracked = _tracked(store, commit, changed)
        deeper = []
        for name in changed:
            deeper.extend(_untracked(dest, name, tracked[name], recorded,
                                     files, trees, kept))
        read.extend(changed)
        changed = deeper
    return Found(dest, record, index, unchanged, read, files, trees, kept)


def _real_directories(dest, names):
    """``Fallback`` unless each of ``names`` (relative to DEST) and each
    of its parents is a directory, not a symbolic link to one."""
    seen = set()
    with _directory(dest) as top:
        for name in names:
            parts = name.split(b"/") if name else []
            for end in range(1, len(parts) + 1):
                path = b"/".join(parts[:end])
                if path in seen:
                    continue
                try:
                    mode = os.lstat(path, dir_fd=top).st_mode
                except OSError as failure:
                    raise Fallback(str(failure))
                if not stat.S_ISDIR(mode):
                    raise Fallback("%s is no longer a directory"
                                   % os.fsdecode(path))
                seen.add(path)


def _under(name, gone):
    """Whether ``name`` lies under one of the directories ``gone`` (each
    ending in "/"; parents come before children in a record)."""
    return any(name.startswith(prefix) for prefix in gone)


def _untracked(dest, name, tracked, dirs, files, trees, kept):
    """List the untracked entries of the changed directory ``name``:
    files and links in ``files``, directories in ``trees``; ``tracked``:
    its entries in the commit, name to mode.  Returns the tracked
    directories in it that the record lacks (read next)."""
    unrecorded = []
    try:
        entries = list(os.scandir(os.path.join(dest, name)))
    except FileNotFoundError:
        return []
    except OSError as failure:
        raise Fallback(str(failure))
    for entry in entries:
        if entry.name == b".git":
            continue
        mode = tracked.get(entry.name)
        try:
            if entry.is_dir(follow_symlinks=False):
                if mode == b"40000":
                    path = name + b"/" + entry.name if name else entry.name
                    if path not in dirs:
                        unrecorded.append(path)
                elif mode is None:
                    trees.append(entry.path)
                else:
                    # a submodule, or a directory where the index has a
                    # file: git clean leaves it whole, checkout's to deal
                    kept.append(
                        name + b"/" + entry.name if name else entry.name)
            elif entry.is_file(follow_symlinks=False) \
                    or entry.is_symlink():
                if mode is None or mode in (b"40000", b"160000"):
                    files.append(entry.path)
            # else a FIFO, socket or device: git clean skips them
        except OSError as failure:
            raise Fallback(str(failure))
    return unrecorded


def _remove(files, trees):
    """Remove ``files`` and the directory trees ``trees`` (links are not
    followed), many at a time: on a disk mounted with ``discard`` each
    unlink waits for the device, and 2,000 of them took 5 seconds one
    after another, 0.1 second eight at a time."""
    levels = collections.defaultdict(list)
    for top in trees:
        _walk(top, files, levels, 0)
    with concurrent.futures.ThreadPoolExecutor(_REMOVERS) as pool:
        _all(pool, _unlink, files)
        for depth in sorted(levels, reverse=True):
            _all(pool, _rmdir, levels[depth])


def _walk(top, files, levels, depth):
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            # made a link since it was found: git clean's to remove
            raise Fallback("%s is no longer a directory" % os.fsdecode(top))
    except FileNotFoundError:
        return
    levels[depth].append(top)
    try:
        entries = list(os.scandir(top))
    except FileNotFoundError:
        return
    except OSError as failure:
        raise Fallback(str(failure))
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                _walk(entry.path, files, levels, depth + 1)
            else:
                files.append(entry.path)
        except OSError as failure:
            raise Fallback(str(failure))


def _all(pool, remove, paths):
    """``remove`` each of ``paths``, a share of them in each of the pool's
    threads (a task each would cost more than the removal)."""
    shares = [paths[at::_REMOVERS] for at in range(_REMOVERS)]
    for failure in pool.map(lambda share: next(
            filter(None, map(remove, share)), None), shares):
        if failure:
            raise Fallback(failure)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as failure:
        return str(failure)
    return None


def _rmdir(path):
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as failure:
        return str(failure)
    return None


def _tracked(store, commit, names):
    """``{directory: {entry: mode}}`` of the directories ``names`` in
    ``commit``, read as tree objects by one ``git cat-file --batch``."""
    if any(b"\n" in name for name in names):
        raise Fallback("a directory name holds a newline")
    spec = commit.encode()
    out = _git(store, "cat-file", "--batch", input=b"".join(
        spec + (b":" + name if name else b"^{tree}") + b"\n"
        for name in names))
    found, at = {}, 0
    for name in names:
        end = out.index(b"\n", at)
        header = out[at:end].split(b" ")
        if len(header) != 3 or header[1] != b"tree":
            raise Fallback("%s is no directory of %s"
                           % (os.fsdecode(name) or "the top", commit))
        size = int(header[2])
        found[name] = _tree_entries(out[end + 1:end + 1 + size],
                                    len(header[0]) // 2)
        at = end + 1 + size + 1
    return found


def _tree_entries(data, hash_size):
    """``{name: mode}`` of a raw tree object."""
    entries, at = {}, 0
    while at < len(data):
        space = data.index(b" ", at)
        nul = data.index(b"\0", space)
        entries[data[space + 1:nul]] = data[at:space]
        at = nul + 1 + hash_size
    return entries
