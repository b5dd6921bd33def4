//! RESP (the Redis protocol), by hand: commands as arrays of bulk strings,
//! replies parsed from a byte buffer, several commands pipelined per round
//! trip.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::LoadError;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// Parses one reply at the start of `input`: `Ok(None)` when it is not
/// complete yet, else the reply and the bytes it took.
pub(crate) fn parse(input: &[u8]) -> Result<Option<(Reply, usize)>, LoadError> {
    let Some(line_end) = input.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    let line = std::str::from_utf8(&input[1..line_end]).map_err(|_| LoadError::new("RESP: line is not UTF-8"))?;
    let after = line_end + 2;
    let number = || line.parse::<i64>().map_err(|_| LoadError::new(format!("RESP: bad number {line:?}")));
    match input.first() {
        Some(b'+') => Ok(Some((Reply::Status(line.to_string()), after))),
        Some(b'-') => Ok(Some((Reply::Error(line.to_string()), after))),
        Some(b':') => Ok(Some((Reply::Integer(number()?), after))),
        Some(b'$') => {
            let n = number()?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), after)));
            }
            let n = n as usize;
            if input.len() < after + n + 2 {
                return Ok(None);
            }
            Ok(Some((Reply::Bulk(Some(input[after..after + n].to_vec())), after + n + 2)))
        }
        Some(b'*') => {
            let n = number()?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), after)));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut at = after;
            for _ in 0..n {
                match parse(&input[at..])? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), at)))
        }
        Some(other) => Err(LoadError::new(format!("RESP: unexpected type byte {other:#x}"))),
        None => Ok(None),
    }
}

/// A pipelining connection.
#[derive(Debug)]
pub(crate) struct RespConnection {
    stream: TcpStream,
    out: Vec<u8>,
    input: Vec<u8>,
    pending: usize,
}

impl RespConnection {
    pub(crate) async fn open(address: SocketAddr) -> Result<Self, LoadError> {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|e| LoadError::new(format!("cannot connect to redis at {address}: {e}")))?;
        stream.set_nodelay(true)?;
        Ok(RespConnection { stream, out: Vec::new(), input: Vec::with_capacity(64 * 1024), pending: 0 })
    }

    /// Queues one command; nothing is sent until `round_trip`.
    pub(crate) fn command(&mut self, args: &[&[u8]]) {
        self.out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            self.out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
        self.pending += 1;
    }

    /// Sends the queued commands in one write and reads their replies.
    pub(crate) async fn round_trip(&mut self) -> Result<Vec<Reply>, LoadError> {
        self.stream.write_all(&self.out).await?;
        self.out.clear();
        let mut replies = Vec::with_capacity(self.pending);
        let mut consumed = 0;
        while replies.len() < self.pending {
            match parse(&self.input[consumed..])? {
                Some((reply, used)) => {
                    consumed += used;
                    replies.push(reply);
                }
                None => {
                    self.input.drain(..consumed);
                    consumed = 0;
                    if self.stream.read_buf(&mut self.input).await? == 0 {
                        return Err(LoadError::new("redis closed the connection"));
                    }
                }
            }
        }
        self.input.drain(..consumed);
        self.pending = 0;
        Ok(replies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_arrays_and_waits_for_partial_input() {
        let whole = b"*2\r\n$3\r\nabc\r\n*1\r\n:7\r\n+OK\r\n";
        let (reply, used) = parse(whole).unwrap().unwrap();
        assert_eq!(
            reply,
            Reply::Array(Some(vec![Reply::Bulk(Some(b"abc".to_vec())), Reply::Array(Some(vec![Reply::Integer(7)]))]))
        );
        assert_eq!(&whole[used..], b"+OK\r\n");
        for cut in 0..used {
            assert_eq!(parse(&whole[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(parse(b"*-1\r\n").unwrap(), Some((Reply::Array(None), 5)));
    }
}
