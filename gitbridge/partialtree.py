"""Cone-mode sparse checkouts and blobless pools for ``gitbridge checkout``.

``--sparse-dirs DIR,DIR`` checks out those directories whole, the files
at the top and those beside each directory's parents: Git's cone mode
(``git sparse-checkout set --cone``), with a sparse index, as Mozilla's
run-task does for Firefox's sparse profiles, which are directory lists.
Each name is a directory of the commit, relative to the repository's
top; a name that is absolute, has an empty, ``.``, ``..`` or ``.git``
component, a control character or a leading double quote, or is no
directory at the commit, is one ``abort:`` line before DEST is written.

A reused DEST is brought to what the request asks for, and says so in
one line: a full checkout is narrowed to the directories, changed
directories replace the old ones, a checkout of directories (or of a
``--sparseprofile``) is widened to the full tree when neither option is
given (``git sparse-checkout disable`` after the update).  As in
robustcheckout, a ``--sparseprofile`` checkout is never made full, nor a
full one given a profile (``hg help sharepool``).  ``--purge`` in a
cone that stays removes whole the directories outside it, then runs
``git clean -ffdx``: git reads every path of a directory present
outside the cone on each command.

``--filter blob:none`` (git config ``sharepool.filter``) makes a new
pooled store blobless: commits and trees, and only the file contents
checkouts have needed.  It is a partial clone to stock git (the URL its
promisor remote, ``gitbridge-<hash of URL>``, without user and password),
so ``git gc``, ``git fsck`` and ``git log -p`` in the store work and fetch
what they lack from the URL into the store.  Before each update the blobs
the checkout needs (its directories' at the commit, or the whole tree's)
that the store lacks are fetched in one request into the store, under
the store's lock, within the network deadline and the network attempts
like any fetch; the checkout reads them from there, so lazily fetched
blobs never land in a checkout, and git in a checkout never fetches on
its own.  A store made full stays full; a blobless store serves full
checkouts too, fetching their blobs.  Fetching blobs by id needs a
server that serves any object a client names (GitHub does;
``uploadpack.allowAnySHA1InWant`` in git).
"""

import os
import re
import urllib.parse

from gitbridge import gitconfig
from vcsperf.core import pooling
from vcsperf.core.errors import Abort
from vcsperf.core.process import CommandError, git

#: The filters a pooled store may be made with.
FILTERS = ("blob:none",)
#: Bounds of ``--sparse-dirs``: names, and bytes a name.
MAX_DIRS = 512
MAX_DIR_BYTES = 1024
#: What a directory name may not hold: control characters.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Git's glob characters, escaped in cone patterns and glob pathspecs.
_GLOB = re.compile(r"([*?\[\\])")
_REMOTE_PREFIX = "gitbridge-"
#: Files git reads from the index where they are not checked out.
_READ_FROM_THE_INDEX = (".gitignore", ".gitattributes")
#: The promisor of a checkout of a blobless store: no repository.
_NO_SERVER = "file:///dev/null/gitbridge-fetches-into-the-pooled-store"


def offline_env():
    """The environment of git commands that must not reach a server: in
    a blobless store git fetches an object it lacks by itself (even
    ``rev-parse`` of a commit), beyond the pool's lock and deadline.
    ``GIT_NO_LAZY_FETCH`` is git's own switch (2.44 and later); before
    it, no transport is allowed."""
    return dict(os.environ, GIT_NO_LAZY_FETCH="1",
                GIT_ALLOW_PROTOCOL="gitbridge-offline")


# Requests --------------------------------------------------------------------

def check_filter(value):
    """``value`` of ``--filter`` or ``sharepool.filter``: a filter of
    ``FILTERS``, or None for none."""
    if not value:
        return None
    if value not in FILTERS:
        raise Abort("unknown filter %r" % value,
                    hint="--filter and sharepool.filter take %s (a "
                    "blobless pool)" % ", ".join(FILTERS))
    return value


def parse_dirs(values):
    """The directories of ``--sparse-dirs`` values (each a comma list),
    checked, sorted and without repeats."""
    dirs = set()
    for value in values:
        for part in value.split(","):
            dirs.add(_check_dir(part))
            if len(dirs) > MAX_DIRS:
                raise Abort("--sparse-dirs names more than %d directories"
                            % MAX_DIRS,
                            hint="name the parents of directories that "
                            "belong together")
    return tuple(sorted(dirs))


def _check_dir(text):
    name = text.strip().rstrip("/")
    shown = repr(text.strip())
    if not name:
        problem = "is empty"
    elif len(os.fsencode(name)) > MAX_DIR_BYTES:
        problem = "is longer than %d bytes" % MAX_DIR_BYTES
    elif name.startswith("/"):
        problem = "is absolute"
    elif _CONTROL.search(name) or name.startswith('"'):
        problem = "holds a control character or a leading double quote"
    elif any(part in ("", ".", "..") or part.lower() == ".git"
             for part in name.split("/")):
        problem = "has an empty, '.', '..' or '.git' component"
    else:
        return name
    raise Abort("sparse directory %s %s" % (shown, problem),
                hint="--sparse-dirs takes directories relative to the "
                "repository's top, separated by commas")


def shown_dirs(dirs):
    return ", ".join(dirs)


# Cone patterns -----------------------------------------------------------------

def _cone(dirs):
    """``(recursive, parents)``: the directories checked out whole (none
    under another), and every directory above one of them."""
    recursive = [d for d in dirs
                 if not any(d.startswith(other + "/") for other in dirs)]
    parents = sorted({d.rsplit("/", n)[0] for d in recursive
                      for n in range(1, d.count("/") + 1)})
    return recursive, parents


def cone_patterns(dirs):
    """The text of ``info/sparse-checkout`` in cone mode for ``dirs``, as
    ``git sparse-checkout set --cone`` writes it."""
    recursive, parents = _cone(dirs)
    lines = ["/*", "!/*/"]
    for parent in parents:
        lines += ["/%s/" % _escape(parent), "!/%s/*/" % _escape(parent)]
    lines += ["/%s/" % _escape(d) for d in recursive]
    return "".join(line + "\n" for line in lines)


def cone_pathspecs(dirs):
    """Pathspecs of the files a cone of ``dirs`` checks out."""
    recursive, parents = _cone(dirs)
    return ([":(glob)*"] + [":(glob)%s/*" % _escape(p) for p in parents]
            + [":(literal)%s" % d for d in recursive])


def _escape(name):
    return _GLOB.sub(r"\\\1", name)


# A checkout's sparse state ---------------------------------------------------------

def state(dest):
    """``"full"``, ``"cone"`` or ``"patterns"`` (non-cone: a sparse
    profile): DEST's sparse checkout as git reads its config."""
    config = gitconfig.read(dest, r"^core\.sparsecheckout(cone)?$")
    if not config.boolean("core.sparsecheckout", False):
        return "full"
    return "cone" if config.boolean("core.sparsecheckoutcone",
                                    False) else "patterns"


def sparse_file(dest):
    path = git("rev-parse", "--git-path", "info/sparse-checkout",
               cwd=dest).strip()
    return os.path.join(dest, path)


def current_patterns(dest):
    try:
        with open(sparse_file(dest)) as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def current_dirs(dest):
    """The directories of DEST's cone, as git lists them."""
    return git("sparse-checkout", "list", cwd=dest).splitlines()


def set_cone(dest, dirs, write_atomically):
    """Make ``dirs`` DEST's cone, in its config and patterns only: the
    update (``git checkout --force``) then writes and removes files, with
    the blobs the pool has fetched (``git sparse-checkout set`` would
    update the tree at the old commit, whose blobs a blobless pool may
    lack)."""
    if state(dest) == "cone":
        _expand_index(dest)
    _worktree_config(dest, sparseCheckout="true", sparseCheckoutCone="true",
                     sparse="true")
    path = sparse_file(dest)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, cone_patterns(dirs))


def leave_cone(dest):
    """Before non-cone patterns (a sparse profile) replace a cone."""
    _expand_index(dest)
    _worktree_config(dest, sparseCheckoutCone="false")


def _expand_index(dest):
    """DEST's sparse index written out whole, its files untouched: the
    update cannot move a directory entry of a sparse index across a cone
    that changed under it ("unknown file mode")."""
    _worktree_config(dest, sparse="false")
    git("update-index", "--index-version", "4", cwd=dest)


def _worktree_config(dest, **settings):
    enable_worktree_config(dest)
    for name, value in settings.items():
        section = "index" if name == "sparse" else "core"
        git("config", "--worktree", "%s.%s" % (section, name), value,
            cwd=dest)


def enable_worktree_config(dest):
    """``extensions.worktreeConfig`` on, for DEST's own sparse settings.
    A store's ``core.bare`` moves to its ``config.worktree`` first, as
    git's ``sparse-checkout`` does it: with the extension on, the common
    config's ``core.bare`` would make every worktree of the store bare."""
    common = git("rev-parse", "--path-format=absolute", "--git-common-dir",
                 cwd=dest).strip()
    config = os.path.join(common, "config")
    if gitconfig.read(dest, r"^extensions\.worktreeconfig$").boolean(
            "extensions.worktreeconfig", False):
        return
    bare = git("config", "--file", config, "--type=bool", "--default",
               "false", "core.bare", cwd=dest).strip() == "true"
    if bare:
        git("config", "--file", config + ".worktree", "core.bare", "true",
            cwd=dest)
    git("config", "--file", config, "extensions.worktreeConfig", "true",
        cwd=dest)
    if bare:
        git("config", "--file", config, "--unset", "core.bare", cwd=dest)


def widen(dest):
    """Make DEST, updated, a full checkout (every blob of its commit is in
    the pool)."""
    git("sparse-checkout", "disable", cwd=dest, env=offline_env())


def dirs_problem(store, commit, dirs):
    """Why ``dirs`` cannot be a cone at ``commit`` (a directory the commit
    lacks, or a file), or None."""
    found = {}
    out = git("ls-tree", "-z", "--full-tree", commit, "--",
              *(":(literal)%s" % d for d in dirs), cwd=store,
              env=offline_env())
    for entry in out.split("\0"):
        info, _, path = entry.partition("\t")
        if path:
            found[path] = info.split(" ")[1]
    for d in dirs:
        if found.get(d) != "tree":
            return "sparse directory %s is %s at revision %s" % (
                d, "a file, not a directory" if d in found
                else "not in the tree", commit)
    return None


# Blobless stores -------------------------------------------------------------------

#: The setting that makes a store a partial clone.
PARTIAL_CLONE_KEY = "extensions.partialclone"


def is_blobless(store):
    """Whether the pooled ``store`` is a partial clone."""
    return names_promisor(gitconfig.read(store, r"^extensions\.partialclone$"))


def names_promisor(config):
    """Whether a store's settings ``config`` (a ``gitconfig.GitConfig``
    read with ``PARTIAL_CLONE_KEY`` among them) make it a partial
    clone."""
    return bool(config.get(PARTIAL_CLONE_KEY))


def remote_name(key):
    return _REMOTE_PREFIX + key


def make_blobless(store, url, key):
    """Make the new ``store`` a partial clone whose promisor is ``url``."""
    git("config", "core.repositoryformatversion", "1", cwd=store)
    promise(store, url, key)
    git("config", "extensions.partialClone", remote_name(key), cwd=store)


def promise(store, url, key):
    """``url`` a promisor remote of the blobless ``store`` (without user
    and password: the store keeps no credentials); the name to fetch it
    by and git's ``-c`` options that give back the whole URL."""
    name = remote_name(key)
    kept = _without_credentials(url)
    config = gitconfig.read(store, r"^remote\.%s\." % name)
    for setting, value in (("url", kept), ("promisor", "true"),
                           ("partialclonefilter", "blob:none")):
        if config.get("remote.%s.%s" % (name, setting)) != value:
            git("config", "remote.%s.%s" % (name, setting), value,
                cwd=store)
    options = ["-c", "url.%s.insteadOf=%s" % (url, kept)] if kept != url \
        else []
    return name, options


def _without_credentials(url):
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(
        netloc=parts.netloc.rpartition("@")[2]))


def borrow_promises(dest):
    """Make DEST, an alternates checkout of a blobless store, a partial
    clone to git, so that ``git gc`` and ``git fsck`` in it take what the
    store lacks as promised; its promisor is no server, so git in it
    fetches nothing into it (gitbridge fetches into the store, and so
    does git run in the store)."""
    name = _REMOTE_PREFIX + "pool"
    git("config", "core.repositoryformatversion", "1", cwd=dest)
    git("config", "remote.%s.url" % name, _NO_SERVER, cwd=dest)
    git("config", "remote.%s.promisor" % name, "true", cwd=dest)
    git("config", "extensions.partialClone", name, cwd=dest)


def missing_blobs(store, commit, dirs):
    """The blobs of ``commit``'s tree (under the cone of ``dirs``, with
    every ``.gitignore`` and ``.gitattributes``, which git reads from the
    index outside the cone; or the whole tree) that the store lacks;
    listing them fetches nothing.  From the commit's tree: a commit that
    changes nothing under the pathspecs would be simplified away, its
    objects unlisted.  Pathspecs go on stdin; rev-list does not look
    into directories for a wildcard, so the files git reads are named."""
    specs = []
    if dirs:
        names = git("ls-tree", "-r", "-z", "--name-only", "--full-tree",
                    commit, cwd=store).split("\0")
        specs = ["--"] + cone_pathspecs(dirs) + [
            ":(literal)" + name for name in names
            if name.rpartition("/")[2] in _READ_FROM_THE_INDEX
            and "\n" not in name]
    out = git("rev-list", "--objects", "--missing=print", "--stdin",
              cwd=store, input="".join(
                  line + "\n" for line in [commit + "^{tree}"] + specs))
    return [line[1:] for line in out.splitlines() if line.startswith("?")]


def fetch_blobs(store, name, options, blobs, env, deadline):
    """Fetch ``blobs`` by id from the promisor remote ``name`` into
    ``store``, in one request (as git's own lazy fetch does)."""
    git(*options, "-c", "fetch.negotiationAlgorithm=noop", "fetch",
        "--quiet", "--no-tags", "--no-write-fetch-head",
        "--recurse-submodules=no", "--filter=blob:none", "--stdin", name,
        cwd=store, env=env, deadline=deadline,
        input="".join(blob + "\n" for blob in blobs))


# The checkout's steps ------------------------------------------------------------

class Steps:
    """The steps of ``gitbridge checkout`` (``checkout.Run``) for sparse
    directories and blobless stores, over the pooled-checkout engine."""

    #: Whether DEST, in cone mode now, becomes full after the update.
    widening = False

    def sparse_request(self):
        return bool(self.request.sparseprofile or self.request.sparse_dirs)

    def check_sparse_unchanged(self, sparse):
        """Cone mode is entered and left on request (``prepare_update``);
        a sparse profile keeps robustcheckout's rule."""
        if self.request.sparse_dirs or state(self.request.dest) == "cone":
            return
        super().check_sparse_unchanged(sparse)

    def prepare_update(self, node):
        """The directories checked, the blobs the update needs fetched
        into a blobless store, and DEST's sparse configuration set."""
        request, store = self.request, self.store
        dirs = request.sparse_dirs
        if dirs:
            problem = dirs_problem(store, node, dirs)
            if problem:
                raise Abort(problem, hint="check --sparse-dirs: "
                            "directories are relative to the repository's "
                            "top")
        if self.store_is_blobless(store):
            self.fetch_missing_blobs(node, dirs)
        self.widening = False
        if dirs:
            self.set_cone(dirs)
        elif request.sparseprofile:
            self.set_sparse_profile(node)
        elif state(request.dest) == "cone":
            self.say("(widening the sparse checkout of %s to the full "
                     "tree)", shown_dirs(current_dirs(request.dest)))
            self.widening = True

    def set_cone(self, dirs):
        dest = self.request.dest
        now, shown = state(dest), shown_dirs(dirs)
        if now == "cone" and current_patterns(dest) == cone_patterns(dirs):
            self.say("(sparse directories %s already set)", shown)
            return
        index = git("rev-parse", "--git-path", "index", cwd=dest).strip()
        if not os.path.exists(os.path.join(dest, index)):
            self.say("(setting sparse directories %s)", shown)
        else:
            if now == "cone":
                self.say("(changing sparse directories from %s to %s)",
                         shown_dirs(current_dirs(dest)), shown)
            elif now == "patterns":
                self.say("(replacing the sparse profile's patterns with "
                         "sparse directories %s)", shown)
            else:
                self.say("(narrowing the full checkout to sparse "
                         "directories %s)", shown)
        set_cone(dest, dirs, self.write_atomically)

    def fetch_missing_blobs(self, node, dirs):
        """Fetch the blobs of ``node`` (under ``dirs``) that the blobless
        store lacks, under its lock: one process fetches them."""
        store = self.store
        if not missing_blobs(store, node, dirs):
            return
        with self.store_lock(store):
            blobs = missing_blobs(store, node, dirs)
            if not blobs:
                return
            self.say("(fetching %d blobs the checkout needs into blobless "
                     "pooled store %s)", len(blobs), os.path.basename(store))
            name, options = promise(store, self.request.url, self.url_key)
            with self.timer.step("fetch_blobs"):
                try:
                    self.network("fetch-blobs", lambda: fetch_blobs(
                        store, name, options, blobs, self.remote_env,
                        self.deadline))
                except CommandError as failure:
                    raise Abort(
                        "could not fetch %d blobs into blobless pooled "
                        "store %s: %s" % (len(blobs), os.path.basename(store),
                                          (failure.stderr.strip().splitlines()
                                           or ["?"])[-1]),
                        hint="the server must serve objects by id (git: "
                        "uploadpack.allowAnySHA1InWant); or use a store with "
                        "every blob (no --filter or sharepool.filter)"
                    ) from None
            left = missing_blobs(store, node, dirs)
        if left:
            raise Abort("%s sent %d of the %d blobs asked for"
                        % (self.request.url, len(blobs) - len(left),
                           len(blobs)),
                        hint="check the server; nothing was checked out")

    def purge_outside_cone(self):
        """Before ``git clean``, with the cone DEST has and the request
        keeps: remove whole each directory at the top and in the cone's
        parents that is neither in the cone nor a parent.  Nothing there
        is checked out, so all of it is what ``git clean -ffdx`` removes
        (or a tracked file left where the cone no longer reaches); git
        reads every path of a present directory outside the cone on each
        command (seconds at Firefox's size).  How many were removed."""
        dest, dirs = self.request.dest, self.request.sparse_dirs
        if not dirs or state(dest) != "cone" \
                or current_patterns(dest) != cone_patterns(dirs):
            return 0
        recursive, parents = _cone(dirs)
        kept = set(recursive) | set(parents)
        removed = 0
        top = os.path.realpath(dest)
        for level in [""] + parents:
            path = os.path.join(top, level) if level else top
            # a parent replaced by a link may lead out of DEST
            if os.path.realpath(path) != path:
                continue
            try:
                entries = list(os.scandir(path))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                name = entry.name if not level else level + "/" + entry.name
                if name == ".git" or name in kept \
                        or not entry.is_dir(follow_symlinks=False):
                    continue
                pooling.discard(entry.path)
                removed += 1
        return removed

    def after_update(self):
        if self.widening:
            widen(self.request.dest)
            self.widening = False

    def sparse_problem(self):
        """How DEST's sparse configuration differs from the request's, or
        None."""
        dest, dirs = self.request.dest, self.request.sparse_dirs
        now = state(dest)
        if dirs and (now != "cone"
                     or current_patterns(dest) != cone_patterns(dirs)):
            return "sparse directories are not %s" % shown_dirs(dirs)
        if not dirs and not self.request.sparseprofile and now != "full":
            return "the checkout is still sparse"
        return None
