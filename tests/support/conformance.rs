//! A loaded policy held to a vector file, or to the property checks, with the harness's
//! human report as the failure: what both the per-policy conformance trials and the
//! cross-language trials run.

use std::path::Path;
use std::sync::Arc;

use verdict_registry::conformance::{PropertyOptions, Report, Suite, check_properties, run_suites};
use verdict_runtime::{Policy, TopicSettings};

/// Every case of the vector file at `file` passes (and there is at least one).
pub fn vector_file(policy: &Arc<Policy>, file: &Path) -> Result<(), String> {
    let suite = Suite::load(file).map_err(|e| e.to_string())?;
    let report = Report::new(
        (**policy.provenance()).clone(),
        run_suites(policy, &[suite]),
        vec![],
    );
    if report.failed > 0 || report.passed == 0 {
        return Err(report.human());
    }
    Ok(())
}

/// Every property holds with an empty config and the default settings.
pub fn properties(policy: &Arc<Policy>) -> Result<(), String> {
    let results = check_properties(
        policy,
        "{}",
        &TopicSettings::default(),
        &PropertyOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let report = Report::new((**policy.provenance()).clone(), vec![], results);
    if report.failed > 0 {
        return Err(report.human());
    }
    Ok(())
}
