"""``cdmpp bench <name>``: the benchmarks and studies, each registering its own arguments."""

from __future__ import annotations

import importlib

BENCHES = {
    "fit-study": ("cdmpp.bench.fit_study", "what limits the model: fit, validation, fast end, noise, per lever"),
}
"""Each bench's module (with ``add_arguments(parser)`` and ``main(args) -> int``) and help line."""


def add_bench_parser(sub) -> None:
    """Add the ``bench`` group, and one subcommand per entry of :data:`BENCHES`, to ``sub``."""
    group = sub.add_parser("bench", help="benchmarks and studies (not needed to use cdmpp)")
    benches = group.add_subparsers(dest="bench", required=True)
    for name, (module, help_line) in BENCHES.items():
        mod = importlib.import_module(module)
        s = benches.add_parser(name, help=help_line, description=(mod.__doc__ or "").split("\n\n")[0])
        mod.add_arguments(s)
        s.set_defaults(func=mod.main)
