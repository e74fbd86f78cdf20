"""One registry for rewards, validators and model backends: decorated factories.

A plugin is a factory that takes its configuration as keyword arguments and returns an object
satisfying the kind's Protocol. Registering records the name, so every result can say exactly
which plugin, with which arguments, produced it::

    from taskhub import reward

    @reward("shouting")
    def shouting(*, threshold: float = 0.5) -> RewardFn:
        async def score(episode: EpisodeRecord) -> float:
            text = episode.steps[-1].action.get("answer", "") if episode.steps else ""
            return float(sum(c.isupper() for c in text) >= threshold * max(len(text), 1))
        return score

Packages (taskhub's own ``rewards/`` and ``validators/`` included) register through the
entry-point groups ``taskhub.rewards``, ``taskhub.validators`` and ``taskhub.models``. An entry
point names a module, which is imported for its decorators, on the first lookup that misses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Literal, TypeVar

from taskhub._errors import PluginError, UnknownPluginError
from taskhub._schema import PluginSpec

logger = logging.getLogger(__name__)

PluginKind = Literal["reward", "validator", "model"]
KINDS: tuple[PluginKind, ...] = ("reward", "validator", "model")
ENTRY_POINT_GROUPS: dict[PluginKind, str] = {
    "reward": "taskhub.rewards",
    "validator": "taskhub.validators",
    "model": "taskhub.models",
}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class PluginEntry:
    """A registered factory and what is known about it."""

    kind: PluginKind
    name: str
    factory: Callable[..., Any]
    #: For rewards: the factory keyword that receives ``ARG`` of a ``name:ARG`` spec.
    spec_arg: str | None = None
    #: Free-form attributes (``stateful`` rewards, ``requires`` for install hints...).
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def description(self) -> str:
        """First line of the factory's docstring."""
        doc = (self.factory.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


class Registry:
    """Named plugin factories of each kind, with lazy entry-point loading."""

    def __init__(self) -> None:
        """Create an empty registry."""
        self._entries: dict[PluginKind, dict[str, PluginEntry]] = {k: {} for k in KINDS}
        self._loaded_groups: set[PluginKind] = set()

    def register(
        self,
        kind: PluginKind,
        name: str,
        factory: Callable[..., Any],
        *,
        override: bool = False,
        spec_arg: str | None = None,
        **attrs: Any,
    ) -> PluginEntry:
        """Register ``factory`` as the ``kind`` plugin called ``name``.

        Args:
            kind: ``reward``, ``validator`` or ``model``.
            name: ``snake_case`` for taskhub's plugins, ``package/name`` for third-party ones.
            factory: Callable taking keyword configuration and returning the plugin.
            override: Replace an existing registration instead of raising.
            spec_arg: For rewards, the keyword that receives the ``ARG`` of ``name:ARG``.
            **attrs: Extra attributes kept on the entry.

        Returns:
            The new entry.

        Raises:
            PluginError: ``name`` is already registered and ``override`` is false.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown plugin kind {kind!r}; expected one of {KINDS}")
        existing = self._entries[kind].get(name)
        if existing is not None and not override and existing.factory is not factory:
            raise PluginError(
                f"{kind} {name!r} is already registered by {_qualname(existing.factory)}; "
                "pass override=True to replace it"
            )
        entry = PluginEntry(kind, name, factory, spec_arg, dict(attrs))
        self._entries[kind][name] = entry
        return entry

    def lookup(self, kind: PluginKind, name: str) -> PluginEntry:
        """Return the entry registered as ``name``, loading entry points on a miss.

        Raises:
            UnknownPluginError: Nothing of that kind is registered under ``name``.
        """
        entry = self._entries[kind].get(name)
        if entry is None:
            self.load_entry_points(kind)
            entry = self._entries[kind].get(name)
        if entry is None:
            raise UnknownPluginError(kind, name, self._entries[kind])
        return entry

    def names(self, kind: PluginKind) -> list[str]:
        """Return the sorted names of every ``kind`` plugin, entry points included."""
        self.load_entry_points(kind)
        return sorted(self._entries[kind])

    def entries(self, kind: PluginKind) -> Iterator[PluginEntry]:
        """Iterate over every ``kind`` entry in name order, entry points included."""
        for name in self.names(kind):
            yield self._entries[kind][name]

    def create(self, kind: PluginKind, name: str, /, **args: Any) -> tuple[Any, PluginSpec]:
        """Build the ``kind`` plugin ``name`` with ``args``.

        Returns:
            The plugin and the ``PluginSpec`` to record beside its results.
        """
        entry = self.lookup(kind, name)
        plugin = entry.factory(**args)
        # A plugin built for one spec may know its version better than its entry does: the
        # user package a `python:` reward imports, the model and parameters of a judge.
        version = getattr(plugin, "plugin_version", None)
        if not isinstance(version, str):
            version = entry.attrs.get("version")
            if callable(version):
                version = version()
        spec = PluginSpec(kind=kind, name=name, args=_jsonable(args), version=version)
        return plugin, spec

    def load_entry_points(self, kind: PluginKind) -> None:
        """Import every module registered in the kind's entry-point group, once."""
        if kind in self._loaded_groups:
            return
        self._loaded_groups.add(kind)
        for ep in entry_points(group=ENTRY_POINT_GROUPS[kind]):
            try:
                loaded = ep.load()
            except Exception as exc:  # a broken third-party plugin must not break taskhub
                logger.warning("could not load %s plugin %r: %s", kind, ep.value, exc)
                continue
            if callable(loaded) and not isinstance(loaded, type):
                loaded(self)


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is None or isinstance(value, str | int | float | bool):
            out[key] = value
        elif isinstance(value, list | tuple):
            out[key] = [v if isinstance(v, str | int | float | bool) else repr(v) for v in value]
        elif isinstance(value, dict):
            out[key] = _jsonable(value)
        else:
            out[key] = repr(value)
    return out


#: The process-wide registry.
registry = Registry()


def _decorator(
    kind: PluginKind, name: str, override: bool, spec_arg: str | None, attrs: dict[str, Any]
) -> Callable[[F], F]:
    def decorate(factory: F) -> F:
        registry.register(kind, name, factory, override=override, spec_arg=spec_arg, **attrs)
        return factory

    return decorate


def reward(
    name: str, *, override: bool = False, spec_arg: str | None = None, **attrs: Any
) -> Callable[[F], F]:
    """Register a reward factory. See ``RewardFn`` for what the factory returns.

    Args:
        name: The reward's name in specs (``--reward NAME``).
        override: Replace an existing reward of that name.
        spec_arg: Keyword of the factory that receives ``ARG`` in ``NAME:ARG``.
        **attrs: Entry attributes: ``stateful=True`` for rewards that need the live env
            (refused by re-scoring), ``version=callable`` for the backing library's version
            (a built plugin's own ``plugin_version`` string wins), ``range=(low, high)`` for
            the values it returns (others become reward errors).
    """
    return _decorator("reward", name, override, spec_arg, attrs)


def validator(name: str, *, override: bool = False, **attrs: Any) -> Callable[[F], F]:
    """Register a validator (environment check) factory under ``name``."""
    return _decorator("validator", name, override, None, attrs)


def model_backend(name: str, *, override: bool = False, **attrs: Any) -> Callable[[F], F]:
    """Register a model backend factory for model strings ``name/...``."""
    return _decorator("model", name, override, None, attrs)


def create(kind: PluginKind, name: str, /, **args: Any) -> tuple[Any, PluginSpec]:
    """Build a registered plugin; shorthand for ``registry.create``."""
    return registry.create(kind, name, **args)
