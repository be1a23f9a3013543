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


#: Size suffixes, as Mercurial's ``util.sizetoint`` reads them.
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20,
               "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}


def parse_size(value: str, setting: str, low: int, high: int) -> int:
    """``value`` of ``setting`` as a number of bytes (``4k``, ``16m``,
    ``2g`` or a whole number), from ``low`` to ``high``; ``Abort``, naming
    the setting and the range, otherwise."""
    text = value.strip().lower()
    digits = text.rstrip("kmgb")
    unit = text[len(digits):]
    number = None
    if digits.isdigit() and digits.isascii() and unit in _SIZE_UNITS:
        number = int(digits) * _SIZE_UNITS[unit]
    if number is None or not low <= number <= high:
        raise Abort("%s must be a size from %s to %s (bytes, or with a k, "
                    "m or g suffix), not %r" % (setting, format_size(low),
                                                format_size(high), value))
    return number


def format_size(number: int) -> str:
    """``number`` of bytes as ``parse_size`` reads it, in the largest
    unit that divides it."""
    for unit, factor in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if number and number % factor == 0:
            return "%d%s" % (number // factor, unit)
    return "%d" % number
