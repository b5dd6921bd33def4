//! Peer authentication: every request between cluster nodes (Raft's RPCs)
//! and to a node's `/cluster/` endpoints carries [`AUTH_HEADER`], an
//! HMAC-SHA256 keyed by the group's shared secret over the method, the
//! path, a timestamp and the SHA-256 of the body.
//!
//! Header value: `v1:<unix ms>:<64 lowercase hex digits of the MAC>`. The
//! MAC covers, each followed by a newline, the label `leaseq-cluster-auth
//! v1`, the method, the path (without the query), the timestamp in decimal,
//! and the hex SHA-256 of the body.
//!
//! Invariant: [`ClusterSecret::verify`] accepts a request only if its
//! header is well formed, its timestamp is within [`MAX_CLOCK_SKEW`] of the
//! verifier's clock, and its MAC, compared in constant time, is the one
//! this secret gives for exactly this method, path, timestamp and body. It
//! never panics, whatever the header holds.
//!
//! What it does not give: confidentiality (requests travel in clear), nor
//! protection against a replay of a captured request within the skew
//! window (docs/replication.md says what a replay can do).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The header a signed request carries.
pub const AUTH_HEADER: &str = "x-leaseq-cluster-auth";
/// The shortest secret accepted, in bytes (after trimming): 32 bytes, as
/// `openssl rand -hex 32` gives 64.
pub const MIN_SECRET_BYTES: usize = 32;
/// How far a request's timestamp may be from the verifier's clock, either
/// way. It bounds how long a captured request can be replayed; the nodes'
/// clocks must agree to well within it (NTP), as their leases already need.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// The version tag that starts a header value.
const VERSION: &str = "v1";
/// The first line of what is MACed, so a MAC made for another purpose with
/// the same key can never pass for this one.
const LABEL: &str = "leaseq-cluster-auth v1";
/// Hex digits of a SHA-256 MAC.
const MAC_HEX_LEN: usize = 64;

type HmacSha256 = Hmac<Sha256>;

/// Why a secret could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretError {
    /// The file could not be read as text.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The reason the system gave.
        reason: String,
    },
    /// The secret (after trimming) is shorter than [`MIN_SECRET_BYTES`].
    TooShort {
        /// Its length in bytes.
        len: usize,
        /// The least accepted.
        min: usize,
    },
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Unreadable { path, reason } => {
                write!(f, "cannot read the cluster secret file {}: {reason}", path.display())
            }
            SecretError::TooShort { len, min } => write!(
                f,
                "the cluster secret is {len} bytes, less than the {min} required; make one with \
                 `openssl rand -hex 32 > cluster.secret` and give every node the same file"
            ),
        }
    }
}

impl std::error::Error for SecretError {}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthRefusal {
    /// No [`AUTH_HEADER`] (or more than one).
    Missing,
    /// The header is not `v1:<ms>:<hex MAC>`; why, in words.
    Malformed(&'static str),
    /// The timestamp is further than [`MAX_CLOCK_SKEW`] from this node's
    /// clock.
    Skewed {
        /// The request's timestamp (unix ms).
        stamp_ms: u64,
        /// This node's clock (unix ms).
        now_ms: u64,
    },
    /// The MAC is not this secret's for this request: another secret, or a
    /// changed method, path, timestamp or body.
    BadMac,
}

impl fmt::Display for AuthRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthRefusal::Missing => write!(f, "the request carries no single {AUTH_HEADER} header"),
            AuthRefusal::Malformed(why) => write!(f, "the {AUTH_HEADER} header is malformed: {why}"),
            AuthRefusal::Skewed { stamp_ms, now_ms } => write!(
                f,
                "the request's timestamp {stamp_ms} is more than {} s from this node's clock {now_ms} \
                 (replayed, or the clocks disagree)",
                MAX_CLOCK_SKEW.as_secs()
            ),
            AuthRefusal::BadMac => write!(f, "the request's MAC does not verify (another cluster secret?)"),
        }
    }
}

impl std::error::Error for AuthRefusal {}

/// The group's shared secret, held only as a keyed HMAC state (cloned for
/// each request). Its `Debug` never shows it.
#[derive(Clone)]
pub struct ClusterSecret {
    keyed: HmacSha256,
    len: usize,
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSecret").field("bytes", &self.len).finish_non_exhaustive()
    }
}

impl ClusterSecret {
    /// The secret `text`, trimmed of surrounding whitespace.
    ///
    /// # Errors
    ///
    /// `TooShort` if fewer than [`MIN_SECRET_BYTES`] bytes remain.
    pub fn new(text: &str) -> Result<Self, SecretError> {
        let key = text.trim().as_bytes();
        let too_short = SecretError::TooShort { len: key.len(), min: MIN_SECRET_BYTES };
        if key.len() < MIN_SECRET_BYTES {
            return Err(too_short);
        }
        // HMAC takes a key of any length, so this never refuses one.
        let keyed = HmacSha256::new_from_slice(key).map_err(|_| too_short)?;
        Ok(ClusterSecret { keyed, len: key.len() })
    }

    /// The secret held (as text) in the file at `path`.
    ///
    /// # Errors
    ///
    /// `Unreadable` if the file cannot be read as UTF-8 text; `TooShort` as
    /// [`ClusterSecret::new`].
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SecretError::Unreadable { path: path.to_path_buf(), reason: e.to_string() })?;
        Self::new(&text)
    }

    /// The header value for a request of `method` to `path` with `body`,
    /// stamped `now_ms` (unix ms; [`unix_now_ms`] for the real clock).
    #[must_use]
    pub fn sign(&self, method: &str, path: &str, body: &[u8], now_ms: u64) -> String {
        let mac = self.mac(method, path, now_ms, body).finalize().into_bytes();
        format!("{VERSION}:{now_ms}:{}", hex::encode(mac))
    }

    /// Accepts the request if `header` (every [`AUTH_HEADER`] value it
    /// carries, normally one) was made by this secret for exactly `method`,
    /// `path` and `body`, within [`MAX_CLOCK_SKEW`] of `now_ms`.
    ///
    /// # Errors
    ///
    /// The refusal, which says why.
    pub fn verify<'a>(
        &self,
        method: &str,
        path: &str,
        header: impl IntoIterator<Item = &'a [u8]>,
        body: &[u8],
        now_ms: u64,
    ) -> Result<(), AuthRefusal> {
        let presented = Presented::parse(header, now_ms)?;
        self.mac(method, path, presented.stamp_ms, body).verify_slice(&presented.mac).map_err(|_| AuthRefusal::BadMac)
    }

    /// [`ClusterSecret::verify`] of an HTTP request's method, path (without
    /// its query) and [`AUTH_HEADER`] values, against the real clock.
    ///
    /// # Errors
    ///
    /// As [`ClusterSecret::verify`].
    pub fn verify_request(
        &self,
        method: &hyper::Method,
        path: &str,
        headers: &hyper::HeaderMap,
        body: &[u8],
    ) -> Result<(), AuthRefusal> {
        let values = headers.get_all(AUTH_HEADER).iter().map(hyper::header::HeaderValue::as_bytes);
        self.verify(method.as_str(), path, values, body, unix_now_ms())
    }

    /// The checks of [`ClusterSecret::verify_request`] that need no body
    /// (one well-formed header, a timestamp in the window): a server runs
    /// them before it reads a body it may refuse anyway.
    ///
    /// # Errors
    ///
    /// `Missing`, `Malformed` or `Skewed`.
    pub fn screen(headers: &hyper::HeaderMap) -> Result<(), AuthRefusal> {
        let values = headers.get_all(AUTH_HEADER).iter().map(hyper::header::HeaderValue::as_bytes);
        Presented::parse(values, unix_now_ms()).map(|_| ())
    }

    fn mac(&self, method: &str, path: &str, stamp_ms: u64, body: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        for part in [LABEL, method, path, &stamp_ms.to_string(), &hex::encode(Sha256::digest(body))] {
            mac.update(part.as_bytes());
            mac.update(b"\n");
        }
        mac
    }
}

/// What a header claims, before its MAC is checked.
struct Presented {
    stamp_ms: u64,
    mac: [u8; 32],
}

impl Presented {
    fn parse<'a>(header: impl IntoIterator<Item = &'a [u8]>, now_ms: u64) -> Result<Presented, AuthRefusal> {
        let mut values = header.into_iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(AuthRefusal::Missing);
        };
        let text = std::str::from_utf8(value).map_err(|_| AuthRefusal::Malformed("not ASCII"))?;
        let mut parts = text.split(':');
        let (Some(version), Some(stamp), Some(mac), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(AuthRefusal::Malformed("expected v1:<unix ms>:<hex MAC>"));
        };
        if version != VERSION {
            return Err(AuthRefusal::Malformed("unknown version (this node speaks v1)"));
        }
        if stamp.is_empty() || stamp.len() > 20 || !stamp.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AuthRefusal::Malformed("the timestamp is not a decimal number of ms"));
        }
        let stamp_ms = stamp.parse::<u64>().map_err(|_| AuthRefusal::Malformed("the timestamp is out of range"))?;
        let skew = u64::try_from(MAX_CLOCK_SKEW.as_millis()).unwrap_or(u64::MAX);
        if stamp_ms.abs_diff(now_ms) > skew {
            return Err(AuthRefusal::Skewed { stamp_ms, now_ms });
        }
        let mac = unhex(mac).ok_or(AuthRefusal::Malformed("the MAC is not 64 hex digits"))?;
        Ok(Presented { stamp_ms, mac })
    }
}

/// The real clock as unix ms (0 before 1970, which no verifier accepts).
#[must_use]
pub fn unix_now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != MAC_HEX_LEN {
        return None;
    }
    let nibble = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_765_000_000_000;
    const BODY: &[u8] = b"\x01\x02 a raft body";

    fn secret() -> ClusterSecret {
        ClusterSecret::new("0123456789abcdef0123456789abcdef0123456789abcdef").unwrap()
    }

    fn check(header: &str, method: &str, path: &str, body: &[u8], now: u64) -> Result<(), AuthRefusal> {
        secret().verify(method, path, [header.as_bytes()], body, now)
    }

    #[test]
    fn a_signed_request_verifies_within_the_window() {
        let header = secret().sign("POST", "/raft/vote", BODY, NOW);
        assert!(header.starts_with(&format!("v1:{NOW}:")), "{header}");
        assert_eq!(check(&header, "POST", "/raft/vote", BODY, NOW), Ok(()));
        let skew = MAX_CLOCK_SKEW.as_millis() as u64;
        assert_eq!(check(&header, "POST", "/raft/vote", BODY, NOW + skew), Ok(()));
        assert_eq!(check(&header, "POST", "/raft/vote", BODY, NOW - skew), Ok(()));
        // An empty body signs and verifies as well.
        let empty = secret().sign("GET", "/cluster/status", b"", NOW);
        assert_eq!(check(&empty, "GET", "/cluster/status", b"", NOW), Ok(()));
    }

    #[test]
    fn any_change_to_what_was_signed_is_refused() {
        let header = secret().sign("POST", "/raft/append", BODY, NOW);
        let mut tampered = BODY.to_vec();
        tampered[0] ^= 1;
        assert_eq!(check(&header, "POST", "/raft/append", &tampered, NOW), Err(AuthRefusal::BadMac));
        assert_eq!(check(&header, "POST", "/raft/append", b"", NOW), Err(AuthRefusal::BadMac));
        assert_eq!(check(&header, "POST", "/raft/vote", BODY, NOW), Err(AuthRefusal::BadMac));
        assert_eq!(check(&header, "PUT", "/raft/append", BODY, NOW), Err(AuthRefusal::BadMac));
        // Another timestamp with the same MAC.
        let restamped = header.replacen(&NOW.to_string(), &(NOW + 1).to_string(), 1);
        assert_eq!(check(&restamped, "POST", "/raft/append", BODY, NOW), Err(AuthRefusal::BadMac));
        // One flipped digit of the MAC.
        let mut flipped = header.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(check(&flipped, "POST", "/raft/append", BODY, NOW), Err(AuthRefusal::BadMac));
    }

    #[test]
    fn another_secret_is_refused() {
        let other = ClusterSecret::new("fedcba9876543210fedcba9876543210fedcba9876543210").unwrap();
        let header = other.sign("POST", "/raft/vote", BODY, NOW);
        assert_eq!(check(&header, "POST", "/raft/vote", BODY, NOW), Err(AuthRefusal::BadMac));
        // A prefix of the right secret is another secret too.
        let prefix = ClusterSecret::new("0123456789abcdef0123456789abcdef0123456789abcde").unwrap();
        let header = prefix.sign("POST", "/raft/vote", BODY, NOW);
        assert_eq!(check(&header, "POST", "/raft/vote", BODY, NOW), Err(AuthRefusal::BadMac));
    }

    #[test]
    fn a_stamp_outside_the_window_is_refused() {
        let skew = MAX_CLOCK_SKEW.as_millis() as u64;
        let old = secret().sign("POST", "/raft/vote", BODY, NOW - skew - 1);
        assert_eq!(
            check(&old, "POST", "/raft/vote", BODY, NOW),
            Err(AuthRefusal::Skewed { stamp_ms: NOW - skew - 1, now_ms: NOW })
        );
        let future = secret().sign("POST", "/raft/vote", BODY, NOW + skew + 1);
        assert!(matches!(check(&future, "POST", "/raft/vote", BODY, NOW), Err(AuthRefusal::Skewed { .. })));
        // Near the ends of u64 nothing overflows.
        let zero = secret().sign("POST", "/raft/vote", BODY, 0);
        assert!(matches!(check(&zero, "POST", "/raft/vote", BODY, u64::MAX), Err(AuthRefusal::Skewed { .. })));
    }

    #[test]
    fn a_malformed_or_missing_header_is_refused() {
        let good = secret().sign("POST", "/raft/vote", BODY, NOW);
        let mac = good.rsplit(':').next().unwrap().to_string();
        let cases = [
            String::new(),
            "v1".to_string(),
            format!("v1:{NOW}"),
            format!("v2:{NOW}:{mac}"),
            format!("V1:{NOW}:{mac}"),
            format!("v1::{mac}"),
            format!("v1:-5:{mac}"),
            format!("v1:+{NOW}:{mac}"),
            format!("v1:99999999999999999999999:{mac}"),
            format!("v1:{NOW}:{}", &mac[..63]),
            format!("v1:{NOW}:{mac}0"),
            format!("v1:{NOW}:{}g", &mac[..63]),
            format!("v1:{NOW}:{mac}:extra"),
            format!("v1:{NOW}:{}é", &mac[..62]),
        ];
        for header in &cases {
            let refused = check(header, "POST", "/raft/vote", BODY, NOW);
            assert!(matches!(refused, Err(AuthRefusal::Malformed(_))), "{header:?}: {refused:?}");
        }
        let not_utf8: &[u8] = b"v1:\xff:00";
        assert!(matches!(secret().verify("POST", "/raft/vote", [not_utf8], BODY, NOW), Err(AuthRefusal::Malformed(_))));
        let none: [&[u8]; 0] = [];
        assert_eq!(secret().verify("POST", "/raft/vote", none, BODY, NOW), Err(AuthRefusal::Missing));
        let twice = [good.as_bytes(), good.as_bytes()];
        assert_eq!(secret().verify("POST", "/raft/vote", twice, BODY, NOW), Err(AuthRefusal::Missing));
        // Upper-case hex of the right MAC is the same MAC.
        let upper = format!("v1:{NOW}:{}", mac.to_uppercase());
        assert_eq!(check(&upper, "POST", "/raft/vote", BODY, NOW), Ok(()));
    }

    #[test]
    fn a_short_or_unreadable_secret_is_a_clear_error() {
        assert!(matches!(ClusterSecret::new("short"), Err(SecretError::TooShort { len: 5, min: MIN_SECRET_BYTES })));
        // Whitespace around the secret does not count.
        let padded = format!("  {}\n\n", "x".repeat(31));
        assert!(matches!(ClusterSecret::new(&padded), Err(SecretError::TooShort { len: 31, .. })));
        assert!(ClusterSecret::new(&format!("{}\n", "x".repeat(32))).is_ok());
        let message = ClusterSecret::new("short").unwrap_err().to_string();
        assert!(message.contains("openssl rand -hex 32"), "{message}");

        let dir = std::env::temp_dir().join(format!("leaseq-peer-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secret");
        std::fs::write(&file, format!("{}\n", "ab".repeat(32))).unwrap();
        let from_file = ClusterSecret::from_file(&file).unwrap();
        let header = from_file.sign("GET", "/cluster/status", b"", NOW);
        let same = ClusterSecret::new(&"ab".repeat(32)).unwrap();
        assert_eq!(same.verify("GET", "/cluster/status", [header.as_bytes()], b"", NOW), Ok(()));
        assert!(!format!("{from_file:?}").contains("abab"), "Debug shows the secret");
        let missing = ClusterSecret::from_file(&dir.join("absent"));
        assert!(matches!(missing, Err(SecretError::Unreadable { .. })), "{missing:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
