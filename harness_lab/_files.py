"""Reading YAML/JSON config files with one-line errors that name the file.

A config path is untrusted: it may name a FIFO (a plain ``open`` waits forever for a writer), a link to
``/dev/zero`` (a read that never ends), a directory, a huge file or a YAML alias bomb (a few hundred bytes
that expand to billions of values). :func:`read_regular_file` opens regular files only, without
blocking, and reads at most what it is asked for; :func:`read_config_text` at most
:data:`MAX_CONFIG_BYTES`; :func:`load_mapping` refuses a document with more than
:data:`MAX_CONFIG_VALUES` values once its aliases are expanded, or nested deeper than
:data:`MAX_CONFIG_DEPTH`. Each refusal is one :class:`ConfigError` line naming the file.
"""

from __future__ import annotations

import difflib
import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "MAX_CONFIG_VALUES", "load_mapping", "read_config_text",
           "read_regular_file", "shown_path", "validate_file"]

MAX_CONFIG_BYTES = 1 << 20
"""The largest contract or scenario file read (the shipped ones are a few KB)."""
MAX_CONFIG_VALUES = 100_000
"""Values (mapping entries, list items, scalars) a config document may hold with its aliases expanded."""
MAX_CONFIG_DEPTH = 100
"""How deeply its mappings and lists may nest (a run serialises them again, recursively)."""

# libyaml's parser is 3-4x faster than PyYAML's own (a 1 MiB file: ~2.6 s of CPU, not ~11 s) and does not
# recurse; both give the same data and YAMLError types, in different words.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def shown_path(path: str | Path) -> str:
    """``path`` as it goes into a one-line error: quoted when it holds a newline, a control character or
    bytes that are not UTF-8 (which Python keeps as surrogates that no UTF-8 stream can print)."""
    text = str(path)
    return text if text.isprintable() else ascii(text)


def read_regular_file(path: Path, most: int) -> bytes:
    """At most ``most`` bytes of the regular file ``path`` (a symlink to one is followed); anything else,
    a FIFO, a device, a directory, is a ConfigError line, found without blocking and without reading it."""
    shown = shown_path(path)
    try:
        # stat first: opening a device can act (a tape rewinds, a watchdog arms) before fstat could refuse it.
        _require_regular(shown, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{shown}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # os.stat's answer to a NUL in the path
        raise ConfigError(f"{shown}: not a usable path (it holds a NUL byte)") from None
    try:
        _require_regular(shown, os.fstat(fd).st_mode)  # the path may have been swapped since the stat
        chunks: list[bytes] = []
        size = 0
        while size < most and (chunk := os.read(fd, most - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_config_text(path: Path, *, limit: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, refused when longer than ``limit`` bytes."""
    data = read_regular_file(path, limit + 1)
    if len(data) > limit:
        raise ConfigError(f"{shown_path(path)}: larger than {limit} bytes, the limit for a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown_path(path)}: not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}") \
            from None


def _require_regular(shown: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise ConfigError(f"{shown}: is {kind}, not a regular file")


def load_mapping(path: Path) -> dict[str, Any]:
    shown = shown_path(path)
    text = read_config_text(path)
    is_json = path.suffix == ".json"
    kind = "JSON" if is_json else "YAML"
    try:
        raw = json.loads(text) if is_json else yaml.load(text, Loader=_LOADER)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        reason = _yaml_reason(exc) if isinstance(exc, yaml.MarkedYAMLError) else _one_line(exc)
        raise ConfigError(f"{shown}: not valid {kind}: {reason}") from None
    except RecursionError:  # PyYAML's own composer and json recurse per level of nesting
        raise ConfigError(f"{shown}: nested deeper than {MAX_CONFIG_DEPTH} levels") from None
    except ValueError as exc:  # a scalar resolves but cannot be built: 2001-13-45, a 5000-digit int
        raise ConfigError(f"{shown}: not valid {kind}: a value cannot be read: {_one_line(exc)}") from None
    except (LookupError, TypeError, AttributeError, ArithmeticError) as exc:
        # PyYAML's constructors trust an explicit tag's text: '!!bool x' is a KeyError, '!!timestamp' an
        # AttributeError. Nothing of ours runs inside yaml.load, so these name the file's value, not a bug here.
        raise ConfigError(f"{shown}: not valid {kind}: a tagged value cannot be read "
                          f"({type(exc).__name__}: {_one_line(exc)})") from None
    _check_size(shown, raw)
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown}: expected a mapping at the top level, got {type(raw).__name__}")
    return raw


def _check_size(shown: str, document: Any) -> None:
    """Walk ``document`` as a tree (an alias counted at each use), stopping at the first limit passed.

    The walk visits at most MAX_CONFIG_VALUES values, so an alias bomb, or an anchor inside itself,
    costs as much as a plain file of that many values; the loader itself shares aliased objects.
    """
    stack: list[tuple[Any, int]] = [(document, 0)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_CONFIG_VALUES:
            raise ConfigError(f"{shown}: more than {MAX_CONFIG_VALUES} values with its aliases expanded "
                              "(an alias bomb?)")
        if depth > MAX_CONFIG_DEPTH:  # an anchor used inside itself nests forever
            raise ConfigError(f"{shown}: nested deeper than {MAX_CONFIG_DEPTH} levels with its aliases expanded")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((item, depth + 1) for item in value)


def validate_file(model: type[BaseModel], path: Path) -> Any:
    """Load ``path`` and validate it as ``model``; the first problem becomes a one-line ConfigError."""
    raw = load_mapping(path)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt field is reported twice, as unknown and as missing: name the misspelling first.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = ".".join(str(p) if str(p).isprintable() else ascii(p) for p in first["loc"]) or "(top level)"
        message = _one_line(first["msg"])  # a validator's message may quote a value with a newline
        raise ConfigError(f"{shown_path(path)}: field {where}: {message}{_did_you_mean(first, errors)}") from None


def _did_you_mean(error: Any, errors: list[Any]) -> str:
    if error["type"] != "extra_forbidden":
        return ""
    parent, name = error["loc"][:-1], str(error["loc"][-1])
    missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == parent]
    close = difflib.get_close_matches(name, missing, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark
    place = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{_one_line(exc.problem or exc.context)}{place}"


def _one_line(reason: object) -> str:
    return " ".join(str(reason).split()) or type(reason).__name__
