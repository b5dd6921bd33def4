//! The `leaseq-server` binary: flags, the engine, signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use leaseq::{Engine, SyncPolicy};
use leaseq_server::{ConnectionLimits, Credentials, Registry, ServeOptions, check_bind, serve_with};

// The binary picks the allocator (the library never imposes one): the
// request path allocates per message, and glibc's malloc was a fifth of the
// server's profile.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An Amazon SQS-compatible endpoint (JSON protocol) backed by the leaseq engine.
///
/// Security: with --credentials-file every request must carry a valid SigV4
/// signature by one of its keys. Without it any credentials are accepted, so
/// the server then binds only loopback addresses (127.0.0.0/8, ::1) unless
/// --insecure-no-auth is given. There is no TLS.
#[derive(Debug, Parser)]
#[command(name = "leaseq-server", version)]
struct Args {
    /// Address to listen on; beyond loopback it needs --credentials-file or
    /// --insecure-no-auth.
    #[arg(long, default_value = "127.0.0.1:9324")]
    bind: SocketAddr,
    /// File of `ACCESS_KEY_ID SECRET_ACCESS_KEY` lines: requests must be
    /// SigV4-signed with one of them.
    #[arg(long)]
    credentials_file: Option<PathBuf>,
    /// Listen on a non-loopback address without checking signatures.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Keep queues and messages in this directory (durable engine); without
    /// it everything is in memory and gone when the server stops.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// When the durable engine's writes reach the disk: `always` (default;
    /// nothing acknowledged is lost), `interval-ms=N` or `never`. Needs
    /// --data-dir.
    #[arg(long, value_parser = parse_sync)]
    sync: Option<SyncPolicy>,
    /// Connections open at once; beyond it clients wait in the listen
    /// backlog until one closes (keep it under the file descriptor limit).
    #[arg(long, default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Seconds a connection may sit idle (or take to send a request's
    /// headers, then its body) before it is closed.
    #[arg(long, default_value_t = ConnectionLimits::default().idle_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout_secs: u64,
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
    let credentials = args.credentials_file.as_deref().map(Credentials::from_file).transpose()?;
    if let Some(warning) = check_bind(args.bind, credentials.is_some(), args.insecure_no_auth)? {
        eprintln!("leaseq-server: WARNING: {warning}");
    }
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
        let auth = if credentials.is_some() { "SigV4 required" } else { "no authentication" };
        eprintln!("leaseq-server: listening on http://{local} ({mode}, {auth})");
        let registry = Arc::new(registry);
        let limits = ConnectionLimits {
            max_connections: args.max_connections as usize,
            idle_timeout: Duration::from_secs(args.idle_timeout_secs),
        };
        let options = ServeOptions { credentials, limits };
        serve_with(listener, registry.clone(), options, stop_signal()).await.map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_flags_default_to_the_library_limits() {
        let args = Args::parse_from(["leaseq-server"]);
        let defaults = ConnectionLimits::default();
        assert_eq!(args.max_connections as usize, defaults.max_connections);
        assert_eq!(Duration::from_secs(args.idle_timeout_secs), defaults.idle_timeout);
        assert!(Args::try_parse_from(["leaseq-server", "--idle-timeout-secs", "0"]).is_err());
    }
}
