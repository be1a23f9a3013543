"""A long history built from real messages: the repositories the commit
index's lookups are measured on at Firefox's length (its Git history is
near 1,000,000 commits).

::

    python -m vcsperf.harness.longhistory --dir DIR [--commits 1000000]
        [--source GIT_REPO]... [--forms git,hg]

builds, in ``DIR`` (never in a checkout of ours):

1. the messages: every non-merge commit message of each ``--source``
   (by default the mirrors of mozilla/version-control-tools, whose
   messages carry ``Bug NNN`` summaries, ``r=`` reviewers,
   ``MozReview-Commit-ID`` and ``Differential Revision:`` trailers, and
   of pdf.js), with its author, in commit-time order across sources;
2. the Git form, the bare repository ``long.git``, branch ``main``: one
   commit per message in turn, cycling through them until ``--commits``,
   written by ``git fast-import``; each commit changes one of 16 small
   files (``src/file-NN.txt``, its content the commit's number), so the
   tree stays tiny and the history is what is measured; it passes
   ``git fsck``;
3. the Mercurial form, ``long-hg``, the same messages, authors, dates
   and files, written directly through Mercurial's revlogs
   (``filelog.add``, ``manifestrevlog.add``, ``changelog.add``) in
   transactions of ``--chunk`` changesets (``hg convert`` takes 40
   minutes per 20,000); a killed build goes on from the last committed
   transaction; every changeset public; then ``hg verify``.

Cycling tens of thousands of messages to a million would make each key
match dozens of commits, where a real history has one commit per commit
ID and review and a few per bug.  So the N-th pass through the messages
(N from 0) moves every key out of the others' way: bug numbers and
``D`` numbers get N * 10,000,000 added (Bugzilla's bug numbers and
Phabricator's revisions have at most 7 digits), and commit IDs and
``Change-Id`` values get N written over their first characters (two
base-62 digits, four hex digits).  Every other byte of the message is
the real one.  Commit dates are synthetic (ten minutes apart from
2000-01-01), so both forms and every run make the same history.

Every stage leaves a marker in ``DIR/markers`` (what it made and how
long it took) and a rerun skips the stages that have one;
``DIR/summary.json`` holds the figures.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

from vcsperf.core.errors import Abort
from vcsperf.core.process import executable, run
from vcsperf.harness.firefoxscale import Stages, git_env, log, run_build

MIRRORS = "/work/.mirror"
DEFAULT_SOURCES = (
    os.path.join(MIRRORS, "mozilla+version-control-tools", "repo"),
    os.path.join(MIRRORS, "mozilla+pdf.js", "repo"))
GIT_NAME = "long.git"
HG_NAME = "long-hg"
FILES = 16
#: The first commit's date, and the seconds between commits.
EPOCH, STEP = 946684800, 600
#: What the N-th pass adds to bug and review numbers.
NUMBER_OFFSET = 10 ** 7
_BASE62 = ("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
           "abcdefghijklmnopqrstuvwxyz").encode()
_BUG = re.compile(rb"(?<![A-Za-z0-9])([Bb]ug )([0-9]{1,18})(?![0-9A-Za-z])")
_REVIEW = re.compile(rb"(Differential Revision: \S*?(?<![A-Za-z0-9])D)"
                     rb"([0-9]+)")
_ID = re.compile(rb"(MozReview-Commit-ID: )([A-Za-z0-9]{2})")
_CHANGE_ID = re.compile(rb"(Change-Id: I)([0-9a-f]{4})")


class Message:
    """One real commit message and its author (``name``, ``email``)."""

    __slots__ = ("name", "email", "text")

    def __init__(self, name, email, text):
        self.name, self.email, self.text = name, email, text

    @property
    def user(self):
        """The author as Mercurial and Git write it."""
        return b"%s<%s>" % (self.name + b" " if self.name else b"",
                            self.email)


def read_messages(sources):
    """The messages of every non-merge commit of the Git repositories
    ``sources``, in commit-time order across them.  Messages that are
    not UTF-8 or hold a NUL byte (which Mercurial's descriptions cannot
    carry as they are) are left out, as are empty ones."""
    found = []
    for source in sources:
        proc = subprocess.run(
            ["git", "-C", source, "log", "--no-merges",
             "--format=%ct%x00%an%x00%ae%x00%B%x00%x01"],
            env=git_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if proc.returncode:
            raise Abort("cannot read the messages of %s: %s" % (
                source, (proc.stderr.decode("utf-8", "replace").strip()
                         .splitlines() or ["?"])[-1]),
                hint="--source takes a Git repository")
        out = proc.stdout
        for record in out.split(b"\x00\x01\n"):
            fields = record.split(b"\x00")
            if len(fields) != 4:
                continue
            when, name, email, text = fields
            text = text.rstrip(b"\n") + b"\n"
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if not text.strip():
                continue
            # Characters that neither form's author line can carry.
            name = re.sub(rb"[<>\n]", b"", name).strip()
            email = re.sub(rb"[<>\n ]", b"", email) or b"unknown"
            found.append((int(when), Message(name, email, text)))
    found.sort(key=lambda item: item[0])
    return [message for _, message in found]


def base62(number, width):
    digits = []
    for _ in range(width):
        number, digit = divmod(number, 62)
        digits.append(_BASE62[digit:digit + 1])
    return b"".join(reversed(digits))


def moved(text, cycle):
    """``text`` with its keys moved out of the way of the other passes'
    (``cycle``: which pass through the messages, from 0)."""
    if not cycle:
        return text
    offset = cycle * NUMBER_OFFSET
    text = _BUG.sub(lambda m: m.group(1) + b"%d" % (int(m.group(2))
                                                   + offset), text)
    text = _REVIEW.sub(lambda m: m.group(1) + b"%d" % (int(m.group(2))
                                                      + offset), text)
    text = _ID.sub(lambda m: m.group(1) + base62(cycle, 2), text)
    return _CHANGE_ID.sub(lambda m: m.group(1) + b"%04x" % (cycle % 65536),
                          text)


def commit_at(messages, number):
    """(message, description, date, path, content) of commit ``number``
    (from 0)."""
    cycle, position = divmod(number, len(messages))
    message = messages[position]
    path = b"src/file-%02d.txt" % (number % FILES)
    return (message, moved(message.text, cycle), EPOCH + number * STEP,
            path, b"%d\n" % number)


def fast_import_stream(messages, count, out):
    """Write the ``git fast-import`` stream of ``count`` commits."""
    for number in range(count):
        message, text, date, path, content = commit_at(messages, number)
        who = b"%s %d +0000" % (message.user, date)
        out.write(b"commit refs/heads/main\nauthor %s\ncommitter %s\n"
                  b"data %d\n%s\nM 100644 inline %s\ndata %d\n%s\n" % (
                      who, who, len(text), text, path, len(content),
                      content))


def build_git(gitdir, messages, count):
    if os.path.exists(gitdir):
        shutil.rmtree(gitdir)  # a stage killed half-way: start again
    run(["git", "init", "-q", "--bare", gitdir], env=git_env())
    process = subprocess.Popen(
        ["git", "-C", gitdir, "fast-import", "--quiet"], env=git_env(),
        stdin=subprocess.PIPE)
    try:
        fast_import_stream(messages, count, process.stdin)
    finally:
        process.stdin.close()
        if process.wait():
            raise Abort("git fast-import failed (%d)" % process.returncode)
    run(["git", "-C", gitdir, "symbolic-ref", "HEAD", "refs/heads/main"],
        env=git_env())
    run(["git", "-C", gitdir, "fsck", "--no-progress"], env=git_env())
    commits = int(run(["git", "-C", gitdir, "rev-list", "--count", "main"],
                      env=git_env()))
    return {"commits": commits, "bytes": tree_bytes(gitdir)}


def tree_bytes(directory):
    total = 0
    for root, _, files in os.walk(directory):
        total += sum(os.path.getsize(os.path.join(root, name))
                     for name in files)
    return total


def hg_isolated():
    """Mercurial's ``ui`` without user or system configuration (no
    extension's hook runs on these transactions)."""
    os.environ["HGRCPATH"] = ""
    os.environ["HGPLAIN"] = "1"
    os.environ["HGENCODING"] = "utf-8"
    from mercurial import ui as uimod
    return uimod.ui.load()


def writable_file(repo, path):
    """The filelog of ``path`` to add to (Mercurial 7 opens filelogs
    read-only unless asked; 6.9 has no such argument)."""
    try:
        return repo.file(path, writable=True)
    except TypeError:
        return repo.file(path)


def write_hg(hgdir, messages, count, chunk):
    """Append changesets to ``hgdir`` (created when missing) until it
    holds ``count``, ``chunk`` to a transaction; returns the number
    written by this call."""
    from mercurial import hg, metadata, phases
    from mercurial.manifest import manifestdict

    ui = hg_isolated()
    repo = hg.repository(ui, os.fsencode(hgdir),
                         create=not os.path.exists(hgdir))
    if repo.svfs.exists(b"journal"):
        # A build killed inside a transaction: back to the last one
        # committed, from which this one goes on.
        repo.recover()
    written = 0
    while True:
        repo = repo.unfiltered()
        changelog = repo.changelog
        start = len(changelog)
        if start >= count:
            return written
        nullid = repo.nullid
        with repo.wlock(), repo.lock(), \
                repo.transaction(b"longhistory") as tr, \
                contextlib.ExitStack() as open_revlogs:
            manifests = repo.manifestlog.getstorage(b"")
            # Each revlog's files held open for the whole transaction
            # (else every revision opens and closes them: a third of the
            # time).
            for storage in (changelog, manifests._revlog):
                open_revlogs.enter_context(storage._writing(tr))
            if start:
                parent = changelog.node(start - 1)
                manifest_node = changelog.changelogrevision(parent).manifest
                files = manifestdict(len(nullid),
                                     manifests.revision(manifest_node))
            else:
                parent, manifest_node = nullid, nullid
                files = manifestdict(len(nullid))
            filelogs = {}
            end = min(count, start + chunk)
            for number in range(start, end):
                message, text, date, path, content = commit_at(messages,
                                                                number)
                filelog = filelogs.get(path)
                if filelog is None:
                    filelog = filelogs[path] = writable_file(repo, path)
                    open_revlogs.enter_context(filelog._revlog._writing(tr))
                file_parent = files.get(path, nullid)
                files[path] = filelog.add(content, {}, tr, number,
                                          file_parent, nullid)
                manifest_node = manifests.add(
                    files, tr, number, manifest_node, nullid, [path], [])
                changing = metadata.ChangingFiles(
                    touched=[path],
                    added=[] if file_parent != nullid else [path])
                parent = changelog.add(
                    manifest_node, changing, text, tr, parent, nullid,
                    message.user, (date, 0))
            phases.advanceboundary(repo, tr, phases.public, [parent])
        written += end - start
        log("hg: %d changesets" % end)
        repo = hg.repository(ui, os.fsencode(hgdir))


def build_hg(hgdir, messages, count, chunk):
    start = time.monotonic()
    written = write_hg(hgdir, messages, count, chunk)
    seconds = time.monotonic() - start
    verify = time.monotonic()
    run([executable("hg"), "--cwd", hgdir, "verify", "-q"],
        env=dict(os.environ, HGRCPATH="", HGPLAIN="1"))
    changesets = int(run([executable("hg"), "--cwd", hgdir, "log", "-r",
                          "tip", "-T", "{rev}"],
                         env=dict(os.environ, HGRCPATH=""))) + 1
    return {"changesets": changesets, "written": written,
            "writing seconds": round(seconds, 1),
            "verify seconds": round(time.monotonic() - verify, 1),
            "bytes": tree_bytes(os.path.join(hgdir, ".hg"))}


def build(options):
    directory = os.path.abspath(options.dir)
    os.makedirs(directory, exist_ok=True)
    stages = Stages(directory)
    messages = read_messages(options.source)
    if not messages:
        raise Abort("no commit messages in %s" % ", ".join(options.source),
                    hint="give a Git repository with --source")
    summary = {"messages": len(messages), "commits": options.commits,
               "passes": -(-options.commits // len(messages))}
    log("%d messages, %d passes" % (len(messages), summary["passes"]))
    tag = "-%d" % options.commits
    if "git" in options.forms:
        summary["git"] = stages.run("git" + tag, lambda: build_git(
            os.path.join(directory, GIT_NAME), messages, options.commits))
    if "hg" in options.forms:
        summary["hg"] = stages.run("hg" + tag, lambda: build_hg(
            os.path.join(directory, HG_NAME), messages, options.commits,
            options.chunk))
    with open(os.path.join(directory, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1, sort_keys=True)
    return summary


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m vcsperf.harness.longhistory",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True,
                        help="where to build (outside any checkout)")
    parser.add_argument("--commits", type=int, default=1000000)
    parser.add_argument("--source", action="append",
                        help="a Git repository whose messages to use "
                             "(repeatable; default: %s)"
                             % ", ".join(DEFAULT_SOURCES))
    parser.add_argument("--forms", default="git,hg",
                        help="which forms to build (git, hg or both)")
    parser.add_argument("--chunk", type=int, default=50000,
                        help="Mercurial changesets per transaction")
    options = parser.parse_args(argv)
    options.source = options.source or list(DEFAULT_SOURCES)
    options.forms = set(options.forms.split(","))
    if options.forms - {"git", "hg"} or options.commits < 1 or \
            options.chunk < 1:
        parser.error("--forms takes git and hg; --commits and --chunk a "
                     "positive number")
    return options


def main(argv=None):
    return run_build(build, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
