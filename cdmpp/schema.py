"""Typed records of what cdmpp writes beside its tensors: a device folder's manifest and its
task entries, and a checkpoint's metadata.  Each is read and validated here, once
(:func:`parse_manifest`, :func:`parse_checkpoint_meta`); a malformed one gets an error that
names the file and the field.

The models keep fields they do not declare (``extra="allow"``), so a folder or a checkpoint
written by a later cdmpp still reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .device import row_name, split_legacy_row_id
from .errors import CheckpointError, DatasetError


class TaskEntry(BaseModel):
    """One MetaSchedule tuning task of a network, as a device folder's manifest lists it.

    Attributes:
        network: the zoo entry (``resnet_50-b1``, ``sweep-8x512x768``).
        workload_key: the workload's structural hash (the workload file's key).
        task_name: MetaSchedule's task name (``""``: not recorded).
        weight: task weight, calls per inference (1 when not recorded).
        flops: floating-point operations of one call.
        random_programs: records of the task sampled at random before its evolutionary phase.
        tuned_from: where its tuned phase's records begin (their count before it).
        space_exhausted_at: the program count at which its design space ran out.
    """

    model_config = ConfigDict(extra="allow")

    network: str
    workload_key: str
    task_name: str = ""
    weight: int = 1
    flops: float = 0.0
    random_programs: int | None = None
    tuned_from: int | None = None
    space_exhausted_at: int | None = None


class Manifest(BaseModel):
    """A device folder's ``manifest.json``.

    Attributes:
        format: the dataset format's name and version.
        device: the measuring device's descriptor (:class:`cdmpp.device.DeviceDescriptor` as JSON).
        tvm_version: the TVM that sampled and timed the programs.
        measurement: the timing protocol of the first collection (each collection's own is in ``collections``).
        label: how a latency label is made from the repeats.
        inputs: how the programs' inputs were filled.
        sampling: the sampling policy.
        collections: one entry per ``cdmpp collect`` run.
        networks: per network, its task count and input.
        tasks: every task of every network, in collection order.
        held_out: the held-out test networks' workload keys the collections left out.
    """

    model_config = ConfigDict(extra="allow")

    format: str = ""
    device: dict[str, Any] = {}
    tvm_version: str = ""
    measurement: dict[str, Any] = {}
    label: str = ""
    inputs: str = ""
    sampling: dict[str, Any] = {}
    collections: list[dict[str, Any]] = []
    networks: dict[str, dict[str, Any]] = {}
    tasks: list[TaskEntry] = []
    held_out: dict[str, Any] = {}


class CollectPlan(BaseModel):
    """A list of networks to collect and how they were chosen (``cdmpp collect --plan``),
    as ``cdmpp networks --refine-sweep`` writes it.

    Attributes:
        networks: zoo names or sweep entries, in collection order.
        chosen_by: how they were chosen, in words; kept in the manifest as each network's
            ``chosen_by`` and shown on the dataset card.
    """

    model_config = ConfigDict(extra="allow")

    networks: list[str]
    chosen_by: str


def parse_plan(path: Path) -> CollectPlan:
    """The :class:`CollectPlan` in ``path``.

    Raises:
        DatasetError: the file is missing, not JSON, or lacks a field (named).
    """
    try:
        return CollectPlan.model_validate(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as err:  # pydantic's ValidationError is a ValueError
        raise DatasetError(f"{path}: not a collection plan ({err})") from None


class DeviceRow(BaseModel):
    """One row of a checkpoint's device table.

    Attributes:
        row: the row (1-based; 0 is the unknown device's).
        device_id: the device id (a device's cold and warm rows share it).
        descriptor: its :class:`cdmpp.device.DeviceDescriptor` as JSON (its ``protocol``
            tells the warm row from the cold one).
        folder: the device folder it was trained on.
        programs, train_programs: the folder's programs, and those in training.

    A row that names no ``device_id`` takes its descriptor's.  A row written before the
    protocol was a field (``device_id`` ``"<id>+warm"``) is read as the device's id with
    a ``"warm"`` descriptor.
    """

    model_config = ConfigDict(extra="allow")

    row: int
    device_id: str = ""
    descriptor: dict[str, Any] = {}
    folder: str | None = None
    programs: int | None = None
    train_programs: int | None = None

    @model_validator(mode="after")
    def _id_from_descriptor(self) -> DeviceRow:
        device_id, protocol = split_legacy_row_id(self.device_id or str(self.descriptor.get("device_id", "")))
        self.device_id = device_id
        if self.descriptor:
            protocol = self.descriptor.get("protocol") or protocol
            self.descriptor = {**self.descriptor, "device_id": device_id}
            if protocol != "cold":
                self.descriptor["protocol"] = protocol
        return self

    @property
    def protocol(self) -> str:
        """The row's timing protocol, ``"cold"`` or ``"warm"``."""
        return str(self.descriptor.get("protocol", "cold"))

    @property
    def row_name(self) -> str:
        """The row's name in reports (:func:`cdmpp.device.row_name`)."""
        return row_name(self.device_id, self.protocol)


class CheckpointMeta(BaseModel):
    """A checkpoint's metadata (``config.json``'s ``metadata``).

    Attributes:
        devices: the device table, one :class:`DeviceRow` per device (empty for a
            checkpoint trained on one device folder, whose ``device`` is then set).
        device: the one device of a checkpoint without a device table.
        holdout: the network or fold held out of training (``None``: none).
        split: how training and validation programs were drawn, ``split_filters`` what
            they left out, ``excludes_test_networks`` whether the held-out test networks'
            workloads were left out; ``train_programs``, ``val_programs`` and
            ``test_programs`` the counts drawn.
        cmd_target_device: the device whose programs the CMD term aligned with, if any.
        interval, interval_without_trace: the 10-90% interval's calibrations.
        validation_metrics, validation_metrics_without_trace, holdout_metrics: the
            rows of the model card (``heldout_metrics`` in checkpoints written before).
        train_config: the training settings.
    """

    model_config = ConfigDict(extra="allow")

    dataset: str | None = None
    devices: list[DeviceRow] = []
    device: dict[str, Any] | None = None
    holdout: str | None = None
    split: str | None = None
    split_filters: dict[str, Any] | None = None
    excludes_test_networks: bool = False
    train_programs: int | None = None
    val_programs: int | None = None
    test_programs: int | None = None
    cmd_target_device: str | None = None
    train_config: dict[str, Any] = {}
    tree_inputs: str | None = None
    interval: dict[str, Any] | None = None
    interval_without_trace: dict[str, Any] | None = None
    validation_metrics: dict[str, Any] = {}
    validation_metrics_without_trace: dict[str, Any] = {}
    holdout_metrics: dict[str, Any] = {}


def tasks_of(manifest: dict | Manifest) -> list[TaskEntry]:
    """The typed task entries of a manifest (its JSON dict, validated, or a :class:`Manifest`).

    Raises:
        DatasetError: a malformed task entry (the field named).
    """
    if isinstance(manifest, Manifest):
        return manifest.tasks
    try:
        return [TaskEntry.model_validate(t) for t in manifest.get("tasks", [])]
    except ValidationError as err:
        raise DatasetError(f"malformed manifest task entry: {_field_error(err)}") from None


def _field_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return f"field {where}: {first['msg']}" + (f" ({len(err.errors())} problems)" if len(err.errors()) > 1 else "")


def parse_manifest(data: object, path: Path) -> Manifest:
    """The typed manifest of ``path`` from its parsed JSON.

    Raises:
        DatasetError: a malformed manifest; the message names the file and the field.
    """
    try:
        return Manifest.model_validate(data)
    except ValidationError as err:
        raise DatasetError(f"malformed manifest {path}: {_field_error(err)}") from None


def parse_checkpoint_meta(data: object, path: Path) -> CheckpointMeta:
    """The typed metadata of the checkpoint config ``path`` from its parsed JSON.

    Raises:
        CheckpointError: malformed metadata; the message names the file and the field.
    """
    try:
        return CheckpointMeta.model_validate(data)
    except ValidationError as err:
        raise CheckpointError(f"malformed checkpoint metadata in {path}: {_field_error(err)}") from None
