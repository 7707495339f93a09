"""A command-line option that sets one field of a config dataclass, written once: the
parsers are built from tables of them (:data:`cdmpp.recipe_args.FLAGS`,
:data:`cdmpp.data_cli.COLLECT_FLAGS`, :data:`cdmpp.inference_cli.TUNE_FLAGS`,
:data:`cdmpp.cli.ADAPT_FLAGS`, :data:`cdmpp.cli.SERVE_FLAGS`) and so are the configs."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    """One option and the config field it sets.

    Attributes:
        flag: the option (``--batch-size``).
        config: which config the field belongs to (the table's own names).
        field: the field it sets.
        options: ``argparse`` options (type, choices, help, ...).
        invert: a store-true flag that sets the field False.
        convert: applied to a given value before it is set (``tuple``, ...).
        short: a one-letter alias (``-c``).
    """

    flag: str
    config: str
    field: str
    options: dict
    invert: bool = False
    convert: Callable[[Any], Any] | None = None
    short: str | None = None

    @property
    def dest(self) -> str:
        """The ``argparse`` attribute of the option."""
        return self.flag.lstrip("-").replace("-", "_")


def add_flags(parser: argparse.ArgumentParser, flags: Iterable[Flag], configs: Mapping[str, type]) -> None:
    """Add ``flags`` to ``parser``, each defaulting to ``None`` (the field keeps its dataclass
    default) and its help saying that default.

    Args:
        parser: the subcommand's parser.
        flags: the table.
        configs: ``{config name: dataclass}`` for every ``Flag.config`` of the table.
    """
    defaults = {name: {f.name: f.default for f in dataclasses.fields(cls)} for name, cls in configs.items()}
    for f in flags:
        options = dict(f.options)
        default = defaults[f.config].get(f.field)
        if options.get("action") != "store_true" and default not in (None, dataclasses.MISSING, (), ""):
            options["help"] = (options.get("help", "") + f" (default {default})").strip()
        names = (f.short, f.flag) if f.short else (f.flag,)
        parser.add_argument(*names, default=None, **options)


def given_fields(args: argparse.Namespace, flags: Iterable[Flag]) -> dict[str, dict[str, Any]]:
    """``{config name: {field: value}}`` of the options given in ``args`` (parsed with
    :func:`add_flags`); an option left out is absent, so its field keeps the dataclass default."""
    given: dict[str, dict[str, Any]] = {}
    for f in flags:
        value = getattr(args, f.dest, None)
        if f.options.get("action") == "store_true":
            value = (not value if f.invert else True) if value else None
        if value is None:
            continue
        given.setdefault(f.config, {})[f.field] = f.convert(value) if f.convert else value
    return given
