"""Redaction: secrets found and replaced in everything a results push publishes."""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import hashlib
import json
import logging
import math
import re
import urllib.parse
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from taskhub._errors import ResultsError
from taskhub._schema import EpisodeRecord, RunManifest

logger = logging.getLogger(__name__)

_Model = TypeVar("_Model", RunManifest, EpisodeRecord)

#: What a redacted value is replaced with.
REDACTED = "[REDACTED]"
#: Shortest secret value accepted for exact-value redaction (shorter ones match too much text).
MIN_SECRET_LENGTH = 8
#: Shortest text given to the detectors (nothing shorter holds a secret they recognize).
MIN_DETECTED_LENGTH = 8
#: Unbroken runs of base64/hex characters at least this long are opaque blobs to inspect.
OPAQUE_BLOB_LENGTH = 200
_SECRET_KEY = re.compile(
    r"^(.*[_-])?(api[_-]?key|apikey|access[_-]?key|secret([_-]?key)?|token|access[_-]?token|"
    r"refresh[_-]?token|auth[_-]?token|password|passwd|passphrase|authorization|cookie|"
    r"credentials?|private[_-]?key)$",
    re.IGNORECASE,
)
_NOT_REDACTED = r"(?!\[REDACTED\])"
#: Names that say what follows them is a secret (``api_key``, ``x-api-key``, ``db_password``...).
_SECRET_NAME = (
    r"(?:api[_ -]?key|apikey|access[_-]?key|account[_-]?key|secret[_-]?key|"
    r"private[_-]?key|token|secret|"
    r"password|passwd|passphrase|pwd|credentials?|auth[_-]?key|client[_-]?secret)"
)
_SECRET_WORD = r"[\w-]*" + _SECRET_NAME
#: (kind, pattern, replacement) of the secret shapes looked for in every string. A pattern
#: whose replacement is "" keeps its first two groups (the label) and replaces the rest.
_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "private_key",
        # the END line may be missing (a key cut off, or pasted without it)
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----(?:(?!-----END)[\s\S])*"
            r"(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----)?"
        ),
        REDACTED,
    ),
    ("bearer", re.compile(r"(?i)\b(bearer|basic)(\s+)" + _NOT_REDACTED + r"[\w.~+/=-]{8,}"), ""),
    (
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows)/[\w/-]+"),
        REDACTED,
    ),
    (
        "discord_webhook",
        re.compile(r"https://(?:\w+\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w-]+"),
        REDACTED,
    ),
    ("stripe_key", re.compile(r"\b[rsp]k_(?:live|test)_[0-9A-Za-z]{10,}"), REDACTED),
    ("gitlab_token", re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ft)-[\w-]{16,}"), REDACTED),
    ("openai_key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
    ("github_token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})"), REDACTED),
    ("aws_key", re.compile(r"\b(AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), REDACTED),
    ("google_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),
    ("google_oauth", re.compile(r"\bya29\.[\w-]{20,}"), REDACTED),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{30,}"), REDACTED),
    ("pypi_token", re.compile(r"\bpypi-[\w-]{40,}"), REDACTED),
    ("sendgrid_key", re.compile(r"\bSG\.[\w-]{16,}\.[\w-]{16,}"), REDACTED),
    ("twilio_key", re.compile(r"\bSK[0-9a-fA-F]{32}\b"), REDACTED),
    ("jwt", re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"), REDACTED),
    ("url_credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"), REDACTED),
    (
        "assignment",
        re.compile(
            r"(?i)\b(" + _SECRET_WORD + r")\b"
            r"([\"']?\s*(?:[:=]|=>|\bis\b)\s*[\"']?)" + _NOT_REDACTED + r"([^\s'\",;&]{6,})"
        ),
        "",
    ),
)
#: Text every match of a shape holds, one of each entry: a text holding none of them is not
#: searched for that shape (most texts hold none, and a search over a whole record is costly).
#: A shape matched case-insensitively has its hints case-folded, and is looked for in the text
#: folded as ``re``'s IGNORECASE compares (``_folded``); any other's are looked for as written.
_HINTS: dict[str, tuple[str, ...]] = {
    "private_key": ("-----BEGIN",),
    "bearer": ("bearer", "basic"),
    "slack_webhook": ("https://hooks.slack.com/",),
    "discord_webhook": ("/api/webhooks/",),
    "stripe_key": ("k_live_", "k_test_"),
    "gitlab_token": (
        "glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glimt-", "gloas-", "glsoat-", "glft-"
    ),
    "openai_key": ("sk-",),
    "hf_token": ("hf_",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "aws_key": ("AKIA", "ASIA", "ABIA", "ACCA"),
    "google_key": ("AIza",),
    "google_oauth": ("ya29.",),
    "slack_token": ("xox",),
    "npm_token": ("npm_",),
    "pypi_token": ("pypi-",),
    "sendgrid_key": ("SG.",),
    "twilio_key": ("SK",),
    "jwt": ("eyJ",),
    "url_credentials": ("://",),
    "assignment": ("key", "token", "secret", "passw", "passphrase", "pwd", "credential"),
}  # fmt: skip
#: A text that may hold an assignment (``token: ...``) holds its name right before its sign:
#: looked for first, in the folded text, without the name's leading ``[\w-]*`` (whose
#: backtracking over every word of a whole record makes that search the costliest of all).
_ASSIGNMENT_NEAR = re.compile(_SECRET_NAME + r"[\"']?\s*(?:[:=]|=>|is)")
#: For a shape in ``_GATES``, a text holding one of its hints is searched only when its gate
#: finds something (in the text as ``_may_hold`` reads it for that shape).
_GATES: dict[str, re.Pattern[str]] = {"assignment": _ASSIGNMENT_NEAR}


def _folded(text: str) -> str:
    """``text`` case-folded so that a letter IGNORECASE matches with an ASCII one becomes it.

    casefold() does that for every letter but the dotless i (kept) and the dotted capital I
    (folded to "i" and a combining dot).
    """
    return text.casefold().replace("\u0131", "i").replace("i\u0307", "i")


def _hint_index() -> tuple[re.Pattern[str], dict[str, frozenset[str]]]:
    """One search for every hint (case-folded), and the kinds of shape each hint found stands for.

    At each position the search finds the longest hint there; the hints that are its
    prefixes are there too, so it stands for their shapes as well.
    """
    folded = {kind: tuple(_folded(h) for h in hints) for kind, hints in _HINTS.items()}
    every = sorted({h for hints in folded.values() for h in hints}, key=len, reverse=True)
    search = re.compile("(?=(" + "|".join(re.escape(h) for h in every) + "))")
    kinds = {
        found: frozenset(
            k for k, hints in folded.items() if any(found.startswith(h) for h in hints)
        )
        for found in every
    }
    return search, kinds


_HINT_SEARCH, _HINT_KINDS = _hint_index()
#: Each shape, its hints, and whether they are looked for in the folded text.
_SHAPE_HINTS = tuple(
    (shape, _HINTS[shape[0]], bool(shape[1].flags & re.IGNORECASE)) for shape in _PATTERNS
)
#: Up to this length a text's hints are found in one search (case-folded: a few shapes more
#: than needed may be searched in it); a longer text is searched for each hint, as written for
#: a shape matched with case, which is faster there and lets fewer shapes through.
_ONE_SEARCH_CHARS = 256


def _may_hold(text: str) -> list[tuple[str, re.Pattern[str], str]]:
    """The shapes of ``_PATTERNS`` that ``text`` may hold: those whose hint it holds."""
    folded = _folded(text)
    if len(text) <= _ONE_SEARCH_CHARS:
        found = _HINT_SEARCH.findall(folded)
        if not found:
            return []
        kinds = frozenset().union(*(_HINT_KINDS[hint] for hint in found))
        shapes = [shape for shape in _PATTERNS if shape[0] in kinds]
    else:
        shapes = [
            shape
            for shape, hints, ignore_case in _SHAPE_HINTS
            if any(hint in (folded if ignore_case else text) for hint in hints)
        ]
    return [s for s in shapes if s[0] not in _GATES or _GATES[s[0]].search(folded)]


#: Escapes a secret may hide behind: JSON/Python escapes, percent-encoding, HTML entities.
_ESCAPE = re.compile(
    r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|\\([\\/\"'])|%([0-9a-fA-F]{2})|&#x([0-9a-fA-F]+);"
    r"|&#(\d+);"
)
#: A line break inside a token (a key split over two lines), literal or escaped.
_BREAK = re.compile(r"(?:\\r)?\\n|\r?\n")
#: Runs of base64/hex characters long enough to hide a key once decoded.
_BLOB = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
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


class _Found:
    """What the detectors found in each text seen, forgotten when it holds ``MAX_TEXTS``.

    Kept by the text's digest, not the text: a run's texts can take gigabytes.
    """

    MAX_TEXTS = 100_000

    def __init__(self) -> None:
        self._found: dict[bytes, list[str]] = {}

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def get(self, key: bytes) -> list[str] | None:
        return self._found.get(key)

    def keep(self, key: bytes, found: list[str]) -> None:
        if len(self._found) >= self.MAX_TEXTS:
            self._found.clear()
        self._found[key] = found


class Redactor:
    """Replaces secrets in JSON-like data, and refuses data it cannot inspect.

    Each string is searched, as written and as decoded (JSON and percent escapes, HTML
    entities, line breaks inside a token, base64 and hex runs), for taskhub's secret shapes,
    for what detect-secrets' detectors find, and for the exact values it was given or has
    learnt (``learn``): a value once seen under a secret-named key is replaced wherever else it
    appears.

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
        #: Short texts found clean with the needles known (keys and values repeat in every
        #: record): forgotten when a needle is added, or when it holds ``MAX_CLEAN`` texts.
        self._clean: set[str] = set()
        #: Short texts learnt already (``learn``), as many at most.
        self._learnt: set[str] = set()
        for name, value in (secrets or {}).items():
            if not value:
                continue
            if len(value) < MIN_SECRET_LENGTH:
                raise ResultsError(
                    f"the value of secret {name!r} is {len(value)} characters long: too short "
                    f"to redact reliably (at least {MIN_SECRET_LENGTH}); unset it or leave it "
                    "out. Nothing was pushed."
                )
            self._add_needle(name, value)
        self._detectors = _detectors()
        #: What the detectors found in each text seen (prompts repeat across episodes).
        self._cache = _Found()
        self.report = RedactionReport()

    #: Texts kept (``_clean``, ``_learnt``) are this long at most, and this many at most.
    CLEAN_CHARS = 256
    MAX_CLEAN = 100_000

    def _keep(self, texts: set[str], text: str) -> None:
        """Add ``text`` to ``texts`` if it is short, emptying ``texts`` when it is full."""
        if len(text) <= self.CLEAN_CHARS:
            if len(texts) >= self.MAX_CLEAN:
                texts.clear()
            texts.add(text)

    def _add_needle(self, name: str, value: str) -> None:
        forms = {
            value,
            urllib.parse.quote(value, safe=""),
            urllib.parse.quote_plus(value),
            base64.b64encode(value.encode()).decode().rstrip("="),
            base64.urlsafe_b64encode(value.encode()).decode().rstrip("="),
            value.encode().hex(),
            json.dumps(value)[1:-1],
            json.dumps(value, ensure_ascii=True)[1:-1],
        }
        known = {needle for _, needle in self._needles}
        self._clean.clear()  # a text clean before may hold the new needle
        self._needles += [
            (name, form) for form in forms if len(form) >= MIN_SECRET_LENGTH and form not in known
        ]
        # longest first, so a value is replaced before a shorter one inside it
        self._needles.sort(key=lambda item: -len(item[1]))

    def learn(self, value: Any) -> None:
        """Find the secret values of ``value`` (JSON data), to redact them wherever they appear.

        Values under secret-named keys and what the detectors find are learnt.
        """
        if isinstance(value, str):
            if value in self._learnt:  # learning a text again finds nothing new
                return
            self._keep(self._learnt, value)
            for found in self._detect(value):
                # (the private-key detector reports the BEGIN line, which the shape covers)
                if (
                    len(found) >= MIN_SECRET_LENGTH
                    and found != REDACTED
                    and "PRIVATE KEY" not in found
                ):
                    self._add_needle("detected", found)
        elif isinstance(value, list | tuple):
            for item in value:
                self.learn(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and _SECRET_KEY.match(key):
                    text = item if isinstance(item, str) else json.dumps(item, default=str)
                    if item not in (None, "", REDACTED) and len(text) >= MIN_SECRET_LENGTH:
                        self._add_needle(f"field {key}", text)
                self.learn(item)

    def _detect(self, text: str) -> list[str]:
        """The secret values the detectors find in ``text`` (as written and decoded)."""
        return [value for view in _views(text) for value in self._detect_plain(view.text)]

    def _text(self, text: str, where: str, depth: int = 0) -> str:
        if depth == 0 and text in self._clean:
            return text
        out = self._replace(text, where)
        for view in _views(out):
            if view.text == out:
                continue
            spans = self._spans(view.text)
            if spans:
                self.report.counts["encoded"] += len(spans)
                self.report.fields.add(where)
                out = _replace_spans(out, sorted({view.original(a, b) for a, b in spans}))
        if depth == 0:
            out = self._blobs(out, where)
            if out == text:
                self._keep(self._clean, text)
        return out

    def _replace(self, text: str, where: str) -> str:
        out = text
        for name, needle in self._needles:
            if needle in out:
                self.report.counts[f"secret:{name}"] += out.count(needle)
                self.report.fields.add(where)
                out = out.replace(needle, REDACTED)
        for kind, pattern, replacement in _may_hold(out):

            def substitute(match: re.Match[str], kind: str = kind, repl: str = replacement) -> str:
                self.report.counts[kind] += 1
                self.report.fields.add(where)
                if repl:
                    return repl
                return match.group(1) + match.group(2) + REDACTED

            out = pattern.sub(substitute, out)
        for value in self._detect_plain(out):
            if value in out and value != REDACTED and len(value) >= 4:
                self.report.counts["detect_secrets"] += 1
                self.report.fields.add(where)
                out = out.replace(value, REDACTED)
        return out

    def _detect_plain(self, text: str) -> list[str]:
        if len(text) < MIN_DETECTED_LENGTH:
            return []
        cache = self._cache
        key = cache.key(text)
        cached = cache.get(key)
        if cached is not None:
            return cached
        found = []
        for detector in self._detectors:
            try:
                found += [v for v in detector.analyze_string(text) if v]
            except Exception:  # noqa: BLE001  (a detector bug must not leak: keep going)
                logger.debug("detector %s failed", type(detector).__name__)
        cache.keep(key, found)
        return found

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """Where in ``text`` a secret is (needles, shapes, detectors), as (start, end)."""
        spans = []
        for _, needle in self._needles:
            start = text.find(needle)
            while start >= 0:
                spans.append((start, start + len(needle)))
                start = text.find(needle, start + 1)
        for _, pattern, replacement in _may_hold(text):
            for match in pattern.finditer(text):
                if match.group(0).endswith(REDACTED):
                    continue
                spans.append(match.span(3) if not replacement else match.span())
        for value in self._detect_plain(text):
            start = text.find(value)
            if start >= 0 and value != REDACTED:
                spans.append((start, start + len(value)))
        return spans

    def _blobs(self, text: str, where: str) -> str:
        """Decode base64 and hex runs; one that hides a secret is replaced (or refused)."""
        out = text
        for match in list(_BLOB.finditer(text)):
            blob = match.group(0)
            if not _looks_encoded(blob, len(blob) >= OPAQUE_BLOB_LENGTH):
                continue
            decoded = _decode_blob(blob)
            if decoded is None:
                if len(blob) >= OPAQUE_BLOB_LENGTH:
                    raise ResultsError(
                        f"{where}: holds an opaque blob of {len(blob)} characters that cannot "
                        "be inspected for secrets (not text once decoded); redaction cannot be "
                        "guaranteed, so nothing was pushed. Remove the blob from the run first."
                    )
                continue
            probe = Redactor.__new__(Redactor)
            probe._needles, probe._detectors = self._needles, self._detectors
            probe._cache, probe.report = self._cache, RedactionReport()
            probe._clean, probe._learnt = set(), set()
            probe._text(decoded, where, depth=1)
            if not probe.report.total:
                continue
            if len(blob) >= OPAQUE_BLOB_LENGTH:
                raise ResultsError(
                    f"{where}: a secret is hidden inside an encoded blob ({len(blob)} "
                    "characters) and cannot be redacted in place; nothing was pushed."
                )
            self.report.counts["encoded"] += 1
            self.report.fields.add(where)
            out = out.replace(blob, REDACTED)
        return out

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
        found: list[str] = []
        for view in _views(text):
            found += [f"secret:{name}" for name, needle in self._needles if needle in view.text]
            found += [
                kind
                for kind, pattern, _ in _may_hold(view.text)
                if any(not m.group(0).endswith(REDACTED) for m in pattern.finditer(view.text))
            ]
        # (the detectors already read every string one by one; over a whole serialized record
        # they cost more than all the rest of redaction)
        return found


@dataclass(frozen=True)
class _View:
    """A decoded reading of a text, with the way back to the text's own positions."""

    text: str
    #: (view start, original start, original end, decoded length) of every piece.
    pieces: tuple[tuple[int, int, int, int], ...] = ()

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that view[start:end] was decoded from."""
        if not self.pieces:
            return start, end
        starts = [p[0] for p in self.pieces]

        def locate(index: int, at_end: bool) -> int:
            i = max(0, bisect.bisect_right(starts, index) - 1)
            view_start, orig_start, orig_end, length = self.pieces[i]
            if orig_end - orig_start == length:  # a literal piece: one to one
                return orig_start + (index - view_start)
            return orig_end if at_end else orig_start

        return locate(start, False), locate(end - 1, True) if end > start else locate(start, False)


def _decode(text: str, pattern: re.Pattern[str], decode: Any) -> _View | None:
    """Decode every match of ``pattern`` in ``text`` (``decode(match)`` gives its text)."""
    pieces: list[tuple[int, int, int, int]] = []
    parts: list[str] = []
    position = view_length = 0
    for match in pattern.finditer(text):
        if match.start() > position:
            literal = text[position : match.start()]
            pieces.append((view_length, position, match.start(), len(literal)))
            parts.append(literal)
            view_length += len(literal)
        decoded = decode(match)
        pieces.append((view_length, match.start(), match.end(), len(decoded)))
        parts.append(decoded)
        view_length += len(decoded)
        position = match.end()
    if not pieces:
        return None
    if position < len(text):
        pieces.append((view_length, position, len(text), len(text) - position))
        parts.append(text[position:])
    return _View("".join(parts), tuple(pieces))


def _unescape(match: re.Match[str]) -> str:
    unicode, byte, char, percent, hex_entity, entity = match.groups()
    try:
        if unicode or byte or percent or hex_entity:
            return chr(int(unicode or byte or percent or hex_entity, 16))
        if entity:
            return chr(int(entity))
    except (ValueError, OverflowError):
        return match.group(0)
    return char or match.group(0)


def _views(text: str) -> list[_View]:
    """The text as written, unescaped, and with line breaks inside tokens removed."""
    views = [_View(text)]
    unescaped = _decode(text, _ESCAPE, _unescape)
    if unescaped is not None:
        views.append(unescaped)
    if "\n" in text or "\\n" in text:  # a real line break, or an escaped one
        joined = _decode(text, _BREAK, lambda match: "")
        if joined is not None:
            views.append(joined)
    return views


def _replace_spans(text: str, spans: list[tuple[int, int]]) -> str:
    out, position = [], 0
    for start, end in spans:
        if start < position:
            start = position
        if end <= start:
            continue
        out += [text[position:start], REDACTED]
        position = end
    out.append(text[position:])
    return "".join(out)


_DETECTORS = (
    "ArtifactoryDetector", "AWSKeyDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
    "CloudantDetector", "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector",
    "IbmCloudIamDetector", "IbmCosHmacDetector", "JwtTokenDetector", "KeywordDetector",
    "MailchimpDetector", "NpmDetector", "OpenAIDetector", "PrivateKeyDetector",
    "PypiTokenDetector", "SendGridDetector", "SlackDetector", "SoftlayerDetector",
    "SquareOAuthDetector", "StripeDetector", "TelegramBotTokenDetector", "TwilioKeyDetector",
)  # fmt: skip


@functools.cache
def _detector_classes() -> tuple[type[Any], ...]:
    """detect-secrets' detectors of secret shapes.

    Its entropy and IP detectors are left out: commit shas, content hashes and addresses are
    not secrets.
    """
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    except ImportError as exc:  # fail closed: no push without the detectors
        raise ResultsError(
            f"redaction needs detect-secrets ({exc}): pip install 'detect-secrets>=1.5'. "
            "Nothing was pushed."
        ) from None
    mapping: dict[str, type[Any]] = dict(get_mapping_from_secret_type_to_class())
    classes = {cls.__name__: cls for cls in mapping.values()}
    return tuple(classes[name] for name in _DETECTORS if name in classes)


def _detectors() -> list[Any]:
    return [cls() for cls in _detector_classes()]


def _looks_encoded(blob: str, long: bool = True) -> bool:
    """Whether an unbroken run of characters looks like encoded data (base64 or hex).

    Long runs of one repeated character or of digits (a model's degenerate output, a big
    number) are text, not an encoding that could hide a secret.
    """
    if len(set(blob)) < (16 if long else 8):
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
    once more after serialization; anything still found stops the push. ``RunRedactor`` does
    the same one record at a time.

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
    redactor = RunRedactor(manifest, secrets)
    for record in records:
        redactor.learn(record)
    clean_manifest = redactor.manifest()
    clean_records = [redactor.redact(record, index)[0] for index, record in enumerate(records)]
    return clean_manifest, clean_records, redactor.report


class RunRedactor:
    """``redact_run`` one record at a time, for a run too large to hold: two passes over it.

    ``learn`` every record first (a secret seen once, under a secret-named key or by a
    detector, is redacted wherever it appears, in the records before it too), then take the
    ``manifest`` and ``redact`` each record::

        redactor = RunRedactor(manifest, secrets)
        for record in records():
            redactor.learn(record)
        clean = redactor.manifest()
        for index, record in enumerate(records()):
            record, line = redactor.redact(record, index)

    Raises:
        ResultsError: A secret value is too short to redact (``__init__``); redaction cannot
            be guaranteed for some field (``manifest``, ``redact``: it is named).
    """

    def __init__(self, manifest: RunManifest, secrets: Mapping[str, str] | None = None) -> None:
        """Start with the run's ``manifest`` learnt, and the exact ``secrets`` values."""
        self._redactor = Redactor(secrets)
        self._manifest = manifest.model_dump(mode="json")
        self._redactor.learn(self._manifest)

    @property
    def report(self) -> RedactionReport:
        """What was replaced so far."""
        return self._redactor.report

    def learn(self, record: EpisodeRecord) -> None:
        """Learn the secret values of ``record`` (pass 1)."""
        self._redactor.learn(record.model_dump(mode="json"))

    def manifest(self) -> RunManifest:
        """The manifest, redacted with what every record taught (after the last ``learn``)."""
        clean = _validated(RunManifest, self._redactor.redact(self._manifest, "run.json"))
        self._check("run.json", clean.model_dump_json())
        return clean

    def redact(self, record: EpisodeRecord, index: int) -> tuple[EpisodeRecord, str]:
        """``record``, the ``index``-th of the run, redacted (pass 2), and its JSON."""
        where = f"episode {index} ({record.task_id}#{record.sample})"
        data = self._redactor.redact(record.model_dump(mode="json"), where)
        clean = _validated(EpisodeRecord, data)
        line = clean.model_dump_json()
        self._check(f"episode {index}", line)
        return clean, line

    def _check(self, where: str, text: str) -> None:
        left = self._redactor.find(text)
        if left:
            raise ResultsError(
                f"{where}: {', '.join(sorted(set(left)))} still present after redaction; "
                "nothing was pushed"
            )


def _validated(model: type[_Model], data: Any) -> _Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ResultsError(
            f"a redacted value no longer fits the record schema ({exc.errors()[0]['loc']}); "
            "redaction cannot be guaranteed, nothing was pushed"
        ) from None
