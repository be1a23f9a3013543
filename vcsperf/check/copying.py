"""The repository under test, only read: its history copied by hardlinks
without its locks (``copy_repository``), or read by pull through a view
that takes what readers write (``read_only_view``), the fingerprint of
its ``.hg`` taken before and after the run (``fingerprint``,
``original_changes``), and the scratch and resume directories that would
reach into it refused (``refuse_places``)."""

import os
import shutil

from vcsperf.core.errors import Abort
from vcsperf.core.pooling import is_inside

#: Copies of a repository that is being written to before the copy is
#: made by pull instead.
COPY_ATTEMPTS = 3


def fingerprint(repo):
    """Size, device and inode, and modification time of every file under
    ``repo/.hg``, by name: what any write changes (an append the size and
    time, a write-then-rename the inode, a new or removed file the
    names)."""
    prints = {}
    top = os.path.join(repo, ".hg")
    for root, _, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            prints[os.path.relpath(path, top)] = (
                st.st_size, st.st_dev, st.st_ino, st.st_mtime_ns)
    return prints


#: Files under ``.hg`` that any reader of a repository may change without
#: changing the repository: locks, which ``hg clone`` takes on its source
#: and which leave nothing behind, and the caches, which hg rewrites as it
#: reads.
_LOCKS = ("wlock", "lock", os.path.join("store", "lock"))
_CACHES = ("cache" + os.sep, "wcache" + os.sep)


def original_changes(before, after):
    """``(changed, caches)``: the files under ``.hg`` that were written,
    created or removed between two ``fingerprint``s, and, apart from
    them, the caches that were."""
    names = sorted(name for name in set(before) | set(after)
                   if before.get(name) != after.get(name)
                   and name not in _LOCKS)
    caches = [name for name in names if name.startswith(_CACHES)]
    return [name for name in names if name not in caches], caches


#: Files of a store that belong to a lock or a transaction, not history.
_STORE_LOCK, _STORE_JOURNAL = "lock", "journal"
_NOT_HISTORY = (_STORE_LOCK, _STORE_JOURNAL, "undo")


def _store_path(repo):
    """The store of ``repo``, which may be a share of another's."""
    hgdir = os.path.join(repo, ".hg")
    try:
        with open(os.path.join(hgdir, "sharedpath")) as fh:
            shared = fh.read().strip()
    except FileNotFoundError:
        return os.path.join(hgdir, "store")
    return os.path.join(hgdir, shared, "store")


#: The store's files whose identity any transaction changes: the
#: changelog, the manifest, the phases and the obsolescence markers.
_HISTORY = ("00changelog.i", "00changelog.d", "00manifest.i",
            "00manifest.d", "phaseroots", "obsstore")


def _quiet_state(store):
    """What any write to the history of ``store`` changes -- the identity
    (inode, size, modification time) of ``_HISTORY``'s files -- or None
    while a transaction is under way (its journal is there).  A lock
    alone is not a write: ``hg clone`` holds its source's for as long as
    it copies, minutes at 400,000 files, and a writer writes nothing
    before its journal."""
    if os.path.lexists(os.path.join(store, _STORE_JOURNAL)):
        return None
    state = []
    for name in _HISTORY:
        try:
            st = os.stat(os.path.join(store, name))
        except FileNotFoundError:
            state.append(None)
            continue
        state.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return state


#: Where a store keeps its filelogs (``dh`` holds those whose encoded
#: names are too long), which a partial copy links only some of.
_FILELOG_DIRECTORIES = ("data", "dh")


def _is_filelog(name):
    return name.split(os.sep, 1)[0] in _FILELOG_DIRECTORIES


def copy_repository(source, dest, filelogs=None):
    """Copy the history of ``source`` to a new repository ``dest`` with
    hardlinks (plain copies across filesystems), writing nothing in
    ``source`` -- ``hg clone`` takes its store lock.  Mercurial breaks a
    hardlink before it writes to a file, so neither side can change the
    other.

    With ``filelogs``, a function, the copy is partial: everything but
    the filelogs is linked first, then ``filelogs(dest)`` names the ones
    to link (the names in the store, as ``hg check-narrow`` prints them;
    None for all of them): at 400,000 files, a quick run needs a few
    thousand.

    Without a lock, the copy is checked instead: the changelog is linked
    first, so every changeset it names has its data in the files linked
    after it, and nothing may have written the store meanwhile.  Returns
    False, with ``dest`` removed, when something did."""
    store = _store_path(source)
    before = _quiet_state(store)
    if before is None:
        return False
    os.makedirs(os.path.join(dest, ".hg", "store"))
    _copy_repository_files(source, dest)
    files = []
    for root, dirs, names in os.walk(store):
        relative = os.path.relpath(root, store)
        files += [os.path.normpath(os.path.join(relative, name))
                  for name in names
                  # dot files are temporary (store names never start so)
                  if not name.startswith(".") and not (
                      relative == "." and name.startswith(_NOT_HISTORY))]
    files.sort(key=lambda name: not name.startswith("00changelog"))
    made = set()

    def link(names):
        for name in names:
            target = os.path.join(dest, ".hg", "store", name)
            directory = os.path.dirname(target)
            if directory not in made:
                os.makedirs(directory, exist_ok=True)
                made.add(directory)
            try:
                os.link(os.path.join(store, name), target)
            except OSError:  # another filesystem, or no hardlinks there
                shutil.copyfile(os.path.join(store, name), target)
    if filelogs is None:
        link(files)
    else:
        link(name for name in files if not _is_filelog(name))
        wanted = filelogs(dest)
        if wanted is None:
            link(name for name in files if _is_filelog(name))
        else:
            wanted = {os.path.normpath(name) for name in wanted}
            link(name for name in files
                 if _is_filelog(name) and name in wanted)
    if _quiet_state(store) != before:
        shutil.rmtree(dest)
        return False
    return True


def _copy_repository_files(source, dest):
    """Into ``dest/.hg``: the requirements of ``source`` (not a share's:
    ``dest`` has its own store) and its bookmarks."""
    with open(os.path.join(source, ".hg", "requires")) as fh:
        requires = [line for line in fh.read().split()
                    if line not in ("shared", "relshared")]
    with open(os.path.join(dest, ".hg", "requires"), "w") as fh:
        fh.writelines(line + "\n" for line in requires)
    bookmarks = os.path.join(source, ".hg", "bookmarks")
    if os.path.exists(bookmarks):
        shutil.copyfile(bookmarks, os.path.join(dest, ".hg", "bookmarks"))


def read_only_view(source, view):
    """Make ``view`` a repository that reads the history of ``source``
    and writes nothing there: its ``.hg`` holds the requirements and
    bookmarks of ``source`` and a symbolic link to its store.  A reader
    writes a store only in a transaction, which no reader opens; what a
    reader does write -- locks, and the caches hg may write in a local
    repository it pulls from (``branch2-*``, ``tags2-*``, the
    rev-branch-cache, ``hgtagsfnodes1``) -- goes to the view's ``.hg``.
    The hgrc of ``source`` is not read either: an extension it enables
    (blackbox) or a hook would write there."""
    os.makedirs(os.path.join(view, ".hg"))
    _copy_repository_files(source, view)
    os.symlink(os.path.abspath(_store_path(source)),
               os.path.join(view, ".hg", "store"))


def refuse_places(source, git, resume, scratch):
    """Refuse a scratch or resume directory where the run would write
    into a repository under test, or whose removal would reach one."""
    repositories = [source] + ([git] if git else [])
    inner = [os.path.join(source, ".hg")]
    if git:
        dot_git = os.path.join(git, ".git")
        inner.append(dot_git if os.path.isdir(dot_git) else git)
    if resume:
        for repository in repositories:
            if is_inside(repository, resume):
                raise Abort("--resume %s holds the repository %s"
                            % (resume, repository),
                            hint="give --resume a directory outside "
                            "the repositories under test")
    for option, path in (("--resume", resume), ("--scratch", scratch)):
        for top in inner:
            if path and is_inside(path, top):
                raise Abort("%s %s is inside %s" % (option, path, top),
                            hint="give %s a directory outside the "
                            "repositories under test" % option)
