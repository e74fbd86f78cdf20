"""Input resolution: what the user named (paths, later Hub repos) -> runs and validation reports.

Everything the site is built from passes through ``resolve_inputs``. A source it does not know
is offered to each ``Resolver`` first, which is where a Hub results-dataset resolver plugs in:
it downloads what it names and returns the same ``Inputs`` (run manifests with the path of
their results, validation reports).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from taskhub import (
    ConfigError,
    ResultsError,
    RunManifest,
    TaskhubError,
    ValidationReport,
    pull_results,
    read_manifest,
)

logger = logging.getLogger(__name__)

MANIFEST = "run.json"
EPISODES = "episodes.jsonl"


@dataclass(frozen=True)
class RunInput:
    """One run to show: its manifest and the results file holding its episodes."""

    manifest: RunManifest
    """The run's ``run.json``."""
    results: Path
    """Its ``episodes.jsonl`` (may be missing: a run that wrote no episode yet)."""


@dataclass
class Inputs:
    """Everything a site is built from."""

    runs: list[RunInput] = field(default_factory=list)
    """Runs, sorted by run id, each once."""
    reports: list[ValidationReport] = field(default_factory=list)
    """Validation reports, sorted by name then start time, each once."""

    def extend(self, other: Inputs) -> None:
        """Add ``other``'s runs and reports (``resolve_inputs`` deduplicates and sorts)."""
        self.runs.extend(other.runs)
        self.reports.extend(other.reports)


#: A resolver turns one source it recognises (``hf://datasets/org/results``...) into
#: ``Inputs``, and returns None for a source that is not its kind.
Resolver = Callable[[str], Inputs | None]


_HUB_REPO = re.compile(
    r"^(?:hf://(?:datasets/)?)?(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$"
)


def hub_resolver(*, token: str | None = None) -> Resolver:
    """A resolver for Hub results datasets (``taskhub results push``): ``org/name[@rev]``.

    Also written ``hf://datasets/org/name[@rev]``. A plain ``org/name`` that exists as a local
    path stays a path. Each run of the repo, at the resolved commit, is downloaded once (see
    ``taskhub.pull_results``) and shown like a local run directory.

    Args:
        token: Hub token for private results repos.
    """

    def resolve(source: str) -> Inputs | None:
        match = _HUB_REPO.match(source)
        if match is None or (not source.startswith("hf://") and Path(source).exists()):
            return None
        try:
            run_dirs = pull_results(match.group("repo"), match.group("rev"), token=token)
        except TaskhubError as exc:
            if source.startswith("hf://"):
                raise
            raise ConfigError(
                f"{source}: no such file or directory, and not a readable Hub results dataset "
                f"({exc})"
            ) from None
        return Inputs(runs=[_run(d / MANIFEST, d / EPISODES) for d in run_dirs])

    return resolve


def resolve_inputs(sources: Iterable[str | Path], *, resolvers: Sequence[Resolver] = ()) -> Inputs:
    """Find the runs and validation reports that ``sources`` name.

    A source is, in order of precedence: anything a ``resolvers`` entry accepts; a run directory
    (it holds ``run.json``); a results file (``*.jsonl``) with its run's ``run.json`` beside it;
    a validation report (``<name>.json`` as written by ``taskhub validate``); or a folder, searched
    recursively for run directories and validation reports (other JSON files, such as a batch
    ``summary.json``, are skipped).

    Args:
        sources: Paths (or strings a resolver understands).
        resolvers: Extra source kinds, tried first, in order.

    Returns:
        The runs (one per run id: copies of a run are counted once) and reports, sorted.

    Raises:
        ConfigError: A source does not exist or is not something the leaderboard can read.
        ResultsError: A run directory or report is malformed.
    """
    found = Inputs()
    for source in sources:
        for resolver in resolvers:
            resolved = resolver(str(source))
            if resolved is not None:
                found.extend(resolved)
                break
        else:
            found.extend(_resolve_path(Path(source)))
    return _deduplicated(found)


def _resolve_path(path: Path) -> Inputs:
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / MANIFEST).is_file():
            return Inputs(runs=[_run(path / MANIFEST, path / EPISODES)])
        return _walk(path)
    if path.name == MANIFEST:
        return Inputs(runs=[_run(path, path.parent / EPISODES)])
    if path.suffix == ".jsonl":
        manifest = path.parent / MANIFEST
        if not manifest.is_file():
            raise ConfigError(
                f"{path}: a results file needs its run's {MANIFEST} beside it (the model and "
                "taskset of its episodes are recorded there)"
            )
        return Inputs(runs=[_run(manifest, path)])
    if path.suffix == ".json":
        report = _report(path, explicit=True)
        assert report is not None
        return Inputs(reports=[report])
    raise ConfigError(
        f"{path}: not a run directory, results file (.jsonl) or validation report (.json)"
    )


def _walk(folder: Path) -> Inputs:
    found = Inputs()
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            if (path / MANIFEST).is_file():
                found.runs.append(_run(path / MANIFEST, path / EPISODES))
            else:
                found.extend(_walk(path))
        elif path.suffix == ".json":
            report = _report(path, explicit=False)
            if report is not None:
                found.reports.append(report)
    return found


def _run(manifest: Path, results: Path) -> RunInput:
    return RunInput(manifest=read_manifest(manifest.parent), results=results)


def _report(path: Path, *, explicit: bool) -> ValidationReport | None:
    data = path.read_bytes()
    try:
        return ValidationReport.model_validate_json(data)
    except ValidationError as exc:
        looks_like_one = False
        try:
            value = json.loads(data)
            looks_like_one = isinstance(value, dict) and {"verdict", "checks"} <= value.keys()
        except ValueError:
            pass
        if explicit or looks_like_one:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            if not looks_like_one:
                raise ConfigError(
                    f"{path}: not a validation report (field {where!r}: {first['msg']})"
                ) from None
            raise ResultsError(f"{path}: field {where!r}: {first['msg']}") from None
        logger.debug("skipping %s: not a validation report", path)
        return None


def _deduplicated(found: Inputs) -> Inputs:
    runs: dict[str, RunInput] = {}
    for run in sorted(found.runs, key=lambda r: (r.manifest.run_id, str(r.results))):
        kept = runs.setdefault(run.manifest.run_id, run)
        if kept is not run:
            logger.warning(
                "run %s is given twice (%s and %s): counting it once, from the first",
                run.manifest.run_id,
                kept.results,
                run.results,
            )
    reports: dict[str, ValidationReport] = {}
    for report in found.reports:
        reports.setdefault(report.model_dump_json(), report)
    ordered = sorted(reports.values(), key=lambda r: (r.name, r.started_at, r.model_dump_json()))
    return Inputs(runs=list(runs.values()), reports=ordered)
