"""The one user error of our command-line tools and its printer."""

from __future__ import annotations

import sys


class Abort(Exception):
    """A one-line error for the user: ``str`` is the message, ``hint``
    what to do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def print_abort(abort: Abort) -> int:
    """Print ``abort`` as Mercurial prints one (``abort: MESSAGE`` and the
    hint in parentheses) on stderr, after what stdout holds; returns 255,
    the exit status of an abort."""
    sys.stdout.flush()
    sys.stderr.write("abort: %s\n" % abort)
    if abort.hint:
        sys.stderr.write("(%s)\n" % abort.hint)
    return 255
