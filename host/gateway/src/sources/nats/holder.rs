//! Which gateway delivers a NATS route ordered by key: one at a time, the holder of a
//! record in the history bucket (`<stream>.holder.<durable>`). JetStream's pull consumers
//! hand a route's messages to every gateway that asks; a key's messages must go through
//! one, so the others stand by.
//!
//! No clock is compared between gateways (their clocks may differ): the holder rewrites
//! the record every [`RENEW`], each write conditional on the revision it last wrote, and a
//! gateway standing by takes the record over - a write conditional on the revision it saw -
//! only once it has seen that revision unchanged for [`STALE_AFTER`] on its own clock. The
//! holder counts itself the holder for [`HELD_FOR`] (shorter) after it sent its last
//! successful write, so it has stopped delivering before anyone can take over - as long as
//! the two clocks run at the same rate, whatever their offsets.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::kv;
use tokio::time::Instant;

use super::super::AbortOnDrop;

/// How often the holder writes its record again.
pub(super) const RENEW: Duration = Duration::from_secs(2);

/// How long a record must stay unchanged before a gateway standing by takes it over.
pub(super) const STALE_AFTER: Duration = Duration::from_secs(10);

/// How long the holder counts itself the holder after sending a write that succeeded: the
/// margin to [`STALE_AFTER`] covers the write's round trip and the other's poll.
const HELD_FOR: Duration = Duration::from_secs(7);

/// A gateway's claim on one route, standing by or holding.
pub(super) struct Holder {
    bucket: kv::Store,
    key: String,
    /// This process's value in the record: its instance name and a nonce, so a gateway
    /// started again after a crash does not take its earlier life's record for its own.
    me: String,
    /// The other's record as last seen standing by, and since when.
    seen: Option<(u64, Instant)>,
}

/// What the record holds now, as one look at it found it.
enum Record {
    Free,
    Mine(u64),
    Theirs(u64),
}

impl Holder {
    pub(super) fn new(bucket: kv::Store, key: String, instance: &str) -> Holder {
        Holder {
            bucket,
            key,
            me: format!("{instance} {:016x}", process_nonce()),
            seen: None,
        }
    }

    async fn look(&self) -> anyhow::Result<Record> {
        let entry = self.bucket.entry(self.key.clone()).await?;
        Ok(match entry {
            Some(e) if e.operation == kv::Operation::Put && e.value == self.me.as_bytes() => {
                Record::Mine(e.revision)
            }
            Some(e) if e.operation == kv::Operation::Put => Record::Theirs(e.revision),
            _ => Record::Free,
        })
    }

    /// Take the route if nobody holds it or its holder has stopped writing: `None` while
    /// another gateway holds it (look again after a while).
    pub(super) async fn try_take(&mut self) -> anyhow::Result<Option<Holding>> {
        let sent = Instant::now();
        let revision = match self.look().await? {
            Record::Free => match self.bucket.create(&self.key, self.me.clone().into()).await {
                Ok(revision) => revision,
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => return Ok(None),
                Err(e) => return Err(e.into()),
            },
            Record::Mine(revision) => match self.write(revision).await {
                Ok(revision) => revision,
                // Written meanwhile (this process's earlier hold, still letting go).
                Err(e) if wrong_revision(&e) => return Ok(None),
                Err(e) => return Err(e),
            },
            Record::Theirs(revision) => {
                let now = Instant::now();
                match self.seen {
                    Some((seen, since)) if seen == revision => {
                        if now.duration_since(since) < STALE_AFTER {
                            return Ok(None);
                        }
                    }
                    _ => {
                        self.seen = Some((revision, now));
                        return Ok(None);
                    }
                }
                match self.write(revision).await {
                    Ok(revision) => revision,
                    Err(e) if wrong_revision(&e) => {
                        // The holder wrote again meanwhile: it is alive.
                        self.seen = None;
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        self.seen = None;
        Ok(Some(Holding::start(
            self.bucket.clone(),
            self.key.clone(),
            self.me.clone(),
            revision,
            sent,
        )))
    }

    async fn write(&self, revision: u64) -> anyhow::Result<u64> {
        Ok(self
            .bucket
            .update(&self.key, self.me.clone().into(), revision)
            .await?)
    }
}

/// This process's nonce: the same for every session, so a session started again finds the
/// record its earlier session left (a delete that did not go through) its own, and a
/// process started again after a crash finds it someone else's.
fn process_nonce() -> u64 {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(|| {
        let mut nonce = [0u8; 8];
        if verdict_runtime::fsutil::random_bytes(&mut nonce).is_err() {
            // Unique enough without the random source too: the clock and the process id.
            nonce = (crate::clock::now_ms() ^ u64::from(std::process::id())).to_be_bytes();
        }
        u64::from_be_bytes(nonce)
    })
}

fn wrong_revision(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kv::UpdateError>()
        .is_some_and(|e| e.kind() == kv::UpdateErrorKind::WrongLastRevision)
}

/// The route held: its record written again every [`RENEW`] until this is dropped, which
/// deletes the record (if still this gateway's) so another can take over at once.
pub(super) struct Holding {
    state: Arc<Mutex<State>>,
    renew: AbortOnDrop,
    bucket: kv::Store,
    key: String,
}

struct State {
    /// Held until then (moved on by every write that succeeds); `None` once lost.
    until: Option<Instant>,
    revision: u64,
    released: bool,
}

impl Holding {
    fn start(bucket: kv::Store, key: String, me: String, revision: u64, sent: Instant) -> Holding {
        let state = Arc::new(Mutex::new(State {
            until: Some(sent + HELD_FOR),
            revision,
            released: false,
        }));
        let renew = tokio::spawn(renew(bucket.clone(), key.clone(), me, state.clone()));
        Holding {
            state,
            renew: AbortOnDrop(renew),
            bucket,
            key,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this gateway still holds the route now. Once not, never again: a write that
    /// succeeds later does not revive the hold (what it took may be anywhere by then).
    pub(super) fn held(&self) -> bool {
        let mut state = self.state();
        match state.until {
            Some(until) if Instant::now() < until => true,
            _ => {
                state.until = None;
                false
            }
        }
    }

    /// Resolves once the route is no longer held (another gateway took the record, or no
    /// write succeeded for [`HELD_FOR`]).
    pub(super) async fn lost(&self) {
        loop {
            let until = self.state().until;
            match until {
                Some(until) if Instant::now() < until => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Let the route go: no more writes, and the record deleted (if still this gateway's)
    /// so the next holder - this gateway again, or another - need not wait for it to go
    /// stale. Once only.
    pub(super) fn release(&self) {
        self.renew.0.abort();
        let revision = {
            let mut state = self.state();
            if state.released {
                return;
            }
            state.released = true;
            state.until = None;
            state.revision
        };
        let (bucket, key) = (self.bucket.clone(), self.key.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Conditional: a record another gateway has taken since stays its own.
                let _ = bucket.delete_expect_revision(&key, Some(revision)).await;
            });
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.release();
    }
}

/// Write the record every [`RENEW`], each write conditional on the last one: a write
/// refused for its revision means another gateway took the route (lost at once); one that
/// fails otherwise leaves the hold to run out.
async fn renew(bucket: kv::Store, key: String, me: String, state: Arc<Mutex<State>>) {
    let lock = || state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        tokio::time::sleep(RENEW).await;
        let revision = lock().revision;
        let sent = Instant::now();
        match bucket.update(&key, me.clone().into(), revision).await {
            Ok(revision) => {
                let mut state = lock();
                // The revision is kept either way, so letting go deletes the record.
                state.revision = revision;
                match state.until {
                    Some(until) if Instant::now() < until => state.until = Some(sent + HELD_FOR),
                    _ => {
                        state.until = None;
                        return;
                    }
                }
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                lock().until = None;
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "nats source: renewing an ordered route's hold failed; trying again");
            }
        }
    }
}
