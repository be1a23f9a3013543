"""Every configuration example the documentation gives parses, with the
real parser, into the values it shows.

Examples are found, not listed: hgrc blocks (fenced ``ini``/``hgrc``
blocks in every Markdown file, literal blocks with a ``[section]`` line in
the real ``hg help -e NAME`` of every extension in hgext/ and in module
docstrings, and hgrc files under contrib/), ``hg --config S.K=V`` on
shell lines, git config blocks (fenced ``gitconfig`` blocks, and the
literal blocks of gitbridge's docstrings and ``gitbridge SUB -h``) and
``git config`` command lines (in shell blocks and inline code).

An hgrc example is written as an hgrc read after one that enables every
extension of ours, and ``hg config -T json`` must read back every value it
sets exactly as written: Mercurial has no inline comments, so a ``# ...``
after a value becomes part of it.  Then the extensions whose sections it
sets read them as they do for real: ``hg serve`` starts and a client with
wirezstd clones from it, ``hg zstd-train`` trains, ``hg bundlegen
--dry-run`` plans a run.  A git example goes through ``git config -f``
(and ``gitbridge bundlegen --dry-run`` for its bundlegen settings).
"""

import ast
import json
import os
import pathlib
import re
import shlex
import tempfile
import textwrap

import pytest

from vcsperf.harness import servers, tools

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Directories that hold no documentation of ours.
NOT_OURS = {".git", ".venv", "build", "dist", "node_modules",
            ".pytest_cache", ".hypothesis"}
HGRC_FENCES = {"ini", "hgrc", "cfg", "dosini"}
GIT_FENCES = {"gitconfig", "git-config"}
SHELL_FENCES = {"sh", "shell", "bash", "console", "shell-session", "text",
                ""}

SECTION = re.compile(r'^\s*\[([A-Za-z][\w.-]*)(?:\s+"((?:[^"\\]|\\.)*)")?\]'
                     r'\s*$')
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)[^\n]*\n"
                   r"(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
HG_CONFIG_OPTION = re.compile(
    r"--config[= ]([A-Za-z0-9_.-]+?)\.([A-Za-z0-9_-]+)=(\S+)")


class Example:
    """One documented example: ``kind`` is ``hgrc``, ``gitconfig`` or
    ``git-command``; ``where`` says where it was found (each place, for
    an example documented in several)."""

    def __init__(self, kind, where, text):
        self.kind = kind
        self.where = where
        self.wheres = [where]
        self.text = text

    def __repr__(self):
        return "%s example at %s" % (self.kind, self.where)


def _ours(path):
    return not NOT_OURS & set(path.relative_to(ROOT).parts)


def _line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def _literal_blocks(text):
    """The config blocks of help text or a docstring: maximal runs of
    lines indented at least as deep as a ``[section]`` line among them,
    up to a shell prompt (``$ hg ...``) in the same block.  Yields
    (first line number, dedented text)."""
    lines = text.splitlines()
    taken = -1
    for number, line in enumerate(lines):
        if number <= taken or not SECTION.match(line):
            continue
        depth = len(line) - len(line.lstrip())
        if depth == 0 and not line.startswith("["):
            continue

        def inside(candidate):
            return (candidate.strip() and
                    len(candidate) - len(candidate.lstrip()) >= depth)

        start = number
        while start > 0 and inside(lines[start - 1]):
            start -= 1
        end = number + 1
        while end < len(lines) and (inside(lines[end])
                                    or not lines[end].strip()):
            end += 1
        block = lines[start:end]
        for index, candidate in enumerate(block):
            if candidate.strip().startswith("$ "):
                block = block[:index]
                break
        taken = end - 1
        yield start + 1, textwrap.dedent("\n".join(block)).strip("\n") + "\n"


def _git_commands(text):
    """``git config ...`` command lines in ``text`` (one a line, or an
    inline code span that may wrap), as argument lists after
    ``git config``; comments and prompts removed."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        for part in re.split(r"&&|;|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            if words[:2] == ["git", "config"] and len(words) > 2:
                yield words[2:]


def markdown_examples():
    for path in sorted(ROOT.rglob("*.md")):
        if not _ours(path):
            continue
        where = str(path.relative_to(ROOT))
        text = path.read_text()
        for match in FENCE.finditer(text):
            lang = match.group("lang").lower()
            line = "%s:%d" % (where, _line_of(text, match.start()))
            body = match.group("body")
            if lang in HGRC_FENCES:
                headers = [SECTION.match(l) for l in body.splitlines()]
                kind = ("gitconfig" if any(h and h.group(2) is not None
                                           for h in headers) else "hgrc")
                yield Example(kind, line, body)
            elif lang in GIT_FENCES:
                yield Example("gitconfig", line, body)
            elif lang in SHELL_FENCES:
                for args in _git_commands(body):
                    yield Example("git-command", line, args)
                for section, key, value in HG_CONFIG_OPTION.findall(body):
                    yield Example("hgrc", line + " (--config)",
                                  "[%s]\n%s = %s\n" % (section, key, value))
        prose = FENCE.sub("", text)
        for match in INLINE_CODE.finditer(prose):
            for args in _git_commands(" ".join(match.group(1).split())):
                yield Example("git-command", "%s (inline)" % where, args)


def hgrc_file_examples():
    for path in sorted((ROOT / "contrib").rglob("*")):
        name = path.name
        if path.is_file() and _ours(path) and (
                name.startswith("hgrc") or name.endswith((".hgrc", ".rc"))):
            yield Example("hgrc", str(path.relative_to(ROOT)),
                          path.read_text())


def extension_names():
    """Every extension in hgext/: modules and packages without a leading
    underscore."""
    names = []
    for path in sorted((ROOT / "hgext").iterdir()):
        if path.name.startswith("_"):
            continue
        if path.suffix == ".py" or (path / "__init__.py").exists():
            names.append(path.stem)
    return names


def help_examples():
    with tempfile.TemporaryDirectory() as home:
        env = tools.isolated_env(home)
        for name in extension_names():
            text = tools.run([tools.executable("hg"), "help", "-e", name,
                              "--config", "extensions.%s=" % name], env)
            for line, block in _literal_blocks(text):
                yield Example("hgrc", "hg help -e %s, line %d" % (name, line),
                              block)
        gitbridge = tools.executable("gitbridge")
        usage = tools.run([gitbridge, "-h"], env)
        subcommands = re.search(r"\{([\w,-]+)\}", usage).group(1).split(",")
        for sub in subcommands:
            text = tools.run([gitbridge, sub, "-h"], env)
            for line, block in _literal_blocks(text):
                yield Example("gitconfig", "gitbridge %s -h, line %d"
                              % (sub, line), block)


def docstring_examples():
    """Config blocks of the module docstrings of our Python code: those
    of gitbridge/ are git config, the others hgrc unless a section header
    has a subsection (``[name "sub"]``)."""
    for top in ("hgext", "gitbridge", "vcsperf", "zstdwire", "pastbytes",
                "contrib"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if not _ours(path):
                continue
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            for line, block in _literal_blocks(docstring):
                git = top == "gitbridge" or any(
                    m and m.group(2) is not None
                    for m in map(SECTION.match, block.splitlines()))
                yield Example("gitconfig" if git else "hgrc", "%s docstring,"
                              " line %d" % (path.relative_to(ROOT), line),
                              block)


def all_examples():
    examples = {}
    for example in [*markdown_examples(), *hgrc_file_examples(),
                    *help_examples(), *docstring_examples()]:
        key = (example.kind, repr(example.text))
        if key in examples:
            examples[key].wheres.append(example.where)
        else:
            examples[key] = example
    return list(examples.values())


EXAMPLES = all_examples()


def _of_kind(kind):
    return [pytest.param(e, id=e.where) for e in EXAMPLES if e.kind == kind]


def test_examples_are_found_in_every_kind_of_source():
    # An extractor that finds nothing would pass every test below.
    wheres = {kind: [w for e in EXAMPLES if e.kind == kind for w in e.wheres]
              for kind in ("hgrc", "gitconfig", "git-command")}
    assert all(wheres.values()), wheres
    hgrc = wheres["hgrc"]
    assert any(w.startswith("README.md:") for w in hgrc), hgrc
    assert any(w.startswith("contrib/") for w in hgrc), hgrc
    helped = {w.split(",")[0] for w in hgrc if w.startswith("hg help -e ")}
    for name in ("wirezstd", "bundlegen", "zstdstore", "pastbytes",
                 "sharepool", "commitid", "wirecache"):
        assert "hg help -e %s" % name in helped, helped


# hgrc ------------------------------------------------------------------


def documented_hgrc_values(text):
    """``{(section, name): value}`` as the example shows them: the last
    value of each name, continuation lines joined with newlines."""
    values, section, last = {}, None, None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;" or stripped.startswith("%"):
            last = None if not stripped else last
            continue
        header = SECTION.match(line)
        if header:
            section, last = header.group(1).strip(), None
        elif line[0].isspace() and last is not None:
            values[last] += "\n" + stripped
        elif "=" in line and section is not None:
            name, value = line.split("=", 1)
            last = (section, name.strip())
            values[last] = value.strip()
        else:
            raise AssertionError("not an hgrc line: %r" % line)
    return values


@pytest.fixture
def every_extension(tmp_path):
    path = tmp_path / "every-extension.rc"
    path.write_text("[extensions]\n" + "".join(
        "%s =\n" % name for name in extension_names()))
    return path


def example_env(tmp_path, every_extension, example):
    rc = tmp_path / "example.rc"
    rc.write_text(example.text)
    home = tmp_path / "home"
    home.mkdir()
    env = tools.isolated_env(str(home), os.pathsep.join(
        [str(every_extension), str(rc)]))
    return env, rc


def _unexpected_stderr(stderr, values):
    """Lines of ``stderr`` other than a failed import of an extension not
    ours that the example names as a placeholder: by a path that does not
    exist here (/srv/hg/legacy/ext.py) or as a module not installed."""
    ours = extension_names()
    other = []
    for line in stderr.splitlines():
        failed = re.match(r'\*\*\* failed to import extension "?([^"\s]+)"?'
                          r"(?: from (.*?))?: (.*)", line)
        if failed and failed.group(1) not in ours:
            name, path, reason = failed.groups()
            value = values.get(("extensions", name))
            if path and value == path and not os.path.exists(path):
                continue
            if not path and value == "" and \
                    reason == "No module named '%s'" % name:
                continue
        other.append(line)
    return other


@pytest.mark.parametrize("example", _of_kind("hgrc"))
def test_hgrc_example_reads_back_as_written(example, tmp_path,
                                            every_extension):
    values = documented_hgrc_values(example.text)
    assert values, "%r sets nothing" % example
    commented = {"%s.%s" % key: value for key, value in values.items()
                 if re.search(r"\s#", value)}
    assert not commented, (
        "%r: Mercurial has no inline comments; these values would hold "
        "the comment: %r" % (example, commented))
    env, rc = example_env(tmp_path, every_extension, example)
    repo = tmp_path / "repo"
    tools.run([tools.executable("hg"), "init", repo], env)
    hg = tools.completed([tools.executable("hg"), "config", "-T", "json"],
                         env, cwd=repo)
    assert hg.returncode == 0, (example, hg.stderr)
    assert _unexpected_stderr(hg.stderr, values) == [], example
    read = {item["name"]: item for item in json.loads(hg.stdout)}
    for (section, name), value in values.items():
        item = read.get("%s.%s" % (section, name))
        assert item is not None, (example, section, name)
        assert (item["value"], item["source"].rsplit(":", 1)[0]) == \
            (value, str(rc)), (example, section, name)


def _sections(example):
    values = documented_hgrc_values(example.text)
    return {section for section, _ in values} | {
        name for section, name in values if section == "extensions"}


def _run_ok(argv, env, cwd=None):
    proc = tools.completed([str(a) for a in argv], env, cwd=cwd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, \
        (argv, proc.stdout, proc.stderr)
    return proc


def _read_by_extensions(param):
    try:
        return bool({"wirezstd", "zstdstore", "bundlegen",
                     "bundlegen-destinations", "wirecache"}
                    & _sections(param.values[0]))
    except AssertionError:
        # Not an hgrc: the read-back test says so.
        return False


@pytest.mark.parametrize("example", [
    param for param in _of_kind("hgrc") if _read_by_extensions(param)])
def test_hgrc_example_is_accepted_where_its_extension_reads_it(
        example, tmp_path, every_extension):
    env, _rc = example_env(tmp_path, every_extension, example)
    hg = tools.executable("hg")
    repo = tmp_path / "repo"
    _run_ok([hg, "init", repo], env)
    _run_ok([hg, "debugbuilddag", "--mergeable-file", "--new-file", "+12"],
            env, cwd=repo)
    sections = _sections(example)
    if "zstdstore" in sections:
        _run_ok([hg, "zstd-train"], env, cwd=repo)
    if sections & {"bundlegen", "bundlegen-destinations"}:
        _run_ok([hg, "bundlegen", "--dry-run", "--output",
                 tmp_path / "bundles"], env, cwd=repo)
    if sections & {"wirezstd", "wirecache"}:
        # The server reads [wirezstd] and [wirecache] when it starts and
        # per response; a client with the extension takes the wirezstd
        # responses.
        with servers.HgServer(env, str(repo)) as server:
            for clone in ("clone", "again"):
                _run_ok([hg, "clone", "-U", server.url, tmp_path / clone],
                        env)
                _run_ok([hg, "verify", "-q", "-R", tmp_path / clone], env)
        if "wirecache" in sections:
            report = json.loads(_run_ok([hg, "wirecache", "-T", "json"],
                                        env, cwd=repo).stdout)
            # Two getbundle responses, each counted once.
            counted = report[0]
            assert sum(counted[k] for k in ("hits", "misses",
                                            "uncached")) == 2, report


# git config --------------------------------------------------------------


def _git_value(raw):
    """A git config value as git reads it: an unquoted ``#`` or ``;``
    starts a comment, quotes group, backslash escapes."""
    out, quoted, index = [], False, 0
    while index < len(raw):
        char = raw[index]
        if char == "\\" and index + 1 < len(raw):
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(
                raw[index + 1], raw[index + 1]))
            index += 2
            continue
        if char == '"':
            quoted = not quoted
        elif char in "#;" and not quoted:
            break
        else:
            out.append(char)
        index += 1
    return "".join(out).strip()


def documented_git_values(text):
    """``{key: [values]}`` (keys as ``git config --get-all`` names them)
    of a git config example, without its comments."""
    values, section = {}, None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        header = SECTION.match(line)
        if header:
            name, sub = header.group(1).strip().lower(), header.group(2)
            section = name if sub is None else "%s.%s" % (name, sub)
            continue
        assert section is not None, "a value before any section: %r" % line
        name, equals, value = stripped.partition("=")
        key = "%s.%s" % (section, name.strip().lower())
        values.setdefault(key, []).append(_git_value(value) if equals
                                          else "true")
    return values


@pytest.mark.parametrize("example", _of_kind("gitconfig"))
def test_git_config_example_reads_back_as_written(example, tmp_path, git):
    path = tmp_path / "example.gitconfig"
    path.write_text(example.text)
    listed = git.proc("config", "-f", path, "--list")
    assert listed.returncode == 0, (example, listed.stderr)
    values = documented_git_values(example.text)
    assert values, "%r sets nothing" % example
    for key, expected in values.items():
        got = git("config", "-f", path, "--get-all", key).splitlines()
        assert got == expected, (example, key)


def _read_by_gitbridge_bundlegen(param):
    try:
        keys = documented_git_values(param.values[0].text)
    except AssertionError:
        return False
    return any(key.startswith("bundlegen.") for key in keys)


@pytest.mark.parametrize("example", [
    param for param in _of_kind("gitconfig")
    if _read_by_gitbridge_bundlegen(param)])
def test_git_config_example_is_accepted_by_gitbridge(example, tmp_path, git,
                                                    gitbridge):
    repo = tmp_path / "repo"
    git("init", "-q", "-b", "main", repo)
    (repo / "f").write_text("one\n")
    git("add", "f", cwd=repo)
    git("commit", "-q", "-m", "one", cwd=repo)
    with open(repo / ".git" / "config", "a") as fh:
        fh.write(example.text)
    gitbridge("bundlegen", "--repo", repo, "--dry-run", "--output",
              tmp_path / "bundles")


@pytest.mark.parametrize("example", _of_kind("git-command"))
def test_git_config_command_sets_what_it_shows(example, tmp_path, git):
    path = tmp_path / "example.gitconfig"
    scopes = {"--global", "--system", "--local", "--worktree"}
    args = [a for a in example.text if a not in scopes]
    proc = git.proc("config", "-f", path, *args)
    reads = {"--get", "--get-all", "--get-regexp", "-l", "--list",
             "--unset", "--unset-all", "--remove-section"}
    positional = [a for a in args if not a.startswith("-")]
    if reads & set(args) or len(positional) < 2:
        # A read: 1 is "not set", anything else a bad command line.
        assert proc.returncode in (0, 1), (example, proc.stderr)
        return
    assert proc.returncode == 0, (example, proc.stderr)
    key, value = positional[0], positional[1]
    assert value in git("config", "-f", path, "--get-all",
                        key).splitlines(), example
