"""Trust boundaries of a taskset: the specs in its rows and card that would run code.

A taskset is data. Some of what a card or a row may name runs code on the machine that evaluates
it: a ``python:``, ``trl:`` or ``openenv:`` reward imports a module (any reward whose plugin is
registered with ``imports_code=True``), and an ``env:`` that is a folder launches that folder's
server. Such specs run only when the user says so (``--trust-remote-code``,
``trust_remote_code=True``, the Hugging Face convention); specs the user passes on the command
line or in Python are the user's own. The tasksets shipped with taskhub are trusted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from taskhub._errors import RemoteCodeError, TaskhubError
from taskhub._registry import registry
from taskhub._rows import row_rewards
from taskhub._taskset import Taskset

#: Most offending specs named in one refusal.
MAX_LISTED = 10


@dataclass(frozen=True)
class RemoteCode:
    """One spec of a taskset that would run code, and where it comes from."""

    where: str
    """``card rewards``, ``card env`` or ``SPLIT row N (task_id=...) rewards``."""
    spec: str
    """The spec as written."""
    effect: str
    """What it would do (``imports module 'evilmod'``)."""

    def __str__(self) -> str:
        return f"{self.where}: {self.spec!r} ({self.effect})"


def reward_code(spec: str) -> str | None:
    """Say what a reward spec would run (``imports module 'm'``), or None when it runs none.

    A spec is judged by its plugin's ``imports_code`` attribute; a spec that does not parse or
    names no plugin runs nothing (building it fails later with its own message).
    """
    from taskhub._rewards import RewardSpec

    try:
        parsed = RewardSpec.parse(spec)
        entry = registry.lookup("reward", parsed.name)
    except TaskhubError:
        return None
    if not entry.attrs.get("imports_code"):
        return None
    module = (parsed.arg or "").partition(":")[0]
    return f"imports module {module!r}" if module else "imports code"


def env_code(spec: str | None) -> str | None:
    """Say what an ``env:`` spec would run (a local folder's server), or None."""
    if not spec:
        return None
    from taskhub.env._launch import resolve_env

    try:
        target = resolve_env(spec)
    except TaskhubError:
        return None
    if target.kind != "folder":
        return None
    return f"launches the env server in folder {str(target.path)!r}"


def find_remote_code(
    taskset: Taskset, *, rewards: bool = True, env: bool = True
) -> list[RemoteCode]:
    """List the specs of a taskset's card and rows that would run code.

    Args:
        taskset: The loaded taskset.
        rewards: Look at reward specs (the card's and every row's).
        env: Look at the card's ``env``.

    Returns:
        Every offending spec, card first, then rows in split order; empty for built-in tasksets.
    """
    if taskset.ref.kind == "builtin":
        return []
    found: list[RemoteCode] = []
    if env:
        effect = env_code(taskset.card.env)
        if effect and taskset.card.env:
            found.append(RemoteCode("card env", taskset.card.env, effect))
    if not rewards:
        return found
    judged: dict[str, str | None] = {}

    def check(specs: Iterable[str], where: str) -> None:
        for spec in specs:
            if spec not in judged:
                judged[spec] = reward_code(spec)
            effect = judged[spec]
            if effect:
                found.append(RemoteCode(where, spec, effect))

    check(taskset.card.rewards, "card rewards")
    for split, tasks in taskset.splits.items():
        for index, task_id, specs in row_rewards(tasks):
            check(specs, f"{split} row {index} (task_id={task_id!r}) rewards")
    return found


def refuse_remote_code(taskset: Taskset, found: list[RemoteCode]) -> None:
    """Raise ``RemoteCodeError`` naming ``found``, unless it is empty.

    Raises:
        RemoteCodeError: The taskset would run code.
    """
    if not found:
        return
    shown = "\n  ".join(str(item) for item in found[:MAX_LISTED])
    more = len(found) - MAX_LISTED
    if more > 0:
        shown += f"\n  ... and {more} more"
    raise RemoteCodeError(
        f"taskset {taskset.name!r} would run code on this machine:\n  {shown}\n"
        "A taskset is data: its code runs only when you trust it. Read it "
        f"(`taskhub taskset show {taskset.ref.source}`), then pass --trust-remote-code "
        "(trust_remote_code=True in Python), or give your own --reward / ENV instead.",
        specs=[f"{item.where}: {item.spec}" for item in found],
    )


def check_remote_code(
    taskset: Taskset,
    *,
    trust_remote_code: bool,
    rewards: bool = True,
    env: bool = True,
) -> list[RemoteCode]:
    """Refuse a taskset whose used specs would run code, unless the user trusts it.

    Args:
        taskset: The loaded taskset.
        trust_remote_code: The user said the taskset's code may run.
        rewards: The taskset's reward specs will be used (the user gave none of their own).
        env: The card's ``env`` will be used (the user gave no ENV).

    Returns:
        What will run (trusted), for the log.

    Raises:
        RemoteCodeError: The taskset would run code and ``trust_remote_code`` is false.
    """
    found = find_remote_code(taskset, rewards=rewards, env=env)
    if not trust_remote_code:
        refuse_remote_code(taskset, found)
    return found
