"""Any OpenAI-compatible chat-completions endpoint: vLLM, TGI, Ollama, llama.cpp, OpenAI."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
from typing import Any

import httpx

from taskhub._errors import ConfigError, ModelAuthError, ModelError
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, Usage
from taskhub._tls import default_ssl_context
from taskhub.models._base import GenerateRequest, Generation, ModelOptions

logger = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
#: Longest single wait between retries, seconds (a larger Retry-After is capped by the deadline).
MAX_BACKOFF_S = 30.0


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


class OpenAIChat:
    """A chat model behind ``POST {base_url}/chat/completions``.

    Retries 429, 5xx, timeouts and connection errors with exponential backoff (honouring
    ``Retry-After``) until the hard deadline of the call; 401/403 raise ``ModelAuthError``.
    """

    def __init__(self, model: str, options: ModelOptions) -> None:
        """Create the backend for ``model`` at ``options.base_url``."""
        if not options.base_url:
            raise ConfigError(
                f"model openai/{model} needs a base URL: pass --base-url or set OPENAI_BASE_URL "
                "(e.g. http://127.0.0.1:8080/v1 for llama.cpp, https://api.openai.com/v1)"
            )
        self.model = model
        self.base_url = options.base_url.rstrip("/")
        self.timeout_s = options.timeout_s
        self.max_retries = options.max_retries
        headers = {"Content-Type": "application/json"}
        if options.api_key:
            headers["Authorization"] = f"Bearer {options.api_key}"
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(options.timeout_s, connect=min(10.0, options.timeout_s)),
            verify=default_ssl_context(),
        )
        self.details: JsonObject = {"endpoint": self.base_url}

    def _body(self, request: GenerateRequest) -> dict[str, Any]:
        params = request.params
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.model_dump() for m in request.messages],
            "temperature": params.temperature,
            # llama.cpp's server reads max_tokens, not max_completion_tokens.
            "max_tokens": params.max_tokens,
        }
        if params.top_p is not None:
            body["top_p"] = params.top_p
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        return body

    async def generate(self, request: GenerateRequest) -> Generation:
        """Call the endpoint, retrying transient failures until the deadline."""
        url = f"{self.base_url}/chat/completions"
        body = self._body(request)
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    response = await self._http.post(url, json=body)
                problem = self._problem(response)
                if problem is None:
                    return self._parse(response)
                error, wait = problem
            except ModelError as exc:  # a malformed answer: retried like a 5xx
                error = exc
            except (TimeoutError, httpx.TimeoutException):
                error = ModelError(f"{url}: no answer within the {self.timeout_s:g}s deadline")
                if time.monotonic() >= deadline:
                    raise error from None
            except httpx.HTTPError as exc:
                error = ModelError(f"{url}: {type(exc).__name__}: {exc}")
            if not error.retryable or attempt > self.max_retries:
                raise error
            delay = wait if wait is not None else min(MAX_BACKOFF_S, 0.5 * 2 ** (attempt - 1))
            delay *= 1.0 if wait is not None else random.uniform(0.8, 1.2)
            if time.monotonic() + delay >= deadline:
                raise ModelError(f"{error} (gave up: the next retry would pass the deadline)")
            logger.info("model call failed (%s); retry %d in %.1fs", error, attempt, delay)
            await asyncio.sleep(delay)

    def _problem(self, response: httpx.Response) -> tuple[ModelError, float | None] | None:
        status = response.status_code
        if status < 400:
            return None
        text = response.text[:300]
        if status in (401, 403):
            return ModelAuthError(
                f"{response.request.url} answered HTTP {status}: the API key is missing or "
                f"wrong (set OPENAI_API_KEY). Server said: {text}"
            ), None
        error = ModelError(f"{response.request.url} answered HTTP {status}: {text}")
        error.retryable = status in _RETRY_STATUS
        return error, _retry_after(response)

    def _parse(self, response: httpx.Response) -> Generation:
        try:
            payload = response.json()
        except json.JSONDecodeError:
            error = ModelError(
                f"{response.request.url} answered with invalid JSON: {response.text[:200]!r}"
            )
            raise error from None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices:
            raise ModelError(
                f"{response.request.url} answered with no choices: {json.dumps(payload)[:200]}"
            )
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        content = message.get("content") if isinstance(message, dict) else None
        if content is not None and not isinstance(content, str):
            raise ModelError(f"choices[0].message.content is not text: {content!r:.200}")
        usage = payload.get("usage") or {}
        return Generation(
            text=content or "",
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                calls=1,
            ),
            finish_reason=choice.get("finish_reason"),
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()


@model_backend("openai")
def openai(name: str, options: ModelOptions) -> OpenAIChat:
    """Any OpenAI-compatible chat-completions endpoint (``--base-url``, ``OPENAI_API_KEY``)."""
    return OpenAIChat(name, options)
