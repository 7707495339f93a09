#!/bin/bash
# Build the payload that `docs/gpu-host/run.sh` unpacks on a GPU host that has Python 3.12,
# PyTorch and CUDA but no package index: TVM 0.27 and tvm-ffi as cp312 wheels, unpacked,
# with libtvm_compiler.so xz-compressed so that the whole tree stays under 64 MiB.
# Usage (repository root): bash docs/gpu-host/payload.sh [.gpu]   (about 4 min on 2 cores)
set -euo pipefail
DST=${1:-.gpu}
W=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$W" apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1
mkdir -p "$DST" "$W/tvm" "$W/ffi"
(cd "$W/tvm" && unzip -q "$W"/apache_tvm-0.27*.whl)
(cd "$W/ffi" && unzip -q "$W"/apache_tvm_ffi-*.whl && rm -rf tvm_ffi/3rdparty tvm_ffi/src)
xz -T2 -9 -c "$W/tvm/tvm/lib/libtvm_compiler.so" > "$DST/compiler.xz"
rm "$W/tvm/tvm/lib/libtvm_compiler.so"
tar cJf "$DST/tvm_py.tar.xz" -C "$W/tvm" tvm
tar cJf "$DST/ffi.tar.xz" -C "$W/ffi" .
cp docs/gpu-host/run.sh docs/gpu-host/sanity.py "$DST/"
rm -rf "$W"
du -cb "$DST"/* | tail -1
