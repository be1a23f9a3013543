"""Hostile sources for the pastbytes scanner, and what must hold for any
of them, for tests/test_campaign_importer.py.

Plain Python with no test framework: the campaign runs it in-process and
as a script under each installed Python 3.12+ (whose tokenizer lets
f-strings nest), reading a JSON request on stdin and writing the result
on stdout::

    {"check": [source, ...]}            -> [failure or null, ...]
    {"time": [source, ...], "repeat": 3} -> [[cpu seconds, outcome], ...]
"""

import json
import sys
import time
import warnings

import pastbytes

#: Pieces that random sources are made of: everything the scanner treats
#: specially, in every line ending.
TOKENS = [
    "'", '"', "'''", '"""', "f'", 'f"', "rb'", "b'", "u'", "Rb'", "t'",
    "x", "y = ", "a", "1", " ", "  ", "\t", "\f", "\n", "\r", "\r\n",
    "\\", "\\\n", "\\\r\n", "\\\r", "#", "# c", "# pastbytes: off",
    "# pastbytes: on", "(", ")", "[", "]", "{", "}", "{{", "}}", ",", ":",
    ".", "=", "==", "+", "*", "**", "**{", "getattr(", "setattr(o, ",
    ".encode(", ".decode(", "__name__ == ", "opts.get(", "opts[",
    ".iteritems()", "from __future__ import unicode_literals",
    "from __future__ import (division,", "def f():", "    ", "pass", "\u00e9",
    "\\N{EM DASH}", "!r", "%", ";", "\x00",
]
#: Whole statements, joined by random line ends, comment and blank lines:
#: sources that mostly compile, so the rewrite's output can be checked.
STATEMENTS = [
    "x = 'a'", "x = \"a\" 'b'", "x = ('a'", "     'b')", "x = 'a' \\",
    "    'b'", "x = f'{x!r:>{w}}' + 'c'", "x = 'a' f'{y}'", "'doc'",
    "if __name__ == '__main__': pass", "z = getattr(o, 'n', 'd')",
    "d = {**{'k': 'v'}}", "f(**{'k': 'v'})", "s = 'a'.encode('ascii')",
    "b.decode('latin-1', errors='strict')", "v = opts.get('rev', 'tip')",
    "for k, v in d.iteritems(): pass", "x = '''t''' 'u'", "x = r'r' 'p'",
    "x = 'it\\'s' \"\\\"\"", "x = '\u00e9'", "from __future__ import division",
    "x = [", "    'a',", "]", "# pastbytes: off", "# pastbytes: on",
    "x = 'k'  # pastbytes: off", "x = {'a': 'b',", "     'c': 'd'}",
    "x = f'{d[\"k\"]}' 'e'",
]
LINE_ENDS = ["\n", "\r\n", "\r"]
_CODE_TOKENS = [t for t in TOKENS if "'" not in t and '"' not in t]


def random_source(rng, pieces):
    """A source of ``pieces`` random parts: token soup or statements."""
    if rng.random() < 0.5:
        return "".join(rng.choice(TOKENS) for _ in range(pieces))
    return statements_source([rng.choice(STATEMENTS) for _ in range(pieces)],
                             [rng.choice(LINE_ENDS) for _ in range(pieces)],
                             [rng.random() < 0.2 for _ in range(pieces)])


def statements_source(statements, line_ends, gaps):
    """``statements`` each ended by its line end, some followed by a
    comment line and a blank line (``gaps``)."""
    out = []
    for statement, eol, gap in zip(statements, line_ends, gaps):
        out.append(statement + eol)
        if gap:
            out.append("# gap" + eol + eol)
    return "".join(out)


def _eol(rng):
    return rng.choice(LINE_ENDS)


def repeat(unit, size):
    """Units from ``unit()`` until there are ``size`` characters."""
    out, length = [], 0
    while length < size:
        out.append(unit())
        length += len(out[-1])
    return "".join(out)


#: Families of adversarial sources, by name: ``make(rng, size)`` gives
#: one of about ``size`` characters.  Each repeats what made, or could
#: make, one step of the scan cost more than linear time.
FAMILIES = {
    # The CRLF hang: comment and blank lines after a literal, any endings.
    "comment lines after a literal": lambda rng, size: "x = 'a'" + repeat(
        lambda: _eol(rng) + rng.choice(["# c", "", "  ", "#"]), size)
    + "\ny = 1\n",
    "comment lines inside a group": lambda rng, size: "x = ('a'" + repeat(
        lambda: _eol(rng) + rng.choice(["  # c", "", "\t"]), size)
    + " 'b')\n",
    "line continuations": lambda rng, size: "x = 'a' " + repeat(
        lambda: "\\" + _eol(rng) + rng.choice(["", " ", "\t"]), size)
    + "1\n",
    "runs of quotes": lambda rng, size: repeat(
        lambda: rng.choice(["'", '"', "''", "'" * 3, '"' * 3]), size),
    "backslashes in a string": lambda rng, size: "x = '" + repeat(
        lambda: rng.choice(["\\\\", "\\'", "\\\r\n", "\\\"", "a"]), size)
    + "'\n",
    "unterminated strings": lambda rng, size: repeat(
        lambda: rng.choice(["x = 'abc", "'" * 3, "f'{", "'a\\"]) + _eol(rng),
        size),
    "unterminated at the end": lambda rng, size: repeat(
        lambda: "x = 'a'" + _eol(rng), size) + "'" * 3 + "abc",
    "one long group": lambda rng, size: "x = (" + repeat(
        lambda: rng.choice(["'a' ", "b'b' ", "'c'" + _eol(rng)]), size)
    + ")\n",
    "string statements": lambda rng, size: repeat(
        lambda: rng.choice(["'doc'", "'" * 3 + "doc" + "'" * 3, "  'd'"])
        + _eol(rng), size),
    "nested f-strings": lambda rng, size: repeat(
        lambda: "x = " + "f'{" * 100 + "x" + "}'" * 100 + _eol(rng), size),
    "f-strings nested too deeply": lambda rng, size: "x = " + repeat(
        lambda: rng.choice(["f'{", 'f"{', "f'{x:{"]), size),
    "nested calls": lambda rng, size: repeat(
        lambda: "x = " + "getattr(o, " * 150 + "'a'" + ")" * 150 + _eol(rng),
        size),
    "unclosed calls": lambda rng, size: repeat(
        lambda: rng.choice(["getattr(o, ", "s.encode(", "f(**{", "("]),
        size),
    "dict unpacking outside calls": lambda rng, size: repeat(
        lambda: rng.choice(["x = y **{'a': 1}", "(1)", "[**{'b': 2}]"])
        + _eol(rng), size),
    "future imports": lambda rng, size: repeat(
        lambda: rng.choice(["from __future__ import division",
                            "from __future__ import (",
                            "from __future__ import a, \\"]) + _eol(rng),
        size),
    "switch comments": lambda rng, size: repeat(
        lambda: rng.choice(["x = 'a'  # pastbytes: off", "# pastbytes: on",
                            "# pastbytes: off"]) + _eol(rng), size),
    "random tokens outside strings": lambda rng, size: repeat(
        lambda: rng.choice(_CODE_TOKENS), size),
}


def _compiles(source):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # invalid escapes and the like
        try:
            compile(source, "hostile", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def check(source, rules=pastbytes.DEFAULT_RULES, budget=1.0):
    """None if the rewrite of ``source`` behaves, else what went wrong:
    it ends, within ``budget`` CPU seconds, in the rewritten source or a
    ScanError; when the source compiles, the rewrite compiles too and is
    its own rewrite."""
    start = time.process_time()
    try:
        rewritten = pastbytes.transform(source, rules)
    except pastbytes.ScanError:
        rewritten = None
    except Exception as err:        # what the campaign is looking for
        return "%s: %s" % (type(err).__name__, err)
    spent = time.process_time() - start
    if spent > budget:
        return "took %.2f s for %d characters" % (spent, len(source))
    if rewritten is None or not _compiles(source):
        return None
    if not _compiles(rewritten):
        return "the rewrite does not compile"
    if pastbytes.transform(rewritten, rules) != rewritten:
        return "the rewrite is not its own rewrite"
    return None


def cpu_time(source, repeat):
    """``(seconds, outcome)``: the least CPU time of ``repeat`` rewrites,
    and ``"ok"``, ``"ScanError"`` or the unexpected exception."""
    best = None
    outcome = "ok"
    for _ in range(repeat):
        start = time.process_time()
        try:
            pastbytes.transform(source)
        except pastbytes.ScanError:
            outcome = "ScanError"
        except Exception as err:
            outcome = "%s: %s" % (type(err).__name__, err)
        spent = time.process_time() - start
        best = spent if best is None else min(best, spent)
    return best, outcome


def main():
    request = json.load(sys.stdin)
    if "check" in request:
        result = [check(source) for source in request["check"]]
    else:
        result = [cpu_time(source, request["repeat"])
                  for source in request["time"]]
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
