# robustcheckout.py - sharepool under the name of Mozilla's extension
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""hg robustcheckout from sharepool, under Mozilla's extension name (drop-in)

Hosts whose hgrc says ``robustcheckout = /path/to/version-control-tools/
hgext/robustcheckout`` switch to sharepool's command by pointing that line
at this module, or by writing ``robustcheckout =``; nothing else changes.
Loaded under this name, ``sharepool.private-cache`` defaults to true:
robustcheckout's contract is a pool and checkouts that only this machine
uses, so a lock left by another host is taken over at once.

When ``sharepool`` is enabled as well, it provides the command and this
module adds nothing.  See :hg:`help sharepool`.
"""

from mercurial import extensions

from hgext3rd import _hgcompat, sharepool

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

_PROVIDED = ('cmdtable', 'configtable', 'extsetup')


def __getattr__(name):
    """sharepool's tables and setup, unless sharepool is enabled too: then
    Mercurial loads them from sharepool, once."""
    if name in _PROVIDED:
        try:
            extensions.find(b'sharepool')
        except KeyError:
            return getattr(sharepool, name)
    raise AttributeError(name)
