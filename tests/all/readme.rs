//! The book's embedding example (`docs/src/embedding.md`), compiled from the page itself by `build.rs` and run
//! against the `rules` policy: the code a reader copies is the code that is tested.

use verdict_runtime::Action;

include!(concat!(env!("OUT_DIR"), "/readme_embed.rs"));

#[test]
fn the_readmes_embedding_example_runs_and_decides() {
    let decision = readme_embed().expect("the book's example runs");
    // A second `db.timeout` on a topic configured for five attempts is retried.
    assert!(
        matches!(decision.verdict.action, Action::Retry { .. }),
        "{:?}",
        decision.verdict
    );
    assert!(decision.fallback.is_none(), "{:?}", decision.fallback);
}
