//! TLS to MariaDB and MySQL, spelt as their own clients spell it in the store URL:
//! `ssl-mode` (`DISABLED`, `PREFERRED` - the default -, `REQUIRED`, `VERIFY_CA`,
//! `VERIFY_IDENTITY`), `ssl-ca`, `ssl-cert` and `ssl-key`. The driver takes TLS settings of
//! its own shape, so they are taken out of the URL here and turned into its options (rustls
//! on ring, the one crypto provider).
//!
//! As with the `mysql` client, `PREFERRED` and `REQUIRED` encrypt without checking who
//! answers unless `ssl-ca` is given (then the chain is checked, as `VERIFY_CA` does);
//! `PREFERRED` falls back to plain TCP only when the server says it has no TLS at all.

use std::path::Path;

use mysql::{ClientIdentity, Opts, OptsBuilder, SslOpts};

use crate::StoreError;

/// The URL's parameters this module takes out (the `mysql` client's option names).
const TAKEN: [&str; 4] = ["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];

/// How the store connects: without TLS, or with it (and whether plain TCP may follow when
/// the server has no TLS).
#[derive(Clone)]
pub(super) enum MysqlTls {
    /// `ssl-mode=DISABLED`.
    Disabled,
    /// TLS with these options; `fallback`: plain TCP when the server has none (`PREFERRED`).
    Enabled { opts: Box<Opts>, fallback: bool },
}

/// The driver's plain options for `url` (`mysql://...`) without the TLS parameters, and how
/// to connect. Relative files are taken from `base`.
pub(super) fn split(url: &str, base: &Path) -> Result<(Opts, MysqlTls), StoreError> {
    let bad = |e: String| StoreError::Url(format!("not a MySQL URL: {e}"));
    let (rest, taken) = crate::url_params::take(url, &TAKEN).map_err(bad)?;
    let plain = Opts::from_url(&rest).map_err(|e| bad(e.to_string()))?;
    let get = |name: &str| taken.get(name);
    let file = |name: &str| -> Result<Option<std::path::PathBuf>, StoreError> {
        let Some(path) = get(name).map(|v| base.join(v)) else {
            return Ok(None);
        };
        std::fs::metadata(&path).map_err(|e| {
            StoreError::Url(format!(
                "gateway.store {name}: {}: cannot be read: {e}",
                path.display()
            ))
        })?;
        Ok(Some(path))
    };
    let ca = file("ssl-ca")?;
    let identity = match (file("ssl-cert")?, file("ssl-key")?) {
        (Some(cert), Some(key)) => Some(ClientIdentity::new(cert, key)),
        (None, None) => None,
        _ => {
            return Err(StoreError::Url(
                "gateway.store ssl-cert and ssl-key: one needs the other".into(),
            ));
        }
    };
    let mode = get("ssl-mode").unwrap_or("PREFERRED").to_ascii_uppercase();
    let (check_chain, check_name, fallback) = match mode.as_str() {
        "DISABLED" => return Ok((plain, MysqlTls::Disabled)),
        "PREFERRED" => (ca.is_some(), false, true),
        "REQUIRED" => (ca.is_some(), false, false),
        "VERIFY_CA" => (true, false, false),
        "VERIFY_IDENTITY" => (true, true, false),
        other => {
            return Err(StoreError::Url(format!(
                "gateway.store ssl-mode=`{}`: expected DISABLED, PREFERRED, REQUIRED, VERIFY_CA \
                 or VERIFY_IDENTITY",
                verdict_runtime::text::one_line(other, 32)
            )));
        }
    };
    let ssl = SslOpts::default()
        .with_root_cert_path(ca)
        .with_client_identity(identity)
        .with_danger_accept_invalid_certs(!check_chain)
        .with_danger_skip_domain_validation(!check_name);
    let opts = Opts::from(OptsBuilder::from_opts(plain.clone()).ssl_opts(Some(ssl)));
    Ok((
        plain,
        MysqlTls::Enabled {
            opts: Box::new(opts),
            fallback,
        },
    ))
}

/// A connection to `target` that failed: a refused certificate is named as the URL's TLS
/// settings (not an outage), anything else as the driver says it. The driver flattens its
/// TLS errors into text, so rustls' wording is read too.
pub(super) fn connect_failed(target: &str, error: mysql::Error) -> StoreError {
    let tls = verdict_tls::TlsFailure::of(&error)
        .or_else(|| verdict_tls::TlsFailure::of_text(&error.to_string()))
        .map(|f| {
            format!(
                "{} (gateway.store ssl-mode / ssl-ca / ssl-cert): ",
                f.kind()
            )
        });
    StoreError::Connect {
        target: target.to_string(),
        message: tls.unwrap_or_default() + &error.to_string(),
        cause: Some(Box::new(error)),
    }
}

impl MysqlTls {
    /// A connection: over TLS unless disabled, in plain TCP after a `PREFERRED` TLS attempt
    /// the server answered with "no TLS here".
    pub(super) fn connect(&self, plain: &Opts) -> Result<mysql::Conn, mysql::Error> {
        match self {
            MysqlTls::Disabled => mysql::Conn::new(plain.clone()),
            MysqlTls::Enabled { opts, fallback } => match mysql::Conn::new(Opts::clone(opts)) {
                Err(mysql::Error::DriverError(mysql::DriverError::TlsNotSupported))
                    if *fallback =>
                {
                    mysql::Conn::new(plain.clone())
                }
                other => other,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_parameters_are_taken_out_and_checked() {
        let (plain, tls) = split(
            "mysql://root@127.0.0.1:3306/db?ssl-mode=DISABLED",
            Path::new(""),
        )
        .unwrap();
        assert!(matches!(tls, MysqlTls::Disabled));
        assert_eq!(plain.get_db_name(), Some("db"));
        let (_, tls) = split("mysql://root@127.0.0.1:3306/db", Path::new("")).unwrap();
        assert!(
            matches!(tls, MysqlTls::Enabled { fallback: true, .. }),
            "PREFERRED by default"
        );
        let error = split(
            "mysql://root@127.0.0.1:3306/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=nowhere.pem",
            Path::new("/etc/none"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            error.contains("gateway.store ssl-ca") && error.contains("/etc/none/nowhere.pem"),
            "{error}"
        );
        let error = split(
            "mysql://root@127.0.0.1/db?ssl-mode=sometimes",
            Path::new(""),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(error.contains("ssl-mode=`SOMETIMES`"), "{error}");
    }
}
