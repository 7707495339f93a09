"""Running the model on featurized programs: the stacked inputs of a batch (:class:`ProgramLeaves`) and batched inference in seconds."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from cdmpp.device import inference_precision
from cdmpp.errors import InputError
from cdmpp.featurize.batch import dense_programs, stack_leaves
from cdmpp.featurize.loops import merge_tokens, stack_loops

from .model import LatencyTransformer

BUCKET_PROGRAMS = 128
"""Programs per inference batch, taken in order of leaf count: a batch pads its programs
to its longest one, and most programs have few leaves."""


def check_inputs(model: LatencyTransformer, data) -> None:
    """Raise ``InputError`` unless ``data.x`` has the model's input columns (leaves only,
    or leaves and trace tokens: :attr:`ModelConfig.trace_tokens`)."""
    if data.x.shape[1] != model.config.feature_dim:
        need = ("each program's schedule trace as a token (cdmpp.featurize.trace.with_trace_tokens)"
                if model.config.trace_tokens else "the compact AST's leaves only, without trace tokens")
        raise InputError(f"the model reads {model.config.feature_dim} input columns, the programs have "
                         f"{data.x.shape[1]}: it needs {need}")


@torch.no_grad()
def predict_latency_array(
    model: LatencyTransformer, data, index=None, batch_size: int = 512, device_row=None, precision: str = "fp32"
) -> np.ndarray:
    """Predicted latency in seconds, float64 ``(len(index),)``, of the programs ``index`` (int
    ``(K,)``, default all) of ``data`` (:class:`ProgramLeaves`, or
    :class:`cdmpp.featurize.batch.FeaturizedPrograms`).

    Args:
        batch_size: programs per forward pass, at most ``BUCKET_PROGRAMS`` (128): programs
            go through sorted by leaf count, so that each pass pads to a similar length.
        device_row: the device-table row to predict for: an int for all programs, or int
            ``(K,)``; default ``data.device_row`` (each program's own device) when set, else
            row 0.  Ignored by a model without devices.
        precision: :data:`cdmpp.device.INFERENCE_PRECISIONS` (the outputs are float32 either way).

    Raises:
        InputError: inputs of other columns than the model reads, or an unknown precision.

    Torch only (no Lightning, no PyG), so that prediction imports neither.
    """

    check_inputs(model, data)
    index = np.arange(len(data)) if index is None else np.asarray(index, dtype=np.int64)
    if device_row is None:
        device_row = data.device_row[index] if getattr(data, "device_row", None) is not None else 0
    device_rows = torch.as_tensor(np.broadcast_to(np.asarray(device_row, dtype=np.int64), index.shape).copy())
    model.eval()
    if len(index) == 0:
        return np.zeros(0, dtype=np.float64)
    # programs sorted by leaf count, so that each batch pads to a similar length
    order = np.argsort(data.ptr[index + 1] - data.ptr[index], kind="stable")
    step = min(batch_size, BUCKET_PROGRAMS)
    bf16 = inference_precision(precision) == "bf16"
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        out = torch.cat([
            model.predict_log_latency(*dense_programs(data, index[order[s : s + step]]),
                                      device_rows[order[s : s + step]]).float()
            for s in range(0, len(index), step)
        ]).double().numpy()
    log_latency = np.empty_like(out)
    log_latency[order] = out
    return np.exp(log_latency)


@dataclass
class ProgramLeaves:
    """Featurized programs without labels: what prediction needs.

    ``P`` programs with ``L_i`` leaves each, ``F = FEATURE_DIM``.  Any object with these
    fields (such as :class:`cdmpp.featurize.batch.FeaturizedPrograms`, which adds labels
    and grouping) is accepted where this type is.

    Attributes:
        x: float32 ``(sum L_i, F)``: leaf features, program after program.
        pos: int32 ``(sum L_i,)``: each leaf's pre-order position.
        ptr: int64 ``(P + 1,)``: program ``i`` owns rows ``ptr[i]:ptr[i+1]``.
        device_row: int64 ``(P,)`` device-table rows, or ``None``.
    """

    x: np.ndarray
    pos: np.ndarray
    ptr: np.ndarray
    device_row: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @staticmethod
    def from_trees(trees, loops: bool = False) -> "ProgramLeaves":
        """Stack :class:`cdmpp.featurize.ProgramAST` trees (``featurize_many``'s output);
        with ``loops``, each program's loop tokens among its leaves (a ``loop_tokens``
        model's input, :func:`cdmpp.featurize.loops.merge_tokens`)."""
        if loops:
            return ProgramLeaves(*merge_tokens(*stack_leaves(trees), *stack_loops(trees)))
        return ProgramLeaves(*stack_leaves(trees))
