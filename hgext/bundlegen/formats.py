# formats.py - the bundle formats bundlegen builds
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""The bundle formats ``bundlegen.formats`` may list, one record each: all
that the other modules and ``hg help bundlegen`` know of a format is here,
so a new format is one more record in ``FORMATS``."""


class Format:
    """One bundle format.

    ``name`` is what ``bundlegen.formats``, the bundle's file name
    (``<tip>.<name>.<sha256 prefix>.hg``) and bundles.json call it;
    ``spec`` the bundle spec ``hg debugbundle --spec`` must report (the
    whole spec, or its start up to a ``;``), which the manifest publishes;
    ``parameters`` spec parameters given only to ``hg bundle -t``;
    ``config(settings)`` the ``--config`` items its ``hg bundle`` needs
    from the checked settings; ``stream`` whether it copies the store (so
    every changeset, secret ones too); ``help`` its paragraph of ``hg help
    bundlegen``."""

    def __init__(self, name, spec, help, parameters=b'', config=None,
                 stream=False):
        self.name = name
        self.spec = spec
        self.help = help
        self.parameters = parameters
        self.config = config or (lambda settings: [])
        self.stream = stream

    def bundle_args(self, settings):
        """Arguments to ``hg bundle`` for this format."""
        args = [b'-t', self.spec + self.parameters]
        for item in self.config(settings):
            args += [b'--config', item]
        return args

    def spec_matches(self, spec):
        """Whether ``spec`` (as ``hg debugbundle --spec`` says it) is this
        format's."""
        return spec == self.spec or spec.startswith(self.spec + b';')


def _zstd_max_config(settings):
    return [b'experimental.bundlecomplevel.zstd=%d' % settings.zstd_level,
            b'experimental.bundlecompthreads.zstd=%d' % settings.zstd_threads]


# In the order ``hg help bundlegen`` lists them.
FORMATS = {fmt.name: fmt for fmt in [
    Format(b'zstd-max', b'zstd-v2', config=_zstd_max_config, help="""\
``zstd-v2`` at ``bundlegen.zstd-level`` (default 19) with
``bundlegen.zstd-threads`` threads and long-distance matching (from the
``wirezstd`` extension, which bundlegen loads to build it).  The window
stays at 2^27 bytes, so every Mercurial with zstd applies it."""),
    Format(b'zstd', b'zstd-v2', help="""\
``zstd-v2`` at core's default level."""),
    Format(b'gzip', b'gzip-v2', help="""\
``gzip-v2``, for clients without zstd."""),
    # Without obsolescence=yes ``hg bundle`` refuses a repository with
    # markers; with it the bundle carries them, as a stream clone does.
    # Not mandatory: a client without evolution (Mercurial 6.9 aborts on a
    # mandatory part) clones and leaves the markers out.
    Format(b'stream', b'none-v2;stream=v2',
           parameters=b';obsolescence=yes;obsolescence-mandatory=no',
           stream=True, help="""\
``none-v2;stream=v2``: raw store files, the fastest to apply; clients
use it when they clone with ``--stream`` and support the repository's
format.  Built with ``obsolescence=yes``, so a repository with
obsolescence markers (a non-publishing server) is bundled with them;
the markers are not mandatory (``obsolescence-mandatory=no``), so a
client without evolution clones and leaves them out.  Not built while
the repository has secret changesets (a run warns), as core refuses a
stream clone then, unless ``server.uncompressedallowsecret`` is set."""),
]}


def help_text():
    """The formats' part of ``hg help bundlegen``: each format's name, then
    its paragraph indented."""
    return ''.join('``%s``\n%s' % (
        fmt.name.decode(),
        ''.join('  %s\n' % line for line in fmt.help.splitlines()))
        for fmt in FORMATS.values())
