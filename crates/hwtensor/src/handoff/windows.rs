//! The hand-off on Windows: a blob over a connected named pipe, shared memory (a section) and
//! GPU images (a texture and its completion fence) by handle.
//!
//! One message: a 40-byte head (magic, version, whether the blob is by reference and whether a
//! fence comes, the blob's length, the sender's memory handle value, a section's identity: the
//! process that made it and its serial there, and the fence's handle value), then the blob. The receiver duplicates the handle out of the
//! sender's process, whose id the pipe itself reports (never the message): so a message can
//! only name handles the sender holds, and the receiver only ever closes handles it made. It
//! needs `PROCESS_DUP_HANDLE` on the sender, which Windows grants a process of the same user.
//! It answers one byte (taken or refused) before it imports, so the sender may drop the tensor
//! when `send` returns; every wait is bounded.

use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::time::{Duration, Instant};

use super::{MAX_BLOB_LEN, MAX_REFERENCE_BLOB_LEN, MID_MESSAGE_TIMEOUT};
use crate::blob::{self, Transport};
use crate::identity::BufferIdentity;
pub use crate::os::pipe::{Listener as PipeListener, Pipe};
use crate::{Error, Result, TensorDyn};

/// "HWTP": a message that is not a hand-off fails here first.
const MAGIC: [u8; 4] = *b"HWTP";
/// The message layout's version. 2: a fence handle beside the memory's.
const VERSION: u16 = 2;
/// Bytes of the head.
const HEAD_LEN: usize = 40;
/// Head flag: the blob is by reference (a memory handle travels with it).
const BY_HANDLE: u16 = 1;
/// Head flag: a fence handle travels too (a GPU image's completion).
const HAS_FENCE: u16 = 2;
/// The receiver's answer: the handle was duplicated (the sender may let go of it).
const TAKEN: u8 = 1;
/// The receiver's answer: the handle could not be duplicated.
const REFUSED: u8 = 0;

/// What the head of a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Head {
    by_handle: bool,
    blob_len: usize,
    handle: u64,
    creator: u32,
    serial: u64,
    /// The fence's handle value; `None`: no fence comes.
    fence: Option<u64>,
}

impl Head {
    fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        let fence = if self.fence.is_some() { HAS_FENCE } else { 0 };
        let flags = u16::from(self.by_handle) | fence;
        b[6..8].copy_from_slice(&flags.to_le_bytes());
        b[8..12].copy_from_slice(&(self.blob_len as u32).to_le_bytes());
        b[12..16].copy_from_slice(&self.creator.to_le_bytes());
        b[16..24].copy_from_slice(&self.handle.to_le_bytes());
        b[24..32].copy_from_slice(&self.serial.to_le_bytes());
        b[32..40].copy_from_slice(&self.fence.unwrap_or(0).to_le_bytes());
        b
    }

    /// The head in `b`, checked: magic, version, flags, and a blob length within the limit of
    /// its kind.
    fn decode(b: &[u8; HEAD_LEN]) -> Result<Head> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        if b[0..4] != MAGIC {
            return Err(Error::Handoff("not a hand-off message (bad magic)".into()));
        }
        if u16_at(4) != VERSION {
            return Err(Error::Handoff(format!(
                "hand-off message version {} (this reads {VERSION})",
                u16_at(4)
            )));
        }
        let flags = u16_at(6);
        if flags & !(BY_HANDLE | HAS_FENCE) != 0 {
            return Err(Error::Handoff(format!("unknown hand-off flags {flags:#x}")));
        }
        let head = Head {
            by_handle: flags & BY_HANDLE != 0,
            blob_len: u32_at(8) as usize,
            creator: u32_at(12),
            handle: u64_at(16),
            serial: u64_at(24),
            fence: (flags & HAS_FENCE != 0).then(|| u64_at(32)),
        };
        let limit = match head.by_handle {
            true => MAX_REFERENCE_BLOB_LEN,
            false => MAX_BLOB_LEN,
        };
        if head.blob_len > limit {
            return Err(Error::Handoff(format!(
                "a {}-byte blob is past the {limit}-byte limit",
                head.blob_len
            )));
        }
        let names = (head.handle, head.creator, head.serial, u64_at(32));
        if !head.by_handle && (names != (0, 0, 0, 0) || head.fence.is_some()) {
            return Err(Error::Handoff("an inline message names a handle".into()));
        }
        Ok(head)
    }
}

/// Sends `tensor` over `pipe`: shared memory and GPU images by handle (no copy), anything
/// else refused with the way to send it inline. Returns once the receiver has taken the
/// handles.
pub fn send(pipe: &Pipe, tensor: &TensorDyn) -> Result<()> {
    send_as(pipe, tensor, Transport::Reference)
}

/// [`send`] in the transport asked for: `Inline` copies the bytes into the message.
pub fn send_as(pipe: &Pipe, tensor: &TensorDyn, mode: Transport) -> Result<()> {
    send_within(pipe, tensor, mode, MID_MESSAGE_TIMEOUT)
}

/// [`send_as`] that gives the pipe and the receiver's answer at most `timeout` (rather than
/// [`MID_MESSAGE_TIMEOUT`]).
pub fn send_within(
    pipe: &Pipe,
    tensor: &TensorDyn,
    mode: Transport,
    timeout: Duration,
) -> Result<()> {
    let deadline = after(timeout);
    match mode {
        Transport::Inline => {
            let bytes = blob::export_inline(tensor)?;
            let head = Head {
                by_handle: false,
                blob_len: bytes.len(),
                handle: 0,
                creator: 0,
                serial: 0,
                fence: None,
            };
            write_message(pipe, &head, &bytes, deadline)
        }
        Transport::Reference => {
            let out = blob::section::export(tensor)?;
            let (creator, serial) = match out.identity {
                BufferIdentity::Section { pid, serial } => (pid, serial),
                _ => (0, 0),
            };
            let head = Head {
                by_handle: true,
                blob_len: out.blob.len(),
                handle: out.memory.value(),
                creator,
                serial,
                fence: out.fence.as_ref().map(|f| f.as_raw_handle() as u64),
            };
            // The handles stay valid until the answer: `out` lives until this returns.
            write_message(pipe, &head, &out.blob, deadline)
        }
    }
}

/// Writes a head and its blob, then waits for the receiver's answer.
fn write_message(pipe: &Pipe, head: &Head, bytes: &[u8], deadline: Instant) -> Result<()> {
    pipe.write_all(&head.encode(), deadline)?;
    pipe.write_all(bytes, deadline)?;
    answer(pipe, deadline)
}

/// Waits for the receiver's answer.
fn answer(pipe: &Pipe, deadline: Instant) -> Result<()> {
    let mut a = [0u8];
    pipe.read_exact(&mut a, deadline)?;
    match a[0] {
        TAKEN => Ok(()),
        _ => Err(Error::Handoff(
            "the receiver could not duplicate the handles (it needs PROCESS_DUP_HANDLE on this \
             process: the same user)"
                .into(),
        )),
    }
}

/// Receives one tensor from `pipe`, waiting at most `timeout` for a message to begin (then at
/// most [`MID_MESSAGE_TIMEOUT`] for the rest). Handles are checked before they are used: a
/// section must be one this process can map, at least as large as the blob says; a texture one
/// of this adapter that is the blob's image, its completion waited for (bounded).
pub fn recv(pipe: &Pipe, timeout: Duration) -> Result<TensorDyn> {
    recv_by(pipe, after(timeout))
}

/// [`recv`] with a message begun by `deadline` (a channel's set-up bounds its whole pool).
pub(crate) fn recv_by(pipe: &Pipe, deadline: Instant) -> Result<TensorDyn> {
    let mut raw = [0u8; HEAD_LEN];
    pipe.read_exact(&mut raw[..1], deadline)?;
    let deadline = Instant::now() + MID_MESSAGE_TIMEOUT;
    pipe.read_exact(&mut raw[1..], deadline)?;
    let head = Head::decode(&raw)?;
    let mut bytes = vec![0u8; head.blob_len];
    pipe.read_exact(&mut bytes, deadline)?;
    if !head.by_handle {
        pipe.write_all(&[TAKEN], deadline)?;
        return blob::import_inline(&bytes);
    }
    let taken = take_handle(pipe, head.handle).and_then(|memory| {
        let fence = head.fence.map(|f| take_handle(pipe, f)).transpose()?;
        Ok((memory, fence))
    });
    let (memory, fence) = match taken {
        Ok(h) => h,
        Err(e) => {
            let _ = pipe.write_all(&[REFUSED], deadline);
            return Err(e);
        }
    };
    pipe.write_all(&[TAKEN], deadline)?;
    let identity = BufferIdentity::Section {
        pid: head.creator,
        serial: head.serial,
    };
    blob::section::import(&bytes, memory, fence, identity)
}

/// The instant `timeout` from now (a timeout past the clock's range is a day: no hand-off
/// waits longer, and `Instant` cannot say "never").
fn after(timeout: Duration) -> Instant {
    const LONGEST: Duration = Duration::from_secs(24 * 60 * 60);
    Instant::now() + timeout.min(LONGEST)
}

/// Duplicates handle `value` out of the pipe's peer into this process.
fn take_handle(pipe: &Pipe, value: u64) -> Result<OwnedHandle> {
    crate::os::handles::duplicate_from(pipe.peer_pid()?, value)
}

#[cfg(test)]
#[allow(unsafe_code)] // the tests make raw handles of their own to forge messages with
mod tests {
    use super::*;
    use crate::os::handles::held as handles;
    use crate::{Tensor, TensorMemory};
    use windows::Win32::Foundation::INVALID_HANDLE_VALUE;
    use windows::Win32::System::Memory::{CreateFileMappingW, PAGE_READWRITE};
    use windows::Win32::System::Threading::CreateEventW;

    const WAIT: Duration = Duration::from_secs(10);

    /// A connected pair of pipe ends in this process (the peer of each is this process).
    fn pair(name: &str) -> (Pipe, Pipe) {
        let mut listener = PipeListener::bind(name).unwrap();
        let name = name.to_string();
        let client = std::thread::spawn(move || Pipe::connect(&name, WAIT).unwrap());
        let server = listener.accept(WAIT).unwrap();
        (server, client.join().unwrap())
    }

    /// A unique pipe name for a test.
    fn name(test: &str) -> String {
        format!("hwtensor-test-{test}-{}", std::process::id())
    }

    /// The blob of a `len`-byte shm tensor by reference.
    fn blob_of(len: usize) -> Vec<u8> {
        let t = TensorDyn::from(Tensor::<u8>::new(&[len], Some(TensorMemory::Shm)).unwrap());
        blob::section::export(&t).unwrap().blob
    }

    /// Writes a message naming `handle` with `bytes` as its blob, then reads the answer.
    fn forge(pipe: &Pipe, handle: u64, bytes: &[u8]) {
        let head = Head {
            by_handle: true,
            blob_len: bytes.len(),
            handle,
            creator: std::process::id(),
            serial: 1,
            fence: None,
        };
        let deadline = Instant::now() + WAIT;
        pipe.write_all(&head.encode(), deadline).unwrap();
        pipe.write_all(bytes, deadline).unwrap();
    }

    #[test]
    fn a_shm_tensor_crosses_a_pipe_as_its_own_section() {
        let (server, client) = pair(&name("section"));
        let t = Tensor::<u16>::new(&[64, 64], Some(TensorMemory::Shm)).unwrap();
        t.map_write().unwrap().fill(7);
        let sender =
            std::thread::spawn(move || send(&server, &TensorDyn::from(t.clone())).map(|()| t));
        let got = recv(&client, WAIT).unwrap().into_tensor::<u16>().unwrap();
        let t = sender.join().unwrap().unwrap();
        assert_eq!(got.identity(), t.identity());
        assert!(got.to_vec().unwrap().iter().all(|&v| v == 7));
        got.map_write().unwrap().fill(8); // the same memory: the sender sees it
        assert!(t.to_vec().unwrap().iter().all(|&v| v == 8));
    }

    #[test]
    fn heap_memory_is_refused_by_reference_and_crosses_inline() {
        let (server, client) = pair(&name("inline"));
        let t = TensorDyn::from(Tensor::<u8>::new(&[16], Some(TensorMemory::Mem)).unwrap());
        let err = send(&server, &t).unwrap_err();
        assert!(err.to_string().contains("inline"), "{err}");
        let sender = std::thread::spawn(move || send_as(&server, &t, Transport::Inline));
        let got = recv(&client, WAIT).unwrap();
        sender.join().unwrap().unwrap();
        assert_eq!(got.shape(), &[16]);
    }

    #[test]
    fn hostile_handles_are_refused_and_leave_no_handle_behind() {
        let (server, client) = pair(&name("hostile"));
        // SAFETY: an unnamed event of our own, closed below.
        let event = unsafe { CreateEventW(None, true, false, None) }.unwrap();
        // SAFETY: a 4 KiB pagefile-backed section of our own, closed below.
        let small = unsafe {
            CreateFileMappingW(INVALID_HANDLE_VALUE, None, PAGE_READWRITE, 0, 4096, None)
        }
        .unwrap();
        let before = handles();
        let cases: [(u64, Vec<u8>, &str); 3] = [
            (event.0 as u64, blob_of(4096), "not a section"),
            (small.0 as u64, blob_of(1 << 20), "the buffer holds 4096"),
            (0x7ff0_0004, blob_of(4096), "cannot be duplicated"),
        ];
        for (handle, bytes, why) in cases {
            forge(&client, handle, &bytes);
            let err = recv(&server, WAIT).unwrap_err().to_string();
            let mut answer = [9u8];
            client
                .read_exact(&mut answer, Instant::now() + WAIT)
                .unwrap();
            assert!(err.to_lowercase().contains(why), "{why}: {err}");
        }
        assert_eq!(handles(), before, "a refused handle stayed open");
        // SAFETY: the two handles made above, closed once.
        unsafe {
            let _ = windows::Win32::Foundation::CloseHandle(event);
            let _ = windows::Win32::Foundation::CloseHandle(small);
        }
    }

    #[test]
    fn a_peer_that_dies_mid_message_is_an_error_not_a_hang() {
        let (server, client) = pair(&name("dies"));
        let head = Head {
            by_handle: true,
            blob_len: 200,
            handle: 4,
            creator: 1,
            serial: 1,
            fence: None,
        };
        client
            .write_all(&head.encode()[..10], Instant::now() + WAIT)
            .unwrap();
        drop(client);
        let started = Instant::now();
        let err = recv(&server, WAIT).unwrap_err();
        assert!(matches!(err, Error::PeerLeft(_)), "{err}");
        assert!(started.elapsed() < MID_MESSAGE_TIMEOUT);
    }

    #[test]
    fn a_head_round_trips_and_every_truncation_or_flag_it_does_not_know_is_refused() {
        let head = Head {
            by_handle: true,
            blob_len: 200,
            handle: 0x1234,
            creator: 77,
            serial: 9,
            fence: Some(0x5678),
        };
        assert_eq!(Head::decode(&head.encode()).unwrap(), head);
        let mut flags = head.encode();
        flags[6] = 2;
        assert!(Head::decode(&flags).is_err());
        let mut magic = head.encode();
        magic[0] ^= 1;
        assert!(Head::decode(&magic).is_err());
        let huge = Head {
            blob_len: MAX_REFERENCE_BLOB_LEN + 1,
            ..head
        };
        assert!(Head::decode(&huge.encode()).is_err());
        let inline_with_handle = Head {
            by_handle: false,
            ..head
        };
        assert!(Head::decode(&inline_with_handle.encode()).is_err());
    }
}
