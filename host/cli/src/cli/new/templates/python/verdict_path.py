"""Puts the policy and the SDK on the module path for the tests, as `verdict build` does
for componentize-py: the project's directory and the directories `[tool.verdict] path`
in pyproject.toml names."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]

with (PROJECT / "pyproject.toml").open("rb") as manifest:
    _paths = tomllib.load(manifest).get("tool", {}).get("verdict", {}).get("path", [])

for _path in (PROJECT, *(PROJECT / p for p in _paths)):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
