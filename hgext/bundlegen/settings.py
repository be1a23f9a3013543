# settings.py - bundlegen's configuration, read and checked
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""The ``[bundlegen]`` and ``[bundlegen-destinations]`` configuration of a
run, read once and checked before anything is built: a bad value stops the
run with one abort naming the setting.  Also where the core's refusals
become Mercurial's aborts, for every module of the extension."""

import os

from mercurial import (
    error,
    pycompat,
    util,
)
from mercurial.i18n import _
from mercurial.utils import stringutil

from vcsperf.core import bundlestore, errors

from .formats import FORMATS


class Settings:
    """The checked ``[bundlegen]`` and ``[bundlegen-destinations]``
    configuration."""

    def __init__(self, ui, output, base_url):
        self.output = output or ui.config(b'bundlegen', b'output')
        base_url = base_url or ui.config(b'bundlegen', b'base-url')
        self.destinations = _destinations(ui)
        if not self.output or not (base_url or self.destinations):
            raise error.Abort(
                _(b'bundlegen needs an output directory, and a base URL or '
                  b'a destination'),
                hint=_(b'set bundlegen.output and bundlegen.base-url (or '
                       b'bundlegen.destinations), or pass --output and '
                       b'--base-url'))
        self.base_url = base_url and check_base_url(base_url)
        self.formats = ui.configlist(b'bundlegen', b'formats')
        unknown = [f for f in self.formats if f not in FORMATS]
        if unknown or not self.formats:
            raise error.Abort(
                _(b'unknown bundle format in bundlegen.formats: %s')
                % b', '.join(unknown or [b'(none listed)']),
                hint=_(b'known formats: %s') % b', '.join(sorted(FORMATS)))
        if len(set(self.formats)) != len(self.formats):
            raise error.Abort(_(b'bundlegen.formats lists a format twice'),
                              hint=_(b'list each format once'))
        self.zstd_level = _config_int(ui, b'zstd-level', 1, 22)
        # zstd runs at most 200 worker threads
        self.zstd_threads = _config_int(ui, b'zstd-threads', 0, 200)
        self.jobs = _config_int(ui, b'jobs', 1, 4096)
        self.expire_days = _config_int(ui, b'expire-days', 0, 36500)
        self.keep = _config_int(ui, b'keep', 1, 1000)
        self.upload_timeout = _config_int(ui, b'upload-timeout', 1,
                                          7 * 86400)
        self.min_changesets = _config_int(ui, b'min-changesets', 0, 1 << 40)
        self.min_bytes = _config_int(ui, b'min-bytes', 0, 1 << 60)
        self.upload_command = ui.config(b'bundlegen', b'upload-command')
        self.delete_command = ui.config(b'bundlegen', b'delete-command')

    def url(self, name):
        return b'%s/%s' % (self.base_url, name)

    def layout(self):
        """What a generation's bundles depend on beside the tip: a run
        with another layout publishes a new generation."""
        return {'formats': [f.decode() for f in self.formats],
                'base-url': (self.base_url or b'').decode(),
                'destinations': [d.name for d in self.destinations]}


def _destinations(ui):
    """The destinations of ``bundlegen.destinations`` (by default every
    one of ``[bundlegen-destinations]``, in its order)."""
    table = {}
    for key, value in ui.configitems(b'bundlegen-destinations'):
        name, dot, setting = pycompat.sysstr(key).rpartition('.')
        if not dot or not name:
            raise error.Abort(
                _(b'bundlegen-destinations.%s is not NAME.SETTING') % key,
                hint=_(b'for example usw2.url = s3://bucket/prefix'))
        table.setdefault(name, {})[setting] = pycompat.sysstr(value)
    order = [pycompat.sysstr(name)
             for name in ui.configlist(b'bundlegen', b'destinations')]
    try:
        return bundlestore.destinations(table, order or list(table))
    except errors.Abort as err:
        raise hg_abort(err, b'bundlegen: ')


def _config_int(ui, name, low, high):
    value = ui.config(b'bundlegen', name)
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise error.Abort(
            _(b'bundlegen.%s must be a whole number from %d to %d')
            % (name, low, high),
            hint=_(b'it is %s') % stringutil.escapestr(
                pycompat.bytestr(value)))
    return number


def check_base_url(url):
    """``url`` without trailing slashes, if clients can fetch
    ``<url>/<bundle name>`` from a manifest line naming it; else abort
    (the rule ``gitbridge bundlegen`` follows too)."""
    try:
        # latin-1 maps each byte to one character and back
        return bundlestore.check_base_url(url.decode('latin-1')).encode(
            'latin-1')
    except errors.Abort as err:
        raise hg_abort(err)


def refuse_core_autogeneration(ui):
    """Core's clone-bundles auto-generation writes the same manifest: two
    writers would replace each other's bundles."""
    if ui.configlist(b'clone-bundles', b'auto-generate.formats'):
        raise error.Abort(
            _(b'bundlegen and clone-bundles.auto-generate both write '
              b'.hg/clonebundles.manifest'),
            hint=_(b'use one of them: remove clone-bundles.auto-generate.'
                   b'formats from the configuration, or stop running hg '
                   b'bundlegen for this repository'))


def output_directory(repo, output):
    """``bundlegen.output`` (or ``--output``) expanded, made if missing;
    never in ``.hg`` (nor a share's source's)."""
    outdir = util.expandpath(output)
    try:
        bundlestore.check_output_outside(
            os.fsdecode(outdir),
            [os.fsdecode(repo.path), os.fsdecode(repo.sharedpath)],
            'Mercurial')
    except errors.Abort as err:
        raise hg_abort(err)
    try:
        util.makedirs(outdir)
    except OSError as err:
        raise error.Abort(
            _(b'cannot use %s as bundlegen.output: %s')
            % (outdir, stringutil.forcebytestr(err.strerror)),
            hint=_(b'give a directory, or a path where one can be made'))
    if not os.path.isdir(outdir):
        # makedirs takes an existing file for the directory it was asked
        # to make.
        raise error.Abort(
            _(b'cannot use %s as bundlegen.output: not a directory') % outdir,
            hint=_(b'give a directory, or a path where one can be made'))
    return outdir


def hg_abort(err, prefix=b''):
    """Mercurial's abort for the core's ``err``."""
    # os.fsencode: a path in the message is bytes decoded by os.fsdecode
    return error.Abort(prefix + os.fsencode(str(err)),
                       hint=err.hint and os.fsencode(err.hint))
