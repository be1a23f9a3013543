"""The clean environment in which the tests, benchmarks, the check and the
demo run the real ``hg`` and ``git``; the runner itself is
``vcsperf.core.process``, whose names this module passes on."""

import os

from vcsperf.core.process import CommandError, completed, executable, run

__all__ = ["FIXED_USER", "CommandError", "completed", "executable", "hg",
           "isolated_env", "run"]

FIXED_USER = "vcsperf test <test@vcsperf.invalid>"


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


def hg(args, env, cwd=None):
    """Run this installation's ``hg`` with ``args`` (anything, made str);
    returns its stdout, raises ``CommandError`` on failure."""
    return run([executable("hg"), *map(str, args)], env, cwd=cwd)
