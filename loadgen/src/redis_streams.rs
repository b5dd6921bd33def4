//! Redis Streams as a work queue, the pattern Redis documents for consumer
//! groups: XADD to send, XREADGROUP ... COUNT n STREAMS s > to receive (the
//! entry stays in the group's pending list: the lease), XACK then XDEL to
//! delete (XACK alone keeps the entry in the stream forever), and XAUTOCLAIM
//! once a second per connection to take over entries pending longer than the
//! lease. A batch pipelines ten XADDs; XACK and XDEL take many ids.

use std::net::SocketAddr;

use bytes::Bytes;

use crate::error::LoadError;
use crate::resp::{Reply, RespConnection};
use crate::session::{Session, Target};

const GROUP: &[u8] = b"workers";

/// A stream and its consumer group.
#[derive(Debug)]
pub(crate) struct RedisTarget {
    pub(crate) address: SocketAddr,
    pub(crate) stream: String,
    pub(crate) lease_seconds: u32,
}

/// One connection, one consumer name.
#[derive(Debug)]
pub(crate) struct RedisSession {
    connection: RespConnection,
    stream: Vec<u8>,
    consumer: Vec<u8>,
    lease_millis: Vec<u8>,
}

fn check(what: &str, reply: &Reply) -> Result<(), LoadError> {
    match reply {
        Reply::Error(e) => Err(LoadError::new(format!("redis {what}: {e}"))),
        _ => Ok(()),
    }
}

/// The entry ids in an XREADGROUP or XAUTOCLAIM list of `[id, fields]`.
fn entry_ids(entries: &Reply) -> Vec<Vec<u8>> {
    let Reply::Array(Some(entries)) = entries else { return Vec::new() };
    entries
        .iter()
        .filter_map(|entry| match entry {
            Reply::Array(Some(parts)) => match parts.first() {
                Some(Reply::Bulk(Some(id))) => Some(id.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

impl Target for RedisTarget {
    type Session = RedisSession;

    async fn prepare(&self) -> Result<(), LoadError> {
        let mut connection = RespConnection::open(self.address).await?;
        connection.command(&[b"DEL", self.stream.as_bytes()]);
        connection.command(&[b"XGROUP", b"CREATE", self.stream.as_bytes(), GROUP, b"0", b"MKSTREAM"]);
        for reply in connection.round_trip().await? {
            check("XGROUP CREATE", &reply)?;
        }
        Ok(())
    }

    async fn connect(&self, index: usize) -> Result<RedisSession, LoadError> {
        Ok(RedisSession {
            connection: RespConnection::open(self.address).await?,
            stream: self.stream.as_bytes().to_vec(),
            consumer: format!("consumer-{index}").into_bytes(),
            lease_millis: (u64::from(self.lease_seconds) * 1000).to_string().into_bytes(),
        })
    }

    async fn finish(&self) -> Result<(), LoadError> {
        let mut connection = RespConnection::open(self.address).await?;
        connection.command(&[b"DEL", self.stream.as_bytes()]);
        connection.round_trip().await.map(drop)
    }
}

impl Session for RedisSession {
    type Handle = Vec<u8>;

    async fn send(&mut self, bodies: &[Bytes]) -> Result<(), LoadError> {
        for body in bodies {
            self.connection.command(&[b"XADD", &self.stream, b"*", b"body", body]);
        }
        for reply in self.connection.round_trip().await? {
            check("XADD", &reply)?;
        }
        Ok(())
    }

    async fn receive(&mut self, max: usize) -> Result<Vec<Vec<u8>>, LoadError> {
        let count = max.to_string();
        self.connection.command(&[
            b"XREADGROUP",
            b"GROUP",
            GROUP,
            &self.consumer,
            b"COUNT",
            count.as_bytes(),
            b"STREAMS",
            &self.stream,
            b">",
        ]);
        let reply = self.connection.round_trip().await?.remove(0);
        check("XREADGROUP", &reply)?;
        // [[stream, [[id, fields], ...]]], or nil when nothing is new.
        let Reply::Array(Some(streams)) = reply else { return Ok(Vec::new()) };
        Ok(streams
            .iter()
            .flat_map(|s| match s {
                Reply::Array(Some(parts)) if parts.len() == 2 => entry_ids(&parts[1]),
                _ => Vec::new(),
            })
            .collect())
    }

    async fn delete(&mut self, ids: Vec<Vec<u8>>) -> Result<u64, LoadError> {
        let mut ack: Vec<&[u8]> = vec![b"XACK", &self.stream, GROUP];
        ack.extend(ids.iter().map(Vec::as_slice));
        self.connection.command(&ack);
        let mut del: Vec<&[u8]> = vec![b"XDEL", &self.stream];
        del.extend(ids.iter().map(Vec::as_slice));
        self.connection.command(&del);
        let replies = self.connection.round_trip().await?;
        for reply in &replies {
            check("XACK/XDEL", reply)?;
        }
        // XACK counts the entries still pending for the group: one another
        // consumer claimed and acked is not.
        match replies.first() {
            Some(Reply::Integer(acked)) => Ok(u64::try_from(*acked).unwrap_or(0)),
            other => Err(LoadError::new(format!("redis XACK: unexpected reply {other:?}"))),
        }
    }

    async fn reclaim(&mut self) -> Result<Option<Vec<Vec<u8>>>, LoadError> {
        self.connection.command(&[
            b"XAUTOCLAIM",
            &self.stream,
            GROUP,
            &self.consumer,
            &self.lease_millis,
            b"0-0",
            b"COUNT",
            b"10",
        ]);
        let reply = self.connection.round_trip().await?.remove(0);
        check("XAUTOCLAIM", &reply)?;
        // [next-cursor, [[id, fields], ...], [deleted ids]]
        let claimed = match &reply {
            Reply::Array(Some(parts)) if parts.len() >= 2 => entry_ids(&parts[1]),
            _ => Vec::new(),
        };
        Ok(Some(claimed))
    }
}
