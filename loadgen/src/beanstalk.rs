//! beanstalkd's text protocol, by hand: `put` with a TTR (the lease),
//! `reserve-with-timeout 0` (answers at once when the tube is empty) and
//! `delete`. beanstalkd has no batch commands, so a batch is ten commands
//! pipelined in one write, their replies read in order: one round trip, as
//! the other peers' batches.

use std::net::SocketAddr;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::error::LoadError;
use crate::session::{Session, Target};

/// A tube on a beanstalkd server.
#[derive(Debug)]
pub(crate) struct BeanstalkTarget {
    pub(crate) address: SocketAddr,
    pub(crate) tube: String,
    pub(crate) lease_seconds: u32,
}

/// One connection, using and watching only the benchmark's tube.
#[derive(Debug)]
pub(crate) struct BeanstalkSession {
    stream: BufReader<TcpStream>,
    lease_seconds: u32,
    out: Vec<u8>,
    line: String,
}

impl BeanstalkSession {
    async fn open(target: &BeanstalkTarget) -> Result<Self, LoadError> {
        let stream = TcpStream::connect(target.address)
            .await
            .map_err(|e| LoadError::new(format!("cannot connect to beanstalkd at {}: {e}", target.address)))?;
        stream.set_nodelay(true)?;
        let mut session = BeanstalkSession {
            stream: BufReader::new(stream),
            lease_seconds: target.lease_seconds,
            out: Vec::new(),
            line: String::new(),
        };
        let tube = &target.tube;
        session.out.extend_from_slice(format!("use {tube}\r\nwatch {tube}\r\nignore default\r\n").as_bytes());
        session.flush().await?;
        for expected in ["USING", "WATCHING", "WATCHING"] {
            let line = session.reply_line().await?;
            if !line.starts_with(expected) {
                return Err(LoadError::new(format!("beanstalkd: expected {expected}, got {line:?}")));
            }
        }
        Ok(session)
    }

    async fn flush(&mut self) -> Result<(), LoadError> {
        self.stream.get_mut().write_all(&self.out).await?;
        self.out.clear();
        Ok(())
    }

    async fn reply_line(&mut self) -> Result<String, LoadError> {
        self.line.clear();
        if self.stream.read_line(&mut self.line).await? == 0 {
            return Err(LoadError::new("beanstalkd closed the connection"));
        }
        Ok(self.line.trim_end().to_string())
    }
}

impl Target for BeanstalkTarget {
    type Session = BeanstalkSession;

    async fn prepare(&self) -> Result<(), LoadError> {
        // Tubes exist while used or watched: nothing to create.
        BeanstalkSession::open(self).await.map(drop)
    }

    async fn connect(&self, _index: usize) -> Result<BeanstalkSession, LoadError> {
        BeanstalkSession::open(self).await
    }

    async fn finish(&self) -> Result<(), LoadError> {
        Ok(())
    }
}

impl Session for BeanstalkSession {
    type Handle = u64;

    async fn send(&mut self, bodies: &[Bytes]) -> Result<(), LoadError> {
        for body in bodies {
            // Priority 0, no delay, the lease as TTR.
            self.out.extend_from_slice(format!("put 0 0 {} {}\r\n", self.lease_seconds, body.len()).as_bytes());
            self.out.extend_from_slice(body);
            self.out.extend_from_slice(b"\r\n");
        }
        self.flush().await?;
        for _ in bodies {
            let line = self.reply_line().await?;
            if !line.starts_with("INSERTED") {
                return Err(LoadError::new(format!("beanstalkd put: {line:?}")));
            }
        }
        Ok(())
    }

    async fn receive(&mut self, max: usize) -> Result<Vec<u64>, LoadError> {
        for _ in 0..max {
            self.out.extend_from_slice(b"reserve-with-timeout 0\r\n");
        }
        self.flush().await?;
        let mut ids = Vec::with_capacity(max);
        for _ in 0..max {
            let line = self.reply_line().await?;
            let mut words = line.split(' ');
            match (words.next(), words.next(), words.next()) {
                (Some("RESERVED"), Some(id), Some(bytes)) => {
                    let id = id.parse().map_err(|_| LoadError::new(format!("beanstalkd: bad id in {line:?}")))?;
                    let bytes: usize =
                        bytes.parse().map_err(|_| LoadError::new(format!("beanstalkd: bad size in {line:?}")))?;
                    let mut body = vec![0; bytes + 2];
                    self.stream.read_exact(&mut body).await?;
                    ids.push(id);
                }
                (Some("TIMED_OUT"), ..) | (Some("DEADLINE_SOON"), ..) => {}
                _ => return Err(LoadError::new(format!("beanstalkd reserve: {line:?}"))),
            }
        }
        Ok(ids)
    }

    async fn delete(&mut self, ids: Vec<u64>) -> Result<u64, LoadError> {
        for id in &ids {
            self.out.extend_from_slice(format!("delete {id}\r\n").as_bytes());
        }
        self.flush().await?;
        let mut deleted = 0;
        for _ in &ids {
            // NOT_FOUND: the TTR ran out and the job went back (or to another
            // worker), so its lease is lost.
            match self.reply_line().await?.as_str() {
                "DELETED" => deleted += 1,
                "NOT_FOUND" => {}
                line => return Err(LoadError::new(format!("beanstalkd delete: {line:?}"))),
            }
        }
        Ok(deleted)
    }
}
