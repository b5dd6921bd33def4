//! The queues a user would pick instead of a durable leaseq, started by this
//! benchmark and driven by the same load at the same durability
//! (docs/durability.md, "Against the peers").
//!
//! Each peer gets a fresh data dir under the benchmark's directory (the same
//! file system as leaseq's log), a loopback port, and is stopped when its
//! row is done. A peer whose program is not installed is skipped with the
//! reason printed; nothing here installs anything.
//!
//! What "the same durability" means per class:
//! * `EveryWrite`: a call returns only after its change is on disk. Redis
//!   `appendfsync always`, beanstalkd `-b DIR -f 0`, SQLite WAL with
//!   `synchronous=FULL`; leaseq `SyncPolicy::Always`.
//! * `EverySecond`: a process crash loses nothing acknowledged, a power cut
//!   up to about a second. Redis `appendfsync everysec`, beanstalkd
//!   `-f 1000`, SQLite WAL with `synchronous=NORMAL` (syncs at checkpoints,
//!   so a power cut may lose more than a second there); leaseq
//!   `SyncPolicy::Interval(1 s)`.
//!
//! The load per message is one send, then one take-and-ack: Redis Streams
//! (`XADD`; `XREADGROUP` + `XACK` + `XDEL`, the last two in one round
//! trip), beanstalkd (`put`; `reserve-with-timeout 0` + `delete`), SQLite
//! (`INSERT`; an `UPDATE ... RETURNING` that leases the oldest visible row,
//! found by walking the rowid order past the rows other callers hold, then a
//! `DELETE`, each its own transaction, as leaseq logs the receive and the
//! ack; an index on `visible_at` made SQLite sort every visible row per
//! take, 3,000 takes/s against 9,000 without it). beanstalkd does not log a reserve, so its take is one disk
//! write cheaper than the others'.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long any one reply may take before the run is abandoned.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// One caller's connection to a queue.
pub trait Client: Send {
    /// Sends one message; returns once the queue has acknowledged it.
    fn send(&mut self, payload: &[u8]) -> io::Result<()>;
    /// Takes one ready message and acks it; `false` when none was ready.
    fn take_and_ack(&mut self) -> io::Result<bool>;
    /// Sends `n` messages with all `n` in flight at once, where the
    /// protocol allows it (Redis: one pipeline); returns once the queue has
    /// acknowledged every one.
    fn send_pipelined(&mut self, payload: &[u8], n: usize) -> io::Result<()> {
        (0..n).try_for_each(|_| self.send(payload))
    }
    /// Whether `send_pipelined` really keeps them in flight together.
    fn pipelines(&self) -> bool {
        false
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Durability {
    EveryWrite,
    EverySecond,
}

#[derive(Clone, Copy, Debug)]
pub enum Peer {
    Redis,
    Beanstalkd,
    Sqlite,
}

impl Peer {
    pub const ALL: [Peer; 3] = [Peer::Redis, Peer::Beanstalkd, Peer::Sqlite];

    /// The row label, with the settings that give it `durability`.
    pub fn label(self, durability: Durability) -> &'static str {
        match (self, durability) {
            (Peer::Redis, Durability::EveryWrite) => "Redis 7 AOF always",
            (Peer::Redis, Durability::EverySecond) => "Redis 7 AOF everysec",
            (Peer::Beanstalkd, Durability::EveryWrite) => "beanstalkd -b -f 0",
            (Peer::Beanstalkd, Durability::EverySecond) => "beanstalkd -b -f 1000",
            (Peer::Sqlite, Durability::EveryWrite) => "SQLite WAL FULL",
            (Peer::Sqlite, Durability::EverySecond) => "SQLite WAL NORMAL",
        }
    }

    /// Starts the peer on a fresh data dir under `base`; `Ok(Err(why))` when
    /// its program is not installed.
    pub fn start(self, durability: Durability, base: &Path) -> io::Result<Result<Running, String>> {
        let dir = base.join(format!("peer-{self:?}-{durability:?}").to_lowercase());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let program = match self {
            Peer::Redis => "redis-server",
            Peer::Beanstalkd => "beanstalkd",
            Peer::Sqlite => {
                let sync = match durability {
                    Durability::EveryWrite => "FULL",
                    Durability::EverySecond => "NORMAL",
                };
                let db = dir.join("queue.db");
                let conn = sqlite_open(&db, sync)?;
                conn.execute_batch(
                    "CREATE TABLE messages (id INTEGER PRIMARY KEY, payload BLOB NOT NULL, \
                     visible_at INTEGER NOT NULL, receives INTEGER NOT NULL DEFAULT 0);",
                )
                .map_err(sqlite_error)?;
                return Ok(Ok(Running { peer: self, dir, child: None, port: 0, sqlite: Some((db, sync)) }));
            }
        };
        if !installed(program) {
            return Ok(Err(format!("{program} is not installed (apt-get install {program})")));
        }
        let port = free_port()?;
        let mut command = Command::new(program);
        match (self, durability) {
            (Peer::Redis, _) => {
                let fsync = if durability == Durability::EveryWrite { "always" } else { "everysec" };
                command.args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", ""]).args([
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    fsync,
                    "--daemonize",
                    "no",
                ]);
                command.arg("--dir").arg(&dir);
            }
            (Peer::Beanstalkd, _) => {
                let fsync = if durability == Durability::EveryWrite { "0" } else { "1000" };
                command.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-f", fsync, "-b"]).arg(&dir);
            }
            (Peer::Sqlite, _) => unreachable!("SQLite is in-process"),
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        let running = Running { peer: self, dir, child: Some(child), port, sqlite: None };
        let started = Instant::now();
        loop {
            match running.connect() {
                Ok(_) => break,
                Err(_) if started.elapsed() < Duration::from_secs(10) => std::thread::sleep(Duration::from_millis(20)),
                Err(error) => return Err(io::Error::other(format!("{program} did not start: {error}"))),
            }
        }
        if let Peer::Redis = self {
            let mut setup = Resp::connect(port)?;
            setup.call(&[b"XGROUP", b"CREATE", b"q", b"g", b"$", b"MKSTREAM"])?;
        }
        Ok(Ok(running))
    }
}

/// A started peer; stopped (and its data dir removed) on drop.
pub struct Running {
    peer: Peer,
    dir: PathBuf,
    child: Option<Child>,
    port: u16,
    sqlite: Option<(PathBuf, &'static str)>,
}

impl Running {
    pub fn connect(&self) -> io::Result<Box<dyn Client>> {
        Ok(match self.peer {
            Peer::Redis => Box::new(RedisClient::connect(self.port)?),
            Peer::Beanstalkd => Box::new(BeanstalkClient::connect(self.port)?),
            Peer::Sqlite => {
                let (db, sync) = self.sqlite.as_ref().expect("SQLite has its database");
                Box::new(SqliteClient { conn: sqlite_open(db, sync)? })
            }
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn installed(program: &str) -> bool {
    Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
        || Command::new(program).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn connect(port: u16) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
    Ok(stream)
}

fn protocol_error(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

// ---- Redis (RESP2) ----

/// A reply in the Redis serialization protocol.
#[derive(Debug)]
enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

struct Resp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    out: Vec<u8>,
}

impl Resp {
    fn connect(port: u16) -> io::Result<Resp> {
        let stream = connect(port)?;
        Ok(Resp { reader: BufReader::new(stream.try_clone()?), writer: stream, out: Vec::new() })
    }

    /// Queues one command; `flush` sends every queued command at once.
    fn queue(&mut self, args: &[&[u8]]) {
        write!(self.out, "*{}\r\n", args.len()).unwrap();
        for arg in args {
            write!(self.out, "${}\r\n", arg.len()).unwrap();
            self.out.extend_from_slice(arg);
            self.out.extend_from_slice(b"\r\n");
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    fn call(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        self.queue(args);
        self.flush()?;
        match self.read()? {
            Value::Error(e) => Err(protocol_error(format!("redis: {e}"))),
            value => Ok(value),
        }
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end_matches("\r\n").to_string())
    }

    fn read(&mut self) -> io::Result<Value> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(line.len().min(1));
        let number = || rest.parse::<i64>().map_err(|_| protocol_error(format!("redis: bad length {rest:?}")));
        Ok(match kind {
            "+" => Value::Simple(rest.to_string()),
            "-" => Value::Error(rest.to_string()),
            ":" => Value::Int(number()?),
            "$" => match number()? {
                n if n < 0 => Value::Bulk(None),
                n => {
                    let mut body = vec![0u8; n as usize + 2];
                    self.reader.read_exact(&mut body)?;
                    body.truncate(n as usize);
                    Value::Bulk(Some(body))
                }
            },
            "*" => match number()? {
                n if n < 0 => Value::Array(None),
                n => Value::Array(Some((0..n).map(|_| self.read()).collect::<io::Result<_>>()?)),
            },
            _ => return Err(protocol_error(format!("redis: unexpected reply {line:?}"))),
        })
    }
}

struct RedisClient {
    resp: Resp,
    consumer: Vec<u8>,
}

impl RedisClient {
    fn connect(port: u16) -> io::Result<RedisClient> {
        static CONSUMERS: AtomicU64 = AtomicU64::new(0);
        let mut resp = Resp::connect(port)?;
        match resp.call(&[b"PING"])? {
            Value::Simple(pong) if pong == "PONG" => {}
            other => return Err(protocol_error(format!("redis PING: {other:?}"))),
        }
        Ok(RedisClient { resp, consumer: format!("c{}", CONSUMERS.fetch_add(1, Ordering::Relaxed)).into_bytes() })
    }
}

impl Client for RedisClient {
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        match self.resp.call(&[b"XADD", b"q", b"*", b"p", payload])? {
            Value::Bulk(Some(_)) => Ok(()),
            other => Err(protocol_error(format!("redis XADD: {other:?}"))),
        }
    }

    fn send_pipelined(&mut self, payload: &[u8], n: usize) -> io::Result<()> {
        for _ in 0..n {
            self.resp.queue(&[b"XADD", b"q", b"*", b"p", payload]);
        }
        self.resp.flush()?;
        for _ in 0..n {
            match self.resp.read()? {
                Value::Bulk(Some(_)) => {}
                other => return Err(protocol_error(format!("redis XADD: {other:?}"))),
            }
        }
        Ok(())
    }

    fn pipelines(&self) -> bool {
        true
    }

    fn take_and_ack(&mut self) -> io::Result<bool> {
        let reply =
            self.resp.call(&[b"XREADGROUP", b"GROUP", b"g", &self.consumer, b"COUNT", b"1", b"STREAMS", b"q", b">"])?;
        // [[stream, [[id, [field, value]]]]], or nil when nothing is new.
        let id = match reply {
            Value::Array(None) => return Ok(false),
            Value::Array(Some(mut streams)) => {
                let Some(Value::Array(Some(mut stream))) = streams.pop() else {
                    return Err(protocol_error("redis XREADGROUP: no stream"));
                };
                let Some(Value::Array(Some(mut entries))) = stream.pop() else {
                    return Err(protocol_error("redis XREADGROUP: no entries"));
                };
                match entries.pop() {
                    Some(Value::Array(Some(mut entry))) if !entry.is_empty() => match entry.swap_remove(0) {
                        Value::Bulk(Some(id)) => id,
                        other => return Err(protocol_error(format!("redis XREADGROUP id: {other:?}"))),
                    },
                    None => return Ok(false),
                    other => return Err(protocol_error(format!("redis XREADGROUP entry: {other:?}"))),
                }
            }
            other => return Err(protocol_error(format!("redis XREADGROUP: {other:?}"))),
        };
        self.resp.queue(&[b"XACK", b"q", b"g", &id]);
        self.resp.queue(&[b"XDEL", b"q", &id]);
        self.resp.flush()?;
        for _ in 0..2 {
            match self.resp.read()? {
                Value::Int(1) => {}
                other => return Err(protocol_error(format!("redis XACK/XDEL: {other:?}"))),
            }
        }
        Ok(true)
    }
}

// ---- beanstalkd ----

struct BeanstalkClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    out: Vec<u8>,
}

impl BeanstalkClient {
    fn connect(port: u16) -> io::Result<BeanstalkClient> {
        let stream = connect(port)?;
        let mut client =
            BeanstalkClient { reader: BufReader::new(stream.try_clone()?), writer: stream, out: Vec::new() };
        client.writer.write_all(b"stats\r\n")?;
        let reply = client.line()?;
        let Some(bytes) = reply.strip_prefix("OK ") else {
            return Err(protocol_error(format!("beanstalkd stats: {reply}")));
        };
        let mut body = vec![0u8; bytes.parse::<usize>().map_err(protocol_error)? + 2];
        client.reader.read_exact(&mut body)?;
        Ok(client)
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end_matches("\r\n").to_string())
    }
}

impl Client for BeanstalkClient {
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        self.out.clear();
        write!(self.out, "put 0 0 600 {}\r\n", payload.len())?;
        self.out.extend_from_slice(payload);
        self.out.extend_from_slice(b"\r\n");
        self.writer.write_all(&self.out)?;
        let reply = self.line()?;
        if reply.starts_with("INSERTED ") { Ok(()) } else { Err(protocol_error(format!("beanstalkd put: {reply}"))) }
    }

    fn take_and_ack(&mut self) -> io::Result<bool> {
        self.writer.write_all(b"reserve-with-timeout 0\r\n")?;
        let reply = self.line()?;
        if reply == "TIMED_OUT" {
            return Ok(false);
        }
        let mut fields = reply.split(' ');
        let (Some("RESERVED"), Some(id), Some(bytes)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(protocol_error(format!("beanstalkd reserve: {reply}")));
        };
        let mut body = vec![0u8; bytes.parse::<usize>().map_err(protocol_error)? + 2];
        self.reader.read_exact(&mut body)?;
        write!(self.writer, "delete {id}\r\n")?;
        let reply = self.line()?;
        if reply == "DELETED" { Ok(true) } else { Err(protocol_error(format!("beanstalkd delete: {reply}"))) }
    }
}

// ---- SQLite ----

fn sqlite_error(error: rusqlite::Error) -> io::Error {
    io::Error::other(format!("sqlite: {error}"))
}

fn sqlite_open(db: &Path, synchronous: &str) -> io::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(db).map_err(sqlite_error)?;
    conn.busy_timeout(REPLY_TIMEOUT).map_err(sqlite_error)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(sqlite_error)?;
    conn.pragma_update(None, "synchronous", synchronous).map_err(sqlite_error)?;
    Ok(conn)
}

struct SqliteClient {
    conn: rusqlite::Connection,
}

fn unix_millis() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl SqliteClient {
    /// Runs `f` in its own write transaction, begun `IMMEDIATE` so that a
    /// busy database waits in the busy handler (a deferred transaction that
    /// upgrades from read to write fails at once with "database is locked"
    /// when another connection committed in between).
    fn write<T>(&mut self, f: impl FnOnce(&rusqlite::Transaction) -> rusqlite::Result<T>) -> io::Result<T> {
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sqlite_error)?;
        let value = f(&tx).map_err(sqlite_error)?;
        tx.commit().map_err(sqlite_error)?;
        Ok(value)
    }
}

impl Client for SqliteClient {
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        self.write(|tx| {
            tx.prepare_cached("INSERT INTO messages (payload, visible_at) VALUES (?1, 0)")?.execute([payload]).map(drop)
        })
    }

    fn take_and_ack(&mut self) -> io::Result<bool> {
        let now = unix_millis();
        let leased: Option<i64> = self.write(|tx| {
            let mut lease = tx.prepare_cached(
                "UPDATE messages SET visible_at = ?1 + 600000, receives = receives + 1 WHERE id = \
                 (SELECT id FROM messages WHERE visible_at <= ?1 ORDER BY id LIMIT 1) RETURNING id",
            )?;
            let mut rows = lease.query([now])?;
            rows.next()?.map(|row| row.get(0)).transpose()
        })?;
        let Some(id) = leased else { return Ok(false) };
        self.write(|tx| tx.prepare_cached("DELETE FROM messages WHERE id = ?1")?.execute([id]).map(drop))?;
        Ok(true)
    }
}
