#!/usr/bin/env python3
"""Rewrite Python-2-era sources once, for good: the same rewrite that the
pastbytes importer applies at import time, written to disk.

    python contrib/pastbytes_rewrite.py [--check] [--kwargs-name opts] PATH...

PATH is a file or a directory (every ``*.py`` below it).  Each changed file
is replaced by write-then-rename, in its own encoding and with its own
line endings; a file that cannot be read or replaced, a symbolic link or
special file, or a file whose rewrite would not compile (a syntax
error, or nesting deeper than the compiler goes), is reported in one
line and left as it is, and the exit status is 1.  The result compiles to the very code the importer compiles, so
the hook can be dropped without a change in behaviour.  Pass the same
rules as the importer had (the Mercurial extension uses
``--kwargs-name opts``).  ``--check`` writes nothing and exits 1 if a file
would change.
"""

import argparse
import os
import stat
import sys
import tempfile

import pastbytes


def python_files(paths):
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(".py"):
                        yield os.path.join(root, name)
        else:
            yield path


def read_source(path):
    """The bytes of the regular file ``path``; ValueError for a symbolic
    link (replacing it would turn it into a file, maybe outside the tree)
    or anything not a regular file (a FIFO would block the read,
    /dev/zero never end it)."""
    if os.path.islink(path):
        raise ValueError("a symbolic link (rewrite the file it points to)")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        return fh.read()


def rewrite(path, rules):
    """The rewritten bytes of ``path``, or None if nothing changes."""
    data = read_source(path)
    text, encoding = pastbytes.decode(data)
    new = pastbytes.transform(text, rules, encoding)
    if new == text:
        return None
    compile(new, path, "exec", dont_inherit=True)
    return new.encode(encoding)


def replace(path, data):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".",
                               prefix=".pastbytes-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def reason(err):
    """Why a file was not rewritten, in one line."""
    if isinstance(err, OSError):
        return err.strerror or str(err)
    if isinstance(err, (RecursionError, MemoryError)):
        return "nested too deeply to compile (%s)" % type(err).__name__
    return str(err)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file would change")
    parser.add_argument("--kwargs-name", action="append", default=[],
                        help="keep str keys for this **kwargs dict name")
    args = parser.parse_args(argv)
    rules = pastbytes.Rules(kwargs_names=args.kwargs_name)
    changed = failed = 0
    for path in python_files(args.paths):
        try:
            data = rewrite(path, rules)
            if data is not None and not args.check:
                replace(path, data)
        # ValueError: a ScanError, an undecodable file, a special file or
        # a symbolic link, or (before Python 3.11) a null byte, which
        # compile() reports so.
        # RecursionError and MemoryError: compile() on an expression
        # nested too deeply (CPython's parser reports its own stack's
        # overflow as MemoryError).  OSError: a file that cannot be read,
        # or a folder where the new file cannot be written.
        except (SyntaxError, ValueError, RecursionError, MemoryError,
                OSError) as err:
            print("%s: not rewritten: %s" % (path, reason(err)),
                  file=sys.stderr)
            failed += 1
            continue
        if data is None:
            continue
        changed += 1
        print(("would rewrite %s" if args.check else "rewrote %s") % path)
    print("%d file(s) %s, %d failed" % (
        changed, "to rewrite" if args.check else "rewritten", failed))
    if failed or (args.check and changed):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
