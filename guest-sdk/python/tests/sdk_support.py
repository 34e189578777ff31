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


# --- the shapes componentize-py 0.25 generates for wit/policy.wit ---------------------------


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
class Action_Pause:
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
    reason: str | None
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


def failure_details(topic: str = "orders", message_id: str = "m-1") -> dict[str, Any]:
    """What the host holds for one failure of a call, by `details` method name."""
    return {
        "topic": topic,
        "message_id": message_id,
        "consumer_group": "billing",
        "error_message": "boom",
        "published_at_ms": 500,
        "first_failed_at_ms": 100,
        "content_type": "application/json",
        "payload_size": 11,
        "headers": [WitHeader("Trace-Id", "t-1")],
        "payload": b'{"a": [1]}\n',
        "history": [WitAttemptRecord(10, "db.timeout", "first")],
    }


# What a `details` method answers for a position past the call's failures.
_EMPTY: dict[str, Any] = {
    "topic": "",
    "message_id": "",
    "consumer_group": "",
    "error_message": "",
    "published_at_ms": None,
    "first_failed_at_ms": 0,
    "content_type": None,
    "payload_size": 0,
    "headers": [],
    "payload": b"",
    "history": [],
}


class FakeHost:
    """The host side of a call: the details of its failures (one per position), the calls
    the policy made, its log."""

    def __init__(self) -> None:
        self.logs: list[tuple[Level, str]] = []
        self.calls: dict[str, int] = {}
        # Every `details` method call, in order, with the position it named.
        self.asked: list[tuple[str, int]] = []
        self.failures: list[dict[str, Any]] = [failure_details()]
        self.extensions: list[dict[str, str]] = [{"source": "nats"}]
        # `details` handles the policy made (a policy needs one, made on first use).
        self.handles_made = 0
        self._module: types.ModuleType | None = None

    def _answer(self, name: str, position: int) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.asked.append((name, position))
        if position < len(self.failures):
            return self.failures[position][name]
        return _EMPTY[name]

    def module(self) -> types.ModuleType:
        """The `wit_world.imports.host` module (made once)."""
        if self._module is not None:
            return self._module
        host = types.ModuleType("wit_world.imports.host")
        fake = self

        def method(name: str) -> Any:
            def ask(self: Any, failure: int) -> Any:
                return fake._answer(name, failure)

            return ask

        def extension(self: Any, failure: int, key: str) -> str | None:
            fake.calls["extension"] = fake.calls.get("extension", 0) + 1
            fake.asked.append(("extension", failure))
            if failure < len(fake.extensions):
                return fake.extensions[failure].get(key)
            return None

        # The resource class componentize-py generates: one method per `details` function,
        # each naming the failure by its position in the call.
        def made(self: Any) -> None:
            fake.handles_made += 1

        methods: dict[str, Any] = {name: method(name) for name in _EMPTY}
        methods["extension"] = extension
        methods["__init__"] = made
        host.Details = type("Details", (), methods)

        def log(level: Level, message: str) -> None:
            message.encode("utf-8")  # what lowering a WIT string demands
            self.logs.append((level, message))

        host.log = log
        self._module = host
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
        "Action_Pause": Action_Pause,
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
        "now_ms": 1_000,
        "deadline_ms": None,
        "error": ErrorInfo(kind, None, False),
        "jitter_seed": 42,
        "stats": WitTopicStats(60_000, 10, 3, 2),
    }
    fields.update(overrides)
    return WitFailure(**fields)
