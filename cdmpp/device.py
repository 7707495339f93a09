"""Device descriptors: a stable id, the TVM target and what the hardware is.

Every tuning record in a cdmpp dataset lives under the id of the device that
measured it.  A CPU id is its model name, LLVM CPU name and widest vector ISA
as used by the generated code (``cpu-<model>-<llvm cpu>-<isa>``); switching AVX-512 code generation off gives a
second real device on the same CPU (issue 3).  A GPU id is its name as the driver
reports it and its compute capability (``gpu-<name>-sm<XY>``).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, field

_ISA_ORDER = ("avx512f", "avx2", "avx", "sse4_2", "neon", "asimd")


class DeviceUnavailableError(RuntimeError):
    """The measuring device asked for is not present on this host (the message names it)."""


@dataclass(frozen=True)
class DeviceDescriptor:
    """A measuring device.

    Attributes:
        device_id: stable id, e.g. ``"cpu-intel_xeon_processor-emeraldrapids-avx512"``.
        kind: ``"cpu"`` or ``"gpu"``.
        model: CPU model name or GPU name as the OS reports it.
        cores: cores used by the generated code (TVM ``num-cores``).
        isa: the widest vector ISA the generated code may use.
        isa_flags: the vector ISA flags the hardware reports.
        target: the TVM target as a JSON-able dict.
    """

    device_id: str
    kind: str
    model: str
    cores: int
    isa: str
    isa_flags: tuple[str, ...] = field(default_factory=tuple)
    target: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """A JSON-able dict (``isa_flags`` as a list)."""
        out = asdict(self)
        out["isa_flags"] = list(self.isa_flags)
        return out

    @staticmethod
    def from_json(obj: dict) -> "DeviceDescriptor":
        """Inverse of :meth:`to_json`."""
        return DeviceDescriptor(**{**obj, "isa_flags": tuple(obj.get("isa_flags", ()))})


def _slug(text: str) -> str:
    text = re.sub(r"\(r\)|\(tm\)|cpu @.*$", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def _cpu_info() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and val.strip():
                    model = val.strip()
                elif key in ("flags", "Features"):
                    flags.update(val.split())
    except OSError:
        pass
    return model, flags


def local_cpu(num_cores: int | None = None, disable_avx512: bool = False) -> DeviceDescriptor:
    """The CPU of this machine as a measuring device.

    Args:
        num_cores: cores for the generated code; defaults to ``os.cpu_count()``.
        disable_avx512: switch AVX-512 code generation off (``-mattr=-avx512f``), which
            makes a second device on an AVX-512 CPU.

    Returns:
        The descriptor; its ``target`` pins ``mcpu`` to the host CPU so that the
        generated code uses the host's vector ISA.
    """
    from tvm.target import codegen  # pylint: disable=import-outside-toplevel

    model, flags = _cpu_info()
    cores = int(num_cores or os.cpu_count() or 1)
    isa_flags = tuple(sorted(f for f in flags if f.startswith(("avx", "sse4", "fma", "amx", "neon", "asimd"))))
    usable = set(flags)
    mcpu = str(codegen.llvm_get_system_cpu())
    target: dict = {"kind": "llvm", "num-cores": cores, "mcpu": mcpu}
    if disable_avx512:
        usable = {f for f in usable if not f.startswith("avx512")}
        target["mattr"] = ["-avx512f"]
    isa = next((i for i in _ISA_ORDER if i in usable), platform.machine())
    isa = "avx512" if isa == "avx512f" else isa
    return DeviceDescriptor(
        device_id=f"cpu-{_slug(model)}-{_slug(mcpu)}-{isa}",
        kind="cpu",
        model=model,
        cores=cores,
        isa=isa,
        isa_flags=isa_flags,
        target=target,
    )


def _gpu_descriptor(name: str, model: str, arch: str, limits: dict, num_cores: int | None) -> DeviceDescriptor:
    """A GPU descriptor whose CUDA target carries the limits MetaSchedule's ``TuneContext``
    needs, with this host's CPU as the target host."""
    host = local_cpu(num_cores)
    target = {
        "kind": "cuda",
        "arch": arch,
        "max_num_threads": int(limits["max_threads_per_block"]),
        "max_threads_per_block": int(limits["max_threads_per_block"]),
        "max_shared_memory_per_block": int(limits["max_shared_memory_per_block"]),
        "thread_warp_size": int(limits["thread_warp_size"]),
        "registers_per_block": int(limits.get("registers_per_block", 65536)),
        "host": host.target,
    }
    return DeviceDescriptor(
        device_id=f"gpu-{_slug(name)}-{arch.replace('_', '')}",
        kind="gpu",
        model=model,
        cores=host.cores,
        isa=arch,
        isa_flags=(),
        target=target,
    )


def local_gpu(index: int = 0, num_cores: int | None = None) -> DeviceDescriptor:
    """NVIDIA GPU ``index`` of this machine as a measuring device (CUDA).

    Args:
        index: CUDA device ordinal.
        num_cores: cores for the host-side code; defaults to ``os.cpu_count()``.

    Returns:
        The descriptor: ``device_id`` ``gpu-<name>-sm<XY>`` (e.g.
        ``"gpu-nvidia_h100_80gb_hbm3-sm90"``), ``kind`` ``"gpu"``, ``isa`` the compute
        capability, and a CUDA ``target`` whose arch and limits are read from the device,
        with this host's CPU as the target host.

    Raises:
        DeviceUnavailableError: TVM sees no CUDA device ``index`` (no GPU, no driver, or a
            TVM built without CUDA).
    """
    import tvm  # pylint: disable=import-outside-toplevel

    try:
        dev = tvm.cuda(index)
        present = bool(dev.exist)
    except Exception:  # noqa: BLE001  a TVM without the CUDA runtime raises its own error types
        present = False
    if not present:
        raise DeviceUnavailableError(
            f"no CUDA GPU {index} visible to TVM on this host: CUDA programs can be sampled, featurized "
            "and built here (cdmpp.device.gpu_from_tag), but timing them needs the GPU"
        )
    limits = {
        "max_threads_per_block": dev.max_threads_per_block,
        "max_shared_memory_per_block": dev.max_shared_memory_per_block,
        "thread_warp_size": dev.warp_size,
    }
    name = str(dev.device_name)
    return _gpu_descriptor(name, name, "sm_" + str(dev.compute_version).replace(".", ""), limits, num_cores)


def gpu_from_tag(tag: str = "nvidia/nvidia-h100", num_cores: int | None = None) -> DeviceDescriptor:
    """A GPU described by a TVM target tag, for sampling, featurizing and building CUDA
    programs on a machine without that GPU (nothing can be timed with it).

    Args:
        tag: a TVM CUDA target tag, e.g. ``"nvidia/nvidia-h100"``.
        num_cores: cores for the host-side code; defaults to ``os.cpu_count()``.

    Returns:
        A descriptor with ``device_id`` ``gpu-<tag name>-sm<XY>`` and the tag's arch and
        limits (``model`` is the tag).

    Raises:
        ValueError: ``tag`` is not a CUDA target tag known to TVM.
    """
    from tvm.target import Target  # pylint: disable=import-outside-toplevel

    try:
        t = dict(Target(tag).export())
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        raise ValueError(f"{tag!r} is not a TVM target tag: {err}") from err
    if str(t.get("kind")) != "cuda":
        raise ValueError(f"{tag!r} is a {t.get('kind')} target, not a CUDA GPU")
    return _gpu_descriptor(tag.rsplit("/", 1)[-1], tag, str(t.get("arch", "sm_80")), t, num_cores)
