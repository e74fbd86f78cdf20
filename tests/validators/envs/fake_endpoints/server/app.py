"""Defect: endpoints that exist only to look like an OpenEnv server.

``/reset``, ``/step`` and ``/schema`` answer ``{"status": "ok"}`` and do nothing: no
environment, no episode, no WebSocket.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

app = FastAPI(title="fake_endpoints")


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "healthy"}


@app.get("/schema")
def schema() -> dict[str, Any]:
    return {"status": "ok"}


@app.post("/reset")
def reset() -> dict[str, Any]:
    return {"status": "ok"}


@app.post("/step")
def step() -> dict[str, Any]:
    return {"status": "ok"}
