"""``gitbridge commitid-lookup KEY...``: the commits that carry commit IDs,
reviews or bugs, from an index in the repository's Git directory
(``commitindex*``, the format of ``vcsperf.core.commitindex``).

The index is brought up to date by each lookup: its docket records the
ref tips it covers; when the refs have moved, the commits reachable from
the new tips and not from the covered ones are indexed (``git log``,
parents before children).  When a covered tip is gone from the object
store (a ref forced or deleted, then ``git gc``, before the next lookup)
the index is built again from nothing.

In a shallow clone the docket also records the shallow boundary (the
commits in ``.git/shallow``, whose parents Git does not have).  When it
changes, the index is built again from nothing: ``git fetch --deepen``
or ``--unshallow`` brings history below the commits the index covered,
which no walk from the new tips down to the covered ones reaches, and a
new boundary can cut indexed commits off.  A shallow clone holds little
history, so the build is short.

Where the index cannot be written (a read-only mirror, a CI cache, a
full disk), a lookup changes nothing: it answers from the index when
that covers the refs as they are, else by reading the message of every
commit a ref reaches, as the index build would.  An index file that is
not a regular file (a directory, a FIFO, a symbolic link) is never read
or replaced: the lookup aborts and says to remove it.

The docket also says whether every indexed commit is still reachable
from the tips: true of an index built from nothing, and kept true while
each update only moves refs forward (the covered tips stay reachable).
Then a lookup answers from the index alone, after ``git rev-parse
--all`` has read the tips and ``git config`` the rules, and trusts the 64-bit key hash as
the Mercurial side does (a wrong answer has a chance of about n / 2**64
for n keys).

Once a rebase, force push or deleted ref has left indexed commits
behind, every answer is checked: the commit still carries the key, and a
ref reaches it (one ``git cat-file --batch`` for the candidates, one
``git for-each-ref --contains`` each).  That lasts until the index is
built again, which lookups do not do on their own: a build reads every
message (seconds at 100,000 commits), and a lookup that happened to come
after a force push would pay it, where checking costs a few milliseconds
a lookup, and only those that find something (BENCHMARKS.md).  Build it
again off the lookup path, where force pushes are frequent enough to
matter: ``gitbridge commitid-lookup --rebuild KEY`` after ``git gc``, or
from a ``post-receive`` hook that saw a forced update.
"""

import errno
import fcntl
import os
import stat
import sys

from gitbridge import gitconfig
from vcsperf.core import commitindex, commitkeys
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.spawn import git_bytes

NAME = "commitindex"


def _rules(repo):
    config = gitconfig.read(repo, r"^commitid\.indextrailers$")
    return commitkeys.KeyRules(" ".join(
        config.get_all("commitid.indextrailers")).split())


#: Why opening or writing a file fails where the index cannot be written
#: at all; then lookups answer without it.
_UNWRITABLE = frozenset([errno.EACCES, errno.EPERM, errno.EROFS,
                         errno.ENOSPC, errno.EDQUOT])


class Repository:
    """What a lookup reads of a Git repository first: ``git_dir``, its Git
    directory; ``tips``, the objects its refs (those under ``refs/``)
    point at; ``shallow``, the commits of its shallow boundary (both
    sorted, hex, as bytes)."""

    def __init__(self, repo):
        git_dir, shallow_path, *tips = git_bytes(
            repo, "rev-parse", "--absolute-git-dir", "--git-path", "shallow",
            "--all").split(b"\n")
        self.git_dir = git_dir.decode("utf-8", "surrogateescape")
        self.tips = sorted(set(tips) - {b""})
        # --git-path names it from the repository, unless absolute.
        self.shallow = sorted(set(_read_regular(os.path.join(
            os.fsencode(repo), shallow_path)).split()))


def _read_regular(path):
    """The content of the regular file ``path`` (empty bytes when there
    is none); anything else there is refused, never read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    except OSError as err:
        raise Abort("cannot read %s: %s" % (os.fsdecode(path), err.strerror))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Abort("%s is not a regular file" % os.fsdecode(path))
    with open(fd, "rb") as fh:
        return fh.read()


def _refuse_special(git_dir):
    """Abort where a file of the index's own names (the docket and its
    lock) is there and is not a regular file: reading a FIFO waits
    forever, ``/dev/zero`` never ends, and replacing what someone put
    there would delete it."""
    for name in (NAME, NAME + ".lock"):
        path = os.path.join(git_dir, name)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as err:
            raise Abort("cannot read %s: %s" % (path, err.strerror))
        if not stat.S_ISREG(mode):
            raise Abort("%s is not a regular file" % path,
                        hint="remove it; the next lookup builds the index "
                        "again")


#: The first line of the docket's ``covers``: whether every indexed
#: commit is reachable from the tips on the lines after the second.
REACHABILITY = {True: b"all-reachable", False: b"may-hold-unreachable"}
#: The second line's first word; the shallow boundary follows it.
SHALLOW = b"shallow"


def _covers(tips, shallow, all_reachable):
    return b"\n".join([REACHABILITY[all_reachable],
                       b" ".join([SHALLOW] + shallow)] + tips)


def _covered(covers):
    """``(tips, shallow, all_reachable)`` of a docket's ``covers``;
    ``all_reachable`` is None in an index from before both it and the
    shallow boundary were recorded."""
    state, boundary, *tips = covers.split(b"\n") + [b""]
    word, *shallow = boundary.split(b" ")
    for all_reachable, line in REACHABILITY.items():
        if state == line and word == SHALLOW:
            return tips[:-1], shallow, all_reachable
    return [], [], None


def _current(index, repository, rules):
    """Whether ``index`` covers the refs and shallow boundary of
    ``repository`` under ``rules``: nothing to add."""
    tips, shallow, all_reachable = _covered(index.covers)
    return all_reachable is not None and tips == repository.tips and \
        shallow == repository.shallow and \
        index.docket.rules == rules.fingerprint


def _left_behind(repo, covered, tips):
    """Whether a commit reachable from ``covered`` is no longer reachable
    from ``tips``.  ``git rev-list`` may err here only towards yes (where
    committer dates go back in time its walk can stop before it marks
    every reachable commit, see ``_reachable``), which costs the checked
    lookups, never a wrong answer."""
    if not covered:
        return False
    return bool(git_bytes(repo, "rev-list", "--stdin", "--max-count=1",
                          input=b"".join([c + b"\n" for c in covered] +
                                         [b"^" + t + b"\n" for t in tips])))


def _commits(repo, shas):
    """``(sha, message)`` of the commits of ``shas`` that the object
    store still has."""
    out = git_bytes(repo, "cat-file", "--batch",
                    input=b"".join(sha + b"\n" for sha in shas))
    while out:
        header, _, out = out.partition(b"\n")
        sha, kind, *size = header.split()
        if kind == b"missing":
            continue
        body, out = out[:int(size[0])], out[int(size[0]) + 1:]
        if kind == b"commit":
            message = body.partition(b"\n\n")[2]
            yield sha, message.decode("utf-8", "surrogateescape")


def _reachable(repo, sha):
    """Whether a ref reaches commit ``sha``.  Not ``git rev-list SHA
    --not --all``: where committer dates go back in time (histories
    converted from Mercurial) its walk stops early and names reachable
    commits; ``--contains`` walks by generation numbers, with the
    commit-graph fast."""
    return bool(git_bytes(repo, "for-each-ref", "--count=1", "--format=x",
                          "--contains", sha))


def _missing(repo, objects):
    """Which of ``objects`` the object store does not have."""
    out = git_bytes(repo, "cat-file", "--batch-check",
                    input=b"".join(o + b"\n" for o in objects))
    return [line.split()[0] for line in out.splitlines()
            if line.endswith(b" missing")]


def update(repo, repository, rules, rebuild=False):
    """Bring the index in ``repository.git_dir`` up to date with its refs
    and shallow boundary under ``rules`` (with ``rebuild``, build it
    again from nothing).  False, having changed nothing, where the index
    cannot be written."""
    try:
        fd = os.open(os.path.join(repository.git_dir, NAME + ".lock"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as err:
        if err.errno in _UNWRITABLE:
            return False
        raise Abort("cannot lock %s: %s" % (
            os.path.join(repository.git_dir, NAME + ".lock"), err.strerror))
    with open(fd, "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _update_locked(repo, repository, rules, rebuild)
        except commitindex.CorruptIndex:
            # A file of it that cannot be written (read-only, or made
            # something else behind our back): answered without it.
            return False
        except OSError as err:
            if err.errno in _UNWRITABLE:
                return False
            raise


def _update_locked(repo, repository, rules, rebuild):
    git_dir, tips = repository.git_dir, repository.tips
    try:
        base = None if rebuild else commitindex.Index(git_dir, NAME)
    except (FileNotFoundError, commitindex.CorruptIndex):
        base = None
    try:
        if base is not None:
            if _current(base, repository, rules):
                return True
            covered, shallow, all_reachable = _covered(base.covers)
            if base.docket.rules != rules.fingerprint or \
                    all_reachable is None or \
                    shallow != repository.shallow or \
                    _missing(repo, covered):
                base.close()
                base = None
        if base is None:
            all_reachable = True
        elif all_reachable:
            all_reachable = not _left_behind(repo, covered, tips)
        revisions = [t.decode("ascii") for t in tips] + (
            ["^" + t.decode("ascii") for t in covered] if base else [])
        start = base.node_count() if base else 0
        # Here, not above: a lookup that reads no message spares the
        # import (see commitkeys).
        from vcsperf.core.commitid import git_messages, message_keys
        triples, nodes = [], []
        for sha, message in (git_messages(repo, revisions)
                             if tips else ()):
            rev = start + len(nodes)
            nodes.append(bytes.fromhex(sha))
            triples.extend((kind, key, rev) for kind, key
                           in message_keys(message, rules))
        width = len(nodes[0]) if nodes else (
            base.docket.node_width if base else 20)
        if base is not None and base.docket.node_width != width:
            # A repository converted to another hash: built again.
            base.close()
            base = None
            return _update_locked(repo, repository, rules, True)
        commitindex.write(git_dir, NAME, triples,
                          _covers(tips, repository.shallow, all_reachable),
                          rules.fingerprint, base=base, nodes=nodes,
                          node_width=width)
        return True
    finally:
        if base is not None:
            base.close()


def lookup(repo, keys, rebuild=False):
    """``[(key as typed, sha)]`` of the commits reachable from a ref that
    carry each key, in the order of ``keys``; ``rebuild``: build the index
    again from nothing first."""
    parsed = []
    for key in keys:
        try:
            parsed.append(commitkeys.parse_key(key))
        except ValueError as err:
            raise Abort(str(err))
    repository = Repository(repo)
    _refuse_special(repository.git_dir)
    rules = _rules(repo)
    written = update(repo, repository, rules, rebuild)
    try:
        index = commitindex.Index(repository.git_dir, NAME)
    except (FileNotFoundError, commitindex.CorruptIndex):
        index = None
    if index is not None and not written and \
            not _current(index, repository, rules):
        index.close()
        index = None
    if index is None:
        # Not written here, or removed or damaged since: every message.
        return _scan(repo, repository.tips, rules, keys, parsed)
    with index:
        # The docket read here, not the one update() saw: a writer since
        # then may have indexed commits that are no longer reachable.
        all_reachable = _covered(index.covers)[2]
        try:
            candidates = [(typed, wanted,
                           index.node(rev).hex().encode("ascii"))
                          for typed, wanted in zip(keys, parsed)
                          for rev in index.lookup(*wanted)]
        except commitindex.CorruptIndex:
            return _scan(repo, repository.tips, rules, keys, parsed)
    if all_reachable:
        return [(typed, sha.decode("ascii")) for typed, _, sha in candidates]
    if not candidates:
        return []
    from vcsperf.core.commitid import message_keys  # see update
    carried = {sha: message_keys(message, rules) for sha, message
               in _commits(repo, {sha for _, _, sha in candidates})}
    reachable = {sha for sha in carried if _reachable(repo, sha)}
    return [(typed, sha.decode("ascii")) for typed, wanted, sha in candidates
            if wanted in carried.get(sha, ()) and sha in reachable]


def _scan(repo, tips, rules, keys, parsed):
    """What ``lookup`` answers, from the message of every commit a ref
    reaches (parents first), without the index."""
    from vcsperf.core.commitid import git_messages, message_keys
    wanted, found = set(parsed), {}
    for sha, message in (git_messages(repo, [t.decode("ascii")
                                             for t in tips])
                         if tips else ()):
        for key in message_keys(message, rules) & wanted:
            found.setdefault(key, []).append(sha)
    return [(typed, sha) for typed, key in zip(keys, parsed)
            for sha in found.get(key, ())]


# The command line -----------------------------------------------------------

def add_commands(subparsers):
    parser = subparsers.add_parser(
        "commitid-lookup", help="print the commits that carry commit IDs, "
        "reviews (D123, Change-Id) or bugs (bug 123)")
    parser.add_argument("-C", dest="repo", default=".",
                        help="the repository (default: here)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--rebuild", action="store_true",
                        help="build the index again from the refs first "
                        "(after a rebase, force push or deleted ref, "
                        "lookups check each answer until then)")
    parser.add_argument("keys", nargs="+", metavar="KEY",
                        help="a commit ID, D123, a Change-Id or bug 123 "
                        "(id:, review: or bug: says which)")
    parser.set_defaults(func=lambda args: _cmd_lookup(
        args.repo, args.keys, args.json, args.rebuild))


def quick_main(argv):
    """The exit status of ``commitid-lookup ARGV`` where ARGV is keys,
    ``-C DIR``, ``--json``, ``--rebuild`` and ``--`` (the rest are keys,
    even those that start with ``-``), read without ``argparse``
    (whose import is a tenth of a lookup's time); None for anything else
    (``--help``, another or abbreviated option, no key), which the
    parser of ``add_commands`` then reads and explains."""
    repo, keys, flags = ".", [], set()
    args = iter(argv)
    for arg in args:
        if arg == "--":
            keys.extend(args)
        elif arg == "-C":
            repo = next(args, "-")
            if repo.startswith("-"):
                return None
        elif arg in ("--json", "--rebuild"):
            flags.add(arg)
        elif arg.startswith("-"):
            return None
        else:
            keys.append(arg)
    if not keys:
        return None
    return _cmd_lookup(repo, keys, "--json" in flags, "--rebuild" in flags)


def _cmd_lookup(repo, keys, as_json, rebuild):
    try:
        found = lookup(repo, keys, rebuild)
    except Abort as err:
        return print_abort(err)
    if as_json:
        import json  # here: a lookup's start-up is most of its time
        json.dump([{"key": key, "node": sha} for key, sha in found],
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("".join("%s %s\n" % pair for pair in found))
    return 0 if set(keys) <= {key for key, _ in found} else 1
