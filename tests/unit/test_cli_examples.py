"""Every `hase` command's --help teaches with examples, and every example is a valid command
line: its options exist, take the values they are given, and include the required ones."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurm_hase.cli.main import cli
from slurm_hase.errors import DescriptorError
from slurm_hase.hsbatch.argv import split_argv

SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<"}
COMMAND_PREFIXES = {"eval", "sudo", "time", "exec", "env", "nohup"}


def leaf_commands() -> Iterator[tuple[list[str], click.Command]]:
    """(path after 'hase', command) for every command that runs something."""
    ctx = click.Context(cli)

    def walk(group: click.Group, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None
            if isinstance(cmd, click.Group):
                yield from walk(cmd, [*path, name])
            else:
                yield [*path, name], cmd

    yield from walk(cli, [])


def help_text(path: list[str]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def example_lines(text: str) -> list[str]:
    """The example block's command lines, with backslash continuations joined."""
    block = text.split("Examples:", 1)[1].split("\nOptions:", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines() if line.strip()]


def invocations(line: str, program: str) -> list[list[str]]:
    """The argument lists of each `program ...` (or `.venv/bin/program ...`) run on a shell
    line: at the start of a command (after `eval`, `sudo`, `time` or VAR=value), inside
    $(...) too; `ln -s .../hase /usr/local/bin/hase` runs ln, not hase."""
    line = re.sub(r'"\$\((.*?)\)"', r" ; \1 ; ", line)
    found: list[list[str]] = []
    current: list[str] | None = None
    at_start = True
    for tok in shlex.split(line, comments=True):
        if tok in SHELL_OPERATORS:
            current, at_start = None, True
        elif current is not None:
            current.append(tok)
        elif at_start and (tok == program or tok.endswith("/" + program)):
            current = []
            found.append(current)
        elif not (at_start and (tok in COMMAND_PREFIXES or re.fullmatch(r"\w+=\S*", tok))):
            at_start = False
    return found


def check_parses(cmd: click.Command, args: list[str], where: str) -> None:
    ctx = click.Context(cmd, info_name=where)
    opts, rest, _ = cmd.make_parser(ctx).parse_args(list(args))  # unknown option: raises
    assert not rest, f"{where}: stray arguments {rest}"
    for param in cmd.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = opts.get(param.name)
        if param.required:
            assert value is not None, f"{where}: required {param.opts[0]} missing"
        if value is not None and isinstance(param.type, click.Choice):
            values = value if isinstance(value, list | tuple) else [value]
            assert all(v in param.type.choices for v in values), f"{where}: {param.opts[0]} {value}"
        if value is not None and isinstance(param.type, click.types.ParamType) \
                and param.type.name in ("integer", "float", "integer range", "float range"):
            values = value if isinstance(value, list | tuple) else [value]
            for v in values:
                param.type.convert(v, param, ctx)


def resolve(args: list[str], line: str) -> click.Command:
    """The command `hase ARGS` runs; its own options must parse (check_parses)."""
    target: click.Command = cli
    sub = list(args)
    ctx = click.Context(cli)
    while isinstance(target, click.Group):
        assert sub, f"{line}: a command group, not a command"
        found = target.get_command(ctx, sub[0])
        assert found is not None, f"{line}: no command {sub[0]!r}"
        target, sub = found, sub[1:]
    check_parses(target, sub, line)
    return target


def check_hsbatch(args: list[str], line: str) -> None:
    try:
        split_argv(args)
    except DescriptorError as exc:  # pragma: no cover - the failure message
        pytest.fail(f"{line}: {exc}")


LEAVES = list(leaf_commands())


@pytest.mark.parametrize("path,cmd", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_help_has_examples_that_parse(path: list[str], cmd: click.Command) -> None:
    text = help_text(path)
    assert "Examples:" in text, f"hase {' '.join(path)} --help has no examples"
    own = 0
    for line in example_lines(text):
        for args in invocations(line, "hase"):
            own += resolve(args, line) is cmd
        for args in invocations(line, "hsbatch"):
            check_hsbatch(args, line)
    assert own >= 1, f"hase {' '.join(path)}: no example runs this command"


ROOT = Path(__file__).resolve().parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def doc_command_lines(text: str) -> Iterator[str]:
    """Shell lines in a Markdown file's code (fenced blocks and 4-space indented lines), with
    continuations joined; synopsis lines ([--opt], (same options), diagrams) are left out."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    blocks.append("\n".join(line[4:] for line in text.splitlines() if line.startswith("    ")))
    for block in blocks:
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            code = line.split(" #", 1)[0]
            if re.search(r"\[-|\(same|\.\.\.|[\u2500-\u25ff]", code):
                continue  # a synopsis or a diagram, not a command line
            yield line


def test_docs_show_command_lines() -> None:
    """The check above has lines to check (a pattern that matched nothing would pass)."""
    found = sum(len(invocations(line, "hase")) + len(invocations(line, "hsbatch"))
                for doc in DOCS for line in doc_command_lines(doc.read_text()))
    assert found >= 15


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_command_lines_in_docs_parse(doc: Path) -> None:
    """Every hase and hsbatch command line the docs show would be accepted as written."""
    for line in doc_command_lines(doc.read_text()):
        for args in invocations(line, "hase"):
            resolve(args, f"{doc.name}: {line}")
        for args in invocations(line, "hsbatch"):
            check_hsbatch(args, f"{doc.name}: {line}")


def test_checker_catches_a_bad_example() -> None:
    """The checks above can fail: a misspelt option, a bad choice and a missing required one."""
    train = next(c for p, c in LEAVES if p == ["model", "train"])
    with pytest.raises(click.NoSuchOption):
        check_parses(train, ["--dat", "x.csv", "--out", "m.json"], "misspelt")
    with pytest.raises(AssertionError, match="required --out"):
        check_parses(train, ["--data", "x.csv"], "no --out")
    evaluate = next(c for p, c in LEAVES if p == ["model", "evaluate"])
    with pytest.raises(AssertionError, match="--split"):
        check_parses(evaluate, ["--data", "x.csv", "--split", "sideways"], "bad choice")
    predict = next(c for p, c in LEAVES if p == ["model", "predict"])
    with pytest.raises(click.BadParameter):
        check_parses(predict, ["--batch-size", "many"], "not a number")
    assert invocations('eval "$(hase cluster env --dir /x)" && sinfo', "hase") == [
        ["cluster", "env", "--dir", "/x"]]
    assert invocations("ln -s /opt/bin/hase /usr/local/bin/hase", "hase") == []
    assert invocations("HASE_SPEED_SLACK=0 .venv/bin/hsbatch -t 5 j.sh | cat", "hsbatch") == [
        ["-t", "5", "j.sh"]]
