//! Rendering results: human text, stable JSON, JUnit XML.

use std::fmt::Write as _;

use serde::Serialize;

use super::properties::PropertyResult;
use super::runner::{SuiteResult, totals};
use verdict_runtime::Provenance;

/// Everything one `verdict test` run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Format version of this JSON (bumped on any incompatible change).
    pub format: u32,
    /// The policy tested.
    pub policy: Provenance,
    /// Vector suites.
    pub suites: Vec<SuiteResult>,
    /// Property checks (empty when not run).
    pub properties: Vec<PropertyResult>,
    /// Cases and properties that passed.
    pub passed: usize,
    /// Cases and properties that failed.
    pub failed: usize,
}

impl Report {
    /// Assemble a report and count it.
    pub fn new(
        policy: Provenance,
        suites: Vec<SuiteResult>,
        properties: Vec<PropertyResult>,
    ) -> Self {
        let (mut passed, mut failed) = totals(&suites);
        for p in &properties {
            if p.passed { passed += 1 } else { failed += 1 }
        }
        Report {
            format: 1,
            policy,
            suites,
            properties,
            passed,
            failed,
        }
    }

    /// Human-readable: one line per case, expected against got for failures.
    pub fn human(&self) -> String {
        let mut out = String::new();
        let p = &self.policy;
        let _ = writeln!(
            out,
            "policy {} {} (sha256 {})",
            p.name,
            p.version,
            &p.sha256[..12.min(p.sha256.len())]
        );
        for suite in &self.suites {
            let _ = writeln!(out, "\nsuite {} ({})", suite.suite, suite.file);
            for case in &suite.cases {
                let _ = writeln!(
                    out,
                    "  {} {}",
                    if case.passed { "ok  " } else { "FAIL" },
                    case.name
                );
                for m in &case.mismatches {
                    let _ = writeln!(
                        out,
                        "         {}: expected {}, got {}",
                        m.field, m.expected, m.got
                    );
                }
            }
        }
        if !self.properties.is_empty() {
            let _ = writeln!(out, "\nproperties");
            for prop in &self.properties {
                let _ = writeln!(
                    out,
                    "  {} {} ({} inputs)",
                    if prop.passed { "ok  " } else { "FAIL" },
                    prop.name,
                    prop.inputs
                );
                if let Some(c) = &prop.counterexample {
                    let _ = writeln!(
                        out,
                        "         {}\n         smallest input: {}",
                        c.message, c.failure
                    );
                }
            }
        }
        let _ = writeln!(out, "\n{} passed, {} failed", self.passed, self.failed);
        out
    }

    /// JUnit XML: one `testsuite` per vector file (and one for properties).
    pub fn junit(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites name=\"verdict test {}\" tests=\"{}\" failures=\"{}\">",
            xml(&self.policy.name),
            self.passed + self.failed,
            self.failed
        );
        for suite in &self.suites {
            let failures = suite.cases.iter().filter(|c| !c.passed).count();
            let _ = writeln!(
                out,
                "  <testsuite name=\"{}\" file=\"{}\" tests=\"{}\" failures=\"{}\">",
                xml(&suite.suite),
                xml(&suite.file),
                suite.cases.len(),
                failures
            );
            for case in &suite.cases {
                let _ = write!(
                    out,
                    "    <testcase classname=\"{}\" name=\"{}\"",
                    xml(&suite.suite),
                    xml(&case.name)
                );
                if case.passed {
                    out.push_str("/>\n");
                    continue;
                }
                let detail: Vec<String> = case
                    .mismatches
                    .iter()
                    .map(|m| format!("{}: expected {}, got {}", m.field, m.expected, m.got))
                    .collect();
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    xml(detail.first().map_or("", String::as_str)),
                    xml(&detail.join("\n"))
                );
            }
            out.push_str("  </testsuite>\n");
        }
        if !self.properties.is_empty() {
            let failures = self.properties.iter().filter(|p| !p.passed).count();
            let _ = writeln!(
                out,
                "  <testsuite name=\"properties\" tests=\"{}\" failures=\"{}\">",
                self.properties.len(),
                failures
            );
            for prop in &self.properties {
                let _ = write!(
                    out,
                    "    <testcase classname=\"properties\" name=\"{}\"",
                    xml(&prop.name)
                );
                match &prop.counterexample {
                    None => out.push_str("/>\n"),
                    Some(c) => {
                        let _ = writeln!(
                            out,
                            ">\n      <failure message=\"{}\">smallest input: {}</failure>\n    </testcase>",
                            xml(&c.message),
                            xml(&c.failure)
                        );
                    }
                }
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }
}

/// Escape text for XML attributes and content; drop characters XML 1.0 forbids.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escapes_markup_and_control_characters() {
        assert_eq!(
            xml("a<b>&\"c'\u{1}\nd"),
            "a&lt;b&gt;&amp;&quot;c&apos;&#10;d"
        );
    }
}
