//! A database URL's client-side parameters: the TLS settings each driver spells its own
//! way are taken out of the query before the driver reads the rest.

/// `url` without the query parameters named in `names`, and those parameters (decoded,
/// the last of a repeated name wins in [`Taken::get`]).
pub(super) fn take(url: &str, names: &[&str]) -> Result<(String, Taken), String> {
    let mut parsed = url::Url::parse(url).map_err(|e| e.to_string())?;
    let (taken, kept): (Vec<Pair>, Vec<Pair>) = parsed
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .partition(|(k, _)| names.contains(&k.as_str()));
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(&kept);
    }
    Ok((parsed.into(), Taken(taken)))
}

/// One query parameter, decoded.
type Pair = (String, String);

/// The parameters [`take`] took out.
pub(super) struct Taken(Vec<Pair>);

impl Taken {
    /// The value of `name`, if given (the last one when repeated).
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_parameters_are_taken_and_the_rest_kept_in_order() {
        let (rest, taken) = take(
            "postgres://u:p%40w@h:5432/db?a=1&sslmode=require&b=x%20y&sslmode=verify-full",
            &["sslmode"],
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p%40w@h:5432/db?a=1&b=x+y");
        assert_eq!(taken.get("sslmode"), Some("verify-full"));
        assert_eq!(taken.get("a"), None);
        let (rest, _) = take("mysql://u@h/db?ssl-mode=DISABLED", &["ssl-mode"]).unwrap();
        assert_eq!(rest, "mysql://u@h/db");
    }
}
