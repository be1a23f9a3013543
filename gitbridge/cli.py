"""The ``gitbridge`` console script: a thin CLI over gitbridge's functions.

Each feature module contributes its subcommands through
``add_commands(subparsers)``; a subcommand stores its handler in
``func``, which gets the parsed arguments and returns the exit status.
"""

import argparse
import sys

from gitbridge import checkout, commitid, commitindex

FEATURE_MODULES = (checkout, commitid, commitindex)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="gitbridge",
        description="The Git side of vcsperf.")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in FEATURE_MODULES:
        module.add_commands(commands)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
