"""The glue between the component model and a policy class: what Rust's `export_policy!`
does, for componentize-py.

componentize-py builds the component by importing the policy module ahead of time and
instantiating `Decider`, the class named after the exported interface
(`verdict:policy/decider`), whose `init`, `describe`, `decide` and `decide_batch` methods are
the exports. It makes one object per exported function, so the configured policy is kept
beside the class, not on the object.
`export(MyPolicy)` makes that class. It imports the generated bindings (`wit_world`, plus
componentize-py's `componentize_py_types`) only when it is instantiated, which happens while
componentize-py pre-initialises the module; natively nothing instantiates it, so the SDK
imports and unit-tests without any Wasm (tests can stand in fake bindings).

As in the Rust SDK:

* `init` parses the config and builds the policy; a refused config (a `ConfigError` from
  parsing or from the policy's `__init__`) is returned as the result's error, and any other
  exception is a bug: it is logged as `panic: ...` at error level through the host, then
  traps, so the host reports the fault with its message;
* `decide` lifts the record into a `Failure` whose bulky parts come from the host on first
  use, through the instance's one `details` resource (made the first time a policy reads
  such a part, then kept; the failure's position is 0), decides, and lowers the verdict; an
  exception is logged as `panic: ...` and traps, and the host applies the topic's fallback
  verdict;
* `decide_batch` decides each failure of the list as `decide` would, in order, its bulky
  parts asked of `details` by its position in the list; an exception in any of them traps
  the whole call as in `decide` (the host then decides the batch again one failure at a
  time, so only the faulty failure gets the fallback);
* a verdict without a reason is lowered as none, as the Rust SDK lowers an empty one;
* logging goes to the host's `log` import from then on.
"""

from __future__ import annotations

import random
from types import SimpleNamespace, TracebackType
from typing import Any

from .config import ConfigError, parse_config
from .failure import AttemptRecord, Failure, Header, TopicStats
from .log import Level, _route
from .log import log as _write
from .verdict import Class, DeadLetter, Delay, Discard, Pause, Retry, Severity, Verdict

__all__ = ["export"]


def export(policy: type[Any]) -> type[Any]:
    """Make the component's `decider` export from a policy class.

    Use it once, at the top level of the policy's module, under the name componentize-py
    looks for::

        Decider = verdict_sdk.export(MyPolicy)

    The class is checked here, at import, so a policy missing its name or `decide` fails
    the build instead of the first decision.
    """
    _check_policy(policy)
    # The configured policy, shared by every `Decider` object: componentize-py makes one per
    # exported function (one for `init`, others for `decide` and `decide_batch`), so it
    # cannot live on `self`.
    # This is the Rust macro's `thread_local! POLICY`.
    configured: list[Any] = [None]
    # The instance's one `details` handle, made on first use (never while componentize-py
    # pre-initialises the module: a handle cannot outlive that snapshot) and kept.
    handle: list[Any] = [None]

    def details() -> Any:
        if handle[0] is None:
            handle[0] = _bindings().host.Details()
        return handle[0]

    class Decider:
        """The `verdict:policy/decider` export of the policy (made by `verdict_sdk.export`)."""

        def __init__(self) -> None:
            self._wit = _bindings()
            host, levels = self._wit.host, self._wit.types.Level
            _route(lambda level, message: host.log(levels[level.name], _utf8_safe(message)))

        @property
        def _policy(self) -> Any:
            return configured[0]

        def init(self, config: str) -> None:
            try:
                built = policy(parse_config(policy.Config, config))
            except ConfigError as refused:
                raise self._wit.Err(_utf8_safe(str(refused))) from None
            except BaseException as error:
                _panic(error)
                raise
            configured[0] = built

        def describe(self) -> Any:
            return self._wit.types.Info(
                name=policy.name, version=policy.version, description=policy.description
            )

        def decide(self, failure: Any) -> Any:
            try:
                return self._decide(self._configured("decide"), failure, 0)
            except BaseException as error:
                _panic(error)
                raise

        def decide_batch(self, failures: list[Any]) -> list[Any]:
            try:
                built = self._configured("decide-batch")
                return [self._decide(built, f, i) for i, f in enumerate(failures)]
            except BaseException as error:
                _panic(error)
                raise

        def _configured(self, call: str) -> Any:
            built = self._policy
            if built is None:
                raise RuntimeError(f"{call} called before a successful init")
            return built

        def _decide(self, built: Any, failure: Any, position: int) -> Any:
            # `random` keeps its state in the instance, which serves many decisions (and a
            # batch many failures): reseeded from each failure, it draws the same numbers for
            # the same failure, batched or not.
            random.seed(failure.jitter_seed)
            verdict = built.decide(_lift(failure, _HostDetails(details, position)))
            if not isinstance(verdict, Verdict):
                raise TypeError(
                    f"{policy.__name__}.decide returned {type(verdict).__name__}, not a Verdict"
                )
            return _lower(verdict, self._wit.types)

    Decider.__module__ = policy.__module__
    Decider.__qualname__ = "Decider"
    return Decider


def _check_policy(policy: type[Any]) -> None:
    if not isinstance(policy, type):
        raise TypeError(f"export() takes the policy class, got {policy!r}")
    for attr in ("name", "version", "description"):
        if not isinstance(getattr(policy, attr, None), str):
            raise TypeError(f"{policy.__name__}.{attr} must be a str (what describe() reports)")
    config = getattr(policy, "Config", None)
    if not isinstance(config, type):
        raise TypeError(f"{policy.__name__}.Config must be the config class (a dataclass)")
    if not callable(getattr(policy, "decide", None)):
        raise TypeError(f"{policy.__name__} must define decide(self, failure)")


def _bindings() -> SimpleNamespace:
    # Imported here, not at the top: only componentize-py generates these modules, and only
    # its pre-initialisation (or a test's fakes) instantiates the export.
    from componentize_py_types import Err  # type: ignore[import-not-found]
    from wit_world.imports import host, types  # type: ignore[import-not-found]

    return SimpleNamespace(host=host, types=types, Err=Err)


class _HostDetails:
    """The lazily fetched parts of one failure of the running call, in the SDK's own types:
    the instance's `details` resource (`handle()`, the export's `details`, makes it on first
    use), asked about the
    failure at `position` (0 in `decide`, its index in `decide_batch`). The host answers
    about the call in progress, so a `Failure` means nothing once its call returns."""

    __slots__ = ("_handle", "_position")

    def __init__(self, handle: Any, position: int) -> None:
        self._handle = handle
        self._position = position

    @property
    def _details(self) -> Any:
        return self._handle()

    def topic(self) -> str:
        return self._details.topic(self._position)

    def message_id(self) -> str:
        return self._details.message_id(self._position)

    def consumer_group(self) -> str:
        return self._details.consumer_group(self._position)

    def error_message(self) -> str:
        return self._details.error_message(self._position)

    def content_type(self) -> str | None:
        return self._details.content_type(self._position)

    def published_at_ms(self) -> int | None:
        return self._details.published_at_ms(self._position)

    def first_failed_at_ms(self) -> int:
        return self._details.first_failed_at_ms(self._position)

    def payload_size(self) -> int:
        return self._details.payload_size(self._position)

    def headers(self) -> tuple[Header, ...]:
        return tuple(Header(h.name, h.value) for h in self._details.headers(self._position))

    def payload(self) -> bytes:
        return bytes(self._details.payload(self._position))

    def history(self) -> tuple[AttemptRecord, ...]:
        return tuple(
            AttemptRecord(a.at_ms, a.kind, a.message)
            for a in self._details.history(self._position)
        )

    def extension(self, key: str) -> str | None:
        return self._details.extension(self._position, key)


def _lift(f: Any, host: _HostDetails) -> Failure:
    s = f.stats
    return Failure(
        f.error.kind,
        retry_after_ms=f.error.retry_after_ms,
        rejected=f.error.rejected,
        attempt=f.attempt,
        deferrals=f.deferrals,
        now_ms=f.now_ms,
        deadline_ms=f.deadline_ms,
        jitter_seed=f.jitter_seed,
        stats=TopicStats(s.window_ms, s.deliveries, s.failures, s.consecutive_failures),
        host=host,
    )


def _lower(v: Verdict, wit: Any) -> Any:
    match v.action:
        case Retry(ms):
            action = wit.Action_Retry(ms)
        case Delay(ms):
            action = wit.Action_Delay(ms)
        case Pause(ms):
            action = wit.Action_Pause(ms)
        case DeadLetter():
            action = wit.Action_DeadLetter()
        case Discard():
            action = wit.Action_Discard()
        case other:
            raise TypeError(f"a verdict's action must be Retry, Delay, Pause, DeadLetter or Discard, got {other!r}")
    if not isinstance(v.class_, Class) or not isinstance(v.severity, Severity):
        raise TypeError(f"a verdict needs a Class and a Severity, got {v.class_!r}, {v.severity!r}")
    return wit.Verdict(
        action=action,
        class_=wit.Class[v.class_.name],
        # Contract 0.2 lifts a reason only when there is one: an empty reason crosses as
        # none, as the Rust SDK lowers it.
        reason=_unicode(v.reason) if v.reason else None,
        alert=wit.Severity[v.severity.name],
        labels=[wit.Label(key=_unicode(k), value=_unicode(val)) for k, val in v.labels],
    )


def _unicode(text: str) -> str:
    # A lone surrogate cannot be lowered to a WIT string; failing here, inside the guarded
    # call, turns the runtime's bare trap into a logged panic that names the problem.
    text.encode("utf-8")
    return text


def _panic(error: BaseException) -> None:
    """Log an escaping exception the way a Rust panic hook does (`panic: ...` at error
    level, which the host keeps as the fault's message). Source lines are left out: reading
    them would touch a file system the component does not have."""
    try:
        text = str(error)
    except Exception:
        text = "(unprintable)"
    lines = [f"panic: {type(error).__qualname__}: {text}"]
    tb: TracebackType | None = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}')
        tb = tb.tb_next
    try:
        _write(Level.ERROR, "\n".join(lines))
    except Exception:
        # The log line only explains the trap that follows; failing to write it must not
        # replace the policy's own exception.
        pass


def _utf8_safe(text: str) -> str:
    # A lone surrogate cannot cross to the host as a string; escape it rather than trap.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
