"""``vcsperf demo``: build a Mercurial and a Git repository from real
content with no network, then run ``vcsperf check`` on them: every feature
of the suite, with its figures beside core Mercurial's."""

import os
import shutil
import sys
import tempfile
import time

from vcsperf.check import page, report, runner
from vcsperf.core.errors import Abort, print_abort
from vcsperf.harness import history, tools

#: The demo's page, in the suite's cache directory unless ``--html``.
HTML_NAME = "demo.html"
HTML_SHOWN = "~/.cache/vcsperf/" + HTML_NAME


def _progress(label, total):
    if not sys.stderr.isatty():
        return None

    def report(count, snapshot):
        sys.stderr.write("\r  %s %d/%d: %-50.50s"
                         % (label, count, total, snapshot.message))
        if count == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return report


def _default_html():
    """Where the demo's page goes unless told: the suite's own cache
    directory, when matplotlib is installed (the ``html`` extra), else
    nowhere."""
    try:
        page.require_matplotlib()
    except Abort:
        print("(no report page: %s)" % page.INSTALL_HINT)
        return None
    directory = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                             os.path.expanduser("~/.cache"), "vcsperf")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        print("(no report page: cannot make %s: %s)"
              % (directory, err.strerror))
        return None
    return os.path.join(directory, HTML_NAME)


def run_demo(workdir=None, keep=False, json_path=None, html_path=None):
    """Build the repositories in a new directory under ``workdir``
    (default: the temporary directory), removed afterwards unless
    ``keep``, and check them; the report page goes to ``html_path``
    (default: ``HTML_SHOWN``); the exit status of ``vcsperf check``.
    Nothing else of ``workdir`` is touched."""
    try:
        report.check_output(json_path)
        page.check_output(html_path)
    except Abort as abort:
        return print_abort(abort)
    html_path = html_path or _default_html()
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="vcsperf-demo-", dir=workdir)
    try:
        env = tools.isolated_env(scratch)
        repo = os.path.join(scratch, "repo")
        git_repo = os.path.join(scratch, "repo-git")
        print("vcsperf demo: a history built from the installed sources of "
              "Mercurial, dulwich,\n  cffi and pycparser (no network), as "
              "a Mercurial and a Git repository", flush=True)
        start = time.perf_counter()
        snapshots = list(history.installed_sources())
        history.write_hg(snapshots, repo, hg=tools.executable("hg"),
                         env=env, progress=_progress("hg commit",
                                                     len(snapshots)))
        history.write_git(snapshots, git_repo, git=tools.executable("git"),
                          env=env, progress=_progress("git commit",
                                                      len(snapshots)))
        print("  %d changesets, %d files at the tip, built in %.1fs\n"
              % (len(snapshots), len(snapshots[-1].files),
                 time.perf_counter() - start), flush=True)
        return runner.report_run(runner.Check(repo, git=git_repo,
                                            scratch=scratch, keep=keep),
                                json_path, html_path)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print("kept: %s" % scratch)
