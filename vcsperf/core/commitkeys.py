"""The keys of the commit index: their kinds, the rules an index is built
under, and the keys as people type them (``parse_key``).

Apart from ``commitids`` (which extracts the keys from messages, with
regular expressions) because a Git lookup needs only this, and importing
``re`` and compiling those patterns would be a quarter of its time."""

#: The kinds of key a message carries that the commit index looks up.
ID, REVIEW, BUG = "id", "review", "bug"
#: The commit-ID trailer (``vcsperf.core.commitids``), always looked for.
TRAILER = "MozReview-Commit-ID"
_HEX = frozenset("0123456789abcdef")


class KeyRules:
    """What ``commitids.message_keys`` extracts: commit IDs from
    ``id_trailers`` (``MozReview-Commit-ID`` and any configured name),
    reviews from ``Differential Revision:`` and ``Change-Id:`` lines, and
    bug numbers from the summary line."""

    def __init__(self, id_trailers=()):
        self.id_trailers = (TRAILER,) + tuple(
            name for name in id_trailers if name != TRAILER)

    @property
    def fingerprint(self):
        """Bytes that change when the rules do (an index built with other
        rules is rebuilt)."""
        return ("v1 " + " ".join(self.id_trailers)).encode("utf-8")


def _digits(text):
    return text.isascii() and text.isdigit()


def parse_key(text):
    """``(kind, key)`` for a key as people type it: ``D123`` and a
    ``Change-Id`` (``I`` and 40 hex digits) are reviews, ``bug 123``,
    ``bug123`` and ``Bug 123`` bugs, anything else a commit ID; an explicit
    ``id:``, ``review:`` or ``bug:`` prefix says the kind."""
    kind, colon, value = text.partition(":")
    if colon and kind in (ID, REVIEW, BUG):
        text = value
    else:
        kind = None
    lowered = text.lower()
    if kind == BUG or (kind is None and lowered.startswith("bug")
                       and lowered[3:].strip().isdigit()):
        number = lowered[3:].strip() if lowered.startswith("bug") else text
        if not number.isdigit():
            raise ValueError("not a bug number: %s" % text)
        return BUG, str(int(number))
    if kind == REVIEW or (kind is None and (
            (text[:1] == "D" and _digits(text[1:])) or
            (len(text) == 41 and text[0] == "I" and
             _HEX.issuperset(text[1:])))):
        return REVIEW, text
    return ID, text
