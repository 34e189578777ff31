"""verdict-sdk: write Verdict retry and dead-letter policies in Python.

A policy looks at one failed delivery (`Failure`) and answers with a `Verdict`: retry after
a delay, delay without spending an attempt, pause the whole route, dead-letter, or discard, with a `Class`, a
reason, an alert `Severity` and labels. componentize-py compiles it into a sandboxed
WebAssembly component that the host calls for every failure on the topics routed to it.

Write one class (see `Policy`), export it with `Decider = export(MyPolicy)`, and unit-test
it natively with `instantiate` and `Failure(...)`: everything except the export glue is plain
Python. Delays (`Backoff`), kind globs (`kind_matches`) and the never-retry list are the
same algorithms as the Rust SDK's, bit for bit, so the same input gets the same verdict
whichever language a policy is written in.
"""

from .backoff import (
    Backoff,
    Exponential,
    Fixed,
    Immediate,
    Jitter,
    Ladder,
    Random,
    SplitMix64,
    jitter_seed,
)
from .config import I64, U32, U64, ConfigError, DecodeError, from_json, parse_config
from .export import export
from .failure import AttemptRecord, Failure, Header, TopicStats
from .kinds import NEVER_RETRY_KINDS, first_match, kind_matches, never_retry
from .log import Level, info, log, warn
from .policy import Policy, instantiate
from .verdict import Action, Class, DeadLetter, Delay, Discard, Pause, Retry, Severity, Verdict

__all__ = [
    "NEVER_RETRY_KINDS",
    "I64",
    "U32",
    "U64",
    "Action",
    "AttemptRecord",
    "Backoff",
    "Class",
    "ConfigError",
    "DeadLetter",
    "DecodeError",
    "Delay",
    "Discard",
    "Exponential",
    "Failure",
    "Fixed",
    "Header",
    "Immediate",
    "Jitter",
    "Ladder",
    "Level",
    "Pause",
    "Policy",
    "Random",
    "Retry",
    "Severity",
    "SplitMix64",
    "TopicStats",
    "Verdict",
    "export",
    "first_match",
    "from_json",
    "info",
    "instantiate",
    "jitter_seed",
    "kind_matches",
    "log",
    "never_retry",
    "parse_config",
    "warn",
]
