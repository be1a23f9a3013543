"""``gitbridge pack-cache``: the packs of ``git pack-objects`` computed
once, served many times, as Git's ``uploadpack.packObjectsHook``.

After a push, every CI worker fetches the same new commits, and the
server's ``git upload-pack`` runs ``git pack-objects`` for each of them
with the same input.  Set as the hook, ``gitbridge pack-cache`` runs
``git pack-objects`` for the first such request, stores its pack and
sends it; later requests with the same key are sent the stored pack.
Requests for a pack being computed wait for it (up to ``--wait``
seconds, then they compute it themselves): N concurrent identical
fetches run pack-objects once.  The first request computes the whole
pack before it sends any of it, so a slow client never holds the others.

Git runs the hook only from protected configuration (system, global, or
``git -c`` on upload-pack's own command line), never from a repository's
own config, so that fetching from an untrusted repository cannot run a
command; the settings are therefore the hook's own options, written in
that protected value (``/etc/gitconfig``, or the server user's
``~/.gitconfig``)::

    [uploadpack]
        packObjectsHook = gitbridge pack-cache --dir /var/cache/git-packs --max-size 20g

The key covers everything the pack depends on: the full command git
appends (with a ``--shallow-file PATH`` replaced by a digest of the
file), its standard input (the wanted and common commits and the
client's shallow commits), the repository (its git directory and the
identity of its object directory), the repository's own ``shallow`` and
``info/grafts`` files, its tags when the request includes them
(``--include-tag``), the ``core``, ``extensions``, ``pack`` and
``repack`` settings git sees there (and ``uploadpack.blobPackfileUri``),
the ``GIT_*`` environment (but for what only names the client or
traces), the version of git, and the compression of stored packs.  A
push makes new wants, so new keys; no repository is ever sent another's
pack.  A command that is not the one upload-pack runs (an option it never
sends, no ``--stdout``) is run as it is, without the cache; anything but
``git pack-objects`` is refused.

- ``--dir`` (default ``pack-cache`` in the repository's git directory; a
  relative path is taken from there): where entries are stored; one
  directory may serve many repositories.
- ``--max-size`` (default 2g): the total of the entries; the least
  recently served go first.  A pack larger than that is not stored: it
  is sent as it is made, and later requests compute it again.
- ``--min-size`` (default 4k): smaller packs are not stored.
- ``--wait`` (default 120): seconds a request waits for another computing
  the same pack.
- ``--compression`` (default 9, ``pack.compression`` of the packs that
  are stored: objects git compresses anew, not those it reuses from the
  repository's packs; -1 keeps the repository's setting).

A cache directory that is missing, read-only or full is skipped: the
pack is computed as without the hook.  An entry is checked against its
digest before any of it is sent; a truncated or changed one is removed
and the pack computed again.  Progress (``--progress``) is git's own on
a computed pack; a stored one is sent without it.

``gitbridge pack-cache --stats [--dir DIR] [--json]``, run in the
repository (or with an absolute ``--dir``), reports hits, misses,
uncached packs, bytes sent from the cache, the CPU seconds they first
cost, and the entries stored.
"""

import hashlib
import json
import os
import resource
import stat
import time
import types

from vcsperf.core import responsecache
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.settings import format_size, parse_size
from vcsperf.core.spawn import git_bytes

#: The format of the key: a new way of making keys gets a new word.
KEY_VERSION = b"gitbridge pack-cache 1"
DEFAULT_DIR = "pack-cache"
DEFAULT_MAX_SIZE = "2g"
DEFAULT_MIN_SIZE = "4k"
DEFAULT_WAIT = 120
DEFAULT_COMPRESSION = 9
MAX_SIZE_RANGE = (1 << 20, 1 << 40)
MIN_SIZE_RANGE = (0, 64 << 20)
WAIT_RANGE = (0, 3600)
#: A request whose standard input (or ``--shallow-file``) is larger than
#: this is run without the cache; it is spooled to a file either way.
MAX_INPUT = 64 << 20

#: Options of ``git pack-objects`` that upload-pack sends, whose pack is
#: determined by the key; a value, where it has one, is in the key.
PACK_OPTIONS = {"--revs", "--thin", "--stdout", "--shallow", "--progress",
                "--delta-base-offset", "--include-tag"}
PACK_VALUE_OPTIONS = ("--filter=", "--uri-protocol=", "--missing=")
#: git's own options that take the next argument as their value.
GIT_VALUE_OPTIONS = {"--shallow-file", "-c", "-C", "--git-dir",
                     "--work-tree", "--namespace", "--config-env"}
#: Settings git sees that may change a pack (``blobPackfileUri``: what a
#: pack with ``--uri-protocol`` leaves to a URL instead).
CONFIG_PATTERN = (r"^(core|extensions|pack|repack)\.|"
                  r"^uploadpack\.blobpackfileuri$")
#: ``GIT_*`` variables that name the client or trace, and change no pack.
ENV_LEFT_OUT = ("GIT_PROTOCOL", "GIT_TRACE", "GIT_SSL_", "GIT_HTTP_",
                "GIT_COMMITTER_", "GIT_AUTHOR_", "GIT_TERMINAL_PROMPT",
                "GIT_ASKPASS", "GIT_PROJECT_ROOT", "GIT_REFLOG_ACTION")

_READ = 1 << 16


def add_commands(subparsers):
    import argparse  # here: cli.QUICK spares the hook the others' imports

    parser = subparsers.add_parser(
        "pack-cache", help="serve repeated fetches from a cache of packs "
        "(as uploadpack.packObjectsHook)",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=DEFAULT_DIR,
                        help="the cache directory; a relative one is in "
                        "the git directory of the repository the command "
                        "runs in (default: %s)" % DEFAULT_DIR)
    parser.add_argument("--max-size", default=DEFAULT_MAX_SIZE,
                        help="total size of the entries (default: %s)"
                        % DEFAULT_MAX_SIZE)
    parser.add_argument("--min-size", default=DEFAULT_MIN_SIZE,
                        help="packs smaller than this are not stored "
                        "(default: %s)" % DEFAULT_MIN_SIZE)
    parser.add_argument("--wait", type=int, default=DEFAULT_WAIT,
                        help="seconds to wait for another request "
                        "computing the same pack (default: %d)"
                        % DEFAULT_WAIT)
    parser.add_argument("--compression", type=int,
                        default=DEFAULT_COMPRESSION,
                        help="pack.compression of stored packs, -1 to 9 "
                        "(default: %d)" % DEFAULT_COMPRESSION)
    parser.add_argument("--stats", action="store_true",
                        help="report what the cache saved, and exit")
    parser.add_argument("--json", action="store_true",
                        help="with --stats: as one JSON object")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="git pack-objects ARGS, as git appends them")
    parser.set_defaults(func=main)


#: The hook's options that take a value, and their ``args`` names.
_QUICK_OPTIONS = {"--dir": "dir", "--max-size": "max_size",
                  "--min-size": "min_size", "--wait": "wait",
                  "--compression": "compression"}


def quick_main(argv):
    """The exit status of ``pack-cache [OPTION VALUE]... git ...``, the
    hook's call for every fetch, read without ``argparse`` (whose import
    is a sixth of the hook's start-up); None for anything else (``--stats``,
    ``--help``, ``--dir=X``, a bad number), which the parser of
    ``add_commands`` then reads and explains."""
    values = {"dir": DEFAULT_DIR, "max_size": DEFAULT_MAX_SIZE,
              "min_size": DEFAULT_MIN_SIZE, "wait": DEFAULT_WAIT,
              "compression": DEFAULT_COMPRESSION}
    at = 0
    while at < len(argv) and argv[at] in _QUICK_OPTIONS:
        if at + 1 >= len(argv):
            return None
        values[_QUICK_OPTIONS[argv[at]]] = argv[at + 1]
        at += 2
    if at >= len(argv) or argv[at] != "git":
        return None
    try:
        values["wait"] = int(values["wait"])
        values["compression"] = int(values["compression"])
    except ValueError:
        return None
    return main(types.SimpleNamespace(stats=False, json=False,
                                      command=argv[at:], **values))


def main(args):
    """The ``gitbridge pack-cache`` handler: pack-objects' exit status,
    or 255 after ``abort:``."""
    try:
        if args.stats:
            if args.command:
                raise Abort("--stats takes no command")
            return report(args)
        if not args.command:
            raise Abort("no command to run",
                        hint="set 'gitbridge pack-cache' as "
                        "uploadpack.packObjectsHook; git appends the "
                        "pack-objects command")
        request = Request(args.command)
        settings = Settings(args)
        return serve(request, settings)
    except Abort as abort:
        return print_abort(abort)


class Settings:
    """The hook's options, checked."""

    def __init__(self, args):
        self.dir = args.dir
        self.max_size = parse_size(args.max_size, "--max-size",
                                   *MAX_SIZE_RANGE)
        self.min_size = parse_size(args.min_size, "--min-size",
                                   *MIN_SIZE_RANGE)
        if not WAIT_RANGE[0] <= args.wait <= WAIT_RANGE[1]:
            raise Abort("--wait must be %d to %d seconds, not %d"
                        % (WAIT_RANGE + (args.wait,)))
        self.wait = args.wait
        if not -1 <= args.compression <= 9:
            raise Abort("--compression must be -1 to 9, not %d"
                        % args.compression)
        self.compression = args.compression

    def cache(self, git_dir):
        root = self.dir
        if not os.path.isabs(root):
            root = os.path.join(git_dir, root)
        return responsecache.ResponseCache(
            root, max_size=self.max_size, min_size=self.min_size,
            wait=self.wait)


class Request:
    """The command git asked the hook to run: ``git [--shallow-file PATH]
    pack-objects OPTIONS``.  ``cacheable`` says whether it is the command
    upload-pack runs, whose pack the key determines."""

    def __init__(self, command):
        if not command or command[0] != "git":
            raise Abort("the hook runs 'git pack-objects' only, not %r"
                        % " ".join(command[:1]),
                        hint="set 'gitbridge pack-cache' as "
                        "uploadpack.packObjectsHook; git appends the "
                        "pack-objects command")
        self.command = command
        self.cacheable = True
        self.shallow_file = None
        at = 1
        while at < len(command) and command[at] != "pack-objects":
            option = command[at]
            if not option.startswith("-"):
                break
            if option in GIT_VALUE_OPTIONS and at + 1 < len(command):
                if option == "--shallow-file":
                    self.shallow_file = command[at + 1]
                else:
                    self.cacheable = False
                at += 2
                continue
            # another of git's options, not one upload-pack sends
            self.cacheable = False
            at += 1
        if at >= len(command) or command[at] != "pack-objects":
            raise Abort("the hook runs 'git pack-objects' only, not %r"
                        % " ".join(command[:at + 1]))
        self.at = at
        options = command[at + 1:]
        self.include_tag = "--include-tag" in options
        if not {"--revs", "--stdout"} <= set(options) or not all(
                option in PACK_OPTIONS
                or option.startswith(PACK_VALUE_OPTIONS)
                for option in options):
            self.cacheable = False

    def harder(self, compression):
        """The command of a pack to be stored."""
        if compression < 0:
            return self.command
        return [self.command[0], "-c", "pack.compression=%d" % compression,
                *self.command[1:]]


# The key -----------------------------------------------------------------


def _file_digest(path):
    """``size:sha256`` of a regular file, ``-`` when there is none; None
    when it cannot be keyed (unreadable, special, larger than
    ``MAX_INPUT``)."""
    try:
        # O_NONBLOCK: a FIFO planted there is never waited on
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return b"-"
    except OSError:
        return None
    hasher = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        while size <= MAX_INPUT:
            block = fh.read(_READ)
            if not block:
                break
            size += len(block)
            hasher.update(block)
    if size > MAX_INPUT:
        return None
    return b"%d:%s" % (size, hasher.hexdigest().encode())


def _environment():
    return sorted("%s=%s" % (name, value)
                  for name, value in os.environ.items()
                  if name.startswith("GIT_")
                  and not name.startswith(ENV_LEFT_OUT))


def key_parts(request, git_dir, settings):
    """What the pack depends on, but for the standard input; None when
    part of it cannot be read (the request runs without the cache)."""
    objects = os.environ.get("GIT_OBJECT_DIRECTORY") or os.path.join(
        git_dir, "objects")
    try:
        st = os.stat(objects)
    except OSError:
        return None
    parts = [KEY_VERSION, git_bytes(".", "version"), os.fsencode(git_dir),
             b"%d:%d" % (st.st_dev, st.st_ino),
             "\0".join(_environment()).encode("utf-8", "surrogateescape"),
             git_bytes(".", "config", "-z", "--get-regexp", CONFIG_PATTERN,
                       ok=(0, 1))]
    for name in ("shallow", os.path.join("info", "grafts"),
                 os.path.join("info", "alternates")):
        base = objects if name.endswith("alternates") else git_dir
        parts.append(_file_digest(os.path.join(base, name)))
    if request.include_tag:
        parts.append(git_bytes(
            ".", "for-each-ref",
            "--format=%(objectname) %(*objectname) %(refname)",
            "refs/tags/"))
    command = list(request.command)
    if request.shallow_file:
        # a file upload-pack made for this request (git before 2.19; later
        # ones pass "" and the shallow commits on stdin): its content
        # counts, not its name
        digest = _file_digest(request.shallow_file)
        if digest is None:
            return None
        command[command.index("--shallow-file") + 1] = digest.decode()
    parts.append("\0".join(command).encode("utf-8", "surrogateescape"))
    parts.append(b"compression=%d" % settings.compression)
    if None in parts:
        return None
    return parts


# Running -----------------------------------------------------------------


class PackObjectsFailed(Exception):
    """``git pack-objects`` ended with ``status`` (it said why on
    stderr)."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _spawn(command, stdin_fd, stdout_fd):
    """Start ``command`` with these standard input and output; stderr is
    ours (progress goes through as git writes it)."""
    actions = [(os.POSIX_SPAWN_DUP2, stdin_fd, 0),
               (os.POSIX_SPAWN_DUP2, stdout_fd, 1)]
    return os.posix_spawnp(command[0], command, os.environ,
                           file_actions=actions)


def _wait(pid):
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    # killed by a signal: the shell's status for it
    return 128 - status if status < 0 else status


def run_plain(command, stdin):
    """Run ``command`` as without the cache: its output straight to
    ours.  Its exit status."""
    stdin.seek(0)
    pid = _spawn(command, stdin.fileno(), 1)
    return _wait(pid)


def produce(command, stdin):
    """The pack ``command`` writes, in blocks; ``PackObjectsFailed`` at
    the end when it fails.  A consumer that stops early ends it."""
    stdin.seek(0)
    out, out_w = os.pipe()
    try:
        pid = _spawn(command, stdin.fileno(), out_w)
    finally:
        os.close(out_w)
    status = None
    try:
        while True:
            block = os.read(out, _READ)
            if not block:
                break
            yield block
        status = _wait(pid)
    finally:
        os.close(out)
        if status is None:
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass
            _wait(pid)
    if status != 0:
        raise PackObjectsFailed(status)


def _cpu_clock():
    """CPU seconds of this process and its waited-for children: the pack
    is made by a child, counted once it has ended."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _send(chunks):
    # straight to the descriptor: nothing is left in a buffer for the
    # interpreter to flush (and fail on) at exit when git has gone away
    for data in chunks:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


def _unnamed_file():
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("pack-cache-input"), "w+b")
    import tempfile  # a fifth of the hook's start-up: only where needed
    return tempfile.TemporaryFile()


def spool_stdin():
    """Our standard input in an unnamed file (for pack-objects to read)
    and its digest; the digest is None beyond ``MAX_INPUT``."""
    spool = _unnamed_file()
    hasher = hashlib.sha256()
    size = 0
    while True:
        block = os.read(0, _READ)
        if not block:
            break
        spool.write(block)
        size += len(block)
        hasher.update(block)
    spool.flush()
    if size > MAX_INPUT:
        return spool, None
    return spool, b"%d:%s" % (size, hasher.hexdigest().encode())


def serve(request, settings):
    """Answer one request: from the cache, by filling it, or as without
    it.  pack-objects' exit status."""
    stdin, stdin_digest = spool_stdin()
    with stdin:
        cache = key = None
        if request.cacheable and stdin_digest is not None:
            try:
                git_dir = os.path.realpath(git_bytes(
                    ".", "rev-parse", "--absolute-git-dir").decode(
                        "utf-8", "surrogateescape").strip())
                parts = key_parts(request, git_dir, settings)
            except (Abort, OSError):
                parts = None
            if parts is not None:
                cache = settings.cache(git_dir)
                key = responsecache.make_key(parts + [stdin_digest])
        try:
            if key is None:
                return run_plain(request.command, stdin)
            return _serve_cached(request, settings, cache, key, stdin)
        except BrokenPipeError:
            # upload-pack went away (its client did): nothing to tell
            return 1


def _sound(entry):
    if entry is not None and not entry.check_read():
        entry.close()
        responsecache.remove_if_ours(entry.path)
        return None
    return entry


def _serve_cached(request, settings, cache, key, stdin):
    entry = _sound(cache.lookup(key))
    if entry is None:
        got = cache.acquire(key)
        if isinstance(got, responsecache.Entry):
            entry = _sound(got)
        elif got is not None:
            return _fill(request, settings, cache, got, stdin)
    if entry is None:
        cache.count(uncached=1)
        return run_plain(request.command, stdin)
    try:
        _send(entry.chunks())
    except responsecache.CorruptEntry as err:
        # changed between its check and its reading: the pack is cut
        responsecache.remove_if_ours(err.path)
        cache.count(uncached=1)
        raise Abort("pack-cache entry %s changed while it was sent; "
                    "removed" % err.path)
    cache.count(hits=1, bytes_saved=entry.size, cpu_saved=entry.cpu)
    return 0


def _fill(request, settings, cache, filling, stdin):
    pack = produce(request.harder(settings.compression), stdin)
    try:
        body = filling.fill(pack, _cpu_clock)
    except PackObjectsFailed as failed:
        return failed.status
    except OSError:
        # the cache's disk failed: the pack is made again, without it
        pack.close()
        cache.count(uncached=1)
        return run_plain(request.command, stdin)
    try:
        # a pack too large to store is still being made
        _send(body)
    except PackObjectsFailed as failed:
        return failed.status
    finally:
        pack.close()
    cache.count(**({"misses": 1} if filling.stored else {"uncached": 1}))
    return 0


# The report --------------------------------------------------------------


def report(args):
    settings = Settings(args)
    root = settings.dir
    if not os.path.isabs(root):
        git_dir = git_bytes(".", "rev-parse", "--absolute-git-dir").decode(
            "utf-8", "surrogateescape").strip()
        root = os.path.join(git_dir, root)
    cache = responsecache.ResponseCache(root, settings.max_size,
                                        settings.min_size, settings.wait)
    counters = cache.counters()
    entries = cache.scan()
    stored = [path for _, _, path in entries
              if not path.endswith(responsecache.MARKER_SUFFIXES)]
    facts = {"path": root, "hits": int(counters["hits"]),
             "misses": int(counters["misses"]),
             "uncached": int(counters["uncached"]),
             "bytes_saved": int(counters["bytes_saved"]),
             "cpu_saved": round(counters["cpu_saved"], 3),
             "entries": len(stored),
             "size": sum(size for _, size, _ in entries),
             "max_size": settings.max_size}
    if args.json:
        print(json.dumps(facts, sort_keys=True))
        return 0
    print("cache: %(path)s" % facts)
    print("packs: %(hits)d hits, %(misses)d misses, %(uncached)d uncached"
          % facts)
    print("saved: %d bytes sent from the cache, %.3f CPU seconds"
          % (facts["bytes_saved"], facts["cpu_saved"]))
    print("entries: %d, %s of %s" % (facts["entries"],
                                     format_size(facts["size"]),
                                     format_size(facts["max_size"])))
    return 0
