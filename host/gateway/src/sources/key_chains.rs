//! One message of a key at a time, for the broker sources that order by key in the
//! gateway's memory (RabbitMQ and NATS routes with `ordering = "key"`): a message whose key
//! has one in flight or waiting to retry waits behind it, in the order the broker handed
//! them out, while other keys go on.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

/// A key longer than this is replaced by its digest (a key only ever lives in memory, but a
/// producer's header must not size the gateway's maps).
pub(crate) const MAX_KEY_BYTES: usize = 256;

/// The key a producer's header value stands for: the value, or `sha256:<hex>` of a value
/// longer than [`MAX_KEY_BYTES`]; `None` for an empty value (the message is then not
/// ordered).
pub(crate) fn bounded_key(value: String) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() <= MAX_KEY_BYTES {
        return Some(value);
    }
    Some(format!(
        "sha256:{}",
        verdict_runtime::digest::sha256_hex(value.as_bytes())
    ))
}

/// Per (route, key), the messages waiting behind the one being delivered.
pub(crate) struct Chains<T> {
    waiting: Mutex<HashMap<(String, String), VecDeque<T>>>,
}

impl<T> Default for Chains<T> {
    fn default() -> Self {
        Chains {
            waiting: Mutex::default(),
        }
    }
}

impl<T> Chains<T> {
    /// Hand `item` (a message of `key` on `route`) to its key's chain: back when the key
    /// was free - the caller delivers it and then asks [`Chains::next`] - or kept to wait
    /// behind the key's earlier messages.
    pub(crate) fn admit(&self, route: &str, key: String, item: T) -> Option<T> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        match waiting.entry((route.to_string(), key)) {
            Entry::Occupied(mut chain) => {
                chain.get_mut().push_back(item);
                None
            }
            Entry::Vacant(free) => {
                free.insert(VecDeque::new());
                Some(item)
            }
        }
    }

    /// The next message of `key` on `route` once the one before it is settled; `None` frees
    /// the key.
    pub(crate) fn next(&self, route: &str, key: &str) -> Option<T> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let chain_key = (route.to_string(), key.to_string());
        let next = waiting.get_mut(&chain_key).and_then(VecDeque::pop_front);
        if next.is_none() {
            waiting.remove(&chain_key);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_goes_one_message_at_a_time_in_the_order_taken_and_keys_do_not_wait_for_each_other() {
        let chains = Chains::default();
        assert_eq!(
            chains.admit("q", "a".into(), 1),
            Some(1),
            "a free key delivers at once"
        );
        assert_eq!(
            chains.admit("q", "a".into(), 2),
            None,
            "a busy key's message waits"
        );
        assert_eq!(chains.admit("q", "a".into(), 3), None);
        assert_eq!(
            chains.admit("q", "b".into(), 4),
            Some(4),
            "another key does not wait"
        );
        assert_eq!(
            chains.admit("other", "a".into(), 5),
            Some(5),
            "nor another route's key"
        );
        assert_eq!(chains.next("q", "a"), Some(2));
        assert_eq!(
            chains.admit("q", "a".into(), 6),
            None,
            "the key is busy until drained"
        );
        assert_eq!(chains.next("q", "a"), Some(3));
        assert_eq!(chains.next("q", "a"), Some(6));
        assert_eq!(chains.next("q", "a"), None);
        assert_eq!(
            chains.admit("q", "a".into(), 7),
            Some(7),
            "a drained key is free again"
        );
        assert_eq!(chains.next("q", "b"), None);
        assert_eq!(
            chains.waiting.lock().unwrap().len(),
            2,
            "only busy keys are kept"
        );
    }

    #[test]
    fn a_key_is_bounded_and_an_empty_one_orders_nothing() {
        assert_eq!(bounded_key("o-1".into()).as_deref(), Some("o-1"));
        assert_eq!(bounded_key(String::new()), None);
        let huge = "k".repeat(10_000);
        let key = bounded_key(huge.clone()).unwrap();
        assert!(key.starts_with("sha256:") && key.len() < 100, "{key}");
        assert_ne!(
            key,
            bounded_key(format!("{huge}x")).unwrap(),
            "two long keys stay two keys"
        );
        let edge = "k".repeat(MAX_KEY_BYTES);
        assert_eq!(
            bounded_key(edge.clone()),
            Some(edge),
            "kept up to the bound"
        );
    }
}
