"""Write docs/cli.md: every option of every ``cdmpp`` command and bench, from their parsers.

``cdmpp bench cli-reference -o docs/cli.md`` regenerates the page; a test checks that
the committed page matches the parsers.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

HEADER = (
    "# Command-line reference\n\n"
    "Generated from the parsers by `cdmpp bench cli-reference -o docs/cli.md`; do not edit by hand. "
    "What each command is for, its runtime and its outputs: [commands.md](commands.md).\n"
)


def _option_row(action: argparse.Action) -> str | None:
    if isinstance(action, argparse._HelpAction):
        return None
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs != 0:
        names += f" {action.metavar or action.dest.upper()}"
        if action.nargs in ("+", "*"):
            names += " ..."
    empty = action.default is None or action.default is argparse.SUPPRESS or action.default is False
    default = "" if empty or action.nargs == 0 else f"`{action.default}`"
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        default += (" " if default else "") + "(" + " \\| ".join(f"`{c}`" for c in action.choices) + ")"
    text = (action.help or "").replace("%%", "%").replace("|", "\\|").replace("\n", " ")
    if "%(default)s" in text:
        text = text.replace("%(default)s", str(action.default))
    return f"| {names} | {default} | {text} |"


def _parser_section(title: str, parser: argparse.ArgumentParser, help_line: str = "") -> list[str]:
    lines = [f"## {title}", ""]
    if help_line:
        lines += [help_line[0].upper() + help_line[1:] + ".", ""]
    rows = [r for r in map(_option_row, parser._actions) if r is not None]
    if rows:
        lines += ["| option | default | what |", "| --- | --- | --- |", *rows, ""]
    return lines


def reference() -> str:
    """The whole page: the ``cdmpp`` subcommands in parser order, then every bench.

    Returns:
        markdown text.
    """
    from cdmpp.cli import build_parser  # noqa: PLC0415  (keeps the CLI off this module's import)

    from . import cli as bench_cli  # noqa: PLC0415  (the bench table imports this module)

    lines = [HEADER]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    for name, parser in sub.choices.items():
        if name == "bench":
            continue
        lines += _parser_section(f"cdmpp {name}", parser, helps.get(name, ""))
    for name, (module_name, help_line) in bench_cli.BENCHES.items():
        parser = argparse.ArgumentParser(prog=f"cdmpp bench {name}")
        importlib.import_module(f"{__package__}.{module_name}").add_arguments(parser)
        lines += _parser_section(f"cdmpp bench {name}", parser, help_line)
    return "\n".join(lines).rstrip() + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default=None, help="write the page here (default: print it)")


def main(args: argparse.Namespace) -> int:
    text = reference()
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{args.output} ({text.count(chr(10))} lines)")
    else:
        print(text, end="")
    return 0
