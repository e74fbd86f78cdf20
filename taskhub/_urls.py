"""Credentials out of URLs: userinfo and secret-looking query values, before anything is written.

A URL typed on the command line may carry credentials (``http://user:PASSWORD@host/v1``,
``?api_key=K``). What taskhub stores or prints (``run.json``: config, ``argv``, model details, env
URLs; log lines; error messages in episode records) goes through ``redact_url`` or
``redact_urls_in`` first. The full URL is used only to make the requests.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: What a removed credential is replaced with.
REDACTED = "[REDACTED]"

#: Query parameter names that carry credentials (``api_key``, ``token``, ``sig``...).
_SECRET_PARAM = re.compile(
    r"(^|[_-])(api[_-]?key|apikey|key|token|access[_-]?token|auth|authorization|secret|"
    r"password|passwd|pwd|sig|signature|credential|credentials|session|code)$",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>`]+")
#: What ends a sentence or a clause after a URL in text (``URL: message``), not the URL's.
_TRAILING = ".,;:!?)]}"
#: The userinfo of a URL, for a URL ``urlsplit`` cannot read.
_USERINFO = re.compile(r"(://)[^/@\s]*@")


def is_secret_param(name: str) -> bool:
    """Whether a query parameter's name says it carries a credential."""
    return bool(_SECRET_PARAM.search(name)) or name.lower().startswith("x-amz-")


def redact_url(url: str) -> str:
    """Return ``url`` without userinfo and with secret-looking query values replaced.

    ``http://user:pw@host:8080/v1?api_key=K&model=m`` becomes
    ``http://host:8080/v1?api_key=[REDACTED]&model=m``. Text that is not a URL comes back as it is.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL, or a port that is not a number: no userinfo, whatever it is
        return _USERINFO.sub(r"\1", url)
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        host = parts.hostname or ""
        if ":" in host:  # IPv6
            host = f"[{host}]"
        netloc = host + (f":{port}" if port is not None else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_param(name) for name, _ in pairs):
            query = urlencode(
                [(name, REDACTED if is_secret_param(name) else value) for name, value in pairs],
                safe="[]",
            )
    fragment = parts.fragment
    if "access_token=" in fragment or "token=" in fragment:
        fragment = ""
    if netloc == parts.netloc and query == parts.query and fragment == parts.fragment:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact_optional_url(url: str | None) -> str | None:
    """``redact_url`` that lets None through."""
    return None if url is None else redact_url(url)


def redact_urls_in(text: str) -> str:
    """Return ``text`` with every URL in it passed through ``redact_url``.

    Punctuation right after a URL (``http://u:pw@host:8000: no answer``) is the text's, not the
    URL's: it is left out of what is redacted, and kept.
    """
    if "://" not in text:
        return text
    return _URL.sub(_redact_match, text)


def _redact_match(match: re.Match[str]) -> str:
    url = match.group(0)
    bare = url.rstrip(_TRAILING)
    return redact_url(bare) + url[len(bare) :]
