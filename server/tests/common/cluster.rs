//! A `leaseq-server --cluster` group of real processes on loopback, each
//! with its own port and data dir, that a test can kill (-9), pause
//! (SIGSTOP), resume and restart; and a plain SQS client whose every call
//! is bounded in time and reports a transport failure as "unknown" (the call
//! may or may not have taken effect), never as a panic.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Raft's shortest election timeout the test groups run with (ms).
pub const ELECTION_MS: u64 = 300;

/// One node of a test group.
pub struct ProcessNode {
    pub id: u64,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl ProcessNode {
    /// Whether its process runs (it may be paused).
    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it runs and is not paused.
    pub fn is_live(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A group of `leaseq-server --cluster` processes.
pub struct ProcessCluster {
    pub nodes: BTreeMap<u64, ProcessNode>,
    pub root: PathBuf,
    peers: Vec<String>,
    /// Flags every node gets besides the cluster's own.
    extra: Vec<String>,
    /// The group's secret, when its nodes were given one: the harness's own
    /// `/cluster/` requests are signed with it.
    pub secret: Option<leaseq_cluster::ClusterSecret>,
}

/// The secret `start_signed` gives a group (64 hex digits, as `openssl
/// rand -hex 32` makes).
pub const TEST_SECRET: &str = "5f0c1d2e3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f";

/// A free loopback port (bound, read, released: a small race that a test
/// on loopback can live with).
fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    listener.local_addr().unwrap()
}

impl ProcessCluster {
    /// `n` nodes (ids 1..=n), node 1 bootstrapping the group, under a fresh
    /// temp dir named after `test`.
    pub fn start(test: &str, n: u64) -> ProcessCluster {
        Self::start_with(test, n, Vec::new())
    }

    /// Like `start`, every node also given `extra` flags.
    pub fn start_with(test: &str, n: u64, extra: Vec<String>) -> ProcessCluster {
        Self::launch(test, n, extra, false)
    }

    /// Like `start_with`, every node given `--cluster-secret-file` with
    /// `TEST_SECRET` (the file is `secret_file()`).
    pub fn start_signed(test: &str, n: u64, extra: Vec<String>) -> ProcessCluster {
        Self::launch(test, n, extra, true)
    }

    /// The file holding `TEST_SECRET`, under the group's dir.
    pub fn secret_file(&self) -> PathBuf {
        self.root.join("cluster.secret")
    }

    fn launch(test: &str, n: u64, mut extra: Vec<String>, signed: bool) -> ProcessCluster {
        let root = std::env::temp_dir().join(format!("leaseq-cluster-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let mut secret = None;
        if signed {
            let file = root.join("cluster.secret");
            std::fs::write(&file, format!("{TEST_SECRET}\n")).unwrap();
            extra.extend(["--cluster-secret-file".to_string(), file.display().to_string()]);
            secret = Some(leaseq_cluster::ClusterSecret::new(TEST_SECRET).unwrap());
        }
        let addrs: Vec<(u64, SocketAddr)> = (1..=n).map(|id| (id, free_port())).collect();
        let peers = addrs.iter().map(|(id, addr)| format!("{id}={addr}")).collect();
        let mut cluster = ProcessCluster { nodes: BTreeMap::new(), root: root.clone(), peers, extra, secret };
        for (id, addr) in addrs {
            let data_dir = root.join(format!("node{id}"));
            let log = root.join(format!("node{id}.log"));
            cluster.nodes.insert(id, ProcessNode { id, addr, data_dir, log, child: None, paused: false });
            cluster.spawn(id);
        }
        cluster
    }

    /// Starts node `id` (again) from its data dir.
    pub fn spawn(&mut self, id: u64) {
        self.spawn_told_of(id, &[]);
    }

    /// Like `spawn`, node `id` also told of `extra_peers` (`id=addr`) that
    /// the other nodes do not know.
    fn spawn_told_of(&mut self, id: u64, extra_peers: &[String]) {
        let peers: Vec<String> = self.peers.iter().chain(extra_peers).cloned().collect();
        let extra = self.extra.clone();
        let node = self.nodes.get_mut(&id).expect("a member");
        assert!(node.child.is_none(), "node {id} already runs");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&node.log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_leaseq-server"));
        command
            .args(["--cluster", "--node-id", &id.to_string(), "--bind", &node.addr.to_string()])
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(["--election-timeout-ms", &ELECTION_MS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for peer in &peers {
            command.args(["--peer", peer]);
        }
        command.args(&extra);
        if id == 1 {
            command.arg("--bootstrap");
        }
        node.child = Some(command.spawn().expect("start leaseq-server"));
        node.paused = false;
    }

    /// Adds node `id` as a new process (not yet a member: the test adds it).
    pub fn spawn_new(&mut self, id: u64) -> SocketAddr {
        self.spawn_new_told_of(id, &[])
    }

    fn spawn_new_told_of(&mut self, id: u64, extra_peers: &[String]) -> SocketAddr {
        let addr = free_port();
        let data_dir = self.root.join(format!("node{id}"));
        let log = self.root.join(format!("node{id}.log"));
        self.peers.push(format!("{id}={addr}"));
        self.nodes.insert(id, ProcessNode { id, addr, data_dir, log, child: None, paused: false });
        self.spawn_told_of(id, extra_peers);
        addr
    }

    /// Like `spawn_new`, but node `id` is also told of a peer at a port
    /// where nothing listens, so its check of its peers (the rejoin
    /// interlock) runs its whole window before it takes part in Raft.
    pub fn spawn_new_slow_to_check(&mut self, id: u64) -> SocketAddr {
        let nobody = free_port();
        self.spawn_new_told_of(id, &[format!("{}={nobody}", id + 100)])
    }

    /// `kill -9` of node `id`, waited for.
    pub fn kill(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.paused = false;
    }

    fn signal(pid: u32, signal: &str) {
        let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Waits up to `within` for node `id`'s process to exit by itself, and
    /// returns how it exited (`None`: it still runs).
    pub fn wait_exit(&mut self, id: u64, within: Duration) -> Option<std::process::ExitStatus> {
        let node = self.nodes.get_mut(&id).unwrap();
        let deadline = Instant::now() + within;
        loop {
            let child = node.child.as_mut().expect("node runs");
            if let Some(status) = child.try_wait().expect("poll the child") {
                node.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Deletes node `id`'s data dir (the node must not run), as a lost disk
    /// would.
    pub fn wipe(&mut self, id: u64) {
        let node = &self.nodes[&id];
        assert!(node.child.is_none(), "node {id} still runs");
        std::fs::remove_dir_all(&node.data_dir).unwrap();
    }

    /// SIGSTOP of node `id`.
    pub fn pause(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        Self::signal(node.pid().expect("running"), "-STOP");
        node.paused = true;
    }

    /// SIGCONT of node `id`.
    pub fn resume(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        Self::signal(node.pid().expect("running"), "-CONT");
        node.paused = false;
    }

    pub fn addr(&self, id: u64) -> SocketAddr {
        self.nodes[&id].addr
    }

    pub fn live(&self) -> Vec<u64> {
        self.nodes.values().filter(|n| n.is_live()).map(|n| n.id).collect()
    }

    /// The auth header line for a request to `path` with `body` (empty
    /// without a secret).
    pub fn auth_line(&self, method: &str, path: &str, body: &[u8]) -> String {
        match &self.secret {
            Some(secret) => format!(
                "{}: {}\r\n",
                leaseq_cluster::AUTH_HEADER,
                secret.sign(method, path, body, leaseq_cluster::unix_now_ms())
            ),
            None => String::new(),
        }
    }

    /// Node `id`'s `/cluster/status`, if it answers within a second.
    pub async fn status(&self, id: u64) -> Option<Value> {
        let addr = self.addr(id);
        let auth = self.auth_line("GET", "/cluster/status", b"");
        let request = format!("GET /cluster/status HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n");
        let reply = exchange(addr, request.as_bytes(), Duration::from_secs(1)).await.ok()?;
        (reply.status == 200).then_some(reply.json)
    }

    /// Waits (up to `within`) until a live node says it serves, and
    /// returns its id.
    pub async fn serving_leader(&self, within: Duration) -> Option<u64> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            for id in self.live() {
                if let Some(status) = self.status(id).await
                    && status["serving"] == json!(true)
                {
                    return Some(id);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// The end of node `id`'s log file (for failure messages).
    pub fn log_tail(&self, id: u64) -> String {
        let text = std::fs::read_to_string(&self.nodes[&id].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Every node's log tail.
    pub fn logs(&self) -> String {
        self.nodes.keys().map(|id| format!("--- node {id}\n{}\n", self.log_tail(*id))).collect()
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.nodes[&id].paused {
                self.resume(id);
            }
            self.kill(id);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// How `exchange` starts the error of a connection that was never made
/// (nothing was sent, so the call had no effect).
pub const NOT_CONNECTED: &str = "not connected";

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub json: Value,
    pub body: String,
    /// The answer carried `x-leaseq-not-applied: true`.
    pub not_applied: bool,
}

/// One request on a fresh connection, bounded by `limit`; `Err` when the
/// exchange did not complete (refused, reset, timed out).
pub async fn exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> Result<Reply, String> {
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("{NOT_CONNECTED}: {e}"))?;
        stream.write_all(request).await.map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(response)
    };
    let response = tokio::time::timeout(limit, talk).await.map_err(|_| format!("no answer within {limit:?}"))??;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("not an HTTP response: {text:?}"))?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or("no status")?;
    let json = serde_json::from_str(body).unwrap_or(Value::Null);
    let not_applied = head.lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case(leaseq_server::NOT_APPLIED_HEADER) && value.trim() == "true"
        })
    });
    Ok(Reply { status, json, body: body.to_string(), not_applied })
}

/// How an SQS call ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// 200 and its JSON.
    Ok(Value),
    /// An SQS error: the call did not take effect, as the server says
    /// (status and error type; 5xx ones may still have, see `is_unknown`).
    Refused { status: u16, code: String, message: String, not_applied: bool },
    /// No answer: the call may or may not have taken effect.
    Unknown(String),
}

impl Outcome {
    /// Whether the effect is unknown: no answer, or a 5xx (a write whose
    /// commit timed out may still commit).
    pub fn is_unknown(&self) -> bool {
        matches!(self, Outcome::Unknown(_)) || matches!(self, Outcome::Refused { status, .. } if *status >= 500)
    }
}

/// One SQS JSON call to node `addr`.
pub async fn sqs(addr: SocketAddr, action: &str, body: &Value, limit: Duration) -> Outcome {
    let body = body.to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Amz-Target: AmazonSQS.{action}\r\n\
         Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    match exchange(addr, request.as_bytes(), limit).await {
        Err(why) if why.starts_with(NOT_CONNECTED) => {
            Outcome::Refused { status: 0, code: "NotConnected".into(), message: why, not_applied: true }
        }
        Err(why) => Outcome::Unknown(why),
        Ok(reply) if reply.status == 200 => Outcome::Ok(reply.json),
        Ok(reply) => Outcome::Refused {
            status: reply.status,
            code: reply.json["__type"].as_str().unwrap_or("").rsplit('#').next().unwrap_or("").to_string(),
            message: reply.json["message"].as_str().unwrap_or(&reply.body).to_string(),
            not_applied: reply.not_applied,
        },
    }
}

/// A small deterministic generator (xorshift64*) for the clients' choices.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// A queue URL as the server builds it for `addr`.
pub fn queue_url(addr: SocketAddr, name: &str) -> String {
    format!("http://{addr}/000000000000/{name}")
}
