"""Commit IDs that survive history rewriting: the rules both Mercurial and
Git follow, in one module that imports neither (it runs their commands).

A commit ID is a ``MozReview-Commit-ID: <id>`` line in the commit message.
A rewrite (amend, rebase, histedit, graft, ...) keeps the message and so the
ID, which lets code review recognise "the same change" after the commit's
hash has changed.

- Generation: ``new_id`` (random, for real use) and ``derived_id``
  (a hash of a seed, for reproducible tests).
- Parsing: ``find_id`` / ``find_ids``; the keys that the commit index
  looks up (commit IDs, reviews, bugs; ``vcsperf.core.commitkeys``):
  ``message_keys``.
- Placement and skip rules: ``ensure_id``.
- Mapping a new series of commits onto a previous one: ``map_series``;
  reading a series from a Git or Mercurial repository (``read_series``,
  ``with_predecessors``) and mapping one repository's onto another's
  (``map_ids``), with the real ``git`` and ``hg`` on PATH.

Messages are ``str``.  Adapters holding bytes decode them with
``utf-8``/``surrogateescape``, which gives back the same bytes for any input.
Lines end at "\r\n", "\r" or "\n", for Git's hook as for Mercurial (which
stores every "\r" as "\n"), so both find the same ID in any message.  All
of it takes time linear in the message's length.
"""

from __future__ import annotations

import collections
import os
import re
import time

from vcsperf.core.commitkeys import (
    BUG,
    BUG_DIGITS,
    ID,
    REVIEW,
    TRAILER,
    KeyRules,
    bug_number,
)
from vcsperf.core.spawn import git_records

# For the annotations only: Git's hook imports this module for every commit.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

#: 2000-01-01T00:00:00Z, the origin of the ID's time component.
EPOCH = 946684800
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: 64 bits need at most 11 base62 digits; IDs are padded to that width.
ID_LENGTH = 11

# What a line is, for Git's hook and Mercurial alike: lines end at "\r\n",
# "\r" or "\n".  Mercurial stores every "\r" as "\n" (its changelog cuts
# lines as bytes.splitlines does, and strips the white space that ends
# them), so a rule in which a lone "\r" ended no line would miss an ID
# line there that Mercurial then has, and add a second ID.
_LINE_END = re.compile(r"(\r\n|\r|\n)")
# One pattern serves both the search in a whole message and the test of
# one line (with or without its line end).  After the ID, the white space
# that Mercurial strips from the end of a line.
_TRAILER_VALUE = r"(?<![^\r\n])%s: (%s)[ \t\f\v]*(?![^\r\n])"
_ID_VALUE = "[0-9A-Za-z]+"
_ID_LINE = re.compile(_TRAILER_VALUE % (re.escape(TRAILER), _ID_VALUE))
# ``Key: value`` as git interpret-trailers and MozReview recognise it: a
# token without spaces, a colon, a space, then something.
_TRAILER_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*: \S")
_AUTOSQUASH = re.compile(r"(fixup|squash|amend)! ")
# Blank means ASCII white space only, as both Git and Mercurial strip it:
# str.strip() would also eat characters such as "\x1c" that they keep.
_WHITESPACE = " \t\r\n\f\v"


def _base62(number: int) -> str:
    digits = []
    while number:
        number, digit = divmod(number, 62)
        digits.append(ALPHABET[digit])
    return "".join(reversed(digits)).rjust(ID_LENGTH, ALPHABET[0])


def new_id(now: float | None = None) -> str:
    """A fresh ID: 32 bits from the operating system's CSPRNG above 32
    bits of seconds since 2000-01-01 UTC (``now`` in Unix seconds, default
    the current time), in base62, 11 characters."""
    seconds = int(time.time() if now is None else now) - EPOCH
    random_bits = int.from_bytes(os.urandom(4), "big")
    return _base62((random_bits << 32) | (seconds & 0xFFFFFFFF))


def derived_id(seed: bytes) -> str:
    """A reproducible ID: the first 64 bits of the SHA-256 of ``seed``
    (bytes).  For tests; commits with equal seeds get equal IDs."""
    # Imported here: the Git hook imports this module for every commit and
    # needs no hashlib (with its OpenSSL start-up) unless IDs are derived.
    import hashlib
    return _base62(int.from_bytes(hashlib.sha256(seed).digest()[:8], "big"))


def find_id(message: str) -> str | None:
    """The ID of the first ``MozReview-Commit-ID:`` line, or None."""
    match = _ID_LINE.search(message)
    return match.group(1) if match else None


def find_ids(message: str) -> list[str]:
    """Every ID line's ID, in order (more than one after a fold)."""
    return _ID_LINE.findall(message)


def replace_id(message: str, commit_id: str) -> str:
    """``message`` with the ID of its first ID line replaced."""
    match = _ID_LINE.search(message)
    if match is None:
        return message
    return message[:match.start(1)] + commit_id + message[match.end(1):]


class _Message:
    """A message cut into lines, remembering how to put it back together.

    ``lines`` keep their line ends (the last line may have none).  With a
    comment prefix (Git's ``core.commentChar``), everything from the
    scissors line on is ``tail``, which Git cuts off and placement leaves
    alone.
    """

    def __init__(self, text: str, comment: str | None) -> None:
        parts = _LINE_END.split(text)
        lines = [parts[i] + parts[i + 1] for i in range(0, len(parts) - 1, 2)]
        if parts[-1]:
            lines.append(parts[-1])
        self.final_newline = text.endswith(("\r", "\n"))
        # New lines end as the first line does.
        self.eol = parts[1] if len(parts) > 1 else "\n"
        self.comment = comment
        self.tail: list[str] = []
        if comment:
            scissors = "%s ------------------------ >8 " \
                "------------------------" % comment
            for index, line in enumerate(lines):
                if line.rstrip("\r\n") == scissors:
                    lines, self.tail = lines[:index], lines[index:]
                    break
        self.lines = lines

    def is_comment(self, line: str) -> bool:
        return line.startswith(self.comment) if self.comment else False

    def is_content(self, line: str) -> bool:
        return bool(line.strip(_WHITESPACE)) and not self.is_comment(line)

    def content_indexes(self) -> list[int]:
        return [i for i, line in enumerate(self.lines) if self.is_content(line)]

    def text(self, lines: list[str]) -> str:
        """``lines`` (given line ends where they lack them), then the
        tail; the message ends with a line end if it did before."""
        out: list[str] = []
        for line in lines:
            if out and out[-1].endswith("\r") and line.startswith("\n"):
                out[-1] += "\n"    # "\r" then "\n" would be one line end
            out.append(line if line.endswith(("\r", "\n"))
                       else line + self.eol)
        if not self.tail and not self.final_newline:
            out[-1] = _LINE_END.sub("", out[-1])
        return "".join(out + self.tail)


def skip_reason(message: str, parents: int = 1,
                comment: str | None = None) -> str | None:
    """Why this commit gets no ID (``"merge"``, ``"empty"``, ``"autosquash"``
    for ``fixup!``/``squash!``/``amend!`` messages), or None."""
    return _skip_reason(_Message(message, comment), parents)


def _skip_reason(msg: _Message, parents: int) -> str | None:
    if parents > 1:
        return "merge"
    content = msg.content_indexes()
    if not content:
        return "empty"
    if _AUTOSQUASH.match(msg.lines[content[0]]):
        return "autosquash"
    return None


def ensure_id(message: str, make_id: Callable[[], str], parents: int = 1,
              comment: str | None = None) -> str:
    """``message`` with exactly one ID line, unless a skip rule applies.

    A message with one ID is returned as it is.  A message without one
    gets ``make_id()`` (called only then): trailing blank lines are dropped,
    and the line joins the last paragraph when that is a trailer block
    (``Key: value`` lines, not the subject's paragraph), or else starts a
    paragraph of its own.  A message with several IDs (after a fold) keeps
    the first: in a fold or squash the first message is the changeset the
    others were folded into, which is also the one ``histedit roll`` keeps.
    Its line moves to where a new ID would go.

    ``comment`` is Git's comment prefix: comment lines are not content, and
    the ID goes before them and before a scissors line.
    """
    msg = _Message(message, comment)
    if _skip_reason(msg, parents):
        return message
    ids = [i for i, line in enumerate(msg.lines)
           if not msg.is_comment(line) and _ID_LINE.match(line)]
    if len(ids) == 1:
        return message
    if ids:
        first = _ID_LINE.match(msg.lines[ids[0]])
        assert first is not None  # ids are the lines that match
        commit_id = first.group(1)
        dropped = set(ids) | _id_paragraph_breaks(msg, ids)
        lines = [line for i, line in enumerate(msg.lines) if i not in dropped]
    else:
        commit_id = make_id()
        lines = msg.lines
    id_line = "%s: %s" % (TRAILER, commit_id)
    content = [i for i, line in enumerate(lines) if msg.is_content(line)]
    if not content:
        return msg.text([id_line])
    last = content[-1]
    body, rest = lines[:last + 1], lines[last + 1:]
    if not _ends_in_trailers(msg, body):
        body.append(msg.eol)
    # Blank lines after the content go; comment lines stay after the ID.
    rest = [line for line in rest if msg.is_comment(line)]
    return msg.text(body + [id_line] + rest)


def _id_paragraph_breaks(msg: _Message, ids: list[int]) -> set[int]:
    """The blank lines that gave the ID lines at ``ids`` paragraphs of
    their own: each one's blank line before, unless trailers follow the
    ID, which the blank line still sets apart.  A fold joins messages
    that each end in an ID paragraph; without these the folded message
    keeps a blank line where each ID was."""
    lines = msg.lines
    return {i - 1 for i in ids
            if i and not msg.is_content(lines[i - 1])
            and not msg.is_comment(lines[i - 1])
            and not (i + 1 < len(lines) and _TRAILER_LINE.match(lines[i + 1]))}


def _ends_in_trailers(msg: _Message, body: list[str]) -> bool:
    """Whether the last paragraph of ``body`` is a trailer block: every
    line ``Key: value`` or an indented continuation, and not the first
    paragraph (a subject such as "Bug: crash" is no trailer)."""
    paragraph = []
    start = len(body)
    while start and body[start - 1].strip(_WHITESPACE):
        start -= 1
        if not msg.is_comment(body[start]):
            paragraph.append(body[start])
    paragraph.reverse()
    if not any(msg.is_content(line) for line in body[:start]):
        return False
    for index, line in enumerate(paragraph):
        if _TRAILER_LINE.match(line):
            continue
        if index and line[:1] in " \t":
            continue
        return False
    return True


# Lookup keys ---------------------------------------------------------------

# The review trailers: Phabricator's URL ends in the revision, "D123";
# Gerrit's Change-Id is "I" and 40 hex digits.
_DIFFERENTIAL = re.compile(_TRAILER_VALUE % (
    "Differential Revision", r"\S*?(?<![A-Za-z0-9])D[0-9]+"))
_CHANGE_ID = re.compile(_TRAILER_VALUE % ("Change-Id", "I[0-9a-f]{40}"))
# "Bug 123" or "bug 123" as a word of the summary line; a longer run of
# digits than a bug number has is none (``commitkeys.BUG_DIGITS``).
_BUG = re.compile(r"(?<![A-Za-z0-9])[Bb]ug ([0-9]{1,%d})(?![0-9A-Za-z])"
                  % BUG_DIGITS)


def _trailer_pattern(name: str) -> re.Pattern[str]:
    if name == TRAILER:
        return _ID_LINE
    return re.compile(_TRAILER_VALUE % (re.escape(name), _ID_VALUE))


def message_keys(message: str, rules: KeyRules = KeyRules()
                 ) -> set[tuple[str, str]]:
    """The set of ``(kind, key)`` that ``message`` carries: ``(ID,
    "4Aq2kO7Vx9d")``, ``(REVIEW, "D123")`` or ``(REVIEW, "I<hex>")``,
    ``(BUG, "1234567")`` (no leading zeros)."""
    # The substring tests spare most messages the patterns (an index
    # build reads every message).
    keys: set[tuple[str, str]] = set()
    for name in rules.id_trailers:
        if name in message:
            keys.update((ID, found)
                        for found in _trailer_pattern(name).findall(message))
    if "Differential Revision: " in message:
        for found in _DIFFERENTIAL.findall(message):
            keys.add((REVIEW, found[found.rindex("/") + 1:] if "/" in found
                      else found))
    if "Change-Id: " in message:
        keys.update((REVIEW, found) for found in _CHANGE_ID.findall(message))
    if "ug " in message:
        summary = _LINE_END.split(message, 1)[0]
        keys.update((BUG, bug_number(found))
                    for found in _BUG.findall(summary))
    return keys


# Mapping ------------------------------------------------------------------

class Commit(collections.namedtuple(
        "Commit", "node commit_id predecessors")):
    """One commit of a series.

    ``node`` is its hash (any unique string), ``commit_id`` its parsed ID
    or None, ``predecessors`` the nodes it replaces by obsolescence,
    directly or not (empty where there is no such data, as in Git).
    """

    def __new__(cls, node: str, commit_id: str | None = None,
                predecessors: Iterable[str] = ()) -> Commit:
        return super().__new__(cls, node, commit_id, frozenset(predecessors))


class Match(collections.namedtuple("Match", "new old how")):
    """``new`` matched ``old`` (None when it is a new change) by ``how``:
    ``"node"``, ``"obsolescence"``, ``"commit-id"``, ``"position"`` or
    None."""


class Conflict(collections.namedtuple("Conflict", "new old taken_by how")):
    """``new`` would have matched ``old`` by ``how``, but ``old`` already
    belongs to ``taken_by``; ``new`` is left unmatched instead."""


class Mapping(collections.namedtuple(
        "Mapping", "matches unmatched_old conflicts duplicate_ids")):
    """The result of ``map_series``.

    - ``matches``: one ``Match`` per new commit, in the new series' order;
    - ``unmatched_old``: old commits no new commit took (dropped, folded,
      or their ID lost);
    - ``conflicts``: every ``Conflict``, so no new commit is ever attached
      to an old commit that another new commit already has;
    - ``duplicate_ids``: ``{id: [node, ...]}`` for IDs that more than one
      commit carries, old and new series each counted on its own.
    """

    def successors(self, old: Commit) -> list[Commit]:
        """New commits that list ``old`` as a predecessor (a fold's
        result, or a split's parts)."""
        return [match.new for match in self.matches
                if old.node in match.new.predecessors]


def map_series(old: Sequence[Commit], new: Sequence[Commit],
               positional: bool = False) -> Mapping:
    """Match each commit of the ``new`` series to one of the ``old``
    series, in this order of evidence:

    1. the same node;
    2. obsolescence: an old commit the new one replaces (when several,
       the one with the same ID first, as after a fold that kept it);
    3. the same commit ID;
    4. with ``positional``, and only for new commits without an ID: the
       old commit at the same index.

    Each old commit goes to at most one new commit; a new commit that
    finds its old commit taken gets a ``Conflict`` and stays unmatched.
    """
    taken: dict[str, Commit] = {}
    found: dict[str, Match] = {}
    conflicts: list[Conflict] = []

    def claim(commit: Commit, candidates: Iterable[Commit], how: str
              ) -> None:
        candidates = list(candidates)
        for old_commit in candidates:
            if old_commit.node not in taken:
                taken[old_commit.node] = commit
                found[commit.node] = Match(commit, old_commit, how)
                return
        if candidates:
            conflicts.append(Conflict(commit, candidates[0],
                                      taken[candidates[0].node], how))

    def unmatched() -> list[Commit]:
        return [c for c in new if c.node not in found]

    old_by_node = {commit.node: commit for commit in old}
    for commit in new:
        if commit.node in old_by_node:
            claim(commit, [old_by_node[commit.node]], "node")
    # A successor that kept its predecessor's ID has the better claim on
    # it (the first part of a split, the result of a fold), so those go
    # first.
    for same_id in (True, False):
        for commit in unmatched():
            claim(commit, [o for o in old if o.node in commit.predecessors
                           and _same_id(commit, o) == same_id],
                  "obsolescence")
    old_by_id = collections.defaultdict(list)
    for commit in old:
        if commit.commit_id:
            old_by_id[commit.commit_id].append(commit)
    for commit in unmatched():
        if commit.commit_id:
            claim(commit, old_by_id[commit.commit_id], "commit-id")
    if positional:
        # A commit that lost a claim to another is known to be something
        # else's successor: its position says nothing.
        stuck = {conflict.new.node for conflict in conflicts}
        for index, commit in enumerate(new):
            if (commit.node not in found and commit.commit_id is None
                    and commit.node not in stuck and index < len(old)):
                claim(commit, [old[index]], "position")
    # The conflicts that stand: a commit matched later on was not hurt.
    conflicts = [c for c in conflicts if c.new.node not in found]
    return Mapping(
        matches=[found.get(c.node, Match(c, None, None)) for c in new],
        unmatched_old=[c for c in old if c.node not in taken],
        conflicts=conflicts,
        duplicate_ids=_duplicate_ids(old, new))


def _same_id(new_commit: Commit, old_commit: Commit) -> bool:
    return new_commit.commit_id is not None and \
        new_commit.commit_id == old_commit.commit_id


def _duplicate_ids(*series: Iterable[Commit]) -> dict[str, list[str]]:
    duplicates: dict[str, list[str]] = {}
    for commits in series:
        nodes = collections.defaultdict(list)
        for commit in commits:
            if commit.commit_id:
                nodes[commit.commit_id].append(commit.node)
        for commit_id, owners in nodes.items():
            if len(owners) > 1:
                duplicates.setdefault(commit_id, []).extend(owners)
    return duplicates


# Reading a series from a repository ------------------------------------------

def git_messages(repo_path: str, revisions: Iterable[str]
                 ) -> Iterator[tuple[str, str]]:
    """``(sha, message)`` of the commits that ``revisions`` (arguments of
    ``git log``, such as ``main..topic`` or ``^SHA``) name in a Git
    repository, parents first."""
    # As git writes them: a million messages are never all in memory.
    for entry in git_records(
            repo_path, "log", "--stdin", "--reverse", "--topo-order", "-z",
            "--format=%H%n%B",
            input=b"".join(r.encode("utf-8", "surrogateescape") + b"\n"
                           for r in revisions)):
        sha, _, message = entry.partition(b"\n")
        if sha:
            yield sha.decode("ascii"), message.decode("utf-8",
                                                      "surrogateescape")


def read_series(repo_path: str, revisions: str, hidden: bool = False,
                env: dict[str, str] | None = None) -> list[Commit]:
    """The commits that ``revisions`` names in a Git repository (a range
    such as ``main..topic``) or a Mercurial one (a revset, which sees
    obsolete changesets with ``hidden``), oldest first, as ``Commit``
    without predecessors.  ``env`` is the environment hg runs in (default:
    this process's)."""
    if not os.path.isdir(os.path.join(repo_path, ".hg")):
        return [Commit(sha, find_id(message))
                for sha, message in git_messages(repo_path, [revisions])]
    # here: Git's lookups import this module, and process's imports are
    # a fifth of their time.
    from vcsperf.core.process import hg_output
    out = hg_output(repo_path, *(["--hidden"] if hidden else []), "log",
                    "-r", revisions, "-T", "{node}\\n{desc}\\0", env=env)
    series: list[Commit] = []
    for entry in out.split("\0"):
        node, _, message = entry.partition("\n")
        if node:
            series.append(Commit(node, find_id(message)))
    return series


def with_predecessors(repo_path: str, old: list[Commit], new: list[Commit],
                      env: dict[str, str] | None = None) -> list[Commit]:
    """``new`` with the predecessors that the Mercurial repository's
    obsolescence markers give among ``old`` (the same repository)."""
    if not old:
        return new
    from vcsperf.core.process import hg_output  # here: see read_series
    out = hg_output(repo_path, "log", "--hidden", "-r",
                    " or ".join(c.node for c in old), "-T",
                    "{node}{revset('successors(%d)', rev) % ' {node}'}\\n",
                    env=env)
    predecessors: dict[str, list[str]] = {}
    for line in out.splitlines():
        node, *successors = line.split()
        for successor in successors:
            if successor != node:
                predecessors.setdefault(successor, []).append(node)
    return [c._replace(predecessors=frozenset(predecessors.get(c.node, ())))
            for c in new]


def map_ids(old_repo: str, old_revs: str, new_repo: str, new_revs: str,
            positional: bool = False) -> Mapping:
    """Map the ``new`` series onto the ``old`` one (see ``map_series``),
    using obsolescence markers when both are the same Mercurial
    repository.  Obsolete changesets count in the old series only."""
    # The old series is history, obsolete by now in Mercurial.
    old = read_series(old_repo, old_revs, hidden=True)
    new = read_series(new_repo, new_revs)
    if os.path.isdir(os.path.join(old_repo, ".hg")) and \
            os.path.realpath(old_repo) == os.path.realpath(new_repo):
        new = with_predecessors(old_repo, old, new)
    return map_series(old, new, positional=positional)
