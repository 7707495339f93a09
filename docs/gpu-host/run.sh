#!/bin/bash
# Device-machine collection: OUT=... ROUNDS=4,8 bash docs/gpu-host/run.sh SECONDS
# Unpacks TVM 0.27 (cp312) from .gpu/, checks CUDA, collects with `cdmpp collect --gpu`
# into .gpu/resume for SECONDS, packs, and copies the device folder's files to $OUT.
set -u
S=${1:-420}
T0=$(date +%s)
mkdir -p /tmp/site/tvm/lib
tar xJf .gpu/tvm_py.tar.xz -C /tmp/site
tar xJf .gpu/ffi.tar.xz -C /tmp/site
xz -dc -T0 .gpu/compiler.xz > /tmp/site/tvm/lib/libtvm_compiler.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
echo "unpacked in $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 .gpu/sanity.py || exit 3
mkdir -p .gpu/resume
timeout -s TERM -k 90 $S python3 -m cdmpp.cli collect --gpu -n resnet_50-b1 mobilenet_v2-b1 bert_base-b1s128 \
  -o .gpu/resume --rounds ${ROUNDS:-4,8} --seed 0 --evolutionary-fraction 0 --pack-every 1 --profile 2>&1 | tail -60
for d in .gpu/resume/*/; do python3 -m cdmpp.cli pack "$d" 2>&1 | tail -3; n=$(basename $d); mkdir -p $OUT/$n; cp $d/*.gz $d/manifest.json $d/README.md $OUT/$n/ 2>/dev/null; done
ls -la $OUT/*
echo "total $(( $(date +%s) - T0 )) s"
