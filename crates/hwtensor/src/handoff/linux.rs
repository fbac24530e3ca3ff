//! The hand-off on Linux: a blob and its fds (SCM_RIGHTS) in one message over a Unix stream
//! socket (see the module above).

use std::io::{IoSlice, IoSliceMut};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::blob::{self, Transport, HEADER_LEN, MAX_FDS};
use crate::{Error, ImportPolicy, Result, TensorDyn};

use super::{MAX_BLOB_LEN, MAX_REFERENCE_BLOB_LEN, MID_MESSAGE_TIMEOUT};

/// Bytes that carry the blob's length claim.
const LEN_PREFIX: usize = 12;

/// How far memory may run ahead of the bytes received: a peer that announces a 1 GiB inline
/// frame and stalls has made us allocate at most this much.
const RECV_CHUNK: usize = 1 << 20;

fn handoff(what: impl Into<String>) -> Error {
    Error::Handoff(what.into())
}

/// A duplicate (close-on-exec) of the caller's `fd`, which the caller keeps: how bindings that
/// get fds as numbers (the C ABI, Python) take one in without taking it over. A negative or
/// closed number is an [`Error::Fd`] naming it.
///
/// # Safety
/// `fd`, if open, must be one the caller may share: its number is only read and duplicated.
#[allow(unsafe_code)]
pub unsafe fn dup_callers_fd(fd: RawFd) -> Result<OwnedFd> {
    if fd < 0 {
        return Err(Error::Fd(format!("fd {fd} is not an fd")));
    }
    // SAFETY: only borrowed for the duplicate below; a closed fd makes that fail with EBADF,
    // which is reported, not used.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    borrowed
        .try_clone_to_owned()
        .map_err(|e| Error::Fd(format!("fd {fd} cannot be duplicated: {e}")))
}

/// The caller's connected socket `fd` as a stream to hand tensors over, borrowed: never closed
/// here. One `fstat` proves it open and a socket (a closed fd, a pipe or a file is refused by
/// number; a duplicate to look at would cost two more syscalls per hand-off). For bindings that
/// get a socket as a number (the C ABI, Python).
///
/// # Safety
/// `fd` must stay open, and the caller's, while the stream is used.
#[allow(unsafe_code)]
pub unsafe fn borrow_socket(fd: RawFd) -> Result<ManuallyDrop<UnixStream>> {
    if fd < 0 {
        return Err(Error::Fd(format!("fd {fd} is not an fd")));
    }
    // SAFETY: only looked at (fstat); a closed number is an error, not a use.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let st = rustix::fs::fstat(borrowed)
        .map_err(|e| Error::Fd(format!("fd {fd}: fstat failed: {e}")))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(Error::Fd(format!(
            "fd {fd} is not a socket; hand-off needs a connected Unix stream socket"
        )));
    }
    // SAFETY: an open socket the caller keeps open for the stream's use (the contract);
    // ManuallyDrop never closes it.
    Ok(ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) }))
}

/// Sends `tensor` zero-copy: its fd by SCM_RIGHTS (an image in several buffers, an fd per
/// plane). Memory without an fd (heap, CUDA memory) is an error that says so: copying its
/// bytes through the socket is a different cost, which a caller asks for with [`send_as`] and
/// [`Transport::Inline`], not one to fall into.
pub fn send(stream: &UnixStream, tensor: &TensorDyn) -> Result<()> {
    if !tensor.has_fds() {
        return Err(Error::Unavailable {
            memory: tensor.memory(),
            reason: "this memory has no fd to send zero-copy; [[send_inline]] copies its bytes \
                     instead, or allocate it on shm"
                .into(),
        });
    }
    send_as(stream, tensor, Transport::Reference)
}

/// Sends `tensor` in the given transport mode.
pub fn send_as(stream: &UnixStream, tensor: &TensorDyn, mode: Transport) -> Result<()> {
    let (bytes, fds) = blob::export(tensor, mode)?;
    send_blob(stream, &bytes, &fds)
}

/// Receives one tensor (waiting for its first byte as long as the stream's read timeout
/// allows). GPU memory by reference is accepted only when the peer runs as this user.
pub fn recv(stream: &UnixStream) -> Result<TensorDyn> {
    import_from_peer(stream, recv_blob(stream)?)
}

/// [`recv`] with its own bound: the first byte waits at most until `deadline` (then
/// `Error::Timeout`), and the rest of the message until the earlier of `deadline` and
/// [`MID_MESSAGE_TIMEOUT`] after its first byte, whatever the socket's timeouts or blocking
/// mode (a socket Python's `settimeout` made non-blocking included).
pub(crate) fn recv_by(stream: &UnixStream, deadline: Instant) -> Result<TensorDyn> {
    import_from_peer(stream, receive(stream, Some(deadline))?)
}

/// Imports a received blob under the trust [`recv`] applies.
fn import_from_peer(
    stream: &UnixStream,
    (bytes, fds): (Vec<u8>, Vec<OwnedFd>),
) -> Result<TensorDyn> {
    // Asked only when it matters: shared memory needs no trust, and the hand-off hot path no
    // extra syscall.
    let policy = ImportPolicy {
        gpu_memory: blob::claims_gpu_reference(&bytes) && peer_is_this_user(stream)?,
        ..ImportPolicy::STRICT
    };
    blob::import_with(&bytes, fds, &policy)
}

/// Receives one tensor under the caller's `policy`, whoever the peer is.
pub fn recv_with(stream: &UnixStream, policy: &ImportPolicy) -> Result<TensorDyn> {
    let (bytes, fds) = recv_blob(stream)?;
    blob::import_with(&bytes, fds, policy)
}

/// Whether the process on the other end runs as this process's effective user.
fn peer_is_this_user(stream: &UnixStream) -> Result<bool> {
    let peer = rustix::net::sockopt::socket_peercred(stream)
        .map_err(|e| handoff(format!("cannot ask who the peer is (SO_PEERCRED): {e}")))?;
    Ok(peer.uid == rustix::process::geteuid())
}

/// Sends raw blob bytes with `fds` attached to the first byte.
pub fn send_blob(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty()
        && (fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)))
    {
        return Err(handoff(format!(
            "{} fds is more than the {MAX_FDS} one message carries",
            fds.len()
        )));
    }
    // Never blocking in sendmsg: a full socket is waited on with a bound, so a peer that stops
    // reading mid-message cannot hang the sender, and a socket the caller made non-blocking
    // (Python's settimeout does) still sends a large inline frame whole.
    let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
    let (mut sent, mut progress) = (0, Instant::now());
    while sent < bytes.len() {
        let iov = [IoSlice::new(&bytes[sent..])];
        match rustix::net::sendmsg(stream, &iov, &mut control, flags) {
            Ok(n) => {
                sent += n;
                progress = Instant::now();
                control.clear(); // the fds went with the first byte
            }
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => wait_writable(stream, progress, sent, bytes.len())?,
            Err(e) => {
                return Err(handoff(format!(
                    "send failed after {sent} of {} bytes: {e}",
                    bytes.len()
                )))
            }
        }
    }
    Ok(())
}

/// Waits until the socket takes more bytes, at most [`MID_MESSAGE_TIMEOUT`] after the last
/// progress: a peer that reads nothing for that long has hung or stopped reading.
fn wait_writable(stream: &UnixStream, progress: Instant, sent: usize, want: usize) -> Result<()> {
    let stalled = || {
        handoff(format!(
            "the peer stopped reading after {sent} of {want} bytes for {MID_MESSAGE_TIMEOUT:?}"
        ))
    };
    let left = MID_MESSAGE_TIMEOUT.saturating_sub(progress.elapsed());
    let timeout = rustix::event::Timespec::try_from(left).map_err(|_| stalled())?;
    let mut pfd = [PollFd::new(stream, PollFlags::OUT)];
    match poll(&mut pfd, Some(&timeout)) {
        Ok(0) => Err(stalled()),
        Ok(_) | Err(Errno::INTR) => Ok(()),
        Err(e) => Err(handoff(format!("poll for writing failed: {e}"))),
    }
}

/// Receives one blob and the fds that came with it.
pub fn recv_blob(stream: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    receive(stream, None)
}

/// Receives one blob, the whole of it by `deadline` where there is one.
fn receive(stream: &UnixStream, deadline: Option<Instant>) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut rx = Receiver {
        stream,
        fds: Vec::new(),
        started: None,
        deadline,
    };
    // Every blob has at least the fixed header, so asking for it never eats into the next
    // message; the length claim is judged as soon as its bytes are in (usually the whole header
    // comes in the same read), and the header says whether the bytes travel inline.
    let mut bytes = vec![0u8; HEADER_LEN];
    let got = rx.fill_at_least(&mut bytes, 0, LEN_PREFIX)?;
    // Refused at once: read as a blob, bytes of anything else would have their "length"
    // waited for until the mid-message bound (a channel peer's stray bytes, a wrong socket).
    if bytes[..blob::MAGIC.len()] != blob::MAGIC {
        return Err(handoff(
            "the peer sent bytes that are not a hand-off (no blob magic at their start)",
        ));
    }
    let total = blob::claimed_len(&bytes).unwrap_or(0);
    if !(HEADER_LEN..=MAX_BLOB_LEN).contains(&total) {
        return Err(handoff(format!(
            "the peer announced a {total}-byte blob ({HEADER_LEN} to {MAX_BLOB_LEN} accepted)"
        )));
    }
    rx.fill(&mut bytes, got)?;
    if blob::claimed_transport(&bytes) != Some(Transport::Inline) && total > MAX_REFERENCE_BLOB_LEN
    {
        return Err(handoff(format!(
            "the peer announced a {total}-byte reference blob (at most {MAX_REFERENCE_BLOB_LEN})"
        )));
    }
    // Memory follows the bytes: at most RECV_CHUNK ahead of what has arrived is touched. The
    // address space is reserved at once (untouched pages cost nothing), so a large inline
    // frame is not copied at every doubling; a reservation that cannot be made is an error.
    bytes.try_reserve_exact(total - bytes.len()).map_err(|_| {
        handoff(format!(
            "cannot reserve {total} bytes for the announced blob"
        ))
    })?;
    while bytes.len() < total {
        let from = bytes.len();
        bytes.resize(total.min(from.saturating_add(RECV_CHUNK)), 0);
        rx.fill(&mut bytes, from)?;
    }
    Ok((bytes, rx.fds))
}

struct Receiver<'a> {
    stream: &'a UnixStream,
    fds: Vec<OwnedFd>,
    /// When the message's first byte arrived: the mid-message deadline counts from it.
    started: Option<Instant>,
    /// The caller's bound on the whole message, if any.
    deadline: Option<Instant>,
}

impl Receiver<'_> {
    /// Fills `buf[from..]` from the socket, collecting fds as they come.
    fn fill(&mut self, buf: &mut [u8], from: usize) -> Result<()> {
        self.fill_at_least(buf, from, buf.len()).map(|_| ())
    }

    /// Reads into `buf[from..]` until at least `at_least` bytes of it are there (more if they
    /// came in the same read); returns how many are.
    fn fill_at_least(&mut self, buf: &mut [u8], from: usize, at_least: usize) -> Result<usize> {
        let mut got = from;
        while got < at_least {
            // Mid-message, the rest is usually there already: read without blocking first, and
            // poll (bounded) only when it is not (a poll before every read cost a syscall).
            let flags = match (self.started, self.deadline) {
                (None, None) => RecvFlags::CMSG_CLOEXEC,
                _ => RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
            };
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(&mut buf[got..])];
            let msg = match rustix::net::recvmsg(self.stream, &mut iov, &mut control, flags) {
                Ok(m) => m,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => match (self.started, self.deadline) {
                    (Some(started), _) => {
                        self.wait_readable(started, got, buf.len())?;
                        continue;
                    }
                    (None, Some(deadline)) => {
                        if !readable_by(self.stream, deadline)? {
                            return Err(Error::Timeout("no message within the timeout".into()));
                        }
                        continue;
                    }
                    // Nothing started: the caller's bound, not a broken peer.
                    (None, None) => {
                        return Err(Error::Timeout(
                            "no message within the stream's read timeout".into(),
                        ))
                    }
                },
                Err(e) => {
                    return Err(handoff(format!(
                        "receive failed after {got} of {} bytes: {e}",
                        buf.len()
                    )))
                }
            };
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = message {
                    self.fds.extend(fds);
                }
            }
            if msg.flags.contains(ReturnFlags::CTRUNC) || self.fds.len() > MAX_FDS {
                return Err(handoff(format!(
                    "the peer sent more fds than the {MAX_FDS} a blob may name"
                )));
            }
            if msg.bytes == 0 {
                return Err(handoff(format!(
                    "the peer closed the socket after {got} of {} bytes",
                    buf.len()
                )));
            }
            self.started.get_or_insert_with(Instant::now);
            got += msg.bytes;
        }
        Ok(got)
    }

    fn wait_readable(&self, started: Instant, got: usize, want: usize) -> Result<()> {
        let stalled = started + MID_MESSAGE_TIMEOUT;
        let by = self.deadline.map_or(stalled, |d| d.min(stalled));
        match readable_by(self.stream, by)? {
            true => Ok(()),
            false => Err(handoff(format!(
                "the peer stalled after {got} of {want} bytes for {:?}",
                by.saturating_duration_since(started)
            ))),
        }
    }
}

/// Waits until `stream` is readable (or hung up), at most until `deadline`: `false` when it
/// passed first.
pub(crate) fn readable_by(stream: impl std::os::fd::AsFd, deadline: Instant) -> Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = rustix::event::Timespec::try_from(left)
            .map_err(|_| handoff(format!("a wait of {left:?} is out of range")))?;
        let mut pfd = [PollFd::new(&stream, PollFlags::IN)];
        match poll(&mut pfd, Some(&timeout)) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::INTR) if Instant::now() < deadline => continue,
            Err(Errno::INTR) => return Ok(false),
            Err(e) => return Err(handoff(format!("poll failed: {e}"))),
        }
    }
}
