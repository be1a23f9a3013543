"""What the benchmarks share: their command line (``vcsperf bench NAME``),
and the lines that set ratios against their targets."""

import argparse
import json
import os
import shutil
import tempfile

from vcsperf.core.errors import Abort


def target_lines(targets, ratios, width=38):
    """One line per ``(label, key, op, target)``: the ratio, the target and
    whether it is met."""
    lines = []
    for label, key, op, target in targets:
        value = ratios[key]
        met = value <= target if op == "<=" else value >= target
        lines.append("%-*s %6.3f  target %s %.2f  %s"
                     % (width, label, value, op, target,
                        "met" if met else "MISSED"))
    return lines


def command_line(module):
    """The command line of the benchmark ``module`` (``vcsperf.bench.NAME``,
    run as ``vcsperf bench NAME``), described by its docstring's first
    paragraph."""
    return argparse.ArgumentParser(
        prog="vcsperf bench %s" % module.__name__.rpartition(".")[2],
        description=summary(module))


def summary(module):
    """The first paragraph of ``module``'s docstring, on one line and
    without reST's literal quotes: whole sentences, which argparse wraps
    to the terminal (a docstring's first line stops mid-sentence)."""
    paragraph = module.__doc__.strip().split("\n\n")[0]
    return " ".join(paragraph.replace("``", "").split())


def hg_repository(path):
    """``path``, checked to hold a Mercurial repository before a benchmark
    spends anything on it; ``Abort`` when it does not."""
    if not os.path.isdir(os.path.join(path, ".hg")):
        raise Abort("%s is not a Mercurial repository" % path,
                    hint="give the directory that holds .hg")
    return path


def git_repository(path):
    """``path``, checked to hold a Git repository (bare or not) before a
    benchmark spends anything on it; ``Abort`` when it does not."""
    if not (os.path.isdir(os.path.join(path, "objects"))
            or os.path.isdir(os.path.join(path, ".git"))):
        raise Abort("%s is not a Git repository" % path,
                    hint="give a bare repository or a checkout's top")
    return path


def main(module, options=(), argv=None, repository=hg_repository):
    """Run ``module.run(repo, workdir, **options)`` and print
    ``module.format_report``.

    ``options`` are ``(name, argparse keywords)`` pairs: each becomes a
    ``--name`` flag whose value is passed to ``run`` by keyword (dashes
    as underscores).  ``repository`` checks the repository argument.
    """
    run, format_report = module.run, module.format_report
    parser = command_line(module)
    parser.add_argument("repo")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--workdir", help="where copies, bundles and clones "
                        "go (default: a temporary directory, removed "
                        "afterwards)")
    for name, keywords in options:
        parser.add_argument("--" + name, **keywords)
    args = parser.parse_args(argv)
    repository(args.repo)
    if args.workdir:
        try:
            os.makedirs(args.workdir, exist_ok=True)
        except OSError as err:
            raise Abort("cannot use %s as --workdir: %s"
                        % (args.workdir, err.strerror),
                        hint="give a directory this user can write, "
                        "or a path where one can be made")
    work = args.workdir or tempfile.mkdtemp(prefix="vcsperf-bench-")
    try:
        keywords = (name.replace("-", "_") for name, _ in options)
        results, ratios = run(args.repo, work, **{
            keyword: getattr(args, keyword) for keyword in keywords})
        print(format_report(args.repo, results, ratios))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"repo": args.repo, "results": results,
                           "ratios": ratios}, fh, indent=2)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
