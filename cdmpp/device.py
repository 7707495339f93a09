"""Device descriptors: a stable id, the TVM target and what the hardware is.

Every tuning record in a cdmpp dataset lives under the id of the device that
measured it.  A CPU id is its model name, LLVM CPU name and widest vector ISA
as used by the generated code (``cpu-<model>-<llvm cpu>-<isa>``); switching AVX-512 code generation off gives a
second real device on the same CPU (issue 3).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass, field

_ISA_ORDER = ("avx512f", "avx2", "avx", "sse4_2", "neon", "asimd")


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
