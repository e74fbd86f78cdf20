"""Hub plumbing shared by the publishing modules: repo ids, tokens, errors, cards, pushes."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from taskhub._errors import TaskhubError, TasksetNotFound

logger = logging.getLogger(__name__)

#: Header key of a profiled taskset's README.md that records which runs were used.
PROFILE_HEADER = "taskhub_profile"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SECRET_ENV_NAME = re.compile(
    r"(^|_)(KEY|APIKEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDENTIALS)$",
    re.IGNORECASE,
)


def check_repo_id(repo_id: str, error: type[TaskhubError]) -> None:
    """Raise ``error`` unless ``repo_id`` has the Hub's ``ORG/NAME`` shape."""
    if not _REPO_ID.match(repo_id):
        raise error(f"{repo_id!r} is not a Hub repo id: use ORG/NAME (letters, digits, . _ -)")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (``…_KEY``, ``…TOKEN``…)."""
    return bool(_SECRET_ENV_NAME.search(name))


def require_token(token: str | None, action: str, error: type[TaskhubError]) -> str:
    """Return the token to write with: ``token``, else huggingface_hub's own (``HF_TOKEN``)."""
    from huggingface_hub import get_token

    resolved = token or get_token()
    if not resolved:
        raise error(
            f"{action} needs a Hub token with write access: set HF_TOKEN, pass --token, or run "
            "`hf auth login`. Nothing was pushed."
        )
    return resolved


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a huggingface_hub error, if it carries a response."""
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


@contextmanager
def hub_errors(what: str, error: type[TaskhubError]) -> Iterator[None]:
    """Turn huggingface_hub's errors into taskhub errors that say what to do."""
    from huggingface_hub.errors import (
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except RevisionNotFoundError as exc:
        raise TasksetNotFound(f"{what}: the revision does not exist on the Hub ({exc})") from None
    except RepositoryNotFoundError:
        raise error(
            f"{what}: the repo was not found on the Hub (or it is private and the token cannot "
            "read it)"
        ) from None
    except HfHubHTTPError as exc:
        status = http_status(exc)
        if status == 401:
            raise error(
                f"{what}: the Hub refused the token (HTTP 401): check HF_TOKEN or --token"
            ) from None
        if status == 403:
            raise error(f"{what}: the token may not write to this repo (HTTP 403)") from None
        raise error(f"{what}: the Hub failed (HTTP {status}): {exc}") from None
    except Exception as exc:
        from taskhub._taskset import unreachable

        if not unreachable(exc):
            raise
        raise error(
            f"{what}: cannot reach the Hub ({type(exc).__name__}: {exc}): check the network "
            "(or HF_ENDPOINT)"
        ) from None


def whoami(api: Any, what: str, error: type[TaskhubError]) -> str:
    """The name of the token's owner (a first request that proves the token works)."""
    with hub_errors(what, error):
        name = api.whoami().get("name")
    return str(name)


def folder_files(folder: Path) -> list[str]:
    """Files of a folder to publish, as repo paths (hidden files and caches left out)."""
    files = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_file():
            files.append(rel.as_posix())
    return files


@dataclass(frozen=True)
class PushResult:
    """Where a push landed."""

    repo_id: str
    """The dataset repo."""
    commit_sha: str
    """The commit it created."""
    branch: str
    """The branch the commit is on."""
    tag: str | None
    """The tag created at the commit, if one was asked for."""
    url: str
    """The commit's page."""
    files: tuple[str, ...]
    """Paths added or replaced by the commit."""


def render_readme(header: Mapping[str, Any], body: str) -> str:
    """A card: the YAML header between ``---`` lines, then the body."""
    text = yaml.safe_dump(dict(header), sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{text}---\n\n{body.strip()}\n"


def split_readme(text: str) -> tuple[dict[str, Any], str]:
    """Split a card into its YAML header (``{}`` when it has none) and its body."""
    match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    if not match:
        return {}, text
    header = yaml.safe_load(match.group(1)) or {}
    return (header if isinstance(header, dict) else {}), text[match.end() :]
