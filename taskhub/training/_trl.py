"""What TRL's ``GRPOTrainer`` consumes: a dataset, reward functions, and env-backed rollouts.

- ``taskset_dataset``: a ``datasets.Dataset`` whose ``prompt`` column holds the chat messages
  evaluation sends at the first turn, beside the task columns.
- ``TasksetReward``: a reward function in TRL's convention (keyword arguments in,
  ``list[float | None]`` out) that scores each completion through the env and taskhub's rewards.
- ``EnvRollout``: a ``rollout_func`` that plays whole multi-turn episodes with the trainer's model,
  returning the token ids, an ``env_mask`` over the env's tokens, and each episode's reward.
- ``TasksetEnvironment``: a class for ``environment_factory`` (TRL's tool-calling environment
  loop): ``reset(**row)`` resets the env with the row's reset kwargs, the ``step`` tool sends an
  action, ``get_reward`` scores the episode with taskhub's rewards.

``datasets``, ``torch`` and ``trl`` are imported inside the functions that need them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from taskhub._agent import EpisodeTrace, parse_action
from taskhub._episode import EpisodePlan
from taskhub._errors import AgentFormatError, ConfigError, EnvError, MissingDependencyError
from taskhub._schema import (
    ChatMessage,
    EpisodeRecord,
    StepRecord,
    Task,
    Usage,
    canonical_json,
)
from taskhub._templates import observation_text
from taskhub.env._client import EnvSession
from taskhub.models._base import GenerateRequest, Generation
from taskhub.training._env import TrainingEnv

logger = logging.getLogger(__name__)

_INSTALL_HINT = "pip install 'taskhub-openenv[train]'"


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def task_columns(task: Task, split: str) -> dict[str, Any]:
    """The task columns of a training row (nested values as JSON text, one Arrow type each).

    ``difficulty`` and ``pass_rate`` are the task's measured columns (``taskhub taskset
    profile``), None when unprofiled.
    """
    return {
        "task_id": task.task_id,
        "split": split,
        "reset": _json_text(task.reset),
        "answer": _json_text(task.answer),
        "metadata": _json_text(task.metadata),
        "max_steps": task.max_steps,
        "difficulty": task.difficulty,
        "pass_rate": task.pass_rate,
    }


def taskset_dataset(
    env: TrainingEnv,
    split: str | None = None,
    *,
    limit: int | None = None,
    tasks: Sequence[Task] | None = None,
) -> Any:
    """Build the ``datasets.Dataset`` GRPOTrainer trains on, from a started ``TrainingEnv``.

    Columns: ``prompt`` (the first-turn chat messages of evaluation: the card's system prompt
    and first user message, rendered with the observation the env returns for the row's reset
    kwargs), ``task_id``, ``split``, ``reset``, ``answer`` and ``metadata`` (JSON text),
    ``max_steps``, and ``difficulty``/``pass_rate`` from a profile (None when unprofiled).

    Args:
        env: The started training env (its taskset gives the rows).
        split: The split (the taskset's default split when None).
        limit: Only the first N rows.
        tasks: Explicit rows instead of ``split``/``limit``.

    Returns:
        A ``datasets.Dataset``.

    Raises:
        MissingDependencyError: ``datasets`` is not installed.
        EnvError: A reset failed.
    """
    try:
        import datasets
    except ImportError:
        raise MissingDependencyError(f"taskset_dataset needs datasets: {_INSTALL_HINT}") from None
    split = split or env.taskset.default_split()
    rows = list(tasks) if tasks is not None else list(env.taskset.tasks(split))
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise ConfigError(f"split {split!r} of taskset {env.taskset.name!r} selects no rows")
    prompts = env.prompts(rows)
    records = [{"prompt": p, **task_columns(t, split)} for p, t in zip(prompts, rows, strict=True)]
    features = datasets.Features(
        {
            "prompt": datasets.List(
                {"role": datasets.Value("string"), "content": datasets.Value("string")}
            ),
            "task_id": datasets.Value("string"),
            "split": datasets.Value("string"),
            "reset": datasets.Value("string"),
            "answer": datasets.Value("string"),
            "metadata": datasets.Value("string"),
            "max_steps": datasets.Value("int64"),
            "difficulty": datasets.Value("float64"),
            "pass_rate": datasets.Value("float64"),
        }
    )
    return datasets.Dataset.from_list(records, features=features)


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or the assistant messages' content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        parts = [
            str(m.get("content") or "")
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        ]
        return "\n".join(parts)
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    raise TypeError(f"a completion must be text or chat messages, got {type(completion).__name__}")


@dataclass(frozen=True)
class ScoredCompletion:
    """One completion a reward function scored, kept for inspection."""

    step: int | None
    """The trainer's global step when it was scored (None outside a trainer)."""
    task_id: str
    """The task."""
    completion: str
    """The completion's text."""
    reward: float | None
    """The reward returned to the trainer."""
    outcome: str
    """The episode outcome (``agent_error`` for an unusable completion)."""


class TasksetReward:
    """A TRL reward function backed by the env and taskhub's rewards.

    Each completion is played as the model's first reply to its row's task, exactly as
    ``taskhub eval`` plays it, and the episode's total reward is returned (None when it has
    none: an env failure or a reward error, which TRL leaves out of the mean)::

        with TrainingEnv(load_taskset("arith")) as env:
            trainer = GRPOTrainer(model, reward_funcs=TasksetReward(env),
                                  train_dataset=taskset_dataset(env, "train"), ...)

    Args:
        env: The started training env.
        name: The name TRL logs the reward under (``rewards/<name>/mean``).
    """

    def __init__(self, env: TrainingEnv, *, name: str = "taskhub") -> None:
        """Bind to ``env``."""
        self.env = env
        self.__name__ = name
        self.history: list[ScoredCompletion] = []
        self.records: list[EpisodeRecord] = []
        self._lock = threading.Lock()

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        task_id: Sequence[str],
        **kwargs: Any,
    ) -> list[float | None]:
        """Score ``completions`` (TRL passes the dataset columns as keyword lists)."""
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        tasks = [self.env.task(t) for t in task_id]
        texts = [completion_text(c) for c in completions]
        records = self.env.score_completions(tasks, texts)
        rewards = [r.reward for r in records]
        with self._lock:
            self.records += records
            self.history += [
                ScoredCompletion(step, r.task_id, text, r.reward, r.outcome)
                for r, text in zip(records, texts, strict=True)
            ]
        return rewards


# ------------------------------------------------------------------------------------------
# Multi-turn rollouts with the trainer's model (TRL rollout_func)


@dataclass
class EpisodeTokens:
    """The tokens of one rollout episode: prompt, completion, env mask, sampling logprobs."""

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class _TrainerPolicy:
    """A model backend that generates with a transformers model and records the tokens."""

    def __init__(
        self, rollout: EnvRollout, model: Any, tokenizer: Any, tokens: EpisodeTokens
    ) -> None:
        self.rollout = rollout
        self.model = model
        self.tokenizer = tokenizer
        self.tokens = tokens
        self.details: dict[str, Any] = {"policy": "trainer"}
        self._last_messages: list[ChatMessage] = []

    def _template(self, messages: Sequence[ChatMessage], *, generation: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            [m.model_dump() for m in messages],
            tokenize=False,
            add_generation_prompt=generation,
        )
        return str(text)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    async def generate(self, request: GenerateRequest) -> Generation:
        messages = list(request.messages)
        full = self._template(messages, generation=True)
        if not self._last_messages:
            self.tokens.prompt_ids = self._encode(full)
        else:
            # the env's tokens: everything the chat template adds after the last generated token
            previous = self._template(self._last_messages, generation=False)
            reply = self._last_messages[-1].content
            at = previous.rfind(reply) if reply else -1
            tail = previous[at + len(reply) :] if at >= 0 else ""
            eos = self.tokenizer.eos_token or ""
            generated_eos = (
                bool(self.tokens.completion_ids)
                and self.tokens.completion_ids[-1] == self.tokenizer.eos_token_id
            )
            if generated_eos and eos and tail.startswith(eos):
                tail = tail[len(eos) :]
            if not full.startswith(previous):
                raise ConfigError(
                    "the chat template does not extend a conversation by appending: multi-turn "
                    "rollouts need a template where each turn adds text at the end"
                )
            env_ids = self._encode(tail + full[len(previous) :])
            self.tokens.completion_ids += env_ids
            self.tokens.env_mask += [0] * len(env_ids)
            self.tokens.logprobs += [0.0] * len(env_ids)
        context = self.tokens.prompt_ids + self.tokens.completion_ids
        budget = self.rollout.max_completion_length - len(self.tokens.completion_ids)
        if self.rollout.max_turn_tokens is not None:
            budget = min(budget, self.rollout.max_turn_tokens)
        if budget <= 0:
            raise AgentFormatError("the rollout used its whole completion budget before replying")
        ids, logprobs = await asyncio.to_thread(
            self.rollout._generate, self.model, self.tokenizer, context, budget
        )
        self.tokens.completion_ids += ids
        self.tokens.env_mask += [1] * len(ids)
        self.tokens.logprobs += logprobs
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        self._last_messages = [*messages, ChatMessage(role="assistant", content=text)]
        return Generation(
            text=text,
            usage=Usage(prompt_tokens=len(context), completion_tokens=len(ids), calls=1),
            finish_reason="stop" if ids and ids[-1] == self.tokenizer.eos_token_id else "length",
        )

    async def aclose(self) -> None:
        return None


class EnvRollout:
    """A TRL ``rollout_func`` that plays each prompt's task as a whole episode.

    For every prompt (TRL passes each prompt once per generation), the row's task is found, the
    env is reset with its reset kwargs, and the trainer's model plays the episode turn by turn
    through the evaluation agent loop (same templates, action parsing and step limit). The
    completion is every token after the prompt: the model's replies (``env_mask`` 1) and the
    env's observations between them (``env_mask`` 0, not trained on). Each episode's taskhub
    reward is returned as the extra column ``taskhub_reward``, which ``episode_reward`` hands
    to the trainer::

        rollout = EnvRollout(env, dataset)
        trainer = GRPOTrainer(model, reward_funcs=episode_reward, rollout_func=rollout, ...)

    Args:
        env: The started training env.
        dataset: The training dataset (``taskset_dataset``): prompts are matched to its rows.
        max_completion_length: Most completion tokens per episode, env tokens included (the
            trainer's ``max_completion_length`` when None). An episode that runs out of them
            ends as an ``agent_error`` with the reward it earned so far.
        max_turn_tokens: Most tokens of one reply (the remaining budget when None).
        temperature: Sampling temperature (the trainer's when None).
        format_retries: Unusable replies shown back to the model before the episode is an
            ``agent_error`` (as ``taskhub eval --format-retries``).
    """

    def __init__(
        self,
        env: TrainingEnv,
        dataset: Any,
        *,
        max_completion_length: int | None = None,
        max_turn_tokens: int | None = None,
        temperature: float | None = None,
        format_retries: int = 1,
    ) -> None:
        """Index the dataset's prompts by their content."""
        self.env = env
        self._by_prompt: dict[str, str] = {}
        for prompt, task_id in zip(dataset["prompt"], dataset["task_id"], strict=True):
            key = canonical_json(prompt)
            other = self._by_prompt.setdefault(key, task_id)
            if other != task_id and env.task(other).reset != env.task(task_id).reset:
                raise ConfigError(
                    f"rows {other!r} and {task_id!r} render the same prompt but reset the env "
                    "differently: rollout_func receives only prompts and cannot tell them apart"
                )
        self._max_completion_length = max_completion_length
        self._temperature = temperature
        self.max_completion_length = max_completion_length or 256
        self.max_turn_tokens = max_turn_tokens
        self.format_retries = format_retries
        self.records: list[EpisodeRecord] = []
        self.tokens: list[EpisodeTokens] = []

    def task_for(self, prompt: Any) -> Task:
        """Return the task whose dataset row has this prompt.

        Raises:
            ConfigError: No row has it.
        """
        task_id = self._by_prompt.get(canonical_json(prompt))
        if task_id is None:
            raise ConfigError("a prompt from the trainer matches no row of the dataset")
        return self.env.task(task_id)

    def _generate(
        self, model: Any, tokenizer: Any, context: list[int], budget: int
    ) -> tuple[list[int], list[float]]:
        import torch

        inputs = torch.tensor([context], device=model.device)
        temperature = self._temperature if self._temperature is not None else 1.0
        with torch.no_grad():
            output = model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                max_new_tokens=budget,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=1.0,
                top_k=0,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                return_dict_in_generate=True,
                output_scores=True,
            )
        ids = output.sequences[0, len(context) :].tolist()
        logprobs = []
        for index, token in enumerate(ids):
            scores = torch.log_softmax(output.scores[index][0].float(), dim=-1)
            value = float(scores[token])
            logprobs.append(value if math.isfinite(value) else 0.0)
        return ids, logprobs

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """Play one episode per prompt; return what TRL's ``rollout_func`` contract asks for."""
        args = getattr(trainer, "args", None)
        if self._max_completion_length is None and args is not None:
            self.max_completion_length = int(args.max_completion_length)
        if self._temperature is None and args is not None:
            self._temperature = float(args.temperature)
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        was_training = model.training
        model.eval()
        try:
            results = [self._episode(self.task_for(p), model, tokenizer) for p in prompts]
        finally:
            if was_training:
                model.train()
        return {
            "prompt_ids": [t.prompt_ids for t, _ in results],
            "completion_ids": [t.completion_ids for t, _ in results],
            "logprobs": [t.logprobs for t, _ in results],
            "env_mask": [t.env_mask for t, _ in results],
            "taskhub_reward": [r.reward for _, r in results],
            "taskhub_outcome": [r.outcome for _, r in results],
        }

    def _episode(
        self, task: Task, model: Any, tokenizer: Any
    ) -> tuple[EpisodeTokens, EpisodeRecord]:
        tokens = EpisodeTokens()
        policy = _TrainerPolicy(self, model, tokenizer, tokens)
        record = self.env.run(self.env.play_async(task, policy, format_retries=self.format_retries))
        if not tokens.prompt_ids:  # the episode failed before the first model call
            tokens.prompt_ids = policy._encode(
                policy._template([ChatMessage(role="user", content="")], generation=True)
            )
        if not tokens.completion_ids:
            eos = tokenizer.eos_token_id
            tokens.completion_ids, tokens.env_mask, tokens.logprobs = [eos], [0], [0.0]
        self.records.append(record)
        self.tokens.append(tokens)
        return tokens, record


def episode_reward(
    completions: Sequence[Any], taskhub_reward: Sequence[float | None], **kwargs: Any
) -> list[float | None]:
    """TRL reward function returning the taskhub reward ``EnvRollout`` computed per episode."""
    return list(taskhub_reward)


# ------------------------------------------------------------------------------------------
# TRL environment_factory


class TasksetEnvironment:
    """An environment for TRL's ``environment_factory``: one OpenEnv session per rollout.

    TRL calls ``reset(**row)`` with the dataset row before each rollout (the env is reset with
    the row's ``reset`` kwargs, exactly as evaluation resets it), exposes ``step`` to the model
    as a tool, and calls ``get_reward`` when the rollout ends (taskhub's rewards over the
    episode). The row's ``prompt`` already carries the first observation, so ``reset`` returns
    None. It needs a model whose chat template supports tool calls::

        trainer = GRPOTrainer(model, environment_factory=lambda: TasksetEnvironment(env),
                              train_dataset=taskset_dataset(env, "train"), ...)

    Args:
        env: The started training env.
    """

    def __init__(self, env: TrainingEnv) -> None:
        """Bind to ``env``; no session is open until ``reset``."""
        self._env = env
        self._session: EnvSession | None = None
        self._session_cm: Any = None
        self._plan: EpisodePlan | None = None
        self._trace: EpisodeTrace | None = None
        self._done = False
        self._started_at = datetime.now(UTC)
        self._started = time.perf_counter()
        self._error: BaseException | None = None
        self.record: EpisodeRecord | None = None

    def reset(self, **row: Any) -> str | None:
        """Reset the env with the row's reset kwargs (TRL passes the whole row)."""
        task_id = row.get("task_id")
        if not isinstance(task_id, str):
            raise ConfigError("TasksetEnvironment.reset needs the row's task_id column")
        task = self._env.task(task_id)
        self._env.run(self._close_session())
        self._plan = self._env.plan(task)
        self._trace = EpisodeTrace(reset_payload=self._plan.reset_payload)
        self._done, self._error, self.record = False, None, None
        self._started_at, self._started = datetime.now(UTC), time.perf_counter()
        try:
            self._env.run(self._open_and_reset())
        except EnvError as exc:  # an infra error is a result (no reward), not a crash
            logger.warning("reset of %s failed: %s", task_id, exc)
            self._error, self._done = exc, True
            self._env.run(self._close_session())
        return None

    async def _open_and_reset(self) -> None:
        assert self._plan is not None and self._trace is not None
        pool = self._env._pool
        assert pool is not None, "the TrainingEnv is not started"
        cm = pool.session()
        pooled = await cm.__aenter__()
        self._session, self._session_cm = pooled.session, cm
        self._trace.initial = await self._session.reset(**self._plan.reset_payload)
        self._done = self._trace.initial.done

    async def _close_session(self) -> None:
        """Give the session back: parked for the next episode, unless the env failed in it."""
        cm, self._session, self._session_cm = self._session_cm, None, None
        if cm is None:
            return
        error = self._error
        if error is None:
            await cm.__aexit__(None, None, None)
        else:
            await cm.__aexit__(type(error), error, error.__traceback__)

    def step(self, action: str) -> str:
        """Send one action to the environment and return what it observes next.

        Args:
            action: The action, as the taskset's system prompt asks for it (for example a JSON
                object such as {"move": "up"}, or the answer text).

        Returns:
            The next observation, or why the action was refused.
        """
        if self._error is not None:
            return f"The environment failed: {self._error}"
        if self._plan is None or self._trace is None or self._session is None:
            return "The episode has not started."
        if self._done:
            return "The episode is over."
        if len(self._trace.steps) >= self._plan.max_steps:
            self._done = True
            return "The step limit is reached; the episode is over."
        info = self._env.info
        assert info is not None
        try:
            parsed = parse_action(action, info.action_schema)
        except AgentFormatError as exc:
            return f"The action could not be used: {exc}"
        return self._env.run(self._step(parsed, action))

    async def _step(self, action: dict[str, Any], reply: str) -> str:
        assert self._trace is not None and self._session is not None and self._plan is not None
        started = time.perf_counter()
        try:
            result = await self._session.step(action)
        except EnvError as exc:
            self._error, self._done = exc, True
            return f"The environment failed: {exc}"
        latency = time.perf_counter() - started
        self._trace.env_time_s += latency
        self._trace.steps.append(
            StepRecord(
                index=len(self._trace.steps),
                action=action,
                observation=result.observation,
                reward=result.reward,
                done=result.done,
                metadata=result.metadata,
                reply=reply,
                latency_s=latency,
            )
        )
        self._done = result.done
        self._trace.terminated = result.done
        self._trace.truncated = not result.done
        turn = {
            **self._env.template_variables(self._plan.task),
            "observation": result.observation,
            "observation_text": observation_text(result.observation),
            "reward": result.reward,
            "step": len(self._trace.steps),
        }
        text = self._env.templates.render("step", **turn)
        if result.done:
            text += "\nThe episode is over."
        return text

    def get_reward(self) -> float | None:
        """Score the episode with taskhub's rewards, as evaluation would.

        Returns:
            The total reward; None when the episode has none (the env failed, or a reward
            could not be computed), which TRL leaves out of the mean.
        """
        if self._plan is None or self._trace is None:
            return None
        record = self._env.run(self._finish())
        self.record = record
        return record.reward

    async def _finish(self) -> EpisodeRecord:
        assert self._plan is not None and self._trace is not None
        await self._close_session()
        return await self._env._record(
            self._plan,
            self._trace,
            self._error,
            self._started_at,
            time.perf_counter() - self._started,
        )
