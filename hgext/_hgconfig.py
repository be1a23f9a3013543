# _hgconfig.py - settings read once, checked, or refused with one abort
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
#
# Not an extension: a module the extensions import (no docstring, so no
# help text; no registrar table, no setup function).
#
# Core's ui.configint and ui.configbytes accept any integer, negative ones
# too, and report a word that is not a number as a "config error" line
# without saying what would do.  A setting read here is refused with one
# ``abort:`` line that names it and its allowed values, and a hint that
# quotes what was given and where (file and line), so a server refuses to
# start instead of failing every request.

import re

from mercurial import error, pycompat, util
from mercurial.i18n import _
from mercurial.utils import stringutil

from vcsperf.core import settings

_WHOLE_NUMBER = re.compile(br'[+-]?[0-9]+')


def _refuse(ui, section, name, allowed):
    value = ui.config(section, name)
    source = ui.configsource(section, name)
    return error.Abort(
        _(b'%s.%s must be %s') % (section, name, allowed),
        hint=_(b"it is '%s'%s") % (
            stringutil.escapestr(pycompat.bytestr(value)),
            _(b', set at %s') % source if source else b''))


def config_int(ui, section, name, low, high):
    """The whole number ``section.name``, from ``low`` to ``high``."""
    value = ui.config(section, name)
    if isinstance(value, int):
        number = value
    elif _WHOLE_NUMBER.fullmatch(value.strip()):
        number = int(value)
    else:
        # int() takes "1_000" too, and not all of "_1"
        number = None
    if number is None or not low <= number <= high:
        raise _refuse(ui, section, name,
                      _(b'a whole number from %d to %d') % (low, high))
    return number


def config_bytes(ui, section, name, low, high):
    """The size ``section.name`` in bytes (``256k``, ``16m``, ``1g`` or
    a number of bytes), from ``low`` to ``high``."""
    value = ui.config(section, name)
    if isinstance(value, int):
        number = value
    else:
        try:
            number = util.sizetoint(value)
        except error.ParseError:
            number = None
    if number is None or not low <= number <= high:
        raise _refuse(ui, section, name,
                      _(b'a size from %s to %s (bytes, or with a k, m or g '
                        b'suffix)')
                      % (_size(low), _size(high)))
    return number


def _size(number):
    for unit, factor in ((b'g', 1 << 30), (b'm', 1 << 20), (b'k', 1 << 10)):
        if number and number % factor == 0:
            return b'%d%s' % (number // factor, unit)
    return b'%d' % number


def config_bool(ui, section, name):
    """The boolean ``section.name``, in Mercurial's words (the Git side
    reads its booleans in the same words: ``vcsperf.core.settings``)."""
    value = ui.config(section, name)
    if isinstance(value, bool):
        return value
    parsed = stringutil.parsebool(value.strip())
    if parsed is None:
        raise _refuse(ui, section, name,
                      b'a boolean (%s)'
                      % pycompat.bytestr(settings.ACCEPTED_BOOLEANS))
    return parsed
