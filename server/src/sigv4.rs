//! AWS Signature Version 4 verification of incoming requests.
//!
//! Invariant: with credentials configured, a request reaches an action only
//! if its `Authorization` header names a known access key and carries the
//! signature that key's secret gives for this exact method, path, query,
//! signed headers and body, dated within `MAX_SKEW` of the server's clock.
//! Anything else is refused with the AWS error a client expects
//! (`MissingAuthenticationToken`, `IncompleteSignature`,
//! `InvalidClientTokenId`, `SignatureDoesNotMatch`, `RequestExpired`).
//!
//! A signature proves who sent a request, not secrecy: without TLS, bodies
//! are readable on the wire, and a captured request can be replayed within
//! the skew window.

use std::collections::HashMap;
use std::path::Path;

use hmac::{Hmac, Mac};
use hyper::HeaderMap;
use sha2::{Digest, Sha256};

use crate::error::{ErrorCode, SqsError};

/// How far a request's `X-Amz-Date` may be from the server's clock.
const MAX_SKEW_SECONDS: u64 = 15 * 60;
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Access key ids and their secrets.
#[derive(Clone)]
pub struct Credentials {
    secrets: HashMap<String, String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        f.debug_struct("Credentials").field("access_keys", &self.secrets.len()).finish()
    }
}

impl Credentials {
    /// Credentials from `(access key id, secret access key)` pairs.
    pub fn new<K: Into<String>, S: Into<String>>(pairs: impl IntoIterator<Item = (K, S)>) -> Credentials {
        Credentials { secrets: pairs.into_iter().map(|(k, s)| (k.into(), s.into())).collect() }
    }

    /// Reads a file of `ACCESS_KEY_ID SECRET_ACCESS_KEY` lines (blank lines
    /// and `#` comments are skipped). A file with no key is an error: it
    /// would lock every client out.
    pub fn from_file(path: &Path) -> Result<Credentials, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut pairs = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match (fields.next(), fields.next(), fields.next()) {
                (Some(key), Some(secret), None) => pairs.push((key.to_string(), secret.to_string())),
                _ => {
                    return Err(format!(
                        "{} line {}: expected 'ACCESS_KEY_ID SECRET_ACCESS_KEY'",
                        path.display(),
                        number + 1
                    ));
                }
            }
        }
        if pairs.is_empty() {
            return Err(format!("{} holds no credentials", path.display()));
        }
        Ok(Credentials::new(pairs))
    }
}

/// What the signature covers, taken from the request.
#[derive(Debug)]
pub(crate) struct Signed<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a [u8],
}

/// Checks `request`'s signature at `now` (Unix seconds).
pub(crate) fn verify(credentials: &Credentials, request: &Signed<'_>, now: u64) -> Result<(), SqsError> {
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    let authorization = header("authorization").ok_or_else(|| {
        SqsError::new(ErrorCode::MissingAuthenticationToken, "Request is missing Authentication Token")
    })?;
    let auth = parse_authorization(authorization)?;
    let secret = credentials.secrets.get(auth.access_key).ok_or_else(|| {
        SqsError::new(ErrorCode::InvalidClientTokenId, "The security token included in the request is invalid.")
    })?;
    let incomplete = |what: &str| SqsError::new(ErrorCode::IncompleteSignature, what.to_string());
    let amz_date = header("x-amz-date").ok_or_else(|| incomplete("The request must carry an X-Amz-Date header."))?;
    let signed_at = parse_amz_date(amz_date).ok_or_else(|| incomplete("X-Amz-Date is not YYYYMMDD'T'HHMMSS'Z'."))?;
    let scope: Vec<&str> = auth.scope.split('/').collect();
    let [date, region, service, "aws4_request"] = scope.as_slice() else {
        return Err(incomplete("The credential scope is not date/region/service/aws4_request."));
    };
    if *date != &amz_date[..8] || *service != "sqs" {
        return Err(SqsError::new(
            ErrorCode::SignatureDoesNotMatch,
            "The credential scope does not match the request's date or the sqs service.",
        ));
    }
    if signed_at.abs_diff(now) > MAX_SKEW_SECONDS {
        return Err(SqsError::new(
            ErrorCode::RequestExpired,
            format!("Request has expired: signed at {amz_date}, more than 15 minutes from the server's clock."),
        ));
    }
    let expected = signature(secret, request, auth.signed_headers, amz_date, date, region, service)
        .ok_or_else(|| incomplete("A header named in SignedHeaders is missing or not text."))?;
    if !constant_time_eq(expected.as_bytes(), auth.signature.as_bytes()) {
        return Err(SqsError::new(
            ErrorCode::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your AWS \
             Secret Access Key and signing method.",
        ));
    }
    Ok(())
}

struct Authorization<'a> {
    access_key: &'a str,
    scope: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Result<Authorization<'_>, SqsError> {
    let incomplete = || {
        SqsError::new(
            ErrorCode::IncompleteSignature,
            "The Authorization header must be 'AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...'.",
        )
    };
    let rest = value.strip_prefix(ALGORITHM).ok_or_else(incomplete)?;
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => return Err(incomplete()),
        }
    }
    let (access_key, scope) = credential.and_then(|c| c.split_once('/')).ok_or_else(incomplete)?;
    Ok(Authorization {
        access_key,
        scope,
        signed_headers: signed_headers.ok_or_else(incomplete)?,
        signature: signature.ok_or_else(incomplete)?,
    })
}

/// The hex signature of `request`; `None` if a signed header is missing.
fn signature(
    secret: &str,
    request: &Signed<'_>,
    signed_headers: &str,
    amz_date: &str,
    date: &str,
    region: &str,
    service: &str,
) -> Option<String> {
    let mut canonical = format!(
        "{}\n{}\n{}\n",
        request.method,
        canonical_path(request.path),
        canonical_query(request.query.unwrap_or(""))
    );
    for name in signed_headers.split(';') {
        let values: Vec<&str> =
            request.headers.get_all(name).iter().map(|v| v.to_str()).collect::<Result<_, _>>().ok()?;
        if values.is_empty() {
            return None;
        }
        let joined: Vec<String> = values.iter().map(|v| v.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        canonical.push_str(&format!("{name}:{}\n", joined.join(",")));
    }
    canonical.push_str(&format!("\n{signed_headers}\n{}", hex::encode(Sha256::digest(request.body))));
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let to_sign = format!("{ALGORITHM}\n{amz_date}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    Some(hex::encode(hmac(&key, to_sign.as_bytes())))
}

/// The path as SigV4 signs it for services other than S3: each segment
/// URI-encoded once more (the SDKs sign the already-encoded path).
fn canonical_path(path: &str) -> String {
    if path.is_empty() {
        return "/".into();
    }
    path.split('/').map(uri_encode).collect::<Vec<_>>().join("/")
}

/// Query parameters decoded, re-encoded and sorted.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (uri_encode(&percent_decode(k)), uri_encode(&percent_decode(v)))
        })
        .collect();
    pairs.sort();
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

fn uri_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex_pair = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex_pair.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `YYYYMMDDTHHMMSSZ` as Unix seconds.
fn parse_amz_date(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = text.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// Equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, v.parse().unwrap());
        }
        map
    }

    /// The "get-vanilla" case of AWS's published SigV4 test suite.
    #[test]
    fn matches_the_aws_test_suite_vector() {
        let h = headers(&[("host", "example.amazonaws.com"), ("x-amz-date", "20150830T123600Z")]);
        let request = Signed { method: "GET", path: "/", query: None, headers: &h, body: b"" };
        let sig = signature(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            &request,
            "host;x-amz-date",
            "20150830T123600Z",
            "20150830",
            "us-east-1",
            "service",
        );
        assert_eq!(sig.as_deref(), Some("5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"));
    }

    #[test]
    fn dates_and_canonical_forms() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(parse_amz_date("2015-08-30T12:36"), None);
        assert_eq!(parse_amz_date("20151330T123600Z"), None);
        assert_eq!(canonical_query("b=2&a=1&c=x%20y"), "a=1&b=2&c=x%20y");
        assert_eq!(canonical_path("/000000000000/q%201"), "/000000000000/q%25201");
    }

    #[test]
    fn refuses_missing_malformed_unknown_and_stale_signatures() {
        let creds = Credentials::new([("AKID", "secret")]);
        let code = |auth: Option<&str>, date: &str, now: u64| {
            let mut pairs = vec![("host", "h"), ("x-amz-date", date)];
            if let Some(a) = auth {
                pairs.push(("authorization", a));
            }
            let h = headers(&pairs);
            let request = Signed { method: "POST", path: "/", query: None, headers: &h, body: b"{}" };
            verify(&creds, &request, now).err().map(|e| e.code)
        };
        let now = 1_440_938_160;
        let date = "20150830T123600Z";
        assert_eq!(code(None, date, now), Some(ErrorCode::MissingAuthenticationToken));
        assert_eq!(code(Some("Basic abc"), date, now), Some(ErrorCode::IncompleteSignature));
        let auth = |key: &str, sig: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential={key}/20150830/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature={sig}"
            )
        };
        assert_eq!(code(Some(&auth("NOPE", "00")), date, now), Some(ErrorCode::InvalidClientTokenId));
        assert_eq!(code(Some(&auth("AKID", "00")), date, now), Some(ErrorCode::SignatureDoesNotMatch));
        assert_eq!(code(Some(&auth("AKID", "00")), date, now + 3600), Some(ErrorCode::RequestExpired));

        // The right signature passes; the same one over another body does not.
        let h = headers(&[("host", "h"), ("x-amz-date", date)]);
        let request = Signed { method: "POST", path: "/", query: None, headers: &h, body: b"{}" };
        let good = signature("secret", &request, "host;x-amz-date", date, "20150830", "us-east-1", "sqs").unwrap();
        assert_eq!(code(Some(&auth("AKID", &good)), date, now), None);
        let mut h = headers(&[("host", "h"), ("x-amz-date", date)]);
        h.insert("authorization", auth("AKID", &good).parse().unwrap());
        let other = Signed { method: "POST", path: "/", query: None, headers: &h, body: b"{\"x\":1}" };
        assert_eq!(verify(&creds, &other, now).unwrap_err().code, ErrorCode::SignatureDoesNotMatch);
    }

    #[test]
    fn credentials_files_are_checked() {
        let dir = std::env::temp_dir().join(format!("leaseq-sigv4-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("creds");
        std::fs::write(&path, "# comment\n\nAKID secret\n").unwrap();
        assert!(Credentials::from_file(&path).is_ok());
        std::fs::write(&path, "AKID\n").unwrap();
        assert!(Credentials::from_file(&path).unwrap_err().contains("line 1"));
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(Credentials::from_file(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
