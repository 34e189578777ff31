//! The due queue: where classic delay buckets expire into, and from which a gateway moves
//! each retry back to its route's queue.
//!
//! The broker's own dead-lettering from a classic queue is at most once: a retry expiring
//! while its route queue is deleted, or refused by a length limit, would be dropped. So the
//! buckets expire into a queue of the gateways' own ([`RabbitmqConfig::due_queue`]), and
//! the move that can fail - into the route queue - is a publish with a confirm, acked only
//! once the route queue holds the copy: at least once. A move the broker refuses puts the
//! retry back in a bucket for a while (1 s doubling to a minute), so an operator's deleted
//! or full queue keeps its retries waiting, never drops them and never spins on them.
//!
//! Timing stays the broker's: a retry waits out its bucket's TTL on the broker's clock, and
//! the move adds one publish.

use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use tokio::sync::watch;

use super::headers::bucket_ms;
use super::topology::Topology;
use crate::health::Readiness;
use verdict_registry::RabbitmqConfig;
use verdict_runtime::text::{Clean, one_line};

/// The header a bucketed copy names its route queue in.
const QUEUE: &str = "x-verdict-queue";
/// How many moves of this copy the broker refused so far (absent: none).
const MOVES: &str = "x-verdict-moves";
/// The first wait after a refused move; it doubles with every refusal.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two tries of a refused move.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// `properties` with `queue` as the route queue its copy goes back to from the due queue.
pub(super) fn bound_for(properties: BasicProperties, queue: &str) -> BasicProperties {
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert(
        QUEUE.into(),
        AMQPValue::LongString(LongString::from(queue.as_bytes().to_vec())),
    );
    properties.with_headers(headers)
}

/// Why a message in the due queue cannot be moved back: it was not put there by a gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NoTarget {
    Missing,
    NotText,
    Invalid(String),
}

impl std::fmt::Display for NoTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoTarget::Missing => write!(f, "it has no `{QUEUE}` header"),
            NoTarget::NotText => write!(f, "its `{QUEUE}` header is not a string"),
            NoTarget::Invalid(name) => write!(
                f,
                "its `{QUEUE}` header `{}` is not a queue name (1-255 bytes, no control \
                 characters, not `amq.`)",
                one_line(name, 64)
            ),
        }
    }
}

/// The route queue a due message goes back to, checked: a name a gateway could have
/// written, nothing a producer's hand-made header could turn into a broker-internal queue.
fn target_of(headers: Option<&FieldTable>) -> Result<String, NoTarget> {
    let value = headers
        .and_then(|h| h.inner().get(QUEUE))
        .ok_or(NoTarget::Missing)?;
    let bytes = match value {
        AMQPValue::LongString(s) => s.as_bytes().to_vec(),
        AMQPValue::ShortString(s) => s.as_str().as_bytes().to_vec(),
        _ => return Err(NoTarget::NotText),
    };
    let name = String::from_utf8(bytes)
        .map_err(|e| NoTarget::Invalid(String::from_utf8_lossy(e.as_bytes()).into_owned()))?;
    let valid = !name.is_empty()
        && name.len() <= 255
        && !name.chars().any(char::is_control)
        && !name.starts_with("amq.");
    if valid {
        Ok(name)
    } else {
        Err(NoTarget::Invalid(name))
    }
}

/// Refused moves so far, from the copy's header (anything unreadable counts as none).
fn moves_of(headers: Option<&FieldTable>) -> u32 {
    let value = headers.and_then(|h| h.inner().get(MOVES));
    let n = match value {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortShortInt(n)) => i64::from(*n),
        _ => 0,
    };
    u32::try_from(n).unwrap_or(0)
}

/// How long a copy waits after its `moves`-th refused move.
fn wait_after(moves: u32) -> Duration {
    FIRST_WAIT
        .saturating_mul(1u32 << moves.min(10))
        .min(MAX_WAIT)
}

/// The properties a moved copy goes on with: the broker's dead-letter headers (which grow
/// with every hop) and the due queue's own dropped, everything else - the signed history
/// included - kept.
fn moved_properties(properties: &BasicProperties) -> BasicProperties {
    let mut kept = FieldTable::default();
    if let Some(headers) = properties.headers() {
        for (name, value) in headers.inner() {
            let name = name.as_str();
            let dropped = name == QUEUE
                || name == MOVES
                || name == "x-death"
                || name.starts_with("x-first-death-")
                || name.starts_with("x-last-death-");
            if !dropped {
                kept.insert(ShortString::from(name), value.clone());
            }
        }
    }
    properties.clone().with_headers(kept)
}

/// Consume the due queue until `shutdown`, moving each message on in a task of its own
/// (the consumer's prefetch bounds how many at once). An error ends the session, which is
/// rebuilt; unacked messages go back to the due queue.
///
/// The moves publish on a channel of their own (`mover`): publishing into a bucket whose
/// exchange an operator deleted closes the channel it was made on, losing the confirms of
/// every publish in flight there - a move whose confirm is lost cannot know whether its
/// copy arrived, and moving it again makes a second copy with a life of its own. Only the
/// route queues' default exchange is published to on `mover`, which no operator can delete;
/// `topology` (the settlements' channel) takes what goes back into a bucket.
pub(super) async fn move_due(
    mover: &Topology,
    topology: &Topology,
    config: &RabbitmqConfig,
    ready: &Readiness,
    (channel, mut deliveries): (lapin::Channel, lapin::Consumer),
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let due = config.due_queue();
    loop {
        let next = tokio::select! {
            next = deliveries.next() => next,
            _ = shutdown.changed() => return Ok(()),
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                return Err(anyhow::Error::new(e).context(format!("consuming queue `{due}`")));
            }
            None => anyhow::bail!("the broker closed the consumer of queue `{due}`"),
        };
        let (mover, topology, ready) = (mover.clone(), topology.clone(), ready.clone());
        let invalid = config.due_invalid_queue();
        // The due queue's channel stays open until this move is acked or given back: a
        // session torn down meanwhile cancels the consumer, but closing the channel would
        // put back a message whose copy is already in its route queue, and it would be
        // moved twice.
        let held = channel.clone();
        tokio::spawn(async move {
            move_one(&mover, &topology, &ready, &invalid, message).await;
            drop(held);
        });
    }
}

/// Move one message from the due queue to its route queue, or back into a bucket when the
/// broker refuses it, or to `invalid` when it names no queue; ack it only after that.
async fn move_one(
    mover: &Topology,
    topology: &Topology,
    ready: &Readiness,
    invalid: &str,
    message: lapin::message::Delivery,
) {
    let headers = message.properties.headers().as_ref();
    let moved = match target_of(headers) {
        Ok(queue) => {
            let properties = moved_properties(&message.properties);
            match mover
                .to_existing_queue(&queue, &message.data, properties.clone())
                .await
            {
                Ok(()) => Ok(()),
                // The channel died under the publish: the copy may be in the route queue.
                // Left unacked, the message goes back to the due queue with the channel and
                // is moved again by the rebuilt session - a duplicate only if it had arrived.
                Err(_) if !mover.is_open() => Err(FIRST_WAIT),
                // Refused (no such queue, a length limit): the broker said it is not there.
                Err(e) => wait_again(topology, ready, &queue, &message, properties, e).await,
            }
        }
        Err(why) => {
            let text = format!(
                "a message in the due queue was not put there by a gateway ({why}); \
                 kept in `{invalid}`"
            );
            if ready.warn(text.clone()) {
                tracing::warn!("rabbitmq source: {}", Clean(&text));
            }
            topology
                .to_queue(invalid, &message.data, message.properties.clone())
                .await
                .map_err(|_| MAX_WAIT)
        }
    };
    let settled = match moved {
        Ok(()) => message.ack(BasicAckOptions::default()).await,
        Err(wait) => {
            // Not even a bucket took it: give it back to the due queue after the wait, so
            // it is tried at that rate, never in a requeue loop.
            tokio::time::sleep(wait).await;
            let requeue = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            message.nack(requeue).await
        }
    };
    match settled {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            "rabbitmq source: settling a due message found its channel closed; the broker has \
             given it back and it is moved again"
        ),
        Err(e) => {
            tracing::debug!(error = %e, "rabbitmq source: settling a due message failed; the broker gives it back when the channel closes");
        }
    }
}

/// The route queue refused a move (`error`): put the copy back in a bucket to be tried
/// again later. The wait when even that failed.
async fn wait_again(
    topology: &Topology,
    ready: &Readiness,
    queue: &str,
    message: &lapin::message::Delivery,
    properties: BasicProperties,
    error: anyhow::Error,
) -> Result<(), Duration> {
    let moves = moves_of(message.properties.headers().as_ref()).saturating_add(1);
    let wait = wait_after(moves);
    let text = format!(
        "retries cannot go back to queue `{}` ({error:#}); they wait and are tried again, \
         up to a minute apart",
        one_line(queue, 128)
    );
    if ready.warn(text.clone()) {
        tracing::warn!("rabbitmq source: {}", Clean(&text));
    }
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert(MOVES.into(), AMQPValue::LongLongInt(i64::from(moves)));
    let properties = properties.with_headers(headers);
    let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    match topology
        .later(queue, bucket_ms(millis), &message.data, properties)
        .await
    {
        Ok(()) => Ok(()),
        Err(_) => Err(wait),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in entries {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    fn text(s: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(s))
    }

    #[test]
    fn a_gateway_written_target_is_read_back() {
        let props = bound_for(BasicProperties::default(), "orders");
        assert_eq!(target_of(props.headers().as_ref()), Ok("orders".into()));
    }

    #[test]
    fn hand_made_targets_are_refused_with_the_reason() {
        assert_eq!(target_of(None), Err(NoTarget::Missing));
        let t = table(&[(QUEUE, AMQPValue::LongLongInt(3))]);
        assert_eq!(target_of(Some(&t)), Err(NoTarget::NotText));
        for bad in ["", "amq.rabbitmq.reply-to", "a\r\nb", &"q".repeat(256)] {
            let t = table(&[(QUEUE, text(bad))]);
            let err = target_of(Some(&t)).unwrap_err();
            assert!(matches!(err, NoTarget::Invalid(_)), "{bad:?}: {err:?}");
            // The reason is one bounded line, whatever the header held.
            let said = err.to_string();
            assert!(!said.contains('\n') && said.len() < 300, "{said:?}");
        }
        let t = table(&[(
            QUEUE,
            AMQPValue::LongString(LongString::from(vec![0xff, 0xfe])),
        )]);
        assert!(matches!(target_of(Some(&t)), Err(NoTarget::Invalid(_))));
    }

    #[test]
    fn refused_moves_wait_longer_each_time_up_to_a_minute() {
        assert_eq!(wait_after(1), Duration::from_secs(2));
        assert_eq!(wait_after(3), Duration::from_secs(8));
        assert_eq!(wait_after(7), MAX_WAIT);
        assert_eq!(wait_after(u32::MAX), MAX_WAIT);
        let t = table(&[(MOVES, AMQPValue::LongLongInt(4))]);
        assert_eq!(moves_of(Some(&t)), 4);
        let t = table(&[(MOVES, AMQPValue::LongLongInt(-4))]);
        assert_eq!(moves_of(Some(&t)), 0, "a negative count is none");
        assert_eq!(moves_of(None), 0);
    }

    #[test]
    fn a_moved_copy_drops_the_dead_letter_headers_and_keeps_the_history() {
        let t = table(&[
            (QUEUE, text("orders")),
            (MOVES, AMQPValue::LongLongInt(2)),
            ("x-death", AMQPValue::FieldArray(Default::default())),
            ("x-first-death-queue", text("verdict.delay.wait.63")),
            ("x-last-death-reason", text("expired")),
            ("x-verdict-attempt", text("2")),
            ("x-verdict-signature", text("abc")),
            ("trace", text("t1")),
        ]);
        let moved = moved_properties(&BasicProperties::default().with_headers(t));
        let mut names: Vec<&str> = moved
            .headers()
            .as_ref()
            .unwrap()
            .inner()
            .keys()
            .map(|k| k.as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["trace", "x-verdict-attempt", "x-verdict-signature"]);
    }
}
