import pytest

from cdmpp.device import DeviceDescriptor, DeviceUnavailableError, gpu_from_tag, local_cpu, local_gpu

AVX512_HOST = ("AMD EPYC 9R14", {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"})
AVX2_HOST = ("Intel Xeon Processor", {"sse4_2", "avx", "avx2", "fma"})


def test_local_cpu_descriptor_and_avx512_off_device():
    d = local_cpu(num_cores=2)
    assert d.device_id.startswith("cpu-") and d.kind == "cpu" and d.cores == 2
    assert d.target["kind"] == "llvm" and d.target["num-cores"] == 2 and d.target["mcpu"]
    assert DeviceDescriptor.from_json(d.to_json()) == d
    off = local_cpu(num_cores=2, disable_avx512=True)
    assert off.target["mattr"] == ["-avx512f"] and off.isa != "avx512"


def test_the_avx512_off_device_rule_on_fixture_hosts():
    """On every host: AVX-512 off makes a second device on an AVX-512 CPU, and none on an AVX2 one."""
    on = local_cpu(num_cores=2, cpu_info=AVX512_HOST)
    off = local_cpu(num_cores=2, disable_avx512=True, cpu_info=AVX512_HOST)
    assert on.isa == "avx512" and on.device_id.endswith("-avx512") and on.model == "AMD EPYC 9R14"
    assert off.isa == "avx2" and off.device_id.endswith("-avx2") and off.device_id != on.device_id
    plain = local_cpu(num_cores=2, cpu_info=AVX2_HOST)
    plain_off = local_cpu(num_cores=2, disable_avx512=True, cpu_info=AVX2_HOST)
    assert plain.isa == plain_off.isa == "avx2"
    assert plain.device_id == plain_off.device_id  # no AVX-512 to switch off: the same device


def test_gpu_from_tag_gives_a_cuda_target_with_the_limits_tuning_needs():
    from cdmpp.tvm_compat import Target

    d = gpu_from_tag("nvidia/nvidia-h100", num_cores=2)
    assert d.device_id == "gpu-nvidia_h100-sm90a" and d.kind == "gpu" and d.isa == "sm_90a"
    t = Target(d.target)
    assert str(t.kind.name) == "cuda" and str(t.host.kind.name) == "llvm"
    assert int(t.attrs["max_threads_per_block"]) == 1024 and int(t.attrs["thread_warp_size"]) == 32
    assert DeviceDescriptor.from_json(d.to_json()) == d
    with pytest.raises(ValueError, match="not a TVM target tag"):
        gpu_from_tag("nvidia/no-such-gpu")
    with pytest.raises(ValueError, match="not a CUDA GPU"):
        gpu_from_tag("llvm")


def test_local_gpu_names_what_is_missing():
    import tvm

    if tvm.cuda(0).exist:
        d = local_gpu()
        assert d.device_id.startswith("gpu-") and d.target["kind"] == "cuda"
        return
    with pytest.raises(DeviceUnavailableError, match="no CUDA GPU 0 visible"):
        local_gpu()


def test_the_timing_protocol_is_a_field_of_the_descriptor():
    """A warm row's protocol is a field (left out of the JSON when cold); a descriptor written
    before the field reads as warm when its id names the warm row, and a bad protocol is refused."""
    import pytest

    from cdmpp.device import DeviceDescriptor, warm_device_id
    from cdmpp.errors import InputError

    cold = DeviceDescriptor("cpu-x", "cpu", "X", 2, "avx2")
    assert cold.protocol == "cold" and "protocol" not in cold.to_json()
    warm = DeviceDescriptor(warm_device_id("cpu-x"), "cpu", "X", 2, "avx2", protocol="warm")
    assert DeviceDescriptor.from_json(warm.to_json()) == warm
    legacy = {k: v for k, v in warm.to_json().items() if k != "protocol"}
    assert DeviceDescriptor.from_json(legacy).protocol == "warm"
    with pytest.raises(InputError, match="protocol must be one of cold, warm"):
        DeviceDescriptor("cpu-x", "cpu", "X", 2, "avx2", protocol="hot")
