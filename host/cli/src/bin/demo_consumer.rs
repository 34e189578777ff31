//! `verdict-demo-consumer`: an HTTP consumer that fails some messages on purpose (see
//! [`verdict_cli::demo`]), to watch the gateway retry and dead-letter.

use clap::Parser;
use verdict_cli::demo::{DemoConsumer, by_percent};

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
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let consumer = DemoConsumer::new(by_percent(args.transient, args.permanent));
    tokio::runtime::Runtime::new()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        eprintln!(
            "verdict-demo-consumer: http://{} ({}% transient, {}% permanent failures)",
            listener.local_addr()?,
            args.transient,
            args.permanent
        );
        axum::serve(listener, consumer.router())
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        Ok(())
    })
}
