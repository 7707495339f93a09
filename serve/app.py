"""A small HTTP latency-prediction service (FastAPI).

``POST /predict`` with ``{"programs": [TVMScript, ...], "target": {...} | null}``
returns ``{"latency_s": [float, ...]}`` (seconds).  ``GET /health`` reports the
loaded checkpoint.  A program that does not parse or is unsupported gets HTTP 422
with a message naming the program and the problem.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class PredictRequest(BaseModel):
    """Body of ``POST /predict``."""

    programs: list[str] = Field(..., min_length=1, description="scheduled PrimFuncs/IRModules as TVMScript")
    target: dict | None = Field(None, description="TVM target as a dict; default: the checkpoint's device")


class PredictResponse(BaseModel):
    """Predicted latency of each program, in seconds."""

    latency_s: list[float]


def parse_program(text: str):
    """Parse TVMScript into an IRModule or PrimFunc.

    Raises:
        ValueError: the text is not valid TVMScript.
    """
    from tvm.script import from_source  # pylint: disable=import-outside-toplevel

    try:
        return from_source(text)
    except Exception as err:  # noqa: BLE001  the TVMScript parser raises several error types
        raise ValueError(f"malformed TVMScript: {str(err).strip()[:500]}") from err


def create_app(checkpoint: str | None = None):
    """The FastAPI application serving one checkpoint (default: the shipped one)."""
    # pylint: disable=import-outside-toplevel
    from fastapi import FastAPI, HTTPException

    from cdmpp.featurize import UnsupportedProgramError
    from cdmpp.predictor import LatencyPredictor

    predictor = LatencyPredictor.load(checkpoint)
    app = FastAPI(title="cdmpp latency prediction")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "device_id": predictor.metadata.get("device_id"), "holdout": predictor.metadata.get("holdout")}

    @app.post("/predict", response_model=PredictResponse)
    def predict(req: PredictRequest) -> PredictResponse:
        mods = []
        for i, text in enumerate(req.programs):
            try:
                mods.append(parse_program(text))
            except ValueError as err:
                raise HTTPException(status_code=422, detail=f"program {i}: {err}") from err
        try:
            out = predictor.predict(mods, req.target)
        except (UnsupportedProgramError, ValueError) as err:
            raise HTTPException(status_code=422, detail=str(err)) from err
        return PredictResponse(latency_s=[float(v) for v in out])

    return app
