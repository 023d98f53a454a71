//! The url backend: a server this tool does not own.
//!
//! At start it makes one connection attempt and one PING with a short
//! timeout, so a wrong address fails fast instead of retrying; the error
//! tells a refused password ([`ServerError::Auth`]) from an unreachable
//! server ([`ServerError::Unreachable`]). It offers no faults. It also
//! asks whether the server is a cluster node (`INFO cluster`): a cluster
//! client reaches the nodes it discovers, past the chaos runner's fault
//! proxy, so no network fault can reach it.

use std::time::Duration;

use super::topology::{elsewhere, owned};
use super::{ping_once, redact_url, server_software, ServerError};
use crate::fault::FaultKind;

/// Connect and response timeout of the start-up PING.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug)]
pub(crate) struct UrlServer {
    client: redis::Client,
    port: u16,
    software: String,
    cluster: bool,
}

impl UrlServer {
    pub(crate) async fn connect(url: &str) -> Result<Self, ServerError> {
        let shown = redact_url(url);
        // The redis crate's parse errors say little more than "did not parse".
        let client = redis::Client::open(url).map_err(|_| ServerError::InvalidSpec {
            what: "server URL",
            input: shown.clone(),
            expected: "`redis://[user:password@]host:port[/db]`",
        })?;
        let port = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(_, port) => *port,
            redis::ConnectionAddr::TcpTls { port, .. } => *port,
            _ => 0,
        };
        if let Err(e) = ping_once(&client, CONNECT_TIMEOUT).await {
            return Err(classify(&shown, &redact_in(&e.to_string(), url), &e));
        }
        // INFO may be refused by an ACL; the server is usable all the same.
        let software = server_software(&client, &shown)
            .await
            .unwrap_or_else(|_| "unknown server".to_string());
        // Refused (an ACL) reads as no cluster: the chaos runner's faults
        // then say, each run, what they reached.
        let cluster = super::cluster_enabled(&client).await.unwrap_or(false);
        Ok(UrlServer {
            client,
            port,
            software,
            cluster,
        })
    }

    /// The fault kinds a server reached by URL runs: none that pauses,
    /// kills, cuts or moves it, since this tool does not own it; the others
    /// as [`super::topology::elsewhere`].
    pub(crate) fn supports(kind: FaultKind) -> Result<(), String> {
        match kind {
            FaultKind::ServerPause
            | FaultKind::ServerKill
            | FaultKind::PowerLoss
            | FaultKind::ClockJump
            | FaultKind::ReplicaLag
            | FaultKind::LagFailover
            | FaultKind::Failover
            | FaultKind::PrimaryPartition
            | FaultKind::SkewFailover
            | FaultKind::Reshard
            | FaultKind::ReshardClassic => Err(owned(kind)),
            other => elsewhere(other),
        }
    }

    pub(crate) fn client(&self) -> redis::Client {
        self.client.clone()
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn software(&self) -> &str {
        &self.software
    }

    /// Whether the server answered `cluster_enabled:1`.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }
}

/// `url` with its host and port replaced by `host:port`, everything else as
/// written: the user and password (percent-encoded as given), the database
/// and the query (`?protocol=resp3`). A stand-in for the server, such as
/// the chaos runner's fault proxy, is reached with the server's own
/// credentials this way, so every path to the server authenticates alike.
///
/// Refuses (with [`ServerError::InvalidSpec`]) what the redis client does
/// not parse as a `redis://` URL.
pub fn readdress(url: &str, host: &str, port: u16) -> Result<String, ServerError> {
    let invalid = || ServerError::InvalidSpec {
        what: "server URL",
        input: super::redact_url(url),
        expected: "`redis://[user:password@]host:port[/db]`",
    };
    redis::Client::open(url).map_err(|_| invalid())?;
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_len);
    // The password may hold an `@` only percent-encoded, so the last `@`
    // ends the user information.
    let userinfo = authority.rfind('@').map_or("", |at| &authority[..=at]);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Ok(format!("{scheme}://{userinfo}{host}:{port}{tail}"))
}

/// `text` with the URL's password, if any, replaced by `***`.
fn redact_in(text: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match password {
        Some(p) => text.replace(p, "***"),
        None => text.to_string(),
    }
}

/// Auth if the server refused the credentials (or demands some), else
/// Unreachable.
fn classify(shown_url: &str, reason: &str, e: &redis::RedisError) -> ServerError {
    let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"));
    if refused {
        ServerError::Auth {
            url: shown_url.to_string(),
            reason: reason.to_string(),
        }
    } else if e.kind() == redis::ErrorKind::Parse {
        // Something answered, but not in RESP: an HTTP server, an SSH
        // daemon, a port taken by another program.
        let first_line = reason.lines().next().unwrap_or_default();
        ServerError::Unreachable {
            url: shown_url.to_string(),
            reason: format!(
                "it answered PING with something that is not the Redis protocol; \
                 is another program listening on that port? ({first_line})"
            ),
        }
    } else {
        ServerError::Unreachable {
            url: shown_url.to_string(),
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readdress_keeps_the_credentials_database_and_query() {
        assert_eq!(
            readdress(
                "redis://u:p%40ss@db.example:6379/2?protocol=resp3",
                "127.0.0.1",
                9
            )
            .unwrap(),
            "redis://u:p%40ss@127.0.0.1:9/2?protocol=resp3"
        );
        assert_eq!(
            readdress("redis://:secret@127.0.0.1:6379", "127.0.0.1", 9).unwrap(),
            "redis://:secret@127.0.0.1:9"
        );
        assert_eq!(
            readdress("redis://127.0.0.1:6379/", "127.0.0.1", 9).unwrap(),
            "redis://127.0.0.1:9/"
        );
        let err = readdress("http//nope", "127.0.0.1", 9).unwrap_err();
        assert!(matches!(err, ServerError::InvalidSpec { .. }), "{err:?}");
    }

    #[test]
    fn redact_in_hides_the_password_wherever_it_appears() {
        assert_eq!(
            redact_in("bad url redis://u:hunter2@h", "redis://u:hunter2@h:1/"),
            "bad url redis://u:***@h"
        );
        assert_eq!(redact_in("no secret", "redis://h:1/"), "no secret");
    }
}
