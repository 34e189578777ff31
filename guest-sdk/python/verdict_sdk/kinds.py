"""Matching error kinds against patterns.

Kinds are dotted, machine-readable names (`db.timeout`, `http.503`, `json.parse`). Patterns
are globs where `*` matches any run of characters (dots included) and `?` matches one
character: `db.*`, `http.5*`, `*.timeout`, `*`.

Matching works on UTF-8 bytes, exactly as `verdict_types::kind_matches` does, so `?` matches
one byte: a Python policy and a Rust one classify every kind, ASCII or not, the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

from .verdict import Class, Severity, Verdict

__all__ = ["NEVER_RETRY_KINDS", "first_match", "kind_matches", "never_retry"]


def _utf8(text: str) -> bytes:
    # `surrogatepass` keeps a stray surrogate from a native test from raising: it cannot
    # come from the host, whose strings are valid Unicode.
    return text.encode("utf-8", "surrogatepass")


def kind_matches(pattern: str, kind: str) -> bool:
    """True when `pattern` matches the whole `kind`. Case-sensitive: kinds are identifiers."""
    p, k = _utf8(pattern), _utf8(kind)
    # Iterative glob with single-star backtracking, as in Rust: linear in practice and no
    # recursion, so a hostile pattern in a config cannot exhaust the stack.
    pi = ki = 0
    star_p = star_k = -1
    star, question = ord("*"), ord("?")
    while ki < len(k):
        if pi < len(p) and p[pi] == star:
            star_p, star_k = pi, ki
            pi += 1
        elif pi < len(p) and (p[pi] == question or p[pi] == k[ki]):
            pi += 1
            ki += 1
        elif star_p >= 0:
            star_k += 1
            pi, ki = star_p + 1, star_k
        else:
            return False
    return all(c == star for c in p[pi:])


def first_match(patterns: Iterable[str], kind: str) -> str | None:
    """The first pattern in `patterns` that matches `kind`."""
    for pattern in patterns:
        if kind_matches(pattern, kind):
            return pattern
    return None


NEVER_RETRY_KINDS: tuple[str, ...] = ("json.*", "schema.*", "format.*", "auth.*")
"""Error kinds that never succeed on a retry: a payload that does not parse (`json.*`), a
schema or format the consumer does not know (`schema.*`, `format.*`) and a request the
consumer refuses to authorise (`auth.*`). The same list the admission gate checks by
default, so what a policy starts from is what the gate expects."""

_AUTH = Verdict.dead_letter(Class.PERMANENT).alert(Severity.CRITICAL).because(
    "the consumer refuses it: credentials or permissions need fixing"
)
_POISON = Verdict.dead_letter(Class.POISON).because("the message cannot be read as it is")


def never_retry(kind: str) -> Verdict | None:
    """The dead-letter verdict for a kind in `NEVER_RETRY_KINDS`, `None` for any other kind:
    poison for a payload, schema or format error, permanent with a critical alert (someone
    has to fix credentials or permissions) for an `auth.*` refusal."""
    pattern = first_match(NEVER_RETRY_KINDS, kind)
    if pattern is None:
        return None
    return _AUTH if pattern == "auth.*" else _POISON
