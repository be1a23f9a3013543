"""Finding and running the real ``hg`` and ``git`` binaries in a clean
environment, shared by the demo, the runner and the tests."""

import os
import shutil
import subprocess
import sys

FIXED_USER = "vcsperf test <test@vcsperf.invalid>"


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


def isolated_env(home, hgrc=None):
    """An environment where neither the user's nor the system's hg or git
    configuration applies: ``HOME`` is ``home`` and ``HGRCPATH`` is
    ``hgrc`` (an empty string when None, which reads no file)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HG", "GIT_"))}
    env.update(
        HOME=home, HGRCPATH=hgrc or "", HGUSER=FIXED_USER, HGPLAIN="1",
        HGENCODING="utf-8", GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="vcsperf test", GIT_AUTHOR_EMAIL="test@vcsperf.invalid",
        GIT_COMMITTER_NAME="vcsperf test",
        GIT_COMMITTER_EMAIL="test@vcsperf.invalid", LC_ALL="C")
    return env


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


def hg(args, env, cwd=None):
    """Run this installation's ``hg`` with ``args`` (anything, made str);
    returns its stdout, raises ``CommandError`` on failure."""
    return run([executable("hg"), *map(str, args)], env, cwd=cwd)
