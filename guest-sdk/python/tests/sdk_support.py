"""Test support: puts the SDK on the path (the tests run from a checkout, nothing installed)
and provides stand-ins for the bindings componentize-py generates, so the export glue runs
natively exactly as inside the component."""

from __future__ import annotations

import enum
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SDK_ROOT = Path(__file__).resolve().parents[1]
if str(SDK_ROOT) not in sys.path:
    sys.path.insert(0, str(SDK_ROOT))


# --- the shapes componentize-py 0.25 generates for wit/v0.1/policy.wit --------------------


class Level(enum.Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


class WitClass(enum.Enum):
    TRANSIENT = 0
    PERMANENT = 1
    POISON = 2
    EXHAUSTED = 3
    EXPIRED = 4
    REJECTED = 5
    UNKNOWN = 6


class WitSeverity(enum.Enum):
    NONE = 0
    INFO = 1
    WARNING = 2
    CRITICAL = 3


@dataclass
class ErrorInfo:
    kind: str
    retry_after_ms: int | None
    rejected: bool


@dataclass
class WitTopicStats:
    window_ms: int
    deliveries: int
    failures: int
    consecutive_failures: int


@dataclass
class WitFailure:
    attempt: int
    deferrals: int
    first_failed_at_ms: int
    now_ms: int
    deadline_ms: int | None
    error: ErrorInfo
    jitter_seed: int
    stats: WitTopicStats


@dataclass
class WitAttemptRecord:
    at_ms: int
    kind: str
    message: str


@dataclass
class WitHeader:
    name: str
    value: str


@dataclass
class Action_Retry:
    value: int


@dataclass
class Action_Delay:
    value: int


@dataclass
class Action_DeadLetter:
    pass


@dataclass
class Action_Discard:
    pass


@dataclass
class Label:
    key: str
    value: str


@dataclass
class WitVerdict:
    action: Any
    class_: WitClass
    reason: str
    alert: WitSeverity
    labels: list[Label]


@dataclass
class Info:
    name: str
    version: str
    description: str


@dataclass(frozen=True)
class Err(Exception):
    value: Any


class FakeHost:
    """The host side of one decision: its details, the calls the policy made, its log."""

    def __init__(self) -> None:
        self.logs: list[tuple[Level, str]] = []
        self.calls: dict[str, int] = {}
        self.details: dict[str, Any] = {
            "topic": "orders",
            "message_id": "m-1",
            "consumer_group": "billing",
            "error_message": "boom",
            "published_at_ms": 500,
            "content_type": "application/json",
            "payload_size": 11,
            "headers": [WitHeader("Trace-Id", "t-1")],
            "payload": b'{"a": [1]}\n',
            "history": [WitAttemptRecord(10, "db.timeout", "first")],
        }
        self.extensions = {"source": "nats"}

    def module(self) -> types.ModuleType:
        host = types.ModuleType("wit_world.imports.host")

        def getter(name: str) -> Any:
            def get() -> Any:
                self.calls[name] = self.calls.get(name, 0) + 1
                return self.details[name]

            return get

        for name in self.details:
            setattr(host, name, getter(name))

        def extension(key: str) -> str | None:
            self.calls["extension"] = self.calls.get("extension", 0) + 1
            return self.extensions.get(key)

        def log(level: Level, message: str) -> None:
            message.encode("utf-8")  # what lowering a WIT string demands
            self.logs.append((level, message))

        host.extension = extension
        host.log = log
        return host


def install_bindings(host: FakeHost) -> None:
    """Make `wit_world` and `componentize_py_types` importable, as componentize-py does."""
    types_mod = types.ModuleType("wit_world.imports.types")
    for name, value in {
        "Level": Level,
        "Class": WitClass,
        "Severity": WitSeverity,
        "Action_Retry": Action_Retry,
        "Action_Delay": Action_Delay,
        "Action_DeadLetter": Action_DeadLetter,
        "Action_Discard": Action_Discard,
        "Label": Label,
        "Verdict": WitVerdict,
        "Info": Info,
    }.items():
        setattr(types_mod, name, value)
    imports = types.ModuleType("wit_world.imports")
    imports.types = types_mod
    imports.host = host.module()
    world = types.ModuleType("wit_world")
    world.imports = imports
    cpt = types.ModuleType("componentize_py_types")
    cpt.Err = Err
    sys.modules.update(
        {
            "wit_world": world,
            "wit_world.imports": imports,
            "wit_world.imports.types": types_mod,
            "wit_world.imports.host": imports.host,
            "componentize_py_types": cpt,
        }
    )


def uninstall_bindings() -> None:
    for name in (
        "wit_world",
        "wit_world.imports",
        "wit_world.imports.types",
        "wit_world.imports.host",
        "componentize_py_types",
    ):
        sys.modules.pop(name, None)
    from verdict_sdk.log import _route

    _route(None)


def wit_failure(kind: str = "db.timeout", **overrides: Any) -> WitFailure:
    """A contract-shaped failure record, as the host passes it to `decide`."""
    fields: dict[str, Any] = {
        "attempt": 1,
        "deferrals": 0,
        "first_failed_at_ms": 100,
        "now_ms": 1_000,
        "deadline_ms": None,
        "error": ErrorInfo(kind, None, False),
        "jitter_seed": 42,
        "stats": WitTopicStats(60_000, 10, 3, 2),
    }
    fields.update(overrides)
    return WitFailure(**fields)
