"""Typed configuration from JSON, with errors that name the offending field.

A config is a dataclass. Its fields' type hints say what JSON each accepts, and the reader
follows serde (the Rust SDK's `#[serde(deny_unknown_fields)]` structs) rule for rule, so a
config the Rust version of a policy accepts is accepted here and one it refuses is refused,
with an error naming the same field path, such as
`config.rules[2].max_attempts: invalid type: string "five", expected u32`:

* an unknown or duplicate field is refused, naming it; a field left out takes its default
  (a field without one is required, except an optional one, which becomes `None`);
* a struct may also be written as an array of its fields in order, as serde allows;
* integers are exact: `U32`/`U64`/`I64` refuse floats, booleans and out-of-range values;
* an `enum.Enum` is read from its value (`"dead_letter"`) or serde's `{"dead_letter": null}`;
* a JSON name is the field name without a trailing underscore (`class_` reads `"class"`).

Supported hints: `bool`, `int`, `U32`, `U64`, `I64`, `float`, `str`, `X | None`,
`list[X]`, `tuple[X, ...]`, `dict[str, X]`, `enum.Enum` subclasses, dataclasses, `Any`
(plain JSON), and classes that read themselves through a `__verdict_decode__(value, at)`
class method (as `Backoff` does).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from typing import Annotated, Any

__all__ = [
    "ConfigError",
    "DecodeError",
    "I64",
    "JsonObject",
    "Path",
    "U32",
    "U64",
    "decode",
    "from_json",
    "parse_config",
]


@dataclasses.dataclass(frozen=True)
class _Int:
    """Marks an `int` hint with the range of the Rust integer type it stands for."""

    name: str
    low: int
    high: int


U32 = Annotated[int, _Int("u32", 0, 2**32 - 1)]
"""An integer in `0..=2^32-1`, as Rust's `u32`."""
U64 = Annotated[int, _Int("u64", 0, 2**64 - 1)]
"""An integer in `0..=2^64-1`, as Rust's `u64`."""
I64 = Annotated[int, _Int("i64", -(2**63), 2**63 - 1)]
"""An integer in `-2^63..=2^63-1`, as Rust's `i64`."""


class ConfigError(ValueError):
    """The operator's config is refused. Raise it from a policy's `__init__` with a message
    that names the field (`config.max_attempts: must be at least 1`); the host shows it to
    whoever set the route's config. Any other exception there is a bug and traps."""


class Path:
    """Where a value sits in the document, printed the way Rust's `serde_path_to_error`
    prints it (`rules[2].retry`, `.` for the root), so both SDKs name a field alike."""

    __slots__ = ("_parent", "_segment")

    def __init__(self, parent: Path | None = None, segment: str | int | None = None) -> None:
        self._parent = parent
        self._segment = segment

    def key(self, name: str) -> Path:
        """The path of field or map key `name` below this one."""
        return Path(self, name)

    def index(self, i: int) -> Path:
        """The path of array element `i` below this one."""
        return Path(self, i)

    def segments(self) -> list[str | int]:
        out: list[str | int] = []
        node: Path | None = self
        while node is not None and node._parent is not None:
            out.append(node._segment)  # type: ignore[arg-type]
            node = node._parent
        return out[::-1]

    def __str__(self) -> str:
        parts = self.segments()
        if not parts:
            return "."
        text, separator = "", ""
        for part in parts:
            if isinstance(part, int):
                text += f"[{part}]"
            else:
                text += separator + part
            separator = "."
        return text

    def __repr__(self) -> str:
        return f"Path({str(self)!r})"


ROOT = Path()


class DecodeError(ValueError):
    """JSON that does not fit the expected type. `str()` is `path: message` (just the message
    at the root); `path` and `message` are kept apart for callers that add a prefix."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def located(self, root: str | None = None) -> str:
        """The message prefixed with the path, itself under `root` when given."""
        path = str(self.path)
        if root is None:
            return self.message if path == "." else f"{path}: {self.message}"
        return f"{root}: {self.message}" if path == "." else f"{root}.{path}: {self.message}"

    def __str__(self) -> str:
        return self.located()


class JsonObject:
    """A JSON object as its key/value pairs in document order, duplicates included: serde
    refuses a duplicate field and reports the first error in document order, and a plain
    dict would hide both."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]] | None = None) -> None:
        self.pairs = pairs if pairs is not None else []

    def __iter__(self) -> typing.Iterator[tuple[str, Any]]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def append(self, pair: tuple[str, Any]) -> None:
        self.pairs.append(pair)

    def __repr__(self) -> str:
        return f"JsonObject({self.pairs!r})"


class _NotJson:
    """`NaN`, `Infinity` and `-Infinity`, which Python's parser accepts and JSON (and serde)
    does not: kept as a marker so the error names the field that holds it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> int | float:
    # Python refuses integers over 4300 digits with a ValueError that has no position;
    # serde reads such a number as a float and refuses it where the field is. Doing the same
    # keeps the error on the field.
    return int(text) if len(text) <= 4000 else float(text)


# What Rust's `str::trim` removes (Unicode White_Space): an "empty" config is empty for
# both SDKs alike (Python's `str.strip` also removes U+001C..U+001F, which Rust keeps).
_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def loads(text: str) -> Any:
    """Parse JSON text into plain values with objects kept as `JsonObject`. A syntax error is
    a `DecodeError` at the root naming the line and column."""
    try:
        return json.loads(
            text,
            object_pairs_hook=JsonObject,
            parse_constant=_NotJson,
            parse_int=_parse_int,
        )
    except json.JSONDecodeError as e:
        raise DecodeError(ROOT, f"{e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise DecodeError(ROOT, "recursion limit exceeded: the JSON nests too deeply") from None


def parse_config(into: type[Any], text: str) -> Any:
    """Parse the operator's config `text` into an instance of the dataclass `into`. An empty
    text means `{}`. Raises `ConfigError` whose message starts with the field path under
    `config`, e.g. `config.rules[2].max_attempts: ...`.

    A field the operator left out is an error unless the config class gives it a default;
    that error says how, because a route without a config (`{}`) is the first thing a new
    policy meets."""
    if not text.strip(_RUST_WHITESPACE):
        text = "{}"
    try:
        return decode(into, loads(text), ROOT)
    except DecodeError as e:
        message = e.located("config")
        if e.message.startswith("missing field `"):
            message += (
                "; set it in the route's config, or give it a default: "
                "a default value on that field of the config class"
            )
        raise ConfigError(message) from None


def from_json(data: str | bytes, into: Any = Any) -> Any:
    """Parse JSON (text or UTF-8 bytes) into `into` (plain values by default), naming the
    path of the offending field on error (`items[2].sku: missing field ...`) with a
    `DecodeError`; trailing characters are refused too."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(ROOT, f"invalid UTF-8 at byte {e.start}") from None
    return decode(into, loads(data), ROOT)


# --- decoding -------------------------------------------------------------------------


def decode(into: Any, value: Any, at: Path) -> Any:
    """Read the parsed JSON `value` (from `loads`) as type `into`; `at` is its path."""
    _check_number(value, at)
    origin = typing.get_origin(into)
    if origin is Annotated:
        base, *marks = typing.get_args(into)
        for mark in marks:
            if isinstance(mark, _Int):
                return _integer(value, mark, at)
        return decode(base, value, at)
    if into is Any or into is object:
        return _plain(value, at)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(into)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"unsupported config type {into!r}: only `X | None` unions are")
        return None if value is None else decode(rest[0], value, at)
    if origin is list:
        (item,) = typing.get_args(into) or (Any,)
        return [decode(item, v, at.index(i)) for i, v in enumerate(_array(value, at))]
    if origin is tuple:
        args = typing.get_args(into)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"unsupported config type {into!r}: use tuple[X, ...]")
        return tuple(decode(args[0], v, at.index(i)) for i, v in enumerate(_array(value, at)))
    if origin is dict:
        key_type, item = typing.get_args(into) or (str, Any)
        if key_type is not str:
            raise TypeError(f"unsupported config type {into!r}: map keys are str")
        if not isinstance(value, JsonObject):
            raise invalid_type(value, "a map", at)
        out: dict[str, Any] = {}
        for key, v in value:
            _check_text(key, at)
            out[key] = decode(item, v, at.key(key))
        return out
    if into is bool:
        if type(value) is not bool:
            raise invalid_type(value, "a boolean", at)
        return value
    if into is int:
        if type(value) is not int:
            raise invalid_type(value, "an integer", at)
        return value
    if into is float:
        if type(value) not in (int, float):
            raise invalid_type(value, "f64", at)
        return float(value)
    if into is str:
        if type(value) is not str:
            raise invalid_type(value, "a string", at)
        return _check_text(value, at)
    if isinstance(into, type):
        hook = vars(into).get("__verdict_decode__")
        if hook is not None:
            return hook.__get__(None, into)(value, at)
        if issubclass(into, enum.Enum):
            return _enum(into, value, at)
        if dataclasses.is_dataclass(into):
            return decode_struct(into, value, at)
    raise TypeError(f"unsupported config type {into!r}")


def decode_struct(
    cls: type[Any],
    value: Any,
    at: Path,
    *,
    first_index: int = 0,
    name: str | None = None,
) -> Any:
    """Read a dataclass from an object (or from an array of its fields in order, serde's
    other form of a struct). `first_index` offsets the array form's element paths (used when
    a tag came first); `name` is what errors call the struct."""
    fields = _fields(cls)
    name = name or f"struct {cls.__name__}"
    values: dict[str, Any] = {}
    if isinstance(value, JsonObject):
        by_json = {f.json: f for f in fields}
        for key, item in value:
            _check_text(key, at)
            spec = by_json.get(key)
            if spec is None:
                raise DecodeError(at, unknown("field", key, [f.json for f in fields]))
            if spec.attr in values:
                raise DecodeError(at, f"duplicate field `{key}`")
            values[spec.attr] = decode(spec.hint, item, at.key(key))
        for spec in fields:
            if spec.attr not in values:
                if spec.has_default:
                    values[spec.attr] = spec.default()
                elif spec.optional:
                    values[spec.attr] = None
                else:
                    raise DecodeError(at, f"missing field `{spec.json}`")
    elif type(value) is list:
        count = len(fields)
        expecting = f"{name} with {count} element{'' if count == 1 else 's'}"
        for i, spec in enumerate(fields):
            if i < len(value):
                values[spec.attr] = decode(spec.hint, value[i], at.index(first_index + i))
            elif spec.has_default:
                values[spec.attr] = spec.default()
            else:
                raise DecodeError(at, f"invalid length {i}, expected {expecting}")
        if len(value) > count:
            raise DecodeError(at, f"invalid length {len(value)}, expected {expecting}")
    else:
        raise invalid_type(value, name, at)
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class _Field:
    attr: str
    json: str
    hint: Any
    has_default: bool
    default: typing.Callable[[], Any]
    optional: bool


_FIELDS: dict[type, list[_Field]] = {}


def _fields(cls: type[Any]) -> list[_Field]:
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        hint = hints[f.name]
        if f.default is not dataclasses.MISSING:
            default, has_default = (lambda v=f.default: v), True
        elif f.default_factory is not dataclasses.MISSING:
            default, has_default = f.default_factory, True
        else:
            default, has_default = (lambda: None), False
        base = typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
        optional = typing.get_origin(base) in (typing.Union, types.UnionType) and type(
            None
        ) in typing.get_args(base)
        json_name = f.name[:-1] if f.name.endswith("_") else f.name
        out.append(_Field(f.name, json_name, hint, has_default, default, optional))
    _FIELDS[cls] = out
    return out


def _integer(value: Any, spec: _Int, at: Path) -> int:
    if type(value) is not int:
        raise invalid_type(value, spec.name, at)
    if not spec.low <= value <= spec.high:
        raise DecodeError(at, f"invalid value: integer `{value}`, expected {spec.name}")
    return value


def _enum(cls: type[enum.Enum], value: Any, at: Path) -> enum.Enum:
    names = [str(m.value) for m in cls]
    if type(value) is str:
        _check_text(value, at)
        for member in cls:
            if member.value == value:
                return member
        raise DecodeError(at, unknown("variant", value, names))
    if isinstance(value, JsonObject) and len(value) == 1:
        ((key, item),) = value
        _check_text(key, at)
        member = next((m for m in cls if m.value == key), None)
        if member is None:
            raise DecodeError(at, unknown("variant", key, names))
        if item is not None:
            raise invalid_type(item, "unit", at.key(key))
        return member
    raise invalid_type(value, f"enum {cls.__name__}", at)


def _array(value: Any, at: Path) -> list[Any]:
    if type(value) is not list:
        raise invalid_type(value, "a sequence", at)
    return value


def _plain(value: Any, at: Path) -> Any:
    """Parsed JSON as plain Python values (`dict`, `list`, ...), a repeated key's last value
    winning as in serde_json's `Value`."""
    _check_number(value, at)
    if isinstance(value, JsonObject):
        out = {}
        for key, item in value:
            out[_check_text(key, at)] = _plain(item, at.key(key))
        return out
    if type(value) is list:
        return [_plain(v, at.index(i)) for i, v in enumerate(value)]
    if type(value) is str:
        return _check_text(value, at)
    return value


def _check_number(value: Any, at: Path) -> None:
    # serde_json refuses these while parsing, wherever they are; Python's parser accepts
    # them, so they are refused on reading, at the same path.
    if isinstance(value, _NotJson):
        raise DecodeError(at, f"expected value (`{value.text}` is not JSON)")
    if type(value) is float and not math.isfinite(value):
        raise DecodeError(at, "number out of range")


def check_ignored(value: Any, at: Path) -> None:
    """Check a value a type ignores (serde still parses it, so it still refuses what is
    not JSON in it)."""
    _plain(value, at)


def _check_text(text: str, at: Path) -> str:
    # Python's parser turns "\ud800" into a lone surrogate; serde refuses it as not Unicode.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DecodeError(at, "lone surrogate in a \\u escape: not a Unicode string") from None
    return text


def unknown(what: str, got: str, expected: typing.Sequence[str]) -> str:
    """serde's wording for an unknown field or variant, listing what is accepted."""
    if not expected:
        return f"unknown {what} `{got}`, there are no {what}s"
    if len(expected) == 1:
        return f"unknown {what} `{got}`, expected `{expected[0]}`"
    listed = ", ".join(f"`{e}`" for e in expected)
    return f"unknown {what} `{got}`, expected one of {listed}"


def invalid_type(value: Any, expected: str, at: Path) -> DecodeError:
    """The error for a value of the wrong JSON type, worded as serde words it."""
    return DecodeError(at, f"invalid type: {_describe(value)}, expected {expected}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return f"boolean `{'true' if value else 'false'}`"
    if type(value) is int:
        return f"integer `{value}`"
    if type(value) is float:
        return f"floating point `{value!r}`"
    if type(value) is str:
        # Escape what cannot be encoded: the message crosses to the host as UTF-8.
        quoted = json.dumps(value, ensure_ascii=False)
        return "string " + quoted.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, JsonObject):
        return "map"
    if isinstance(value, _NotJson):
        return f"`{value.text}`"
    return "sequence"
