"""Model backends: OpenAI-compatible endpoints, a local CPU model, scripted policies."""

from __future__ import annotations

from taskhub.models import _local, _openai, _scripted  # noqa: F401  (register the backends)
from taskhub.models._base import (
    GenerateRequest,
    Generation,
    ModelBackend,
    ModelOptions,
    TurnContext,
    load_model,
    split_model_spec,
)
from taskhub.models._cache import CachedModel, CacheStats, cacheable, request_key
from taskhub.models._scripted import action_properties, text_field

__all__ = [
    "CacheStats",
    "CachedModel",
    "GenerateRequest",
    "Generation",
    "ModelBackend",
    "ModelOptions",
    "TurnContext",
    "action_properties",
    "cacheable",
    "load_model",
    "request_key",
    "split_model_spec",
    "text_field",
]
