"""Redaction: secrets found and replaced in everything a results push publishes."""

from __future__ import annotations

import base64
import binascii
import logging
import math
import re
import urllib.parse
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from taskhub._errors import ResultsError
from taskhub._schema import EpisodeRecord, RunManifest

logger = logging.getLogger(__name__)

#: What a redacted value is replaced with.
REDACTED = "[REDACTED]"
#: Shortest secret value accepted for exact-value redaction (shorter ones match too much text).
MIN_SECRET_LENGTH = 8
#: Unbroken runs of base64/hex characters at least this long are opaque blobs to inspect.
OPAQUE_BLOB_LENGTH = 200
_SECRET_KEY = re.compile(
    r"^(.*[_-])?(api[_-]?key|apikey|access[_-]?key|secret([_-]?key)?|token|access[_-]?token|"
    r"refresh[_-]?token|auth[_-]?token|password|passwd|passphrase|authorization|cookie|"
    r"credentials?|private[_-]?key)$",
    re.IGNORECASE,
)
_NOT_REDACTED = r"(?!\[REDACTED\])"
#: (kind, pattern, replacement) of the secret shapes looked for in every string.
_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "private_key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        REDACTED,
    ),
    ("bearer", re.compile(r"(?i)\b(bearer|basic)(\s+)" + _NOT_REDACTED + r"[\w.~+/=-]{8,}"), ""),
    ("openai_key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
    ("github_token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})"), REDACTED),
    ("aws_key", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    ("google_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
    ("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("jwt", re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"), REDACTED),
    ("url_credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"), REDACTED),
    (
        "assignment",
        re.compile(
            r"(?i)\b([\w-]*(?:api[_-]?key|apikey|token|secret|password|passwd))\b"
            r"(\s*[:=]\s*['\"]?)" + _NOT_REDACTED + r"([^\s'\",;&]{6,})"
        ),
        "",
    ),
)
_OPAQUE = re.compile(r"[A-Za-z0-9+/_-]{" + str(OPAQUE_BLOB_LENGTH) + r",}={0,2}")


@dataclass
class RedactionReport:
    """What redaction replaced: counts by kind, and the fields touched (never the values)."""

    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    fields: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        """Number of replacements."""
        return sum(self.counts.values())


class Redactor:
    """Replaces secrets in JSON-like data, and refuses data it cannot inspect.

    Args:
        secrets: Exact secret values by name (for example the values of environment variables
            whose names look secret). Each value, URL-encoded and base64-encoded forms included,
            is replaced wherever it appears.

    Raises:
        ResultsError: A secret value is too short to be redacted without mangling other text.
    """

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        """Prepare the needles of the exact secret values."""
        self._needles: list[tuple[str, str]] = []
        for name, value in (secrets or {}).items():
            if not value:
                continue
            if len(value) < MIN_SECRET_LENGTH:
                raise ResultsError(
                    f"the value of secret {name!r} is {len(value)} characters long: too short "
                    f"to redact reliably (at least {MIN_SECRET_LENGTH}); unset it or leave it "
                    "out. Nothing was pushed."
                )
            forms = {
                value,
                urllib.parse.quote(value, safe=""),
                urllib.parse.quote_plus(value),
                base64.b64encode(value.encode()).decode().rstrip("="),
                base64.urlsafe_b64encode(value.encode()).decode().rstrip("="),
            }
            self._needles += [(name, form) for form in forms if len(form) >= MIN_SECRET_LENGTH]
        # longest first, so a value is replaced before a shorter one inside it
        self._needles.sort(key=lambda item: -len(item[1]))
        self.report = RedactionReport()

    def _text(self, text: str, where: str) -> str:
        out = text
        for name, needle in self._needles:
            if needle in out:
                self.report.counts[f"secret:{name}"] += out.count(needle)
                self.report.fields.add(where)
                out = out.replace(needle, REDACTED)
        for kind, pattern, replacement in _PATTERNS:

            def substitute(match: re.Match[str], kind: str = kind, repl: str = replacement) -> str:
                self.report.counts[kind] += 1
                self.report.fields.add(where)
                if repl:
                    return repl
                return match.group(1) + match.group(2) + REDACTED

            out = pattern.sub(substitute, out)
        self._check_opaque(out, where)
        return out

    def _check_opaque(self, text: str, where: str) -> None:
        for match in _OPAQUE.finditer(text):
            blob = match.group(0)
            if not _looks_encoded(blob):
                continue
            decoded = _decode_blob(blob)
            if decoded is None:
                raise ResultsError(
                    f"{where}: holds an opaque blob of {len(blob)} characters that cannot be "
                    "inspected for secrets (not text once decoded); redaction cannot be "
                    "guaranteed, so nothing was pushed. Remove the blob from the run first."
                )
            probe = Redactor.__new__(Redactor)
            probe._needles, probe.report = self._needles, RedactionReport()
            probe._text(decoded, where)
            if probe.report.total:
                raise ResultsError(
                    f"{where}: a secret is hidden inside an encoded blob ({len(blob)} characters) "
                    "and cannot be redacted in place; nothing was pushed."
                )

    def redact(self, value: Any, where: str = "$") -> Any:
        """Return ``value`` (JSON data: dicts, lists, strings, numbers) with secrets replaced.

        Raises:
            ResultsError: A value is not JSON data, or is an opaque blob that cannot be
                inspected (the field is named).
        """
        if isinstance(value, str):
            return self._text(value, where)
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, list | tuple):
            return [self.redact(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ResultsError(f"{where}: a non-text key {key!r} cannot be inspected")
                path = f"{where}.{key}"
                clean_key = self._text(key, f"{path} (key)")
                if _SECRET_KEY.match(key) and item not in (None, "", REDACTED):
                    self.report.counts["secret_field"] += 1
                    self.report.fields.add(path)
                    out[clean_key] = REDACTED
                else:
                    out[clean_key] = self.redact(item, path)
            return out
        raise ResultsError(
            f"{where}: a {type(value).__name__} value cannot be inspected for secrets; nothing "
            "was pushed"
        )

    def find(self, text: str) -> list[str]:
        """Return the kinds of secrets still present in ``text`` (a last check before upload)."""
        found = [f"secret:{name}" for name, needle in self._needles if needle in text]
        found += [kind for kind, pattern, _ in _PATTERNS if pattern.search(text)]
        return found


def _looks_encoded(blob: str) -> bool:
    """Whether a long unbroken run of characters looks like encoded data (base64 or hex).

    Long runs of one repeated character or of digits (a model's degenerate output, a big
    number) are text, not an encoding that could hide a secret.
    """
    if len(set(blob)) < 16:
        return False
    has_digit = any(c.isdigit() for c in blob)
    if re.fullmatch(r"[0-9a-fA-F]+", blob):
        return has_digit and any(c.isalpha() for c in blob)
    return has_digit and any(c.isupper() for c in blob) and any(c.islower() for c in blob)


def _decode_blob(blob: str) -> str | None:
    """Decode a base64 (or base64url) blob to text; None when it is not text."""
    padded = blob + "=" * (-len(blob) % 4)
    for decoder in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decoder(padded.encode())
        except (binascii.Error, ValueError):
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if all(c.isprintable() or c in "\n\r\t" for c in text):
            return text
    if re.fullmatch(r"[0-9a-fA-F]+", blob):
        try:
            text = bytes.fromhex(blob if len(blob) % 2 == 0 else blob[:-1]).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
        return text if text.isprintable() else None
    return None


def redact_run(
    manifest: RunManifest,
    records: Sequence[EpisodeRecord],
    secrets: Mapping[str, str] | None = None,
) -> tuple[RunManifest, list[EpisodeRecord], RedactionReport]:
    """Return a run's manifest and records with every secret replaced by ``[REDACTED]``.

    Every string field of every record and of the manifest is scanned. The result is checked
    once more after serialization; anything still found stops the push.

    Args:
        manifest: The run's manifest.
        records: Its episode records.
        secrets: Exact secret values by name (the CLI passes the values of environment
            variables whose names end in KEY, TOKEN, SECRET, PASSWORD...).

    Returns:
        The redacted manifest, the redacted records, and what was replaced.

    Raises:
        ResultsError: Redaction cannot be guaranteed for some field (it is named).
    """
    redactor = Redactor(secrets)
    try:
        clean_manifest = RunManifest.model_validate(
            redactor.redact(manifest.model_dump(mode="json"), "run.json")
        )
        clean_records = []
        for index, record in enumerate(records):
            where = f"episode {index} ({record.task_id}#{record.sample})"
            clean_records.append(
                EpisodeRecord.model_validate(redactor.redact(record.model_dump(mode="json"), where))
            )
    except ValidationError as exc:
        raise ResultsError(
            f"a redacted value no longer fits the record schema ({exc.errors()[0]['loc']}); "
            "redaction cannot be guaranteed, nothing was pushed"
        ) from None
    texts = [("run.json", clean_manifest.model_dump_json())] + [
        (f"episode {i}", r.model_dump_json()) for i, r in enumerate(clean_records)
    ]
    for where, text in texts:
        left = redactor.find(text)
        if left:
            raise ResultsError(
                f"{where}: {', '.join(sorted(set(left)))} still present after redaction; "
                "nothing was pushed"
            )
    return clean_manifest, clean_records, redactor.report
