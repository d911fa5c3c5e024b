"""The one registry mechanism of every plug-in point.

Kernel models (:data:`cascade.engine.registry.MODELS`), schedulers, routers, arrival patterns
and length laws (:mod:`cascade.serving`), orchestrator backends
(``services.orchestrator.backends.BACKENDS``) and trace loaders
(:data:`cascade.traces.inputs.LOADERS`) are each one :class:`Registry`, filled by explicit
``register`` calls in the module that defines the implementations (no registration as a
side effect of some other call).

A plug-in is registered once under a name, optionally with the frozen config Struct that
describes its settings. Such a config Struct carries its name as its msgspec tag
(``tag_field="kind"``), so a JSON object ``{"kind": "poisson", "rate": 20}`` decodes to the
right config through the registry. A duplicate name is an error; an unknown name lists the
known ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import msgspec

from cascade.errors import DuplicateNameError, UnknownNameError, ValidationError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> (config type, implementation); a duplicate name is an error."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, tuple[type[msgspec.Struct], T]] = {}

    def register(self, name: str, config_type: type[msgspec.Struct] | None, impl: T) -> None:
        """Add a plug-in; a config type's tag must equal ``name`` (None: it takes no config)."""
        if name in self._entries:
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered")
        if config_type is None:
            config_type = msgspec.defstruct(f"{name}_config", [], frozen=True, tag=name,
                                            tag_field="kind")
        tag = config_type.__struct_config__.tag
        if tag != name:
            raise ValueError(f"{config_type.__name__} has tag {tag!r}, expected {name!r}")
        self._entries[name] = (config_type, impl)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """(name, implementation) in registration order (the order loaders are tried in)."""
        return [(name, impl) for name, (_, impl) in self._entries.items()]

    def config_types(self) -> tuple[type[msgspec.Struct], ...]:
        """Every registered config type, sorted by name (the members of a tagged union)."""
        return tuple(self._entries[name][0] for name in self.names())

    def impl(self, name: str) -> T:
        """The implementation registered as ``name`` (UnknownNameError lists the known)."""
        return self.get(name)[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> tuple[type[msgspec.Struct], T]:
        """Config type and implementation for ``name`` (UnknownNameError lists the known)."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries) from None

    def resolve(self, value: Any, field: str) -> msgspec.Struct:
        """A config Struct from a Struct or a ``{"kind": name, ...}`` mapping.

        Raises ValidationError naming ``field`` (and the sub-field msgspec
        reports) when the value is not a valid config of a registered kind.
        """
        if isinstance(value, msgspec.Struct):
            tag = type(value).__struct_config__.tag
            if tag not in self._entries or not isinstance(value, self._entries[str(tag)][0]):
                raise ValidationError(
                    f"{type(value).__name__} is not a registered {self.kind}; "
                    f"known: {', '.join(self.names())}", field=field)
            value = msgspec.to_builtins(value)  # re-checked: constraints apply on convert only
        if isinstance(value, str):
            value = {"kind": value}
        if not isinstance(value, dict):
            raise ValidationError(
                f"expected an object with 'kind' (one of {', '.join(self.names())})", field=field)
        name = value.get("kind")
        if not isinstance(name, str) or name not in self._entries:
            raise ValidationError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}", field=field)
        config_type = self._entries[name][0]
        try:
            return msgspec.convert(value, config_type)
        except msgspec.ValidationError as exc:
            raise ValidationError(_msgspec_message(exc), field=_msgspec_field(exc, field)) from None


def _msgspec_field(exc: msgspec.ValidationError, base: str) -> str:
    text = str(exc)
    marker = "at `$."
    if marker in text:
        sub = text.split(marker, 1)[1].rstrip("`")
        return f"{base}.{sub}"
    return base


def _msgspec_message(exc: msgspec.ValidationError) -> str:
    return str(exc).split(" - at `", 1)[0]
