"""A MetaSchedule cost-model plugin backed by cdmpp.

``PyCostModel.predict`` returns scores where higher means faster.  MetaSchedule's
``EvolutionarySearch`` keeps every generation's candidates in one heap ordered by
score and samples parents in proportion to it, so the scores of a whole task must be
on one scale.  :class:`CdmppCostModel` scores a candidate ``1e-6 s / latency``: a
candidate's score depends on its own predicted latency only, never on which other
candidates share the call (TVM's ``XGBModel`` scores ``min_cost / cost`` with the task's
best *measured* cost, also one scale per task).

Online adaptation: ``update`` receives the task's measured trials.  The pretrained
transformer's log-latency is the base margin of a small XGBoost over the same
programs' leaf features summed per program (as TVM's XGBModel sums its per-store
rows) and their schedule-trace decisions (:func:`cdmpp.featurize.trace.trace_vector`;
TLP, ASPLOS 2023, reads the same decisions), so the trees learn the transformer's
residual on this device and task, and take over as trials accumulate (TenSet's transfer-tuning, NeurIPS 2021, section 6, fits
the same residual idea with a local model).

    >>> from cdmpp.tuning.cost_model import CdmppCostModel
    >>> ms.tune_tir(mod, target, work_dir, max_trials_global=64,
    ...             cost_model=CdmppCostModel())  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from cdmpp.device import DeviceDescriptor
from cdmpp.errors import CheckpointError
from cdmpp.featurize import FEATURE_DIM
from cdmpp.featurize.trace import TRACE_DIM, schedule_trace_vectors
from cdmpp.predictor import DEFAULT_CHECKPOINT, LatencyPredictor
from cdmpp.records import label, valid_run_secs
from cdmpp.tvm_compat import derived_object, ms, structural_hash

from .config import OBJECTIVES, OnlineConfig

logger = logging.getLogger(__name__)

SCORE_REFERENCE_S = 1e-6
"""A candidate's score is ``SCORE_REFERENCE_S / predicted latency`` (1.0 for a 1 us program)."""

ONLINE_FILE = "online_trials.npz"
ONLINE_CONFIG_FILE = "online.json"


@dataclass
class _Entry:
    """What the model knows of one program: its transformer log-latency, summed leaf
    features and schedule-trace vector."""

    base: float  # natural log of seconds
    leaf_sum: np.ndarray  # float32 (FEATURE_DIM,)
    trace: np.ndarray  # float32 (TRACE_DIM,); NaN: no trace


@derived_object
class CdmppCostModel(ms.cost_model.PyCostModel):
    """cdmpp's latency predictor as a MetaSchedule cost model, adapted online to the trials.

    Featurized programs are cached by structural hash, since the evolutionary search
    scores the same schedules again and again.  A candidate that cannot be featurized
    scores 0.0 (the lowest) and the log says why; it never fails the call.

    The device it predicts for follows :class:`cdmpp.LatencyPredictor`'s rule: ``device``
    when given, else the device whose target matches the tuning context's target
    (``mcpu``), else this machine's nearest known device (with a warning).  It is
    chosen at the first ``predict`` and logged.

    Args:
        checkpoint: checkpoint folder; ``None`` uses the shipped one.
        online: how to learn from measured trials (default :class:`OnlineConfig`).
        device: a device id the checkpoint knows, or ``None``.
        precision: how the transformer runs (:data:`cdmpp.device.INFERENCE_PRECISIONS`): ``"fp32"``,
            or ``"bf16"`` / ``"auto"`` (bfloat16 matrix products where the CPU has AVX512-BF16
            or AMX; RESULTS.md, section "Speed", has its cost and accuracy).

    Raises:
        UnknownDeviceError: ``device`` is not known to the checkpoint.
        InputError: an unknown precision.
    """

    def __init__(self, checkpoint: str | None = None, online: OnlineConfig | None = None, device: str | None = None,
                 precision: str = "fp32"):
        super().__init__()
        self.checkpoint = checkpoint
        self.precision = precision
        self.online = online or OnlineConfig()
        self.device = device
        self.device_id: str | None = None  # the device predicted for, set at the first predict
        self.predictor = None
        self._cache: dict[str, _Entry | None] = {}
        self._trials: dict[str, float] = {}  # program key -> measured log-latency (natural log of seconds)
        self._task: dict[str, str] = {}  # program key -> its task's workload key (the ranking objective's group)
        self._offset = 0.0
        self._booster = None
        self._announced = False
        self._load_predictor(checkpoint)
        if device is not None:
            self.predictor.descriptor(device)  # an unknown id fails here, not in the middle of tuning

    # -- persistence -------------------------------------------------------------------------
    @classmethod
    def guide(cls, checkpoint: str | Path | None = None) -> Callable[[DeviceDescriptor], "CdmppCostModel"]:
        """A factory of the plugin as the collector's tuned-phase guide
        (:func:`cdmpp.collect.collect`'s ``guide``): a new plugin with ``checkpoint``
        (``None``: the shipped one) per task, predicting for the collecting device when the
        checkpoint knows it, else for the device its rule picks from the tuning target."""

        def make(device: DeviceDescriptor) -> CdmppCostModel:
            model = cls(str(checkpoint) if checkpoint else None)
            if device.device_id in model.predictor.devices:
                model.device = device.device_id
            return model

        return make

    def _load_predictor(self, path: str | None) -> None:

        self.predictor = LatencyPredictor.load(path, self.precision)

    def load(self, path: str) -> None:
        """Load a folder written by :meth:`save` (or a plain checkpoint folder), adapted state included.

        Raises:
            CheckpointError: a missing or corrupt checkpoint file.
            ValueError: a corrupt ``online_trials.npz``.
        """
        self.checkpoint = path
        self._load_predictor(path)
        self._cache.clear()
        self._trials.clear()
        self._task.clear()
        folder = Path(path)
        if (folder / ONLINE_CONFIG_FILE).exists():
            self.online = OnlineConfig(**json.loads((folder / ONLINE_CONFIG_FILE).read_text(encoding="utf-8")))
        if (folder / ONLINE_FILE).exists():
            try:
                with np.load(folder / ONLINE_FILE, allow_pickle=False) as z:
                    keys, base, leaf, y = z["keys"], z["base"], z["leaf_sum"], z["log_latency"]
                    # a state saved before the trees read the trace: its programs' traces are missing
                    trace = z["trace"] if "trace" in z.files else np.full((len(keys), TRACE_DIM), np.nan, np.float32)
                    task = z["task"] if "task" in z.files else np.full(len(keys), "", dtype=str)  # one group
            except (OSError, KeyError, ValueError) as err:
                raise CheckpointError(f"corrupt adapted state {folder / ONLINE_FILE}: {err}") from err
            if leaf.ndim != 2 or leaf.shape[1] != FEATURE_DIM:
                raise CheckpointError(
                    f"adapted state {folder / ONLINE_FILE} has {leaf.shape[-1]} leaf features per program, "
                    f"this featurizer {FEATURE_DIM}: it was saved by another featurizer version"
                )
            if trace.shape != (len(keys), TRACE_DIM):
                raise CheckpointError(f"adapted state {folder / ONLINE_FILE} has trace vectors of shape {trace.shape}, "
                                      f"expected ({len(keys)}, {TRACE_DIM})")
            for k, b, p, t, v, g in zip(keys, base, leaf, trace, y, task):
                self._cache[str(k)] = _Entry(float(b), p.astype(np.float32), t.astype(np.float32))
                self._trials[str(k)] = float(v)
                self._task[str(k)] = str(g)
        self._refit()

    def save(self, path: str) -> None:
        """Write the checkpoint in use and the adapted state (the measured trials) to ``path``."""

        folder = Path(path)
        src = Path(self.checkpoint or DEFAULT_CHECKPOINT)
        if src.resolve() != folder.resolve():
            shutil.copytree(src, folder, dirs_exist_ok=True)
        (folder / ONLINE_CONFIG_FILE).write_text(json.dumps(asdict(self.online)), encoding="utf-8")
        keys = [k for k in self._trials if self._cache.get(k) is not None]
        np.savez(
            folder / ONLINE_FILE,
            keys=np.asarray(keys, dtype=str),
            base=np.asarray([self._cache[k].base for k in keys], dtype=np.float64),
            leaf_sum=np.stack([self._cache[k].leaf_sum for k in keys]).astype(np.float32)
            if keys
            else np.zeros((0, FEATURE_DIM), np.float32),
            trace=np.stack([self._cache[k].trace for k in keys]).astype(np.float32)
            if keys
            else np.zeros((0, TRACE_DIM), np.float32),
            log_latency=np.asarray([self._trials[k] for k in keys], dtype=np.float64),
            task=np.asarray([self._task.get(k, "") for k in keys], dtype=str),
        )

    # -- features ----------------------------------------------------------------------------
    def _entries(self, schedules: list, target) -> list[_Entry | None]:
        """The cached entry of each scheduled program (featurized now when new; ``None``: cannot be featurized)."""
        keys = [str(structural_hash(s.mod)) for s in schedules]
        new = {}
        for k, sch in zip(keys, schedules):
            if k not in self._cache and k not in new:
                new[k] = sch
        if new:
            self._featurize(list(new), list(new.values()), target)
        return [self._cache[k] for k in keys]

    def _featurize(self, keys: list[str], schedules: list, target) -> None:
        # the predictor's core, without intervals; a candidate that cannot be featurized is scored 0
        pred = self.predictor.predict_each(schedules, target, self.device_id, [f"candidate {k}" for k in keys],
                                           intervals=False, on_error="zero", keep_inputs=True)
        ok = [i for i, t in enumerate(pred.trees) if t is not None]
        for i, t in enumerate(pred.trees):
            if t is None:
                self._cache[keys[i]] = None
        if not ok:
            return
        # a checkpoint trained with trace tokens read each candidate's own trace; the residual trees read it too
        traces = pred.traces[ok] if pred.traces is not None else None
        if traces is None:  # a leaves-only checkpoint: read the traces only for trees that use them
            use = self.online.enabled and self.online.trace_inputs
            traces = (schedule_trace_vectors([schedules[i] for i in ok], allow_missing=True) if use
                      else np.full((len(ok), TRACE_DIM), np.nan, dtype=np.float32))
        for j, i in enumerate(ok):
            leaf_sum = pred.trees[i].leaf_features.sum(0, dtype=np.float64).astype(np.float32)
            self._cache[keys[i]] = _Entry(float(np.log(pred.latency_s[i])), leaf_sum, np.asarray(traces[j], np.float32))

    def _tree_inputs(self, entries: list[_Entry]) -> np.ndarray:
        """float32 ``(len(entries), FEATURE_DIM [+ TRACE_DIM])``: the residual trees' input."""
        leaf = np.stack([e.leaf_sum for e in entries])
        if not self.online.trace_inputs:
            return leaf
        return np.concatenate([leaf, np.stack([e.trace for e in entries])], axis=1)

    # -- the PyCostModel interface -----------------------------------------------------------
    def _log_latency(self, entries: list[_Entry]) -> np.ndarray:
        base = np.asarray([e.base for e in entries], dtype=np.float64) + self._offset
        if self._booster is None or not entries:
            return base
        import xgboost as xgb  # noqa: PLC0415  (keeps xgboost off this module's import)

        d = xgb.DMatrix(self._tree_inputs(entries), base_margin=base)
        return self._booster.predict(d, output_margin=True).astype(np.float64)

    def predict(self, context, candidates) -> np.ndarray:
        """Scores, float64 ``(len(candidates),)``: ``1e-6 s / predicted latency``, higher is faster.

        A candidate's score depends only on that candidate (and on the trials learned so
        far), so scores of one task compare across calls.  Unfeaturizable candidates
        score 0.0.
        """
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        if not self._announced:
            self._choose_device(context.target)
            self._announced = True
        entries = self._entries([c.sch for c in candidates], context.target)
        ok = [i for i, e in enumerate(entries) if e is not None]
        scores = np.zeros(len(candidates), dtype=np.float64)
        if ok:
            scores[ok] = SCORE_REFERENCE_S / np.exp(self._log_latency([entries[i] for i in ok]))
        return scores

    def _choose_device(self, target) -> None:
        descriptor = self.predictor.device_of(self.device, target)
        if descriptor is not None:
            self.device_id = descriptor.device_id
        logger.info("cdmpp cost model: scoring with checkpoint %s for device %s; tuning target %s",
                    self.checkpoint or "(shipped)", self.device_id or "(unrecorded)", target)

    def update(self, context, candidates, results) -> None:
        """Learn from measured trials: each ``RunnerResult`` with ``run_secs`` (seconds) and no
        error is a label (log of the median of its repeats, the label everything else uses); failed trials are ignored."""
        if not self.online.enabled or not candidates:
            return
        keep = []
        for c, r in zip(candidates, results):
            secs = valid_run_secs(r.run_secs)
            if r.error_msg is None and secs is not None:
                keep.append((c.sch, float(np.log(label(secs)))))
        if not keep:
            return
        if not self._announced:
            self._choose_device(context.target)
            self._announced = True
        entries = self._entries([sch for sch, _ in keep], context.target)
        task = str(structural_hash(context.mod)) if context.mod is not None else ""
        for (sch, y), e in zip(keep, entries):
            if e is not None:
                key = str(structural_hash(sch.mod))
                self._trials[key] = y
                self._task[key] = task
        self._refit()

    def _refit(self) -> None:
        """Fit the level offset and, with enough trials, the residual trees."""
        keys = [k for k in self._trials if self._cache.get(k) is not None]
        self._booster = None
        if not keys:
            self._offset = 0.0
            return
        base = np.asarray([self._cache[k].base for k in keys])
        y = np.asarray([self._trials[k] for k in keys])
        self._offset = float(np.mean(y - base))
        if len(keys) < self.online.min_trials:
            return
        import xgboost as xgb  # noqa: PLC0415  (keeps xgboost off this module's import)

        o = self.online
        if o.objective == "pairwise":  # the trials of one task form one query group, in order
            order = sorted(range(len(keys)), key=lambda i: self._task.get(keys[i], ""))
            keys, base, y = [keys[i] for i in order], base[order], y[order]
        d = xgb.DMatrix(self._tree_inputs([self._cache[k] for k in keys]), label=y, base_margin=base + self._offset)
        if o.objective == "pairwise":
            _, sizes = np.unique([self._task.get(k, "") for k in keys], return_counts=True)
            d.set_group(sizes)
        params = {"max_depth": o.max_depth, "eta": o.learning_rate, "seed": o.seed, "nthread": 1,
                  "objective": OBJECTIVES[o.objective], "base_score": 0.0}
        self._booster = xgb.train(params, d, num_boost_round=o.rounds)

    @property
    def trials_seen(self) -> int:
        """Measured trials learned from so far."""
        return sum(1 for k in self._trials if self._cache.get(k) is not None)
