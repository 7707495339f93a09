"""Device descriptors: a stable id, the TVM target and what the hardware is.

Every tuning record in a cdmpp dataset lives under the id of the device that
measured it.  A CPU id is its model name, LLVM CPU name and widest vector ISA
as used by the generated code (``cpu-<model>-<llvm cpu>-<isa>``); switching AVX-512 code generation off gives a
second real device on the same CPU.  A GPU id is its name as the driver
reports it and its compute capability (``gpu-<name>-sm<XY>``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from cdmpp.errors import DeviceUnavailableError, InputError

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
        caches: bytes of the L1 data cache and the L2 of one core and of the L3, as the
            measuring machine reports them (``/sys/devices/system/cpu``); empty where it
            was not recorded (folders collected before it was): :func:`device_caches`
            then reads the microarchitecture's.
        vm_call_s: seconds the Relax VM spends per kernel call outside the kernel, and
        vm_entry_s: seconds per inference outside any call, both measured at collection
            (:func:`cdmpp.collect.vm_call.measure_vm_call`); 0 where not measured.
        protocol: the timing protocol behind the labels of this row of a model's device
            table: ``"cold"`` (a cache flush before each repeat) or ``"warm"`` (back to
            back, as a kernel runs inside a network).  A model has a row per device and
            protocol: the device's two rows share its ``device_id`` and differ in
            ``protocol`` (:attr:`row_name` names each).
    """

    device_id: str
    kind: str
    model: str
    cores: int
    isa: str
    isa_flags: tuple[str, ...] = field(default_factory=tuple)
    target: dict = field(default_factory=dict)
    caches: tuple[int, ...] = field(default_factory=tuple)
    vm_call_s: float = 0.0
    vm_entry_s: float = 0.0
    protocol: str = "cold"

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")

    @property
    def row_name(self) -> str:
        """The name of this device-table row in reports and keys: the device id, followed by
        `` (warm)`` for the warm protocol's row."""
        return row_name(self.device_id, self.protocol)

    def to_json(self) -> dict:
        """A JSON-able dict (``isa_flags`` and ``caches`` as lists; ``caches``, ``vm_call_s``,
        ``vm_entry_s`` and a ``"cold"`` protocol left out)."""
        out = asdict(self)
        out["isa_flags"] = list(self.isa_flags)
        out["caches"] = list(self.caches)
        for key in ("caches", "vm_call_s", "vm_entry_s"):
            if not out[key]:
                del out[key]
        if self.protocol == "cold":
            del out["protocol"]
        return out

    @staticmethod
    def from_json(obj: dict) -> "DeviceDescriptor":
        """Inverse of :meth:`to_json` (a descriptor written before ``caches`` has none).

        Checkpoints written before the protocol was a field named a warm row
        ``"<device id>+warm"``; such an id is read as the device's id with ``protocol="warm"``.
        """
        device_id, protocol = split_legacy_row_id(str(obj.get("device_id", "")))
        return DeviceDescriptor(**{**obj, "device_id": device_id, "isa_flags": tuple(obj.get("isa_flags", ())),
                                   "caches": tuple(int(c) for c in obj.get("caches", ())),
                                   "protocol": obj.get("protocol") or protocol})


PROTOCOLS = ("cold", "warm")
"""The timing protocols, by record file: the dataset's tuning records and its warm ones."""


def row_name(device_id: str, protocol: str = "cold") -> str:
    """The name of a device's device-table row of one timing protocol, in reports and as
    the key of per-row tables: ``device_id`` for the cold row, ``"<device_id> (warm)"``
    for the warm one (the device id itself never names a protocol)."""
    return device_id if protocol == "cold" else f"{device_id} ({protocol})"
_LEGACY_WARM_SUFFIX = "+warm"


def split_legacy_row_id(row_id: str) -> tuple[str, str]:
    """``(device id, protocol)`` of a device-table row's id as checkpoints once wrote it
    (``"cpu-...-avx512+warm"`` for a warm row); an id without the suffix is a cold row."""
    if row_id.endswith(_LEGACY_WARM_SUFFIX):
        return row_id[: -len(_LEGACY_WARM_SUFFIX)], "warm"
    return row_id, "cold"


def vm_call_lines(manifest: dict) -> list[str]:
    """A device folder card's line on the Relax VM's time between kernels, as the latest
    collection that measured it found (:attr:`DeviceDescriptor.vm_call_s`); none when no
    collection did.

    Args:
        manifest: the device folder's manifest (its ``collections``).
    """
    runs = [r for r in manifest.get("collections", []) if r.get("vm_call_s")]
    if not runs:
        return []
    r = runs[-1]
    return [f"- Time between kernels (Relax VM, `cdmpp.collect.vm_call`, measured {r.get('started', '?')}): "
            f"{1e6 * r['vm_call_s']:.2f} us per kernel call, {1e6 * r['vm_entry_s']:.2f} us per inference"]


def slug(text: str) -> str:
    text = re.sub(r"\(r\)|\(tm\)|(cpu\s*)?@.*$", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def host_cpu_info() -> tuple[str, set[str]]:
    """This machine's CPU model name and its flags (from /proc/cpuinfo; the flags are empty elsewhere)."""
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


def cpu_has_bf16() -> bool:
    """Whether this machine's CPU has AVX-512 BF16 (Zen 4, Zen 5, Sapphire and Emerald Rapids;
    every CPU with AMX has it too): where bfloat16 matrix products run fast."""
    return "avx512_bf16" in host_cpu_info()[1]


INFERENCE_PRECISIONS = ("fp32", "bf16", "auto")
"""How a checkpoint's forward pass runs: ``"fp32"``; ``"bf16"``, its matrix products in
bfloat16 (``torch.autocast``; fast where :func:`cpu_has_bf16`, slow elsewhere); ``"auto"``,
bf16 where the CPU has it, else fp32."""


def inference_precision(precision: str) -> str:
    """``"fp32"`` or ``"bf16"``: the precision a forward pass runs in on this machine.

    Raises:
        InputError: not one of :data:`INFERENCE_PRECISIONS`.
    """
    if precision not in INFERENCE_PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "bf16" if cpu_has_bf16() else "fp32"
    return precision


def host_caches() -> tuple[int, ...]:
    """This machine's ``(L1 data, L2, L3)`` cache sizes in bytes, from
    ``/sys/devices/system/cpu/cpu0/cache`` (L1d and L2 of one core, the L3 as it reports
    it); empty where a level cannot be read."""
    found = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1], 1)
        found[level] = int(float(size.rstrip("KMG")) * scale)
    return tuple(found[k] for k in (1, 2, 3)) if all(k in found for k in (1, 2, 3)) else ()


MICROARCH_CACHES = {
    "znver3": (32 * 1024, 512 * 1024, 32 * 1024**2),
    "znver4": (32 * 1024, 1024**2, 32 * 1024**2),
    "znver5": (48 * 1024, 1024**2, 32 * 1024**2),
    "icelake-server": (48 * 1024, 1280 * 1024, 48 * 1024**2),
    "sapphirerapids": (48 * 1024, 2 * 1024**2, 105 * 1024**2),
    "emeraldrapids": (48 * 1024, 2 * 1024**2, 320 * 1024**2),
    "rocketlake": (48 * 1024, 512 * 1024, 16 * 1024**2),
    "sm_90": (256 * 1024, 50 * 1024**2, 50 * 1024**2),
}
"""``(L1 data, L2, L3)`` bytes of the microarchitectures of the corpus's devices (LLVM's
``mcpu``, or a GPU's arch: an SM's L1 and the L2 twice), from the vendors' specifications,
for descriptors that do not record their machine's own (:func:`device_caches`)."""
DEFAULT_CACHES = (32 * 1024, 1024**2, 32 * 1024**2)


def device_caches(device: DeviceDescriptor) -> tuple[int, int, int]:
    """``(L1 data, L2, L3)`` cache bytes of ``device``: the ones its machine reported, else
    its microarchitecture's (:data:`MICROARCH_CACHES`, by the target's ``mcpu`` or the GPU
    arch), else :data:`DEFAULT_CACHES`."""
    if len(device.caches) == 3:
        return tuple(int(c) for c in device.caches)
    key = device.target.get("mcpu") if device.kind == "cpu" else device.isa
    return MICROARCH_CACHES.get(str(key), DEFAULT_CACHES)


def local_cpu(num_cores: int | None = None, disable_avx512: bool = False,
              cpu_info: tuple[str, set[str]] | None = None) -> DeviceDescriptor:
    """The CPU of this machine as a measuring device.

    Args:
        num_cores: cores for the generated code; defaults to ``os.cpu_count()``.
        disable_avx512: switch AVX-512 code generation off (``-mattr=-avx512f``), which
            makes a second device on an AVX-512 CPU.
        cpu_info: ``(model name, CPU flags)`` to describe instead of this machine's
            ``/proc/cpuinfo`` (the code generator's ``mcpu`` is still this host's).

    Returns:
        The descriptor; its ``target`` pins ``mcpu`` to the host CPU so that the
        generated code uses the host's vector ISA.
    """
    from tvm.target import codegen  # noqa: PLC0415  (keeps tvm off this module's import)

    model, flags = cpu_info if cpu_info is not None else host_cpu_info()
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
        device_id=f"cpu-{slug(model)}-{slug(mcpu)}-{isa}",
        kind="cpu",
        model=model,
        cores=cores,
        isa=isa,
        isa_flags=isa_flags,
        target=target,
        caches=host_caches() if cpu_info is None else (),
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
        device_id=f"gpu-{slug(name)}-{arch.replace('_', '')}",
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
    import tvm  # noqa: PLC0415  (keeps tvm off this module's import)

    try:
        tvm_device = tvm.cuda(index)
        present = bool(tvm_device.exist)
    except Exception:  # noqa: BLE001  a TVM without the CUDA runtime raises its own error types
        present = False
    if not present:
        raise DeviceUnavailableError(
            f"no CUDA GPU {index} visible to TVM on this host: CUDA programs can be sampled, featurized "
            "and built here (cdmpp.device.gpu_from_tag), but timing them needs the GPU"
        )
    limits = {
        "max_threads_per_block": tvm_device.max_threads_per_block,
        "max_shared_memory_per_block": tvm_device.max_shared_memory_per_block,
        "thread_warp_size": tvm_device.warp_size,
    }
    name = str(tvm_device.device_name)
    return _gpu_descriptor(name, name, "sm_" + str(tvm_device.compute_version).replace(".", ""), limits, num_cores)


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
    from tvm.target import Target  # noqa: PLC0415  (keeps tvm off this module's import)

    try:
        t = dict(Target(tag).export())
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        raise InputError(f"{tag!r} is not a TVM target tag: {err}") from err
    if str(t.get("kind")) != "cuda":
        raise InputError(f"{tag!r} is a {t.get('kind')} target, not a CUDA GPU")
    return _gpu_descriptor(tag.rsplit("/", 1)[-1], tag, str(t.get("arch", "sm_80")), t, num_cores)


# -- device descriptors as model input, and matching a device to the known ones --------------

DESCRIPTOR_FEATURES = (
    "kind_cpu",
    "kind_gpu",
    "vendor_intel",
    "vendor_amd",
    "vendor_nvidia",
    "isa_avx512",
    "isa_avx2",
    "isa_other",
    "flag_avx512_vnni",
    "flag_avx512_bf16",
    "flag_avx512_fp16",
    "flag_avx_vnni",
    "flag_amx",
    "log2_cores",
)
"""Names of the entries of :func:`descriptor_vector`, in order."""

DESCRIPTOR_DIM = len(DESCRIPTOR_FEATURES)


def descriptor_vector(device: DeviceDescriptor):
    """A device as a fixed-width numeric vector, the model's device input.

    What a device record holds on every measured device: its kind, vendor, the
    widest vector ISA its generated code may use, a few ISA extensions that change
    what the code generator emits, and its core count (cache sizes and clocks are
    not recorded by the older device folders, so they are left out).

    Returns:
        float32 ``(DESCRIPTOR_DIM,)``, entries named by :data:`DESCRIPTOR_FEATURES`.
    """


    model = device.model.lower()
    flags = set(device.isa_flags)
    values = {
        "kind_cpu": device.kind == "cpu",
        "kind_gpu": device.kind == "gpu",
        "vendor_intel": "intel" in model,
        "vendor_amd": "amd" in model,
        "vendor_nvidia": device.kind == "gpu" or "nvidia" in model,
        "isa_avx512": device.isa == "avx512",
        "isa_avx2": device.isa == "avx2",
        "isa_other": device.isa not in ("avx512", "avx2"),
        "flag_avx512_vnni": "avx512_vnni" in flags,
        "flag_avx512_bf16": "avx512_bf16" in flags,
        "flag_avx512_fp16": "avx512_fp16" in flags,
        "flag_avx_vnni": "avx_vnni" in flags,
        "flag_amx": any(f.startswith("amx") for f in flags),
        "log2_cores": math.log2(max(1, device.cores)),
    }
    return np.asarray([float(values[k]) for k in DESCRIPTOR_FEATURES], dtype=np.float32)


DEVICE_FILE = "device.json"
"""The measuring device's descriptor (:class:`cdmpp.device.DeviceDescriptor`, JSON) at the top
of a tune-benchmark output, so that a checkpoint that does not know the device can be
scored on its records zero-shot on any machine (:func:`cdmpp.train.evaluate.database_device`)."""


def record_device(out_dir: Path, device: DeviceDescriptor) -> None:
    """Write ``device`` to ``out_dir/device.json``, or check that the runs already there are
    of the same device.

    Raises:
        InputError: ``out_dir`` holds runs of another device.
    """
    path = Path(out_dir) / DEVICE_FILE
    if path.exists():
        there = json.loads(path.read_text()).get("device_id")
        if there != device.device_id:
            raise InputError(f"{out_dir} holds tuning runs of {there}, not of this machine ({device.device_id}): "
                             f"give another --output")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(device.to_json(), indent=1) + "\n")
