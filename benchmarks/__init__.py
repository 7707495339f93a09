"""Benchmarks and studies of cdmpp, apart from the product (``cdmpp bench <name>``).

Each module measures something about the product and prints or writes figures; none
of them is imported on the collection, training or inference paths.
"""

import contextlib
import csv
import os
import shutil
from pathlib import Path

from cdmpp import dataset as ds


def print_and_write_rows(rows, table: str, output: str | Path | None, checkpoint: Path | None = None) -> None:
    """Print a bench's markdown ``table``; with ``output``, also write ``rows`` as JSON there
    and the table beside it (``.md``, headed by the checkpoint's line:
    ``cdmpp.train.report.write_rows``)."""
    from cdmpp.train.report import write_rows  # noqa: PLC0415  (keeps training code off this package's import)

    print(table)
    if output:
        write_rows(rows, Path(output), table, checkpoint)
        print(f"rows written to {output} (the table beside it, .md)")


def read_truth_check_rows(paths) -> list[dict]:
    """The rows of ``cdmpp bench truth-check --output`` JSON files, in order.

    Raises:
        InputError: a file cannot be read or is not JSON (the file named).
    """
    import json  # noqa: PLC0415

    from cdmpp.errors import InputError  # noqa: PLC0415

    rows: list[dict] = []
    for path in paths:
        try:
            rows += json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError(f"{path}: not a truth-check JSON file ({err})") from None
    return rows


def write_result(out: Path, result: dict, table: str) -> None:
    """Write a bench's ``result`` to the JSON file ``out`` (atomically) and its markdown
    ``table`` beside it (``out`` with ``.md``), making the folder if needed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ds.write_json_atomic(out, result)
    out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")


def render_table(head: list[str], body: list[list[str]], markdown: bool = False, left: int = 2) -> str:
    """Cells as a fixed-width text table, or a markdown table; the first ``left`` columns are left-aligned."""
    if markdown:
        rule = "|" + "|".join(" --- " if i < left else " ---: " for i in range(len(head))) + "|"
        return "\n".join(["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    fmt = lambda vals: "  ".join(v.ljust(w) if i < left else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([fmt(head), "-" * len(fmt(head)), *(fmt(b) for b in body)])


def write_csv_and_markdown(rows: list[dict], out_dir: Path, stem: str, markdown: str,
                           first_line: str | None = None) -> tuple[Path, Path]:
    """Write ``rows`` to ``out_dir/<stem>.csv`` and ``markdown`` to ``out_dir/<stem>.md``; returns their paths.

    ``first_line``: a line put above the markdown table, such as the checkpoint's
    (:func:`cdmpp.train.report.checkpoint_line`), so that the table names its model."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["split", "model"])
        w.writeheader()
        w.writerows(rows)
    md_path.write_text((f"{first_line}\n\n" if first_line else "") + markdown + "\n", encoding="utf-8")
    return csv_path, md_path


@contextlib.contextmanager
def tmpdir_env(path: Path):
    """``TMPDIR`` of this process and the workers MetaSchedule's own ``LocalBuilder`` starts
    (which take no folder argument) set to ``path`` for the run, then restored, and ``path``
    removed."""
    path.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
