"""The pull into a full store, its objects walked beside the checkout.

After a fetch, before it moves any ref, git proves that every object the
new ref tips reach is present (``git rev-list --objects`` of the new
tips, minus every ref's): at Firefox's size 0.25 to 0.30 s of one core,
most of it marking the 40,000 trees of the old tip, while nothing else
of the run can go on.  Git skips that walk for tips that came in a pack
from a promisor remote, as a partial clone's do.  So a pull into a full
store names its URL, for that one command, a promisor remote (``-c
remote.gitbridge-pull-<hash of the URL>.promisor=true``, with a filter
that leaves no blob out; the hash keeps any remote of the user's config
from adding a URL or a refspec to it); the store's own config stays a
full repository's.  Git marks the pack it brings (``*.promisor`` beside
it).  ``Pull.check`` then runs the same walk in a thread beside a reused
checkout's ``git checkout`` (before a new checkout writes its whole
tree), and removes the marks once it passed; a walk that fails deletes
the store (``checkout.Run.check_pulled``) before anything is said to
have worked.  A server that refuses the filter gets a plain fetch,
which git walks itself.

A mark left by a run killed or stopped before its walk ended, or by one
still walking, makes the next run walk from every ref, whether it pulls
or not (``unwalked``): about a second for the 4,001 commits of the
Firefox-scale repository, once; longer on a longer history.  The walk
runs offline: a promisor remote in the user's config would
otherwise fetch a missing object instead of finding it missing.
"""

import os

from gitbridge import partialtree
from vcsperf.core.process import CommandError, git

#: The start of the name the pull's URL has for the fetch command (``-c``
#: only).
PULL_REMOTE = "gitbridge-pull-"
#: A partial clone's filter that leaves nothing out: git stores no blob
#: of a terabyte.
NOTHING_LEFT_OUT = "blob:limit=1024g"


def fetch_source(url, key):
    """git's options and the source to fetch ``url`` (whose hash is
    ``key``) by, as a promisor remote."""
    name = PULL_REMOTE + key
    options = []
    for setting, value in (("url", url), ("promisor", "true"),
                           ("partialclonefilter", NOTHING_LEFT_OUT)):
        options += ["-c", "remote.%s.%s=%s" % (name, setting, value)]
    return options, [name]


def unwalked(store):
    """A ``Pull`` that walks the full ``store`` from every ref, as its
    marks ask; None when it holds none."""
    if not _marks(store):
        return None
    pull = Pull(store)
    pull.fetched()
    return pull


class Pull:
    """One pull into the full ``store``: made before the fetch and told
    ``fetched`` after it, both under the store's lock; ``check`` (in a
    thread) walks what it brought."""

    def __init__(self, store):
        self.store = store
        # a mark already there: what it marks was never walked
        self.known = [] if _marks(store) else _tips(store)
        self.tips = self.marks = None

    def fetched(self):
        self.tips, self.marks = _tips(self.store), _marks(self.store)

    def check(self):
        """None once every object the refs reach is present (the marks
        then removed), else what git said."""
        lines = self.tips + ["^" + tip for tip in self.known]
        try:
            git("rev-list", "--objects", "--quiet", "--stdin",
                cwd=self.store, env=partialtree.offline_env(),
                input="".join(line + "\n" for line in lines))
        except CommandError as failure:
            return failure.stderr.strip() or "git rev-list failed"
        except OSError as failure:
            return str(failure)
        for mark in self.marks:
            try:
                os.unlink(mark)
            except OSError:
                pass  # walked again by the next run
        return None


def _tips(store):
    return git("for-each-ref", "--format=%(objectname)",
               cwd=store).split()


def _marks(store):
    """The promisor marks of the store's packs: any entry but a directory
    (which this module never makes, nor removes)."""
    try:
        entries = list(os.scandir(os.path.join(store, "objects", "pack")))
    except FileNotFoundError:
        return []
    return [entry.path for entry in entries if entry.name.endswith(
        ".promisor") and not entry.is_dir(follow_symlinks=False)]
