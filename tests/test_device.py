from cdmpp.device import DeviceDescriptor, local_cpu


def test_local_cpu_descriptor_and_avx512_off_device():
    d = local_cpu(num_cores=2)
    assert d.device_id.startswith("cpu-") and d.kind == "cpu" and d.cores == 2
    assert d.target["kind"] == "llvm" and d.target["num-cores"] == 2 and d.target["mcpu"]
    assert DeviceDescriptor.from_json(d.to_json()) == d
    off = local_cpu(num_cores=2, disable_avx512=True)
    assert off.target["mattr"] == ["-avx512f"] and off.isa != "avx512"
    if d.isa == "avx512":
        assert off.device_id != d.device_id  # a second, distinct device on the same CPU
