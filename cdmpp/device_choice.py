"""Which device a prediction is for: the devices a checkpoint knows, by row of its device
table, and the rule that picks one.

A checkpoint knows a list of devices (:attr:`DeviceTable.ids`).  Every prediction is for
one of them, chosen by :meth:`DeviceTable.resolve`:

1. ``device=`` names a device id the checkpoint knows (an unknown id raises
   :class:`~cdmpp.errors.UnknownDeviceError`);
2. otherwise a ``target=`` whose ``mcpu`` (and AVX-512 switch) or CUDA ``arch``
   matches a known device's target picks that device. Where a CUDA arch matches
   several GPUs (the H100 and H200 are both sm_90), a TVM tag naming the model
   (``"nvidia/nvidia-h100"``) picks it, else this host's GPU if it is among them, else
   the first, and a warning names the others;
3. otherwise this machine's descriptor (:func:`cdmpp.device.local_cpu`) picks the
   known device with the same id, or the nearest one
   (:func:`cdmpp.device.nearest_device`), and a warning names it.
"""

from __future__ import annotations

import warnings

from .dataset import WARM_SUFFIX, warm_device_id
from .device import DeviceDescriptor, devices_for_target, local_cpu, local_gpu, nearest_device
from .errors import UnknownDeviceError


class DeviceChoiceWarning(UserWarning):
    """The predictor chose a device for the caller (from this machine's descriptor)."""


def known_devices(metadata: dict) -> list[tuple[int, "DeviceDescriptor"]]:  # noqa: F821
    """``(row, descriptor)`` of each device a checkpoint's metadata lists, in row order.

    A checkpoint trained on one device folder (no device table) lists that device
    with row 0.
    """

    if metadata.get("devices"):
        return [(int(d["row"]), DeviceDescriptor.from_json(d["descriptor"])) for d in metadata["devices"]]
    dev = metadata.get("device")
    if dev:
        return [(0, DeviceDescriptor.from_json(dev))]
    return []


class DeviceTable:
    """The devices a checkpoint knows, ``(row, descriptor)`` in row order, and the choice
    of one for a prediction.  It remembers the warnings it gave (once per choice) and this
    host's GPU (read once).

    Args:
        metadata: the checkpoint's metadata (``devices``, or ``device`` for a checkpoint
            trained on one device folder).
    """

    def __init__(self, metadata: dict):
        self.known = known_devices(metadata)
        self._warned: set[str] = set()
        self._local_gpu: str | None = None  # this host's GPU id ("" for none), read once

    @property
    def ids(self) -> list[str]:
        """Ids of the known devices, in table order."""
        return [d.device_id for _, d in self.known]

    def add(self, row: int, descriptor: DeviceDescriptor) -> None:
        """Know one more device, at ``row`` of the model's device table."""
        self.known.append((row, descriptor))

    def descriptor(self, device_id: str) -> DeviceDescriptor:
        """The descriptor of a known device.

        Raises:
            UnknownDeviceError: ``device_id`` is not known.
        """
        for _, d in self.known:
            if d.device_id == device_id:
                return d
        raise UnknownDeviceError(
            f"unknown device {device_id!r}: this checkpoint knows {', '.join(self.ids) or 'no device'}"
            " (cdmpp adapt learns a new one)"
        )

    def row(self, device_id: str) -> int:
        """The device-table row of a known device."""
        return next(r for r, d in self.known if d.device_id == device_id)

    def warm(self, device_id: str | None) -> str | None:
        """The id of ``device_id``'s warm protocol row when the checkpoint learned it, else ``None``."""
        if device_id is None:
            return None
        warm = warm_device_id(device_id)
        return warm if warm in self.ids else None

    def resolve(self, device: str | None = None, target=None) -> DeviceDescriptor:
        """The known device a prediction is for (the rules are in the module docstring).

        Args:
            device: a device id, or ``None``.
            target: a TVM target (``Target``, dict, tag or JSON string), or ``None``.

        Returns:
            The device's :class:`~cdmpp.device.DeviceDescriptor`.

        Raises:
            UnknownDeviceError: ``device`` is not known, or the checkpoint lists no device.
        """

        if device is not None:
            return self.descriptor(device)
        if not self.known:
            raise UnknownDeviceError("this checkpoint records no device")
        known = [d for _, d in self.known if not d.device_id.endswith(WARM_SUFFIX)]  # a protocol row is asked by id
        kind = "cpu"
        if target is not None:
            matches = devices_for_target(target, known)
            if len(matches) == 1:
                return matches[0]
            if matches:
                return self._one_of(matches)
            from .device import target_dict  # noqa: PLC0415  (only on the branch that needs it)

            kind = "gpu" if str(target_dict(target).get("kind")) == "cuda" else "cpu"
        local = local_cpu()
        if kind == "cpu":
            exact = [d for d in known if d.device_id == local.device_id]
            chosen = exact[0] if exact else None
        else:
            chosen = None
        if chosen is None:
            same_kind = [d for d in known if d.kind == kind] or known
            chosen = nearest_device(local, same_kind) if kind == "cpu" else same_kind[0]
            why = (
                f"this machine ({local.device_id}) is not among them; the nearest known device is"
                if kind == "cpu"
                else "the target matches none of them; the first known GPU is"
            )
        else:
            why = "this machine is"
        self._warn_once(
            f"{chosen.device_id}|{why}",
            f"no device or matching target given: predicting for {chosen.device_id} ({why} {chosen.device_id}; "
            f"known: {', '.join(self.ids)}). Pass device= to choose.",
            stacklevel=4,
        )
        return chosen

    def _warn_once(self, key: str, message: str, stacklevel: int) -> None:
        """A :class:`DeviceChoiceWarning`, once per predictor and ``key``."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, DeviceChoiceWarning, stacklevel=stacklevel)

    def _one_of(self, matches: list):
        """One of several known devices a target matches (two GPUs of one CUDA arch):
        this host's GPU where it is among them, else the first, with a warning naming
        the others."""

        if self._local_gpu is None:
            try:
                self._local_gpu = local_gpu().device_id
            except (ImportError, RuntimeError):  # DeviceUnavailableError is a RuntimeError
                self._local_gpu = ""
        here = [d for d in matches if d.device_id == self._local_gpu]
        if here:
            return here[0]
        chosen = matches[0]
        self._warn_once(
            f"{chosen.device_id}|several",
            f"the target matches {len(matches)} known devices ({', '.join(d.device_id for d in matches)}): "
            f"predicting for {chosen.device_id}. Pass device= to choose.",
            stacklevel=5,
        )
        return chosen
