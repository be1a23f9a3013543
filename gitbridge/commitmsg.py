"""The ``commit-msg`` hook: gives a Git commit message its commit ID.

Git runs it for every commit, and a commit takes a few milliseconds, so the
hook imports only what it must: ``vcsperf.core.commitid`` and no dulwich, and
it runs git through ``vcsperf.core.spawn`` rather than ``subprocess`` (whose
import alone took 12 ms here).  It asks git for its settings in one call
(``gitbridge.gitconfig``).

The rules are those of the hg extension (``vcsperf.core.commitid``); on top,
lines starting with Git's comment character are not content, the ID goes
before them and before a ``git commit -v`` scissors line, and a merge is
recognised by ``MERGE_HEAD`` beside the message file.
"""

import os
import sys

from gitbridge import gitconfig
from vcsperf.core import commitid
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.spawn import git_bytes

SETTINGS = r"^(core\.commentchar|core\.commentstring|commitid\.deterministic)$"


def git(*args, ok=(0,)):
    """What ``git ARGS`` prints on stdout, run where git runs the hook;
    ``Abort`` when its exit status is not in ``ok``."""
    return git_bytes(".", *args, ok=ok).decode("utf-8", "surrogateescape")


def comment_prefix(settings):
    """Git's comment prefix: ``core.commentString``, else
    ``core.commentChar``, else ``#``.  ``auto`` (Git picks a character the
    message does not use) is taken as ``#``, its first choice."""
    prefix = settings.get("core.commentstring") or \
        settings.get("core.commentchar") or "#"
    return "#" if prefix == "auto" else prefix


def deterministic_id(message):
    """An ID derived from the parent commit, the author and the message:
    reproducible, for tests."""
    # exit status 1: no HEAD yet (the first commit)
    seed = "\0".join([git("rev-parse", "-q", "--verify", "HEAD", ok=(0, 1)),
                      git("var", "GIT_AUTHOR_IDENT"), message])
    return commitid.derived_id(seed.encode("utf-8", "surrogateescape"))


def add_id(message_path):
    """Give the message in ``message_path`` its ID (rewriting the file by
    write-then-rename); returns whether the file changed."""
    with open(message_path, "rb") as fh:
        message = fh.read().decode("utf-8", "surrogateescape")
    settings = gitconfig.read(".", SETTINGS)
    git_dir = os.path.dirname(os.path.abspath(message_path))
    merging = os.path.basename(message_path) == "MERGE_MSG" or \
        os.path.exists(os.path.join(git_dir, "MERGE_HEAD"))
    if settings.boolean("commitid.deterministic", False):
        def make_id():
            return deterministic_id(message)
    else:
        make_id = commitid.new_id
    new = commitid.ensure_id(message, make_id, parents=2 if merging else 1,
                              comment=comment_prefix(settings))
    if new == message:
        return False
    temporary = message_path + ".commitid"
    with open(temporary, "wb") as fh:
        fh.write(new.encode("utf-8", "surrogateescape"))
    os.replace(temporary, message_path)
    return True


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: commit-msg MESSAGE-FILE\n")
        return 2
    try:
        add_id(argv[0])
    except Abort as abort:
        return print_abort(abort)
    return 0


if __name__ == "__main__":
    sys.exit(main())
