//! The `leaseq-server` binary: flags, the engine, signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use clap::{Parser, Subcommand};
use hyper::Method;
use leaseq::{Engine, Repair, SyncPolicy};
use leaseq_cluster::ClusterSecret;
use leaseq_server::{
    ClusterConfig, ClusterFront, ConnectionLimits, Credentials, RaftTiming, Registry, ServeOptions, admin_request,
    check_bind, check_cluster_bind, serve_cluster, serve_with,
};

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
///
/// Cluster mode (--cluster): this server is one node of a Raft group; the
/// leader serves, followers forward to it. Raft's RPCs and the /cluster/
/// endpoints share the port; with --cluster-secret-file every one of them
/// must be signed (HMAC-SHA256) with the group's shared secret. A cluster
/// node beyond loopback needs both --credentials-file and
/// --cluster-secret-file, or --insecure-no-auth. The secret authenticates
/// peers and protects integrity, not confidentiality: messages travel in
/// clear, so across a network you do not trust, run the group inside a TLS
/// tunnel or WireGuard. `leaseq-server cluster ...` asks a node about its
/// group or changes the membership (give it the same secret file).
///
/// A node starting on an empty data dir first asks its --peer nodes; if one
/// lists it as a voter (it lost its data dir), it refuses to start: remove
/// it with `cluster change-membership`, restart it, then `cluster
/// add-learner` and `cluster change-membership` with it again.
#[derive(Debug, Parser)]
#[command(name = "leaseq-server", version)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to listen on; beyond loopback it needs --credentials-file
    /// (and, for a cluster node, --cluster-secret-file) or
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
    /// --data-dir; a --cluster node takes `always` only (its Raft log is
    /// synced on every append).
    #[arg(long, value_parser = parse_sync)]
    sync: Option<SyncPolicy>,
    /// What opening --data-dir does with damage before the end of its log:
    /// `refuse` (default: the server does not start, and says which file and
    /// byte) or `skip-damaged` (start with the rest of the log; the records
    /// in the damaged bytes are lost, and the start-up report lists them).
    /// A torn last write is always cut off and reported. Not for --cluster.
    #[arg(long, default_value = "refuse", value_parser = ["refuse", "skip-damaged"],
          requires = "data_dir", conflicts_with = "cluster")]
    repair: String,
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
    /// Run as one node of a replicated group: needs --node-id, --data-dir
    /// (its Raft log) and a --peer for every initial member.
    #[arg(long)]
    cluster: bool,
    /// This node's id in the group (cluster mode).
    #[arg(long, requires = "cluster")]
    node_id: Option<u64>,
    /// An initial member, as ID=IP:PORT (its SQS port; an IP address, not a
    /// host name); repeat for each, this node included (cluster mode).
    #[arg(long = "peer", value_parser = parse_peer, requires = "cluster")]
    peers: Vec<(u64, String)>,
    /// Make the --peer list the group's first membership if this node's log
    /// is empty, once every other --peer is up and checked (give it to one
    /// node; ignored once the node holds a log).
    #[arg(long, requires = "cluster")]
    bootstrap: bool,
    /// Raft's shortest election timeout in ms (the longest is twice it,
    /// heartbeats a quarter of it); cluster mode.
    #[arg(long, default_value_t = 400, requires = "cluster",
          value_parser = clap::value_parser!(u64).range(40..=60_000))]
    election_timeout_ms: u64,
    /// A file holding the group's shared secret (text, at least 32 bytes
    /// after trimming; make one with `openssl rand -hex 32`): this node
    /// signs its Raft RPCs with it and refuses Raft RPCs and /cluster/
    /// requests not signed with it (cluster mode).
    #[arg(long, requires = "cluster")]
    cluster_secret_file: Option<PathBuf>,
    /// On an empty data dir, start even if no --peer answers: you know this
    /// node is not a voter of the group (a new node, or one removed). A
    /// node that a peer lists as a voter is refused regardless (cluster
    /// mode).
    #[arg(long, requires = "cluster")]
    join_as_new: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ask a cluster node about its group, or change the membership.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
}

#[derive(Debug, Subcommand)]
enum ClusterAction {
    /// Print the node's view of the group (JSON).
    Status {
        /// The node's address (any member).
        #[arg(long, default_value = "127.0.0.1:9324")]
        node: String,
        /// The group's secret file, if its nodes have one.
        #[arg(long)]
        cluster_secret_file: Option<PathBuf>,
    },
    /// Add a non-voting member; returns once it has caught up.
    AddLearner {
        /// Any member's address (a follower forwards to the leader).
        #[arg(long, default_value = "127.0.0.1:9324")]
        node: String,
        /// The new member's id.
        #[arg(long)]
        id: u64,
        /// The new member's IP:PORT (an IP address, not a host name).
        #[arg(long)]
        addr: SocketAddr,
        /// The group's secret file, if its nodes have one.
        #[arg(long)]
        cluster_secret_file: Option<PathBuf>,
    },
    /// Make exactly these members the voters (add learners first; a voter
    /// left out is removed from the group).
    ChangeMembership {
        /// Any member's address (a follower forwards to the leader).
        #[arg(long, default_value = "127.0.0.1:9324")]
        node: String,
        /// The voters' ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        voters: Vec<u64>,
        /// The group's secret file, if its nodes have one.
        #[arg(long)]
        cluster_secret_file: Option<PathBuf>,
    },
}

fn parse_peer(text: &str) -> Result<(u64, String), String> {
    let (id, addr) = text.split_once('=').ok_or_else(|| format!("'{text}' is not ID=IP:PORT"))?;
    let id = id.parse::<u64>().map_err(|_| format!("'{id}' is not a node id (an integer)"))?;
    let addr = addr
        .parse::<SocketAddr>()
        .map_err(|_| format!("'{addr}' is not an IP:PORT address (host names are not resolved)"))?;
    Ok((id, addr.to_string()))
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
    if let Some(Command::Cluster { action }) = &args.command {
        return cluster_command(action);
    }
    if args.cluster {
        return run_cluster(args);
    }
    let credentials = args.credentials_file.as_deref().map(Credentials::from_file).transpose()?;
    if let Some(warning) = check_bind(args.bind, credentials.is_some(), args.insecure_no_auth)? {
        eprintln!("leaseq-server: WARNING: {warning}");
    }
    let engine = match (&args.data_dir, args.sync) {
        (None, Some(_)) => return Err("--sync needs --data-dir".into()),
        (None, None) => Engine::new(),
        (Some(dir), sync) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let repair = if args.repair == "skip-damaged" { Repair::SkipDamaged } else { Repair::Refuse };
            let engine =
                Engine::builder().data_dir(dir).sync(sync.unwrap_or_default()).repair(repair).open().map_err(|e| {
                    let hint = if matches!(e, leaseq::Error::CorruptLog { .. }) {
                        " (to start with the rest of the log, losing the damaged records, run with --repair \
                         skip-damaged)"
                    } else {
                        ""
                    };
                    format!("cannot open the data dir {}: {e}{hint}", dir.display())
                })?;
            if let Some(report) = engine.recovery() {
                eprintln!("leaseq-server: recovered {}: {report}", dir.display());
                if report.lost_records() {
                    eprintln!(
                        "leaseq-server: WARNING: --repair skip-damaged lost the records named above; messages \
                         acked in them may come back and changes logged in them are undone"
                    );
                }
            }
            engine
        }
    };
    let registry = Registry::open(engine, args.data_dir.clone()).map_err(|e| e.to_string())?;
    let writes_wait = args.data_dir.is_some() && !matches!(args.sync, Some(SyncPolicy::Never));
    http_runtime(writes_wait)?.block_on(async {
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

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// HTTP workers of a server whose writes wait for the disk (a data dir) or
/// a quorum (cluster mode). Message writes (send, delete, visibility) wait
/// on the engine's async forms and hold no worker while they do, so any
/// number of them share a group commit; the calls that still block a worker
/// until their record commits are the rare queue-level ones (create,
/// delete, purge, attributes, move tasks). A few more workers than cores
/// keep a handful of those from stalling everything else, Raft's RPCs on
/// this port included. An in-memory server keeps one worker per core.
const SYNCING_HTTP_WORKERS: usize = 8;

/// The HTTP runtime: `SYNCING_HTTP_WORKERS` threads when writes wait.
fn http_runtime(writes_wait: bool) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if writes_wait {
        builder.worker_threads(SYNCING_HTTP_WORKERS);
    }
    builder.enable_all().build().map_err(|e| format!("cannot start the runtime: {e}"))
}

/// `leaseq-server cluster ...`: one request to a node, its answer printed.
fn cluster_command(action: &ClusterAction) -> Result<(), String> {
    let (node, method, path, body, secret_file) = match action {
        ClusterAction::Status { node, cluster_secret_file } => {
            (node, Method::GET, "/cluster/status", None, cluster_secret_file)
        }
        ClusterAction::AddLearner { node, id, addr, cluster_secret_file } => {
            let body = serde_json::json!({ "id": id, "addr": addr.to_string() }).to_string();
            (node, Method::POST, "/cluster/add-learner", Some(body), cluster_secret_file)
        }
        ClusterAction::ChangeMembership { node, voters, cluster_secret_file } => {
            let body = serde_json::json!({ "voters": voters }).to_string();
            (node, Method::POST, "/cluster/change-membership", Some(body), cluster_secret_file)
        }
    };
    let secret = secret_file.as_deref().map(ClusterSecret::from_file).transpose().map_err(|e| e.to_string())?;
    let answer = runtime()?.block_on(admin_request(node, method, path, body, secret.as_ref()))?;
    println!("{answer}");
    Ok(())
}

/// `--cluster`: one node of a replicated group.
fn run_cluster(args: Args) -> Result<(), String> {
    let node_id = args.node_id.ok_or("--cluster needs --node-id")?;
    let data_dir = args.data_dir.clone().ok_or("--cluster needs --data-dir (the node's Raft log)")?;
    if !matches!(args.sync, None | Some(SyncPolicy::Always)) {
        return Err("a cluster node syncs its Raft log on every append: --sync can only be 'always' here".into());
    }
    let mut peers = BTreeMap::new();
    for (id, addr) in &args.peers {
        if peers.insert(*id, addr.clone()).is_some() {
            return Err(format!("--peer {id} is given twice"));
        }
    }
    if let Some(addr) = peers.get(&node_id)
        && addr.parse::<SocketAddr>().ok() != Some(args.bind)
    {
        return Err(format!("--peer {node_id}={addr} is not this node's --bind {}", args.bind));
    }
    let credentials = args.credentials_file.as_deref().map(Credentials::from_file).transpose()?;
    let secret =
        args.cluster_secret_file.as_deref().map(ClusterSecret::from_file).transpose().map_err(|e| e.to_string())?;
    if let Some(warning) =
        check_cluster_bind(args.bind, credentials.is_some(), secret.is_some(), args.insecure_no_auth)?
    {
        eprintln!("leaseq-server: WARNING: {warning}");
    }
    let election_min = Duration::from_millis(args.election_timeout_ms);
    let timing = RaftTiming { heartbeat: election_min / 4, election_min, election_max: election_min * 2 };
    let peer_auth = if secret.is_some() { "peers signed" } else { "peers NOT authenticated" };
    let config = ClusterConfig {
        node_id,
        peers,
        data_dir: data_dir.clone(),
        bootstrap: args.bootstrap,
        timing,
        secret,
        join_as_new: args.join_as_new,
    };
    http_runtime(true)?.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.bind))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let front = ClusterFront::start(config).await?;
        eprintln!(
            "leaseq-server: node {node_id} listening on http://{local} (cluster mode, Raft log in {}, {peer_auth})",
            data_dir.display()
        );
        let limits = ConnectionLimits {
            max_connections: args.max_connections as usize,
            idle_timeout: Duration::from_secs(args.idle_timeout_secs),
        };
        let options = ServeOptions { credentials, limits };
        // The rejoin interlock may refuse this node: then it stops too.
        let stop = async {
            tokio::select! {
                () = stop_signal() => {}
                _ = front.refused() => {}
            }
        };
        let served = serve_cluster(listener, front.clone(), options, stop).await;
        front.shutdown().await;
        if let Some(why) = front.refusal() {
            return Err(why);
        }
        served.map_err(|e| e.to_string())?;
        eprintln!("leaseq-server: node {node_id} stopped");
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

    #[test]
    fn cluster_flags_parse_and_need_cluster_mode() {
        let args = Args::parse_from([
            "leaseq-server",
            "--cluster",
            "--node-id",
            "2",
            "--peer",
            "1=127.0.0.1:9401",
            "--peer",
            "2=127.0.0.1:9402",
            "--bootstrap",
        ]);
        assert_eq!(args.node_id, Some(2));
        assert_eq!(args.peers, vec![(1, "127.0.0.1:9401".to_string()), (2, "127.0.0.1:9402".to_string())]);
        assert!(args.bootstrap);
        assert!(Args::try_parse_from(["leaseq-server", "--node-id", "2"]).is_err(), "--node-id without --cluster");
        assert!(Args::try_parse_from(["leaseq-server", "--cluster", "--peer", "x=1"]).is_err());
        assert!(Args::try_parse_from(["leaseq-server", "--cluster", "--peer", "1=nowhere"]).is_err());
        let voters = Args::parse_from(["leaseq-server", "cluster", "change-membership", "--voters", "1,2,4"]);
        assert!(matches!(
            voters.command,
            Some(Command::Cluster { action: ClusterAction::ChangeMembership { ref voters, .. } }) if voters == &[1, 2, 4]
        ));
    }
}
