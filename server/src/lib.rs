//! # leaseq-server
//!
//! An Amazon SQS-compatible endpoint in front of the leaseq engine: the SQS
//! JSON protocol (`POST /` with `X-Amz-Target: AmazonSQS.<Action>`) over
//! HTTP/1.1, so the AWS SDKs, boto3 and the AWS CLI can use leaseq queues.
//!
//! * A receipt handle is the engine's receipt text: a handle of an earlier
//!   receive cannot delete or extend a newer one.
//! * Message attributes and the send time travel inside the payload
//!   (`envelope`), so they survive a durable engine's restart.
//! * Long polls wait on the engine's `receive_async` (no thread per waiter).
//! * With `Credentials`, requests must be signed (SigV4); without, the binary
//!   listens on loopback only (`check_bind`).
//!
//! `docs/server.md` lists the supported actions and where leaseq differs
//! from SQS.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let registry = std::sync::Arc::new(leaseq_server::Registry::open(leaseq::Engine::new(), None)?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9324").await?;
//! leaseq_server::serve(listener, registry, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod address;
mod api;
mod batch;
mod bind;
mod checksum;
mod cluster;
mod envelope;
mod error;
mod http;
mod messages;
mod metrics;
mod move_tasks;
mod query;
mod queues;
mod registry;
mod settings;
mod sigv4;

pub use address::{ACCOUNT, REGION};
pub use bind::{check_bind, check_cluster_bind};
pub use cluster::{ClusterConfig, ClusterFront, RaftTiming, Status as ClusterStatus, admin_request};
pub use error::{ErrorCode, NOT_APPLIED_HEADER, SqsError};
pub use http::{ConnectionLimits, MAX_BODY_BYTES, ServeOptions, serve, serve_cluster, serve_with, serve_with_auth};
pub use registry::{Registry, SETTINGS_FILE};
pub use sigv4::Credentials;
