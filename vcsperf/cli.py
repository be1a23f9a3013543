"""The ``vcsperf`` console script."""

import argparse
import sys

from . import demo


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="vcsperf",
        description="Faster, smaller Mercurial and Git at monorepo scale.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo", help="build a repository from real content offline, run "
        "every feature beside core Mercurial, print the figures")
    demo_parser.add_argument("--workdir", help="build here instead of a "
                             "temporary directory")
    demo_parser.add_argument("--keep", action="store_true",
                             help="keep the scratch directory")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.run_demo(args.workdir, args.keep)
    return 2


if __name__ == "__main__":
    sys.exit(main())
