"""Every `hase ...` command the docs tell an admin to type exists, with the options it shows."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from slurm_hase.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "bench" / "README.md"]
# a `hase ...` command in inline code, or a code line starting with it (after an optional venv path)
MENTION = re.compile(r"`(?:\.venv/bin/)?(hase [^`]*)`|^\s*(?:\$ )?(?:\.venv/bin/)?(hase [^#\n]*)")


def _mentions() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in MENTION.finditer(line):
                out.append((f"{doc.relative_to(REPO)}:{n}", (m.group(1) or m.group(2)).strip()))
    return out


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The deepest command the words name, and the words left after it."""
    ctx = click.Context(cli)
    cmd: click.Command = cli
    for i, word in enumerate(words):
        if not isinstance(cmd, click.Group):
            return cmd, words[i:]
        sub = cmd.get_command(ctx, word)
        if sub is None:
            return cmd, words[i:]
        cmd = sub
    return cmd, []


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


MENTIONS = _mentions()


def test_the_docs_mention_hase_commands() -> None:
    assert len(MENTIONS) >= 20  # the scan itself works


@pytest.mark.parametrize("where, text", MENTIONS, ids=[w for w, _ in MENTIONS])
def test_documented_command_exists_with_its_options(where: str, text: str) -> None:
    words = text.split()[1:]
    cmd, rest = _resolve(words)
    if isinstance(cmd, click.Group):
        # a group named alone (`hase model`) is fine; a word after it must be a subcommand
        word = next((w for w in rest if not w.startswith("-")), None)
        assert word is None or not re.fullmatch(r"[a-z][a-z-]+", word), f"{where}: no command {word!r} in {text!r}"
        return
    for opt in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(rest)):
        assert opt.split("=")[0] in _options(cmd), f"{where}: {cmd.name} has no option {opt} ({text!r})"
