"""Any OpenAI-compatible chat-completions endpoint: vLLM, TGI, Ollama, llama.cpp, OpenAI.

Native tool calling: the functions of ``GenerateRequest.tools`` go out as ``tools`` and the
reply's ``tool_calls`` come back as ``Generation.tool_calls`` (several, in order). Under
``tool_calling="auto"`` a server that refuses tools (an HTTP error whose body names them, as
llama.cpp without ``--jinja``, vLLM without ``--enable-auto-tool-choice`` or an Ollama model
without tool support answer) switches the backend to text for the rest of the run: the same
request is sent again as plain text, with the functions described in the system message.

The transport is aiohttp: on this hot path (a call per turn, hundreds in flight) it spends a
quarter to a third of httpx's CPU per request (`bench/overlap.py` prints taskhub's CPU per
episode). It is imported by the first call, so runs without this backend never pay for it.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import logging
import math
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from taskhub._errors import ConfigError, ModelAuthError, ModelError
from taskhub._limits import loads_bounded
from taskhub._registry import model_backend
from taskhub._schema import JsonObject, Usage
from taskhub._tls import default_ssl_context
from taskhub._urls import redact_url, redact_urls_in
from taskhub.models._base import GenerateRequest, Generation, ModelOptions, cut_reply
from taskhub.models._chat import openai_messages, openai_tools, parse_tool_calls, text_messages

if TYPE_CHECKING:
    import aiohttp

logger = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
#: Longest single wait between retries, seconds (a larger Retry-After is capped by the deadline).
MAX_BACKOFF_S = 30.0
#: Statuses with which servers refuse a request's ``tools`` (with a body that names them).
_TOOLS_REFUSED_STATUS = {400, 404, 422, 500, 501}


def _retry_after(headers: Mapping[str, str]) -> float | None:
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


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@``, and the Basic ``Authorization`` they ask for."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, netloc = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    pair = f"{unquote(user)}:{unquote(password)}".encode()
    return urlunsplit(parts._replace(netloc=netloc)), "Basic " + base64.b64encode(pair).decode()


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
        self._url, basic = _split_credentials(_endpoint(self.base_url))
        self._shown = _endpoint(self.display_url)  # the endpoint as errors name it
        self._headers = {"Content-Type": "application/json"}
        if options.api_key:
            self._headers["Authorization"] = f"Bearer {options.api_key}"
        if basic is not None:  # credentials in the URL win over the key, as in httpx and curl
            self._headers["Authorization"] = basic
        self._connect_timeout_s = min(10.0, options.timeout_s)
        #: Opened on the first call, in the event loop that makes it.
        self._http: aiohttp.ClientSession | None = None
        self._proxy: Any = None
        self._proxy_auth: aiohttp.BasicAuth | None = None
        self.details: JsonObject = {"endpoint": self.display_url}
        self.tool_option = options.tool_calling
        #: ``native`` while the server takes ``tools``; ``text`` when asked or after a refusal.
        self.tool_calling = "text" if options.tool_calling == "text" else "native"

    def _native(self, request: GenerateRequest) -> bool:
        return bool(request.tools) and self.tool_calling == "native"

    def _body(self, request: GenerateRequest) -> dict[str, Any]:
        params = request.params
        native = self._native(request)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(request.messages)
            if native
            else text_messages(request.messages, request.tools),
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
        if native and request.tools:
            body["tools"] = openai_tools(request.tools)
        return body

    async def generate(self, request: GenerateRequest) -> Generation:
        """Call the endpoint, retrying transient failures until the deadline."""
        import aiohttp  # imported by the first call's session; a lookup from then on

        session = self._session()  # opened (TLS context, pool) before the deadline starts
        url, shown = self._url, self._shown
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
                    status, headers, content = await self._post(session, url, shown, body)
                if "tools" in body and self._refuses_tools(status, content, shown):
                    body = self._body(request)  # the same request, as text
                    attempt -= 1
                    continue
                problem = self._problem(status, headers, content, shown)
                if problem is None:
                    return self._parse(content, shown)
                error, wait = problem
            except ModelError as exc:  # a malformed answer: retried like a 5xx
                error = exc
            except TimeoutError:  # the call's deadline, or aiohttp's connect timeout
                error = ModelError(f"{shown}: no answer within the {self.timeout_s:g}s deadline")
                if time.monotonic() >= deadline:
                    raise error from None
            except (aiohttp.ClientError, OSError) as exc:  # refused, reset, malformed HTTP
                error = ModelError(f"{shown}: {type(exc).__name__}: {redact_urls_in(str(exc))}")
            if not error.retryable or attempt > self.max_retries:
                raise error
            delay = wait if wait is not None else min(MAX_BACKOFF_S, 0.5 * 2 ** (attempt - 1))
            delay *= 1.0 if wait is not None else random.uniform(0.8, 1.2)
            if time.monotonic() + delay >= deadline:
                raise ModelError(f"{error} (gave up: the next retry would pass the deadline)")
            logger.info("model call failed (%s); retry %d in %.1fs", error, attempt, delay)
            await asyncio.sleep(delay)

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            import aiohttp

            proxy, proxy_auth, netrc_auth = _from_environment(self._url, self._headers)
            self._proxy, self._proxy_auth = proxy, proxy_auth
            self._http = aiohttp.ClientSession(
                headers=self._headers,
                # the call's deadline bounds the rest (asyncio.timeout in generate)
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
                connector=aiohttp.TCPConnector(ssl=default_ssl_context()),
                auth=netrc_auth,
                # read once above: with trust_env, aiohttp reads them again for every request,
                # in two trips to a thread
                trust_env=False,
            )
        return self._http

    async def _post(
        self, session: aiohttp.ClientSession, url: str, shown: str, body: dict[str, Any]
    ) -> tuple[int, Mapping[str, str], bytes]:
        """POST ``body``; read at most ``max_response_bytes`` of the answer."""
        async with session.post(
            url, json=body, proxy=self._proxy, proxy_auth=self._proxy_auth
        ) as response:
            chunks, size = [], 0
            async for chunk in response.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise ModelError(
                        f"{shown} answered more than {self.max_response_bytes} bytes: not a "
                        "chat completion this run can use"
                    )
                chunks.append(chunk)
            return response.status, response.headers, b"".join(chunks)

    def _refuses_tools(self, status: int, content: bytes, shown: str) -> bool:
        """Whether the server refused the request's tools; under ``auto``, switch to text."""
        if status not in _TOOLS_REFUSED_STATUS:
            return False
        text = redact_urls_in(content[:2000].decode("utf-8", "replace"))
        if "tool" not in text.lower():
            return False
        if self.tool_option == "native":
            error = ModelError(
                f"{shown} refused the function tools (HTTP {status}: {text[:300]}); enable "
                "tool calling on the server or use --tool-calling text"
            )
            error.retryable = False
            raise error
        if self.tool_calling != "text":  # requests in flight meanwhile are refused as well
            reason = f"HTTP {status}: {text[:300]}"
            logger.warning("%s refused function tools (%s); using text", shown, reason)
            self.tool_calling = "text"
            self.details["tool_calling_fallback"] = reason
        return True

    def _problem(
        self, status: int, headers: Mapping[str, str], content: bytes, shown: str
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
            tool_calls=parse_tool_calls(choice["message"].get("tool_calls"), shown),
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        if self._http is not None:
            await self._http.close()
            self._http = None


def _from_environment(
    url: str, headers: Mapping[str, str]
) -> tuple[Any, aiohttp.BasicAuth | None, aiohttp.BasicAuth | None]:
    """What the environment says about ``url``, as httpx and the openai SDK read it.

    The proxy of ``HTTP(S)_PROXY`` unless ``NO_PROXY`` covers the host, with its credentials;
    and, when no ``Authorization`` header is set, the host's login in ``~/.netrc``.
    """
    from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
    from yarl import URL

    target = URL(url)
    try:
        proxy, proxy_auth = get_env_proxy_for_url(target)
    except LookupError:
        proxy, proxy_auth = None, None
    netrc_auth = None
    if "Authorization" not in headers and target.host is not None:
        netrc = netrc_from_env()
        if netrc is not None:
            try:
                netrc_auth = basicauth_from_netrc(netrc, target.host)
            except LookupError:
                netrc_auth = None
    return proxy, proxy_auth, netrc_auth


@model_backend("openai")
def openai(name: str, options: ModelOptions) -> OpenAIChat:
    """Any OpenAI-compatible chat-completions endpoint (``--base-url``, ``OPENAI_API_KEY``)."""
    return OpenAIChat(name, options)
