"""A test policy that reaches for what a Python program usually has - a clock, randomness,
stdout, files, the environment, sockets, exit - and reports in its reason what each gave,
so the host's tests can check that every one is either deterministic or denied.

The error kind picks the probe: `probe.report` answers with what it saw; `probe.socket`,
`probe.exit` and `probe.file` reach for a capability and let whatever happens happen;
`probe.count` says how many decisions this instance has made (a warm instance keeps counting,
a fresh one starts at 1); `probe.details` answers with the failure's topic, message id and
`source` extension, read from the host through the SDK's one `details` handle.
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass

import verdict_sdk
from verdict_sdk import Class, Failure, Verdict


@dataclass
class Config:
    """No settings."""


_decisions = 0


class WasiProbe:
    name = "wasi-probe"
    version = "0.1.0"
    description = "Reports what the interpreter's clock, randomness, files and environment gave."
    Config = Config

    def __init__(self, config: Config) -> None:
        pass

    def decide(self, failure: Failure) -> Verdict:
        global _decisions
        _decisions += 1
        kind = failure.kind
        if kind == "probe.count":
            return Verdict.retry_after(0).because(f"decisions={_decisions}")
        if kind == "probe.details":
            return Verdict.retry_after(0).because(
                f"{failure.topic} {failure.message_id} {failure.extension('source')}"
            )
        if kind == "probe.socket":
            import socket

            socket.create_connection(("127.0.0.1", 5432), timeout=1)
        if kind == "probe.exit":
            sys.exit(3)
        if kind == "probe.file":
            with open("/etc/hostname") as f:
                return Verdict.dead_letter(Class.UNKNOWN).because("read a file: " + f.read(20))
        print(f"probe deciding {kind}")
        try:
            with open("/etc/hostname") as f:
                files = "readable"
        except OSError as e:
            files = type(e).__name__
        wall = time.time_ns()
        mono = time.monotonic_ns()
        draws = [random.randrange(1_000_000) for _ in range(3)]
        urandom = os.urandom(4).hex()
        reason = (
            f"wall={wall} mono={mono} random={draws} urandom={urandom} "
            f"env={len(os.environ)} args={len(sys.argv)} files={files}"
        )
        return Verdict.retry_after(0).because(reason)


Decider = verdict_sdk.export(WasiProbe)
