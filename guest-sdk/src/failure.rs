//! The failed delivery a policy decides on.
//!
//! Small facts (attempt, kind, clock, seed, statistics) arrive with every call. The bulky or
//! rarely needed parts (topic, ids, error message, when it was published and first failed,
//! headers, payload, history) are fetched from the host the first time a policy asks for
//! them, then cached for the call: a policy that reads only the kind and the attempt never
//! pays for copying a payload.

use std::cell::OnceCell;

use serde::de::DeserializeOwned;
use verdict_types::AttemptRecord;

/// Recent statistics of the topic, over a window chosen by the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicStats {
    /// Length of the window in milliseconds.
    pub window_ms: u64,
    /// Deliveries attempted in the window (successful and failed).
    pub deliveries: u32,
    /// Failed deliveries in the window.
    pub failures: u32,
    /// Failures in a row on this topic, this one included; reset by any success.
    pub consecutive_failures: u32,
}

impl TopicStats {
    /// Share of successful deliveries in the window, from 0.0 to 1.0; 1.0 when the window
    /// saw no delivery (no evidence of trouble).
    pub fn success_rate(&self) -> f64 {
        if self.deliveries == 0 {
            return 1.0;
        }
        let failures = self.failures.min(self.deliveries);
        f64::from(self.deliveries - failures) / f64::from(self.deliveries)
    }
}

/// One message header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header name.
    pub name: String,
    /// Header value.
    pub value: String,
}

/// Which failure of the running call the host's details describe: its position in the call,
/// which contract 0.2's `details` methods take (a 0.1 host needs none: its functions
/// describe the current failure).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(
    any(not(target_arch = "wasm32"), feature = "contract-v0-1"),
    allow(dead_code)
)]
pub struct Handle {
    pub(crate) failure: u32,
}

/// A value that is either given up front (native tests) or fetched from the host on first
/// use (inside a component), through a plain function and the failure's handle: no closure
/// to allocate per field per decision.
pub(crate) struct Lazy<T> {
    cell: OnceCell<T>,
    fetch: Option<Fetch<T>>,
}

/// How a [`Lazy`] asks the host: a plain function and the failure's handle.
type Fetch<T> = (fn(Handle) -> T, Handle);

impl<T: Default> Lazy<T> {
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn host(fetch: fn(Handle) -> T, handle: Handle) -> Self {
        Lazy {
            cell: OnceCell::new(),
            fetch: Some((fetch, handle)),
        }
    }

    pub(crate) fn given(value: T) -> Self {
        Lazy {
            cell: OnceCell::from(value),
            fetch: None,
        }
    }

    fn get(&self) -> &T {
        self.cell.get_or_init(|| {
            self.fetch
                .map(|(fetch, handle)| fetch(handle))
                .unwrap_or_default()
        })
    }
}

impl<T: Default> Default for Lazy<T> {
    fn default() -> Self {
        Lazy::given(T::default())
    }
}

/// Fetchers for the parts of a failure that live on the host.
#[derive(Default)]
pub(crate) struct Details {
    /// The failure's handle, for the uncached fetches of the test guests.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) handle: Handle,
    pub(crate) topic: Lazy<String>,
    pub(crate) message_id: Lazy<String>,
    pub(crate) consumer_group: Lazy<String>,
    pub(crate) error_message: Lazy<String>,
    pub(crate) content_type: Lazy<Option<String>>,
    pub(crate) published_at_ms: Lazy<Option<u64>>,
    pub(crate) first_failed_at_ms: Lazy<u64>,
    pub(crate) payload_size: Lazy<u32>,
    pub(crate) headers: Lazy<Vec<Header>>,
    pub(crate) payload: Lazy<Vec<u8>>,
    pub(crate) history: Lazy<Vec<AttemptRecord>>,
    pub(crate) extensions: Extensions,
}

/// Where [`Failure::extension`] looks: the host, or values a native test gave.
pub(crate) enum Extensions {
    Given(std::collections::BTreeMap<String, String>),
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Host(fn(Handle, &str) -> Option<String>, Handle),
}

impl Default for Extensions {
    fn default() -> Self {
        Extensions::Given(std::collections::BTreeMap::new())
    }
}

/// One failed delivery.
///
/// Inside a component the host fills it in. In native unit tests, build one with
/// [`Failure::new`] and the `with_*` setters; everything not set has a neutral default
/// (attempt 1, no deadline, empty payload, clock at 0):
///
/// ```
/// use verdict_sdk::Failure;
///
/// let f = Failure::new("http.503").with_attempt(3).with_retry_after_ms(2_000);
/// assert_eq!(f.kind(), "http.503");
/// assert_eq!(f.attempt(), 3);
/// assert_eq!(f.retry_after_ms(), Some(2_000));
/// ```
pub struct Failure {
    pub(crate) kind: String,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) rejected: bool,
    pub(crate) attempt: u32,
    pub(crate) deferrals: u32,
    pub(crate) now_ms: u64,
    pub(crate) deadline_ms: Option<u64>,
    pub(crate) jitter_seed: u64,
    pub(crate) stats: TopicStats,
    pub(crate) details: Details,
}

impl Failure {
    /// A failure of the given error kind at attempt 1, with every other field neutral.
    pub fn new(kind: impl Into<String>) -> Self {
        Failure {
            kind: kind.into(),
            retry_after_ms: None,
            rejected: false,
            attempt: 1,
            deferrals: 0,
            now_ms: 0,
            deadline_ms: None,
            jitter_seed: 0,
            stats: TopicStats::default(),
            details: Details::default(),
        }
    }

    /// The machine-readable error kind, e.g. `db.timeout`.
    pub fn kind(&self) -> &str {
        &self.kind
    }
    /// True when `pattern` (see [`kind_matches`](crate::kind_matches)) matches the kind.
    pub fn kind_is(&self, pattern: &str) -> bool {
        crate::kind_matches(pattern, &self.kind)
    }
    /// The dead letter for a kind that never succeeds on a retry (payload, schema and
    /// format errors: poison; `auth.*`: permanent, alert critical), `None` for any other kind.
    /// Start `decide` with it and the admission gate's "never-retry kinds are not retried"
    /// check holds whatever the rest of the policy does; the list is
    /// [`NEVER_RETRY_KINDS`](crate::NEVER_RETRY_KINDS), the one the gate checks by default.
    ///
    /// ```
    /// use verdict_sdk::{Class, Failure, Verdict};
    ///
    /// fn decide(f: &Failure) -> Verdict {
    ///     if let Some(dead) = f.never_retry() {
    ///         return dead;
    ///     }
    ///     Verdict::retry_after(1_000)
    /// }
    /// assert_eq!(decide(&Failure::new("auth.denied")).class, Class::Permanent);
    /// assert_eq!(decide(&Failure::new("json.parse")).class, Class::Poison);
    /// assert_eq!(decide(&Failure::new("db.timeout")).delay_ms(), Some(1_000));
    /// ```
    pub fn never_retry(&self) -> Option<crate::Verdict> {
        verdict_types::never_retry(&self.kind)
    }
    /// The consumer's `Retry-After` hint in milliseconds.
    pub fn retry_after_ms(&self) -> Option<u64> {
        self.retry_after_ms
    }
    /// True when the consumer explicitly asked for dead-lettering.
    pub fn rejected(&self) -> bool {
        self.rejected
    }
    /// 1-based count of failed deliveries, this one included.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// How many `delay` verdicts this message already received.
    pub fn deferrals(&self) -> u32 {
        self.deferrals
    }
    /// When the first delivery failed (ms since the epoch; fetched on first use).
    pub fn first_failed_at_ms(&self) -> u64 {
        *self.details.first_failed_at_ms.get()
    }
    /// The host's clock for this decision (ms since the epoch).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }
    /// When the message was published, if known (fetched on first use).
    pub fn published_at_ms(&self) -> Option<u64> {
        *self.details.published_at_ms.get()
    }
    /// The message's deadline (TTL), if it has one.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.deadline_ms
    }
    /// True when the message has a deadline and `now` has reached it.
    pub fn is_expired(&self) -> bool {
        self.deadline_ms.is_some_and(|d| self.now_ms >= d)
    }
    /// Milliseconds left before the deadline (0 once expired), `None` without a deadline.
    pub fn time_left_ms(&self) -> Option<u64> {
        self.deadline_ms.map(|d| d.saturating_sub(self.now_ms))
    }
    /// Age of the message: since publication when known, else since its first failure.
    pub fn age_ms(&self) -> u64 {
        self.now_ms.saturating_sub(
            self.published_at_ms()
                .unwrap_or_else(|| self.first_failed_at_ms()),
        )
    }
    /// The seed for deterministic jitter.
    pub fn jitter_seed(&self) -> u64 {
        self.jitter_seed
    }
    /// Recent statistics of the topic.
    pub fn stats(&self) -> &TopicStats {
        &self.stats
    }
    /// Size of the payload in bytes, known without fetching the payload.
    pub fn payload_size(&self) -> u32 {
        *self.details.payload_size.get()
    }

    /// The topic (fetched on first use).
    pub fn topic(&self) -> &str {
        self.details.topic.get()
    }
    /// The message id (fetched on first use).
    pub fn message_id(&self) -> &str {
        self.details.message_id.get()
    }
    /// The consumer group (fetched on first use).
    pub fn consumer_group(&self) -> &str {
        self.details.consumer_group.get()
    }
    /// The human-readable error message (fetched on first use). Classify by
    /// [`kind`](Self::kind), not by this text.
    pub fn error_message(&self) -> &str {
        self.details.error_message.get()
    }
    /// The payload's content type (fetched on first use).
    pub fn content_type(&self) -> Option<&str> {
        self.details.content_type.get().as_deref()
    }
    /// All headers (fetched on first use).
    pub fn headers(&self) -> &[Header] {
        self.details.headers.get()
    }
    /// One header by name, case-insensitive.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers()
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }
    /// The payload bytes (fetched on first use).
    pub fn payload(&self) -> &[u8] {
        self.details.payload.get()
    }
    /// The payload parsed as JSON into `T`; the error names the failing path.
    pub fn payload_json<T: DeserializeOwned>(&self) -> Result<T, String> {
        crate::from_json_slice(self.payload())
    }
    /// Earlier failed attempts, oldest first (fetched on first use).
    pub fn history(&self) -> &[AttemptRecord] {
        self.details.history.get()
    }
    /// A named fact the host adds without changing the contract's records; `None` for a key
    /// it does not know. The gateway fills `source` (`embedded`, `nats` or `rabbitmq`),
    /// `route` (the route's topic pattern) and `gateway` (its instance name).
    pub fn extension(&self, key: &str) -> Option<String> {
        match &self.details.extensions {
            Extensions::Given(map) => map.get(key).cloned(),
            Extensions::Host(fetch, handle) => fetch(*handle, key),
        }
    }
}

/// Setters for native tests and tools; a component never needs them.
impl Failure {
    /// Add an extension fact (see [`Failure::extension`]).
    #[must_use]
    pub fn with_extension(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Extensions::Given(map) = &mut self.details.extensions {
            map.insert(key.into(), value.into());
        }
        self
    }
    /// Set the attempt (1-based).
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }
    /// Set the number of earlier deferrals.
    #[must_use]
    pub fn with_deferrals(mut self, deferrals: u32) -> Self {
        self.deferrals = deferrals;
        self
    }
    /// Set the `Retry-After` hint.
    #[must_use]
    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }
    /// Mark the failure as an explicit reject by the consumer.
    #[must_use]
    pub fn with_rejected(mut self, rejected: bool) -> Self {
        self.rejected = rejected;
        self
    }
    /// Set the clock.
    #[must_use]
    pub fn with_now_ms(mut self, now_ms: u64) -> Self {
        self.now_ms = now_ms;
        self
    }
    /// Set when the first delivery failed.
    #[must_use]
    pub fn with_first_failed_at_ms(mut self, ms: u64) -> Self {
        self.details.first_failed_at_ms = Lazy::given(ms);
        self
    }
    /// Set the publication time.
    #[must_use]
    pub fn with_published_at_ms(mut self, ms: u64) -> Self {
        self.details.published_at_ms = Lazy::given(Some(ms));
        self
    }
    /// Set the deadline (TTL).
    #[must_use]
    pub fn with_deadline_ms(mut self, ms: u64) -> Self {
        self.deadline_ms = Some(ms);
        self
    }
    /// Set the jitter seed.
    #[must_use]
    pub fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = seed;
        self
    }
    /// Set the topic statistics.
    #[must_use]
    pub fn with_stats(mut self, stats: TopicStats) -> Self {
        self.stats = stats;
        self
    }
    /// Set the topic.
    #[must_use]
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.details.topic = Lazy::given(topic.into());
        self
    }
    /// Set the message id.
    #[must_use]
    pub fn with_message_id(mut self, id: impl Into<String>) -> Self {
        self.details.message_id = Lazy::given(id.into());
        self
    }
    /// Set the error message.
    #[must_use]
    pub fn with_error_message(mut self, message: impl Into<String>) -> Self {
        self.details.error_message = Lazy::given(message.into());
        self
    }
    /// Add a header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let mut headers = std::mem::take(&mut self.details.headers)
            .cell
            .take()
            .unwrap_or_default();
        headers.push(Header {
            name: name.into(),
            value: value.into(),
        });
        self.details.headers = Lazy::given(headers);
        self
    }
    /// Set the payload (and its size).
    #[must_use]
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        let payload = payload.into();
        self.details.payload_size = Lazy::given(u32::try_from(payload.len()).unwrap_or(u32::MAX));
        self.details.payload = Lazy::given(payload);
        self
    }
    /// Set the history of earlier attempts.
    #[must_use]
    pub fn with_history(mut self, history: Vec<AttemptRecord>) -> Self {
        self.details.history = Lazy::given(history);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_rate_handles_empty_and_inconsistent_windows() {
        assert_eq!(TopicStats::default().success_rate(), 1.0);
        let s = TopicStats {
            deliveries: 10,
            failures: 7,
            ..Default::default()
        };
        assert!((s.success_rate() - 0.3).abs() < 1e-9);
        let bogus = TopicStats {
            deliveries: 2,
            failures: 5,
            ..Default::default()
        };
        assert_eq!(bogus.success_rate(), 0.0);
    }

    #[test]
    fn expiry_and_age_follow_the_given_clock() {
        let f = Failure::new("x")
            .with_now_ms(1_000)
            .with_deadline_ms(1_000)
            .with_first_failed_at_ms(400);
        assert!(f.is_expired());
        assert_eq!(f.time_left_ms(), Some(0));
        assert_eq!(f.age_ms(), 600);
        let f = Failure::new("x")
            .with_now_ms(999)
            .with_deadline_ms(1_000)
            .with_published_at_ms(100);
        assert!(!f.is_expired());
        assert_eq!(f.age_ms(), 899);
    }

    #[test]
    fn headers_are_case_insensitive_and_payload_json_names_the_path() {
        let f = Failure::new("x")
            .with_header("Content-Type", "json")
            .with_payload(br#"{"a":{"b":"x"}}"#.to_vec());
        assert_eq!(f.header("content-type"), Some("json"));
        assert_eq!(f.payload_size(), 15);
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct P {
            a: Inner,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Inner {
            b: u32,
        }
        let err = f.payload_json::<P>().unwrap_err();
        assert!(err.starts_with("a.b:"), "{err}");
    }
}
