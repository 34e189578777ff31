//! Measurement hooks: what a harness such as `verdict bench` attaches to a pipeline to
//! measure more exactly than production needs (a decision's thread CPU time, exact
//! percentiles). Production has the Prometheus histograms; with no observer attached, each
//! hook point costs the delivery path one atomic load.

use std::time::Duration;

use crate::model::Handled;

/// Hooks on a pipeline's delivery path, attached with
/// [`PipelineMetrics::observe`](super::PipelineMetrics::observe).
pub trait Observer: Send + Sync {
    /// Run `decide` - one policy decision - on the calling thread, measuring it as the
    /// observer likes. It must call `decide` exactly once.
    fn decision(&self, decide: &mut dyn FnMut());

    /// A source applied a delivery's settlement `took` after receiving it.
    fn handled(&self, outcome: Handled, took: Duration);
}
