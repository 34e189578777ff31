//! The hostile producer at work: a batch of the plan published many at once, as real
//! producers keep many publishes in flight.

use anyhow::{Context, Result};
use verdict_cli::client::AdminClient;

use crate::plan::Planned;
use crate::sources::{Published, Source};

/// Publish `batch`, many at once; what each came to, in `batch`'s order.
pub fn publish_batch(
    runtime: &tokio::runtime::Runtime,
    source: &Source,
    batch: &[Planned],
    admin: &AdminClient,
) -> Result<Vec<Published>> {
    use futures_util::StreamExt as _;
    let publish = |m: &Planned| -> Result<Published> {
        runtime
            .block_on(source.publish(m, admin))
            .with_context(|| format!("publishing message {}", m.key))
    };
    if source.name.is_store() {
        // The admin API is plain blocking HTTP: a few threads keep it busy.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let out: Vec<std::sync::Mutex<Option<Result<Published>>>> =
            batch.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|scope| {
            for _ in 0..EMBEDDED_PUBLISHERS {
                scope.spawn(|| {
                    loop {
                        let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(m) = batch.get(at) else { break };
                        let sent = publish(m);
                        *out[at]
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sent);
                    }
                });
            }
        });
        return out
            .into_iter()
            .map(|slot| {
                slot.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .unwrap_or_else(|| Err(anyhow::anyhow!("a publisher thread died")))
            })
            .collect();
    }
    let results: Vec<(usize, Result<Published>)> = runtime.block_on(
        futures_util::stream::iter(batch.iter().enumerate().map(|(at, m)| async move {
            let sent = source
                .publish(m, admin)
                .await
                .with_context(|| format!("publishing message {}", m.key));
            (at, sent)
        }))
        .buffer_unordered(BROKER_PUBLISHES_IN_FLIGHT)
        .collect(),
    );
    let mut results = results;
    results.sort_by_key(|(at, _)| *at);
    results.into_iter().map(|(_, sent)| sent).collect()
}

/// Threads publishing to the embedded store's admin API.
const EMBEDDED_PUBLISHERS: usize = 4;
/// Publishes awaiting their broker's confirmation at once.
const BROKER_PUBLISHES_IN_FLIGHT: usize = 64;
