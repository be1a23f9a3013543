"""Reading the value of a setting that no version control system parses
for us (git config's, a bundle destination's) the way Mercurial reads
its own, so a word means the same on both sides."""

from __future__ import annotations

from vcsperf.core.errors import Abort

#: Mercurial's words for a boolean (``stringutil.parsebool``), in any case.
BOOLEAN_WORDS = {"1": True, "yes": True, "true": True, "on": True,
                 "always": True, "0": False, "no": False, "false": False,
                 "off": False, "never": False}
#: The words, as an error message lists them.
ACCEPTED_BOOLEANS = ("yes or no, on or off, true or false, always or "
                     "never, 1 or 0")


def as_bool(value: str) -> bool | None:
    """``value`` as a boolean, or None when it is none of the words (a
    setting that takes other values too)."""
    return BOOLEAN_WORDS.get(value.strip().lower())


def parse_bool(value: str, setting: str) -> bool:
    """``value`` of ``setting`` (its name, as the user writes it) as a
    boolean; ``Abort``, naming the setting and the accepted words, when
    it is none of them."""
    parsed = as_bool(value)
    if parsed is None:
        raise Abort("%s must be a boolean (%s), not %r"
                    % (setting, ACCEPTED_BOOLEANS, value))
    return parsed
