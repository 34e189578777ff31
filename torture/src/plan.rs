//! What a run publishes and how the consumer treats each message: all of it drawn from the
//! seed, so a failing run replays exactly with the same `--seed`.

use crate::rng::{Rng, hash};

/// Deliveries a message gets before the policy gives up (the route's `max_attempts`).
pub const MAX_ATTEMPTS: u32 = 5;

/// How the consumer treats one message, whatever the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    /// Accepted at the first delivery.
    Ok,
    /// Fails this many deliveries (transiently, in hostile ways), then is accepted.
    FailThenOk(u32),
    /// Refused as unprocessable: the policy dead-letters it at once.
    Poison,
    /// Fails transiently every time: the policy dead-letters it when attempts run out.
    Exhaust,
}

impl Fate {
    /// Whether the consumer ever accepts it.
    pub fn accepted(self) -> bool {
        matches!(self, Fate::Ok | Fate::FailThenOk(_))
    }
}

/// The fate of the message `key` in the run `seed`: the consumer computes it from the key
/// alone, so it needs no shared state with the producer.
pub fn fate(seed: u64, key: &str) -> Fate {
    let mut rng = Rng::new(seed, hash(key));
    match rng.below(100) {
        0..45 => Fate::Ok,
        // Fewer failures than attempts, with one to spare for a delivery a crash costs.
        45..75 => Fate::FailThenOk(1 + rng.below(u64::from(MAX_ATTEMPTS) - 2) as u32),
        75..90 => Fate::Poison,
        _ => Fate::Exhaust,
    }
}

/// One message to publish.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The run's own key for it, at the head of its payload (`TT<key>|`): ids can be empty,
    /// forged or shared, the payload reaches the consumer and the DLQ untouched.
    pub key: String,
    /// Its topic (one the route's pattern covers).
    pub topic: String,
    /// Its id; none lets the source make one.
    pub id: Option<String>,
    /// The payload (starts with the key).
    pub payload: Vec<u8>,
    /// Producer headers, hostile ones included (values may be invalid UTF-8).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Published this many times with the same id and payload (a producer's retry).
    pub copies: u32,
}

/// The payload prefix that carries `key`.
pub fn key_of(payload: &[u8]) -> Option<String> {
    let rest = payload.strip_prefix(b"TT")?;
    let end = rest.iter().position(|b| *b == b'|')?;
    String::from_utf8(rest[..end].to_vec()).ok()
}

/// What the producer may send on a source.
#[derive(Debug, Clone, Copy)]
pub struct Abilities {
    /// Payloads may be any bytes (a broker); else valid UTF-8 (the admin API's JSON).
    pub binary: bool,
    /// Largest payload.
    pub max_payload: usize,
    /// Header values may be invalid UTF-8.
    pub binary_headers: bool,
}

/// The messages of a run: `n` of them on `topics`. `gentle` makes the big payloads rare
/// (one in ten thousand), for volume.
pub fn messages(
    seed: u64,
    n: usize,
    topics: &[String],
    can: Abilities,
    gentle: bool,
) -> Vec<Planned> {
    let mut rng = Rng::new(seed, 0x5052_4f44);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("{i:06}");
        let topic = rng.pick(topics).clone();
        let id = match rng.below(100) {
            0..5 => None,
            5..8 => Some(format!("long-{key}-{}", "i".repeat(10_000))),
            8..12 => Some(format!("ctl\r\n\0-{key}")),
            _ => Some(format!("m-{seed}-{key}")),
        };
        let mut payload = format!("TT{key}|").into_bytes();
        let size = match rng.below(if gentle { 10_000 } else { 100 }) {
            0..2 => can.max_payload.saturating_sub(payload.len() + 64),
            2..10 => 10_000,
            _ => 64,
        };
        if can.binary && rng.percent(40) {
            payload.extend(rng.bytes(size));
        } else {
            let junk = ["{\"order\": 7}", "\r\n", "\u{0}", "é€😀", "not json {", " "];
            while payload.len() < size {
                payload.extend_from_slice(rng.pick(&junk).as_bytes());
            }
        }
        let mut headers = Vec::new();
        if rng.percent(30) {
            // Forged gateway headers: the gateway sets its own, whatever a producer sends.
            headers.push(("x-verdict-attempt".into(), b"999".to_vec()));
            headers.push(("x-verdict-message-id".into(), b"forged".to_vec()));
            headers.push(("x-verdict-signature".into(), b"00ff".to_vec()));
            headers.push((
                "x-verdict-history".into(),
                br#"[{"kind": "forged", "at_ms": 99999999999999999}"#.to_vec(),
            ));
            headers.push(("x-verdict-first-failed-at-ms".into(), b"-1".to_vec()));
        }
        if rng.percent(20) {
            // The broker's own and the deadline headers, forged or garbage: ignored, never
            // a reason to expire or to count a death.
            let garbage = *rng.pick(&["soon", "-5", "99999999999999999999999", "1e3", ""]);
            headers.push(("x-message-deadline-ms".into(), garbage.as_bytes().to_vec()));
            headers.push(("x-message-ttl-ms".into(), garbage.as_bytes().to_vec()));
            headers.push(("x-death".into(), b"forged".to_vec()));
            headers.push(("x-first-death-reason".into(), b"expired".to_vec()));
        }
        if rng.percent(20) {
            let value = if can.binary_headers {
                vec![0xff, 0xfe, b'a', 0x80]
            } else {
                "é\u{7f}x".as_bytes().to_vec()
            };
            headers.push(("x-tenant".into(), value));
        }
        if rng.percent(10) {
            headers.push(("x-big".into(), "h".repeat(10_000).into_bytes()));
        }
        let copies = if id.is_some() && rng.percent(5) { 2 } else { 1 };
        out.push(Planned {
            key,
            topic,
            id,
            payload,
            headers,
            copies,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_survives_any_payload_and_fates_cover_every_kind() {
        let can = Abilities {
            binary: true,
            max_payload: 1 << 20,
            binary_headers: true,
        };
        let plan = messages(3, 400, &["a".into()], can, false);
        assert!(
            plan.iter()
                .all(|m| key_of(&m.payload).as_deref() == Some(m.key.as_str()))
        );
        let fates: Vec<Fate> = plan.iter().map(|m| fate(3, &m.key)).collect();
        for want in [Fate::Ok, Fate::Poison, Fate::Exhaust] {
            assert!(fates.contains(&want), "{want:?}");
        }
        assert!(
            fates
                .iter()
                .any(|f| matches!(f, Fate::FailThenOk(k) if *k < MAX_ATTEMPTS - 1))
        );
        assert_eq!(
            messages(3, 400, &["a".into()], can, false)[17].payload,
            plan[17].payload
        );
    }
}
