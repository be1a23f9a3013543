"""The ``vcsperf`` console script."""

import argparse
import sys

from vcsperf import __version__, bench
from vcsperf.check import demo, page, runner


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="vcsperf",
        description="Faster, smaller Mercurial and Git at monorepo scale.")
    parser.add_argument("--version", action="version",
                        version="%(prog)s " + __version__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo", help="build a repository from real content offline, run "
        "vcsperf check on it: every feature beside core Mercurial")
    demo_parser.add_argument("--workdir", help="build in a new directory "
                             "here instead of in the temporary directory")
    demo_parser.add_argument("--keep", action="store_true",
                             help="keep the scratch directory")
    demo_parser.add_argument("--json", help="also write the report to "
                             "this file")
    demo_parser.add_argument("--html", metavar="FILE",
                             help="write the report page here (default: "
                             "%s, when matplotlib is installed)"
                             % demo.HTML_SHOWN)
    check_parser = commands.add_parser(
        "check", help="run every feature on a copy of your repository and "
        "report what it does, beside core Mercurial",
        description=runner.__doc__.split("\n\n")[0])
    check_parser.add_argument("--repo", required=True,
                              help="the Mercurial repository (only read)")
    check_parser.add_argument("--git", help="a Git clone of the same "
                              "project, for the Git features")
    check_parser.add_argument("--quick", action="store_true",
                              help="every feature on a slice of the newest "
                              "changesets: minutes on any history")
    check_parser.add_argument("--slice", type=int, metavar="N",
                              help="with --quick, the newest N changesets "
                              "(default: twice the square root of the "
                              "history, at least 200)")
    check_parser.add_argument("--resume", metavar="DIR",
                              help="keep the run's scratch and state in "
                              "DIR/vcsperf-check (the only part of DIR it "
                              "removes), and continue the run DIR holds, if "
                              "any, from its last completed feature")
    check_parser.add_argument("--json", help="also write the report to "
                              "this file")
    check_parser.add_argument("--html", metavar="FILE",
                              help="also write the report as a page with "
                              "plots to this file (needs the html extra)")
    check_parser.add_argument("--scratch", help="where the copies go "
                              "(default: the temporary directory)")
    check_parser.add_argument("--reserve", type=_size, default=0,
                              help="free space to leave on the scratch "
                              "disk, such as 20G")
    check_parser.add_argument("--keep", action="store_true",
                              help="keep the scratch directory")
    report_parser = commands.add_parser(
        "report", help="the page of runs already made: plots of every "
        "feature against core, and the trend over runs of a repository",
        description="Write the page of runs already made (the --json "
        "files of vcsperf check): per repository, every feature's figures "
        "against core as plots, a warning for each worse than core, and "
        "the trend over its runs; one HTML file that needs nothing else.")
    report_parser.add_argument("reports", nargs="+", metavar="JSON",
                               help="reports written by vcsperf check "
                               "--json")
    report_parser.add_argument("--html", metavar="FILE", required=True,
                               help="write the page to this file")
    bench_parser = commands.add_parser(
        "bench", help="run a benchmark: core beside our feature, in one run "
        "(vcsperf bench NAME --help for its options)")
    bench_parser.add_argument("name", choices=bench.NAMES)
    bench_parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.run_demo(args.workdir, args.keep, args.json,
                             args.html)
    if args.command == "report":
        return page.main(args.reports, args.html)
    if args.command == "check" and args.slice is not None:
        if not args.quick:
            parser.error("--slice goes with --quick")
        if args.slice < 1:
            parser.error("--slice takes a number of changesets, 1 or more")
    if args.command == "bench":
        return bench.main(args.name, args.args)
    return runner.main(args)


def _size(text):
    """Bytes from ``512M``, ``20G``, ``1T`` or a plain number."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    try:
        if text[-1:].upper() in units:
            return int(float(text[:-1]) * units[text[-1].upper()])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a size: %r (use 512M, 20G, "
                                         "...)" % text)


if __name__ == "__main__":
    sys.exit(main())
