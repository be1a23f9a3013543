"""The keys of the commit index: their kinds, the rules an index is built
under, and the keys as people type them (``parse_key``).

Apart from ``commitid`` (which extracts the keys from messages, with
regular expressions) because a Git lookup needs only this, and importing
``re`` and compiling those patterns would be a quarter of its time."""

from __future__ import annotations

# For the annotations only, so a lookup imports no typing machinery.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: The kinds of key a message carries that the commit index looks up.
ID, REVIEW, BUG = "id", "review", "bug"
#: The commit-ID trailer (``vcsperf.core.commitid``), always looked for.
TRAILER = "MozReview-Commit-ID"
#: A bug number has at most this many digits (Bugzilla's are 7): a longer
#: run of digits after "Bug" is no bug key.  Also what keeps a number
#: within what ``int`` and a 64-bit integer hold.
BUG_DIGITS = 18
#: A key as typed is at most this many characters (a commit ID is 11, a
#: Change-Id 41): longer ones are refused, not looked up.
KEY_LENGTH = 256
_HEX = frozenset("0123456789abcdef")
_ALNUM = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "abcdefghijklmnopqrstuvwxyz")


class KeyRules:
    """What ``commitid.message_keys`` extracts: commit IDs from
    ``id_trailers`` (``MozReview-Commit-ID`` and any configured name),
    reviews from ``Differential Revision:`` and ``Change-Id:`` lines, and
    bug numbers from the summary line."""

    def __init__(self, id_trailers: Iterable[str] = ()) -> None:
        self.id_trailers = (TRAILER,) + tuple(
            name for name in id_trailers if name != TRAILER)

    @property
    def fingerprint(self) -> bytes:
        """Bytes that change when the rules do (an index built with other
        rules is rebuilt)."""
        return ("v1 " + " ".join(self.id_trailers)).encode("utf-8")


def _digits(text: str) -> bool:
    """Whether ``text`` is ASCII digits (``str.isdigit`` also takes other
    scripts' digits, and more, such as "\u00b2")."""
    return bool(text) and text.isascii() and text.isdigit()


def bug_number(digits: str) -> str:
    """The bug key of ``digits`` (ASCII digits, at most ``BUG_DIGITS``
    of them) without leading zeros; raises ``ValueError`` otherwise."""
    if not _digits(digits) or len(digits) > BUG_DIGITS:
        raise ValueError("not a bug number (at most %d digits 0-9): %s"
                         % (BUG_DIGITS, _shown(digits)))
    return digits.lstrip("0") or "0"


def _shown(text: str) -> str:
    """``text`` for an error message: its repr, cut short."""
    shown = ascii(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def parse_key(text: str) -> tuple[str, str]:
    """``(kind, key)`` for a key as people type it: ``D123`` and a
    ``Change-Id`` (``I`` and 40 hex digits) are reviews, ``bug 123``,
    ``bug123`` and ``Bug 123`` bugs, anything else a commit ID; an explicit
    ``id:``, ``review:`` or ``bug:`` prefix says the kind.

    Raises ``ValueError`` (a user error) for what can be no key: every
    key a message carries is ASCII letters and digits (``commitid``),
    a bug number at most ``BUG_DIGITS`` digits, and a key as typed at
    most ``KEY_LENGTH`` characters."""
    if len(text) > KEY_LENGTH:
        raise ValueError("key longer than %d characters: %s"
                         % (KEY_LENGTH, _shown(text)))
    kind: str | None
    kind, colon, value = text.partition(":")
    if colon and kind in (ID, REVIEW, BUG):
        text = value
    else:
        kind = None
    lowered = text.lower()
    # Any script's digits after "bug" make it meant as a bug, which
    # ``bug_number`` then refuses unless they are ASCII.
    if kind == BUG or (kind is None and lowered.startswith("bug")
                       and lowered[3:].strip(" ").isdigit()):
        number = lowered[3:].strip(" ") if lowered.startswith("bug") \
            else text
        return BUG, bug_number(number)
    is_review = (text[:1] == "D" and _digits(text[1:])) or (
        len(text) == 41 and text[0] == "I" and _HEX.issuperset(text[1:]))
    if kind == REVIEW or (kind is None and is_review):
        if not is_review:
            raise ValueError("not a review (D123 or a Change-Id): %s"
                             % _shown(text))
        return REVIEW, text
    if not text or not _ALNUM.issuperset(text):
        raise ValueError("not a commit ID (letters and digits): %s"
                         % _shown(text))
    return ID, text
