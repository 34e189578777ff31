"""The one class a policy author writes.

A policy is a class with:

* `name`, `version`, `description`: what `describe` reports (Rust takes them from
  `Cargo.toml`; a Python module has no such metadata inside the component, so the class
  states them; keep them equal to `pyproject.toml`);
* `Config`: a dataclass for the operator's per-topic configuration, read from JSON by
  `parse_config` (unknown fields refused, omitted fields defaulted, errors naming the field);
* `__init__(self, config)`: check what types cannot (ranges, consistency) and raise
  `ConfigError` naming the field to refuse the config;
* `decide(self, failure) -> Verdict`: a pure function of the failure, with no clock or
  randomness of its own (the failure carries both).

Export it with `Decider = verdict_sdk.export(MyPolicy)` and test it natively with
`instantiate`.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from .config import parse_config
from .failure import Failure
from .verdict import Verdict

__all__ = ["Policy", "instantiate"]

P = TypeVar("P")


class Policy:
    """Base class documenting the shape `export` expects; subclassing it is optional."""

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str]
    Config: ClassVar[type[Any]]

    def __init__(self, config: Any) -> None:
        """Build the policy from its parsed config; raise `ConfigError` to refuse it."""

    def decide(self, failure: Failure) -> Verdict:
        """Decide what happens to a failed delivery."""
        raise NotImplementedError(f"{type(self).__name__} must define decide(self, failure)")


def instantiate(policy: type[P], config_json: str) -> P:
    """Parse `config_json` and build the policy, exactly as the host's `init` call does inside
    the component. Raises `ConfigError` when the config is refused. Use it in native tests."""
    return policy(parse_config(policy.Config, config_json))  # type: ignore[attr-defined, call-arg]
