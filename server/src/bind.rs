//! Which addresses the server may listen on.
//!
//! Invariant: the server listens beyond the loopback interface only when it
//! verifies request signatures (credentials are configured) or when the
//! operator said `--insecure-no-auth` in so many words: otherwise anyone who
//! could reach the port could read and delete every message.

use std::net::SocketAddr;

/// `Ok(None)` to listen silently, `Ok(Some(warning))` to listen and print the
/// warning, `Err(reason)` to refuse.
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
}
