//! NATS JetStream as a work queue (the `async-nats` crate): a stream with the
//! work-queue retention policy (a message is removed once acked), one durable
//! pull consumer shared by all connections, explicit acks, AckWait as the
//! lease. Sends wait for the stream's publish ack; a batch publishes ten and
//! then waits for the ten acks. Receives are `fetch` requests for up to the
//! batch that answer at once when nothing is pending. Acks are sent without
//! waiting for the server (async-nats' `ack`, like AMQP's), ten per batch: a
//! shared consumer cannot use AckAll.
//!
//! With replicas (an R3 stream on a 3-node cluster) the stream is a Raft
//! group: its leader sends the publish ack only once a majority of the
//! replicas stored the message, so a send counts, as a replicated SQS send
//! does, once a quorum has it. How far "stored" is from the disk is the file
//! store's sync setting, which the server decides, not the client (see
//! docs/cluster-peers). Connection i opens on node i mod n of the URLs given.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::stream::{Config as StreamConfig, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, Context, Message};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::error::LoadError;
use crate::session::{Session, Target};

const CONSUMER: &str = "workers";

/// A work-queue stream on a NATS server with JetStream.
#[derive(Debug)]
pub(crate) struct NatsTarget {
    /// One URL per node; never empty.
    pub(crate) urls: Vec<String>,
    pub(crate) stream: String,
    pub(crate) lease_seconds: u32,
    /// `memory` or `file`.
    pub(crate) storage: StorageType,
    /// Copies of the stream on the cluster's nodes (1 on a single server).
    pub(crate) replicas: usize,
}

/// One client connection.
pub(crate) struct NatsSession {
    context: Context,
    consumer: PullConsumer,
    subject: String,
}

impl std::fmt::Debug for NatsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSession").field("subject", &self.subject).finish_non_exhaustive()
    }
}

fn nats_error(what: &str) -> impl Fn(&dyn std::fmt::Display) -> LoadError + '_ {
    move |e| LoadError::new(format!("NATS {what}: {e}"))
}

impl NatsTarget {
    async fn context(&self, index: usize) -> Result<Context, LoadError> {
        let url = &self.urls[index % self.urls.len()];
        let client = async_nats::connect(url)
            .await
            .map_err(|e| LoadError::new(format!("cannot connect to NATS at {url}: {e}")))?;
        Ok(jetstream::new(client))
    }

    fn stream_config(&self) -> StreamConfig {
        StreamConfig {
            name: self.stream.clone(),
            subjects: vec![format!("{}.jobs", self.stream)],
            retention: RetentionPolicy::WorkQueue,
            storage: self.storage,
            num_replicas: self.replicas,
            ..Default::default()
        }
    }
}

impl Target for NatsTarget {
    type Session = NatsSession;

    async fn prepare(&self) -> Result<(), LoadError> {
        let context = self.context(0).await?;
        let _ = context.delete_stream(&self.stream).await;
        let stream = context.create_stream(self.stream_config()).await.map_err(|e| nats_error("create stream")(&e))?;
        stream
            .create_consumer(pull::Config {
                durable_name: Some(CONSUMER.to_string()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(u64::from(self.lease_seconds)),
                max_ack_pending: 100_000,
                ..Default::default()
            })
            .await
            .map_err(|e| nats_error("create consumer")(&e))?;
        Ok(())
    }

    async fn connect(&self, index: usize) -> Result<NatsSession, LoadError> {
        let context = self.context(index).await?;
        let stream = context.get_stream(&self.stream).await.map_err(|e| nats_error("get stream")(&e))?;
        let consumer: PullConsumer = stream.get_consumer(CONSUMER).await.map_err(|e| nats_error("get consumer")(&e))?;
        Ok(NatsSession { context, consumer, subject: format!("{}.jobs", self.stream) })
    }

    async fn finish(&self) -> Result<(), LoadError> {
        let context = self.context(0).await?;
        context.delete_stream(&self.stream).await.map_err(|e| nats_error("delete stream")(&e))?;
        Ok(())
    }
}

impl Session for NatsSession {
    type Handle = Message;

    async fn send(&mut self, bodies: &[Bytes]) -> Result<(), LoadError> {
        let mut acks = Vec::with_capacity(bodies.len());
        for body in bodies {
            let ack = self
                .context
                .publish(self.subject.clone(), body.clone())
                .await
                .map_err(|e| nats_error("publish")(&e))?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await.map_err(|e| nats_error("publish ack")(&e))?;
        }
        Ok(())
    }

    async fn receive(&mut self, max: usize) -> Result<Vec<Message>, LoadError> {
        let mut batch =
            self.consumer.fetch().max_messages(max).messages().await.map_err(|e| nats_error("fetch")(&e))?;
        let mut messages = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            messages.push(message.map_err(|e| nats_error("fetch")(&e))?);
        }
        Ok(messages)
    }

    async fn delete(&mut self, messages: Vec<Message>) -> Result<u64, LoadError> {
        for message in &messages {
            message.ack().await.map_err(|e| nats_error("ack")(&*e))?;
        }
        Ok(messages.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicated_stream_asks_for_its_replicas_and_storage() {
        let target = NatsTarget {
            urls: vec!["nats://127.0.0.1:1".into()],
            stream: "s".into(),
            lease_seconds: 30,
            storage: StorageType::File,
            replicas: 3,
        };
        let config = target.stream_config();
        assert_eq!((config.num_replicas, config.storage), (3, StorageType::File));
        assert_eq!(config.retention, RetentionPolicy::WorkQueue);
        assert_eq!(config.subjects, vec!["s.jobs".to_string()]);
    }
}
