"""The pastbytes Mercurial extension: a published Python-2-era extension,
bookcommit 1.0 (2012; prepends the active bookmark to commit messages),
downloaded from the package registry, runs on this Python 3 Mercurial."""

import os
import subprocess
import textwrap

import pytest

from vcsperf.bench import pastbytes as pastbytesbench


@pytest.fixture(scope="module")
def bookcommit():
    """The directory of bookcommit 1.0's sources (not installed)."""
    return pastbytesbench.fetch_sdist("bookcommit")


@pytest.fixture
def legacy_dir(bookcommit, tmp_path):
    """A copy of the legacy extension, so its bytecode lands in the test's
    own directory."""
    path = tmp_path / "legacy"
    path.mkdir()
    with open(os.path.join(bookcommit, "bookcommit.py"), "rb") as fh:
        (path / "bookcommit.py").write_bytes(fh.read())
    return path


def commit_on_bookmark(hg, hgrepo, message="fix the frobnicator"):
    (hgrepo / "a").write_text("a\n")
    hg("add", "a", cwd=hgrepo)
    hg("bookmark", "B123", cwd=hgrepo)
    return hg.proc("commit", "-m", message, cwd=hgrepo)


def test_legacy_extension_runs_through_pastbytes(hg, hgrc, hgrepo,
                                                 legacy_dir):
    hg.env = {k: v for k, v in hg.env.items()
              if k != "PYTHONDONTWRITEBYTECODE"}
    # The admin lists pastbytes first, then the legacy extension, and
    # points pastbytes at the legacy extension's directory.
    with open(hgrc, "a") as fh:
        fh.write(textwrap.dedent("""\
            [extensions]
            pastbytes =
            bookcommit = %s/bookcommit.py
            [pastbytes]
            paths = %s
            [devel]
            all-warnings = true
            """ % (legacy_dir, legacy_dir)))
    proc = commit_on_bookmark(hg, hgrepo)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert hg("log", "-T", "{desc}", cwd=hgrepo) == "B123 fix the frobnicator"
    cached = os.listdir(legacy_dir / "__pycache__")
    assert any(".opt-pastbytes" in name for name in cached), cached
    assert "pastbytes" in hg("help", "pastbytes")


def test_legacy_extension_fails_without_pastbytes(hg, hgrc, hgrepo,
                                                  legacy_dir):
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\nbookcommit = %s/bookcommit.py\n" % legacy_dir)
    proc = commit_on_bookmark(hg, hgrepo)
    assert "failed to set up extension bookcommit" in proc.stderr
    assert hg("log", "-T", "{desc}", cwd=hgrepo) == "fix the frobnicator"


def test_legacy_extension_by_package_name(hg, env, hgrc, hgrepo, legacy_dir):
    hg.env = dict(env, PYTHONPATH=str(legacy_dir))
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\npastbytes =\nbookcommit =\n"
                 "[pastbytes]\npackages = bookcommit\n")
    proc = commit_on_bookmark(hg, hgrepo, "by name")
    assert proc.returncode == 0, proc.stderr
    assert hg("log", "-T", "{desc}", cwd=hgrepo) == "B123 by name"


def test_pastbytes_listed_too_late_says_so(hg, hgrc, hgrepo, legacy_dir):
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\nbookcommit = %s/bookcommit.py\npastbytes =\n"
                 "[pastbytes]\npaths = %s\n" % (legacy_dir, legacy_dir))
    proc = hg.proc("log", cwd=hgrepo)
    assert "pastbytes: extension bookcommit was loaded before pastbytes" \
        in proc.stderr


def test_old_command_table_api(hg, hgrc, hgrepo, tmp_path):
    # cmdutil.command (Mercurial 1.9 to 4.2) with Python 2 literals and
    # str-keyed **opts.
    legacy = tmp_path / "oldcmd"
    legacy.mkdir()
    (legacy / "hello.py").write_text(textwrap.dedent('''\
        """say hello (a Mercurial 3.x-era extension)"""
        from mercurial import cmdutil

        cmdtable = {}
        command = cmdutil.command(cmdtable)

        @command('hello', [('n', 'name', 'world', 'whom to greet')],
                 'hg hello [-n NAME]')
        def hello(ui, repo, **opts):
            """greet someone"""
            ui.write('hello, %s\\n' % opts['name'])
        '''))
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\npastbytes =\nhello = %s/hello.py\n"
                 "[pastbytes]\npaths = %s\n" % (legacy, legacy))
    assert hg("hello", "-n", "Mercurial", cwd=hgrepo) == "hello, Mercurial\n"
    assert "greet someone" in hg("help", "hello", cwd=hgrepo)


def test_core_extensions_listed_after_pastbytes_load(hg, hgrc, hgrepo):
    # mq loads strip itself, through extensions.load with a stand-in ui
    # that has no configuration; found by Mercurial's test-shelve.t.
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\npastbytes =\nmq =\n")
    (hgrepo / "a").write_text("a\n")
    hg("commit", "-A", "-m", "first", cwd=hgrepo)
    proc = hg.proc("qnew", "-m", "second", "second.patch", cwd=hgrepo)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert hg("log", "-r", ".", "-T", "{desc}", cwd=hgrepo) == "second"
    hg("qfinish", "-a", cwd=hgrepo)
    hg("strip", "-q", "-r", ".", cwd=hgrepo)
    assert hg("log", "-T", "{desc}\n", cwd=hgrepo) == "first\n"


def test_crlf_extension_loads(hg, hgrc, hgrepo, tmp_path):
    """An extension with CRLF line endings, where a literal is followed by
    comment and blank lines, loads at once with the whole suite enabled
    (it once made every hg command hang: 26 such lines took over a
    minute)."""
    from test_all_extensions import SUITE
    legacy = tmp_path / "crlfext"
    legacy.mkdir()
    source = ("from mercurial import registrar\n"
              "cmdtable = {}\n"
              "command = registrar.command(cmdtable)\n"
              "GREETING = 'hello from CRLF'\n"
              + "# a comment\n\n" * 40 +
              "@command('crlfhello', [], 'hg crlfhello')\n"
              "def crlfhello(ui, repo):\n"
              "    ui.write(GREETING + '\\n')\n")
    (legacy / "crlfhello.py").write_bytes(source.replace("\n", "\r\n")
                                          .encode())
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\n%scrlfhello = %s/crlfhello.py\n"
                 "[pastbytes]\npaths = %s\n" % (
                     "".join("%s =\n" % name for name in SUITE), legacy,
                     legacy))
    proc = subprocess.run([hg.binary, "crlfhello"], env=hg.env, cwd=hgrepo,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == \
        (0, "hello from CRLF\n", "")
