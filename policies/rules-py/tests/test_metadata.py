"""`describe()` must say what the Rust policy says, and pyproject.toml must agree."""

from __future__ import annotations

import tomllib
import unittest

from rules_support import POLICY_ROOT, RUST_POLICY
from rules_policy import Rules


class MetadataTest(unittest.TestCase):
    def test_name_version_and_description_match_the_rust_policy(self) -> None:
        cargo = tomllib.loads((RUST_POLICY / "Cargo.toml").read_text(encoding="utf-8"))["package"]
        self.assertEqual(Rules.name, "rules")
        self.assertEqual(Rules.version, cargo["version"])
        self.assertEqual(Rules.description, cargo["description"])

    def test_pyproject_agrees_and_names_the_module(self) -> None:
        project = tomllib.loads((POLICY_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
        self.assertEqual(project["project"]["version"], Rules.version)
        self.assertEqual(project["project"]["description"], Rules.description)
        self.assertEqual(project["tool"]["verdict"]["module"], Rules.__module__)


if __name__ == "__main__":
    unittest.main()
