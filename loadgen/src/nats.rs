//! NATS JetStream as a work queue (the `async-nats` crate): a stream with the
//! work-queue retention policy (a message is removed once acked), one durable
//! pull consumer shared by all connections, explicit acks, AckWait as the
//! lease. Sends wait for the stream's publish ack; a batch publishes ten and
//! then waits for the ten acks. Receives are `fetch` requests for up to the
//! batch that answer at once when nothing is pending. Acks are sent without
//! waiting for the server (async-nats' `ack`, like AMQP's), ten per batch: a
//! shared consumer cannot use AckAll.

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
    pub(crate) url: String,
    pub(crate) stream: String,
    pub(crate) lease_seconds: u32,
    /// `memory` or `file`.
    pub(crate) storage: StorageType,
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
    async fn context(&self) -> Result<Context, LoadError> {
        let client = async_nats::connect(&self.url)
            .await
            .map_err(|e| LoadError::new(format!("cannot connect to NATS at {}: {e}", self.url)))?;
        Ok(jetstream::new(client))
    }
}

impl Target for NatsTarget {
    type Session = NatsSession;

    async fn prepare(&self) -> Result<(), LoadError> {
        let context = self.context().await?;
        let _ = context.delete_stream(&self.stream).await;
        let stream = context
            .create_stream(StreamConfig {
                name: self.stream.clone(),
                subjects: vec![format!("{}.jobs", self.stream)],
                retention: RetentionPolicy::WorkQueue,
                storage: self.storage,
                ..Default::default()
            })
            .await
            .map_err(|e| nats_error("create stream")(&e))?;
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

    async fn connect(&self, _index: usize) -> Result<NatsSession, LoadError> {
        let context = self.context().await?;
        let stream = context.get_stream(&self.stream).await.map_err(|e| nats_error("get stream")(&e))?;
        let consumer: PullConsumer = stream.get_consumer(CONSUMER).await.map_err(|e| nats_error("get consumer")(&e))?;
        Ok(NatsSession { context, consumer, subject: format!("{}.jobs", self.stream) })
    }

    async fn finish(&self) -> Result<(), LoadError> {
        let context = self.context().await?;
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
