"""The held-out test networks and their workloads.

Three networks outside the zoo (:mod:`cdmpp.networks.held_out`) are the strict test of the
model on networks it never saw.  No workload of theirs may be trained on, even where a
zoo network shares it (a layer norm or a dense layer of the same shape): the collector
leaves such tasks out of new collections, and every training split leaves their
programs out of training and validation (``train.splits``).

Their workload keys (MetaSchedule's structural hashes of the tasks' PrimFuncs) ship in
``held_out_workloads.json`` beside this module, for TVM's ``llvm`` and ``cuda`` targets,
so that a split needs no Relax import; :func:`cdmpp.collect.sampling.compute_held_out_file` writes it again.
The file keeps the keys of every torch -> Relax import the corpus was collected with (the
import with the weights as per-call inputs, and the deployed import whose weight
transposes run once at load): a key once held out stays held out.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

HELD_OUT_NETWORKS = ("convnext_tiny-b1", "gpt2_small-b1s128", "llama_1024-b1s128")
HELD_OUT_FILE = Path(__file__).with_name("held_out_workloads.json")
#: targets the shipped keys are extracted for (the llvm keys are the same for every ``mcpu``)
KEY_TARGETS = {"llvm": {"kind": "llvm", "num-cores": 2}, "cuda": "nvidia/nvidia-h100"}


@functools.lru_cache(maxsize=1)
def held_out_keys() -> frozenset[str]:
    """Workload keys of the held-out test networks' tasks, over every target kind of the
    shipped file (strings of MetaSchedule's structural hash, as in a JSONDatabase)."""
    data = json.loads(HELD_OUT_FILE.read_text(encoding="utf-8"))
    return frozenset(k for by_net in data["workloads"].values() for keys in by_net.values() for k in keys)
