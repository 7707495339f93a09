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
   (:func:`cdmpp.device_choice.nearest_device`), and a warning names it.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from .device import DESCRIPTOR_FEATURES, DeviceDescriptor, descriptor_vector, local_cpu, local_gpu, slug
from .errors import UnknownDeviceError
from .schema import parse_checkpoint_meta


class DeviceChoiceWarning(UserWarning):
    """The predictor chose a device for the caller (from this machine's descriptor)."""


def known_devices(metadata: dict) -> list[tuple[int, DeviceDescriptor]]:
    """``(row, descriptor)`` of each device a checkpoint's metadata lists, in row order.

    A checkpoint trained on one device folder (no device table) lists that device
    with row 0.

    Raises:
        CheckpointError: malformed metadata (the field named).
    """
    meta = parse_checkpoint_meta(metadata, Path("config.json"))
    if meta.devices:
        return [(d.row, DeviceDescriptor.from_json(d.descriptor)) for d in meta.devices]
    if meta.device:
        return [(0, DeviceDescriptor.from_json(meta.device))]
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
        """Ids of the known devices, in table order (a device's warm row adds no id)."""
        return list(dict.fromkeys(d.device_id for _, d in self.known))

    def add(self, row: int, descriptor: DeviceDescriptor) -> None:
        """Know one more device-table row, at ``row`` of the model's device table."""
        self.known.append((row, descriptor))

    def descriptor(self, device_id: str, protocol: str = "cold") -> DeviceDescriptor:
        """The descriptor of a known device's row of one timing protocol.

        Raises:
            UnknownDeviceError: ``device_id`` is not known, or not under ``protocol``.
        """
        for _, d in self.known:
            if d.device_id == device_id and d.protocol == protocol:
                return d
        if protocol != "cold" and device_id in self.ids:
            raise UnknownDeviceError(f"this checkpoint did not learn the {protocol} protocol of {device_id} "
                                     f"(its folder had no {protocol} timings when it trained)")
        raise UnknownDeviceError(
            f"unknown device {device_id!r}: this checkpoint knows {', '.join(self.ids) or 'no device'}"
            " (cdmpp adapt learns a new one)"
        )

    def row(self, device_id: str, protocol: str = "cold") -> int:
        """The device-table row of a known device's timing protocol.

        Raises:
            UnknownDeviceError: as :meth:`descriptor`.
        """
        wanted = self.descriptor(device_id, protocol)
        return next(r for r, d in self.known if d is wanted)

    def protocols(self, device_id: str | None) -> list[str]:
        """The timing protocols this checkpoint learned for ``device_id`` (``["cold", "warm"]``
        where its folder had warm timings); empty for ``None`` or an unknown device."""
        return [d.protocol for _, d in self.known if device_id is not None and d.device_id == device_id]

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
        known = [d for _, d in self.known if d.protocol == "cold"]  # a warm row is asked for by its protocol
        kind = "cpu"
        if target is not None:
            matches = devices_for_target(target, known)
            if len(matches) == 1:
                return matches[0]
            if matches:
                return self._one_of(matches)
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


def target_dict(target) -> dict:
    """A TVM target (``Target``, dict or tag string) as a plain dict."""
    if isinstance(target, dict):
        return dict(target)
    if isinstance(target, str) and target.lstrip().startswith("{"):
        import json  # noqa: PLC0415  (only on the branch that needs it)

        return json.loads(target)
    from tvm.target import Target  # noqa: PLC0415  (keeps tvm off this module's import)

    return {str(k): v for k, v in dict(Target(target).export()).items()}


def _avx512_off(target: dict) -> bool:
    mattr = target.get("mattr") or []
    if isinstance(mattr, str):
        mattr = mattr.split(",")
    return any(str(a).strip().startswith("-avx512") for a in mattr)


def _arch_base(arch) -> str:
    """A CUDA arch without its feature suffix: ``"sm_90a"`` (TVM's H100 tag) is ``"sm_90"``."""
    return re.sub(r"^(sm_\d+)[af]$", r"\1", str(arch))


def _tag_model(target) -> str | None:
    """The GPU model a TVM target tag names (``"nvidia/nvidia-h100"`` -> ``"h100"``), else ``None``."""
    if not isinstance(target, str) or "/" not in target or target.lstrip().startswith("{"):
        return None
    name = target.rsplit("/", 1)[-1].lower()
    return name.removeprefix("nvidia-") or None


def devices_for_target(target, known: list[DeviceDescriptor]) -> list[DeviceDescriptor]:
    """The known devices whose target matches ``target``.

    A CPU target matches a device with the same ``mcpu`` and the same AVX-512 switch
    (``mattr=-avx512f`` or not); a CUDA target matches a device with the same ``arch``,
    feature suffix ignored (``sm_90a`` matches ``sm_90``). Where a TVM tag names the
    GPU (``"nvidia/nvidia-h100"``) and a device of that model matches, only those do.
    A target without ``mcpu`` (generic x86-64) or ``arch`` matches nothing.

    Args:
        target: TVM ``Target``, target dict, or tag / JSON string.
        known: the candidate devices.

    Returns:
        The matching devices, in ``known``'s order (possibly empty).
    """
    t = target_dict(target)
    kind = str(t.get("kind", ""))
    out = []
    for descriptor in known:
        d = descriptor.target or {}
        if str(d.get("kind", "")) != kind:
            continue
        if kind == "cuda":
            if t.get("arch") and _arch_base(t.get("arch")) == _arch_base(d.get("arch")):
                out.append(descriptor)
        elif t.get("mcpu") and str(t.get("mcpu")) == str(d.get("mcpu")) and _avx512_off(t) == _avx512_off(d):
            out.append(descriptor)
    model = _tag_model(target)
    if model:
        wanted = slug(model)
        named = [descriptor for descriptor in out if wanted in slug(f"{descriptor.device_id} {descriptor.model}")]
        out = named or out
    return out


def device_similarity(a: DeviceDescriptor, b: DeviceDescriptor) -> float:
    """How alike two devices are, for choosing the nearest known device (higher is closer).

    4 for the same LLVM CPU (or CUDA arch), 2 for the same vector ISA, 1 for the same
    vendor, plus the Jaccard overlap of their ISA flags (0-1); ``-inf`` across kinds
    (CPU against GPU).
    """
    if a.kind != b.kind:
        return float("-inf")
    ta, tb = a.target or {}, b.target or {}
    same_cpu = (ta.get("mcpu") or ta.get("arch")) is not None and (ta.get("mcpu") or ta.get("arch")) == (
        tb.get("mcpu") or tb.get("arch")
    )
    va, vb = descriptor_vector(a), descriptor_vector(b)
    vendor = DESCRIPTOR_FEATURES.index("vendor_intel"), DESCRIPTOR_FEATURES.index("vendor_amd")
    same_vendor = all(va[i] == vb[i] for i in vendor)
    fa, fb = set(a.isa_flags), set(b.isa_flags)
    jaccard = len(fa & fb) / len(fa | fb) if fa | fb else 1.0
    return 4.0 * same_cpu + 2.0 * (a.isa == b.isa) + 1.0 * same_vendor + jaccard


def nearest_device(device: DeviceDescriptor, known: list[DeviceDescriptor]) -> DeviceDescriptor:
    """The known device most like ``device`` (:func:`device_similarity`; first on ties).

    Raises:
        UnknownDeviceError: ``known`` is empty or holds no device of ``device``'s kind.
    """
    scored = [(device_similarity(device, k), -i, k) for i, k in enumerate(known)]
    scored = [s for s in scored if s[0] != float("-inf")]
    if not scored:
        raise UnknownDeviceError(f"no known {device.kind} device to stand in for {device.device_id}")
    return max(scored, key=lambda s: (s[0], s[1]))[2]
