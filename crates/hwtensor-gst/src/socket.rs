//! The `socket` property: where a channel's producer listens and its consumers connect.
//!
//! A value that starts with `@` names a Linux abstract socket (no file, gone with its last
//! holder, so a killed pipeline leaves nothing behind); any other value is a filesystem path.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;

/// A parsed `socket` property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// An abstract socket name (the property without its `@`).
    Abstract(String),
    /// A socket file.
    Path(String),
}

impl Address {
    /// Parses the elements' `socket` property, or says what it must be.
    pub fn from_property(value: &str) -> Result<Address, &'static str> {
        Address::parse(value)
            .ok_or("set the socket property: a path, or @name for an abstract socket")
    }

    /// Parses a property value; an empty one (or a bare `@`) names nothing.
    pub fn parse(value: &str) -> Option<Address> {
        match value.strip_prefix('@') {
            Some("") => None,
            Some(name) => Some(Address::Abstract(name.to_owned())),
            None if value.is_empty() => None,
            None => Some(Address::Path(value.to_owned())),
        }
    }

    fn socket_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Address::Abstract(name) => SocketAddr::from_abstract_name(name.as_bytes()),
            Address::Path(path) => SocketAddr::from_pathname(path),
        }
    }

    /// Listens here. A socket file left by a producer that died is replaced; a file of another
    /// kind is not touched.
    pub fn bind(&self) -> io::Result<UnixListener> {
        if let Address::Path(path) = self {
            remove_stale_socket(Path::new(path))?;
        }
        UnixListener::bind_addr(&self.socket_addr()?)
    }

    /// Connects to a producer listening here.
    pub fn connect(&self) -> io::Result<UnixStream> {
        UnixStream::connect_addr(&self.socket_addr()?)
    }

    /// Removes the socket file a [`bind`](Self::bind) made (an abstract name needs nothing).
    pub fn unlink(&self) {
        if let Address::Path(path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Abstract(name) => write!(f, "@{name}"),
            Address::Path(path) => f.write_str(path),
        }
    }
}

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            // Someone listens there: binding would fail anyway, and says so.
            Ok(_) => Ok(()),
            Err(_) => std::fs::remove_file(path),
        },
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        )),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_at_sign_names_an_abstract_socket_and_anything_else_a_path() {
        assert_eq!(
            Address::parse("@cam0"),
            Some(Address::Abstract("cam0".into()))
        );
        assert_eq!(
            Address::parse("/run/cam0.sock"),
            Some(Address::Path("/run/cam0.sock".into()))
        );
        assert_eq!(Address::parse(""), None);
        assert_eq!(Address::parse("@"), None);
    }

    #[test]
    fn a_stale_socket_file_is_replaced_and_a_regular_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("hwtensor-gst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stale.sock");
        drop(UnixListener::bind(&path).unwrap()); // its file stays, nobody listens
        let address = Address::Path(path.to_str().unwrap().into());
        let listener = address.bind().unwrap();
        assert!(address.connect().is_ok());
        drop(listener);
        address.unlink();
        let file = dir.join("plain");
        std::fs::write(&file, b"x").unwrap();
        let err = Address::Path(file.to_str().unwrap().into())
            .bind()
            .unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
