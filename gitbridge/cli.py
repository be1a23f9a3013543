"""The ``gitbridge`` console script: a thin CLI over gitbridge's functions.

Each feature module contributes its subcommands through
``add_commands(subparsers)``; a subcommand stores its handler in
``func``, which gets the parsed arguments and returns the exit status.
"""

import importlib
import os
import select
import signal
import sys

from vcsperf.core import __version__

FEATURE_MODULES = ("gitbridge.bundlegen", "gitbridge.checkout",
                   "gitbridge.commitid", "gitbridge.commitindex",
                   "gitbridge.packcache", "gitbridge.readytrees")
#: Subcommands run where time counts (a lookup, a CI task's checkout):
#: only their module is imported, sparing them the others' imports (tens
#: of milliseconds), and its ``quick_main(ARGS)``, where it has one, reads
#: their usual arguments without argparse; where it has none or that
#: returns None, the parser reads them.
QUICK = {"commitid-lookup": "gitbridge.commitindex",
         "pack-cache": "gitbridge.packcache",
         "checkout": "gitbridge.checkout"}


def build_parser(modules=FEATURE_MODULES):
    import argparse  # here: see QUICK

    parser = argparse.ArgumentParser(
        prog="gitbridge",
        description="The Git side of vcsperf.")
    parser.add_argument("--version", action="version",
                        version="%(prog)s " + __version__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in modules:
        importlib.import_module(name).add_commands(commands)
    return parser


def main(argv=None):
    """The exit status; a reader of stdout that has gone (``| head``)
    ends the command quietly, as SIGPIPE ends git's, status 141; Ctrl-C
    ends it with ``interrupted!`` and status 255, as it ends hg (what was
    underway cleans up on the way out, as after any abort)."""
    try:
        status = _dispatch(argv)
        sys.stdout.flush()
    except KeyboardInterrupt:
        print("interrupted!", file=sys.stderr, flush=True)
        return 255
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        # what Python still holds for stdout would fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return status


def _stdout_reader_gone():
    """Whether stdout is a pipe whose reading end is closed (a broken
    pipe of another, a subprocess's stdin, is a bug to show)."""
    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    return any(events & select.POLLERR
               for _fd, events in poller.poll(0))


def _dispatch(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    quick = QUICK.get(argv[0]) if argv else None
    if quick:
        quick_main = getattr(importlib.import_module(quick), "quick_main",
                             None)
        status = quick_main(argv[1:]) if quick_main else None
        if status is not None:
            return status
    args = build_parser([quick] if quick else FEATURE_MODULES).parse_args(
        argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
