//! Parsing the operator's per-topic config (JSON) into a policy's config struct.

use serde::de::DeserializeOwned;

/// Parse `json` into `T`. An empty string means `{}`. The error names the path of the
/// offending field, e.g. `config.rules[2].max_attempts: invalid type: string "five",
/// expected u32`.
///
/// A field the operator left out is an error unless the config type gives it a default;
/// that error says how, because a route without a config (`{}`) is the first thing a new
/// policy meets.
pub fn parse_config<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    let json = if json.trim().is_empty() { "{}" } else { json };
    parse_named(json.as_bytes(), Some("config")).map_err(|e| {
        if e.contains(": missing field `") {
            format!(
                "{e}; set it in the route's config, or give it a default: \
                 `#[serde(default)]` on the config struct and `impl Default` for it"
            )
        } else {
            e
        }
    })
}

/// Parse JSON into `T`, naming the path of the offending field on error
/// (`items[2].sku: missing field`); trailing characters are refused too.
pub fn from_json_slice<T: DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    parse_named(json, None)
}

fn parse_named<T: DeserializeOwned>(json: &[u8], root: Option<&str>) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let located = |path: &str, message: String| match (root, path) {
        (Some(root), ".") => format!("{root}: {message}"),
        (Some(root), path) => format!("{root}.{path}: {message}"),
        (None, ".") => message,
        (None, path) => format!("{path}: {message}"),
    };
    let value: T = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| located(&e.path().to_string(), e.inner().to_string()))?;
    de.end().map_err(|e| located(".", e.to_string()))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        max_attempts: u32,
        rules: Vec<Rule>,
    }

    #[derive(serde::Deserialize, Debug, Default)]
    #[serde(deny_unknown_fields)]
    struct Rule {
        #[allow(dead_code)]
        kind: String,
    }

    #[test]
    fn empty_means_defaults() {
        let c: Cfg = parse_config("  ").unwrap();
        assert_eq!(c.max_attempts, 0);
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_config::<Cfg>(r#"{"max_attempts": "five"}"#).unwrap_err();
        assert!(e.starts_with("config.max_attempts:"), "{e}");
        let e = parse_config::<Cfg>(r#"{"rules": [{"kind": "a"}, {"kidn": "b"}]}"#).unwrap_err();
        assert!(e.starts_with("config.rules[1]"), "{e}");
        assert!(e.contains("kidn"), "{e}");
        let e = parse_config::<Cfg>("{} trailing").unwrap_err();
        assert!(e.starts_with("config:"), "{e}");
    }

    /// A config struct without defaults meets `{}` on its first route.
    #[test]
    fn a_missing_field_names_both_fixes() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct NoDefaults {
            #[allow(dead_code)]
            max_attempts: u32,
        }
        let e = parse_config::<NoDefaults>("{}").unwrap_err();
        assert!(e.starts_with("config: missing field `max_attempts`"), "{e}");
        assert!(
            e.contains("route's config")
                && e.contains("#[serde(default)]")
                && e.contains("impl Default"),
            "{e}"
        );
        // Other errors carry no such advice.
        let e = parse_config::<NoDefaults>(r#"{"max_attempts": "five"}"#).unwrap_err();
        assert!(!e.contains("impl Default"), "{e}");
    }
}
