"""Any OpenAI-compatible chat-completions endpoint: vLLM, TGI, Ollama, llama.cpp, OpenAI."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from taskhub._errors import ConfigError, ModelAuthError, ModelError
from taskhub._limits import loads_bounded
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, Usage
from taskhub._urls import redact_url, redact_urls_in
from taskhub.models._base import GenerateRequest, Generation, ModelOptions, cut_reply

logger = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
#: Longest single wait between retries, seconds (a larger Retry-After is capped by the deadline).
MAX_BACKOFF_S = 30.0


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):  # "soon": not a delay, use the backoff
            return None
        seconds = parsed.timestamp() - time.time() if parsed else 0.0
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _endpoint(base_url: str) -> str:
    """``{base_url}/chat/completions``, a query of the base URL kept after the path."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/") + "/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _token_count(usage: Any, key: str, shown: str) -> int:
    """A token count of ``usage`` (0 when absent); a malformed one is a ``ModelError``."""
    if usage is None:
        return 0
    value = usage.get(key) if isinstance(usage, dict) else "(usage is not an object)"
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2**53:
        raise ModelError(f"{shown} answered usage.{key} = {value!r:.100}: not a token count")
    return int(value)


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
        #: The endpoint as it may be stored and printed: credentials removed.
        self.display_url = redact_url(self.base_url)
        self.timeout_s = options.timeout_s
        self.max_retries = options.max_retries
        self.max_reply_chars = options.max_reply_chars
        self.max_response_bytes = options.max_response_bytes
        headers = {"Content-Type": "application/json"}
        if options.api_key:
            headers["Authorization"] = f"Bearer {options.api_key}"
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(options.timeout_s, connect=min(10.0, options.timeout_s)),
        )
        self.details: JsonObject = {"endpoint": self.display_url}

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
        url = _endpoint(self.base_url)
        shown = _endpoint(self.display_url)
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
                    status, headers, content = await self._post(url, shown, body)
                problem = self._problem(status, headers, content, shown)
                if problem is None:
                    return self._parse(content, shown)
                error, wait = problem
            except ModelError as exc:  # a malformed answer: retried like a 5xx
                error = exc
            except (TimeoutError, httpx.TimeoutException):
                error = ModelError(f"{shown}: no answer within the {self.timeout_s:g}s deadline")
                if time.monotonic() >= deadline:
                    raise error from None
            except httpx.HTTPError as exc:
                error = ModelError(f"{shown}: {type(exc).__name__}: {redact_urls_in(str(exc))}")
            if not error.retryable or attempt > self.max_retries:
                raise error
            delay = wait if wait is not None else min(MAX_BACKOFF_S, 0.5 * 2 ** (attempt - 1))
            delay *= 1.0 if wait is not None else random.uniform(0.8, 1.2)
            if time.monotonic() + delay >= deadline:
                raise ModelError(f"{error} (gave up: the next retry would pass the deadline)")
            logger.info("model call failed (%s); retry %d in %.1fs", error, attempt, delay)
            await asyncio.sleep(delay)

    async def _post(
        self, url: str, shown: str, body: dict[str, Any]
    ) -> tuple[int, httpx.Headers, bytes]:
        """POST ``body``; read at most ``max_response_bytes`` of the answer."""
        async with self._http.stream("POST", url, json=body) as response:
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise ModelError(
                        f"{shown} answered more than {self.max_response_bytes} bytes: not a "
                        "chat completion this run can use"
                    )
                chunks.append(chunk)
        return response.status_code, response.headers, b"".join(chunks)

    def _problem(
        self, status: int, headers: httpx.Headers, content: bytes, shown: str
    ) -> tuple[ModelError, float | None] | None:
        if status < 400:
            return None
        text = redact_urls_in(content[:300].decode("utf-8", "replace"))
        if status in (401, 403):
            return ModelAuthError(
                f"{shown} answered HTTP {status}: the API key is missing or "
                f"wrong (set OPENAI_API_KEY). Server said: {text}"
            ), None
        error = ModelError(f"{shown} answered HTTP {status}: {text}")
        error.retryable = status in _RETRY_STATUS
        return error, _retry_after(headers)

    def _parse(self, content: bytes, shown: str) -> Generation:
        """Read a chat completion; anything malformed is a (retried) ``ModelError``."""
        try:
            payload = loads_bounded(content)
        except ValueError as exc:
            raise ModelError(
                f"{shown} answered with invalid JSON ({exc}): {content[:200]!r}"
            ) from None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices:
            raise ModelError(f"{shown} answered with no choices: {json.dumps(payload)[:200]}")
        choice = choices[0]
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            raise ModelError(
                f"{shown} answered choices[0] = {json.dumps(choice)[:200]}: not a choice with "
                "a message object"
            )
        text = choice["message"].get("content")
        if text is not None and not isinstance(text, str):
            raise ModelError(f"{shown}: choices[0].message.content is not text: {text!r:.200}")
        text = text or ""
        finish = choice.get("finish_reason")
        if len(text) > self.max_reply_chars:
            logger.warning("%s: reply of %d characters cut", shown, len(text))
            text, finish = cut_reply(text, self.max_reply_chars), "cut"
        return Generation(
            text=text,
            usage=Usage(
                prompt_tokens=_token_count(payload.get("usage"), "prompt_tokens", shown),
                completion_tokens=_token_count(payload.get("usage"), "completion_tokens", shown),
                calls=1,
            ),
            finish_reason=finish if isinstance(finish, str) else None,
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()


@model_backend("openai")
def openai(name: str, options: ModelOptions) -> OpenAIChat:
    """Any OpenAI-compatible chat-completions endpoint (``--base-url``, ``OPENAI_API_KEY``)."""
    return OpenAIChat(name, options)
