"""Test harness: real ``hg`` and ``git`` in isolated environments, real
``hg serve`` on 127.0.0.1, and the real-content repository.

The real-content repository is the history of 57 successive pip releases
(see vcsperf/harness/data/pip-releases.tsv: versions, upload dates and
sha256 of each wheel).  The wheels are downloaded once with pip, their
hashes are checked, and the Mercurial repository built from them is
cached under ``$VCSPERF_CACHE`` (default ``~/.cache/vcsperf``), keyed by
the release table and the Mercurial version, so a rebuild happens only
when either changes.  Tests get a hardlinked clone of it to work on.
"""

import contextlib
import hashlib
import json
import os

import pytest
from mercurial import util as hgutil

import campaign
from vcsperf.harness import history, objectstore, servers, tools
from vcsperf.harness.proxies import RecordingProxy


class Commands:
    """Runs a real binary in one isolated environment."""

    def __init__(self, binary, env):
        self.binary = binary
        self.env = env

    def __call__(self, *args, cwd=None, check=True):
        return tools.run([self.binary, *map(str, args)], self.env, cwd=cwd,
                         check=check)

    def proc(self, *args, cwd=None):
        """The CompletedProcess, for tests that look at failures."""
        return tools.completed([self.binary, *map(str, args)], self.env,
                               cwd=cwd)


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def hgrc(home):
    """The only hgrc the test's hg reads; tests append to it."""
    path = home / "hgrc"
    path.write_text("[ui]\ninteractive = false\n")
    return path


@pytest.fixture
def env(home, hgrc):
    return tools.isolated_env(str(home), str(hgrc))


@pytest.fixture
def hg(env):
    return Commands(tools.executable("hg"), env)


@pytest.fixture
def git(env):
    return Commands(tools.executable("git"), env)


@pytest.fixture
def hgrepo(hg, tmp_path):
    """An empty Mercurial repository made by the real hg."""
    path = tmp_path / "repo"
    hg("init", path)
    return path


@pytest.fixture
def non_utf8_hgrepo(hg, tmp_path):
    """A Mercurial repository of one changeset (file ``a``) at a path
    that is not UTF-8 (``d\\xe9p\\xf4t``, Latin-1 bytes), as a str that
    carries them as surrogates."""
    path = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)),
                                    b"d\xe9p\xf4t"))
    hg("init", path)
    with open(os.path.join(path, "a"), "w") as fh:
        fh.write("a\n")
    hg("-R", path, "commit", "-q", "-A", "-m", "one", "-u", "t")
    return path


@pytest.fixture
def gitrepo(git, tmp_path):
    """An empty Git repository made by the real git."""
    path = tmp_path / "gitrepo"
    git("init", "-q", "-b", "main", path)
    return path


@contextlib.contextmanager
def hg_servers(env):
    """``with hg_servers(env) as start:`` ``start(repo, *args)`` starts an
    ``HgServer`` of ``repo`` in ``env`` (``args``: more ``hg serve``
    arguments) and returns it; every one started stops at the end."""
    with contextlib.ExitStack() as stack:
        yield lambda repo, *args: stack.enter_context(
            servers.HgServer(env, repo, *args))


@pytest.fixture
def hgserve(env):
    """Starts ``hg serve`` for a repository on 127.0.0.1, on a port the
    kernel picks; every server started is stopped after the test.

    ``hgserve(repo, *extra_args)`` returns an ``HgServer`` with ``url``
    and ``stop()``.
    """
    with hg_servers(env) as start:
        yield start


@pytest.fixture
def proxy():
    """``proxy(upstream_url)`` starts a ``RecordingProxy`` in front of a
    server; every one started stops after the test."""
    proxies = []

    def start(upstream):
        proxies.append(RecordingProxy(upstream))
        return proxies[-1]

    yield start
    for p in proxies:
        p.stop()


@pytest.fixture
def objectserver(tmp_path, env):
    """A real S3-compatible server (versitygw, built once and cached; see
    ``vcsperf.harness.objectstore``) on 127.0.0.1 for this test; its keys
    are put in ``env`` for the commands the test runs."""
    with objectstore.ObjectServer(tmp_path / "s3") as server:
        env.update(server.environ())
        yield server


def _real_repo_key():
    digest = hashlib.sha256()
    with open(history.RELEASES_TABLE, "rb") as fh:
        digest.update(fh.read())
    digest.update(hgutil.version())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def real_hg_repo_cached():
    """Path of the cached real-content Mercurial repository (read-only:
    use ``real_hg_repo`` to get a copy to work on)."""
    cache = history.default_cache_dir()

    def build(scratch):
        repo = os.path.join(scratch, "repo")
        history.write_hg(history.pip_releases(cache), repo,
                         hg=tools.executable("hg"),
                         env=tools.isolated_env(scratch))
        return repo
    return history.cached_directory(
        os.path.join(cache, "pip-releases-hg-%s" % _real_repo_key()), build)


@pytest.fixture
def real_hg_repo(real_hg_repo_cached, hg, tmp_path):
    """A hardlinked clone of the real-content repository, with no working
    directory."""
    dest = tmp_path / "real"
    hg("clone", "-q", "-U", real_hg_repo_cached, dest)
    return dest


@pytest.fixture(scope="session")
def real_git_repo(real_hg_repo_cached):
    """The pip release history as a bare Git repository, cached beside the
    Mercurial one (same release table)."""
    key = os.path.basename(real_hg_repo_cached).rsplit("-", 1)[-1]
    cache = history.default_cache_dir()

    def build(scratch):
        env = tools.isolated_env(scratch)
        work = os.path.join(scratch, "work")
        history.write_git(history.pip_releases(cache), work,
                          git=tools.executable("git"), env=env)
        bare = os.path.join(scratch, "bare.git")
        tools.run(["git", "clone", "-q", "--bare", work, bare], env)
        # packed, as a server's repository is: serving thousands of loose
        # objects makes every clone compress them all again
        tools.run(["git", "-C", bare, "repack", "-a", "-d", "-q"], env)
        return bare
    return history.cached_directory(
        os.path.join(cache, "pip-releases-git-%s.git" % key), build)


@pytest.fixture(scope="session")
def real_git_before_push(real_git_repo, tmp_path_factory):
    """A bare copy of the real Git history without its last three commits
    (branch ``main``), made once: what a server held before they were
    pushed.  Tests copy it."""
    path = tmp_path_factory.mktemp("before-push") / "repo.git"
    env = tools.isolated_env(str(path.parent))
    base = tools.run(["git", "-C", real_git_repo, "rev-parse", "HEAD~3"],
                     env).strip()
    tools.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], env)
    tools.run(["git", "-C", str(path), "fetch", "-q", real_git_repo,
               "%s:refs/heads/main" % base], env)
    tools.run(["git", "-C", str(path), "config", "http.receivepack", "true"],
              env)
    return path


@pytest.fixture
def gitbridge(env):
    """Runs the installed ``gitbridge`` console script; returns the
    CompletedProcess (checked for success unless ``check=False``)."""
    command = Commands(tools.executable("gitbridge"), env)

    def run(*args, cwd=None, check=True):
        proc = command.proc(*args, cwd=cwd)
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc
    return run


# The adversarial campaign's counts (see tests/campaign.py) -------------------

_CAMPAIGN_TALLIES = []
#: The rows of the tallies pytest-xdist's workers counted.
_CAMPAIGN_WORKER_ROWS = []


@pytest.fixture
def tally(request):
    """A ``campaign.Tally`` for this test, seeded and counted in the
    run's campaign report; its seed is printed so a failure replays."""
    tally = campaign.Tally(request.node.nodeid, campaign.seed())
    print("campaign %s: seed %d (VCSPERF_CAMPAIGN_SEED=%d replays it)"
          % (tally.name, tally.seed, tally.seed))
    _CAMPAIGN_TALLIES.append(tally)
    return tally


def pytest_collection_modifyitems(items):
    # A full campaign test tries up to a hundred times the fast cases: on a
    # busy machine one took 536 of the default 600 s.
    if campaign.FULL:
        for item in items:
            if item.get_closest_marker("campaign"):
                item.add_marker(pytest.mark.timeout(3600))


def pytest_sessionfinish(session):
    # Under pytest-xdist the tallies live in the workers: each hands its
    # rows to the controller, which prints the one table.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["campaign_rows"] = json.dumps(
            [tally.as_dict() for tally in _CAMPAIGN_TALLIES])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # a worker that crashed sent nothing: xdist reports the test it was
    # running as failed and starts another
    output = getattr(node, "workeroutput", None) or {}
    rows = json.loads(output.get("campaign_rows", "[]"))
    _CAMPAIGN_WORKER_ROWS.extend(rows)


def pytest_terminal_summary(terminalreporter):
    rows = ([tally.as_dict() for tally in _CAMPAIGN_TALLIES]
            + sorted(_CAMPAIGN_WORKER_ROWS, key=lambda row: row["test"]))
    if not rows:
        return
    write = terminalreporter.write_line
    write("adversarial campaign (%s): cases tried, survived, seed"
          % ("full" if campaign.FULL else "fast"))
    for row in rows:
        write("  %6d %6d  %10d  %s" % (row["tried"], row["survived"],
                                       row["seed"], row["test"]))
    report = os.environ.get("VCSPERF_CAMPAIGN_REPORT")
    if report:
        with open(report + ".tmp", "w") as fh:
            json.dump({"mode": "full" if campaign.FULL else "fast",
                       "tests": rows}, fh, indent=1)
        os.replace(report + ".tmp", report)
