"""Running ``git`` for its output as bytes with nothing but ``os`` and
``select`` imported.

Apart from ``process`` (the runner of everything else) because a
``gitbridge commitid-lookup`` is over in a few tens of milliseconds,
most of them Python's start-up: ``subprocess`` and what it imports would
add about a fifth."""

from __future__ import annotations

import os
import select

# For the annotations only (see commitkeys).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

from vcsperf.core.errors import Abort

_BLOCK = 1 << 16


def git_bytes(repo_path: str, *args: str, input: bytes = b"",
              ok: tuple[int, ...] = (0,)) -> bytes:
    """The stdout of ``git -C REPO_PATH ARGS`` as bytes, with ``input``
    (bytes) on its stdin: for commit messages, which need not be UTF-8.
    ``ok``: the exit statuses that are no failure; on another, ``Abort``
    with what git wrote to stderr."""
    return b"".join(git_blocks(repo_path, *args, input=input, ok=ok))


def git_records(repo_path: str, *args: str, input: bytes = b"",
                separator: bytes = b"\0") -> Iterator[bytes]:
    """The records of ``git -C REPO_PATH ARGS``'s stdout that
    ``separator`` ends, as git writes them: a million commit messages
    (``git log -z``) are never all in memory at once."""
    pending = b""
    for block in git_blocks(repo_path, *args, input=input):
        records = (pending + block).split(separator)
        pending = records.pop()
        yield from records
    if pending:
        yield pending


def git_blocks(repo_path: str, *args: str, input: bytes = b"",
               ok: tuple[int, ...] = (0,)) -> Iterator[bytes]:
    """The stdout of ``git -C REPO_PATH ARGS`` in blocks as they come
    (see ``git_bytes``); ``Abort`` once it has ended, if it failed.  A
    caller that stops early leaves git to end on a broken pipe."""
    stdin, feed = os.pipe()
    out, out_w = os.pipe()
    err, err_w = os.pipe()
    # The pipes' own descriptors close on exec; these copies do not.
    actions = [(os.POSIX_SPAWN_DUP2, stdin, 0),
               (os.POSIX_SPAWN_DUP2, out_w, 1),
               (os.POSIX_SPAWN_DUP2, err_w, 2)]
    try:
        pid = os.posix_spawnp("git", ["git", "-C", repo_path, *args],
                              os.environ, file_actions=actions)
    finally:
        for fd in (stdin, out_w, err_w):
            os.close(fd)
    errors: list[bytes] = []
    pending = memoryview(input)
    poller = select.poll()
    for fd in (out, err):
        poller.register(fd, select.POLLIN)
    if pending:
        os.set_blocking(feed, False)
        poller.register(feed, select.POLLOUT)
    else:
        os.close(feed)
    open_fds = {out, err} | ({feed} if pending else set())
    try:
        while open_fds:
            for fd, _ in poller.poll():
                if fd == feed:
                    try:
                        pending = pending[os.write(fd, pending[:_BLOCK]):]
                    except BrokenPipeError:  # git stopped reading: done
                        pending = pending[:0]
                    done = not pending
                else:
                    block = os.read(fd, _BLOCK)
                    done = not block
                    if fd == err:
                        errors.append(block)
                    elif block:
                        yield block
                if done:
                    poller.unregister(fd)
                    os.close(fd)
                    open_fds.discard(fd)
    finally:
        for fd in open_fds:
            os.close(fd)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status not in ok:
        raise Abort("git %s failed: %s" % (
            args[0], b"".join(errors).decode("utf-8", "replace").strip()))
