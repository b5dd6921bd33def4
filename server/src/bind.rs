//! Which addresses the server may listen on.
//!
//! Invariant: the server never listens beyond the loopback interface, because
//! it does not verify request signatures yet (SigV4): anyone who can reach
//! the port could read and delete every message.

use std::net::SocketAddr;

/// `Ok` for a loopback address; otherwise a sentence saying why not.
pub fn check_bind(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "refusing to listen on {addr}: leaseq-server does not verify request signatures yet, so it only binds \
             loopback addresses (127.0.0.0/8, ::1); put an authenticating proxy in front of it to expose it"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_allowed() {
        assert!(check_bind("127.0.0.1:9324".parse().unwrap()).is_ok());
        assert!(check_bind("[::1]:9324".parse().unwrap()).is_ok());
        assert!(check_bind("0.0.0.0:9324".parse().unwrap()).is_err());
        assert!(check_bind("[::]:9324".parse().unwrap()).is_err());
    }
}
