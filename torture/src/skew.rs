//! A gateway's clock offset (`--skew`): a `faketime` spec, checked when the harness starts
//! rather than by a gateway that fails to start, and read as milliseconds by the checks.
//!
//! The checks compare the consumer's clock (the machine's) with the time a dead letter
//! carries. On a shared store that time is the database's; on a broker it is the gateway's
//! own, so a gateway whose clock runs behind stamps its letters early by its offset, and the
//! comparison must allow for exactly that much.

/// The offset a `faketime` relative spec (`+30s`, `-2m`, `+1.5h`, `-500`) gives the clock,
/// in milliseconds (negative: behind the machine's). Units as `faketime` reads them: `s`
/// (the default), `m`, `h`, `d`, `y`.
pub fn offset_ms(spec: &str) -> Result<i64, String> {
    let wrong = || {
        format!(
            "--skew {spec:?}: expected a faketime offset such as +30s or -2m (a sign, a \
             number, and s, m, h, d or y)"
        )
    };
    let (sign, rest) = match spec.as_bytes().first() {
        Some(b'+') => (1.0, &spec[1..]),
        Some(b'-') => (-1.0, &spec[1..]),
        _ => return Err(wrong()),
    };
    let (number, unit_s) = match rest.char_indices().last() {
        Some((at, 's')) => (&rest[..at], 1.0),
        Some((at, 'm')) => (&rest[..at], 60.0),
        Some((at, 'h')) => (&rest[..at], 3_600.0),
        Some((at, 'd')) => (&rest[..at], 86_400.0),
        Some((at, 'y')) => (&rest[..at], 31_536_000.0),
        _ => (rest, 1.0),
    };
    let value: f64 = number.parse().map_err(|_| wrong())?;
    if !value.is_finite() || value < 0.0 || value * unit_s > 10.0 * 31_536_000.0 {
        return Err(wrong());
    }
    Ok((sign * value * unit_s * 1_000.0).round() as i64)
}

/// A `--skew` value, checked: the spec itself, for `faketime`.
pub fn parse(spec: &str) -> Result<String, String> {
    offset_ms(spec).map(|_| spec.to_string())
}

/// How far the slowest of `specs` runs behind the machine's clock (0 when none does).
pub fn most_behind_ms(specs: &[String]) -> u64 {
    specs
        .iter()
        .filter_map(|s| offset_ms(s).ok())
        .map(|ms| ms.min(0).unsigned_abs())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faketime_offsets_read_as_milliseconds() {
        assert_eq!(offset_ms("+30s"), Ok(30_000));
        assert_eq!(offset_ms("-30s"), Ok(-30_000));
        assert_eq!(offset_ms("-2m"), Ok(-120_000));
        assert_eq!(offset_ms("+1.5h"), Ok(5_400_000));
        assert_eq!(offset_ms("-500"), Ok(-500_000));
        for wrong in ["30s", "", "+", "+s", "-x", "+1w", "+-3s", "+NaNs", "+1e30s"] {
            let e = offset_ms(wrong).unwrap_err();
            assert!(e.contains("faketime offset"), "{wrong}: {e}");
        }
        assert_eq!(
            most_behind_ms(&["+30s".into(), "-45s".into(), "-30s".into()]),
            45_000
        );
        assert_eq!(most_behind_ms(&["+30s".into()]), 0);
    }
}
