"""A command-line option that sets one field of a config dataclass, written once: the
parsers are built from tables of them (:data:`cdmpp.recipe_args.FLAGS`,
:data:`cdmpp.data_cli.COLLECT_FLAGS`) and so are the configs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One option and the config field it sets.

    Attributes:
        flag: the option (``--batch-size``).
        config: which config the field belongs to (the table's own names).
        field: the field it sets.
        options: ``argparse`` options (type, choices, help, ...).
        invert: a store-true flag that sets the field False.
    """

    flag: str
    config: str
    field: str
    options: dict
    invert: bool = False

    @property
    def dest(self) -> str:
        """The ``argparse`` attribute of the option."""
        return self.flag.lstrip("-").replace("-", "_")
