"""A checkpoint on disk: the model's weights (safetensors) and its metadata (JSON), written and read in one place."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch

from cdmpp.errors import CheckpointError
from cdmpp.featurize.ast import FEATURIZER_VERSION

from .model import LatencyTransformer, ModelConfig
from .schema import CheckpointMeta, parse_checkpoint_meta

WEIGHTS_FILE = "model.safetensors"


CONFIG_FILE = "config.json"


def save_checkpoint(model: LatencyTransformer, folder: Path, metadata: dict | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` (model config + metadata) to ``folder``."""
    from safetensors.torch import save_file  # noqa: PLC0415  (keeps safetensors off this module's import)

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / WEIGHTS_FILE
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    weights.chmod(_readable_mode())  # safetensors writes 0600; a checkpoint is meant to be shared and shipped
    (folder / CONFIG_FILE).write_text(
        json.dumps(
            {"model": asdict(model.config), "featurizer_version": FEATURIZER_VERSION, "metadata": metadata or {}},
            indent=1,
        ),
        encoding="utf-8",
    )
    return folder


def _readable_mode() -> int:
    """The mode a new file gets under this process's umask (``0o666 & ~umask``)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def load_checkpoint(folder: Path) -> tuple[LatencyTransformer, dict]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Returns:
        ``(model in eval mode, metadata dict)``, the metadata validated
        (:class:`cdmpp.schema.CheckpointMeta`; :func:`checkpoint_meta` gives it typed).

    Raises:
        CheckpointError: a missing file, corrupt JSON or weights, weights that do
            not fit the config, features of another featurizer version, or malformed
            metadata (the message names the file and the field).
    """
    from safetensors import SafetensorError  # noqa: PLC0415  (keeps safetensors off this module's import)
    from safetensors.torch import load_file  # noqa: PLC0415  (keeps safetensors off this module's import)

    folder = Path(folder)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (folder / name).exists():
            raise CheckpointError(f"checkpoint {folder} has no {name}")
    try:
        cfg = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        config = ModelConfig.from_json(cfg["model"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"corrupt checkpoint config {folder / CONFIG_FILE}: {err}") from err
    version = cfg.get("featurizer_version", 1)
    if version != FEATURIZER_VERSION:
        raise CheckpointError(
            f"checkpoint {folder} was trained on features of featurizer version {version}; this cdmpp computes "
            f"version {FEATURIZER_VERSION}: retrain it (cdmpp train) or use the cdmpp release that wrote it"
        )
    try:
        state = load_file(str(folder / WEIGHTS_FILE))
    except (SafetensorError, OSError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"corrupt checkpoint weights {folder / WEIGHTS_FILE}: {err}") from err
    model = LatencyTransformer(config)
    if config.num_devices > 0 and "device_offset" not in state:  # written before per-device offsets existed
        state["device_offset"] = torch.zeros(config.num_devices + 1)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"weights in {folder / WEIGHTS_FILE} do not fit its config: {err}") from err
    parse_checkpoint_meta(cfg.get("metadata", {}), folder / CONFIG_FILE)  # a malformed field is named here
    return model.eval(), cfg.get("metadata", {})


def checkpoint_meta(metadata: dict, folder: Path | None = None) -> CheckpointMeta:
    """The typed metadata of a checkpoint (from :func:`load_checkpoint`'s dict).

    Raises:
        CheckpointError: malformed metadata (the message names the file and the field).
    """
    return parse_checkpoint_meta(metadata, Path(folder or ".") / CONFIG_FILE)
