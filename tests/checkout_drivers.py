"""Drivers of the two pooled-checkout commands, ``hg robustcheckout`` and
``gitbridge checkout``, for the tests: one repository served over real
HTTP on 127.0.0.1, a pool and a DEST, the command run as a user runs it,
and what a test reads back (the checked-out revision, what differs from
it, whether the store is sound).  The contract suite
(test_checkout_contract.py), the campaign (test_campaign_checkout.py) and
each command's own tests drive the commands through them."""

import hashlib
import json
import os
import pathlib
import re
import struct
import subprocess

import pytest

from conftest import Commands, Server
from test_all_extensions import SUITE
from vcsperf.harness import tools
from vcsperf.harness.servers import GitServer

#: sharepool's fast retries, for tests.
HGRC = ("[extensions]\nsharepool =\nsparse =\nshare =\n"
        "[sharepool]\nretry-backoff = 0.05\nretry-jitter-min = 0\n"
        "retry-jitter-max = 0.05\n"
        "[http]\ntimeout = 2\n")
#: The same for gitbridge checkout, in git config.
GITCONFIG = ("[sharepool]\n\tretry-backoff = 0.05\n"
             "\tretry-jitter-min = 0\n\tretry-jitter-max = 0.05\n"
             "\thttp-timeout = 20\n")
#: The small source's sparse profile.
SPARSE_PROFILE = "profiles/docs.sparse"
STALE_WLOCK = ("(dest has an active working directory lock; assuming it is "
               "left over from a previous process and that the destination "
               "is corrupt; deleting it just to be sure)")


@pytest.fixture
def hgrc(hgrc):
    """sharepool's fast retries, and every extension of the suite."""
    with open(hgrc, "a") as fh:
        fh.write(HGRC + "[extensions]\n"
                 + "".join("%s =\n" % name for name in SUITE))
    return hgrc


def write_files(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)


def release_files(n, profile):
    """The files of the small source's release ``n``."""
    files = {"src/module%d.py" % i: "x = %d\n" % (n * i) for i in range(8)}
    files["docs/readme.txt"] = "release %d\n" % n
    files[SPARSE_PROFILE] = profile
    return files


def hg_commit(hg, repo, files, message):
    """Commit ``files`` (name: text) in ``repo``; the new node."""
    write_files(repo, files)
    hg("commit", "-q", "-A", "-m", message, cwd=repo)
    return hg("log", "-r", ".", "-T", "{node}", cwd=repo)


def git_commit(git, work, files, message):
    """Commit ``files`` in the clone ``work`` and push it to its origin's
    main; the new commit."""
    write_files(work, files)
    git("-C", work, "add", "-A")
    git("-C", work, "commit", "-q", "-m", message)
    git("-C", work, "push", "-q", "origin", "HEAD:main")
    return git("-C", work, "rev-parse", "HEAD").strip()


# The small sources: three releases with a sparse profile -------------------

@pytest.fixture(scope="module")
def module_hgserve(tmp_path_factory):
    """hgserve for the module's shared, read-only source repository (hg
    serve takes a second to stop: one server serves most tests)."""
    home = tmp_path_factory.mktemp("home")
    (home / "hgrc").write_text(HGRC)
    hg = Commands(tools.executable("hg"),
                  tools.isolated_env(str(home), str(home / "hgrc")))
    servers = []

    def start(repo, *extra):
        pidfile = home / ("hgserve-%d.pid" % len(servers))
        out = hg("serve", "-R", repo, "-d", "-a", "127.0.0.1", "-p", "0",
                 "--pid-file", pidfile, *extra)
        port = re.search(r"bound to 127\.0\.0\.1:(\d+)", out).group(1)
        servers.append(Server("http://127.0.0.1:%s/" % port, pidfile))
        return servers[-1]

    start.hg = hg
    yield start
    for server in servers:
        server.stop()


def make_hg_source(hg, path):
    """The small Mercurial source at ``path``; ``path.nodes`` lists its
    nodes, oldest first."""
    repo = HgSource(path)
    hg("init", repo)
    repo.nodes = [hg_commit(hg, repo, release_files(
        n, "[include]\ndocs/\n"), "release %d" % n) for n in range(3)]
    return repo


class HgSource(type(pathlib.Path())):
    """A repository's path that knows its nodes, oldest first."""

    nodes = ()


@pytest.fixture(scope="module")
def hg_source(module_hgserve, tmp_path_factory):
    """The module's shared source repository; tests must not change it."""
    return make_hg_source(module_hgserve.hg,
                          tmp_path_factory.mktemp("shared") / "source")


@pytest.fixture(scope="module")
def hg_served(hg_source, module_hgserve):
    """hg serve of ``hg_source``; ``log`` is its access log."""
    log = hg_source.parent / "access.log"
    server = module_hgserve(hg_source, "--accesslog", log)
    server.log = log
    return server


@pytest.fixture
def git_served(git, tmp_path):
    """The small Git source: a bare repository (``repo``) behind git
    http-backend, and a clone to push from (``work``); ``commits`` lists
    its commits, oldest first, and ``repo_url`` is its URL."""
    repos = tmp_path / "repos"
    git("init", "-q", "--bare", "-b", "main", repos / "project.git")
    work = tmp_path / "work"
    git("clone", "-q", repos / "project.git", work)
    commits = [git_commit(git, work, release_files(n, "/docs/\n"),
                          "release %d" % n) for n in range(3)]
    with GitServer(repos) as server:
        server.repo = repos / "project.git"
        server.repo_url = server.url + "project.git"
        server.commits = commits
        server.work = work
        yield server


def foreign_lock(path):
    """A lock left by a killed task's container: another host."""
    os.symlink("old-container.example/4026531836:1068", path)


# Damage to a Mercurial checkout ----------------------------------------------

def damage_delta_bases(index):
    """Set the delta base of every entry of the revlog ``index`` above its
    own revision, as disk damage may (Mercurial's C index then raises
    ``ValueError: corrupted revlog, revision base above revision``)."""
    data = bytearray(index.read_bytes())
    inline = struct.unpack(">I", data[:4])[0] & (1 << 16)
    position, rev = 0, 0
    while position + 64 <= len(data):
        struct.pack_into(">i", data, position + 16, rev + 1000)
        length = struct.unpack(">i", data[position + 8:position + 12])[0]
        position += 64 + (length if inline else 0)
        rev += 1
    index.write_bytes(bytes(data))


def garbage_dirstate(dest):
    """Keep the dirstate's parents, make the rest garbage."""
    dirstate = dest / ".hg" / "dirstate"
    parents = dirstate.read_bytes()[:40]
    dirstate.write_bytes(parents + bytes(range(256)) * 8)


# Reading what a command did ---------------------------------------------------

def network_clones(log):
    """Requests that transfer history (stream or changegroup); a new share
    pulls bookmarks and phases only (cg=0), as hg clone with a pool does."""
    lines = open(log).read().splitlines()
    return [line for line in lines
            if ("cmd=getbundle" in line
                and ("cg=0" not in line or "stream=1" in line))
            or "cmd=stream_out" in line]


def timings(proc, name):
    (line,) = [line for line in proc.stdout.splitlines()
               if line.startswith('{"%s"' % name)]
    return json.loads(line)[name]


def abort_line(proc):
    assert proc.returncode == 255, proc.stderr
    aborts = [line for line in proc.stderr.splitlines()
              if line.startswith("abort: ")]
    assert len(aborts) == 1, proc.stderr
    return aborts[0]


class _Driver:
    """What both drivers share; a subclass says how its system does it.

    ``revisions`` lists the served repository's revisions, oldest first;
    ``store`` is the pooled store they make, ``dest`` the checkout."""

    def __init__(self, tool, repo, url, server_url, tmp_path, revisions):
        self.tool, self.repo, self.url = tool, repo, url
        self.server_url = server_url
        self.revisions = revisions
        self.pool, self.dest = tmp_path / "pool", tmp_path / "co"
        self.trees = tmp_path / "trees"
        self.env = tool.env

    def command(self, *args, url=None, dest=None, pool=None):
        """The checkout command line: ``args``, then URL and DEST."""
        return [*self.COMMAND, "--sharebase", str(pool or self.pool),
                *map(str, args), url or self.url, str(dest or self.dest)]

    def checkout(self, *args, check=True, **where):
        """Run the checkout; its CompletedProcess, checked for success
        unless ``check`` is false."""
        proc = subprocess.run(self.command(*args, **where), env=self.env,
                              capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError("%s failed:\n%s%s" % (
                " ".join(self.COMMAND[-2:]), proc.stdout, proc.stderr))
        return proc

    def commit(self, files, message):
        """Commit ``files`` (name: text) to the served repository; the new
        revision."""
        self.revisions.append(self.commit_files(self.tool, self.work, files,
                                                message))
        return self.revisions[-1]

    def run_command(self, revision):
        """The campaign's run: a purged checkout of ``revision``."""
        return self.command("--purge", "-r", revision)

    def run(self, revision):
        return subprocess.run(self.run_command(revision), env=self.env,
                              capture_output=True, text=True)

    def url_via(self, proxy):
        """The repository's URL through ``proxy`` (a FlakyProxy of the
        server)."""
        return proxy.url + self.url[len(self.server_url):]

    def timings(self, proc):
        return timings(proc, self.TIMINGS)

    def problems(self, rerun, revision, files=False):
        """What is wrong after a rerun that was to check out ``revision``:
        it failed, DEST is elsewhere or modified (or, with ``files``, its
        files are not the served revision's), the store is unsound."""
        if rerun.returncode != 0:
            return ["exit %d: %s" % (rerun.returncode,
                                     rerun.stderr.strip()[-300:])]
        found = []
        where = self.parent()
        if where != revision:
            found.append("DEST at %s" % where)
        if self.changes():
            found.append("DEST modified")
        if files and _tree_digest(self.dest) != _tree_digest(
                self.tree(revision)):
            found.append("DEST's files differ from the served revision")
        return found + self.store_problems() + self.pool_problems()

    def pool_problems(self):
        return []


class HgDriver(_Driver):
    """hg robustcheckout of a repository behind hg serve."""

    vcs = "hg"
    dotdir = ".hg"
    branch = "default"
    TIMINGS = "robustcheckout"

    HTTP_TIMEOUT = "http.timeout"
    commit_files = staticmethod(hg_commit)

    def __init__(self, hg, repo, url, tmp_path):
        super().__init__(hg, repo, url, url, tmp_path, hg(
            "log", "-T", "{node}\n", cwd=repo).split()[::-1])
        self.store = self.pool / self.revisions[0]
        self.work = repo
        self.COMMAND = [hg.binary, "robustcheckout"]

    def configure(self, name, value):
        """Set ``name`` (section.name) in the hgrc."""
        section, _, name = name.partition(".")
        with open(self.env["HGRCPATH"], "a") as fh:
            fh.write("[%s]\n%s = %s\n" % (section, name, value))

    def locks_left(self):
        return [path for path in (self.dest / ".hg" / "wlock",
                                  self.store / ".hg" / "store" / "lock")
                if os.path.lexists(path)]

    def parent(self, dest=None):
        return self.tool("log", "-r", ".", "-T", "{node}",
                         cwd=dest or self.dest)

    def changes(self, dest=None):
        return self.tool("status", cwd=dest or self.dest)

    def store_problems(self):
        verify = self.tool.proc("verify", "-q", cwd=self.store)
        if verify.returncode:
            return ["hg verify: %s" % verify.stderr.strip()[-300:]]
        return []

    def pool_problems(self):
        if os.listdir(self.pool) != [self.revisions[0]]:
            return ["pool holds %s" % os.listdir(self.pool)]
        return []

    def tree(self, node):
        """The files of ``node``, from the served repository."""
        path = self.trees / node
        if not path.exists():
            self.tool("archive", "-R", self.repo, "-r", node, "-t", "files",
                      "--config", "ui.archivemeta=false", path)
        return path


class GitDriver(_Driver):
    """gitbridge checkout of a repository behind git http-backend
    (``server``, a GitServer whose ``repo_url`` is the repository's);
    ``work``, if given, is a clone that ``commit`` pushes from."""

    vcs = "git"
    dotdir = ".git"
    branch = "main"
    TIMINGS = "checkout"

    HTTP_TIMEOUT = "sharepool.http-timeout"
    commit_files = staticmethod(git_commit)

    def __init__(self, git, repo, server, tmp_path, work=None):
        super().__init__(git, repo, server.repo_url, server.url, tmp_path,
                         git("-C", repo, "rev-list", "main").split()[::-1])
        self.work = work
        self.store = self.pool / (self.revisions[0] + ".git")
        self.url_key = hashlib.sha256(self.url.encode()).hexdigest()[:20]
        self.COMMAND = [tools.executable("gitbridge"), "checkout"]
        with open(os.path.join(self.env["HOME"], ".gitconfig"), "a") as fh:
            fh.write(GITCONFIG)

    def configure(self, name, value):
        """Set ``name`` in the global git config."""
        self.tool("config", "--global", name, value)

    def locks_left(self):
        return [path for path in [self.dest / ".git" / "index.lock",
                                  *self.pool.glob("checkouts/*.lock")]
                if os.path.lexists(path)]

    def parent(self, dest=None):
        return self.tool("-C", dest or self.dest, "rev-parse",
                         "HEAD").strip()

    def changes(self, dest=None):
        return self.tool("-C", dest or self.dest, "status", "--porcelain")

    def store_problems(self):
        fsck = subprocess.run(["git", "-C", str(self.store), "fsck",
                               "--no-progress"], env=self.env,
                              capture_output=True, text=True)
        if fsck.returncode:
            return ["git fsck: %s" % fsck.stderr.strip()[-300:]]
        return []

    def tree(self, commit):
        path = self.trees / commit
        if not path.exists():
            path.mkdir(parents=True)
            archive = subprocess.run(
                ["git", "-C", str(self.repo), "archive", commit],
                env=self.env, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(path)],
                           input=archive.stdout, check=True)
        return path


def _tree_digest(root):
    """Path, mode and content of every file under ``root`` but .hg and
    .git."""
    entries = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [name for name in dirs if name not in (".hg", ".git")]
        for name in files:
            path = os.path.join(top, name)
            with open(path, "rb") as fh:
                entries.append((os.path.relpath(path, root),
                                os.access(path, os.X_OK), fh.read()))
    return sorted(entries)
