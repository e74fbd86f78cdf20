"""Exceptions raised by taskhub, one root and a subclass per boundary crossed.

```
TaskhubError
├── ConfigError
├── TasksetError        ── TasksetNotFound, SchemaError, RemoteCodeError
├── EnvError            ── EnvConnectError, EnvProtocolError, EnvExecutionError, EnvTimeout,
│                          EnvCapacityError, EnvClosedError, EnvLaunchError
├── ModelError          ── ModelAuthError
├── AgentFormatError
├── PluginError         ── UnknownPluginError, MissingDependencyError
├── RewardError
└── ResultsError
```

Errors carry their context as attributes (``task_id``, ``env_url``, ``code``...) so that the
runner can record them in an episode without parsing messages. Programmer mistakes (a wrong
argument type or value) stay ``TypeError``/``ValueError``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TaskhubError(Exception):
    """Root of every error taskhub raises on purpose."""

    #: Where the error crossed into taskhub: recorded as ``ErrorInfo.boundary``.
    boundary: str = "runner"
    #: Whether retrying the same operation may succeed (transient infrastructure trouble).
    retryable: bool = False


class ConfigError(TaskhubError):
    """Raised when a run's configuration cannot work (bad flag, unknown model, bad spec)."""

    boundary = "config"


class TasksetError(TaskhubError):
    """Raised when a taskset cannot be loaded or is malformed."""

    boundary = "taskset"


class TasksetNotFound(TasksetError):
    """Raised when a taskset, its revision, split or data file does not exist."""


class SchemaError(TasksetError):
    """Raised when a taskset row or card does not match the schema.

    Attributes:
        row: Index of the offending row in its split, if the error is about a row.
        field: Name of the offending field, if known.
        split: Split holding the row.
    """

    def __init__(
        self,
        message: str,
        *,
        row: int | None = None,
        field: str | None = None,
        split: str | None = None,
    ) -> None:
        super().__init__(message)
        self.row = row
        self.field = field
        self.split = split


class RemoteCodeError(TasksetError):
    """Raised when a taskset's rows or card would run code the user has not said to trust.

    Attributes:
        specs: Each offending spec with where it comes from (``card rewards: python:m:f``).
    """

    def __init__(self, message: str, *, specs: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.specs = list(specs)


class EnvError(TaskhubError):
    """Raised when talking to an environment server fails.

    Attributes:
        env_url: The server (or WebSocket) URL involved.
        code: The OpenEnv error code from an error frame, when there was one.
    """

    boundary = "env"
    retryable = True

    def __init__(self, message: str, *, env_url: str | None = None, code: str | None = None):
        super().__init__(message)
        self.env_url = env_url
        self.code = code


class EnvConnectError(EnvError):
    """Raised when the environment server cannot be reached or refuses the connection."""


class EnvProtocolError(EnvError):
    """Raised when the server answers something the OpenEnv protocol does not allow.

    Also raised for error frames whose code says the request itself was wrong
    (``VALIDATION_ERROR``, ``UNKNOWN_TYPE``, ``INVALID_JSON``). Not retried: a server that
    answers garbage once usually does again.
    """

    retryable = False


class EnvExecutionError(EnvError):
    """Raised when the env reports an exception inside ``reset``/``step`` (``EXECUTION_ERROR``).

    Not retried: an env that raises on a task usually raises again on the same task.
    """

    retryable = False


class EnvTimeout(EnvError):
    """Raised when the server does not answer a request before its deadline."""


class EnvCapacityError(EnvError):
    """Raised when the server refuses a new session (``CAPACITY_REACHED``): back-pressure."""


class EnvClosedError(EnvError):
    """Raised when the server closes the session in the middle of an episode."""


class EnvLaunchError(EnvError):
    """Raised when a local environment folder cannot be started."""

    retryable = False


class ModelError(TaskhubError):
    """Raised when a model backend fails to produce a reply."""

    boundary = "model"
    retryable = True


class ModelAuthError(ModelError):
    """Raised when the model endpoint rejects the credentials (401/403): bad configuration."""

    retryable = False


class AgentFormatError(TaskhubError):
    """Raised when a model reply cannot be turned into a valid action."""

    boundary = "agent"

    def __init__(self, message: str, *, reply: str | None = None) -> None:
        super().__init__(message)
        self.reply = reply


class PluginError(TaskhubError):
    """Raised when a plugin (reward, validator, model backend) cannot be created."""

    boundary = "config"


class UnknownPluginError(PluginError):
    """Raised when no plugin of that kind is registered under the name."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        message = f"unknown {kind} {name!r}"
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            message += f". Did you mean {close[0]!r}?"
        if known:
            message += f" Known {kind}s: {', '.join(known)}."
        super().__init__(message)
        self.kind = kind
        self.name = name


class MissingDependencyError(PluginError):
    """Raised when a plugin needs an optional package that is not installed."""


class RewardError(TaskhubError):
    """Raised when a reward cannot be computed for an episode."""

    boundary = "reward"


class ResultsError(TaskhubError):
    """Raised when a run directory or results file cannot be read or written."""

    boundary = "results"
