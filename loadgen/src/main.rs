//! `leaseq-loadgen`: the same queue workload over many keep-alive connections
//! against leaseq-server and the peers a user would pick instead (beanstalkd,
//! Redis Streams, RabbitMQ, NATS JetStream, moto's SQS), each with its own
//! documented at-least-once pattern; and the report that turns runs into a
//! table, target verdicts and a chart.
//!
//! `run` appends one JSON line per run to `--json`; `report` reads them.
//! bench/server-peers.sh starts the servers and alternates the runs.

mod amqp;
mod beanstalk;
mod chart;
mod error;
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
use crate::session::Target;
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

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The server's protocol.
    #[arg(long, value_enum)]
    protocol: Protocol,
    /// The name this server has in the report (e.g. leaseq-server, moto).
    #[arg(long)]
    label: String,
    /// host:port (SQS, beanstalk, redis) or a URL (amqp://..., nats://...).
    #[arg(long)]
    address: String,
    /// Queue, tube or stream name (created fresh, removed at the end).
    #[arg(long, default_value = "loadgen")]
    queue: String,
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
    /// The lease (visibility timeout, TTR, AckWait, XAUTOCLAIM idle time), seconds.
    #[arg(long, default_value_t = 30)]
    lease: u32,
    /// JetStream storage.
    #[arg(long, value_enum, default_value = "memory")]
    nats_storage: NatsStorage,
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

async fn measure<T: Target>(target: T, workload: &Workload) -> Result<recorder::Recorder, LoadError> {
    drive(Arc::new(target), workload).await
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
    let queue = args.queue.clone();
    let recorder = match args.protocol {
        Protocol::Sqs => {
            measure(sqs::SqsTarget::new(socket_address(&args.address)?, queue, args.lease), &workload).await
        }
        Protocol::Beanstalk => {
            let address = socket_address(&args.address)?;
            measure(beanstalk::BeanstalkTarget { address, tube: queue, lease_seconds: args.lease }, &workload).await
        }
        Protocol::Redis => {
            let address = socket_address(&args.address)?;
            measure(redis_streams::RedisTarget { address, stream: queue, lease_seconds: args.lease }, &workload).await
        }
        Protocol::Amqp => measure(amqp::AmqpTarget { uri: args.address.clone(), queue }, &workload).await,
        Protocol::Nats => {
            let storage = match args.nats_storage {
                NatsStorage::Memory => async_nats::jetstream::stream::StorageType::Memory,
                NatsStorage::File => async_nats::jetstream::stream::StorageType::File,
            };
            let target =
                nats::NatsTarget { url: args.address.clone(), stream: queue, lease_seconds: args.lease, storage };
            measure(target, &workload).await
        }
    }?;
    Ok(RunResult::new(&args.label, &format!("{:?}", args.protocol).to_lowercase(), args.round, &workload, &recorder))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Report(args) => match report::write(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("leaseq-loadgen report: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) => {
            let json = args.json.clone();
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("leaseq-loadgen: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let label = args.label.clone();
            match runtime.block_on(run(args)) {
                Ok(result) => {
                    println!("{}", result.summary());
                    if let Some(path) = json {
                        let appended =
                            std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| {
                                writeln!(f, "{}", serde_json::to_string(&result).unwrap_or_default())
                            });
                        if let Err(e) = appended {
                            eprintln!("leaseq-loadgen: cannot append to {}: {e}", path.display());
                            return ExitCode::FAILURE;
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("leaseq-loadgen: {label}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
