"""One TLS context per process: loading the CA bundle costs ~15 ms, too much for every client."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """Return the process's default TLS context (system CA bundle), built on first use."""
    return ssl.create_default_context()
