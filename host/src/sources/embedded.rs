//! The embedded source: messages published through the admin API into the SQLite store,
//! claimed with a lease, and each settlement one store transaction.
//!
//! Retries never block other messages: a scheduled message is simply not due, and the loop
//! keeps claiming what is. Deliveries run concurrently up to `[gateway] max_in_flight`.
//!
//! Settlements are group-committed: one writer takes every settlement waiting when it is
//! free and writes them in one transaction (one fsync), so under load the cost of the
//! store's durability is shared by a batch, and when idle a settlement is written at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use super::Settlement;
use crate::pipeline::{Pipeline, now_ms};
use crate::store::Store;

/// The source's name in metrics.
pub const NAME: &str = "embedded";

/// Deliver the store's due messages until `shutdown` turns true; then stop claiming and wait
/// (up to `grace`) for deliveries in flight. A delivery still running after that keeps its
/// lease and is delivered again after a restart.
pub async fn run(pipeline: Arc<Pipeline>, mut shutdown: watch::Receiver<bool>, grace: Duration) {
    let settings = pipeline.settings().clone();
    let store = pipeline.store().clone();
    let max = settings.max_in_flight.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let poll = Duration::from_millis(settings.poll_ms.max(1));
    let (committer, writer) = Committer::start(store.clone());
    while !*shutdown.borrow() {
        let free = slots.available_permits();
        if free == 0 {
            tokio::select! {
                permit = slots.clone().acquire_owned() => drop(permit),
                _ = shutdown.changed() => {}
            }
            continue;
        }
        let claimed = {
            let store = store.clone();
            let lease = settings.lease_ms;
            tokio::task::spawn_blocking(move || store.claim(now_ms(), free, lease)).await
        };
        let claimed = match claimed {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "claiming messages failed; retrying");
                tokio::time::sleep(poll).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "the claim task failed");
                continue;
            }
        };
        if claimed.is_empty() {
            tokio::select! {
                () = tokio::time::sleep(poll) => {}
                () = pipeline.woken().notified() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        for message in claimed {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            let (pipeline, committer) = (pipeline.clone(), committer.clone());
            tokio::spawn(async move {
                let received = Instant::now();
                let settlement = pipeline.process(&message.delivery).await;
                let handled = settlement.handled();
                match committer.settle(message.seq, settlement).await {
                    Ok(()) => pipeline
                        .metrics()
                        .handled(NAME, handled, received.elapsed()),
                    Err(e) => tracing::error!(
                        error = %e,
                        "recording a delivery's outcome failed; the message keeps its lease \
                         and is delivered again"
                    ),
                }
                drop(permit);
            });
        }
    }
    if !super::drained(&slots, max, grace).await {
        tracing::warn!(
            "deliveries still in flight at shutdown keep their lease and are delivered again on restart"
        );
    }
    // The writer ends once every delivery task has let go of its committer.
    drop(committer);
    if tokio::time::timeout(grace, writer).await.is_err() {
        tracing::warn!("the settlement writer did not finish in time");
    }
}

/// Settlements waiting for the writer.
type Pending = (i64, Settlement, oneshot::Sender<Result<(), String>>);

/// The most settlements one transaction takes.
const MAX_BATCH: usize = 256;

/// The sending side of the group-commit writer.
#[derive(Clone)]
struct Committer {
    queue: mpsc::UnboundedSender<Pending>,
}

impl Committer {
    /// Start the writer on a blocking thread; it runs until every `Committer` is dropped.
    fn start(store: Arc<Store>) -> (Committer, tokio::task::JoinHandle<()>) {
        let (queue, mut waiting) = mpsc::unbounded_channel::<Pending>();
        let writer = tokio::task::spawn_blocking(move || {
            while let Some(first) = waiting.blocking_recv() {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match waiting.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                write(&store, batch);
            }
        });
        (Committer { queue }, writer)
    }

    /// Write the settlement of message `seq`; resolves once it is durable.
    async fn settle(&self, seq: i64, settlement: Settlement) -> Result<(), String> {
        let (done, written) = oneshot::channel();
        self.queue
            .send((seq, settlement, done))
            .map_err(|_| "the settlement writer has stopped".to_string())?;
        written
            .await
            .map_err(|_| "the settlement writer stopped before writing".to_string())?
    }
}

/// One transaction for the batch; each sender hears its own outcome.
fn write(store: &Store, batch: Vec<Pending>) {
    let items: Vec<(i64, &Settlement)> = batch.iter().map(|(seq, s, _)| (*seq, s)).collect();
    match store.settle(&items, now_ms()) {
        Ok(results) => {
            drop(items);
            for ((_, _, done), result) in batch.into_iter().zip(results) {
                let _ = done.send(result.map_err(|e| e.to_string()));
            }
        }
        Err(e) => {
            drop(items);
            let e = e.to_string();
            for (_, _, done) in batch {
                let _ = done.send(Err(e.clone()));
            }
        }
    }
}
