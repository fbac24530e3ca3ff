//! What a hostile or crashed peer can do to a receiver: at worst get an `Err` naming what was
//! wrong. No hang, no SIGBUS, no read or write of another buffer, no stall of our timeline.

// The other-user peer drops its privileges with setgid/setuid.
#![allow(unsafe_code)]
#![cfg(target_os = "linux")]

mod common;

use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::device_or_skip;
use hwtensor::blob::{self, Transport, HEADER_LEN, REQUIRES_COMPLETION};
use hwtensor::handoff::{recv_blob, send_blob, MAX_REFERENCE_BLOB_LEN};
use hwtensor::{Error, ImportPolicy, Region, Tensor, TensorDyn, TensorMemory};

const TRUSTED: ImportPolicy = ImportPolicy::TRUSTED_PEER;
const N: usize = 4096;
/// Longer than any honest import takes; a hang shows up as this bound passing.
const NO_HANG: Duration = Duration::from_secs(30);

// Header offsets (the table in `hwtensor::blob`).
const REQUIRED_AT: usize = 12;
const FD_COUNT_AT: usize = 23;
const COMPLETION_FD_AT: usize = 72;
const COMPLETION_VALUE_AT: usize = 80;
const PRODUCER_AT: usize = 136;
const PRODUCER_END: usize = 160;

fn gpu_tensor(seed: u8) -> Tensor<u8> {
    let t = Tensor::<u8>::new(&[N], Some(TensorMemory::Gpu)).unwrap();
    t.map_write().unwrap().fill(seed);
    t
}

/// The blob of a GPU tensor by reference, and owned copies of its fds: the memory's, and the
/// fence's where the device exports one (NVIDIA; lavapipe sends none).
fn gpu_blob(t: &Tensor<u8>) -> (Vec<u8>, Vec<OwnedFd>) {
    let t: TensorDyn = t.clone().into();
    let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    let fds = fds
        .iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect();
    (bytes, fds)
}

/// The fds of a blob with `memory` in place of the memory fd (the fence, if any, kept).
fn with_memory_fd(fds: &[OwnedFd], memory: OwnedFd) -> Vec<OwnedFd> {
    std::iter::once(memory)
        .chain(fds[1..].iter().map(|f| f.try_clone().unwrap()))
        .collect()
}

/// Runs `f` on a thread and fails the test if it does not return within [`NO_HANG`].
fn without_hanging<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(NO_HANG)
        .unwrap_or_else(|_| panic!("{what} hung for {NO_HANG:?}"))
}

fn write_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn write_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn a_pipe_socket_eventfd_or_fifo_sent_as_gpu_memory_is_refused_and_never_waited_on() {
    let test = "a_pipe_socket_eventfd_or_fifo_sent_as_gpu_memory_is_refused_and_never_waited_on";
    if device_or_skip(test).is_none() {
        return;
    }
    let t = gpu_tensor(1);
    let (bytes, sent) = gpu_blob(&t);
    drop(t); // no live import to find: the fd itself must be judged
    let fifo = std::env::temp_dir().join(format!("hwtensor-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
    let fifo_fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap()
        .into();
    let (pipe, _writer) = std::io::pipe().unwrap();
    let (socket, _other) = UnixStream::pair().unwrap();
    let event = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    for (name, fd) in [
        ("pipe", OwnedFd::from(pipe)),
        ("socket", socket.into()),
        ("eventfd", event),
        ("fifo", fifo_fd),
    ] {
        let bytes = bytes.clone();
        let fds = with_memory_fd(&sent, fd);
        let result = without_hanging(name, move || blob::import_with(&bytes, fds, &TRUSTED));
        let err = result.expect_err(name);
        assert!(matches!(err, Error::Fd(_)), "{name}: {err}");
    }
    std::fs::remove_file(&fifo).unwrap();
}

#[test]
fn a_memfd_that_could_shrink_is_never_imported_as_gpu_memory() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let t = gpu_tensor(2);
    let (bytes, sent) = gpu_blob(&t);
    drop(t);
    // Named like lavapipe's exports, so only the missing seal tells it apart there.
    let fd =
        rustix::fs::memfd_create("llvmpipe memory fd", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 1 << 20).unwrap();
    let err = blob::import_with(&bytes, with_memory_fd(&sent, fd), &TRUSTED).unwrap_err();
    assert!(matches!(err, Error::Fd(_)), "{} : {err}", d.adapter_label());
}

#[test]
fn gpu_memory_by_reference_is_refused_unless_the_peer_is_trusted() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t = gpu_tensor(3);
    let (bytes, fds) = gpu_blob(&t);
    let err = blob::import(&bytes, fds).unwrap_err();
    assert!(err.to_string().contains("trusted peer"), "{err}");
}

#[test]
fn a_gpu_memory_fd_is_never_mapped_as_shared_memory() {
    if device_or_skip(test_name!()).is_none() {
        return;
    }
    let t = gpu_tensor(4);
    let gpu_fd = t.clone_fd().unwrap();
    assert!(Tensor::<u8>::from_fd(gpu_fd, &[N]).is_err());
    // A blob that says shm around the GPU fd.
    let shm = Tensor::<u8>::new(&[N], Some(TensorMemory::Shm)).unwrap();
    let (bytes, _) = blob::export(&shm.into(), Transport::Reference).unwrap();
    assert!(blob::import_with(&bytes, vec![t.clone_fd().unwrap()], &TRUSTED).is_err());
    assert!(
        t.to_vec().unwrap().iter().all(|&b| b == 4),
        "the GPU bytes are untouched"
    );
}

#[test]
fn a_completion_the_peer_chose_never_reaches_our_timeline() {
    let Some(d) = device_or_skip(test_name!()) else {
        return;
    };
    let t = gpu_tensor(5);
    let (mut bytes, sent) = gpu_blob(&t);
    let mut sent = sent.into_iter();
    let fd = sent.next().unwrap();
    let fd2 = fd.try_clone().unwrap();
    let real_fence = sent.next();
    // A value far ahead, with /dev/null for its fence: what a consumer sending our buffer back
    // could claim.
    let required = u32::from_le_bytes(bytes[REQUIRED_AT..REQUIRED_AT + 4].try_into().unwrap());
    write_u32(&mut bytes, REQUIRED_AT, required | REQUIRES_COMPLETION);
    bytes[FD_COUNT_AT] = 2;
    write_u32(&mut bytes, COMPLETION_FD_AT, 1);
    write_u64(&mut bytes, COMPLETION_VALUE_AT, u64::MAX - 1);
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let fds = vec![fd.try_clone().unwrap(), null];
    let err = without_hanging("the import", {
        let bytes = bytes.clone();
        move || blob::import_with(&bytes, fds, &TRUSTED)
    })
    .unwrap_err();
    assert!(!err.to_string().is_empty());
    // The same claim in a blob refused for its geometry (overlapping strides) has no effect
    // either: nothing is recorded before validation.
    let mut overlapping = bytes.clone();
    write_u64(&mut overlapping, HEADER_LEN + 8, 0);
    let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let fds = vec![fd, null];
    assert!(blob::import_with(&overlapping, fds, &TRUSTED).is_err());
    // Our own work and maps go on as before.
    let started = Instant::now();
    let v = d.signal().unwrap();
    d.wait(v, Duration::from_secs(5)).unwrap();
    assert!(t.to_vec().unwrap().iter().all(|&b| b == 5));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        d.last_signalled() < u64::MAX / 2,
        "our timeline took the peer's value"
    );
    // Where the device exports its fence (NVIDIA), the same claim on the real fence: waited
    // for through that fence, bounded, and a timeout for this import alone.
    if let Some(fence) = real_fence {
        let started = Instant::now();
        let err = blob::import_with(&bytes, vec![fd2, fence], &TRUSTED).unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");
        assert!(started.elapsed() < NO_HANG);
        let v = d.signal().unwrap();
        d.wait(v, Duration::from_secs(5)).unwrap();
        assert!(t.to_vec().unwrap().iter().all(|&b| b == 5));
    }
}

#[test]
fn a_blob_claiming_another_buffers_identity_gets_its_own_memory_not_that_buffer() {
    let test = "a_blob_claiming_another_buffers_identity_gets_its_own_memory_not_that_buffer";
    if device_or_skip(test).is_none() {
        return;
    }
    let a = gpu_tensor(0xAA);
    let b = gpu_tensor(0xBB);
    let (a_bytes, _) = gpu_blob(&a);
    let (mut b_bytes, b_fds) = gpu_blob(&b);
    // B's fd, sent under A's identity (A is alive here, so a lookup by identity finds it).
    b_bytes[PRODUCER_AT..PRODUCER_END].copy_from_slice(&a_bytes[PRODUCER_AT..PRODUCER_END]);
    let got = blob::import_with(&b_bytes, b_fds, &TRUSTED)
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    assert!(
        got.to_vec().unwrap().iter().all(|&x| x == 0xBB),
        "read B's memory"
    );
    got.map_write().unwrap().fill(0xCC);
    assert!(
        a.to_vec().unwrap().iter().all(|&x| x == 0xAA),
        "A was written"
    );
}

#[test]
fn hostile_strides_and_dimensions_are_refused_at_import() {
    let t = Tensor::<u8>::new(&[1, 4], Some(TensorMemory::Mem)).unwrap();
    let (bytes, _) = blob::export(&t.into(), Transport::Inline).unwrap();
    let shape_at = HEADER_LEN;
    let strides_at = HEADER_LEN + 2 * 8;
    // A stride of 2^63 on the length-1 axis: a view at its end would wrap its offset.
    let mut huge_stride = bytes.clone();
    write_u64(&mut huge_stride, strides_at, 1 << 63);
    let err = blob::import(&huge_stride, vec![]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    // 2^63 rows beside a zero-length axis: past what ndarray may be handed.
    let mut huge_dim = bytes.clone();
    write_u64(&mut huge_dim, shape_at, 1 << 63);
    write_u64(&mut huge_dim, shape_at + 8, 0);
    write_u64(&mut huge_dim, bytes.len() - 4 - 8, 0); // the plane record's size
    let err = blob::import(&huge_dim, vec![]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    // A stride past isize::MAX on an empty axis: ndarray would read it as negative.
    let mut empty_axis = huge_dim.clone();
    write_u64(&mut empty_axis, shape_at, 0);
    write_u64(&mut empty_axis, strides_at + 8, 1 << 63);
    let err = blob::import(&empty_axis, vec![]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
}

#[test]
fn a_view_at_the_far_edge_of_a_wide_stride_is_checked_arithmetic() {
    let t = Tensor::<u8>::new(&[1, 4], Some(TensorMemory::Mem)).unwrap();
    let (mut bytes, _) = blob::export(&t.into(), Transport::Inline).unwrap();
    // The widest stride the reach check lets through on a length-1 axis.
    write_u64(&mut bytes, HEADER_LEN + 2 * 8, 1 << 61);
    let wide = blob::import(&bytes, vec![])
        .unwrap()
        .into_tensor::<u8>()
        .unwrap();
    let edge = wide.view(Region::new(0, 1, 4, 0)).unwrap();
    assert!(edge.to_vec().unwrap().is_empty());
    assert!(edge.map_read().unwrap().view().is_empty());
    assert_eq!(wide.to_vec().unwrap().len(), 4);
}

/// Resident memory of this process in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_length_prefix_alone_pins_no_memory() {
    let t = Tensor::<u8>::new(&[64], Some(TensorMemory::Mem)).unwrap();
    let (mut bytes, _) = blob::export(&t.into(), Transport::Inline).unwrap();
    write_u32(&mut bytes, 8, 1 << 30); // announces a 1 GiB inline blob
    let (a, b) = UnixStream::pair().unwrap();
    send_blob(&a, &bytes[..HEADER_LEN], &[]).unwrap(); // then stalls
    let before = rss_kib();
    let receiver = std::thread::spawn(move || {
        let r = recv_blob(&b);
        (r.map(|_| ()), rss_kib())
    });
    std::thread::sleep(Duration::from_millis(500));
    let during = rss_kib();
    let (result, _) = receiver.join().unwrap();
    assert!(result.is_err(), "a stalled blob is an error");
    let grew = during.saturating_sub(before);
    // Well below the 1 GiB announced: other tests of this binary allocate meanwhile (a GPU
    // driver's start alone takes tens of MiB).
    assert!(
        grew < 256 * 1024,
        "waiting for a stalled 1 GiB blob grew RSS by {grew} KiB"
    );
    drop(a);
}

#[test]
fn a_reference_blob_longer_than_a_description_is_refused_before_its_body_arrives() {
    let t: TensorDyn = Tensor::<u8>::new(&[64], Some(TensorMemory::Shm))
        .unwrap()
        .into();
    let (mut bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
    write_u32(&mut bytes, 8, (MAX_REFERENCE_BLOB_LEN + 1) as u32);
    let (a, b) = UnixStream::pair().unwrap();
    send_blob(&a, &bytes, &fds).unwrap(); // the announced rest never comes
    let started = Instant::now();
    let err = recv_blob(&b).unwrap_err();
    assert!(err.to_string().contains("reference blob"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused without waiting"
    );
    let _ = a.as_fd();
}

const PEER_ROLE: &str = "HWTENSOR_TEST_OTHER_USER_PEER";
const OTHER_USER_TEST: &str = "gpu_memory_from_a_peer_of_another_user_is_refused_by_recv";
/// The unprivileged user the peer process becomes (`nobody` on Debian).
const NOBODY: u32 = 65534;

/// The peer: becomes another user, connects and sends the GPU blob it was given, with a memfd.
fn other_user_peer(spec: &str) {
    let (socket, blob_path) = spec.split_once('|').unwrap();
    let bytes = std::fs::read(blob_path).unwrap();
    // SAFETY: setgid/setuid on this single-purpose child process before any thread starts.
    assert_eq!(unsafe { libc::setgid(NOBODY) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setuid(NOBODY) }, 0);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(socket).unwrap();
    let stream = UnixStream::connect_addr(&addr).unwrap();
    // As many fds as the blob names (memory, and a fence on NVIDIA), none of them real.
    let fds: Vec<OwnedFd> = (0..bytes[FD_COUNT_AT])
        .map(|_| rustix::fs::memfd_create("peer", rustix::fs::MemfdFlags::CLOEXEC).unwrap())
        .collect();
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_blob(&stream, &bytes, &borrowed).unwrap();
    let mut done = [0u8; 1];
    let _ = std::io::Read::read(&mut &stream, &mut done);
}

#[test]
fn gpu_memory_from_a_peer_of_another_user_is_refused_by_recv() {
    if let Ok(spec) = std::env::var(PEER_ROLE) {
        return other_user_peer(&spec);
    }
    if device_or_skip(OTHER_USER_TEST).is_none() {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        // Only root can start a process of another user; CI runs as root.
        eprintln!("SKIPPED: {OTHER_USER_TEST} - not root, cannot start a peer of another user");
        return;
    }
    let t = gpu_tensor(6);
    let (bytes, _) = gpu_blob(&t);
    let dir = std::env::temp_dir().join(format!("hwtensor-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let blob_path = dir.join("blob");
    std::fs::write(&blob_path, &bytes).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        &blob_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let name = format!("hwtensor-other-user-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            OTHER_USER_TEST,
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_ROLE, format!("{name}|{}", blob_path.display()))
        .spawn()
        .unwrap();
    let (stream, _) = listener.accept().unwrap();
    let err = hwtensor::handoff::recv(&stream).unwrap_err();
    drop(stream);
    assert!(child.wait().unwrap().success(), "the peer failed");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.to_string().contains("trusted peer"), "{err}");
}
