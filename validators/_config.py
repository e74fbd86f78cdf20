"""``ValidationConfig``: everything that defines one validation, with documented defaults."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ._policy import DEFAULT_POLICY

_MODEL_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ValidationConfig(BaseModel):
    """How to validate an env: what to run it with, and the deadlines that bound the run."""

    model_config = _MODEL_CONFIG

    taskset: str | None = None
    """Taskset whose rows drive the taskset and semantic checks (reset kwargs, answers, oracle
    actions). None: the built-in taskset of a built-in env, a ``taskset/`` folder inside the env
    folder, else only seed-driven resets."""
    split: str | None = None
    """Taskset split (the card's default when None)."""
    tasks: Annotated[int, Field(ge=1, le=50)] = 6
    """Rows sampled (evenly spread) for the taskset and semantic checks."""
    model: str | None = None
    """Model of the statistical checks (``provider/model``); None skips them."""
    base_url: str | None = None
    """OpenAI-compatible endpoint of the model."""
    api_key: SecretStr | None = Field(default=None, exclude=True)
    """Key of the model endpoint. Never written anywhere."""
    samples: Annotated[int, Field(ge=2)] = 4
    """Episodes per task in the statistical checks: the GRPO group size G."""
    stat_tasks: Annotated[int, Field(ge=1)] = 20
    """Tasks evaluated by the statistical checks."""
    temperature: Annotated[float, Field(ge=0)] = 1.0
    """Sampling temperature of the statistical run (groups need diverse samples)."""
    policy: str = DEFAULT_POLICY
    """Severity policy: ``name-version`` of a shipped one (``taskhub-v2``, RFC 008's policy
    v2; ``taskhub-v1``), or a policy .json file."""
    checks: list[str] | None = None
    """Run only these check ids (and the checks they depend on); None runs every check."""
    budget_s: Annotated[float, Field(gt=0)] = 600.0
    """Time budget of the whole validation: checks not started in time are errors."""
    check_timeout_s: Annotated[float, Field(gt=0)] = 90.0
    """Deadline of one check."""
    op_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    """Deadline of one request to the env (reset, step, state, HTTP GET)."""
    startup_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """Seconds a launched env gets to answer ``/health``."""
    stat_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    """Deadline of the statistical run."""
    sessions: Annotated[int, Field(ge=1, le=64)] = 4
    """Concurrent sessions asked of a launched env (``MAX_CONCURRENT_ENVS``) and probed."""
    growth_episodes: Annotated[int, Field(ge=5)] = 40
    """Episodes played to measure the server's memory growth."""
    max_frame_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    """Largest frame accepted from the env."""
    oversize_frame_bytes: Annotated[int, Field(ge=1024)] = 17 * 1024 * 1024
    """Size of the oversized frame sent to probe the env's frame limit."""
    python: str | None = None
    """Interpreter that runs a launched env (an isolated venv's); this one when None."""
    name: str | None = None
    """Name of the submission in the report (the env's name when None)."""
