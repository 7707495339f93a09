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
    """A warm row's protocol is a field (left out of the JSON when cold), never a suffix of its
    device id; a row written when the id carried it (``"<id>+warm"``) reads as the device's id
    with the warm protocol, and a bad protocol is refused."""
    import pytest

    from cdmpp.device import DeviceDescriptor
    from cdmpp.errors import InputError
    from cdmpp.schema import DeviceRow

    cold = DeviceDescriptor("cpu-x", "cpu", "X", 2, "avx2")
    assert cold.protocol == "cold" and "protocol" not in cold.to_json() and cold.row_name == "cpu-x"
    warm = DeviceDescriptor("cpu-x", "cpu", "X", 2, "avx2", protocol="warm")
    assert DeviceDescriptor.from_json(warm.to_json()) == warm and warm.row_name == "cpu-x (warm)"
    legacy = {**cold.to_json(), "device_id": "cpu-x+warm"}
    assert DeviceDescriptor.from_json(legacy) == warm
    row = DeviceRow(row=2, device_id="cpu-x+warm", descriptor=legacy)
    assert (row.device_id, row.protocol, row.descriptor["device_id"]) == ("cpu-x", "warm", "cpu-x")
    with pytest.raises(InputError, match="protocol must be one of cold, warm"):
        DeviceDescriptor("cpu-x", "cpu", "X", 2, "avx2", protocol="hot")


def test_a_device_table_finds_a_row_by_device_id_and_protocol():
    """A device's cold and warm rows share its id: the table lists the id once, names the
    protocols it learned, and finds each row by (id, protocol); a checkpoint written when the
    warm row's id carried the protocol reads the same."""
    import pytest

    from cdmpp.device import DeviceDescriptor
    from cdmpp.device_choice import DeviceTable
    from cdmpp.errors import UnknownDeviceError

    cold = DeviceDescriptor("cpu-x", "cpu", "X", 2, "avx2").to_json()
    other = DeviceDescriptor("cpu-y", "cpu", "Y", 2, "avx2").to_json()
    for warm_id in ("cpu-x", "cpu-x+warm"):
        warm = {**cold, "device_id": warm_id} | ({"protocol": "warm"} if warm_id == "cpu-x" else {})
        table = DeviceTable({"devices": [{"row": 1, "descriptor": cold}, {"row": 2, "device_id": warm_id, "descriptor": warm},
                                         {"row": 3, "descriptor": other}]})
        assert table.ids == ["cpu-x", "cpu-y"]
        assert table.protocols("cpu-x") == ["cold", "warm"] and table.protocols("cpu-y") == ["cold"]
        assert (table.row("cpu-x"), table.row("cpu-x", "warm"), table.row("cpu-y")) == (1, 2, 3)
        assert table.resolve("cpu-x").protocol == "cold"
        with pytest.raises(UnknownDeviceError, match="did not learn the warm protocol of cpu-y"):
            table.row("cpu-y", "warm")
        with pytest.raises(UnknownDeviceError, match="unknown device 'cpu-x\\+warm'"):
            table.row("cpu-x+warm")
