"""Finding and running the real ``hg`` and ``git`` binaries: the one
subprocess runner of the adapters' command-line tools, the harness, the
benchmarks and the check."""

import os
import shutil
import subprocess
import sys

from vcsperf.core.errors import Abort


def executable(name):
    """Path of ``name``, preferring the one installed beside this Python
    (the virtualenv's ``hg``) over the one on PATH."""
    search = os.pathsep.join([os.path.dirname(sys.executable),
                              os.environ.get("PATH", "")])
    path = shutil.which(name, path=search)
    if path is None:
        raise RuntimeError("%s is not installed (looked beside %s and on "
                           "PATH)" % (name, sys.executable))
    return path


class CommandError(subprocess.CalledProcessError):
    """A failed command; its message ends with what it wrote to stderr."""

    def __str__(self):
        return "%s\n%s" % (super().__str__(), self.stderr)


def run(args, env, cwd=None, check=True):
    """Run a command, returning its stdout as text; on failure raise
    ``CommandError``."""
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True,
                          text=True)
    if check and proc.returncode != 0:
        raise CommandError(proc.returncode, args, proc.stdout, proc.stderr)
    return proc.stdout


def git(*args, cwd=None, env=None):
    """Run ``git ARGS`` in ``env`` (default: this process's), never
    prompting for credentials and speaking English (callers read its
    messages): its stdout, or ``CommandError`` with its stderr."""
    return run(["git", *args], dict(env or os.environ,
                                    GIT_TERMINAL_PROMPT="0", LC_ALL="C"),
               cwd=cwd)


def git_output(repo_path, *args):
    """The output of ``git ARGS`` run in ``repo_path``; ``Abort`` with
    what git wrote to stderr when it fails."""
    try:
        return run(["git", *args], None, cwd=repo_path)
    except CommandError as err:
        raise Abort("git %s failed: %s" % (args[0], err.stderr.strip()))


def hg_output(repo_path, *args, env=None):
    """The output of ``hg -R REPO_PATH ARGS`` in ``env`` (default: this
    process's) with ``HGPLAIN``; ``Abort`` with what hg wrote to stderr
    when it fails."""
    env = dict(env or os.environ, HGPLAIN="1")
    try:
        return run([executable("hg"), "-R", repo_path, *args], env)
    except CommandError as err:
        raise Abort("hg failed: %s" % err.stderr.strip())
