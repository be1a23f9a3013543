"""``gitbridge pack-cache`` as Git's ``uploadpack.packObjectsHook``, set
in the server's global git config (protected configuration, as Git
requires) and run by the real ``git http-backend``: concurrent fetches of
the same new commits run ``git pack-objects`` once (counted in git's own
trace2 events, not by the hook) and get the same valid pack; a push, a
shallow fetch of another depth, another repository with the same objects
each make a new key; a ``--shallow-file`` is keyed by its content."""

import glob
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from vcsperf.core import responsecache
from vcsperf.harness import tools
from vcsperf.harness.servers import GitServer

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Served:
    """``srv.git``, the real history but its last commits, under
    ``root`` (what the Git server serves); the server's global git config
    in ``root/.gitconfig`` (``GitServer`` runs ``git http-backend`` with
    ``HOME=root``); the cache in ``cache``."""

    def __init__(self, git, real, template, tmp_path):
        self.git = git
        self.real = str(real)
        self.root = tmp_path / "root"
        self.srv = self.root / "srv.git"
        self.template = template
        self.cache = tmp_path / "cache"
        self.trace = tmp_path / "trace2.json"
        self.tmp = tmp_path
        shutil.copytree(template, self.srv, symlinks=True)
        self.head = git("-C", real, "rev-parse", "HEAD").strip()
        self.base = git("-C", template, "rev-parse", "main").strip()
        self.hook(["--dir", str(self.cache)])

    def hook(self, options, extra=""):
        """The server's global config: the hook with ``options``, and
        git's trace2 events of every process into ``trace``.  One thread
        of delta search: with more, which deltas git picks depends on
        their timing, and two runs' packs could differ in bytes."""
        command = " ".join([tools.executable("gitbridge"), "pack-cache",
                            *options])
        (self.root / ".gitconfig").write_text(
            "[uploadpack]\n\tpackObjectsHook = %s\n[pack]\n\tthreads = 1\n"
            "[trace2]\n\teventTarget = %s\n%s"
            % (command, self.trace, extra))

    def client(self, name):
        """A client at the base: a copy of the server's repository before
        the push (no upload-pack)."""
        path = self.tmp / name
        shutil.copytree(self.template, path, symlinks=True)
        return path

    def push_new(self):
        self.git("-C", self.real, "push", "-q", self.srv,
                 "HEAD:refs/heads/main")

    def pack_objects_runs(self):
        """``git pack-objects`` processes started, from git's trace2."""
        if not self.trace.exists():
            return 0
        runs = 0
        for line in self.trace.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "start" and \
                    "pack-objects" in event.get("argv", []):
                runs += 1
        return runs

    def stats(self, gitbridge, directory=None):
        return json.loads(gitbridge(
            "pack-cache", "--stats", "--json", "--dir",
            directory or self.cache).stdout)


@pytest.fixture
def served(git, real_git_repo, real_git_before_push, tmp_path):
    return Served(git, real_git_repo, real_git_before_push, tmp_path)


def fetch_all(env, clients, url, *args):
    procs = [subprocess.Popen(
        ["git", "-C", str(client), "fetch", "-q", *args, url,
         "+refs/heads/main:refs/heads/main"], env=env,
        stderr=subprocess.PIPE, text=True) for client in clients]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


def packs_of(client):
    return sorted(os.path.basename(p) for p in
                  glob.glob(os.path.join(client, "objects", "pack",
                                         "*.pack")))


def test_a_fleet_fetches_with_one_pack_objects_and_a_push_makes_new_keys(
        served, git, gitbridge, env):
    clients = [served.client("c%d" % n) for n in range(4)]
    twin = served.client("twin")
    seed_packs = packs_of(clients[0])
    served.push_new()
    with GitServer(served.root) as server:
        url = server.url + "srv.git"
        fetch_all(env, clients, url)
        assert served.pack_objects_runs() == 1
        stats = served.stats(gitbridge)
        assert (stats["misses"], stats["hits"], stats["uncached"]) == (1, 3, 0)
        assert stats["entries"] == 1 and stats["bytes_saved"] > 100000
        # the same pack, byte for byte: index-pack names it by its content
        fetched = {tuple(sorted(set(packs_of(c)) - set(seed_packs)))
                   for c in clients}
        assert len(fetched) == 1 and len(fetched.pop()) == 1
        git("-C", clients[0], "fsck", "--no-progress")
        for client in clients:
            assert git("-C", client, "rev-parse", "main").strip() \
                == served.head

        # a push: new wants, a new key; the old entry is not served for it
        work = served.tmp / "work"
        git("clone", "-q", "-b", "main", served.srv, work)
        git("-C", work, "remote", "set-url", "origin", url)
        (work / "after-push.txt").write_text("pushed\n" * 2000)
        git("-C", work, "add", "after-push.txt")
        git("-C", work, "commit", "-q", "-m", "after the push")
        git("-C", work, "push", "-q", "origin", "main")
        pushed = git("-C", work, "rev-parse", "HEAD").strip()
        runs = served.pack_objects_runs()
        fetch_all(env, clients[:1], url)
        assert git("-C", clients[0], "rev-parse", "main").strip() == pushed
        assert served.pack_objects_runs() == runs + 1
        git("-C", clients[0], "fsck", "--no-progress")

        # a second repository with the same objects, asked what the
        # fleet asked: its own key, not the first repository's pack
        other = served.root / "other.git"
        git("clone", "-q", "--bare", "--no-hardlinks", served.srv, other)
        git("-C", other, "update-ref", "refs/heads/main", served.head)
        runs = served.pack_objects_runs()
        fetch_all(env, [twin], server.url + "other.git")
        assert served.pack_objects_runs() == runs + 1
        assert served.stats(gitbridge)["hits"] == 3
        assert git("-C", twin, "rev-parse", "main").strip() == served.head
        assert packs_of(twin) == packs_of(clients[1])


def test_shallow_fetches_are_keyed_by_their_shallow_commits(
        served, git, gitbridge, env):
    served.push_new()
    with GitServer(served.root) as server:
        url = server.url + "srv.git"
        for name, depth in (("s1", 1), ("s2", 1), ("s3", 2)):
            git("clone", "-q", "--bare", "--depth", str(depth), url,
                served.tmp / name)
    git("-C", served.tmp / "s2", "fsck", "--no-progress")
    stats = served.stats(gitbridge)
    # depth 1 twice: one key; depth 2: another
    assert (stats["misses"], stats["hits"]) == (2, 1)
    assert len(git("-C", served.tmp / "s3", "rev-list", "--all")
               .splitlines()) == 2

    # git before 2.19 named a file of shallow commits: its content counts
    shallow = served.tmp / "shallow-a"
    shallow.write_text(served.base + "\n")
    same = served.tmp / "shallow-b"
    same.write_text(served.base + "\n")
    other = served.tmp / "shallow-c"
    other.write_text(git("-C", served.srv, "rev-parse", "main~1"))
    stdin = "%s\n--not\n\n" % served.head
    outputs = []
    for path in (shallow, same, other):
        proc = subprocess.run(
            [tools.executable("gitbridge"), "pack-cache", "--dir",
             str(served.cache), "git", "--shallow-file", str(path),
             "pack-objects", "--revs", "--stdout", "--shallow"],
            input=stdin.encode(), capture_output=True, cwd=served.srv,
            env=env)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]
    after = served.stats(gitbridge)
    assert after["hits"] == stats["hits"] + 1
    assert after["misses"] == stats["misses"] + 2


def test_the_stored_pack_holds_what_pack_objects_sends(served, git, env):
    served.push_new()
    stdin = ("%s\n--not\n%s\n\n" % (served.head, served.base)).encode()
    command = ["git", "pack-objects", "--revs", "--thin", "--stdout",
               "--delta-base-offset"]
    plain = subprocess.run(command, input=stdin, capture_output=True,
                           cwd=served.srv, env=env, check=True).stdout
    hooked = subprocess.run(
        [tools.executable("gitbridge"), "pack-cache", "--dir",
         str(served.cache), *command], input=stdin, capture_output=True,
        cwd=served.srv, env=env, check=True).stdout
    entries = glob.glob(str(served.cache / "entries" / "*" / "*"))
    assert len(entries) == 1
    with open(entries[0], "rb") as fh:
        stored = fh.read()
    assert stored[len(responsecache.HEAD_MAGIC):][:len(hooked)] == hooked

    def objects(pack, name):
        client = served.client(name)
        git("-C", client, "config", "fetch.unpackLimit", "1")
        out = subprocess.run(
            ["git", "-C", str(client), "index-pack", "--stdin",
             "--fix-thin"], input=pack, capture_output=True, env=env,
            check=True).stdout.split()[-1].decode()
        idx = os.path.join(client, "objects", "pack",
                           "pack-%s.idx" % out)
        with open(idx, "rb") as fh:
            listed = subprocess.run(["git", "show-index"], stdin=fh,
                                    capture_output=True, env=env,
                                    check=True).stdout.decode()
        return sorted(line.split()[1] for line in listed.splitlines())
    assert objects(hooked, "a") == objects(plain, "b")

    # the tags of a request that includes them, and the repository's pack
    # settings, are in the key too
    def hook(*options):
        return subprocess.run(
            [tools.executable("gitbridge"), "pack-cache", "--dir",
             str(served.cache), *command, *options], input=stdin,
            capture_output=True, cwd=served.srv, env=env, check=True).stdout
    with_tags = hook("--include-tag")
    assert hook("--include-tag") == with_tags
    git("-C", served.srv, "tag", "-a", "-m", "a release", "v-new",
        served.head)
    tagged = hook("--include-tag")
    assert tagged != with_tags and objects(tagged, "c") == sorted(
        objects(with_tags, "d") + [git("-C", served.srv, "rev-parse",
                                       "v-new").strip()])
    git("-C", served.srv, "config", "pack.window", "5")
    hook("--include-tag")
    assert len(glob.glob(str(served.cache / "entries" / "*" / "*"))) == 4

    # progress: git's own on a pack being made, none on a stored one
    made, stored = [subprocess.run(
        [tools.executable("gitbridge"), "pack-cache", "--dir",
         str(served.cache), *command, "--progress"], input=stdin,
        capture_output=True, cwd=served.srv, env=env, check=True)
        for _ in range(2)]
    assert b"Enumerating objects" in made.stderr and stored.stderr == b""
    assert made.stdout == stored.stdout


def documented_config():
    """The README's git config of the hook."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## gitbridge pack-cache", 1)[1]
    return section.split("```gitconfig\n", 1)[1].split("```", 1)[0]


def test_the_documented_hook_runs_from_global_config_only(served, git,
                                                          gitbridge, env):
    # Git honours the hook from protected configuration only: the same
    # line in the repository's own config runs nothing
    documented = documented_config().replace(
        "gitbridge pack-cache", tools.executable("gitbridge") + " pack-cache"
    ).replace("/var/cache/git-packs", str(served.cache))
    assert str(served.cache) in documented
    (served.root / ".gitconfig").write_text("")
    with open(served.srv / "config", "a") as fh:
        fh.write(documented)
    served.push_new()
    clients = [served.client("c1"), served.client("c2")]
    with GitServer(served.root) as server:
        fetch_all(env, clients[:1], server.url + "srv.git")
        assert not served.cache.exists()
        # the server's global config (HOME): protected, so it runs
        (served.root / ".gitconfig").write_text(documented)
        fetch_all(env, clients[1:], server.url + "srv.git")
    stats = served.stats(gitbridge)
    assert (stats["misses"], stats["entries"]) == (1, 1)
    for client in clients:
        assert git("-C", client, "rev-parse", "main").strip() == served.head


@pytest.mark.slow
def test_the_fleet_benchmark_runs_on_the_real_history(real_git_repo, env,
                                                      tmp_path):
    out = tmp_path / "bench.json"
    tools.run([tools.executable("vcsperf"), "bench", "packcache",
               real_git_repo, "--clients", "2", "--behind", "2", "--loose",
               "--json", out], env)
    figures = json.loads(out.read_text())
    for name in ("none", "hook"):
        row = figures["results"][name]
        assert row["server_cpu_per_client"] > 0
        assert row["bytes_per_client"] > 10000
    assert 0.9 < figures["ratios"]["bytes"] <= 1.0
