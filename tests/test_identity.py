"""The suite's identity as users and tools see it: one release, shown by
both console scripts, both ``python -m`` entry points and ``hg version -v``
for every extension; every extension names where its crashes go; and a
wheel the checkout builds installs into a fresh virtualenv and says the
same there."""

import glob
import os
import re
import subprocess
import sys
import sysconfig
import venv

import pytest

import vcsperf
from vcsperf.core import __version__
from vcsperf.harness import tools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def our_extensions():
    """The name of every extension in hgext/ (modules and packages; those
    whose name starts with ``_`` are modules they import, not
    extensions)."""
    names = [os.path.splitext(os.path.basename(path))[0]
             for path in glob.glob(os.path.join(ROOT, "hgext", "*.py"))]
    names += [os.path.basename(os.path.dirname(path)) for path in
              glob.glob(os.path.join(ROOT, "hgext", "*", "__init__.py"))]
    return sorted(name for name in names if not name.startswith("_"))


def enabled_extensions(output):
    """``{name: version}`` from the "Enabled extensions" table of ``hg
    version -v`` (the version empty when the extension gives none)."""
    table = output.split("Enabled extensions:", 1)[1]
    found = {}
    for line in table.strip().splitlines():
        fields = line.split()
        found[fields[0]] = fields[2] if len(fields) > 2 else ""
    return found


def version_outputs(python, bindir, env, cwd):
    """What each of the four ways to ask prints, stdout and stderr."""
    asks = {"vcsperf --version": [os.path.join(bindir, "vcsperf"),
                                  "--version"],
            "gitbridge --version": [os.path.join(bindir, "gitbridge"),
                                    "--version"],
            "python -m vcsperf --version": [python, "-m", "vcsperf",
                                            "--version"],
            "python -m gitbridge --version": [python, "-m", "gitbridge",
                                              "--version"]}
    return {ask: tools.run(command, env, cwd=cwd)
            for ask, command in asks.items()}


def test_one_version_for_the_whole_suite():
    """The package's ``__version__`` is the core's, a release number."""
    assert vcsperf.__version__ == __version__
    assert __version__ == "0.3.0"


def test_every_cli_prints_the_version(env, tmp_path):
    """``vcsperf --version``, ``gitbridge --version`` and both ``python -m``
    forms print the program's name and ``vcsperf.__version__``."""
    bindir = os.path.dirname(tools.executable("vcsperf"))
    outputs = version_outputs(sys.executable, bindir, env, str(tmp_path))
    assert outputs == {
        "vcsperf --version": "vcsperf %s\n" % __version__,
        "gitbridge --version": "gitbridge %s\n" % __version__,
        "python -m vcsperf --version": "vcsperf %s\n" % __version__,
        "python -m gitbridge --version": "gitbridge %s\n" % __version__}


def test_hg_version_lists_each_extension_with_the_version(hg, hgrc,
                                                          tmp_path):
    """With every extension of ours enabled, ``hg version -v`` names each
    beside the suite's release."""
    names = our_extensions()
    assert {"bundlegen", "commitid", "pastbytes", "robustcheckout",
            "sharepool", "wirezstd", "zstdstore"} <= set(names)
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\n" + "".join("%s =\n" % n for n in names))
    listed = enabled_extensions(hg("version", "-v", cwd=tmp_path))
    assert {name: listed.get(name) for name in names} == \
        {name: __version__ for name in names}


def test_every_extension_names_our_tracker():
    """Every extension gives Mercurial a ``buglink`` (where its crash
    message sends the user) and a ``__version__``, the suite's."""
    import importlib
    for name in our_extensions():
        module = importlib.import_module("hgext3rd." + name)
        assert module.__version__ == __version__.encode("ascii"), name
        assert b"vcsperf" in module.buglink, name


def dependencies_without_us(site, target):
    """``target``: every entry of the site-packages folder ``site`` linked
    there but for this suite's (its packages, its metadata, its modules in
    ``hgext3rd``, whose ``__init__`` is Mercurial's), for a fresh
    virtualenv to find the dependencies offline and only the wheel's copy
    of the suite."""
    os.mkdir(target)
    ours = {"vcsperf", "gitbridge", "zstdwire", "pastbytes", "hgext3rd"}
    for entry in os.listdir(site):
        if entry in ours or entry.startswith(("vcsperf-", "vcsperf.",
                                              "__editable__")):
            continue
        os.symlink(os.path.join(site, entry), os.path.join(target, entry))
    os.mkdir(os.path.join(target, "hgext3rd"))
    os.symlink(os.path.join(site, "hgext3rd", "__init__.py"),
               os.path.join(target, "hgext3rd", "__init__.py"))


@pytest.mark.slow
def test_the_wheel_installs_and_says_its_version(tmp_path, env):
    """The README's wheel route: ``python -m pip wheel --no-deps -w dist
    .`` from the checkout, that wheel into a fresh virtualenv (its
    dependencies, not the suite, linked from the running one: no index),
    then every way to ask for the version there, ``hg version -v``
    with each extension enabled among them."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(dist), ROOT], check=True, cwd=str(tmp_path))
    wheels = os.listdir(str(dist))
    assert wheels == ["vcsperf-%s-py3-none-any.whl" % __version__]
    fresh = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(str(fresh))
    python = str(fresh / "bin" / "python")
    site = tools.run([python, "-c", "import sysconfig; "
                      "print(sysconfig.get_paths()['purelib'])"],
                     env).strip()
    # Where the running virtualenv has its dependencies (this test may
    # import vcsperf from the checkout itself).
    running_site = sysconfig.get_paths()["purelib"]
    deps = str(tmp_path / "deps")
    dependencies_without_us(running_site, deps)
    with open(os.path.join(site, "dependencies.pth"), "w") as fh:
        fh.write(deps + "\n")
    tools.run([python, "-m", "pip", "install", "-q", "--no-deps",
               "--no-index", str(dist / wheels[0])], env, cwd=str(tmp_path))
    for module in ("vcsperf", "gitbridge", "zstdwire", "pastbytes",
                   "hgext3rd.commitid"):
        where = tools.run([python, "-c", "import %s; print(%s.__file__)"
                           % (module, module)], env, cwd=str(tmp_path))
        assert where.startswith(site), (module, where)
    bindir = str(fresh / "bin")
    outputs = version_outputs(python, bindir, env, str(tmp_path))
    assert set(outputs.values()) == {"vcsperf %s\n" % __version__,
                                     "gitbridge %s\n" % __version__}
    names = our_extensions()
    config = ["--config=extensions.%s=" % name for name in names]
    # The running virtualenv's hg script, run by the fresh Python.
    listed = enabled_extensions(tools.run(
        [python, tools.executable("hg"), "version", "-v", *config], env,
        cwd=str(tmp_path)))
    assert {name: listed.get(name) for name in names} == \
        {name: __version__ for name in names}


def tracked_text_files():
    """``(path, text)`` of every file git tracks in the checkout that
    reads as UTF-8 text."""
    names = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"],
                           check=True, capture_output=True,
                           text=True).stdout.split("\0")
    for name in filter(None, names):
        try:
            with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
                yield name, fh.read()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue


def test_no_install_line_assumes_pypi():
    """vcsperf is not on PyPI: no README line, hint or example tells
    users to ``pip install vcsperf`` or ``'vcsperf[s3]'``."""
    # ``pip install [OPTIONS] vcsperf``, quoted or not, extras or not.
    pypi = re.compile(r"pip install\s+(?:-\S+\s+(?:\S+\s+)?)*['\"]?vcsperf\b")
    found = ["%s: %s" % (name, match.group(0))
             for name, text in tracked_text_files()
             if name != "tests/test_identity.py"
             for match in pypi.finditer(text)]
    assert found == []


def test_pre_commit_examples_pin_the_release_tag():
    """The README's ``.pre-commit-config.yaml`` parses and pins ``rev:``
    to this release's tag, as the comment in ``.pre-commit-hooks.yaml``
    does; the hook id is the one that file declares."""
    import yaml
    with open(os.path.join(ROOT, "README.md")) as fh:
        blocks = re.findall(r"^```yaml\n(.*?)^```", fh.read(), re.M | re.S)
    configs = [yaml.safe_load(block) for block in blocks
               if "pre-commit" in block or "rev:" in block]
    assert len(configs) == 1
    (repo,) = configs[0]["repos"]
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml")) as fh:
        hooks_file = fh.read()
    declared = [hook["id"] for hook in yaml.safe_load(hooks_file)]
    assert repo["rev"] == "v" + __version__
    assert [hook["id"] for hook in repo["hooks"]] == declared == ["commitid"]
    assert "#     rev: v%s\n" % __version__ in hooks_file


def test_changelog_has_this_release():
    """CHANGELOG.md has a section for this release, first after what is
    not released yet, and one for each release back to 0.1.0."""
    with open(os.path.join(ROOT, "CHANGELOG.md")) as fh:
        headings = re.findall(r"^## (\S+)", fh.read(), re.M)
    released = [heading for heading in headings if heading != "Unreleased"]
    assert released[0] == __version__
    assert released[-1] == "0.1.0"


CRASHING_EXTENSION = '''
"""commands that crash, in vcsperf's code and in this module's"""
from mercurial import registrar, util
from vcsperf.core import commitid

cmdtable = {}
command = registrar.command(cmdtable)
# Tested with the running release: Mercurial blames no extension for it.
testedwith = b'%d.%d' % util.versiontuple(n=2)


@command(b'crash-in-vcsperf', norepo=True)
def crash_in_vcsperf(ui):
    commitid.find_ids(None)


@command(b'crash-here', norepo=True)
def crash_here(ui):
    raise RuntimeError('not vcsperf')
'''


@pytest.mark.parametrize("name", our_extensions())
def test_a_crash_in_our_code_names_our_tracker(name, hg, hgrc, tmp_path):
    """With any one of our extensions enabled, a crash whose traceback
    runs through vcsperf's code sends the user to our tracker, naming the
    module and the release; a crash elsewhere still goes to Mercurial's
    tracker, and a packager's ``ui.supportcontact`` wins over ours."""
    crashing = tmp_path / "crashing.py"
    crashing.write_text(CRASHING_EXTENSION)
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\n%s =\ncrashing = %s\n" % (name, crashing))
    ours = hg.proc("crash-in-vcsperf", cwd=tmp_path)
    assert ours.returncode == 1 and "TypeError" in ours.stderr
    assert ("** unknown exception encountered, please report by visiting\n"
            "** the issue tracker of the vcsperf repository you installed "
            "from\n** (the error is in vcsperf.core.commitid, vcsperf "
            "%s)\n" % __version__) in ours.stderr
    elsewhere = hg.proc("crash-here", cwd=tmp_path)
    assert "RuntimeError: not vcsperf" in elsewhere.stderr
    assert "vcsperf repository" not in elsewhere.stderr
    assert "please report by visiting\n** https://" in elsewhere.stderr
    packaged = hg.proc("crash-in-vcsperf", "--config",
                       "ui.supportcontact=packager@example.org", cwd=tmp_path)
    assert "please report by visiting\n** packager@example.org\n" in \
        packaged.stderr
