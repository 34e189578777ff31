//! `verdict-demo-consumer`: an HTTP consumer that fails some messages on purpose (see
//! [`verdict_cli::demo`]), to watch the gateway retry and dead-letter.

use clap::Parser;
use verdict_cli::demo::{DemoConsumer, OrderCheck, by_percent};
use verdict_gateway::admin::tls::TlsListener;

/// A consumer that fails some messages transiently and some permanently, by message id.
#[derive(Parser)]
#[command(name = "verdict-demo-consumer", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: std::net::SocketAddr,
    /// Percent of messages that fail 1-3 times before they succeed.
    #[arg(long, default_value_t = 20)]
    transient: u32,
    /// Percent of messages that always fail (422, `schema.unknown-version`).
    #[arg(long, default_value_t = 5)]
    permanent: u32,
    /// Serve HTTPS with this PEM certificate chain (needs `--tls-key`).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Accept only clients presenting a certificate this PEM CA issued (mutual TLS).
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<std::path::PathBuf>,
    /// Check key ordering: the header holding a message's key (`GET /stats` counts the
    /// deliveries that overtook their key's previous message as `overtaken`).
    #[arg(long, requires = "sequence_header")]
    order_header: Option<String>,
    /// With `--order-header`: the header holding a message's number among its key's
    /// messages in publish order (0, 1, 2...), as the producer set it.
    #[arg(long, requires = "order_header")]
    sequence_header: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut consumer = DemoConsumer::new(by_percent(args.transient, args.permanent));
    if let (Some(key_header), Some(sequence_header)) = (&args.order_header, &args.sequence_header) {
        consumer = consumer.with_order_check(OrderCheck {
            key_header: key_header.clone(),
            sequence_header: sequence_header.clone(),
        });
    }
    tokio::runtime::Runtime::new()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        let address = listener.local_addr()?;
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(verdict_tls::server_config(
                "--tls",
                cert,
                key,
                args.client_ca.as_deref(),
            )?),
            _ => None,
        };
        eprintln!(
            "verdict-demo-consumer: {}://{address} ({}% transient, {}% permanent failures{})",
            if tls.is_some() { "https" } else { "http" },
            args.transient,
            args.permanent,
            if args.client_ca.is_some() {
                ", client certificates required"
            } else {
                ""
            }
        );
        match tls {
            Some(tls) => {
                let listener = TlsListener::new(listener, tls)?;
                axum::serve(listener, consumer.router())
                    .with_graceful_shutdown(shutdown)
                    .await?;
            }
            None => {
                axum::serve(listener, consumer.router())
                    .with_graceful_shutdown(shutdown)
                    .await?;
            }
        }
        Ok(())
    })
}
