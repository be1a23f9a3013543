# fallback.py - a broken clone bundle falls back to a normal clone
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""The client side of the extension: a clone whose bundle cannot be
applied (a truncated or corrupt download) goes on as a normal clone when
``ui.clonebundlefallback`` is set and nothing of the bundle stayed in the
store."""

import os

from mercurial import error
from mercurial.i18n import _
from mercurial.utils import stringutil


def _store_holds_data(repo):
    for root, _dirs, files in os.walk(repo.spath):
        for name in files:
            if (name.endswith((b'.i', b'.d', b'.n'))
                    and os.path.getsize(os.path.join(root, name))):
                return True
    return False


def trypullbundlefromurl(orig, ui, repo, url, *args, **kwargs):
    """``exchange.trypullbundlefromurl``, but a bundle that fails to
    apply, and leaves nothing in the store, is one warning line and the
    clone goes on as a normal one (when ``ui.clonebundlefallback`` is
    set)."""
    try:
        return orig(ui, repo, url, *args, **kwargs)
    except (error.Abort, IOError) as err:
        repo.invalidate()
        if (not ui.configbool(b'ui', b'clonebundlefallback')
                or len(repo.unfiltered()) or _store_holds_data(repo)):
            raise
        ui.warn(_(b'clone bundle %s is broken: %s\n')
                % (url, stringutil.forcebytestr(err)))
        return False
