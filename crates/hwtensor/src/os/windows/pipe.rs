//! A named pipe with bounded reads and writes: overlapped I/O waited for with a deadline, and
//! cancelled (then waited out) when the deadline passes, so a peer that stalls or dies costs a
//! timeout or an error, never a hang; and the peer's process id as the kernel reports it.

// Named pipes, events and overlapped I/O are reached through the Win32 API.
#![allow(unsafe_code)]

use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::time::{Duration, Instant};

use windows::core::HSTRING;
use windows::Win32::Foundation::{
    ERROR_BROKEN_PIPE, ERROR_IO_PENDING, ERROR_NO_DATA, ERROR_PIPE_CONNECTED,
    ERROR_PIPE_NOT_CONNECTED, GENERIC_READ, GENERIC_WRITE, HANDLE, INVALID_HANDLE_VALUE,
    WAIT_OBJECT_0,
};
use windows::Win32::Storage::FileSystem::{
    CreateFileW, ReadFile, WriteFile, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED,
    FILE_SHARE_NONE, OPEN_EXISTING, PIPE_ACCESS_DUPLEX,
};
use windows::Win32::System::Pipes::{
    ConnectNamedPipe, CreateNamedPipeW, GetNamedPipeClientProcessId, GetNamedPipeServerProcessId,
    PIPE_READMODE_BYTE, PIPE_REJECT_REMOTE_CLIENTS, PIPE_TYPE_BYTE, PIPE_UNLIMITED_INSTANCES,
    PIPE_WAIT,
};
use windows::Win32::System::Threading::WaitForSingleObject;
use windows::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};

use crate::{Error, Result};

/// Bytes the system buffers each way: a reference blob and its handle table fit many times.
const PIPE_BUFFER: u32 = 64 * 1024;
/// How long a client's connect waits for a busy pipe between retries.
const CONNECT_RETRY: Duration = Duration::from_millis(5);

/// One end of a connected named pipe (local to this machine), made by
/// [`PipeListener::accept`] or [`Pipe::connect`]: what `handoff::send` and `recv` run over.
#[derive(Debug)]
pub struct Pipe {
    handle: OwnedHandle,
    /// The manual-reset event each overlapped operation signals.
    event: OwnedHandle,
    /// Whether this end is the server's (the peer is then the client).
    server: bool,
}

/// The pipe's full name.
fn full_name(name: &str) -> HSTRING {
    HSTRING::from(format!(r"\\.\pipe\{name}"))
}

fn raw(h: &OwnedHandle) -> HANDLE {
    HANDLE(h.as_raw_handle())
}

/// An OS error of `op`, as ours.
fn os(op: &'static str) -> impl Fn(windows::core::Error) -> Error {
    move |e| Error::Os {
        op,
        source: e.into(),
    }
}

/// The server of pipe `\\.\pipe\<name>`: each [`accept`](Self::accept) waits for one client.
#[derive(Debug)]
pub struct Listener {
    name: String,
    first: bool,
}

impl Listener {
    /// A server of pipe `name`. Its first [`accept`](Self::accept) claims the name, refused
    /// when another process already serves it: a peer cannot pose as this server by creating
    /// the name first.
    pub fn bind(name: &str) -> Result<Listener> {
        let l = Listener {
            name: name.to_string(),
            first: true,
        };
        Ok(l)
    }

    /// Waits at most `timeout` for a client (remote clients are rejected) and returns the
    /// connected end.
    pub fn accept(&mut self, timeout: Duration) -> Result<Pipe> {
        let pipe = self.instance()?;
        pipe.connect_client(timeout)?;
        Ok(pipe)
    }

    /// A new instance of the pipe, not yet connected.
    fn instance(&mut self) -> Result<Pipe> {
        let mut mode = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED;
        if self.first {
            mode |= FILE_FLAG_FIRST_PIPE_INSTANCE;
        }
        // SAFETY: a valid name and modes; the handle is owned at once (or is invalid).
        let h = unsafe {
            CreateNamedPipeW(
                &full_name(&self.name),
                mode,
                PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
                PIPE_UNLIMITED_INSTANCES,
                PIPE_BUFFER,
                PIPE_BUFFER,
                0,
                None,
            )
        };
        if h == INVALID_HANDLE_VALUE {
            return Err(Error::Handoff(format!(
                "cannot create pipe {}: {} (another process may hold the name)",
                self.name,
                windows::core::Error::from_thread()
            )));
        }
        self.first = false;
        // SAFETY: the valid handle just created, owned from here.
        let handle = unsafe { OwnedHandle::from_raw_handle(h.0) };
        Ok(Pipe {
            handle,
            event: super::sync::event(true)?,
            server: true,
        })
    }
}

impl Pipe {
    /// Connects to the server of pipe `name`, waiting at most `timeout` for it to listen.
    pub fn connect(name: &str, timeout: Duration) -> Result<Pipe> {
        let deadline = crate::time::deadline_after(timeout);
        loop {
            // SAFETY: a valid name; the handle is owned at once.
            let opened = unsafe {
                CreateFileW(
                    &full_name(name),
                    (GENERIC_READ | GENERIC_WRITE).0,
                    FILE_SHARE_NONE,
                    None,
                    OPEN_EXISTING,
                    FILE_FLAG_OVERLAPPED,
                    None,
                )
            };
            match opened {
                Ok(h) => {
                    return Ok(Pipe {
                        // SAFETY: the valid handle just opened, owned from here.
                        handle: unsafe { OwnedHandle::from_raw_handle(h.0) },
                        event: super::sync::event(true)?,
                        server: false,
                    });
                }
                Err(_) if Instant::now() < deadline => std::thread::sleep(CONNECT_RETRY),
                Err(e) => {
                    return Err(Error::Timeout(format!(
                        "no server on pipe {name} within {timeout:?} ({e})"
                    )))
                }
            }
        }
    }

    /// A second handle to this pipe with its own event, for another thread to read or write
    /// on while this one does.
    pub fn try_clone(&self) -> Result<Pipe> {
        let handle = self.handle.try_clone().map_err(|source| Error::Os {
            op: "duplicating a pipe handle",
            source,
        })?;
        Ok(Pipe {
            handle,
            event: super::sync::event(true)?,
            server: self.server,
        })
    }

    /// The process on the other end, as the kernel reports it.
    pub fn peer_pid(&self) -> Result<u32> {
        let mut pid = 0;
        // SAFETY: a live pipe handle and a valid out pointer.
        let got = unsafe {
            match self.server {
                true => GetNamedPipeClientProcessId(raw(&self.handle), &mut pid),
                false => GetNamedPipeServerProcessId(raw(&self.handle), &mut pid),
            }
        };
        got.map_err(os("asking the pipe for its peer"))?;
        Ok(pid)
    }

    /// Waits for a client to connect to this server end.
    fn connect_client(&self, timeout: Duration) -> Result<()> {
        let mut connected_before = false;
        let waited = self.overlapped(
            crate::time::deadline_after(timeout),
            "waiting for a client",
            |o| {
                // SAFETY: a live pipe handle and an OVERLAPPED that outlives the operation.
                let r = unsafe { ConnectNamedPipe(raw(&self.handle), Some(o)) };
                match r {
                    // The client came between the pipe's creation and this call: nothing to wait
                    // for, and no completion will ever be posted.
                    Err(e) if e.code() == ERROR_PIPE_CONNECTED.to_hresult() => {
                        connected_before = true;
                        Err(e)
                    }
                    r => r,
                }
            },
        );
        match (waited, connected_before) {
            (_, true) => Ok(()),
            (r, false) => r.map(|_| ()),
        }
    }

    /// Reads exactly `buf.len()` bytes by `deadline` (`Error::Timeout` then; `Error::PeerLeft`
    /// when the peer closes first). For a caller's own messages: never between a channel's or
    /// a hand-off's, whose bytes it would eat.
    pub fn read_exact(&self, buf: &mut [u8], deadline: Instant) -> Result<()> {
        let mut at = 0;
        while at < buf.len() {
            let part = &mut buf[at..];
            let n = self.overlapped(deadline, "reading from the pipe", |o| {
                // SAFETY: a live handle; the buffer and the OVERLAPPED outlive the operation
                // (`overlapped` waits for it or cancels it and waits it out).
                unsafe { ReadFile(raw(&self.handle), Some(&mut *part), None, Some(o)) }
            })?;
            if n == 0 {
                return Err(Error::PeerLeft("the pipe's peer closed mid-message".into()));
            }
            at += n;
        }
        Ok(())
    }

    /// Writes all of `buf` by `deadline` (`Error::Timeout` then, a peer that reads nothing
    /// having filled the pipe).
    pub fn write_all(&self, buf: &[u8], deadline: Instant) -> Result<()> {
        let mut at = 0;
        while at < buf.len() {
            let part = &buf[at..];
            let n = self.overlapped(deadline, "writing to the pipe", |o| {
                // SAFETY: as for `read_exact`.
                unsafe { WriteFile(raw(&self.handle), Some(part), None, Some(o)) }
            })?;
            at += n;
        }
        Ok(())
    }

    /// Runs one overlapped operation `start`, waits for it until `deadline` and returns the
    /// bytes it moved; past the deadline it is cancelled and waited out, so its buffer is free
    /// again when this returns.
    fn overlapped(
        &self,
        deadline: Instant,
        what: &'static str,
        start: impl FnOnce(*mut OVERLAPPED) -> windows::core::Result<()>,
    ) -> Result<usize> {
        let mut o = OVERLAPPED {
            hEvent: raw(&self.event),
            ..Default::default()
        };
        let started = start(&mut o);
        if let Err(e) = started {
            if e.code() != ERROR_IO_PENDING.to_hresult() {
                return Err(io_error(e, what));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX);
            // SAFETY: the live event the operation signals.
            if unsafe { WaitForSingleObject(raw(&self.event), ms) } != WAIT_OBJECT_0 {
                // SAFETY: the operation started above on this handle; waiting it out below.
                let _ = unsafe { CancelIoEx(raw(&self.handle), Some(&o)) };
                let mut n = 0;
                // The one wait without a deadline, and it must be: the buffer is the caller's
                // again only once the operation is over. A cancelled pipe operation ends at once.
                // SAFETY: as above; waits until the cancelled operation is done with the buffer.
                let _ = unsafe { GetOverlappedResult(raw(&self.handle), &o, &mut n, true) };
                return Err(Error::Timeout(format!(
                    "{what}: nothing within the deadline"
                )));
            }
        }
        let mut n = 0;
        // SAFETY: the operation on this handle is complete (or completed synchronously): its
        // result is read without waiting, so nothing here can block.
        unsafe { GetOverlappedResult(raw(&self.handle), &o, &mut n, false) }
            .map_err(|e| io_error(e, what))?;
        Ok(n as usize)
    }
}

/// A failed pipe operation: the peer's leaving named as such.
fn io_error(e: windows::core::Error, what: &'static str) -> Error {
    let gone = [ERROR_BROKEN_PIPE, ERROR_NO_DATA, ERROR_PIPE_NOT_CONNECTED]
        .iter()
        .any(|c| e.code() == c.to_hresult());
    match gone {
        true => Error::PeerLeft(format!("{what}: the pipe's peer went away")),
        false => Error::Os {
            op: what,
            source: e.into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_client_that_connects_before_the_server_waits_is_accepted_at_once() {
        let name = format!("hwtensor-test-early-{}", std::process::id());
        let mut listener = Listener::bind(&name).unwrap();
        let server = listener.instance().unwrap();
        let client = Pipe::connect(&name, WAIT).unwrap(); // before ConnectNamedPipe
        let started = Instant::now();
        server.connect_client(WAIT).unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "it waited for a completion"
        );
        client.write_all(b"hi", Instant::now() + WAIT).unwrap();
        let mut got = [0u8; 2];
        server.read_exact(&mut got, Instant::now() + WAIT).unwrap();
        assert_eq!(&got, b"hi");
        assert_eq!(server.peer_pid().unwrap(), std::process::id());
    }

    #[test]
    fn a_read_with_nothing_coming_times_out_at_its_deadline() {
        let name = format!("hwtensor-test-quiet-{}", std::process::id());
        let mut listener = Listener::bind(&name).unwrap();
        let server = listener.instance().unwrap();
        let _client = Pipe::connect(&name, WAIT).unwrap();
        server.connect_client(WAIT).unwrap();
        let started = Instant::now();
        let err = server
            .read_exact(&mut [0u8; 4], Instant::now() + Duration::from_millis(100))
            .unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
