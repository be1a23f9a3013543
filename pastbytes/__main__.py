"""``python -m pastbytes``: run a Python-2-era script or module with the
rewrite, its own directory and the given packages and directories
rewritten on import.

    python -m pastbytes [-p PACKAGE] [-d DIR] script.py [ARGS]
    python -m pastbytes -p legacy -m legacy.tool [ARGS]
"""

from __future__ import annotations

import argparse
import builtins
import os
import runpy
import sys
import types

from pastbytes.importer import PastBytesLoader, compile_source, install
from pastbytes.rewrite import DEFAULT_RULES, Rules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pastbytes",
        description="Run a Python-2-era script or module with its string "
        "literals rewritten to bytes (see the package's documentation).")
    parser.add_argument("-p", "--package", action="append", default=[],
                        help="rewrite this package too (repeatable)")
    parser.add_argument("-d", "--path", action="append", default=[],
                        help="rewrite modules under this directory too "
                        "(repeatable; a script's own directory always is)")
    parser.add_argument("--kwargs-name", action="append", default=[],
                        help="keep str keys for this **kwargs dict name")
    parser.add_argument("-m", dest="as_module", action="store_true",
                        help="run TARGET as a module, like python -m")
    parser.add_argument("target", metavar="TARGET",
                        help="the script (or with -m the module) to run")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="its arguments")
    args = parser.parse_args(argv)
    rules = Rules(kwargs_names=args.kwargs_name) if args.kwargs_name \
        else DEFAULT_RULES
    if args.as_module:
        install(args.package, args.path, rules)
        sys.argv = [args.target] + args.args
        runpy.run_module(args.target, run_name="__main__", alter_sys=True)
        return 0
    script = os.path.abspath(args.target)
    script_dir = os.path.dirname(script)
    install(args.package, args.path + [script_dir], rules)
    sys.argv = [args.target] + args.args
    sys.path[0] = script_dir
    loader = PastBytesLoader("__main__", script, rules)
    with open(script, "rb") as fh:
        code = compile_source(fh.read(), script, rules)
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__file__=script, __loader__=loader,
                                __builtins__=builtins, __cached__=None,
                                __spec__=None)
    sys.modules["__main__"] = main_module
    exec(code, main_module.__dict__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
