"""What makes two runs' scores comparable: a fingerprint of the configuration that shapes them.

Two runs can be pooled (one leaderboard cell, one summary, one model-card entry) only when they
agree on the taskset (its commit, else its content) and split, the reward specs with their
arguments and library versions and the success threshold, the env (name and version), the step
limit, and how the model was sampled. ``comparability(manifest)`` computes that configuration
from a run manifest; new runs store it in ``run.json`` (``RunManifest.comparability``) and
older runs get it recomputed from the fields they have. ``describe_differences`` names what two
of them disagree on, so that a refusal can say why.

The range of the total reward follows from the declared ranges of its components
(``@reward(..., range=(low, high))``) and their weights: a component that does not apply adds
nothing, a gate that fails makes the total 0, so the total lies in
``[sum(min(0, w * low)), sum(max(0, w * high))]`` over the non-gate components. A component
without a declared range (``env``, ``python:...``) leaves the total unbounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from pydantic import JsonValue

from taskhub._schema import (
    SAMPLING_KEYS,
    Comparability,
    PluginSpec,
    RewardInfo,
    RunManifest,
)

if TYPE_CHECKING:
    from taskhub._rewards import BoundReward


def total_range(rewards: Iterable[RewardInfo]) -> tuple[float, float] | None:
    """The range of the total of these components (see the module docstring)."""
    low = high = 0.0
    adds = False
    for reward in rewards:
        if reward.gate:
            continue
        if reward.range is None:
            return None
        adds = True
        ends = (reward.weight * reward.range[0], reward.weight * reward.range[1])
        low += min(0.0, *ends)
        high += max(0.0, *ends)
    if not adds:
        return (0.0, 1.0)  # gates only: 1 when they pass, 0 when one fails
    return (low, high) if low < high else None


def _union(ranges: Iterable[tuple[float, float] | None]) -> tuple[float, float] | None:
    result: tuple[float, float] | None = None
    for item in ranges:
        if item is None:
            return None
        result = item if result is None else (min(result[0], item[0]), max(result[1], item[1]))
    return result


def reward_infos(
    spec_lists: Sequence[Sequence[BoundReward]],
) -> tuple[list[RewardInfo], tuple[float, float] | None]:
    """The ``RewardInfo`` of every distinct spec in ``spec_lists``, and the total's range.

    Args:
        spec_lists: The built rewards of each task (tasks may name different specs).

    Returns:
        The infos sorted by spec, and the union of each list's total range (None when one is
        unbounded).
    """
    infos: dict[str, RewardInfo] = {}
    ranges = []
    for bounds in spec_lists:
        listed = []
        for bound in bounds:
            info = infos.get(bound.spec.text)
            if info is None:
                info = infos[bound.spec.text] = RewardInfo(
                    spec=bound.spec.text,
                    name=bound.spec.name,
                    args=dict(bound.plugin.args),
                    version=bound.plugin.version,
                    weight=bound.spec.weight,
                    gate=bound.spec.gate,
                    range=bound.range,
                )
            listed.append(info)
        ranges.append(total_range(listed))
    return [infos[k] for k in sorted(infos)], _union(ranges)


def _declared_range(name: str) -> tuple[float, float] | None:
    from taskhub._errors import TaskhubError
    from taskhub._registry import registry

    try:
        declared = registry.lookup("reward", name).attrs.get("range")
    except TaskhubError:
        return None
    return None if declared is None else (float(declared[0]), float(declared[1]))


def _recorded_rewards(manifest: RunManifest) -> list[RewardInfo]:
    """Reward infos of a run recorded before ``run.json`` kept them."""
    from taskhub._errors import TaskhubError
    from taskhub._rewards import RewardSpec

    plugins: dict[str, PluginSpec] = {p.name: p for p in manifest.rewards}
    infos = []
    texts = manifest.config.rewards
    if texts is None:  # the card's or rows' specs: only their plugins were recorded
        texts = [p.name for p in manifest.rewards]
    for text in texts:
        try:
            spec = RewardSpec.parse(text)
        except TaskhubError:
            continue
        plugin = plugins.get(spec.name)
        infos.append(
            RewardInfo(
                spec=spec.text,
                name=spec.name,
                args=dict(plugin.args) if plugin else {},
                version=plugin.version if plugin else None,
                weight=spec.weight,
                gate=spec.gate,
                range=_declared_range(spec.name),
            )
        )
    return sorted(infos, key=lambda r: r.spec)


def comparability(manifest: RunManifest) -> Comparability:
    """The comparability of a run: as ``run.json`` stored it, else recomputed from the manifest.

    Runs written before ``run.json`` stored it get it from their configuration; when the run's
    reward specs came from the taskset card rather than ``--reward``, only their plugins were
    recorded, and each counts with weight 1.
    """
    if manifest.comparability is not None:
        return manifest.comparability
    rewards = _recorded_rewards(manifest)
    return build_comparability(manifest, rewards, total_range(rewards) if rewards else None)


def build_comparability(
    manifest: RunManifest,
    rewards: list[RewardInfo],
    reward_range: tuple[float, float] | None,
) -> Comparability:
    """The comparability of a run from its manifest and its reward infos.

    Args:
        manifest: The run's manifest (its ``comparability`` field is ignored).
        rewards: The run's reward specs.
        reward_range: The total reward's range.
    """
    taskset = manifest.taskset
    identity = (
        f"commit:{taskset.commit_sha}" if taskset.commit_sha else f"content:{taskset.fingerprint}"
    )
    env = manifest.env
    env_name: str | None = None
    env_version: str | None = None
    if env is not None:
        meta = env.metadata or {}
        name = meta.get("name")
        env_name = name if isinstance(name, str) and name else env.spec
        version = meta.get("version")
        env_version = str(version) if isinstance(version, str | int | float) else None
    sampling = manifest.model.sampling.model_dump(mode="json")
    config = manifest.config
    return Comparability(
        taskset=identity,
        split=manifest.split,
        rewards=rewards,
        success_threshold=manifest.success_threshold,
        env=env_name,
        env_version=env_version,
        max_steps=config.max_steps,
        format_retries=config.format_retries,
        sampling={k: sampling.get(k) for k in SAMPLING_KEYS},
        reward_range=reward_range,
    )


def describe_differences(a: Comparability, b: Comparability, *, sampling: bool = True) -> list[str]:
    """What two configurations disagree on, one phrase each (``rewards: exact vs fuzzy=0.5``).

    Args:
        a: One configuration.
        b: The other.
        sampling: Also compare the sampling parameters and format retries.
    """
    out = []

    def show(value: JsonValue) -> str:
        return "-" if value is None else str(value)

    for field in ("taskset", "split", "success_threshold", "env", "env_version", "max_steps"):
        left, right = getattr(a, field), getattr(b, field)
        if left != right:
            out.append(f"{field}: {show(left)} vs {show(right)}")
    ra = [r.model_dump(exclude={"range"}) for r in a.rewards]
    rb = [r.model_dump(exclude={"range"}) for r in b.rewards]
    if ra != rb:
        detail = a.reward_label if a.reward_label != b.reward_label else "(arguments or versions)"
        other = b.reward_label if a.reward_label != b.reward_label else ""
        changed = [
            f"{x.spec} {x.version or ''}/{y.version or ''}".strip()
            for x, y in zip(a.rewards, b.rewards, strict=False)
            if x.spec == y.spec and (x.version, x.args) != (y.version, y.args)
        ]
        if other:
            out.append(f"rewards: {detail} vs {other}")
        else:
            out.append(f"rewards: {', '.join(changed) or detail} differ in arguments or versions")
    if sampling:
        if a.format_retries != b.format_retries:
            out.append(f"format_retries: {a.format_retries} vs {b.format_retries}")
        for key in SAMPLING_KEYS:
            left, right = a.sampling.get(key), b.sampling.get(key)
            if left != right:
                out.append(f"sampling {key}: {show(left)} vs {show(right)}")
    return out
