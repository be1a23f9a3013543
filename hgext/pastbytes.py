# pastbytes.py - load Python-2-era extensions on Python 3 Mercurial
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""load Python-2-era extensions by rewriting their string literals to bytes

Mercurial is bytes-first, and extensions written for Python 2 use plain
``'...'`` literals where Python 3 Mercurial wants ``b'...'``.  This
extension rewrites those literals when the extensions are imported, the
way Mercurial itself ran on Python 3 from 3.9 to 5.1, so that unported
extensions load and run unchanged::

  [extensions]
  pastbytes =
  # legacy extensions come after pastbytes
  bookcommit = /srv/hg/legacy/bookcommit.py
  oldext =

  [pastbytes]
  # extensions (and modules) under these directories are rewritten
  paths = /srv/hg/legacy
  # and these packages wherever they are installed
  packages = oldext

``pastbytes`` must be listed before the extensions it rewrites: an
extension loaded before it is not rewritten (a warning says so).

The rewrite turns unprefixed, not triple-quoted literals into bytes, and
keeps ``str`` where Python 3 needs it: attribute names given to
``getattr`` and friends, ``.encode()``/``.decode()`` arguments, docstrings,
and the keys of the ``**opts`` dicts of commands (``opts.get('rev')``),
which Mercurial hands over with ``str`` keys.  ``pastbytes.kwargs`` names
those dicts (default ``opts``).  ``# pastbytes: off`` and ``# pastbytes:
on`` lines exempt a region.  Bytecode is cached beside the sources in its
own ``.opt-pastbytesN.pyc`` files.

For APIs that Mercurial renamed since, the extension adds aliases while
it is configured:

- ``repo._bookmarkcurrent``, the active bookmark (``repo._activebookmark``
  since Mercurial 3.5);
- ``cmdutil.command``, the command table decorator
  (``registrar.command`` since Mercurial 4.3).

To leave the hook behind, ``contrib/pastbytes_rewrite.py`` writes the
rewritten sources to disk once; they behave exactly as what this
extension compiles.
"""

import os

from mercurial import (
    cmdutil,
    extensions,
    localrepo,
    registrar,
    util,
)
from mercurial.i18n import _
from mercurial.utils import stringutil

import pastbytes
from hgext3rd import _hgcompat

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

configtable = {}
configitem = registrar.configitem(configtable)
configitem(b'pastbytes', b'paths', default=list)
configitem(b'pastbytes', b'packages', default=list)
#: Mercurial hands commands their ``**opts`` with str keys.
DEFAULT_KWARGS = [b'opts']
configitem(b'pastbytes', b'kwargs', default=lambda: list(DEFAULT_KWARGS))

#: The finder installed from the configuration, and that configuration.
_installed = {'finder': None, 'config': None}


def _configure(ui):
    """Install (or replace) the finder that the configuration asks for."""
    # Read the section directly: extensions load before Mercurial
    # registers their config items, and reading an unregistered item
    # is a developer warning.
    section = dict(ui.configitems(b'pastbytes'))

    def strings(name, default=()):
        value = section.get(name)
        items = default if value is None else stringutil.parselist(value)
        return tuple(os.fsdecode(item) for item in items)

    paths = tuple(
        os.path.expanduser(os.path.expandvars(p)) for p in strings(b'paths')
    )
    packages = strings(b'packages')
    kwargs = strings(b'kwargs', DEFAULT_KWARGS)
    config = (paths, packages, kwargs)
    if config == _installed['config']:
        return _installed['finder']
    if _installed['finder'] is not None:
        pastbytes.uninstall(_installed['finder'])
    finder = None
    if paths or packages:
        rules = pastbytes.Rules(kwargs_names=kwargs)
        finder = pastbytes.install(packages, paths, rules)
        _addshims()
    _installed.update(finder=finder, config=config)
    return finder


def _load(orig, ui, name, path, *args, **kwargs):
    # Extensions load others too, with a stand-in ui that has no
    # configuration (mq loads strip so): the finder stays as it is.
    if hasattr(ui, 'configitems'):
        _configure(ui)
    return orig(ui, name, path, *args, **kwargs)


def _importext(orig, name, path=None, *args, **kwargs):
    """Extensions given by path are loaded by Mercurial with a plain
    source loader, past any finder: load those under the configured
    directories with the rewriting loader instead."""
    finder = _installed['finder']
    if path and finder is not None:
        filename = os.fsdecode(util.normpath(util.expandpath(path)))
        if os.path.isdir(filename):
            filename = os.path.join(filename, '__init__.py')
        if finder.covers(filename):
            module_name = 'hgext_%s' % os.fsdecode(name)
            return pastbytes.load_path(filename, module_name, finder.rules)
    return orig(name, path, *args, **kwargs)


# Other extensions are imported before any uisetup runs, so the loader
# must be in place when this module is imported.
extensions.wrapfunction(extensions, 'load', _load)
extensions.wrapfunction(extensions, '_importext', _importext)


def _addshims():
    if not hasattr(localrepo.localrepository, '_bookmarkcurrent'):
        localrepo.localrepository._bookmarkcurrent = property(
            lambda repo: repo._activebookmark
        )
    if not hasattr(cmdutil, 'command'):
        cmdutil.command = registrar.command


def uisetup(ui):
    _hgcompat.report_our_crashes()
    finder = _configure(ui)
    if finder is None:
        return
    for name, module in extensions.extensions(ui):
        filename = getattr(module, '__file__', None) or ''
        loader = getattr(module, '__loader__', None)
        loader = getattr(loader, 'loader', loader)  # demandimport's lazy one
        rewritten = isinstance(loader, pastbytes.PastBytesLoader)
        wanted = finder.wants_name(module.__name__) or finder.covers(filename)
        if wanted and not rewritten:
            ui.warn(
                _(
                    b'pastbytes: extension %s was loaded before pastbytes '
                    b'and is not rewritten (list pastbytes first in '
                    b'[extensions])\n'
                )
                % name
            )
