"""``judge:MODEL``: an LLM grades the answer against a rubric; its score scaled to [0, 1] counts.

MODEL is any model string the runner accepts (``openai/gpt-4o-mini``, ``local/smollm2-135m``...).
An ``openai/`` judge reads its endpoint from ``TASKHUB_JUDGE_BASE_URL`` (else ``OPENAI_BASE_URL``)
and its key from ``TASKHUB_JUDGE_API_KEY`` (else ``OPENAI_API_KEY``): the judge is usually not the
model under evaluation. The prompt is a jinja2 template (sandboxed) that sees ``question``,
``answer``, ``reply``, ``reference``, ``rubric`` (the row's ``metadata.rubric``), ``transcript``
and ``scale``; the reply must end with ``SCORE: <0-scale>``. Sampling is pinned (temperature 0,
seed 0) and every component records the judge model, its parameters, the template's sha256 and
the judge's reply. Calls are async, at most ``concurrency`` at a time per judge.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import weakref
from typing import Any

from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from taskhub import (
    ChatMessage,
    ConfigError,
    EpisodeRecord,
    RewardError,
    RewardFn,
    SamplingParams,
    Score,
    reward,
)
from taskhub.models import (
    GenerateRequest,
    ModelBackend,
    ModelOptions,
    TurnContext,
    load_model,
    split_model_spec,
)

from ._answer import final_answer, final_reply, has_answer, task_prompt

SYSTEM_PROMPT = "You are a strict, fair grader. You judge answers; you never answer the task."

DEFAULT_TEMPLATE = """\
Grade the answer to the task below.
{% if rubric %}
Rubric: {{ rubric }}
{% endif %}
Task:
{{ question }}
{% if reference %}
Reference answer:
{{ reference }}
{% endif %}
Answer to grade:
{{ answer }}

Judge whether the answer is correct and complete{% if reference %} (it must agree with the \
reference answer){% endif %}. Explain briefly, then end your reply with one line \
"SCORE: N" where N is a number from 0 (wrong) to {{ scale }} (fully correct).
"""

_NUMBER = r"[-+]?\d+(?:\.\d+)?"
_SCORE = re.compile(
    rf"\b(?:score|rating|grade)[*_\s]*[:=][*_\s]*({_NUMBER})(?:\s*(?:/|out of)\s*({_NUMBER}))?",
    re.IGNORECASE,
)


def parse_judge_score(reply: str, scale: float) -> tuple[float, float]:
    """Read the last ``SCORE: N`` (or ``N/M``) of a judge's reply.

    Returns:
        The raw score and what it is out of (``M``, else ``scale``).

    Raises:
        RewardError: No score is found, or it is outside 0..M.
    """
    matches = list(_SCORE.finditer(reply))
    if not matches:
        clipped = reply if len(reply) <= 300 else reply[:299] + "…"
        raise RewardError(
            f"the judge's reply has no parsable score (expected a last line 'SCORE: N', "
            f"0 <= N <= {scale:g}): {clipped!r}"
        )
    last = matches[-1]
    raw = float(last.group(1))
    out_of = float(last.group(2)) if last.group(2) else scale
    if out_of <= 0 or not 0 <= raw <= out_of:
        raise RewardError(f"the judge's score {last.group(0)!r} is outside 0..{out_of:g}")
    return raw, out_of


class Judge:
    """The ``judge:MODEL`` reward: renders the rubric prompt, calls the model, parses its score."""

    def __init__(
        self,
        model: str,
        *,
        template: str | None = None,
        scale: float = 10.0,
        temperature: float = 0.0,
        max_tokens: int = 512,
        concurrency: int = 4,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        """Check the model string and template now, so that a bad spec fails before any episode.

        Raises:
            ConfigError: The model string, template or parameters are wrong.
            UnknownPluginError: No model backend has that provider name.
        """
        split_model_spec(model)
        if scale <= 0 or concurrency < 1:
            raise ConfigError(f"judge:{model}: scale must be > 0 and concurrency >= 1")
        self.model = model
        self.scale = scale
        self.concurrency = concurrency
        self.params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=0)
        self.options = ModelOptions(
            base_url=base_url
            or os.environ.get("TASKHUB_JUDGE_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL"),
            api_key=api_key
            or os.environ.get("TASKHUB_JUDGE_API_KEY")
            or os.environ.get("OPENAI_API_KEY"),
            timeout_s=timeout_s,
        )
        text = template or DEFAULT_TEMPLATE
        try:
            self.template = SandboxedEnvironment(undefined=StrictUndefined).from_string(text)
        except Exception as exc:  # jinja2's TemplateSyntaxError
            raise ConfigError(f"judge:{model}: the prompt template does not parse: {exc}") from None
        self.template_sha256 = hashlib.sha256(text.encode()).hexdigest()
        # Built now to fail early (unknown provider, missing base URL); it serves the first calls.
        self._backend: ModelBackend | None = load_model(model, self.options)
        self.model_details: dict[str, Any] = dict(self._backend.details)
        self._users = 0
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._limits = weakref.WeakKeyDictionary()

    @property
    def plugin_version(self) -> str:
        """What pins this judge, in one line (recorded as the plugin's version in run.json)."""
        backend = ", ".join(f"{k}={v}" for k, v in sorted(self.model_details.items()))
        params = self.params
        return (
            f"{self.model} ({backend}); temperature {params.temperature:g}, seed {params.seed}, "
            f"max_tokens {params.max_tokens}, scale {self.scale:g}; "
            f"template sha256:{self.template_sha256[:16]}"
        )

    def provenance(self) -> dict[str, Any]:
        """What pins this judge: model, backend details, sampling parameters, template hash."""
        return {
            "model": self.model,
            "model_details": self.model_details,
            "params": self.params.model_dump(mode="json", exclude_none=True),
            "scale": self.scale,
            "template_sha256": self.template_sha256,
        }

    def render(self, episode: EpisodeRecord, answer: str) -> str:
        """Render the grading prompt for ``episode``."""
        refs = episode.task.answer
        reference = "\n".join(str(r) for r in refs) if isinstance(refs, list) else refs
        rubric = episode.task.metadata.get("rubric")
        transcript = "\n\n".join(f"{m.role}: {m.content}" for m in episode.messages)
        try:
            return self.template.render(
                question=task_prompt(episode),
                answer=answer,
                reply=final_reply(episode) or "",
                reference="" if reference is None else str(reference),
                rubric=rubric if isinstance(rubric, str) else "",
                transcript=transcript,
                scale=f"{self.scale:g}",
            )
        except Exception as exc:  # an undefined variable in a user template
            raise RewardError(f"the judge prompt template failed: {exc}") from None

    async def _acquire(self) -> ModelBackend:
        # One backend while calls are in flight; closed when the last one ends, so that no
        # connection outlives the event loop that opened it.
        if self._backend is None:
            self._backend = load_model(self.model, self.options)
        self._users += 1
        return self._backend

    async def _release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.aclose()

    async def __call__(self, episode: EpisodeRecord) -> Score:
        """Grade ``episode``'s answer; an empty answer scores 0 without a call."""
        answer = final_answer(episode)
        if not has_answer(answer):
            return Score(0.0, {"answer": answer, "why": "no answer"})
        assert answer is not None
        prompt = self.render(episode, answer)
        request = GenerateRequest(
            messages=[
                ChatMessage(role="system", content=SYSTEM_PROMPT),
                ChatMessage(role="user", content=prompt),
            ],
            params=self.params,
            context=TurnContext(
                task=episode.task, observation={}, action_schema=None, step=0, episode_seed=0
            ),
        )
        loop = asyncio.get_running_loop()
        limit = self._limits.setdefault(loop, asyncio.Semaphore(self.concurrency))
        async with limit:
            backend = await self._acquire()
            try:
                generation = await backend.generate(request)
            finally:
                await self._release()
        raw, out_of = parse_judge_score(generation.text, self.scale)
        details: dict[str, Any] = {
            **self.provenance(),
            "reply": generation.text[:2000],
            "score": raw,
            "out_of": out_of,
        }
        return Score(raw / out_of, details)


@reward("judge", spec_arg="model", range=(0.0, 1.0))
def judge(
    *,
    model: str,
    template: str | None = None,
    scale: float = 10.0,
    temperature: float = 0.0,
    max_tokens: int = 512,
    concurrency: int = 4,
) -> RewardFn:
    """An LLM judge: judge:MODEL grades the answer against a rubric prompt, 0-1.

    The endpoint of ``openai/`` judges comes from ``TASKHUB_JUDGE_BASE_URL`` (else
    ``OPENAI_BASE_URL``); see ``Judge`` for the arguments.
    """
    return Judge(
        model,
        template=template,
        scale=scale,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=concurrency,
    )
