//! Ports on 127.0.0.1 for the servers ackgap starts: drawn from a range
//! no outgoing connection takes them from, and drawn again when another
//! listener took one between the draw and the server's bind.

use super::ServerError;

/// Where [`free_port`] looks: below Linux's ephemeral range (32768 and up
/// by default), which the kernel draws the local port of every outgoing
/// connection from. A port from port 0's bind is in that range, and during
/// a run that opens many connections one of them could take it between its
/// release here and the server's bind (seen here twice in a day, as a
/// cluster node's "Address already in use"); below the range only another
/// listener can.
const FREE_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// Starts on a port that was free and lost it to another listener before
/// the server bound it ([`ServerError::port_taken`]) are tried again on a
/// newly drawn port, this many times in all: tests that start servers in
/// parallel processes draw from one range, and two draws can meet.
pub(crate) const PORT_TRIES: usize = 4;

/// A free TCP port on 127.0.0.1: a port of [`FREE_PORTS`] drawn at random
/// that binds, released (port 0's pick when 64 draws found none). Another
/// listener may still take it before the server binds it; the server then
/// fails to start with "Address already in use" in its log, and the
/// backends start it again on a new port ([`PORT_TRIES`]).
pub(crate) fn free_port() -> Result<u16, ServerError> {
    use std::hash::{BuildHasher, Hasher};
    let span = u64::from(FREE_PORTS.end - FREE_PORTS.start);
    for draw in 0..64u64 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(draw);
        let port = FREE_PORTS.start + (hasher.finish() % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| ServerError::io("finding a free port on 127.0.0.1", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| ServerError::io("finding a free port on 127.0.0.1", e))?
        .port();
    Ok(port)
}

impl ServerError {
    /// True for a start that failed because another listener took the
    /// port [`free_port`] chose between its check and the server's bind
    /// (the server's log, or docker's userland proxy, says "address
    /// already in use"): the start may be tried again on another port.
    pub(crate) fn port_taken(&self) -> bool {
        let taken = |text: &str| text.to_ascii_lowercase().contains("address already in use");
        match self {
            ServerError::Start {
                reason, log_tail, ..
            } => taken(reason) || taken(log_tail),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start that lost its port to another listener (valkey's log line
    /// and docker's userland proxy error, as each printed it here) is told
    /// apart from other failed starts, which are not tried again.
    #[test]
    fn a_start_that_lost_its_port_is_told_apart_from_other_failed_starts() {
        let start = |reason: &str, log_tail: &str| ServerError::Start {
            what: "a server".into(),
            reason: reason.into(),
            log_tail: log_tail.into(),
        };
        let valkey = start(
            "the server exited during startup (exit status: 1)",
            "15436:M 07 Dec 2026 16:10:48.977 # Warning: Could not create server TCP listening \
             socket 127.0.0.1:33119: bind: Address already in use\n\
             15436:M 07 Dec 2026 16:10:48.977 # Failed listening on port 33119 (tcp), aborting.",
        );
        assert!(valkey.port_taken());
        let docker = start(
            "failed to start a container: Docker responded with status code 500: driver failed \
             programming external connectivity on endpoint stoic_hellman: Error starting userland \
             proxy: listen tcp4 127.0.0.1:27524: bind: address already in use",
            "",
        );
        assert!(docker.port_taken());
        let other = start(
            "the server exited during startup (exit status: 1)",
            "Bad directive",
        );
        assert!(!other.port_taken());
        let not_a_start = ServerError::Docker {
            reason: "bind: address already in use".into(),
        };
        assert!(!not_a_start.port_taken());
    }

    #[test]
    fn a_free_port_is_drawn_below_the_ephemeral_range_where_no_outgoing_connection_takes_it() {
        let port = free_port().unwrap();
        assert!(FREE_PORTS.contains(&port), "{port}");
        let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| {
                r.split_whitespace()
                    .next()
                    .and_then(|p| p.parse::<u16>().ok())
            });
        if let Some(first) = first {
            assert!(
                port < first,
                "{port} is in the ephemeral range from {first}"
            );
        }
    }
}
