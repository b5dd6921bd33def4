//! `leaseq-loadgen`: the same queue workload over many keep-alive connections
//! against leaseq-server and the peers a user would pick instead (beanstalkd,
//! Redis Streams, RabbitMQ, NATS JetStream, moto's SQS), each with its own
//! documented at-least-once pattern; and the report that turns runs into a
//! table, target verdicts and a chart.
//!
//! `run` appends one JSON line per run to `--json`; `report` reads them.
//! `failover` kills a cluster's leader under a light load and times the
//! recovery. bench/server-peers.sh (single nodes) and bench/cluster-peers.sh
//! (3-node clusters) start the servers and alternate the runs.

mod amqp;
mod beanstalk;
mod chart;
mod error;
mod failover;
mod http1;
mod nats;
mod recorder;
mod redis_streams;
mod report;
mod resp;
mod session;
mod sqs;
mod workload;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::LoadError;
use crate::report::RunResult;
use crate::workload::{Workload, drive};

#[derive(Debug, Parser)]
#[command(name = "leaseq-loadgen", version, about = "Queue load generator: leaseq-server against its peers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One run against one server.
    Run(RunArgs),
    /// Tables, target verdicts and a chart from the runs' JSON lines.
    Report(report::ReportArgs),
    /// Kills a cluster's leader under a light load and times how long until
    /// a surviving node serves a full cycle again.
    Failover(failover::FailoverArgs),
}

/// The protocol a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Protocol {
    /// Amazon SQS JSON protocol (leaseq-server, moto).
    Sqs,
    /// beanstalkd's text protocol.
    Beanstalk,
    /// Redis Streams with a consumer group.
    Redis,
    /// AMQP 0-9-1 (RabbitMQ).
    Amqp,
    /// NATS JetStream.
    Nats,
}

/// Where JetStream keeps the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NatsStorage {
    Memory,
    File,
}

/// RabbitMQ's queue type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AmqpQueue {
    /// A classic non-durable queue with transient messages (in memory).
    Classic,
    /// A quorum queue (Raft-replicated over the cluster's nodes, durable,
    /// persistent messages).
    Quorum,
}

/// Which server and queue, shared by `run` and `failover`.
#[derive(Debug, clap::Args)]
struct TargetArgs {
    /// The server's protocol.
    #[arg(long, value_enum)]
    protocol: Protocol,
    /// The name this server has in the report (e.g. leaseq-server, moto).
    #[arg(long)]
    label: String,
    /// host:port (SQS, beanstalk, redis) or a URL (amqp://..., nats://...).
    /// For SQS, AMQP and NATS a comma-separated list of a cluster's nodes:
    /// connection i opens on node i mod n.
    #[arg(long)]
    address: String,
    /// Queue, tube or stream name (created fresh, removed at the end).
    #[arg(long, default_value = "loadgen")]
    queue: String,
    /// The lease (visibility timeout, TTR, AckWait, XAUTOCLAIM idle time), seconds.
    #[arg(long, default_value_t = 30)]
    lease: u32,
    /// JetStream storage.
    #[arg(long, value_enum, default_value = "memory")]
    nats_storage: NatsStorage,
    /// JetStream stream replicas (3 for an R3 stream on a 3-node cluster).
    #[arg(long, default_value_t = 1)]
    nats_replicas: usize,
    /// RabbitMQ queue type.
    #[arg(long, value_enum, default_value = "classic")]
    amqp_queue: AmqpQueue,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Keep-alive connections, one worker each.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Messages per send (1 = single-message requests, 10 = batch forms).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Bytes per message body.
    #[arg(long, default_value_t = 100)]
    body_size: usize,
    /// Seconds of warm-up before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Open loop at this many messages per second in all; closed loop without.
    #[arg(long)]
    rate: Option<f64>,
    /// Round number, to pair runs of the same round in the report.
    #[arg(long, default_value_t = 1)]
    round: u32,
    /// Append the result as one JSON line to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn socket_address(text: &str) -> Result<SocketAddr, LoadError> {
    text.parse().map_err(|_| LoadError::new(format!("'{text}' is not host:port (e.g. 127.0.0.1:9324)")))
}

/// The nodes of `--address`, in order.
fn address_list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_string).collect()
}

/// The one address of a protocol that has no clusters.
fn single_address(args: &TargetArgs) -> Result<SocketAddr, LoadError> {
    match address_list(&args.address).as_slice() {
        [one] => socket_address(one),
        _ => Err(LoadError::new(format!("--protocol {:?} takes one address, not '{}'", args.protocol, args.address))),
    }
}

/// Builds the target that `args` describe and evaluates `$body` with it
/// bound to `$target` (each protocol's target is its own type).
macro_rules! with_target {
    ($args:expr, |$target:ident| $body:expr) => {{
        let args: &TargetArgs = $args;
        let addresses = address_list(&args.address);
        if addresses.is_empty() {
            return Err(LoadError::new("--address is empty"));
        }
        let queue = args.queue.clone();
        match args.protocol {
            Protocol::Sqs => {
                let nodes = addresses.iter().map(|a| socket_address(a)).collect::<Result<Vec<_>, _>>()?;
                let $target = sqs::SqsTarget::new(nodes, queue, args.lease);
                $body
            }
            Protocol::Beanstalk => {
                let $target = beanstalk::BeanstalkTarget {
                    address: single_address(args)?,
                    tube: queue,
                    lease_seconds: args.lease,
                };
                $body
            }
            Protocol::Redis => {
                let $target = redis_streams::RedisTarget {
                    address: single_address(args)?,
                    stream: queue,
                    lease_seconds: args.lease,
                };
                $body
            }
            Protocol::Amqp => {
                let $target = amqp::AmqpTarget { uris: addresses, queue, quorum: args.amqp_queue == AmqpQueue::Quorum };
                $body
            }
            Protocol::Nats => {
                let storage = match args.nats_storage {
                    NatsStorage::Memory => async_nats::jetstream::stream::StorageType::Memory,
                    NatsStorage::File => async_nats::jetstream::stream::StorageType::File,
                };
                let $target = nats::NatsTarget {
                    urls: addresses,
                    stream: queue,
                    lease_seconds: args.lease,
                    storage,
                    replicas: args.nats_replicas.max(1),
                };
                $body
            }
        }
    }};
}

async fn run(args: RunArgs) -> Result<RunResult, LoadError> {
    if args.batch == 0 || args.connections == 0 || args.duration <= 0.0 {
        return Err(LoadError::new("--batch, --connections and --duration must be positive"));
    }
    let workload = Workload {
        connections: args.connections,
        batch: args.batch,
        body_size: args.body_size,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        rate: args.rate,
    };
    let recorder = with_target!(&args.target, |target| drive(Arc::new(target), &workload).await)?;
    let protocol = format!("{:?}", args.target.protocol).to_lowercase();
    Ok(RunResult::new(&args.target.label, &protocol, args.round, &workload, &recorder))
}

async fn failover(args: failover::FailoverArgs) -> Result<failover::FailoverResult, LoadError> {
    let protocol = format!("{:?}", args.target.protocol).to_lowercase();
    with_target!(&args.target, |target| failover::probe(Arc::new(target), &args, &protocol).await)
}

/// Appends `value` as one JSON line to `path`.
fn append_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), String> {
    let line = serde_json::to_string(value).map_err(|e| e.to_string())?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Report(args) => report::write(&args).map_err(|e| format!("report: {e}")),
        Command::Run(args) => {
            let json = args.json.clone();
            let label = args.target.label.clone();
            runtime().and_then(|runtime| {
                let result = runtime.block_on(run(args)).map_err(|e| format!("{label}: {e}"))?;
                println!("{}", result.summary());
                json.map_or(Ok(()), |path| append_json(&path, &result))
            })
        }
        Command::Failover(args) => {
            let json = args.json.clone();
            let label = args.target.label.clone();
            runtime().and_then(|runtime| {
                let result = runtime.block_on(failover(args)).map_err(|e| format!("{label} failover: {e}"))?;
                println!("{}", result.summary());
                json.map_or(Ok(()), |path| append_json(&path, &result))
            })
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leaseq-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
