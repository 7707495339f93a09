"""A checkpoint with a device table scored per device: the held-out network or fold, its own validation or training programs, or its within-task test programs (``cdmpp evaluate``)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.checkpoint import checkpoint_meta, load_checkpoint
from cdmpp.device import DESCRIPTOR_DIM, DeviceDescriptor, descriptor_vector
from cdmpp.errors import InputError

from .baselines import TreeBaseline
from .devices import (
    DeviceCorpus,
    corpus_dirs,
    dataset_label,
    load_corpus,
    score_remapped,
    split_corpus,
    split_within_tasks,
)
from .report import BASELINE_FILE, worst_tasks
from .splits import Split


def checkpoint_corpus(
    meta: dict, root: Path | Sequence[Path], cache_dir: Path | None, progress: bool = True, skip: Sequence[str] = ()
) -> tuple[DeviceCorpus, np.ndarray]:
    """The device folders of ``root`` (one dataset folder or several) that a
    device-table checkpoint knows, and each program's row in the checkpoint's table.

    Args:
        meta: the checkpoint's metadata (with its ``devices`` list).
        skip: device ids to leave out even when the checkpoint knows them.

    Returns:
        ``(corpus, rows)``: rows int64 ``(P,)``; ``corpus.data.device_row`` indexes
        ``corpus.devices`` (1-based), and the checkpoint's rows may differ.

    Warm timings of a device whose warm protocol the checkpoint did not learn (added to
    its folder after it trained) are left out, with a warning; its cold programs are scored.

    Raises:
        DatasetError: ``root`` holds no device the checkpoint knows.
    """
    table_rows = checkpoint_meta(meta).devices
    row_of = {d.row_name: d.row for d in table_rows}
    ids = list(dict.fromkeys(d.device_id for d in table_rows))
    names = {d.name for d in corpus_dirs(root)}
    unknown = tuple(sorted(n for n in names if n not in ids or n in skip))
    if len(unknown) == len(names):
        raise ds.DatasetError(f"{dataset_label(root)} holds no device this checkpoint knows ({', '.join(ids)})")
    # warm rows only of the devices whose warm protocol the checkpoint learned: warm timings added to a
    # folder after it trained are left out (named), its cold programs still scored
    warm = {d.device_id for d in table_rows if d.protocol == "warm"}
    left = sorted(d.name for d in corpus_dirs(root) if d.name not in unknown and d.name not in warm
                  and ds.resolve(d / ds.WARM_RECORD_FILE) is not None)
    if left:
        warnings.warn(f"{', '.join(left)}: warm timings this checkpoint did not learn (added after it trained) are "
                      f"left out; the cold ones are scored", stacklevel=2)
    corpus = load_corpus(root, cache_dir, unknown, progress, protocols=warm)
    to_model = np.asarray([0] + [row_of[d.row_name] for d in corpus.devices], dtype=np.int64)
    return corpus, to_model[corpus.data.device_row]


def _check_same_split(meta: dict, split: Split, root: Path) -> None:
    """Raise ``InputError`` when ``root`` no longer gives the checkpoint's own split.

    The validation workloads are a random draw over the dataset's workload keys, so
    programs added since training (new workloads) draw them anew: the "validation" part
    would then hold workloads the checkpoint trained on.  The check compares the split's
    sizes with those the checkpoint recorded (``train_programs``, ``val_programs``); a
    split with filters (``split_filters``) or of another kind is not checked."""
    typed = checkpoint_meta(meta)
    if typed.split_filters or not (typed.split in ("network", None) or _within_task(meta)):
        return
    want = (typed.train_programs, typed.val_programs)
    got = (int(len(split.train)), int(len(split.val)))
    if None not in want and tuple(want) != got:
        raise InputError(f"{root} no longer gives this checkpoint's split: it trained on {want[0]} programs and "
                         f"validated on {want[1]}, the dataset now splits into {got[0]} and {got[1]} (programs were "
                         f"added or removed since), so its validation workloads cannot be told apart from its "
                         f"training ones; score it on the dataset as it was (git history) or on a held-out network")


def _within_task(meta: dict) -> bool:
    """Whether a device-table checkpoint was trained on TenSet's within-task split."""
    return str(checkpoint_meta(meta).split or "").startswith("within tasks")


def trained_devices(meta: dict) -> list[str]:
    """The device ids a device-table checkpoint trained on, in row order: its table less
    the devices ``cdmpp adapt`` added afterwards."""
    return list(dict.fromkeys(d.device_id for d in checkpoint_meta(meta).devices
                              if "adapted" not in (d.model_extra or {}) or d.train_programs))


def _own_split(corpus: DeviceCorpus, meta: dict, root: Path) -> Split:
    """The split a device-table checkpoint trained on, drawn again from ``corpus``
    (``InputError`` when the dataset no longer gives it: :func:`_check_same_split`)."""
    if _within_task(meta):  # the recorded split names its task-size floor: "within tasks of >= N programs"
        floor = re.search(r">= (\d+) programs", str(checkpoint_meta(meta).split))
        split = split_within_tasks(corpus, min_programs=int(floor.group(1)) if floor else 20,
                                   seed=int(checkpoint_meta(meta).train_config.get("seed", 0)))
    else:
        typed = checkpoint_meta(meta)
        split = split_corpus(corpus, typed.holdout, exclude_test_networks=typed.excludes_test_networks)
    _check_same_split(meta, split, root)
    return split


def own_split_corpus(
    meta: dict, root: Path | Sequence[Path], cache_dir: Path | None, progress: bool = True
) -> tuple[DeviceCorpus, np.ndarray, Split]:
    """The device folders of ``root`` that a device-table checkpoint trained on (devices
    that ``cdmpp adapt`` added afterwards are left out), each program's row in its
    table, and the checkpoint's own split drawn again over them: its held-out network's
    or its within-task split, with the same validation workloads.

    Returns:
        ``(corpus, rows, split)``: as :func:`checkpoint_corpus`, and the :class:`Split`.

    Raises:
        InputError: ``root`` lacks a device the checkpoint trained on, or no longer
            gives its split (its sizes differ).  DatasetError: as :func:`checkpoint_corpus`.
    """
    trained = trained_devices(meta)
    corpus, rows = checkpoint_corpus(meta, root, cache_dir, progress,
                                     skip=[d.device_id for d in checkpoint_meta(meta).devices
                                           if d.device_id not in trained])
    missing = [d for d in trained if d not in {descriptor.device_id for descriptor in corpus.devices}]
    if missing:
        raise InputError(f"{dataset_label(root)} lacks {', '.join(missing)}, which this checkpoint trained on: its "
                         f"split is drawn over every device it trained on, so give every dataset folder it "
                         f"trained on (its model card's device table names their folders)")
    return corpus, rows, _own_split(corpus, meta, root)


def evaluate_devices(
    checkpoint: Path,
    root: Path,
    holdout: str | None = "auto",
    cache_dir: Path | None = None,
    progress: bool = True,
    plot: Path | None = None,
    traces: bool = True,
) -> tuple[dict[str, dict], str]:
    """Score a checkpoint with a device table (trained by :func:`cdmpp.train.train.train` on several device folders) on each device folder of ``root``
    that it knows, on the held-out network (default: the one it recorded; for a checkpoint
    trained on TenSet's within-task split, that split's test programs), on every program
    (``holdout=None``), or on one part of its own split (``holdout="validation"``: its
    validation workloads; ``"training"``: the programs it trained on, the fit).

    With ``plot``, also write a PNG of predicted against measured latency, one panel
    per device (:func:`cdmpp.train.plots.plot_predicted_vs_measured`), and beside it
    the same with each task's level taken out (``<plot>-level-free.png``,
    :func:`cdmpp.train.plots.plot_level_free`).

    A checkpoint trained with trace tokens reads each program's trace from its tuning
    record; with ``traces=False`` (a checkpoint trained with trace dropout) it scores
    the programs as bare PrimFuncs, without the token.

    Returns:
        ``(rows per device id, title)``.

    Raises:
        CheckpointError, DatasetError, ValueError: a bad checkpoint, bad data, a
            checkpoint without a device table, or no device folder it knows.
    """

    model, meta = load_checkpoint(Path(checkpoint))
    if not checkpoint_meta(meta).devices:
        raise InputError(f"{checkpoint} has no device table; score it on one device folder")
    part = holdout if holdout in ("validation", "training") else None
    net = checkpoint_meta(meta).holdout if holdout == "auto" else (None if part else holdout)
    within = holdout == "auto" and _within_task(meta)
    if part or within:  # its validation workloads, the programs it trained on, or its within-task test programs
        corpus, model_rows, split = own_split_corpus(meta, root, cache_dir, progress)
        index = split.val if part == "validation" else split.train if part else split.test
    else:
        corpus, model_rows = checkpoint_corpus(meta, root, cache_dir, progress)
        index = split_corpus(corpus, net).test if net else np.arange(len(corpus.data))
    corpus = corpus.for_model(model.config, traces)
    tree = None
    if (Path(checkpoint) / BASELINE_FILE).exists() and checkpoint_meta(meta).tree_inputs == "psf_sum+descriptor":
        tree = TreeBaseline.load(Path(checkpoint) / BASELINE_FILE)
    panels: dict = {}
    table = np.zeros((max(d.row for d in checkpoint_meta(meta).devices) + 1, DESCRIPTOR_DIM), np.float32)
    for d in checkpoint_meta(meta).devices:
        table[d.row] = descriptor_vector(DeviceDescriptor.from_json(d.descriptor))
    rows = score_remapped(model, tree, corpus, index, net, model_rows, table, panels)
    what = (f"{part} programs (the checkpoint's split)" if part else "within-task test programs (the checkpoint's split)"
            if within else f"held-out network {net}" if net else "every program")
    if model.config.trace_tokens and not traces:
        what += ", without their traces"
    title = f"{what} of {root}, per device ({checkpoint})"
    worst = worst_tasks(corpus, index, panels, net)
    if worst:
        title += "\n\nWorst tasks (median predicted / measured latency, per device):\n" + "\n".join(worst)
    if plot is not None:
        from .plots import level_free_path, plot_level_free, plot_predicted_vs_measured  # noqa: PLC0415  (only on the branch that needs it)

        plot_predicted_vs_measured(panels, f"cdmpp transformer, {what}", Path(plot))
        plot_level_free(panels, f"cdmpp transformer, {what}: each task's level taken out", level_free_path(Path(plot)))
    return rows, title


