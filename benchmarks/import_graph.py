"""Draw the package's import graph by layer: each layer a box (its modules counted), each
arrow the imports from one layer into another, at module level or inside functions.

``cdmpp bench import-graph -o docs/plots/import-layers.png`` writes the picture; every
arrow points down (to a lower layer) when the layering holds, and an arrow up is drawn
in red.  The layers are those the layout test checks (``tests/unit/test_layout.py``).
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"cdmpp": "cdmpp", "cdmpp.featurize": "featurize", "cdmpp.train": "train", "cdmpp.serve": "serve",
            "benchmarks": "benchmarks"}
LAYERS = (
    ("core", ("cdmpp", "cdmpp.errors", "cdmpp.records", "cdmpp.device", "cdmpp.tvm_compat", "cdmpp.dataset",
              "cdmpp.featurize", "cdmpp.encoder", "cdmpp.model", "cdmpp.tree_gnn", "cdmpp.cache_fit", "cdmpp.roofline",
              "cdmpp.intervals", "cdmpp.device_choice", "cdmpp.predictor", "cdmpp.predictions", "cdmpp.card",
              "cdmpp.checkpoint", "cdmpp.relax_import", "cdmpp.inference", "cdmpp.schema")),
    ("networks and tasks", ("cdmpp.tasks", "cdmpp.held_out", "cdmpp.networks", "cdmpp.network_input",
                            "cdmpp.kernel_class")),
    ("collect", ("cdmpp.collect",)),
    ("estimate and tune", ("cdmpp.estimate", "cdmpp.tuning")),
    ("train", ("cdmpp.train",)),
    ("serve", ("cdmpp.serve",)),
    ("command line", ("cdmpp.cli", "cdmpp.data_cli", "cdmpp.inference_cli", "cdmpp.recipe_args", "cdmpp.cli_flags")),
    ("benchmarks", ("benchmarks",)),
)
"""The layers, lowest first: a module imports nothing of a layer above its own."""


def modules() -> dict[str, Path]:
    """Every module of the product and the benchmarks, by dotted name."""
    out = {}
    for pkg, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if pkg == "cdmpp" and parts and parts[0] in ("featurize", "train", "serve"):
                continue
            out[".".join([pkg, *parts])] = path
    return out


def imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(imported module, names, line)`` of every import statement of a module, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = name.split(".")
                if path.name != "__init__.py":
                    parts = parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of a module (its longest matching prefix), ``None`` if none."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


def layer_edges() -> tuple[Counter, Counter]:
    """``(modules per layer, imports per (from layer, to layer))``, self-edges left out."""
    mods = modules()
    sizes = Counter(layer_of(m) for m in mods)
    edges: Counter = Counter()
    for m, path in mods.items():
        own = layer_of(m)
        for base, names, _ in imports(m, path):
            targets = {t for t in [base, *(f"{base}.{n}" for n in names)] if t in mods}
            for t in targets:
                other = layer_of(t)
                if other is not None and other != own:
                    edges[(own, other)] += 1
    return sizes, edges


def draw(out: Path) -> tuple[int, int]:
    """Write the picture; returns ``(arrows down, arrows up)``."""
    import matplotlib  # noqa: PLC0415  (only this bench draws)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (only this bench draws)

    sizes, edges = layer_edges()
    n = len(LAYERS)
    fig, ax = plt.subplots(figsize=(9, 0.9 * n + 1))
    ys = {i: i for i in range(n)}  # core at the bottom
    for i, (label, _) in enumerate(LAYERS):
        ax.add_patch(plt.Rectangle((0.0, ys[i] - 0.3), 3.0, 0.6, fill=True, color="#dde8f5", ec="#335"))
        ax.text(1.5, ys[i], f"{label} ({sizes.get(i, 0)} modules)", ha="center", va="center", fontsize=10)
    down = up = 0
    for (a, b), count in sorted(edges.items()):
        going_up = b > a
        up, down = up + going_up, down + (not going_up)
        x = 3.3 + 0.35 * a
        ax.annotate("", xy=(x, ys[b] + (0.3 if not going_up else -0.3)), xytext=(x, ys[a] + (-0.3 if not going_up else 0.3)),
                    arrowprops=dict(arrowstyle="->", color="red" if going_up else "#555", lw=0.6 + 0.15 * min(count, 10)))
    ax.set_xlim(-0.2, 3.6 + 0.35 * n)
    ax.set_ylim(-0.7, n - 0.3)
    ax.axis("off")
    ax.set_title(f"cdmpp's imports between layers: {down} layer pairs point down, {up} up (red)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return down, up


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default="docs/plots/import-layers.png", help="the PNG to write")


def main(args: argparse.Namespace) -> int:
    down, up = draw(Path(args.output))
    print(f"{args.output}: {down} layer pairs import downward, {up} upward")
    return 0 if up == 0 else 1
