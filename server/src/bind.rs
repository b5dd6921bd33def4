//! Which addresses the server may listen on.
//!
//! Invariant: the server listens beyond the loopback interface only when
//! everything it serves there is authenticated, or when the operator said
//! `--insecure-no-auth` in so many words: a single server needs verified SQS
//! signatures (credentials configured); a cluster node needs those and a
//! cluster secret as well, because its port also answers Raft's RPCs and
//! `/cluster/`, through which anyone could rewrite the log or the
//! membership. Otherwise anyone who could reach the port could read and
//! delete every message.

use std::net::SocketAddr;

/// `Ok(None)` to listen silently, `Ok(Some(warning))` to listen and print the
/// warning, `Err(reason)` to refuse. `signed`: SQS requests must carry SigV4
/// signatures.
pub fn check_bind(addr: SocketAddr, signed: bool, insecure_no_auth: bool) -> Result<Option<String>, String> {
    if addr.ip().is_loopback() || signed {
        Ok(None)
    } else if insecure_no_auth {
        Ok(Some(format!(
            "listening on {addr} WITHOUT authentication (--insecure-no-auth): anyone who reaches this port can \
             read, send and delete messages"
        )))
    } else {
        Err(format!(
            "refusing to listen on {addr} without authentication: give --credentials-file (requests must then be \
             SigV4-signed), bind a loopback address, or pass --insecure-no-auth"
        ))
    }
}

/// [`check_bind`] for a cluster node: beyond loopback it needs SQS
/// signatures (`signed`) and a cluster secret (`peers_signed`), or
/// `insecure_no_auth`.
pub fn check_cluster_bind(
    addr: SocketAddr,
    signed: bool,
    peers_signed: bool,
    insecure_no_auth: bool,
) -> Result<Option<String>, String> {
    if addr.ip().is_loopback() || (signed && peers_signed) {
        return Ok(None);
    }
    let missing = match (signed, peers_signed) {
        (false, false) => {
            "--credentials-file (SQS requests SigV4-signed) and --cluster-secret-file (Raft's RPCs and \
                           /cluster/ signed)"
        }
        (false, true) => "--credentials-file (SQS requests SigV4-signed)",
        _ => "--cluster-secret-file (Raft's RPCs and /cluster/ signed)",
    };
    if insecure_no_auth {
        Ok(Some(format!(
            "listening on {addr} without {missing} (--insecure-no-auth): anyone who reaches this port can read, \
             send and delete messages or change the group's log and membership"
        )))
    } else {
        Err(format!(
            "refusing to listen on {addr}: a cluster node beyond loopback needs {missing}; or bind a loopback \
             address, or pass --insecure-no-auth"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_loopback_needs_signatures_or_an_explicit_opt_out() {
        let loopback: SocketAddr = "127.0.0.1:9324".parse().unwrap();
        let v6_loopback: SocketAddr = "[::1]:9324".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9324".parse().unwrap();
        let v6_any: SocketAddr = "[::]:9324".parse().unwrap();
        assert_eq!(check_bind(loopback, false, false), Ok(None));
        assert_eq!(check_bind(v6_loopback, false, false), Ok(None));
        assert!(check_bind(any, false, false).is_err());
        assert!(check_bind(v6_any, false, false).is_err());
        assert_eq!(check_bind(any, true, false), Ok(None));
        assert!(check_bind(any, false, true).unwrap().unwrap().contains("WITHOUT authentication"));
    }

    #[test]
    fn a_cluster_node_beyond_loopback_needs_both_signatures_or_an_explicit_opt_out() {
        let loopback: SocketAddr = "127.0.0.1:9401".parse().unwrap();
        let v6_loopback: SocketAddr = "[::1]:9401".parse().unwrap();
        let lan: SocketAddr = "10.0.0.7:9401".parse().unwrap();
        let v6_any: SocketAddr = "[::]:9401".parse().unwrap();
        // On loopback every combination listens without a word.
        for signed in [false, true] {
            for peers in [false, true] {
                for insecure in [false, true] {
                    assert_eq!(check_cluster_bind(loopback, signed, peers, insecure), Ok(None));
                    assert_eq!(check_cluster_bind(v6_loopback, signed, peers, insecure), Ok(None));
                }
            }
        }
        for addr in [lan, v6_any] {
            assert_eq!(check_cluster_bind(addr, true, true, false), Ok(None));
            assert_eq!(check_cluster_bind(addr, true, true, true), Ok(None));
            let neither = check_cluster_bind(addr, false, false, false).unwrap_err();
            assert!(neither.contains("--credentials-file") && neither.contains("--cluster-secret-file"), "{neither}");
            let no_sqs = check_cluster_bind(addr, false, true, false).unwrap_err();
            assert!(no_sqs.contains("--credentials-file") && !no_sqs.contains("--cluster-secret-file"), "{no_sqs}");
            let no_peers = check_cluster_bind(addr, true, false, false).unwrap_err();
            assert!(no_peers.contains("--cluster-secret-file") && !no_peers.contains("--credentials"), "{no_peers}");
            // The opt-out listens, with a warning naming what is missing.
            for (signed, peers) in [(false, false), (false, true), (true, false)] {
                let warning = check_cluster_bind(addr, signed, peers, true).unwrap().unwrap();
                assert!(warning.contains("--insecure-no-auth") && warning.contains("without"), "{warning}");
            }
        }
    }
}
