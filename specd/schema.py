"""Settings declared once: typed dataclass fields with help text, allowed values and checks.

A settings class (``EngineConfig``, ``DaemonConfig``, ``CompletionRequest``) declares each field
with :func:`setting`. From that one declaration come the config-file reader (:func:`from_table`),
the command-line flags (:func:`add_flags`, :func:`flag_values`, :func:`flag_argv`) and the JSON
types a request parameter may have (:func:`json_types`). A field declared with :func:`nested`
holds another settings class whose fields sit flat beside its own: ``max_prefix_tokens`` in the
``[engine]`` table (and ``--max-prefix-tokens``) sets ``EngineConfig.windows.max_prefix_tokens``.

Names: a field's name is its config key, its argparse ``dest`` and its JSON parameter; its flag
is ``--name-with-dashes`` unless the declaration names another (or none: config file only).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Callable, Collection

Check = Callable[[Any], "str | None"]  # a problem with a value (the message after its name), or None

# JSON / TOML types a value of each Python type may arrive as (ints are also floats; a path is text)
_ACCEPTS: dict[Any, tuple[type, ...]] = {
    str: (str,), int: (int,), float: (int, float), bool: (bool,), type(None): (type(None),), Path: (str,),
}


class ConfigError(ValueError):
    """A setting that cannot be used as given; the message names it (``engine.k: ...``)."""


@dataclass(frozen=True)
class Setting:
    """What a field's declaration says beyond its type and default."""

    help: str
    choices: tuple[Any, ...] | None = None
    flag: str | None = ""  # "": --name-with-dashes; None: no flag (config file or API only)
    check: Check | None = None  # range and form checks beyond the type and the choices
    parse: Callable[[str], Any] | None = None  # a flag's text -> value (default: from the type)
    accepts: tuple[type, ...] | None = None  # JSON / TOML types (default: from the type)
    convert: Callable[[Any], Any] | None = None  # an accepted value -> the field's value
    shown_default: str | None = None  # the default as --help shows it (default: the value)


def setting(default: Any = MISSING, *, help: str, choices: Collection[Any] | None = None, flag: str | None = "",
            check: Check | None = None, parse: Callable[[str], Any] | None = None,
            accepts: tuple[type, ...] | None = None, convert: Callable[[Any], Any] | None = None,
            shown_default: str | None = None) -> Any:
    """A dataclass field carrying its :class:`Setting` (no ``default``: a required field)."""
    meta = Setting(help, tuple(choices) if choices is not None else None, flag, check, parse, accepts, convert,
                   shown_default)
    return dataclasses.field(default=default, metadata={"setting": meta})


def nested(cls: type) -> Any:
    """A field holding the settings class ``cls`` (default: ``cls()``), its fields read flat."""
    return dataclasses.field(default_factory=cls, metadata={"nested": cls})


@dataclass(frozen=True)
class Entry:
    """One setting of a class, nested ones flattened."""

    name: str  # config key, argparse dest, JSON parameter
    path: tuple[str, ...]  # attribute path from the outer class: ("windows", "max_prefix_tokens")
    setting: Setting
    hint: Any  # the field's resolved type
    accepts: tuple[type, ...]
    default: Any

    @property
    def flag(self) -> str | None:
        if self.setting.flag is None:
            return None
        return self.setting.flag or "--" + self.name.replace("_", "-")


@functools.cache
def entries(cls: type) -> tuple[Entry, ...]:
    """Every setting of ``cls`` in declaration order, nested classes flattened in place."""
    hints = typing.get_type_hints(cls)
    out: list[Entry] = []
    for f in dataclasses.fields(cls):
        if "nested" in f.metadata:
            out += [dataclasses.replace(e, path=(f.name, *e.path)) for e in entries(f.metadata["nested"])]
        elif "setting" in f.metadata:
            s: Setting = f.metadata["setting"]
            accepts = s.accepts or _accepts(hints[f.name])
            if not accepts:
                raise TypeError(f"{cls.__name__}.{f.name}: declare the accepted types of {hints[f.name]!r}")
            out.append(Entry(f.name, (f.name,), s, hints[f.name], accepts, f.default))
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: a nested setting's name repeats another's")
    return tuple(out)


def _members(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _accepts(hint: Any) -> tuple[type, ...]:
    out: list[type] = []
    for member in _members(hint):
        out += [t for t in _ACCEPTS.get(member, ()) if t not in out]
    return tuple(out)


def accepted(entry: Entry, value: Any) -> bool:
    """Whether ``value`` has one of the entry's types (a bool is not an int here)."""
    return isinstance(value, entry.accepts) and (bool in entry.accepts or not isinstance(value, bool))


def json_types(cls: type) -> dict[str, tuple[type, ...]]:
    """The JSON types each setting may arrive as, by name."""
    return {e.name: e.accepts for e in entries(cls)}


# -- config file and overrides -------------------------------------------------------------------

def from_table(cls: type, section: str, table: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    """``cls`` from a config table's values, with the non-None ``overrides`` (flags) on top; each
    value checked for its type, allowed values and range. Raises :class:`ConfigError`, naming the
    setting as ``section.name``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{section}: must be a table, got {type(table).__name__}")
    by_name = {e.name: e for e in entries(cls)}
    given = {**table, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    values: dict[tuple[str, ...], Any] = {}
    for key, value in given.items():
        where = f"{section}.{key}"
        entry = by_name.get(key)
        if entry is None:
            raise ConfigError(f"{where}: unknown setting")
        if not accepted(entry, value):
            raise ConfigError(f"{where}: wrong type {type(value).__name__}")
        values[entry.path] = check(entry, value, where)
    return _build(cls, values, ())


def check(entry: Entry, value: Any, where: str) -> Any:
    """``value`` (of an accepted type) converted to the field's value and checked; ConfigError."""
    s = entry.setting
    if s.convert is not None:
        value = s.convert(value)
    elif isinstance(value, int) and not isinstance(value, bool) and float in _members(entry.hint):
        value = float(value)
    if s.choices is not None and value not in s.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(map(str, s.choices))}, got {value!r}")
    problem = s.check(value) if s.check is not None else None
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return value


def _build(cls: type, values: dict[tuple[str, ...], Any], prefix: tuple[str, ...]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path = (*prefix, f.name)
        if "nested" in f.metadata:
            kwargs[f.name] = _build(f.metadata["nested"], values, path)
        elif path in values:
            kwargs[f.name] = values[path]
    return cls(**kwargs)


# -- command-line flags --------------------------------------------------------------------------

def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type,
              skip: Collection[str] = ()) -> None:
    """One flag per setting of ``cls`` that has one (except ``skip``). Flags default to None, so
    :func:`flag_values` holds only what was given; ``--help`` shows the declared default."""
    for e in entries(cls):
        flag = e.flag
        if flag is None or e.name in skip:
            continue
        shown = e.setting.shown_default if e.setting.shown_default is not None else _show(e.default)
        text = f"{e.setting.help} (default: {shown})".replace("%", "%%")
        if e.hint is bool:  # a switch: the flag sets the opposite of the default
            parser.add_argument(flag, dest=e.name, action="store_const", const=not e.default, default=None,
                                help=text)
        else:
            parser.add_argument(flag, dest=e.name, type=_flag_type(e), choices=e.setting.choices, default=None,
                                help=text)


def flag_names(cls: type) -> tuple[str, ...]:
    """The argparse ``dest`` of every flag :func:`add_flags` defines for ``cls``."""
    return tuple(e.name for e in entries(cls) if e.flag is not None)


def flag_values(args: argparse.Namespace, cls: type, skip: Collection[str] = ()) -> dict[str, Any]:
    """The flags of ``cls`` as given (None where not given), by setting name."""
    return {name: getattr(args, name, None) for name in flag_names(cls) if name not in skip}


def flag_argv(args: argparse.Namespace, cls: type) -> list[str]:
    """The flags of ``cls`` that were given, as command-line arguments (to pass them on)."""
    out: list[str] = []
    for e in entries(cls):
        value = getattr(args, e.name, None)
        if e.flag is None or value is None:
            continue
        out += [e.flag] if e.hint is bool else [e.flag, str(value)]
    return out


def _flag_type(entry: Entry) -> Callable[[str], Any]:
    parse = entry.setting.parse
    if parse is None:
        members = [m for m in _members(entry.hint) if m is not type(None)]
        parse = float if float in members else int if members == [int] else str
    if parse in (int, float, str):
        return parse

    def parsed(text: str) -> Any:  # argparse shows an ArgumentTypeError's own message
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parsed.__name__ = getattr(parse, "__name__", "value")
    return parsed


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
