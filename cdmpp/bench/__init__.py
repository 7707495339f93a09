"""Benchmarks and studies of cdmpp, apart from the product (``cdmpp bench <name>``).

Each module measures something about the product and prints or writes figures; none
of them is imported on the collection, training or inference paths.
"""

from pathlib import Path


def write_result(out: Path, result: dict, table: str) -> None:
    """Write a bench's ``result`` to the JSON file ``out`` (atomically) and its markdown
    ``table`` beside it (``out`` with ``.md``), making the folder if needed."""
    from cdmpp import dataset as ds  # noqa: PLC0415  (keeps this package's import light)

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ds.write_json_atomic(out, result)
    out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
