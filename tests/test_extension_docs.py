"""Every config item an extension declares is mentioned in its help, as
users read it with ``hg help -e NAME``: by its full name
(``section.name``) or as a ``name = ...`` line under ``[section]`` in
an example."""

import re

import pytest

from vcsperf.harness import tools

EXTENSIONS = ["zstdstore", "wirezstd", "bundlegen", "sharepool", "commitid",
              "pastbytes", "wirecache"]
INI_SECTION = re.compile(r"^\s*\[([\w.-]+)\]\s*$")
INI_ITEM = re.compile(r"^\s*([\w.-]+)\s*=")


def documented(help_text):
    """Names the help mentions: ``section.name`` wherever it appears,
    and the items of its ini examples."""
    # The help wraps at hyphens: "bundlegen.zstd-" ends a line.
    help_text = re.sub(r"-\n\s*", "-", help_text)
    names = set(re.findall(r"\b([\w-]+\.[\w.-]+)\b", help_text))
    section = None
    for line in help_text.splitlines():
        header = INI_SECTION.match(line)
        if header:
            section = header.group(1)
        elif section and INI_ITEM.match(line):
            names.add("%s.%s" % (section, INI_ITEM.match(line).group(1)))
        elif not line.strip() or not line.startswith(" "):
            section = None
    return names


@pytest.mark.parametrize("name", EXTENSIONS)
def test_every_config_item_is_in_the_help(name, env):
    module = __import__("hgext3rd." + name, fromlist=["configtable"])
    declared = {"%s.%s" % (section.decode(), item.decode())
                for section, items in module.configtable.items()
                for item in items}
    assert declared, "%s declares no config item" % name
    help_text = tools.run([tools.executable("hg"), "help", "-e", name,
                           "--config", "extensions.%s=" % name], env)
    assert sorted(declared - documented(help_text)) == []
