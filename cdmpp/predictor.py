"""The prediction API: scheduled programs in, latencies in seconds out, for a named device
(chosen by the rules of :mod:`cdmpp.device_choice`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np

from cdmpp.featurize import featurize_each, featurize_many
from cdmpp.featurize.trace import TRACE_DIM, schedule_trace_vectors, with_trace_tokens

from .device import (
    PROTOCOLS,
    DeviceDescriptor,
    descriptor_vector,
    device_caches,
    inference_precision,
)
from .device_choice import DeviceChoiceWarning, DeviceTable, known_devices  # noqa: F401  (re-exported)
from .errors import InputError, UnknownDeviceError
from .predictions import ON_ERROR, FeaturizedProgram, OnError, Predictions  # noqa: F401  (re-exported)
from .schema import parse_checkpoint_meta

if TYPE_CHECKING:  # annotations only: importing TVM here would load it with this module
    from tvm.ir import IRModule
    from tvm.target import Target
    from tvm.tirx import PrimFunc

    from .device import DeviceDescriptor
    from .featurize import ProgramAST

TargetLike = Union["Target", dict, str]
"""A TVM target: a ``Target``, a dict (``{"kind": "llvm", ...}``), a tag or a JSON string."""

DEFAULT_CHECKPOINT = Path(__file__).parent / "checkpoints" / "default"

log = logging.getLogger(__name__)


class LatencyPredictor:
    """A trained latency model ready to predict.

    Build it with :meth:`load`.  ``metadata`` holds what the checkpoint recorded
    (dataset, devices, held-out network and its metrics).
    """

    def __init__(self, model, metadata: dict, precision: str = "fp32"):
        self.model = model
        self.precision = inference_precision(precision)  # resolved once: "fp32" or "bf16"
        self.metadata = metadata
        self.meta = parse_checkpoint_meta(metadata, Path("config.json"))  # typed: read and validated once
        self.table = DeviceTable(metadata)

    @classmethod
    def load(cls, path: str | Path | None = None, precision: str = "fp32") -> "LatencyPredictor":
        """Load a checkpoint folder (``model.safetensors`` + ``config.json``).

        Args:
            path: the folder; ``None`` loads the checkpoint shipped in the package,
                trained on the shipped dataset.
            precision: how the transformer runs, ``"fp32"``, ``"bf16"`` or ``"auto"``
                (:data:`cdmpp.device.INFERENCE_PRECISIONS`).

        Raises:
            CheckpointError: a missing or corrupt file.
            InputError: an unknown precision.
        """
        from cdmpp.checkpoint import load_checkpoint  # noqa: PLC0415  (keeps torch off this module's import)
        inference_precision(precision)  # an unknown one fails before the checkpoint is read
        model, meta = load_checkpoint(Path(path) if path is not None else DEFAULT_CHECKPOINT)
        return cls(model, meta, precision)

    @property
    def devices(self) -> list[str]:
        """Ids of the devices this checkpoint predicts for, in table order."""
        return self.table.ids

    def descriptor(self, device_id: str) -> DeviceDescriptor:
        """The :class:`~cdmpp.device.DeviceDescriptor` of a known device.

        Raises:
            UnknownDeviceError: ``device_id`` is not one of :attr:`devices`.
        """
        return self.table.descriptor(device_id)

    def protocols(self, device_id: str | None) -> list[str]:
        """The timing protocols this checkpoint learned for ``device_id``: ``["cold"]``, or
        ``["cold", "warm"]`` where it also learned kernels timed without a cache flush, as
        inside a network (:data:`cdmpp.device.PROTOCOLS`); empty for ``None``."""
        return self.table.protocols(device_id)

    def device_row(self, device: str | DeviceDescriptor | None = None, target: TargetLike | None = None) -> int:
        """The device-table row a prediction for ``device`` reads: the one device resolver.

        A device id or ``None`` (with ``target``) follows :meth:`resolve_device`'s rules.  A
        :class:`~cdmpp.device.DeviceDescriptor` of a device the checkpoint knows reads its
        row; one it does not know gets a new row, zero-shot from its descriptor (the
        unknown-device row's embedding and the descriptor as the device input; CDMPP,
        EuroSys 2024, section 5), kept for this predictor's life, so that every later
        call for that device reads the same row.  A checkpoint without a device table
        reads row 0.

        Returns:
            The row, an int.

        Raises:
            UnknownDeviceError: a device id the checkpoint does not know.
        """
        if self.model.config.num_devices <= 0:
            return 0
        if isinstance(device, DeviceDescriptor):
            if device.device_id not in self.devices:
                self.table.add(self.model.add_device(descriptor_vector(device), 0, device_caches(device)), device)
            return self.table.row(device.device_id, device.protocol)
        return self.table.row(self.resolve_device(device, target).device_id)

    @property
    def default_target(self) -> dict | None:
        """The TVM target (dict) of the device this machine resolves to, if any."""
        if not self.table.known:
            return None
        return self.resolve_device().target or None

    def device_of(self, device: str | None = None, target: TargetLike | None = None) -> DeviceDescriptor | None:
        """The device a prediction is for, resolved in this one place: :meth:`resolve_device`'s
        choice, or ``None`` for a checkpoint without a device table (which predicts for the
        device it was trained on).

        Raises:
            UnknownDeviceError: a device id the checkpoint does not know.
        """
        return self.resolve_device(device, target) if self.table.known else None

    def resolve_device(self, device: str | None = None, target: TargetLike | None = None) -> DeviceDescriptor:
        """The known device a prediction is for (:meth:`cdmpp.device_choice.DeviceTable.resolve`:
        ``device``, else the device ``target`` names, else this machine's nearest).

        Raises:
            UnknownDeviceError: ``device`` is not known, or the checkpoint lists no device.
        """
        return self.table.resolve(device, target)

    def predict(self, mods: Sequence[IRModule | PrimFunc], target: TargetLike | None = None,
                device: str | None = None) -> np.ndarray:
        """Predict latencies on one device.

        Args:
            mods: a sequence of scheduled PrimFuncs, one-PrimFunc IRModules,
                Schedules or TuningRecords (a single one is accepted too).
            target: TVM target (``Target``, dict or tag) for feature extraction, and
                for choosing the device when ``device`` is not given; defaults to the
                chosen device's target.
            device: the id of a device the checkpoint knows (:attr:`devices`).

        Returns:
            float64 ``(len(mods),)``: predicted latency of each program in seconds.

        Raises:
            UnknownDeviceError: ``device`` is not known to the checkpoint.
            UnsupportedProgramError: an input that is not a scheduled program, or
                holds a construct the featurizer does not support.
            InputError: the checkpoint reads schedule traces
                (:attr:`cdmpp.model.ModelConfig.trace_tokens`), was trained without
                trace dropout (``trace_optional``), and an input has none (a PrimFunc or
                IRModule instead of a Schedule or TuningRecord).  A ``trace_optional``
                checkpoint predicts such an input from its leaves alone.
        """
        return self.predict_each(mods, target, device, intervals=False, on_error="raise").latency_s

    @property
    def reads_traces(self) -> bool:
        """Whether the checkpoint reads each program's schedule trace beside its leaves
        (then :meth:`predict` takes Schedules or TuningRecords, and :meth:`predict_trees`
        their ``traces``)."""
        return bool(self.model.config.trace_tokens)

    def trace_vectors(self, programs) -> np.ndarray | None:
        """float32 ``(len(programs), TRACE_DIM)``: each program's schedule-trace vector
        (NaN rows for programs without a trace, when the checkpoint is
        ``trace_optional``), or ``None`` for a checkpoint that reads no traces.

        Raises:
            InputError: a program without a trace, for a checkpoint that needs one.
        """
        if not self.reads_traces:
            return None

        return schedule_trace_vectors(list(programs), allow_missing=self.model.config.trace_optional)

    def _leaves(self, trees: Sequence[ProgramAST], traces: np.ndarray | None):
        """The stacked leaves of ``trees``, with their trace tokens when the checkpoint reads them."""
        from cdmpp.inference import ProgramLeaves  # noqa: PLC0415  (keeps torch off this module's import)

        leaves = ProgramLeaves.from_trees(trees, loops=self.model.config.loop_tokens)
        if not self.reads_traces:
            return leaves
        if traces is None and not self.model.config.trace_optional:
            raise InputError("this checkpoint reads schedule traces (trained with trace tokens, without trace "
                             "dropout): pass Schedules or TuningRecords to predict(), or traces= to predict_trees()")
        return with_trace_tokens(leaves, None if traces is None else np.asarray(traces, dtype=np.float32))

    def predict_trees(self, trees: Sequence[ProgramAST], device: str | None = None,
                      traces: np.ndarray | None = None, protocol: str = "cold") -> np.ndarray:
        """Predicted latencies in seconds, float64 ``(len(trees),)``, of featurized programs
        (:class:`cdmpp.featurize.ProgramAST`, e.g. from ``featurize_many``) on ``device``
        (a known device id; ``None``: :meth:`resolve_device`'s choice).

        ``traces``: float32 ``(len(trees), TRACE_DIM)``, each program's
        :func:`cdmpp.featurize.trace.trace_vector` (NaN rows: no trace); required when
        :attr:`reads_traces` unless the checkpoint is ``trace_optional``, ignored
        otherwise.  ``protocol``: the timing protocol predicted (:meth:`protocols`).

        Raises:
            UnknownDeviceError: ``device`` is not known to the checkpoint, or not under ``protocol``.
            InputError: :attr:`reads_traces`, not ``trace_optional`` and no ``traces``, or
                ``traces`` of another shape.
        """
        row = self._row(self.device_of(device), protocol)
        if len(trees) == 0:
            return np.zeros(0, dtype=np.float64)
        return self.predict_featurized(self._leaves(trees, traces), device_rows=row)

    def predict_featurized(self, data, index=None, device_rows=None) -> np.ndarray:
        """Predicted latencies in seconds, float64 ``(len(index),)``, of programs featurized
        already: a dataset's :class:`cdmpp.featurize.batch.FeaturizedPrograms` (what
        ``cdmpp evaluate``, ``adapt`` and the studies score) or stacked
        :class:`cdmpp.inference.ProgramLeaves`.  The one place the transformer runs.

        Args:
            data: the programs, in this checkpoint's input columns (its trace and loop
                tokens, :func:`cdmpp.featurize.trace.model_inputs`).
            index: int ``(K,)`` programs of ``data`` (default all).
            device_rows: the device-table row of each program, int or int ``(K,)``
                (default ``data.device_row``, else row 0).
        """
        from cdmpp.inference import predict_latency_array  # noqa: PLC0415  (keeps torch off this module's import)

        return predict_latency_array(self.model, data, index, device_row=device_rows, precision=self.precision)


    def predict_interval(self, mods: Sequence[IRModule | PrimFunc], target: TargetLike | None = None,
                         device: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Predict latencies with a 10-90% interval (MC dropout, calibrated on validation
        workloads: :mod:`cdmpp.intervals`; calibrated by :mod:`cdmpp.train.uncertainty`).

        Arguments and errors as :meth:`predict`.

        Returns:
            ``(latency, low, high)``: float64 ``(len(mods),)`` each, in seconds.  The
            point ``latency`` is :meth:`predict`'s; ``low``/``high`` bound the interval
            (the raw MC-dropout percentiles, much too narrow, when the checkpoint records
            no calibration: ``metadata["interval"]``).
        """
        out = self.predict_each(mods, target, device, on_error="raise")
        return out.latency_s, out.low_s, out.high_s

    def predict_trees_interval(self, trees: Sequence[ProgramAST], device: str | None = None,
                               traces: np.ndarray | None = None,
                               protocol: str = "cold") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`predict_interval` of featurized programs (see :meth:`predict_trees`)."""
        from cdmpp.intervals import IntervalConfig, interval, mc_log_latency  # noqa: PLC0415  (keeps torch off this module's import)

        row = self._row(self.device_of(device), protocol)
        n = len(trees)
        if n == 0:
            return (np.zeros(0, dtype=np.float64),) * 3
        data = self._leaves(trees, traces)
        calibration = self.meta.interval
        passes = int(calibration["passes"]) if calibration else IntervalConfig().passes
        point, samples = mc_log_latency(self.model, data, device_row=row, cfg=IntervalConfig(passes=passes))
        low, high = interval(point, samples, calibration)
        bare = self._without_trace(n, traces)
        if bare.any() and self.meta.interval_without_trace:  # programs seen by their leaves alone
            low_b, high_b = interval(point, samples, self.meta.interval_without_trace)
            low, high = np.where(bare, low_b, low), np.where(bare, high_b, high)
        return np.exp(point), low, high

    def predict_each(self, programs: Sequence, target: TargetLike | None = None, device: str | None = None,
                     names: Sequence[str] | None = None, intervals: bool = True, on_error: OnError = "mark",
                     keep_inputs: bool = False, protocol: str = "cold") -> "Predictions":
        """The prediction core: programs in, each one's latency (and 10-90% interval) out.

        Every path that predicts programs goes through it: :meth:`predict` and
        :meth:`predict_interval` (``on_error="raise"``), ``cdmpp predict``, ``cdmpp
        estimate`` and ``POST /estimate`` (:func:`cdmpp.estimate.estimate_network`), the
        HTTP service's ``/predict`` and the MetaSchedule plugin (``on_error="zero"``,
        ``intervals=False``, ``keep_inputs``).  Programs are featurized together
        (:func:`cdmpp.featurize.featurize_each`); each Schedule's or TuningRecord's
        schedule trace is read for a trace-token checkpoint.

        Args:
            programs: PrimFuncs, one-PrimFunc IRModules, Schedules, TuningRecords or
                :class:`FeaturizedProgram` (a single one is accepted too).
            target: TVM target for featurizing and for choosing the device
                (:meth:`device_of`); default the device's.
            device: a device id the checkpoint knows.
            names: a name of each program for the log.
            intervals: also the 10-90% interval (MC dropout, calibrated); ``False``: one
                forward pass, ``low_s``/``high_s`` NaN.
            on_error: what a program that cannot be featurized gets (:data:`OnError`).
            keep_inputs: also return each program's compact AST and trace vector
                (``trees``, ``traces``), to pass back as :class:`FeaturizedProgram`.
            protocol: the timing protocol predicted: ``"cold"`` (a kernel timed alone after
                a cache flush, as collected) or ``"warm"`` (as it runs inside a network),
                where the checkpoint learned it (:meth:`protocols`).

        Returns:
            :class:`Predictions`, each array float64 ``(len(programs),)`` in seconds.

        Raises:
            UnknownDeviceError: an unknown device, or a protocol it did not learn.
                InputError: a program without a trace
                for a checkpoint that needs one, or an unknown ``on_error``.
                UnsupportedProgramError: with ``on_error="raise"``, a program that is not a
                scheduled program the featurizer supports.
        """
        if on_error not in ON_ERROR:
            raise InputError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
        programs = list(programs) if isinstance(programs, (list, tuple)) else [programs]
        descriptor = self.device_of(device, target)
        device_id = descriptor.device_id if descriptor is not None else None
        self._row(descriptor, protocol)  # an unlearned protocol fails before featurizing
        feat_target = target if target is not None else (descriptor.target if descriptor is not None else None)
        n = len(programs)
        raw = [i for i, p in enumerate(programs) if not isinstance(p, FeaturizedProgram)]
        trees: list = [p.tree if isinstance(p, FeaturizedProgram) else None for p in programs]
        problems = [""] * n
        raw_traces = None
        if raw:
            raw_programs = [programs[i] for i in raw]
            if on_error == "raise":
                raw_traces = self.trace_vectors(raw_programs)  # a missing trace is refused before featurizing
                for i, t in zip(raw, featurize_many(raw_programs, feat_target)):
                    trees[i] = t
            else:
                got, why = featurize_each(raw_programs, feat_target, [names[i] for i in raw] if names else None)
                for i, t, w in zip(raw, got, why):
                    trees[i], problems[i] = t, w
        ok = [i for i, t in enumerate(trees) if t is not None]
        out = Predictions(*(np.full(n, np.nan) for _ in range(3)), problems, device_id)
        if on_error == "zero":
            out.latency_s[[i for i in range(n) if trees[i] is None]] = np.inf
        traces = self._traces_of(programs, ok, raw, raw_traces)
        if ok:
            ok_trees = [trees[i] for i in ok]
            if intervals:
                point, low, high = self.predict_trees_interval(ok_trees, device_id, traces, protocol)
                out.low_s[ok], out.high_s[ok] = low, high
            else:
                point = self.predict_trees(ok_trees, device_id, traces, protocol)
            out.latency_s[ok] = point
        if keep_inputs:
            out.trees = list(trees)
            if traces is not None:
                out.traces = np.full((n, traces.shape[1]), np.nan, dtype=np.float32)
                out.traces[ok] = traces
        return out

    def _row(self, descriptor: DeviceDescriptor | None, protocol: str) -> int:
        """The device-table row of a resolved device's ``protocol`` (0 without a table).

        Raises:
            InputError: an unknown protocol.  UnknownDeviceError: one this device's rows lack.
        """
        if protocol not in PROTOCOLS:
            raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if descriptor is None:
            if protocol != "cold":
                raise UnknownDeviceError(f"this checkpoint has no device table, so no {protocol} protocol")
            return 0
        return self.table.row(descriptor.device_id, protocol)

    def _traces_of(self, programs: list, ok: list[int], raw: list[int], raw_traces) -> np.ndarray | None:
        """float32 ``(len(ok), TRACE_DIM)``: the trace vectors of the featurized programs
        ``ok`` (given ones from their :class:`FeaturizedProgram`, the others read from
        their schedule traces), or ``None`` for a checkpoint that reads no traces."""
        if not self.reads_traces or not ok:
            return None
        pos = {i: j for j, i in enumerate(raw)}
        read = [i for i in ok if not isinstance(programs[i], FeaturizedProgram)]
        fresh = (raw_traces[[pos[i] for i in read]] if raw_traces is not None
                 else self.trace_vectors([programs[i] for i in read])) if read else None
        rows, k = [], 0
        for i in ok:
            if isinstance(programs[i], FeaturizedProgram):
                t = programs[i].trace
                rows.append(np.full(TRACE_DIM, np.nan, np.float32) if t is None else np.asarray(t, np.float32))
            else:
                rows.append(fresh[k])
                k += 1
        return np.stack(rows).astype(np.float32)

    def _without_trace(self, n: int, traces: np.ndarray | None) -> np.ndarray:
        """bool ``(n,)``: the programs predicted without a trace token (a ``trace_optional``
        checkpoint given no trace for them)."""
        if not self.model.config.trace_optional:
            return np.zeros(n, dtype=bool)
        if traces is None:
            return np.ones(n, dtype=bool)
        return np.isnan(np.asarray(traces, dtype=np.float32)).any(axis=1)


def predict_latency(mod: IRModule | PrimFunc, target: TargetLike | None = None,
                    checkpoint: str | Path | LatencyPredictor | None = None, device: str | None = None) -> float:
    """Predicted latency in seconds of one scheduled program on one device (see
    :meth:`LatencyPredictor.predict` for ``target`` and ``device``).

    ``checkpoint``: a loaded :class:`LatencyPredictor`, or a checkpoint folder (default: the
    shipped one) loaded for this call alone, about a second; to predict many programs,
    load a :class:`LatencyPredictor` once and pass it, or call its :meth:`~LatencyPredictor.predict`.

    Raises:
        UnknownDeviceError: ``device`` is not known to the checkpoint.
        UnsupportedProgramError: ``mod`` is not a scheduled program the featurizer supports.
    """
    predictor = checkpoint if isinstance(checkpoint, LatencyPredictor) else LatencyPredictor.load(checkpoint)
    return float(predictor.predict([mod], target, device)[0])
