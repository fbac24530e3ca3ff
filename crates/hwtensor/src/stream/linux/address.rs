//! Where a channel's producer listens and its consumers connect: a Unix socket named by a path,
//! or by `@name` in the abstract namespace.
//!
//! Why helpers for a few std calls: every user of the channel across two programs wrote this
//! listener and accept loop by hand, in each language, and an accept without a bound hangs a
//! pipeline that is being stopped. An abstract socket has no file permissions: anyone on the
//! machine may connect, so the producer's attach policy ([`super::super::Access`]), checked on
//! the peer's credentials as it attaches, is what keeps strangers out.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use crate::{Error, Result};

/// What a name starts with to live in the abstract namespace (`@cam`), as `ss` and GStreamer's
/// `socket=` property write it.
const ABSTRACT_PREFIX: char = '@';

/// The socket address `address` names: `@name` abstract, anything else a path.
fn socket_addr(address: &str) -> Result<SocketAddr> {
    let bad = |e: std::io::Error| {
        Error::InvalidArgument(format!("{address:?} is not a Unix socket address: {e}"))
    };
    match address.strip_prefix(ABSTRACT_PREFIX) {
        Some("") => Err(Error::InvalidArgument(
            "an abstract socket needs a name after '@'".into(),
        )),
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()).map_err(bad),
        None if address.is_empty() => Err(Error::InvalidArgument(
            "an empty socket address (a path, or @name)".into(),
        )),
        None => SocketAddr::from_pathname(address).map_err(bad),
    }
}

/// A producer's listening socket.
#[derive(Debug)]
pub struct Listener {
    socket: UnixListener,
    address: String,
}

impl Listener {
    /// Listens on `address` (a path, or `@name` for the abstract namespace). A path that
    /// exists already is refused (`EADDRINUSE`), never removed: it may be another producer's.
    pub fn bind(address: &str) -> Result<Listener> {
        let socket = UnixListener::bind_addr(&socket_addr(address)?)
            .map_err(|e| Error::Handoff(format!("cannot listen on {address:?}: {e}")))?;
        socket.set_nonblocking(true).map_err(|source| Error::Os {
            op: "making the listening socket non-blocking",
            source,
        })?;
        Ok(Listener {
            socket,
            address: address.to_string(),
        })
    }

    /// Waits at most `timeout` for a consumer to connect (`Error::Timeout`), and returns its
    /// connection, blocking as a fresh socket is. Attach it to a producer, which checks who it
    /// is.
    pub fn accept(&self, timeout: Duration) -> Result<UnixStream> {
        let deadline = crate::time::deadline_after(timeout);
        loop {
            match self.socket.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).map_err(|source| Error::Os {
                        op: "making an accepted socket blocking",
                        source,
                    })?;
                    return Ok(stream);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Error::Os {
                        op: "accept on the producer's socket",
                        source,
                    })
                }
            }
            if !crate::handoff::readable_by(&self.socket, deadline)? {
                return Err(Error::Timeout(format!(
                    "no consumer connected to {:?} within the timeout",
                    self.address
                )));
            }
        }
    }

    /// The address it listens on, as given.
    pub fn address(&self) -> &str {
        &self.address
    }
}

/// Connects to the producer listening on `address` (a path, or `@name`). The producer answers
/// with the set-up: pass the stream to [`super::super::Consumer::connect`].
pub fn connect(address: &str) -> Result<UnixStream> {
    UnixStream::connect_addr(&socket_addr(address)?)
        .map_err(|e| Error::Handoff(format!("cannot connect to {address:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abstract_name_and_a_path_both_listen_and_connect() {
        let name = format!("@hwtensor-address-test-{}", std::process::id());
        let listener = Listener::bind(&name).unwrap();
        let _client = connect(&name).unwrap();
        listener.accept(Duration::from_secs(5)).unwrap();
        let dir = std::env::temp_dir().join(format!("hwt-addr-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let path = dir.to_str().unwrap();
        let listener = Listener::bind(path).unwrap();
        let _client = connect(path).unwrap();
        listener.accept(Duration::from_secs(5)).unwrap();
        let again = Listener::bind(path).unwrap_err();
        assert!(again.to_string().contains("cannot listen"), "{again}");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn an_accept_with_nobody_connecting_ends_at_its_timeout() {
        let name = format!("@hwtensor-address-idle-{}", std::process::id());
        let listener = Listener::bind(&name).unwrap();
        let started = std::time::Instant::now();
        let got = listener.accept(Duration::from_millis(100));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn empty_and_bare_at_addresses_are_refused_by_name() {
        for bad in ["", "@"] {
            let err = Listener::bind(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
        }
        assert!(connect("@hwtensor-nobody-listens-here").is_err());
    }
}
