"""Redaction over a corpus of planted secrets: every shape redacted or the push refused."""

from __future__ import annotations

import base64
import json
import urllib.parse
from datetime import UTC, datetime

import pytest

from taskhub import EpisodeRecord, ResultsError, Task, redact_run
from taskhub._schema import (
    ChatMessage,
    EvalConfig,
    ModelInfo,
    RunManifest,
    StepRecord,
    TasksetRef,
)

SK = "sk-proj-" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2"
SHORT_SK = "sk-" + "Ab12Cd34Ef56"  # shorter than the sk- shape: found once decoded or by name
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" + "VJTUt9Us8cKj"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + "dozjgNryP4J3jVmNHl0w5N"
ENV_SECRET = "corp-internal-s3cr3t-2026"

#: (id, text planted in an observation, the secret that must not come out)
CORPUS: list[tuple[str, str, str]] = [
    ("openai", f"use {SK} here", SK),
    ("openai-project-in-json", json.dumps({"k": SK}), SK),
    ("anthropic", "key sk-ant-api03-" + "Qw3rTy7Ui9Op1As2Df4Gh6", "Qw3rTy7Ui9Op1As2Df4Gh6"),
    ("hf", "token hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm1234", "QwErTyUiOpAsDfGhJkLzXcVbNm1234"),
    ("github-classic", "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "A1b2C3d4E5f6G7h8I9j0K1l2"),
    (
        "github-fine",
        "github_pat_" + "11ABCDEFG0123456789_abcdefghij",
        "11ABCDEFG0123456789_abcdefghij",
    ),
    ("gitlab", "glpat-" + "xY7zW3vU9tS1rQ5pO2nM", "xY7zW3vU9tS1rQ5pO2nM"),
    ("stripe-live", "sk_live_" + "51HbK2LmN3oP4qR5sT6uV7w", "51HbK2LmN3oP4qR5sT6uV7w"),
    ("stripe-restricted", "rk_live_" + "9aB8cD7eF6gH5iJ4kL3m", "9aB8cD7eF6gH5iJ4kL3m"),
    (
        "slack-bot",
        "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKl",
        "1234567890123-AbCdEfGhIjKl",
    ),
    ("slack-webhook", "https://hooks.slack.com/services/" + "T0001/B0002/XyZ123abc", "XyZ123abc"),
    ("discord-webhook", "https://discord.com/api/webhooks/" + "1234567/AbC-dEf_123", "AbC-dEf_123"),
    ("aws-access-key", "AKIA" + "IOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("aws-secret-export", f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET),
    ("aws-secret-config", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET),
    ("aws-secret-quoted", f'aws_secret_access_key = "{AWS_SECRET}"', AWS_SECRET),
    ("google-api", "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "SyA1b2C3d4E5f6G7h8I9j0K1l2"),
    ("google-oauth", "ya29." + "a0AfH6SMBx1y2z3A4b5C6d7E8f9", "a0AfH6SMBx1y2z3A4b5C6d7E8f9"),
    ("npm", "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5"),
    ("pypi", "pypi-" + "AgEIcHlwaS5vcmcCJGE4ZjFmNzE3LWNhNzItNGNkMi1iY2M3", "AgEIcHlwaS5vcmc"),
    (
        "sendgrid",
        "SG." + "aBcDeFgHiJkLmNoPqRsT12." + "uVwXyZaBcDeFgHiJkLmN34",
        "uVwXyZaBcDeFgHiJkLmN34",
    ),
    ("twilio", "SK" + "0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    ("jwt", f"session {JWT}", JWT),
    ("bearer", "Authorization: Bearer " + "abc.DEF-ghi_jkl/mno+pqr=", "abc.DEF-ghi_jkl"),
    ("basic", "Authorization: Basic " + "dXNlcjpodW50ZXIyaHVudGVy", "dXNlcjpodW50ZXIyaHVudGVy"),
    ("x-api-key", "header x-api-key: " + "Kx81mQ2zR7tY4uP0", "Kx81mQ2zR7tY4uP0"),
    ("x-api-key-label", "Headers sent: X-Api-Key: " + "Kx81mQ2zR7tY4uP1", "Kx81mQ2zR7tY4uP1"),
    ("api-key-is", "my api key is " + "Kx81mQ2zR7tY4uP2", "Kx81mQ2zR7tY4uP2"),
    ("password-eq", "password=" + "hunter2hunter2", "hunter2hunter2"),
    ("password-json", '{"password": "' + "Tr0ub4dor&3x" + '"}', "Tr0ub4dor&3x"),
    ("db-password-json", '{"db_password": "' + "pgS3cretValue9" + '"}', "pgS3cretValue9"),
    ("json-escaped", '{\\"api_key\\": \\"' + "Esc4pedValue77" + '\\"}', "Esc4pedValue77"),
    ("yaml", "client_secret: " + "yAmLs3cr3tv4lue", "yAmLs3cr3tv4lue"),
    ("passphrase", "passphrase = " + "correct-horse-battery", "correct-horse-battery"),
    ("token-colon", "token: " + "tok_8f7e6d5c4b3a", "tok_8f7e6d5c4b3a"),
    ("private-key-assign", "private_key=" + "pkV4lue123456", "pkV4lue123456"),
    (
        "pem-full",
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        PEM_BODY,
    ),
    ("pem-no-end", f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n", PEM_BODY),
    ("pem-escaped", f"-----BEGIN PRIVATE KEY-----\\n{PEM_BODY}\\n", PEM_BODY),
    ("url-userinfo", "https://admin:" + "S3cr3tPa55" + "@db.example.org/x", "S3cr3tPa55"),
    ("postgres-url", "postgres://app:" + "pgPa55w0rd" + "@10.0.0.5:5432/db", "pgPa55w0rd"),
    ("url-query", "https://api.example.org/v1?api_key=" + "QueryK3y99", "QueryK3y99"),
    ("azure-storage", "AccountKey=" + "a" * 20 + "B1c2D3e4F5==", "aaaaaaaaaaaaaaaaaaaaB1c2D3e4F5"),
    ("sk-base64", base64.b64encode(SK.encode()).decode(), base64.b64encode(SK.encode()).decode()),
    ("short-sk-base64", base64.b64encode(f"key={SHORT_SK}".encode()).decode(), "Ab12Cd34Ef56"),
    ("sk-base64url", base64.urlsafe_b64encode(SK.encode()).decode(), "c2stcHJvai1aeDlR"),
    ("sk-hex", SK.encode().hex(), SK.encode().hex()[:40]),
    (
        "sk-urlencoded",
        urllib.parse.quote(SK, safe="").replace("-", "%2D"),
        "Zx9Qw8Er7Ty6Ui5Op4As3Df2",
    ),
    ("sk-unicode-escape", SK.replace("-", "\\u002d"), "Zx9Qw8Er7Ty6Ui5Op4As3Df2"),
    ("sk-html-entities", SK.replace("-", "&#45;"), "Zx9Qw8Er7Ty6Ui5Op4As3Df2"),
    ("sk-split-lines", SK[:14] + "\n" + SK[14:], SK[14:]),
    ("sk-split-escaped", SK[:14] + "\\n" + SK[14:], SK[14:]),
    ("sk-in-markdown", f"```\nOPENAI_API_KEY={SK}\n```", SK),
    (
        "dotenv",
        "HF_TOKEN=" + "hf_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBa9876",
        "ZyXwVuTsRqPoNmLkJiHgFeDcBa9876",
    ),
    ("env-value", f"the service replied {ENV_SECRET}", ENV_SECRET),
    ("env-value-b64", base64.b64encode(ENV_SECRET.encode()).decode(), "Y29ycC1pbnRlcm5hbC1zM2Ny"),
    ("env-value-url", urllib.parse.quote(ENV_SECRET + "/x", safe=""), "corp-internal-s3cr3t-2026"),
    ("env-value-hex", ENV_SECRET.encode().hex(), ENV_SECRET.encode().hex()),
    (
        "telegram",
        "bot" + "123456789:" + "AAE1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "AAE1b2C3d4E5f6G7h8I9j0K1l2",
    ),
    (
        "mailchimp",
        "mc " + "0123456789abcdef0123456789abcdef-us12",
        "0123456789abcdef0123456789abcdef",
    ),
    ("kwarg-secret", "connect(secret='" + "kwS3cr3t!!" + "')", "kwS3cr3t!!"),
    ("credentials-eq", "credentials=" + "cr3dV4lu3xyz", "cr3dV4lu3xyz"),
]


def _manifest() -> RunManifest:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return RunManifest(
        run_id="r",
        taskhub_version="0",
        status="completed",
        created_at=now,
        updated_at=now,
        config=EvalConfig(model="scripted/oracle", taskset="t"),
        taskset=TasksetRef(source="t", kind="local", name="t", fingerprint="f"),
        split="test",
        model=ModelInfo(spec="scripted/oracle", provider="scripted", name="oracle"),
    )


def _record(observation: dict[str, object], *, prompt: str = "", reply: str = "") -> EpisodeRecord:
    return EpisodeRecord(
        run_id="r",
        episode_id="e",
        task_id="t1",
        task_hash="c" * 64,  # a content hash is not a secret
        split="test",
        sample=0,
        seed=1,
        outcome="scored",
        reward=1.0,
        success=True,
        initial_observation=observation,
        steps=[
            StepRecord(index=0, action={"answer": reply}, observation={}, reward=1.0, done=True)
        ],
        messages=[
            ChatMessage(role="user", content=prompt),
            ChatMessage(role="assistant", content=reply),
        ],
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        duration_s=1.0,
        task=Task(task_id="t1"),
    )


def test_the_corpus_has_more_than_60_shapes() -> None:
    assert len(CORPUS) >= 60
    assert len({name for name, _, _ in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize(("text", "secret"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_a_planted_secret_never_leaves(text: str, secret: str) -> None:
    record = _record({"note": text}, prompt=f"observation: {text}", reply=text)
    try:
        manifest, records, _ = redact_run(_manifest(), [record], {"CORP_TOKEN": ENV_SECRET})
    except ResultsError as exc:  # refused: nothing leaves
        pytest.fail(f"refused rather than redacted: {exc}")
    published = manifest.model_dump_json() + records[0].model_dump_json()
    assert secret not in published
    assert (
        secret
        not in json.loads(published[len(manifest.model_dump_json()) :])["messages"][0]["content"]
    )
    assert records[0].task_hash == "c" * 64


def test_a_value_under_a_secret_key_is_redacted_where_it_reappears() -> None:
    value = "pLain-v4lue-nobody-would-guess"
    record = _record(
        {"session_token": value, "question": "say 1"},
        prompt=f"session_token: {value}\nquestion: say 1",
        reply=f"I saw {value}",
    )
    manifest, records, report = redact_run(_manifest(), [record])
    assert records[0].initial_observation == {"session_token": "[REDACTED]", "question": "say 1"}
    assert records[0].messages[0].content == "session_token: [REDACTED]\nquestion: say 1"
    assert records[0].messages[1].content == "I saw [REDACTED]"
    assert value not in records[0].model_dump_json()


def test_a_text_found_clean_is_searched_again_once_a_secret_is_learnt() -> None:
    # texts found clean are not searched again (keys and values repeat in every record), till
    # a new secret is learnt
    from taskhub.hub._redact import Redactor

    value = "pLain-v4lue-nobody-would-guess"
    redactor = Redactor()
    note = {"note": f"I saw {value}", value: 1}
    assert redactor.redact(note) == note
    redactor.learn({"session_token": value})
    assert redactor.redact(note) == {"note": "I saw [REDACTED]", "[REDACTED]": 1}


def test_text_without_secrets_is_left_alone() -> None:
    text = "The answer is 42. Move left, then up; the key to the maze is patience."
    record = _record({"question": text, "sha": "0123456789abcdef" * 2}, prompt=text, reply="42")
    _, records, report = redact_run(_manifest(), [record])
    assert records[0].messages[0].content == text
    assert records[0].initial_observation == {"question": text, "sha": "0123456789abcdef" * 2}
    assert report.total == 0


REFUSED = {
    "opaque-binary-blob": base64.b64encode(bytes(range(256)) * 2).decode(),
    "secret-inside-long-blob": base64.b64encode((f"token {ENV_SECRET} " * 12).encode()).decode(),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_cannot_be_inspected_is_refused(name: str) -> None:
    record = _record({"image": REFUSED[name]})
    with pytest.raises(ResultsError, match="nothing was pushed"):
        redact_run(_manifest(), [record], {"CORP_TOKEN": ENV_SECRET})


def test_a_shape_is_searched_in_every_text_that_may_hold_it() -> None:
    # the hints only skip searches that cannot match: over every corpus text as written and
    # decoded, and over texts re's IGNORECASE matches though their letters differ
    from taskhub.hub._redact import _PATTERNS, _may_hold, _views

    tricky = [
        "Baſic " + "dXNlcjpwYXNzd29yZA==",  # the long s matches "s" under IGNORECASE
        "BEARER " + "abc.DEF-ghi_jkl/mno",
        "db_PASSWORD = " + "hunter2hunter2",
        "credentıals: " + "s3cr3tvalue!",  # the dotless i matches "i" under IGNORECASE
        "credentİals: " + "s3cr3tvalue!",  # and the dotted capital I (casefold: "i" and a dot)
        "api_\u212aey is " + "Zx9Qw8Er7Ty6",  # the Kelvin sign matches "k"
        "AKIA" + "IOSFODNN7EXAMPLE",
        "postgres://admin:" + "pa55word@db",
    ]
    written = [c[1] for c in CORPUS] + tricky
    # a long text is searched for its hints one by one, a short one in a single search
    padding = "the quick brown fox, " * 16
    written += [padding + text + " " + padding for text in written]
    texts = [view.text for text in written for view in _views(text)]
    searched = 0
    for text in texts:
        kinds = {kind for kind, _, _ in _may_hold(text)}
        for kind, pattern, _ in _PATTERNS:
            if pattern.search(text):
                searched += 1
                assert kind in kinds, (kind, text)
    assert searched > len(CORPUS)
