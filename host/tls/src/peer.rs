//! What a peer's certificate says about itself, for an operator reading a probe: its
//! subject and when it expires. A minimal DER reader over the fields needed, bounded
//! everywhere (the bytes come from the peer): anything unexpected gives `None`, never a
//! panic.

/// The subject and expiry of a certificate a peer presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The subject's common name, organisation and country (`CN=db.internal, O=Acme`),
    /// cleaned to printable text.
    pub subject: String,
    /// The end of its validity, UTC (`2027-01-31T12:00:00Z`).
    pub not_after: String,
    /// The same as seconds since the Unix epoch.
    pub not_after_unix: i64,
}

impl PeerCertificate {
    /// Read `der`, an X.509 certificate.
    pub fn parse(der: &[u8]) -> Option<PeerCertificate> {
        let (certificate, _) = element(der, SEQUENCE)?;
        let (tbs, _) = element(certificate, SEQUENCE)?;
        let mut rest = tbs;
        // version [0] EXPLICIT, optional
        if rest.first() == Some(&0xa0) {
            rest = element(rest, 0xa0)?.1;
        }
        let (_serial, rest) = element(rest, INTEGER)?;
        let (_signature, rest) = element(rest, SEQUENCE)?;
        let (_issuer, rest) = element(rest, SEQUENCE)?;
        let (validity, rest) = element(rest, SEQUENCE)?;
        let (subject, _) = element(rest, SEQUENCE)?;
        let (_not_before, validity) = any(validity)?;
        let (tag, not_after, _) = any_tagged(validity)?;
        let (not_after, not_after_unix) = time(tag, not_after)?;
        Some(PeerCertificate {
            subject: name(subject),
            not_after,
            not_after_unix,
        })
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;

/// One element: (tag, content, what follows).
fn any_tagged(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, input) = input.split_first()?;
    let (&first, mut input) = input.split_first()?;
    let length = if first < 0x80 {
        usize::from(first)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 {
            return None;
        }
        let mut length = 0usize;
        for _ in 0..octets {
            let (&b, more) = input.split_first()?;
            length = (length << 8) | usize::from(b);
            input = more;
        }
        length
    };
    if length > input.len() {
        return None;
    }
    let (content, rest) = input.split_at(length);
    Some((tag, content, rest))
}

fn any(input: &[u8]) -> Option<(&[u8], &[u8])> {
    any_tagged(input).map(|(_, content, rest)| (content, rest))
}

fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, content, rest) = any_tagged(input)?;
    (found == tag).then_some((content, rest))
}

/// `CN=..., O=..., C=...` from a Name (the attributes an operator recognises).
fn name(mut rdns: &[u8]) -> String {
    let mut parts = Vec::new();
    while let Some((set, rest)) = element(rdns, SET) {
        rdns = rest;
        let mut attributes = set;
        while let Some((attribute, rest)) = element(attributes, SEQUENCE) {
            attributes = rest;
            let Some((oid, value)) = element(attribute, OID) else {
                continue;
            };
            let label = match oid {
                [0x55, 0x04, 0x03] => "CN",
                [0x55, 0x04, 0x0a] => "O",
                [0x55, 0x04, 0x0b] => "OU",
                [0x55, 0x04, 0x06] => "C",
                _ => continue,
            };
            if let Some((text, _)) = any(value) {
                let text: String = String::from_utf8_lossy(&text[..text.len().min(128)])
                    .chars()
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect();
                parts.push(format!("{label}={text}"));
            }
            if parts.len() >= 8 {
                break;
            }
        }
    }
    parts.join(", ")
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time(tag: u8, text: &[u8]) -> Option<(String, i64)> {
    let text = std::str::from_utf8(text).ok()?;
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (0x18, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let unix = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    Some((
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"),
        unix,
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_and_expiry_are_read_from_a_generated_certificate() {
        let pki = crate::test_pki::Pki::new("peer-parse");
        let leaf = pki.server("db", &["localhost"]);
        let chain = crate::pem::certificates("t", &leaf.cert).unwrap();
        let seen = PeerCertificate::parse(&chain[0]).unwrap();
        assert_eq!(seen.subject, "CN=db");
        assert!(
            seen.not_after.len() == 20 && seen.not_after.ends_with('Z'),
            "{seen:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(seen.not_after_unix > now, "{seen:?} expires in the future");
        let expired = pki.expired_server("old", &["localhost"]);
        let chain = crate::pem::certificates("t", &expired.cert).unwrap();
        let seen = PeerCertificate::parse(&chain[0]).unwrap();
        assert_eq!(seen.not_after, "2020-01-02T00:00:00Z");
        assert_eq!(seen.not_after_unix, 1_577_923_200);
    }

    #[test]
    fn hostile_bytes_give_none_never_a_panic() {
        let pki = crate::test_pki::Pki::new("peer-hostile");
        let leaf = pki.server("db", &["localhost"]);
        let der = crate::pem::certificates("t", &leaf.cert).unwrap()[0].to_vec();
        for cut in 0..der.len() {
            let _ = PeerCertificate::parse(&der[..cut]);
        }
        let mut flipped = der.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = PeerCertificate::parse(&flipped);
            flipped[i] ^= 0xff;
        }
        assert_eq!(
            PeerCertificate::parse(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
        assert_eq!(PeerCertificate::parse(&[]), None);
    }
}
