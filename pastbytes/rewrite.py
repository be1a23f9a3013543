"""The rewrite: Python-2-era source text in, the same text with its plain
string literals made bytes literals out.

    text, encoding = decode(data)
    transform(text, Rules(kwargs_names=("opts",)), encoding)

The rules:

- an unprefixed ``'...'`` or ``"..."`` literal becomes ``b'...'``
  (non-ASCII characters become ``\\xNN`` escapes of the file's encoding,
  which is what the literal held on Python 2);
- triple-quoted literals, and literals that already carry a prefix
  (``b r u f``), are left alone;
- implicitly concatenated literals are decided as a group: the group is
  rewritten only if every part is a plain or a bytes literal, so a group
  never mixes ``str`` and ``bytes`` (``'a' b'b'``, valid Python 2, becomes
  valid Python 3);
- ``str`` is kept where Python 3 requires it: the attribute name of
  ``getattr/setattr/hasattr/delattr``, the arguments of ``.encode()`` and
  ``.decode()``, a literal whose ``.encode()`` is called, the keys of a
  ``**{...}`` keyword dict, the ``'__main__'`` compared with ``__name__``,
  and string statements (docstrings, so that ``__doc__`` and ``from
  __future__`` keep working);
- f-strings are left alone, replacement fields included, tokenized the way
  the running Python does (3.12 allows nested quotes in them);
- a module that says ``from __future__ import unicode_literals`` was
  already unicode-correct: its literals are left alone;
- ``Rules(kwargs_names=("opts",))`` keeps ``str`` for the keys of
  keyword-argument dicts by those names (``opts['rev']``,
  ``opts.get('rev')``, ``'rev' in opts``), since ``**kwargs`` dicts have
  ``str`` keys on Python 3;
- method renames, by default ``.iteritems()``, ``.itervalues()`` and
  ``.iterkeys()`` to their Python 3 names;
- ``# pastbytes: off`` on a line of its own turns all of this off until a
  ``# pastbytes: on`` line; at the end of a line of code it exempts that
  line.

Only literal prefixes and renamed methods change, never line breaks, so
line numbers in tracebacks, ``inspect.getsource`` and ``linecache`` are
those of the original file.  Columns after a rewritten literal on the same
line move right by one per inserted ``b`` (caret lines in tracebacks), the
price of compiling the rewritten text rather than an edited syntax tree,
which measured 2.6 times the cost of a plain compile.

The rewrite is a single scan with regular expressions over the source
text, plus small local scans at ``getattr(`` and the like; it never runs
the pure-Python tokenizer, which alone costs three times a compile on
Python 3.11.  Its cost is linear in the size of the text, whatever the
text (the importer reads any file under a configured directory): no
pattern can backtrack more than linearly, and the local scans note what
they pass, so that nested calls never look at the same text twice.
"""

from __future__ import annotations

import hashlib
import io
import re
import sys
import tokenize

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Container, Iterable

#: Bump when a rule changes what the rewrite produces: cached pyc files of
#: older versions are then ignored.
FORMAT_VERSION = 2

DEFAULT_RENAMES = (("iteritems", "items"), ("itervalues", "values"),
                   ("iterkeys", "keys"))
ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "hasattr", "delattr")

_STRING_BODY = {
    "'''": re.compile(r"'''(?:[^'\\]|\\[\s\S]|'(?!''))*'''"),
    '"""': re.compile(r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*"""'),
    "'": re.compile(r"'(?:[^'\\\r\n]|\\(?:\r\n|[\s\S]))*'"),
    '"': re.compile(r'"(?:[^"\\\r\n]|\\(?:\r\n|[\s\S]))*"'),
}
# Python 3.12 tokenizes f-strings piece by piece: a replacement field may
# hold any expression, including strings in the same quotes.
_NESTED_FSTRINGS = sys.version_info >= (3, 12)

# The patterns below are scanned over hostile text too (any file under a
# configured directory), so none may backtrack more than linearly: no
# repeat holds alternatives that can match the same text (``\r?\n|\r``
# inside a repeat matched each "\r\n" two ways, which made the scan
# exponential on CRLF files), and no repeat is nested in another.
# One line end: "\r\n", "\r" or "\n", as in Python; never "\r" then "\n".
_EOL = r"(?:\r\n|\r(?!\n)|\n)"
# Blanks up to a line end, and whether there is one; then blanks of any
# kind.
_BLANKS = re.compile(r"[ \t\f]*(?:([\r\n])[ \t\f\r\n]*)?")
_LINE_CONTINUATION = re.compile(r"\\" + _EOL)
_PART_START = re.compile(r"[rRbBuUfFtT]{0,2}['\"]")
# Characters after a literal that end its group and make it neither a
# statement nor a literal that a rule keeps as str.
_ENDS_GROUP = frozenset(",)]}:%+*")
_STATEMENT_END = re.compile(r"[ \t\f]*(?:[#;\r\n]|\Z)")
_KEYWORD_ARG = re.compile(r"[^\W\d]\w*\s*=(?!=)\s*")
_ITEM_EVENT = re.compile(r"['\"#()\[\]{},]")
_BRACKETS = re.compile(r"[()\[\]{}]")
_COMMENT = re.compile(r"#[^\r\n]*")
_SWITCH = re.compile(r"#\s*pastbytes:\s*(off|on)\b")
# The names a ``from __future__ import`` statement imports: a
# parenthesized list, or a line with its continuations.  "from" comes
# first, so that the search skips to it at C speed; the look-behind after
# it wants it at the start of a word.
_FUTURE_IMPORT = re.compile(
    r"from(?<![^\r\n \t]from)[ \t]+__future__[ \t]+import[ \t]*"
    r"(?:\(([\w\s,]*)|([\w \t\f,]*(?:\\%s[\w \t\f,]*)*))" % _EOL)
_UNICODE_LITERALS = re.compile(r"\bunicode_literals\b")
#: Replacement fields of f-strings open at once that the rewrite follows
#: (Python 3.12+ refuses f-strings nested 150 deep; every level holds one).
_MAX_FSTRING_FIELDS = 150
_NON_ASCII = re.compile(r"\\[\s\S]|[^\x00-\x7f]")


class Rules:
    """A rule set: the method renames and the keyword-dict names.

    The rules that keep ``str`` for attribute names, codecs, ``**{}``
    keys, ``__main__`` and string statements always apply.
    """

    def __init__(self, renames: Iterable[tuple[str, str]] = DEFAULT_RENAMES,
                 kwargs_names: Iterable[str] = ()) -> None:
        self.renames = dict(renames)
        self.kwargs_names = tuple(kwargs_names)
        for name in list(self.renames.values()) + list(self.renames) + \
                list(self.kwargs_names):
            if not name.isidentifier():
                raise ValueError("not a Python name: %r" % name)
        self._scan = re.compile(self._scan_pattern())
        self._after_group = self._after_group_pattern()
        self._tag = self._make_tag()

    def _scan_pattern(self) -> str:
        # One search finds, left to right, everything the rewrite looks
        # at; strings and comments are consumed whole, so nothing inside
        # them is ever mistaken for code.  The pattern starts with the set
        # of first characters of all events and only then tells them
        # apart, which lets the regex engine skip everything else at C
        # speed (three times faster than a plain alternation here); what
        # a look-behind would check (a string prefix, a whole word) is
        # checked in Python at the few hits.
        events = [
            r"(?<=\#)(?P<comment>[^\r\n]*)",
            r"(?<=['\"])(?P<quote>)",
            r"(?<=a)(?P<attr>ttr)\s*\(",
            r"(?<=\.)\s*(?P<codec>encode|decode)\s*\(",
            r"(?<=\*)(?P<kwdict>\*)\s*\{",
            r"(?<=_)(?P<dunder>_name__)\s*[=!]=\s*",
        ]
        first = "#'\"a.*_"
        if self.renames:
            events.append(r"(?<=\.)\s*(?P<rename>%s)\b(?=\s*\()"
                          % "|".join(map(re.escape, sorted(self.renames))))
        if self.kwargs_names:
            events.append(
                r"(?P<kwargs>%s)\s*(?:\[|\.\s*(?:get|pop|setdefault)\s*\()"
                r"\s*" % "|".join(r"(?<=%s)%s" % (re.escape(name[0]),
                                                  re.escape(name[1:]))
                                  for name in self.kwargs_names))
            first += "".join(name[0] for name in self.kwargs_names)
        return "[%s](?:%s)" % ("".join(map(re.escape, sorted(set(first)))),
                               "|".join(events))

    def _after_group_pattern(self) -> re.Pattern[str]:
        # ``'abc'.encode(...)`` gave bytes on Python 2 too: keep the str.
        tails = [r"[=!]=\s*__name__\b", r"\.\s*encode\s*\("]
        if self.kwargs_names:
            tails.append(r"(?:not\s+)?in\s+(?:%s)\b"
                         % "|".join(self.kwargs_names))
        return re.compile(r"\s*(?:%s)" % "|".join(tails))

    def tag(self) -> str:
        """The pyc optimization tag: changes with the format and the
        rules, and with ``-O``."""
        return self._tag

    def _make_tag(self) -> str:
        tag = "pastbytes%d" % FORMAT_VERSION
        if self.renames != dict(DEFAULT_RENAMES) or self.kwargs_names:
            digest = hashlib.sha1(repr((sorted(self.renames.items()),
                                        self.kwargs_names)).encode())
            tag += "x" + digest.hexdigest()[:10]
        if sys.flags.optimize:
            tag += "o%d" % sys.flags.optimize
        return tag

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rules) and \
            (self.renames, self.kwargs_names) == \
            (other.renames, other.kwargs_names)

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.renames.items())), self.kwargs_names))


DEFAULT_RULES = Rules()


# -- the rewrite --------------------------------------------------------

class ScanError(ValueError):
    """The rewrite found a string literal that does not end; for source
    that Python compiles, a bug in the rewrite."""


def transform(text: str, rules: Rules = DEFAULT_RULES,
              encoding: str = "utf-8") -> str:
    """The rewritten source of ``text`` (a str): what the importer
    compiles and what ``contrib/pastbytes_rewrite.py`` writes.
    ``encoding`` is the file's, for non-ASCII characters in literals that
    become bytes.  Raises :class:`ScanError` for an unterminated
    literal."""
    return _Rewrite(text, rules, encoding).result()


def _literal(text: str, quote_at: int,
             fields: int = 0) -> tuple[int, int, str]:
    """``(start, end, kind)`` of the string literal whose opening quote is
    at ``quote_at``: ``kind`` is ``"plain"`` (unprefixed, not
    triple-quoted: the ones to rewrite), ``"bytes"`` or ``"other"``; ``end``
    is -1 if the literal does not end.  ``fields``: the replacement fields
    of f-strings open around it."""
    start = _string_start(text, quote_at)
    letters = text[start:quote_at].lower()
    quote = text[quote_at]
    if text.startswith(quote * 3, quote_at):
        quote *= 3
    if _NESTED_FSTRINGS and ("f" in letters or "t" in letters):
        end = _FString(text, "r" in letters, fields).end(quote_at, quote)
    else:
        body = _STRING_BODY[quote].match(text, quote_at)
        end = body.end() if body else -1
    if "b" in letters:
        return start, end, "bytes"
    return start, end, "other" if letters or len(quote) == 3 else "plain"


_PREFIXES = frozenset(["r", "u", "b", "br", "rb", "f", "fr", "rf", "t", "tr",
                       "rt"])


def _string_start(text: str, quote_at: int) -> int:
    """Where the string literal whose opening quote is at ``quote_at``
    starts: at its prefix, if the word before the quote is one."""
    start = quote_at
    while start > 0 and start > quote_at - 3 and \
            (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    if start < quote_at and _starts_name(text, start) and \
            text[start:quote_at].lower() in _PREFIXES:
        return start
    return quote_at


def _starts_name(text: str, at: int) -> bool:
    """Whether a name starting at ``at`` is a whole word, not an
    attribute (``x.getattr``) or the end of a longer name."""
    if at == 0:
        return True
    before = text[at - 1]
    return not (before.isalnum() or before in "_.")


def _gap(text: str, pos: int) -> tuple[int, bool]:
    """``(end, newline)``: where the blanks, comments and line
    continuations from ``pos`` end, and whether they hold a line end that
    no backslash continues.  One piece at a time, each taken whole by a
    pattern that cannot backtrack: linear by construction."""
    newline = False
    while True:
        blanks = _BLANKS.match(text, pos)
        assert blanks is not None       # it matches the empty string
        newline = newline or blanks.group(1) is not None
        pos = blanks.end()
        if text.startswith("#", pos):
            comment = _COMMENT.match(text, pos)
            assert comment is not None      # "#" starts one
            pos = comment.end()
            continue
        continuation = _LINE_CONTINUATION.match(text, pos)
        if continuation is None:
            return pos, newline
        pos = continuation.end()


class _FString:
    """Finds the end of an f-string as Python 3.12+ tokenizes it."""

    def __init__(self, text: str, raw: bool, fields: int) -> None:
        self.text = text
        self.raw = raw
        self.fields = fields

    def end(self, quote_at: int, quote: str) -> int:
        return self._literal(quote_at + len(quote), quote, "", self.fields)

    def _literal(self, i: int, quote: str, closer: str, fields: int) -> int:
        # Literal text, up to the closing quote (or to ``closer``, the
        # ``}`` that ends a format spec); -1 if unterminated.
        text = self.text
        n = len(text)
        while i < n:
            c = text[i]
            if text.startswith(quote, i):
                return i + len(quote) if not closer else -1
            if c == closer:
                return i
            if c == "\\":
                if not self.raw and text.startswith("N{", i + 1):
                    close = text.find("}", i)
                    if close < 0:
                        return -1
                    i = close + 1
                    continue
                i += 1 if text[i + 1:i + 2] in ("{", "}") else 2
                continue
            if c in "\r\n" and len(quote) == 1:
                return -1
            if c == "{":
                if text.startswith("{{", i) and not closer:
                    i += 2
                    continue
                i = self._field(i + 1, quote, fields + 1)
                if i < 0:
                    return -1
                continue
            if c == "}" and text.startswith("}}", i):
                i += 2
                continue
            i += 1
        return -1

    def _field(self, i: int, quote: str, fields: int) -> int:
        # A replacement field's expression, up to its ``}``.
        if fields > _MAX_FSTRING_FIELDS:
            raise ScanError("f-strings nested too deeply")
        text = self.text
        n = len(text)
        depth = 0
        while i < n:
            c = text[i]
            if c in "'\"":
                i = _literal(text, i, fields)[1]
                if i < 0:
                    return -1
                continue
            if c == "#":
                comment = _COMMENT.match(text, i)
                assert comment is not None      # "#" starts one
                i = comment.end()
                continue
            if c in "([{":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == "}":
                if depth == 0:
                    return i + 1
                depth -= 1
            elif c == ":" and depth == 0:
                end = self._literal(i + 1, quote, "}", fields)
                return -1 if end < 0 else end + 1
            i += 1
        return -1


class _Depth:
    """Bracket depth, and the innermost open bracket, at a position,
    from the code between the strings and comments found so far.  Lazily
    (rewrites that need them are rare, so most files never count a
    bracket) and incrementally: the scan asks in text order, so each
    stretch of code is looked at once."""

    def __init__(self, text: str) -> None:
        self.text = text
        # (start, end) of strings and comments
        self.opaque: list[tuple[int, int]] = []
        self._counted = [0, 0]      # [opaque spans passed, position]
        self._depth = 0
        self._stacked = [0, 0]
        self._open: list[str] = []  # the open brackets, innermost last

    def _code_until(self, cursor: list[int], pos: int) -> str:
        """The code from ``cursor`` to ``pos``; moves the cursor there."""
        opaque = self.opaque
        done, at = cursor
        code = []
        while done < len(opaque) and opaque[done][0] < pos:
            start, end = opaque[done]
            code.append(self.text[at:start])
            at = max(at, end)
            done += 1
        if pos > at:
            code.append(self.text[at:pos])
            at = pos
        cursor[:] = done, at
        return "".join(code)

    def at(self, pos: int) -> int:
        code = self._code_until(self._counted, pos)
        self._depth += (code.count("(") + code.count("[") + code.count("{")
                        - code.count(")") - code.count("]") - code.count("}"))
        return self._depth

    def innermost(self, pos: int) -> str:
        """The innermost bracket open at ``pos`` ('' at top level)."""
        for bracket in _BRACKETS.findall(self._code_until(self._stacked, pos)):
            if bracket in "([{":
                self._open.append(bracket)
            elif self._open:
                self._open.pop()
        return self._open[-1] if self._open else ""


class _Rewrite:
    def __init__(self, text: str, rules: Rules, encoding: str) -> None:
        self.text = text
        self.rules = rules
        self.encoding = encoding
        self.depth = _Depth(text)
        self.keep: set[int] = set()  # starts of literal groups that stay str
        # bracket (just after it): its item starts
        self._items: dict[int, list[int]] = {}
        # (anchor, start, end, replacement)
        self.edits: list[tuple[int, int, int, str]] = []
        self.literals = not any(
            _UNICODE_LITERALS.search(m.group(1) or m.group(2) or "")
            for m in _FUTURE_IMPORT.finditer(text))
        self._line = (0, 0)      # (a position, where its line starts)

    def result(self) -> str:
        self._scan()
        if not self.edits:
            return self.text
        out = []
        pos = 0
        for _, start, end, replacement in self.edits:
            out.append(self.text[pos:start])
            out.append(replacement)
            pos = end
        out.append(self.text[pos:])
        return "".join(out)

    def _scan(self) -> None:
        text = self.text
        search = self.rules._scan.search
        opaque = self.depth.opaque
        enabled = True
        pos = 0
        while True:
            m = search(text, pos)
            if m is None:
                return
            kind = m.lastgroup
            pos = m.end()
            if kind == "quote":
                pos = self._group(m.start(), enabled)
            elif kind == "comment":
                opaque.append((m.start(), pos))
                switch = _SWITCH.match(m.group())
                if switch:
                    enabled = self._switch(m.start(), switch.group(1),
                                           enabled)
            elif kind == "attr":
                name_at = m.start() - 3
                if text[name_at:m.start()] + "attr" in ATTRIBUTE_FUNCTIONS \
                        and _starts_name(text, name_at):
                    self._keep_items(pos, (1,))
            elif kind == "rename":
                if enabled:
                    self.edits.append((m.start(kind), m.start(kind),
                                       m.end(kind),
                                       self.rules.renames[m.group(kind)]))
            elif kind == "codec":
                self._keep_items(pos, None, keywords=True)
            elif kind == "kwdict":
                if self.depth.innermost(m.start()) == "(":
                    self._keep_items(pos, None)
            elif _starts_name(text, m.start()):   # dunder, kwargs
                self.keep.add(pos)      # the literal that follows

    def _line_start(self, pos: int) -> int:
        """Where the line holding ``pos`` starts.  The scan asks in text
        order, so the text between two questions is searched once."""
        since, start = self._line
        if pos < since:
            since = start = 0
        start = max(start, self.text.rfind("\n", since, pos) + 1,
                    self.text.rfind("\r", since, pos) + 1)
        self._line = (pos, start)
        return start

    def _switch(self, at: int, word: str, enabled: bool) -> bool:
        line_start = self._line_start(at)
        if self.text[line_start:at].strip():
            if word == "off":       # exempt this line only
                while self.edits and self.edits[-1][0] >= line_start:
                    self.edits.pop()
            return enabled
        return word == "on"

    def _group(self, quote_at: int, enabled: bool) -> int:
        """Scan the implicitly concatenated group whose first opening
        quote is at ``quote_at``, decide it as a whole, and return where
        it ends."""
        text = self.text
        opaque = self.depth.opaque
        plain = []
        convert = True
        group_start = None
        while True:
            start, end, kind = _literal(text, quote_at)
            if end < 0:
                raise ScanError("unterminated string literal at line %d"
                                % (text.count("\n", 0, start) + 1))
            if group_start is None:
                group_start = start
            opaque.append((start, end))
            if kind == "plain":
                plain.append((start, end))
            elif kind == "other":
                convert = False
            # Most literals are followed by one of these: no regex needed.
            if text[end:end + 1] in _ENDS_GROUP:
                break
            gap, newline = _gap(text, end)
            following = _PART_START.match(text, gap)
            if following is None:
                break
            if newline and self.depth.at(end) == 0:
                break               # the next line is another statement
            quote_at = following.end() - 1
            if _string_start(text, quote_at) != gap:
                break               # letters that are no prefix: code
            opaque.extend(c.span() for c in _COMMENT.finditer(text, end, gap))
        if convert and plain and enabled and self.literals \
                and group_start not in self.keep \
                and not self._stays_str(group_start, end):
            for start, end_ in plain:
                self.edits.append((group_start, start, end_,
                                   self._as_bytes(start, end_)))
        return end

    def _stays_str(self, start: int, end: int) -> bool:
        """What follows or surrounds the group makes it stay ``str``."""
        if self.text[end:end + 1] in _ENDS_GROUP:
            return False
        return bool(self.rules._after_group.match(self.text, end)) or \
            self._is_statement(start, end)

    def _is_statement(self, start: int, end: int) -> bool:
        text = self.text
        if not _STATEMENT_END.match(text, end):
            return False
        line_start = self._line_start(start)
        if text[line_start:start].strip(" \t\f"):
            return False
        before = line_start - 1
        while before >= 0 and text[before] in "\r\n":
            before -= 1
        if before >= 0 and text[before] == "\\":
            return False        # continues the line before
        return self.depth.at(start) == 0

    def _as_bytes(self, start: int, end: int) -> str:
        literal = self.text[start:end]
        if not literal.isascii():
            literal = _NON_ASCII.sub(self._escape, literal)
        # ``if'a'`` is valid; ``ifb'a'`` would be a name.
        return ("b" if _starts_name(self.text, start) else " b") + literal

    def _escape(self, match: re.Match[str]) -> str:
        found = match.group()
        if found[0] == "\\":
            if found.isascii():
                return found
            return "\\\\" + self._escape_char(found[1])
        return self._escape_char(found)

    def _escape_char(self, char: str) -> str:
        return "".join("\\x%02x" % b for b in char.encode(self.encoding))

    def _keep_items(self, pos: int, which: Container[int] | None,
                    keywords: bool = False) -> None:
        """Keep ``str`` for the literals that start the items (arguments,
        dict keys) ``which`` (indexes; None for all) of the bracket opened
        just before ``pos``."""
        for index, start in enumerate(self._item_starts(pos)):
            if which is not None and index not in which:
                continue
            if keywords:
                keyword = _KEYWORD_ARG.match(self.text, start)
                if keyword:
                    start = keyword.end()
            self.keep.add(start)

    def _item_starts(self, pos: int) -> list[int]:
        """Start positions of the top-level items of the bracket opened
        just before ``pos``, for the few calls the rules look into.  A
        walk notes the items of every bracket it passes, so that nested
        calls (``getattr(o, getattr(p, ...))``) never walk the same text
        again."""
        if pos in self._items:
            return self._items[pos]
        text = self.text
        starts = self._items[pos] = [_gap(text, pos)[0]]
        walking = [starts]
        while walking:
            m = _ITEM_EVENT.search(text, pos)
            if m is None:
                break
            c = m.group()
            pos = m.end()
            if c in "'\"":
                pos = _literal(text, pos - 1)[1]
                if pos < 0:
                    break
            elif c == "#":
                comment = _COMMENT.match(text, pos - 1)
                assert comment is not None      # "#" starts one
                pos = comment.end()
            elif c in "([{":
                items = self._items[pos] = [_gap(text, pos)[0]]
                walking.append(items)
            elif c in ")]}":
                walking.pop()
            elif c == ",":
                walking[-1].append(_gap(text, pos)[0])
        return starts


def decode(data: bytes) -> tuple[str, str]:
    """``(text, encoding)`` of Python source bytes, as Python reads them
    (PEP 263 cookie or BOM, default UTF-8); newlines are kept: what
    :func:`transform` takes."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding
