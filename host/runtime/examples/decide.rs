//! Decide one failure with one policy, as a consumer embedding Verdict would.
//!
//! ```sh
//! cargo run -q --bin verdict -- build policies/rules
//! cargo run -p verdict-runtime --example decide -- \
//!     target/wasm32-unknown-unknown/release/rules.component.wasm \
//!     '{"attempt": 2, "error": {"kind": "db.timeout"}}'
//! ```

use std::process::ExitCode;

use verdict_runtime::{FailureSpec, Host, Limits, TopicSettings};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [policy, failure] = args.as_slice() else {
        eprintln!("usage: decide <policy.component.wasm> '<failure JSON>'");
        return ExitCode::from(2);
    };
    match decide(policy, failure) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("decide: {e}");
            ExitCode::FAILURE
        }
    }
}

fn decide(policy: &str, failure: &str) -> Result<String, Box<dyn std::error::Error>> {
    let host = Host::new(&Limits::new())?;
    let policy = host.load_file(policy.as_ref())?;
    let decider = policy.configure("{}", TopicSettings::default())?;
    let failure = FailureSpec::from_json(failure)?.into_failure();
    let decision = decider.decide(&failure);
    Ok(serde_json::to_string(&decision)?)
}
