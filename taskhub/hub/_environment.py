"""A taskset declared as a Hub RL environment dataset: ``environment.yaml`` and the card tags.

The Hub shows a dataset as an RL environment (its filter, badge and "use this dataset"
snippets) when the repo root holds an ``environment.yaml`` in its ``hf-rl-env-0.1`` format and
the card carries the ``rl-environment`` tag plus a framework tag. taskhub writes one
environment per taskset, with the OpenEnv framework block naming where its env runs::

    spec_version: hf-rl-env-0.1
    environments:
    - id: arith-mini
      title: arith-mini
      config_name: default
      splits: [test]
      frameworks:
        openenv:
          manifest: openenv.yaml
          mode: space
          space_id: owner/arith-env

A Space is named by ``--space`` or by the card's ``env`` when it is a Space id; a container
image by ``--image`` (``mode: container``). An env that is neither (a built-in name, a URL, a
folder) cannot be declared. ``load_taskset`` reads the declaration back: a taskset without an
``env:`` in its card runs on the declared Space.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskhub._errors import SchemaError

if TYPE_CHECKING:
    from taskhub._taskset import Taskset

#: The format taskhub writes.
SPEC_VERSION = "hf-rl-env-0.1"
#: Formats taskhub reads (the Hub's documentation has used both names).
SPEC_VERSIONS = ("hf-rl-env-0.1", "hf-env-0.1")
ENVIRONMENT_FILE = "environment.yaml"
#: Card tags of an RL environment dataset: the Hub's filter tag and the framework's.
TAGS = ("rl-environment", "openenv")
#: What the card of an OpenEnv env names its manifest.
MANIFEST = "openenv.yaml"
_SPACE_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MODEL_CONFIG = ConfigDict(extra="allow", use_attribute_docstrings=True)


class OpenEnvFramework(BaseModel):
    """The ``frameworks.openenv`` block: where the env runs."""

    model_config = _MODEL_CONFIG

    manifest: str = MANIFEST
    """Path of the env's ``openenv.yaml`` in its Space or image."""
    mode: Literal["space", "container"]
    """``space`` (a Hub Space serves the env) or ``container`` (an image to run)."""
    space_id: str | None = None
    """The Space, for ``mode: space``."""
    image: str | None = None
    """The container image, for ``mode: container``."""


class EnvironmentEntry(BaseModel):
    """One entry of ``environments:``."""

    model_config = _MODEL_CONFIG

    id: str = Field(min_length=1)
    """Stable identifier within the dataset repo."""
    title: str | None = None
    """Display name."""
    config_name: str | None = None
    """The dataset config (``configs:`` entry of the card) holding its rows."""
    splits: list[str] | None = None
    """Split names of the environment's rows."""
    frameworks: dict[str, Any]
    """Framework declarations (``openenv``, ``verifiers``, ``harbor``...)."""

    @property
    def openenv(self) -> OpenEnvFramework | None:
        """The OpenEnv block, if the entry has one."""
        block = self.frameworks.get("openenv")
        return OpenEnvFramework.model_validate(block) if isinstance(block, dict) else None


class EnvironmentDeclaration(BaseModel):
    """A parsed ``environment.yaml``."""

    model_config = _MODEL_CONFIG

    spec_version: str
    """``hf-rl-env-0.1``."""
    environments: list[EnvironmentEntry] = Field(min_length=1)
    """The environments the dataset declares."""

    def openenv(self) -> tuple[EnvironmentEntry, OpenEnvFramework] | None:
        """The first environment with an OpenEnv block, and the block."""
        for entry in self.environments:
            block = entry.openenv
            if block is not None:
                return entry, block
        return None

    @property
    def env_spec(self) -> str | None:
        """What ``taskhub eval`` can run: the declared Space id (None for an image)."""
        found = self.openenv()
        if found is None:
            return None
        return found[1].space_id if found[1].mode == "space" else None

    @property
    def image(self) -> str | None:
        """The declared container image, if the env is declared as one."""
        found = self.openenv()
        return found[1].image if found and found[1].mode == "container" else None


def is_space_id(env: str | None) -> bool:
    """Whether an env spec names a Hub Space (``owner/name``, not a URL or a path)."""
    return (
        env is not None
        and bool(_SPACE_ID.match(env))
        and not env.startswith((".", "/", "~"))
        and not Path(env).exists()
    )


def environment_declaration(
    name: str,
    splits: list[str],
    *,
    env: str | None,
    space: str | None = None,
    image: str | None = None,
    config_name: str = "default",
) -> dict[str, Any] | None:
    """The ``environment.yaml`` content of a taskset, or None when its env cannot be named.

    Args:
        name: The taskset's name (the environment's id and title).
        splits: Its split names.
        env: The card's env (used when it is a Space id).
        space: The Space serving the env (overrides ``env``).
        image: The container image of the env (``mode: container``).
        config_name: The card's config holding the rows.

    Raises:
        SchemaError: Both a Space and an image are given, or the Space id is malformed.
    """
    if space is not None and image is not None:
        raise SchemaError("declare the env as a Space or as an image, not both")
    if space is None and image is None and is_space_id(env):
        space = env
    if space is not None and not _SPACE_ID.match(space):
        raise SchemaError(f"{space!r} is not a Space id: use OWNER/NAME")
    if space is None and image is None:
        return None
    openenv: dict[str, Any] = {"manifest": MANIFEST}
    if space is not None:
        openenv.update(mode="space", space_id=space)
    else:
        openenv.update(mode="container", image=image)
    ident = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "tasks"
    entry = {
        "id": ident,
        "title": name,
        "config_name": config_name,
        "splits": list(splits),
        "frameworks": {"openenv": openenv},
    }
    return {"spec_version": SPEC_VERSION, "environments": [entry]}


def render_environment(declaration: dict[str, Any]) -> str:
    """``environment.yaml`` text."""
    return yaml.safe_dump(declaration, sort_keys=False, allow_unicode=True, width=100)


def read_environment(folder: Path) -> EnvironmentDeclaration | None:
    """Read a dataset folder's ``environment.yaml`` (None when it has none).

    Raises:
        SchemaError: The file is not YAML, not in a format taskhub reads, or misses a
            required field (named).
    """
    path = Path(folder) / ENVIRONMENT_FILE
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SchemaError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: must be a mapping with spec_version and environments")
    version = data.get("spec_version")
    if version not in SPEC_VERSIONS:
        raise SchemaError(
            f"{path}: spec_version {version!r} is not one taskhub reads "
            f"({', '.join(SPEC_VERSIONS)})"
        )
    try:
        declaration = EnvironmentDeclaration.model_validate(data)
        for entry in declaration.environments:
            _ = entry.openenv  # validate the OpenEnv block too
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SchemaError(f"{path}: field {where!r}: {first['msg']}", field=where) from None
    return declaration


def with_tags(header: dict[str, Any]) -> dict[str, Any]:
    """A card header with the RL environment tags added (once, in front)."""
    tags = [t for t in header.get("tags") or [] if isinstance(t, str)]
    return {**header, "tags": [*TAGS, *(t for t in tags if t not in TAGS)]}


def declared_files(
    folder: Path, taskset: Taskset, *, space: str | None = None, image: str | None = None
) -> dict[str, bytes]:
    """What a push adds to declare a taskset folder as an RL environment dataset.

    A folder with its own ``environment.yaml`` keeps it (checked), and only the card tags are
    added when missing; otherwise the declaration is made from ``space``, ``image`` or the
    card's env. Nothing when the env cannot be declared (a built-in name, a URL).

    Returns:
        Repo path -> content, for ``environment.yaml`` and ``README.md`` when they change.

    Raises:
        SchemaError: The folder's ``environment.yaml`` is invalid, or ``space``/``image``
            are wrong.
    """
    from taskhub.hub._common import render_readme, split_readme

    existing = read_environment(folder)
    out: dict[str, bytes] = {}
    if existing is None:
        config = "default"
        declaration = environment_declaration(
            taskset.name,
            list(taskset.splits),
            env=taskset.card.env,
            space=space,
            image=image,
            config_name=config,
        )
        if declaration is None:
            return out
        out[ENVIRONMENT_FILE] = render_environment(declaration).encode()
    elif space is not None or image is not None:
        raise SchemaError(
            f"{folder / ENVIRONMENT_FILE} already declares the env: edit it, or remove it to "
            "declare the env from --space/--image"
        )
    readme = folder / "README.md"
    header, body = (
        split_readme(readme.read_text(encoding="utf-8")) if readme.is_file() else ({}, "")
    )
    tagged = with_tags(header)
    if tagged != header:
        out["README.md"] = render_readme(tagged, body).encode()
    return out
