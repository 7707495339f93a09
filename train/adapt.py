"""A new device in minutes: a row of the device table and an offset from a few timings.

CDMPP (EuroSys 2024, section 5) carries a trained predictor to a new device with a
few measurements chosen by KMeans over the predictor's program embeddings.  Here
the program encoder and the head stay frozen.  The new device gets its own row in
the model's device table (:meth:`~cdmpp.model.LatencyTransformer.add_device`),
a copy of the nearest known device's row (``init="nearest"``) or the unknown-device
row with the new descriptor (``"descriptor"``), and then:

- ``method="offset"`` (default): the device's log-latency moves by the shots' mean
  residual (:func:`fit_device_offset`); the ranking stays the starting row's;
- ``method="row"``: the row's ``device_dim`` numbers are first fitted to the shots
  (:func:`fit_device_row`), then the offset.

A leave-one-device-out study on Zen 5 (``cdmpp bench adapt-table``; its table is in git history) chose the defaults: the nearest device's
row beats the descriptor alone zero-shot, and fitting the row adds nothing over the
offset at 16-64 shots (it costs ranking at 64).

:func:`adapt_local` is ``cdmpp adapt``: choose at most 64 programs of a measured
device folder by KMeans (no latency read), time them on this machine, adapt, and
write a checkpoint that knows this machine.  :func:`adapt_table` measures the
recipes leave-one-device-out on programs already measured on the left-out device.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from cdmpp import dataset as ds
from cdmpp.checkpoint import checkpoint_meta, load_checkpoint, save_checkpoint
from cdmpp.collect import measure_programs
from cdmpp.device import DeviceDescriptor, descriptor_vector, device_caches, local_cpu
from cdmpp.device_choice import nearest_device
from cdmpp.errors import InputError
from cdmpp.featurize import featurize_many
from cdmpp.featurize.batch import FeaturizedPrograms, dense_programs, from_trees
from cdmpp.featurize.folder import featurize_database
from cdmpp.featurize.loops import with_loop_tokens
from cdmpp.featurize.trace import model_inputs, schedule_trace_vectors, with_trace_tokens
from cdmpp.model import LatencyTransformer
from cdmpp.predictor import LatencyPredictor

from .config import AdaptConfig
from .metrics import summary
from .report import ADAPTED_HEADING
from .shots import select_programs


@torch.no_grad()
def _encoded(model: LatencyTransformer, data: FeaturizedPrograms, index: np.ndarray, row: int) -> list:
    """The encoder's tokens of programs ``index``, in chunks of 512: a list of ``(h, mask,
    bound)``, ``h`` float32 ``(B, L, d_model)``, ``mask`` bool ``(B, L)`` and ``bound`` the
    roofline bound on device row ``row`` (``(B,)``; ``None`` without ``roofline``),
    computed once (no grad)."""
    model.eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(index), 512):
            x, pos, mask = dense_programs(data, index[s : s + 512])
            rows = torch.full((len(x),), row, dtype=torch.int64)
            out.append((model.encoded(x, pos, mask, rows), mask, model.roofline_bound(x, mask, rows)))
    return out


def fit_device_row(
    model: LatencyTransformer, data: FeaturizedPrograms, shots: np.ndarray, row: int, config: AdaptConfig | None = None
) -> LatencyTransformer:
    """A copy of ``model`` whose device row ``row`` is fitted to the measured ``shots``.

    Minimises the MSE of standardised log-latency over the shots, plus ``config.l2``
    times the squared distance of the row from where it started, by full-batch
    Adam on the row alone (every other weight frozen).

    Args:
        shots: int64 ``(K,)`` program indices of ``data`` with measured latencies.
        row: the device row to fit (``1..num_devices``).

    Returns:
        The adapted copy, in eval mode; ``model`` is unchanged.

    Raises:
        ValueError: no shot, a non-positive latency, or a model without device input.
    """
    config = config or AdaptConfig()
    shots = np.asarray(shots, dtype=np.int64)
    if shots.size == 0:
        raise InputError("adapting needs at least one measured program")
    if model.config.num_devices <= 0:
        raise InputError("this model has no device input (num_devices == 0); retrain it over several devices")
    if not 1 <= row <= model.config.num_devices:
        raise InputError(f"device row {row} is outside 1..{model.config.num_devices}")
    lat = data.latency[shots]
    if not np.all(np.isfinite(lat) & (lat > 0)):
        raise InputError("a shot has a non-positive or missing latency")
    out = copy.deepcopy(model).eval()
    chunks = _encoded(out, data, shots, row)
    y = (torch.from_numpy(np.log(lat)).float() - out.label_mean) / out.label_std
    start = out.device_embedding.weight[row].detach().clone()
    param = torch.nn.Parameter(start.clone())
    opt = torch.optim.Adam([param], lr=config.lr)
    desc = out.descriptor_proj(out.device_descriptor[row]).detach()
    for _ in range(config.steps):
        opt.zero_grad()
        vec = param + desc
        # the model's own head (pooled or a log-sum-exp over tokens) on the fixed tokens
        pred = torch.cat([out.output_for_vectors(h, mask, vec.unsqueeze(0).expand(len(h), -1), bound)
                          for h, mask, bound in chunks])
        loss = torch.nn.functional.mse_loss(pred, y) + config.l2 * (param - start).pow(2).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        out.device_embedding.weight[row] = param.detach()
    return out


def fit_device_offset(model: LatencyTransformer, data: FeaturizedPrograms, shots: np.ndarray, row: int) -> LatencyTransformer:
    """A copy of ``model`` whose ``device_offset[row]`` moves by the mean of
    ``log(measured) - log(predicted)`` over ``shots``: the least-squares shift of that
    device's log-latency.  Other devices and the order of programs do not change.

    Raises:
        ValueError: no shot, or a non-positive latency.
    """
    shots = np.asarray(shots, dtype=np.int64)
    if shots.size == 0:
        raise InputError("adapting needs at least one measured program")
    pred = LatencyPredictor(model, {}).predict_featurized(data, shots, device_rows=row)
    resid = np.log(data.latency[shots]) - np.log(pred)
    if not np.all(np.isfinite(resid)):
        raise InputError("a shot has a non-positive or missing latency")
    out = copy.deepcopy(model).eval()
    with torch.no_grad():
        out.device_offset[row] += float(resid.mean())
    return out


def adapt_device(model, data, shots, row: int, config: AdaptConfig) -> LatencyTransformer:
    """``config.method`` on a copy of ``model``: the offset alone, or the row fit then the offset."""
    if config.method == "row":
        model = fit_device_row(model, data, shots, row, config)
    return fit_device_offset(model, data, shots, row)


def new_device_row(model: LatencyTransformer, meta: dict, device, init: str) -> tuple[LatencyTransformer, int]:
    """A copy of ``model`` with a row for ``device`` (a :class:`~cdmpp.device.DeviceDescriptor`);
    returns ``(copy, row)``.

    ``init="nearest"``: the row is a copy of the nearest known device's (its learned
    embedding, descriptor input and offset), so the new device starts out predicted
    exactly as that device.  ``"descriptor"``: the unknown-device row with the new
    device's own descriptor; also where no known device is of the new one's kind
    (a first GPU)."""
    known = [(d.row, DeviceDescriptor.from_json(d.descriptor)) for d in checkpoint_meta(meta).devices]
    # a GPU never starts from a CPU's row, nor a device from a warm-protocol row
    known = [(r, d) for r, d in known if d.kind == device.kind and d.protocol == "cold"]
    if init == "nearest" and known:
        near = nearest_device(device, [d for _, d in known])
        start = next(r for r, d in known if d.device_id == near.device_id)
        return with_new_device(model, model.device_descriptor[start].numpy(), start, device_caches(device))
    return with_new_device(model, descriptor_vector(device), 0, device_caches(device))


def with_new_device(model: LatencyTransformer, descriptor: np.ndarray, init_row: int = 0,
                    caches: tuple[int, ...] | None = None) -> tuple[LatencyTransformer, int]:
    """A copy of ``model`` with one more device row (its start: row ``init_row``; ``caches``:
    the device's cache bytes for a ``cache_fit`` model); returns ``(copy, row)``."""
    out = copy.deepcopy(model)
    return out, out.add_device(descriptor, init_row, caches)


@dataclass
class AdaptResult:
    """What :func:`adapt_local` did.

    Attributes:
        device_id: this machine's device id, now known to the written checkpoint.
        row: its row in the checkpoint's device table.
        new_device: whether the row is new (else an existing row was refitted).
        shots: programs measured and fitted on.
        measured_dir: the device folder holding this machine's measurements.
        rmse_log_before, rmse_log_after: RMSE of log-latency on the shots, with the
            starting row and with the fitted one (in-sample: a check that the fit
            moved toward the measurements, not an accuracy estimate).
        seconds: wall time of each step (``select``, ``measure``, ``fit``).
    """

    device_id: str
    row: int
    new_device: bool
    shots: int
    measured_dir: Path
    rmse_log_before: float
    rmse_log_after: float
    seconds: dict


def adapt_local(
    checkpoint: Path,
    source: Path,
    out: Path,
    measured: Path,
    config: AdaptConfig | None = None,
    candidates: int = 2000,
    cache_dir: Path | None = None,
    disable_avx512: bool = False,
    progress: bool = True,
) -> AdaptResult:
    """``cdmpp adapt``: teach a checkpoint this machine from at most ``config.shots`` timings.

    1. Draw ``candidates`` programs of ``source`` (a measured device folder; its
       latencies are never read), featurize them and choose ``config.shots`` by
       KMeans over the checkpoint's program embeddings.
    2. Time them on this machine with the collector's protocol and quiet-machine
       guard (:func:`cdmpp.collect.measure_programs`) into ``measured/<device id>/``.
    3. Add this machine's row to the device table (or refit it, if the checkpoint
       knows this machine already) with :func:`fit_device_row`, and write the
       checkpoint to ``out`` (the tree baseline is copied as it is).

    Raises:
        CheckpointError: a bad checkpoint.
        DatasetError: ``source`` is not a device folder with measured programs, or no
            shot could be measured here.
        ValueError: a checkpoint without a device table.
        MachineBusyError: the machine stayed busy past the guard's limit.
    """

    config = config or AdaptConfig()
    model, meta = _device_table_checkpoint(Path(checkpoint))
    seconds = {}
    t0 = time.time()
    src = ds.load_device_dir(Path(source))
    if not src.programs:
        raise ds.DatasetError(f"{source}: no measured program to choose from")
    rng = np.random.default_rng(config.seed)
    pool = np.sort(rng.choice(len(src.programs), size=min(candidates, len(src.programs)), replace=False))
    src_target = src.manifest.get("device", {}).get("target") or src.programs[0].record.target
    records = [src.programs[i].record for i in pool]
    trees = featurize_many(records, src_target)
    n = len(trees)
    cand = from_trees(trees, np.ones(n), np.zeros(n, np.int64), ["?"], np.zeros(n))
    if model.config.loop_tokens:
        cand = with_loop_tokens(cand)
    if model.config.trace_tokens:  # the records' own traces, as the checkpoint reads them
        cand = with_trace_tokens(cand, schedule_trace_vectors(records))
    chosen = pool[select_programs(model, cand, np.arange(n), config)]
    seconds["select"] = round(time.time() - t0, 1)
    t0 = time.time()
    note = f"{chosen.size} programs chosen by {config.selection} (seed {config.seed}) over the embeddings of {checkpoint}"
    summary_ = measure_programs(Path(source), chosen, Path(measured), disable_avx512=disable_avx512, note=note, progress=progress)
    seconds["measure"] = round(time.time() - t0, 1)
    local = local_cpu(disable_avx512=disable_avx512)
    db = ds.load_device_dir(summary_.device_dir)
    if not db.programs:
        raise ds.DatasetError(f"no program could be measured on this machine (see {summary_.device_dir})")
    how = f"`cdmpp adapt` timed {len(db.programs)} programs of `{source}` on this machine (chosen by {config.selection})"
    return _fit_and_save(model, meta, Path(checkpoint), local, db, Path(summary_.device_dir), Path(out), config,
                         cache_dir, seconds, Path(source), how)


def adapt_measured(
    checkpoint: Path,
    device_dir: Path,
    out: Path,
    config: AdaptConfig | None = None,
    cache_dir: Path | None = None,
) -> AdaptResult:
    """``cdmpp adapt --measured-dir``: teach a checkpoint a device measured on another host.

    Every measured program of ``device_dir`` (a device folder written by ``cdmpp
    collect`` or ``measure-shots`` on that device, for example a GPU host) is a shot;
    nothing is timed here. The device's row is added (or refitted) as in
    :func:`adapt_local`, step 3, and the checkpoint is written to ``out``.

    Raises:
        CheckpointError: a bad checkpoint.
        DatasetError: ``device_dir`` is not a device folder with measured programs.
        InputError: a checkpoint without a device table, or a folder whose manifest
            names no device.
    """
    config = config or AdaptConfig()
    model, meta = _device_table_checkpoint(Path(checkpoint))
    db = ds.load_device_dir(Path(device_dir))
    if not db.programs:
        raise ds.DatasetError(f"{device_dir}: no measured program to adapt on")
    device_json = db.manifest.get("device")
    if not device_json or not device_json.get("device_id"):
        raise InputError(f"{device_dir}/manifest.json names no device: not a device folder written by cdmpp")
    device = DeviceDescriptor.from_json(device_json)
    how = f"`cdmpp adapt --measured-dir` read all {len(db.programs)} programs measured on the device (`{device_dir}`)"
    return _fit_and_save(model, meta, Path(checkpoint), device, db, Path(device_dir), Path(out), config, cache_dir,
                         {}, Path(device_dir), how)


def _device_table_checkpoint(checkpoint: Path):
    """``(model, meta)`` of a checkpoint with a device table; InputError for one without."""

    model, meta = load_checkpoint(checkpoint)
    if model.config.num_devices <= 0 or not checkpoint_meta(meta).devices:
        raise InputError(f"{checkpoint} has no device table: adapt needs a checkpoint trained over several devices")
    return model, meta


def _fit_and_save(model, meta, checkpoint: Path, device, db, folder: Path, out: Path, config: AdaptConfig, cache_dir,
                  seconds: dict, source: Path, how: str) -> AdaptResult:
    """Fit ``device``'s row (new, or the known one) to every program of ``db`` and write the checkpoint."""
    t0 = time.time()
    data = model_inputs(model.config, featurize_database(db, cache_dir, progress=False, loops=model.config.loop_tokens),
                        [folder])
    known = {d.row_name: d.row for d in checkpoint_meta(meta).devices}
    if device.row_name in known:
        base, row, new = copy.deepcopy(model), known[device.row_name], False
    else:
        (base, row), new = new_device_row(model, meta, device, config.init), True
    shots = np.arange(len(data))
    true = np.log(data.latency)
    before = float(np.sqrt(np.mean((np.log(LatencyPredictor(base, {}).predict_featurized(data, shots, device_rows=row))
                                    - true) ** 2)))
    tuned = adapt_device(base, data, shots, row, config)
    after = float(np.sqrt(np.mean((np.log(LatencyPredictor(tuned, {}).predict_featurized(data, shots, device_rows=row))
                                   - true) ** 2)))
    seconds["fit"] = round(time.time() - t0, 1)
    entry = {
        "row": row,
        "device_id": device.device_id,
        "descriptor": device.to_json(),
        "folder": str(folder),
        "programs": int(len(data)),
        "train_programs": 0,
        "adapted": {
            **asdict(config),
            "from_checkpoint": str(checkpoint),
            "source": str(source),
            "shots": int(len(data)),
            "rmse_log_before": round(before, 4),
            "rmse_log_after": round(after, 4),
            "seconds": seconds,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    }
    devices = [raw for raw, d in zip(meta["devices"], checkpoint_meta(meta).devices) if d.row_name != device.row_name]
    devices.append(entry)
    save_checkpoint(tuned, out, {**meta, "devices": sorted(devices, key=lambda d: d["row"])})
    for name in ("tree_baseline.json", "README.md"):
        if (checkpoint / name).exists() and checkpoint.resolve() != out.resolve():
            shutil.copyfile(checkpoint / name, out / name)
    card = out / "README.md"
    text = card.read_text(encoding="utf-8") if card.exists() else ""
    heading = f"{ADAPTED_HEADING}`{device.device_id}` "
    if heading in text:  # a refit replaces the device's earlier section
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + (text[end:] if end >= 0 else "")
    card.write_text(
        text + f"{heading}(row {row})\n\n"
        f"{how}, and fitted the device's row ({config.method}, started from "
        f"{config.init if new else 'its current row'}): RMSE(log) on those "
        f"programs {before:.3f} -> {after:.3f} (in-sample). Wall time: {json.dumps(seconds)} s.\n",
        encoding="utf-8",
    )
    return AdaptResult(device.device_id, row, new, int(len(data)), folder, before, after, seconds)


def adapt_table(
    model: LatencyTransformer,
    meta: dict,
    data: FeaturizedPrograms,
    device,
    weights: dict | None = None,
    shot_counts=(16, 32, 64),
    selections=("kmeans", "random"),
    seed: int = 0,
) -> dict[str, dict]:
    """Leave-one-device-out rows: a device the checkpoint never saw, zero-shot and after shots.

    ``data`` holds programs already measured on ``device`` (its
    :class:`~cdmpp.device.DeviceDescriptor`).  Every row is scored on the same
    programs: those not chosen as a shot by any row.

    Rows:
        - ``zero-shot, descriptor``: a new row started from the unknown device's;
        - ``zero-shot, nearest device <id>``: the nearest known device's row;
        - ``<k> <selection> shots, descriptor + offset``, ``..., nearest + offset``:
          that start, shifted by the shots' mean log residual
          (:func:`fit_device_offset`);
        - ``<k> <selection> shots, nearest + row``: the row fitted to the shots
          (:func:`fit_device_row`), then the offset.

    Returns:
        Metric rows by name (:func:`cdmpp.train.metrics.summary`).
    """
    by_desc, row = new_device_row(model, meta, device, "descriptor")
    by_near, _ = new_device_row(model, meta, device, "nearest")
    everything = np.arange(len(data))
    chosen = {}
    for sel in selections:
        for k in shot_counts:
            chosen[(sel, k)] = select_programs(by_desc, data, everything, AdaptConfig(shots=k, selection=sel, seed=seed))
    used = np.unique(np.concatenate(list(chosen.values()))) if chosen else np.zeros(0, np.int64)
    rest = np.setdiff1d(everything, used)
    true, groups = data.latency[rest], data.workload[rest]

    def score(m):
        return summary(LatencyPredictor(m, {}).predict_featurized(data, rest, device_rows=row), true, groups, weights)

    rows = {"zero-shot, descriptor": score(by_desc)}
    known = [DeviceDescriptor.from_json(d.descriptor) for d in checkpoint_meta(meta).devices]
    known = [d for d in known if d.kind == device.kind]
    if known:
        rows[f"zero-shot, nearest device {nearest_device(device, known).device_id}"] = score(by_near)
    for (sel, k), shots in chosen.items():
        rows[f"{k} {sel} shots, descriptor + offset"] = score(fit_device_offset(by_desc, data, shots, row))
        rows[f"{k} {sel} shots, nearest + offset"] = score(fit_device_offset(by_near, data, shots, row))
        rows[f"{k} {sel} shots, nearest + row"] = score(adapt_device(by_near, data, shots, row, AdaptConfig(method="row")))
    return rows
