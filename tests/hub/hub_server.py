"""A Hugging Face Hub-compatible HTTP server on loopback, for driving the real hub clients in tests.

`HubServer` speaks enough of the Hub's HTTP API for `huggingface_hub` (2.4) and `datasets` (5.2)
to create repos, upload (regular files inline, large/binary files through the plain LFS batch API,
never Xet), manage branches and tags, list trees, refs and commits, and download files, including
`Range` requests. Storage is in memory: every commit is a full snapshot of the tree, and its sha is
a real 40-hex digest.

Auth follows the Hub. Tokens map to user names. Any valid token may read and write every repo.
Anonymous requests may read public repos only; a private or missing repo answers 401 with
``X-Error-Code: RepoNotFound``. An unknown token answers 401 with ``X-Error-Message: Invalid
credentials in Authorization header`` on every route.

Example:
    ```python
    with HubServer(tokens={"hf_test_token": "testuser"}) as hub:
        HfApi(endpoint=hub.url, token="hf_test_token").create_repo("org/ds", repo_type="dataset")
    ```

Clients must run with ``HF_HUB_DISABLE_XET=1`` set before `huggingface_hub` is imported: with Xet
enabled the client uploads LFS-mode files through a Xet CAS server, which this server does not have.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import socket
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from fnmatch import fnmatch
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
"""The message the Hub (and this server) sends for an unknown token; the client keys on it."""

LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.gz", "*.h5", "*.jpg", "*.joblib", "*.lz4",
    "*.mp3", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.parquet", "*.pickle", "*.pkl", "*.png",
    "*.pt", "*.pth", "*.safetensors", "*.tar", "*.tflite", "*.wav", "*.zip", "*.zst",
)  # fmt: skip
"""Files stored in LFS whatever their size, as in the Hub's default `.gitattributes`."""

LFS_MIN_SIZE = 10 * 1024 * 1024
"""Files at least this big go to LFS (the Hub refuses larger regular files)."""

_REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_NAME = r"[\w][\w.-]*"
_API_REPO = rf"/api/(?P<kind>models|datasets|spaces)/(?P<ns>{_NAME})/(?P<name>{_NAME})"
_GIT_REPO = rf"/(?:(?P<prefix>datasets|spaces)/)?(?P<ns>{_NAME})/(?P<name>{_NAME}?)"
_SHA1 = re.compile(r"[0-9a-f]{40}")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class _Blob:
    """File content, stored inline (regular) or as an LFS object."""

    data: bytes
    lfs: bool

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def pointer(self) -> bytes:
        spec = "version https://git-lfs.github.com/spec/v1"
        return f"{spec}\noid sha256:{self.sha256}\nsize {len(self.data)}\n".encode()

    @cached_property
    def git_oid(self) -> str:
        """The git blob id: of the LFS pointer file for LFS objects, as in git."""
        return _git_blob_sha1(self.pointer if self.lfs else self.data)

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid


@dataclass(frozen=True)
class _Commit:
    oid: str
    parent: str | None
    title: str
    message: str
    author: str
    date: datetime
    files: Mapping[str, _Blob]


@dataclass
class _Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: datetime
    commits: dict[str, _Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def head(self, branch: str = "main") -> _Commit:
        return self.commits[self.branches[branch]]

    def history(self, commit: _Commit) -> list[_Commit]:
        """`commit` and its ancestors, newest first."""
        out = [commit]
        while out[-1].parent is not None:
            out.append(self.commits[out[-1].parent])
        return out


@dataclass(frozen=True)
class RequestRecord:
    """One request the server answered, for tests that check what the client sent."""

    method: str
    path: str
    status: int
    range: str | None


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    """Still percent-encoded: route patterns match on it and decode the captured parts."""
    query: dict[str, list[str]]
    headers: Message
    body: bytes

    def json(self) -> dict[str, Any]:
        try:
            payload = json.loads(self.body or b"{}")
        except ValueError as exc:
            raise _HubError(400, f"Request body is not valid JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise _HubError(400, f"Request body must be a JSON object, got {payload!r}")
        return payload

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() in ("1", "true")


@dataclass
class _Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> _Response:
    headers = {"Content-Type": "application/json; charset=utf-8", **(headers or {})}
    return _Response(status, json.dumps(data).encode(), headers)


class _HubError(Exception):
    """An error answer; `huggingface_hub` maps `X-Error-Code` to its exception classes."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers, self.extra = dict(headers or {}), dict(extra or {})

    def response(self) -> _Response:
        # Header values must be one latin-1 line.
        one_line = " ".join(self.message.split()).encode("ascii", "replace").decode()
        headers = {"X-Error-Message": one_line, **self.headers}
        if self.code is not None:
            headers["X-Error-Code"] = self.code
        return _json({"error": self.message, **self.extra}, self.status, headers)


_Handler = Callable[..., _Response]


class _Hub:
    """Repos, LFS objects and the Hub API over them, independent of the HTTP transport."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self.tokens = dict(tokens)
        self.repos: dict[tuple[str, str], _Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}
        self.requests: list[RequestRecord] = []
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._counter = itertools.count()
        routes: list[tuple[str, str, _Handler]] = [
            ("GET", r"/api/whoami-v2", self.whoami),
            ("POST", r"/api/repos/create", self.create_repo),
            ("DELETE", r"/api/repos/delete", self.delete_repo),
            ("POST", r"/api/validate-yaml", self.validate_yaml),
            ("GET", _API_REPO, self.repo_info),
            ("GET", rf"{_API_REPO}/revision/(?P<rev>[^/]+)", self.repo_info),
            ("PUT", rf"{_API_REPO}/settings", self.update_settings),
            ("GET", rf"{_API_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", self.tree),
            ("POST", rf"{_API_REPO}/paths-info/(?P<rev>[^/]+)", self.paths_info),
            ("GET", rf"{_API_REPO}/refs", self.refs),
            ("GET", rf"{_API_REPO}/commits/(?P<rev>[^/]+)", self.commits),
            ("POST", rf"{_API_REPO}/preupload/(?P<rev>[^/]+)", self.preupload),
            ("POST", rf"{_API_REPO}/commit/(?P<rev>[^/]+)", self.commit),
            ("POST", rf"{_API_REPO}/branch/(?P<branch>[^/]+)", self.create_branch),
            ("DELETE", rf"{_API_REPO}/branch/(?P<branch>[^/]+)", self.delete_branch),
            ("POST", rf"{_API_REPO}/tag/(?P<rev>[^/]+)", self.create_tag),
            ("DELETE", rf"{_API_REPO}/tag/(?P<tag>[^/]+)", self.delete_tag),
            ("POST", rf"{_GIT_REPO}\.git/info/lfs/objects/batch", self.lfs_batch),
            ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", self.lfs_upload),
            ("GET", rf"{_GIT_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", self.resolve),
            ("HEAD", rf"{_GIT_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", self.resolve),
        ]
        self._routes = [(method, re.compile(path), handler) for method, path, handler in routes]

    # -- dispatch ---------------------------------------------------------------------------

    def handle(self, request: _Request) -> _Response:
        try:
            response = self._dispatch(request)
        except _HubError as exc:
            response = exc.response()
        except Exception:
            self.errors.append(traceback.format_exc())
            response = _HubError(500, "Internal error in the test Hub server").response()
        self.requests.append(
            RequestRecord(request.method, request.path, response.status, request.headers["Range"])
        )
        return response

    def _dispatch(self, request: _Request) -> _Response:
        user = self._authenticate(request)
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if match is not None and method == request.method:
                params = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                with self._lock:
                    return handler(request, user, **params)
        raise _HubError(404, f"Not found: {request.method} {request.path}")

    def _authenticate(self, request: _Request) -> str | None:
        header = request.headers["Authorization"]
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self.tokens:
            raise _HubError(401, INVALID_CREDENTIALS)
        return self.tokens[token.strip()]

    @staticmethod
    def _writer(user: str | None) -> str:
        if user is None:
            raise _HubError(401, "You must be authenticated to write to the Hub: pass a token")
        return user

    def _repo(self, user: str | None, kind: str, ns: str, name: str, **_: str) -> _Repo:
        """The repo, if `user` may see it; kind is a URL word (`datasets`) or a repo type."""
        repo_type = _REPO_TYPES.get(kind, kind)
        repo = self.repos.get((repo_type, f"{ns}/{name}"))
        if repo is None or (repo.private and user is None):
            # As on the Hub: anonymous callers cannot tell private repos from missing ones.
            raise _HubError(
                401 if user is None else 404, "Repository not found", code="RepoNotFound"
            )
        return repo

    @staticmethod
    def _commit_at(repo: _Repo, rev: str) -> _Commit:
        oid = repo.branches.get(rev) or repo.tags.get(rev)
        if oid is None and _SHA1.fullmatch(rev) and rev in repo.commits:
            oid = rev
        if oid is None:
            raise _HubError(404, f"Invalid rev id: {rev}", code="RevisionNotFound")
        return repo.commits[oid]

    @staticmethod
    def _base_url(request: _Request) -> str:
        return f"http://{request.headers['Host']}"

    def _repo_url(self, request: _Request, repo: _Repo) -> str:
        return f"{self._base_url(request)}/{_URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    def _add_commit(
        self,
        repo: _Repo,
        parent: _Commit | None,
        files: Mapping[str, _Blob],
        title: str,
        message: str,
        author: str,
    ) -> _Commit:
        date = datetime.now(UTC)
        manifest = [
            repo.repo_type,
            repo.repo_id,
            parent.oid if parent else None,
            sorted((path, blob.git_oid) for path, blob in files.items()),
            title,
            message,
            author,
            _iso(date),
            next(self._counter),
        ]
        oid = hashlib.sha1(json.dumps(manifest).encode()).hexdigest()
        commit = _Commit(oid, parent.oid if parent else None, title, message, author, date, files)
        repo.commits[oid] = commit
        return commit

    # -- account and repos ------------------------------------------------------------------

    def whoami(self, request: _Request, user: str | None) -> _Response:
        if user is None:
            raise _HubError(401, INVALID_CREDENTIALS)
        return _json(
            {
                "type": "user",
                "id": user,
                "name": user,
                "fullname": user,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "orgs": [],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": "test", "role": "write"},
                },
            }
        )

    def create_repo(self, request: _Request, user: str | None) -> _Response:
        user = self._writer(user)
        payload = request.json()
        repo_type = payload.get("type") or "model"
        namespace, name = payload.get("organization") or user, payload.get("name")
        if repo_type not in _URL_PREFIXES or not isinstance(name, str):
            raise _HubError(400, f"Invalid repo type {repo_type!r} or name {name!r}")
        if not re.fullmatch(_NAME, namespace) or not re.fullmatch(_NAME, name):
            raise _HubError(400, f"Invalid repo id {namespace}/{name!r}")
        repo_id = f"{namespace}/{name}"
        if (repo_type, repo_id) in self.repos:
            # The client reads `url` from this answer too when called with exist_ok=True.
            url = self._repo_url(request, self.repos[(repo_type, repo_id)])
            raise _HubError(409, f"You already created this {repo_type} repo", extra={"url": url})
        private = payload.get("visibility", "public") != "public" or bool(payload.get("private"))
        repo = _Repo(repo_type, repo_id, private, datetime.now(UTC))
        files = {".gitattributes": _Blob(_GITATTRIBUTES.encode(), lfs=False)}
        repo.branches["main"] = self._add_commit(repo, None, files, "initial commit", "", user).oid
        self.repos[(repo_type, repo_id)] = repo
        return _json({"url": self._repo_url(request, repo), "name": repo_id})

    def delete_repo(self, request: _Request, user: str | None) -> _Response:
        user = self._writer(user)
        payload = request.json()
        repo = self._repo(
            user,
            payload.get("type") or "model",
            payload.get("organization") or user,
            str(payload.get("name")),
        )
        del self.repos[(repo.repo_type, repo.repo_id)]
        return _json({})

    def update_settings(self, request: _Request, user: str | None, **repo_ref: str) -> _Response:
        repo = self._repo(self._writer(user), **repo_ref)
        payload = request.json()
        if "visibility" in payload or "private" in payload:
            repo.private = payload.get("visibility", "public") != "public" or bool(
                payload.get("private")
            )
        return _json({})

    def validate_yaml(self, request: _Request, user: str | None) -> _Response:
        try:
            _card_data(str(request.json().get("content") or ""))
        except yaml.YAMLError as exc:
            return _json({"errors": [{"message": f"Invalid YAML metadata: {exc}"}]}, 400)
        return _json({"errors": [], "warnings": []})

    def repo_info(
        self, request: _Request, user: str | None, rev: str = "main", **repo_ref: str
    ) -> _Response:
        repo = self._repo(user, **repo_ref)
        commit = self._commit_at(repo, rev)
        with_blobs = request.flag("blobs")
        siblings = []
        for path, blob in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if with_blobs:
                sibling.update(size=len(blob.data), blobId=blob.git_oid)
                if blob.lfs:
                    sibling["lfs"] = {
                        "sha256": blob.sha256,
                        "size": len(blob.data),
                        "pointerSize": len(blob.pointer),
                    }
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": repo.repo_id,
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit.oid,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "createdAt": _iso(repo.created_at),
            "lastModified": _iso(commit.date),
        }
        if "README.md" in commit.files:
            try:
                info["cardData"] = _card_data(commit.files["README.md"].data.decode())
            except (UnicodeDecodeError, yaml.YAMLError):
                pass  # the Hub serves repos with broken cards too, just without cardData
        return _json(info)

    # -- trees, refs, history ---------------------------------------------------------------

    def tree(
        self, request: _Request, user: str | None, rev: str, path: str = "", **repo_ref: str
    ) -> _Response:
        repo = self._repo(user, **repo_ref)
        commit = self._commit_at(repo, rev)
        prefix = path.strip("/")
        directories = _directories(commit.files)
        if prefix and prefix not in directories:
            raise _HubError(
                404,
                f"{prefix!r} does not exist on {rev!r}",
                code="EntryNotFound",
                headers={"X-Repo-Commit": commit.oid},
            )
        below = f"{prefix}/" if prefix else ""
        paths = sorted(p for p in directories | set(commit.files) if p.startswith(below))
        if not request.flag("recursive"):
            paths = [p for p in paths if "/" not in p[len(below) :]]
        expand = request.flag("expand")
        return _json([self._entry(repo, commit, p, expand) for p in paths])

    def paths_info(
        self, request: _Request, user: str | None, rev: str, **repo_ref: str
    ) -> _Response:
        repo = self._repo(user, **repo_ref)
        commit = self._commit_at(repo, rev)
        form = parse_qs(request.body.decode(), keep_blank_values=True)
        expand = form.get("expand", ["false"])[-1].lower() in ("1", "true")
        known = _directories(commit.files) | set(commit.files)
        paths = [p.strip("/") for p in form.get("paths", [])]
        return _json([self._entry(repo, commit, p, expand) for p in paths if p in known])

    def _entry(self, repo: _Repo, commit: _Commit, path: str, expand: bool) -> dict[str, Any]:
        blob = commit.files.get(path)
        if blob is None:
            entry: dict[str, Any] = {
                "type": "directory",
                "oid": _tree_oid(commit, path),
                "size": 0,
                "path": path,
            }
        else:
            entry = {"type": "file", "oid": blob.git_oid, "size": len(blob.data), "path": path}
            if blob.lfs:
                entry["lfs"] = {
                    "oid": blob.sha256,
                    "size": len(blob.data),
                    "pointerSize": len(blob.pointer),
                }
        if expand:
            last = _last_change(repo, commit, path)
            entry["lastCommit"] = {"id": last.oid, "title": last.title, "date": _iso(last.date)}
        return entry

    def refs(self, request: _Request, user: str | None, **repo_ref: str) -> _Response:
        repo = self._repo(user, **repo_ref)

        def ref(name: str, kind: str, oid: str) -> dict[str, str]:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": oid}

        return _json(
            {
                "branches": [ref(n, "heads", oid) for n, oid in sorted(repo.branches.items())],
                "tags": [ref(n, "tags", oid) for n, oid in sorted(repo.tags.items())],
                "converts": [],
                "pullRequests": [],
            }
        )

    def commits(self, request: _Request, user: str | None, rev: str, **repo_ref: str) -> _Response:
        repo = self._repo(user, **repo_ref)
        return _json(
            [
                {
                    "id": c.oid,
                    "title": c.title,
                    "message": c.message,
                    "date": _iso(c.date),
                    "authors": [{"user": c.author}],
                }
                for c in repo.history(self._commit_at(repo, rev))
            ]
        )

    def create_branch(
        self, request: _Request, user: str | None, branch: str, **repo_ref: str
    ) -> _Response:
        repo = self._repo(self._writer(user), **repo_ref)
        start = self._commit_at(repo, request.json().get("startingPoint") or "main")
        if branch in repo.branches:
            raise _HubError(409, f"Branch {branch!r} already exists")
        repo.branches[branch] = start.oid
        return _json({})

    def delete_branch(
        self, request: _Request, user: str | None, branch: str, **repo_ref: str
    ) -> _Response:
        repo = self._repo(self._writer(user), **repo_ref)
        if branch == "main":
            raise _HubError(403, "Cannot delete the default branch 'main'")
        if repo.branches.pop(branch, None) is None:
            raise _HubError(404, f"Invalid rev id: {branch}", code="RevisionNotFound")
        return _json({})

    def create_tag(
        self, request: _Request, user: str | None, rev: str, **repo_ref: str
    ) -> _Response:
        repo = self._repo(self._writer(user), **repo_ref)
        commit = self._commit_at(repo, rev)
        tag = request.json().get("tag")
        if not isinstance(tag, str) or not tag:
            raise _HubError(400, f"Invalid tag name {tag!r}")
        if tag in repo.tags:
            raise _HubError(409, f"Tag {tag!r} already exists")
        repo.tags[tag] = commit.oid
        return _json({})

    def delete_tag(
        self, request: _Request, user: str | None, tag: str, **repo_ref: str
    ) -> _Response:
        repo = self._repo(self._writer(user), **repo_ref)
        if repo.tags.pop(tag, None) is None:
            raise _HubError(404, f"Invalid rev id: {tag}", code="RevisionNotFound")
        return _json({})

    # -- uploads ----------------------------------------------------------------------------

    def preupload(
        self, request: _Request, user: str | None, rev: str, **repo_ref: str
    ) -> _Response:
        repo = self._repo(self._writer(user), **repo_ref)
        commit = self._commit_at(repo, rev)
        answers = []
        for item in request.json().get("files", []):
            sample = base64.b64decode(item.get("sample") or "")
            lfs = _wants_lfs(item["path"], int(item["size"]), sample)
            # The oid lets the client skip files that did not change (sha256 for LFS, git sha1
            # of the content otherwise).
            existing = commit.files.get(item["path"])
            oid = None
            if existing is not None:
                oid = existing.sha256 if lfs else _git_blob_sha1(existing.data)
            answers.append(
                {
                    "path": item["path"],
                    "uploadMode": "lfs" if lfs else "regular",
                    "shouldIgnore": False,
                    "oid": oid,
                }
            )
        return _json({"files": answers, "commitOid": commit.oid})

    def lfs_batch(self, request: _Request, user: str | None, **repo_ref: str) -> _Response:
        kind = repo_ref.pop("prefix", "models")
        self._repo(self._writer(user), kind, **repo_ref)  # exists, and the caller may write
        payload = request.json()
        if payload.get("operation") != "upload":
            raise _HubError(400, "This server only supports the LFS 'upload' operation")
        objects = []
        for obj in payload.get("objects", []):
            answer: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.lfs_objects:  # known objects are listed without actions
                href = f"{self._base_url(request)}/lfs-upload/{obj['oid']}"
                answer["actions"] = {"upload": {"href": href}}
            objects.append(answer)
        return _json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def lfs_upload(self, request: _Request, user: str | None, oid: str) -> _Response:
        # The client sends no token here (the Hub hands out pre-signed storage URLs), so the
        # content hash is the only check.
        if hashlib.sha256(request.body).hexdigest() != oid:
            raise _HubError(400, f"Uploaded content does not match sha256 {oid}")
        self.lfs_objects[oid] = request.body
        return _Response(200)

    def commit(self, request: _Request, user: str | None, rev: str, **repo_ref: str) -> _Response:
        author = self._writer(user)
        repo = self._repo(author, **repo_ref)
        if request.flag("create_pr"):
            raise _HubError(400, "This test server does not support pull requests (create_pr)")
        if rev not in repo.branches:
            raise _HubError(
                404, f"Invalid rev id: {rev} (commits go to a branch)", code="RevisionNotFound"
            )
        try:
            lines = [json.loads(line) for line in request.body.splitlines() if line.strip()]
        except ValueError as exc:
            raise _HubError(400, f"Commit payload is not valid NDJSON: {exc}") from exc
        if not lines or lines[0].get("key") != "header":
            raise _HubError(400, "The first NDJSON line of a commit must be the header")
        header, head = lines[0]["value"], repo.head(rev)
        parent = header.get("parentCommit")
        if parent is not None and parent != head.oid:
            raise _HubError(412, "A commit has happened since. Please refresh and try again.")
        files = dict(head.files)
        for line in lines[1:]:
            _apply(files, line.get("key"), line.get("value") or {}, self.lfs_objects)
        commit = self._add_commit(
            repo, head, files, header.get("summary") or "", header.get("description") or "", author
        )
        repo.branches[rev] = commit.oid
        url = f"{self._repo_url(request, repo)}/commit/{commit.oid}"
        return _json({"commitOid": commit.oid, "commitUrl": url, "pullRequestUrl": None})

    # -- downloads --------------------------------------------------------------------------

    def resolve(
        self, request: _Request, user: str | None, rev: str, path: str, **repo_ref: str
    ) -> _Response:
        kind = repo_ref.pop("prefix", "models")
        repo = self._repo(user, kind, **repo_ref)
        commit = self._commit_at(repo, rev)
        blob = commit.files.get(path)
        if blob is None:
            raise _HubError(
                404, "Entry not found", code="EntryNotFound", headers={"X-Repo-Commit": commit.oid}
            )
        # No X-Xet-Hash, ever: the client would switch to Xet downloads.
        headers = {
            "X-Repo-Commit": commit.oid,
            "ETag": f'"{blob.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        size = len(blob.data)
        match = _RANGE.fullmatch((request.headers["Range"] or "").strip())
        if match is None or match.groups() == ("", ""):
            return _Response(200, blob.data, headers)  # no or unsupported (multi-)range: all
        first, last = match.groups()
        start, end = (
            (size - int(last), size - 1) if first == "" else (int(first), int(last or size - 1))
        )
        start, end = max(start, 0), min(end, size - 1)
        if start >= size or start > end:
            raise _HubError(
                416,
                f"Range not satisfiable: {request.headers['Range']}",
                headers={"Content-Range": f"bytes */{size}"},
            )
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        return _Response(206, blob.data[start : end + 1], headers)


def _apply(
    files: dict[str, _Blob], key: Any, value: Mapping[str, Any], lfs: Mapping[str, bytes]
) -> None:
    """Apply one commit operation to the tree `files`."""
    path = str(value.get("path", "")).strip("/")
    if not path:
        raise _HubError(400, f"Commit operation {key!r} has no path")
    if key == "file":
        files[path] = _Blob(base64.b64decode(value.get("content", "")), lfs=False)
    elif key == "lfsFile":
        data = lfs.get(str(value.get("oid")))
        if data is None:
            raise _HubError(400, f"LFS object {value.get('oid')} for {path!r} was never uploaded")
        files[path] = _Blob(data, lfs=True)
    elif key == "deletedFile":
        if files.pop(path, None) is None:
            raise _HubError(
                404, f"A file with this name doesn't exist: {path!r}", code="EntryNotFound"
            )
    elif key == "deletedFolder":
        doomed = [p for p in files if p.startswith(f"{path}/")]
        if not doomed:
            raise _HubError(
                404, f"A folder with this name doesn't exist: {path!r}", code="EntryNotFound"
            )
        for p in doomed:
            del files[p]
    else:
        raise _HubError(400, f"Unknown commit operation {key!r}")


def _wants_lfs(path: str, size: int, sample: bytes) -> bool:
    name = PurePosixPath(path).name
    return any(fnmatch(name, p) for p in LFS_PATTERNS) or size >= LFS_MIN_SIZE or b"\0" in sample


def _directories(files: Mapping[str, _Blob]) -> set[str]:
    return {str(parent) for path in files for parent in PurePosixPath(path).parents} - {"."}


def _tree_oid(commit: _Commit, directory: str) -> str:
    listing = sorted(
        (p, b.git_oid) for p, b in commit.files.items() if p.startswith(f"{directory}/")
    )
    return hashlib.sha1(json.dumps(listing).encode()).hexdigest()


def _last_change(repo: _Repo, commit: _Commit, path: str) -> _Commit:
    """The oldest commit in the unbroken run, back from `commit`, where `path` looks the same."""

    def state(c: _Commit) -> Any:
        blob = c.files.get(path)
        return blob.git_oid if blob is not None else _tree_oid(c, path)

    history = repo.history(commit)
    current = state(commit)
    last = commit
    for older in history[1:]:
        if state(older) != current:
            break
        last = older
    return last


def _card_data(readme: str) -> dict[str, Any] | None:
    """The YAML metadata block at the top of a README, if it has one.

    Raises:
        yaml.YAMLError: The block is not a YAML mapping.
    """
    match = re.match(r"---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|$)", readme, re.S)
    if match is None:
        return None
    data = yaml.safe_load(match.group(1))
    if data is not None and not isinstance(data, dict):
        raise yaml.YAMLError(f"the metadata block is a {type(data).__name__}, not a mapping")
    return data


class _HTTPServer(ThreadingHTTPServer):
    """Threading server that can close its keep-alive connections and join their threads on stop."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], hub: _Hub) -> None:
        self.hub = hub
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _RequestHandler)

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        # Handler threads idle in a keep-alive read; shutting their sockets down wakes them up.
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub; needs an exact Content-Length
    server: _HTTPServer
    timeout = 60  # an idle keep-alive connection does not pin its thread forever

    def do_GET(self) -> None:
        self._serve()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def _serve(self) -> None:
        # Read the whole body first, even for requests answered with an error: a leftover body
        # would be parsed as the next request on this keep-alive connection.
        body = self._read_body()
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        response = self.server.hub.handle(
            _Request(self.command, url.path, query, self.headers, body)
        )
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers["Transfer-Encoding"] or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, up to the blank line
                pass
            return b"".join(chunks)
        length = int(self.headers["Content-Length"] or 0)
        return self.rfile.read(length) if length else b""

    def log_message(self, format: str, *args: Any) -> None:
        pass  # HubServer.requests records every request; stderr stays quiet


class HubServer:
    """A Hub-compatible server in a background thread, for the real `huggingface_hub` clients.

    Args:
        host: Interface to listen on.
        port: Port to listen on; 0 picks a free one.
        tokens: Valid tokens, mapped to the user name each one authenticates.
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, tokens: Mapping[str, str] | None = None
    ) -> None:
        self._address = (host, port)
        self._hub = _Hub(tokens or {})
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8123``; use it as ``HF_ENDPOINT``."""
        if self._server is None:
            raise RuntimeError("HubServer is not running: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request answered so far, oldest first."""
        return self._hub.requests

    @property
    def errors(self) -> list[str]:
        """Tracebacks of unexpected server errors (answered with 500); should stay empty."""
        return self._hub.errors

    def start(self) -> Self:
        """Start serving in a background thread; returns once the socket accepts connections."""
        if self._server is not None:
            raise RuntimeError("HubServer is already running")
        # The constructor binds and listens, so connections are accepted from here on.
        self._server = _HTTPServer(self._address, self._hub)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"hub-server-{self.url}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and join every server thread."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()  # joins the per-connection threads
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
