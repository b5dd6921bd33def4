//! RabbitMQ over AMQP 0-9-1 (the `lapin` crate), the pattern RabbitMQ's
//! reliability guide documents: publisher confirms on the sending side, a
//! consumer with manual acks and a prefetch (QoS) window on the receiving
//! side. One connection per worker with one channel for both.
//!
//! A batch publishes ten messages and then waits for their confirms, and acks
//! with `multiple` (one frame for all tags up to the last). Deliveries are
//! pushed, so "receive" waits for the next delivery (at most a second) and
//! takes whatever else is already buffered, up to the batch. Acks have no
//! reply in AMQP: "delete" is the time to hand the frame to the connection.
//! By default the queue is a classic, non-durable queue with transient
//! messages, the in-memory setting closest to leaseq-server's default. With
//! `quorum` it is a durable quorum queue (`x-queue-type: quorum`, Raft over
//! the cluster's nodes) with persistent messages (delivery mode 2): a publish
//! is confirmed only once a majority of its members wrote it to their logs,
//! so a confirmed send is what a replicated SQS send is, committed on a
//! quorum. RabbitMQ has no per-message lease: an unacked delivery returns
//! when its channel closes (or after the 30-minute consumer timeout).
//!
//! Connection i opens on node i mod n of the URIs given; the queue is
//! declared through the first, where a quorum queue's leader is placed.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};

use crate::error::LoadError;
use crate::session::{Session, Target};

/// Unacked deliveries a consumer may hold.
const PREFETCH: u16 = 100;

/// Delivery mode of a message written to disk (AMQP 0-9-1 basic properties).
const PERSISTENT: u8 = 2;

/// A queue on a RabbitMQ server or cluster.
#[derive(Debug)]
pub(crate) struct AmqpTarget {
    /// One URI per node; never empty.
    pub(crate) uris: Vec<String>,
    pub(crate) queue: String,
    /// A durable quorum queue with persistent messages, else a classic
    /// transient one.
    pub(crate) quorum: bool,
}

impl AmqpTarget {
    fn uri(&self, index: usize) -> &str {
        &self.uris[index % self.uris.len()]
    }

    /// The declaration: options and arguments.
    fn declaration(&self) -> (QueueDeclareOptions, FieldTable) {
        let mut arguments = FieldTable::default();
        if self.quorum {
            arguments.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
        }
        (QueueDeclareOptions { durable: self.quorum, ..QueueDeclareOptions::default() }, arguments)
    }

    fn properties(&self) -> BasicProperties {
        if self.quorum { BasicProperties::default().with_delivery_mode(PERSISTENT) } else { BasicProperties::default() }
    }
}

/// One connection and its channel.
pub(crate) struct AmqpSession {
    // Kept so the connection lives as long as the session.
    _connection: Connection,
    channel: Channel,
    consumer: Consumer,
    queue: String,
    properties: BasicProperties,
}

impl std::fmt::Debug for AmqpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSession").field("queue", &self.queue).finish_non_exhaustive()
    }
}

async fn open_channel(uri: &str) -> Result<(Connection, Channel), LoadError> {
    let connection = Connection::connect(uri, ConnectionProperties::default())
        .await
        .map_err(|e| LoadError::new(format!("cannot connect to RabbitMQ at {uri}: {e}")))?;
    let channel = connection.create_channel().await?;
    Ok((connection, channel))
}

impl Target for AmqpTarget {
    type Session = AmqpSession;

    async fn prepare(&self) -> Result<(), LoadError> {
        let (connection, channel) = open_channel(self.uri(0)).await?;
        channel.queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default()).await?;
        let (options, arguments) = self.declaration();
        channel.queue_declare(self.queue.as_str().into(), options, arguments).await?;
        connection.close(200, "prepared".into()).await?;
        Ok(())
    }

    async fn connect(&self, index: usize) -> Result<AmqpSession, LoadError> {
        let (connection, channel) = open_channel(self.uri(index)).await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        channel.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
        let consumer = channel
            .basic_consume(
                self.queue.as_str().into(),
                format!("loadgen-{index}").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(AmqpSession {
            _connection: connection,
            channel,
            consumer,
            queue: self.queue.clone(),
            properties: self.properties(),
        })
    }

    async fn finish(&self) -> Result<(), LoadError> {
        let (connection, channel) = open_channel(self.uri(0)).await?;
        channel.queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default()).await?;
        connection.close(200, "finished".into()).await?;
        Ok(())
    }
}

impl Session for AmqpSession {
    type Handle = u64;

    async fn send(&mut self, bodies: &[Bytes]) -> Result<(), LoadError> {
        let mut confirms = Vec::with_capacity(bodies.len());
        for body in bodies {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    self.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body,
                    self.properties.clone(),
                )
                .await?;
            confirms.push(confirm);
        }
        for confirm in confirms {
            if !confirm.await?.is_ack() {
                return Err(LoadError::new("RabbitMQ nacked a publish"));
            }
        }
        Ok(())
    }

    async fn receive(&mut self, max: usize) -> Result<Vec<u64>, LoadError> {
        let mut tags = Vec::with_capacity(max);
        match tokio::time::timeout(Duration::from_secs(1), self.consumer.next()).await {
            Err(_) | Ok(None) => return Ok(tags),
            Ok(Some(delivery)) => tags.push(delivery?.delivery_tag),
        }
        while tags.len() < max {
            match self.consumer.next().now_or_never() {
                Some(Some(delivery)) => tags.push(delivery?.delivery_tag),
                _ => break,
            }
        }
        Ok(tags)
    }

    async fn delete(&mut self, tags: Vec<u64>) -> Result<u64, LoadError> {
        // Tags on a channel rise in delivery order and this worker takes its
        // deliveries in order, so "all up to the last" is exactly these.
        let Some(&last) = tags.last() else { return Ok(0) };
        let multiple = tags.len() > 1;
        self.channel.basic_ack(last, BasicAckOptions { multiple }).await?;
        Ok(tags.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(quorum: bool) -> AmqpTarget {
        AmqpTarget { uris: vec!["amqp://a".into(), "amqp://b".into()], queue: "q".into(), quorum }
    }

    #[test]
    fn a_quorum_queue_is_durable_typed_and_its_messages_persistent() {
        let (options, arguments) = target(true).declaration();
        assert!(options.durable);
        assert_eq!(
            arguments.inner().get("x-queue-type").map(|v| format!("{v:?}")),
            Some(format!("{:?}", AMQPValue::LongString("quorum".into())))
        );
        assert_eq!(*target(true).properties().delivery_mode(), Some(PERSISTENT));
    }

    #[test]
    fn a_classic_queue_stays_transient() {
        let (options, arguments) = target(false).declaration();
        assert!(!options.durable);
        assert!(arguments.inner().is_empty());
        assert_eq!(*target(false).properties().delivery_mode(), None);
    }

    #[test]
    fn connections_spread_over_the_nodes() {
        let t = target(false);
        assert_eq!([t.uri(0), t.uri(1), t.uri(2)], ["amqp://a", "amqp://b", "amqp://a"]);
    }
}
