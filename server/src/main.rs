//! The `leaseq-server` binary: flags, the engine, signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use leaseq::{Engine, SyncPolicy};
use leaseq_server::{Registry, check_bind, serve};

/// An Amazon SQS-compatible endpoint (JSON protocol) backed by the leaseq engine.
///
/// Security: request signatures (SigV4) are not verified yet, so the server
/// refuses to bind any address but loopback (127.0.0.0/8, ::1). Any
/// credentials are accepted from local clients.
#[derive(Debug, Parser)]
#[command(name = "leaseq-server", version)]
struct Args {
    /// Address to listen on (loopback only).
    #[arg(long, default_value = "127.0.0.1:9324")]
    bind: SocketAddr,
    /// Keep queues and messages in this directory (durable engine); without
    /// it everything is in memory and gone when the server stops.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// When the durable engine's writes reach the disk: `always` (default;
    /// nothing acknowledged is lost), `interval-ms=N` or `never`. Needs
    /// --data-dir.
    #[arg(long, value_parser = parse_sync)]
    sync: Option<SyncPolicy>,
}

fn parse_sync(text: &str) -> Result<SyncPolicy, String> {
    match text {
        "always" => Ok(SyncPolicy::Always),
        "never" => Ok(SyncPolicy::Never),
        _ => match text.strip_prefix("interval-ms=").map(str::parse::<u64>) {
            Some(Ok(ms)) if ms > 0 => Ok(SyncPolicy::Interval(Duration::from_millis(ms))),
            _ => Err(format!("'{text}' is not a sync policy: use always, never or interval-ms=N (N > 0)")),
        },
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("leaseq-server: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    check_bind(args.bind)?;
    let engine = match (&args.data_dir, args.sync) {
        (None, Some(_)) => return Err("--sync needs --data-dir".into()),
        (None, None) => Engine::new(),
        (Some(dir), sync) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            Engine::builder()
                .data_dir(dir)
                .sync(sync.unwrap_or_default())
                .open()
                .map_err(|e| format!("cannot open the data dir {}: {e}", dir.display()))?
        }
    };
    let registry = Registry::open(engine, args.data_dir.clone()).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.bind))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let mode = match &args.data_dir {
            Some(dir) => format!("durable in {}", dir.display()),
            None => "in memory".to_string(),
        };
        eprintln!("leaseq-server: listening on http://{local} ({mode})");
        let registry = Arc::new(registry);
        serve(listener, registry.clone(), stop_signal()).await.map_err(|e| e.to_string())?;
        registry.engine().flush().map_err(|e| format!("final flush failed: {e}"))?;
        eprintln!("leaseq-server: stopped");
        Ok(())
    })
}

/// Completes on SIGINT or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
