"""The pull into a full store, its objects walked beside the checkout.

After a fetch, before it moves any ref, git proves that every object the
new ref tips reach is present (``git rev-list --objects`` of the new
tips, minus every ref's): at Firefox's size 0.25 to 0.30 s of one core,
most of it marking the 40,000 trees of the old tip, while nothing else
of the run can go on.  Git skips that walk for tips that came in a pack
from a promisor remote, as a partial clone's do.  So a pull into a full
store names its URL, for that one command, a promisor remote (``-c
remote.gitbridge-pull.promisor=true``, with a filter that leaves no blob
out); the store's own config stays a full repository's.  Git marks that
pack (``*.promisor`` beside it).  ``Pull.check`` then runs the same walk
in a thread, while the checkout writes the tree, and removes the marks
once it passed; a walk that fails deletes the store
(``checkout.Run.check_pulled``) before anything is said to have worked.

A mark left by a run killed before its walk ended (or by one still
walking) makes the next pull walk from every ref, not from those before
it: about a second at Firefox's size, once.
"""

import os

from vcsperf.core.process import CommandError, git

#: The name the pull's URL has for the fetch command (``-c`` only).
PULL_REMOTE = "gitbridge-pull"
#: A partial clone's filter that leaves nothing out: git stores no blob
#: of a terabyte.
NOTHING_LEFT_OUT = "blob:limit=1024g"


def fetch_source(url):
    """git's options and the source to fetch ``url`` by, as a promisor
    remote."""
    options = []
    for setting, value in (("url", url), ("promisor", "true"),
                           ("partialclonefilter", NOTHING_LEFT_OUT)):
        options += ["-c", "remote.%s.%s=%s" % (PULL_REMOTE, setting, value)]
    return options, [PULL_REMOTE]


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
                cwd=self.store, input="".join(line + "\n" for line in lines))
        except CommandError as failure:
            return failure.stderr.strip() or "git rev-list failed"
        except OSError as failure:
            return str(failure)
        for mark in self.marks:
            try:
                os.unlink(mark)
            except FileNotFoundError:
                pass
        return None


def _tips(store):
    return git("for-each-ref", "--format=%(objectname)",
               cwd=store).split()


def _marks(store):
    packs = os.path.join(store, "objects", "pack")
    return [os.path.join(packs, name) for name in os.listdir(packs)
            if name.endswith(".promisor")]
