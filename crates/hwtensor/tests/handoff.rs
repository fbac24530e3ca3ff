//! Hand-off over a Unix socket: fds travel with the blob, and a misbehaving peer is an error.

#![cfg(target_os = "linux")]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use hwtensor::blob::{self, Transport};
use hwtensor::handoff::{recv, recv_blob, send, send_as, send_blob, MID_MESSAGE_TIMEOUT};
use hwtensor::{CpuAccess, Error, ImageSpec, PixelFormat, Tensor, TensorDyn, TensorMemory};

fn frame(memory: TensorMemory) -> Tensor<u8> {
    let t = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 32),
        Some(memory),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    t.map_write().unwrap().fill(0x5a);
    t
}

#[test]
fn a_frame_sent_over_a_socket_arrives_as_the_same_shared_buffer() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = frame(TensorMemory::Shm);
    send(&a, &t.clone().into()).unwrap();
    let got = recv(&b).unwrap();
    assert_eq!(got.identity(), t.identity());
    let got = got.into_tensor::<u8>().unwrap();
    got.map_write().unwrap()[0] = 1;
    assert_eq!(t.map_read().unwrap()[0], 1, "both sides see one buffer");
}

#[test]
fn a_pooled_buffer_received_again_while_held_reuses_the_receivers_mapping() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = TensorDyn::from(frame(TensorMemory::Shm));
    send(&a, &t).unwrap();
    let first = recv(&b).unwrap().into_tensor::<u8>().unwrap();
    send(&a, &t).unwrap();
    let again = recv(&b).unwrap().into_tensor::<u8>().unwrap();
    assert_eq!(first.identity(), again.identity());
    let (p1, p2) = (
        first.map_read().unwrap().as_ptr(),
        again.map_read().unwrap().as_ptr(),
    );
    assert_eq!(p1, p2, "the same file was mapped twice");
    // One buffer: a write map of one excludes a map of the other, as for views.
    let w = first.map_write().unwrap();
    assert!(again.map_read().is_err());
    drop(w);
}

#[test]
fn received_fds_are_close_on_exec() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = frame(TensorMemory::Shm);
    let d: TensorDyn = t.into();
    let (bytes, fds) = blob::export(&d, Transport::Reference).unwrap();
    send_blob(&a, &bytes, &fds).unwrap();
    let (_, fds) = recv_blob(&b).unwrap();
    assert_eq!(fds.len(), 1);
    assert!(rustix::io::fcntl_getfd(&fds[0])
        .unwrap()
        .contains(rustix::io::FdFlags::CLOEXEC));
}

#[test]
fn a_heap_frame_is_sent_inline_only_when_asked_and_send_says_so() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = frame(TensorMemory::Mem);
    let d: TensorDyn = t.into();
    let err = send(&a, &d).unwrap_err();
    assert!(err.to_string().contains("Transport::Inline"), "{err}");
    let writer = std::thread::spawn(move || send_as(&a, &d, Transport::Inline));
    let got = recv(&b).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(got.memory(), TensorMemory::Mem);
    assert!(got
        .as_tensor::<u8>()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|&x| x == 0x5a));
}

#[test]
fn back_to_back_messages_are_received_one_at_a_time() {
    let (a, b) = UnixStream::pair().unwrap();
    let first = frame(TensorMemory::Shm);
    let second = frame(TensorMemory::Shm);
    send(&a, &first.clone().into()).unwrap();
    send(&a, &second.clone().into()).unwrap();
    assert_eq!(recv(&b).unwrap().identity(), first.identity());
    assert_eq!(recv(&b).unwrap().identity(), second.identity());
}

#[test]
fn a_peer_that_closes_mid_message_is_an_error() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let (bytes, _) = blob::export(&frame(TensorMemory::Shm).into(), Transport::Reference).unwrap();
    a.write_all(&bytes[..40]).unwrap();
    drop(a);
    let err = recv(&b).unwrap_err();
    assert!(
        err.to_string().contains("closed the socket after 40"),
        "{err}"
    );
}

#[test]
fn no_message_within_the_read_timeout_is_a_timeout_not_a_broken_peer() {
    let (_a, b) = UnixStream::pair().unwrap();
    b.set_read_timeout(Some(std::time::Duration::from_millis(20)))
        .unwrap();
    assert!(matches!(recv(&b), Err(Error::Timeout(_))));
}

#[test]
fn a_peer_that_closes_before_sending_is_an_error() {
    let (a, b) = UnixStream::pair().unwrap();
    drop(a);
    assert!(matches!(recv(&b), Err(Error::Handoff(_))));
}

#[test]
fn a_peer_that_stalls_mid_message_is_given_up_on() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let (bytes, _) = blob::export(&frame(TensorMemory::Shm).into(), Transport::Reference).unwrap();
    a.write_all(&bytes[..20]).unwrap();
    let started = Instant::now();
    let err = recv(&b).unwrap_err();
    assert!(err.to_string().contains("stalled"), "{err}");
    assert!(started.elapsed() < MID_MESSAGE_TIMEOUT + Duration::from_secs(2));
    drop(a);
}

/// An inline 1080p frame: far more than a socket buffer holds.
fn big_inline_frame() -> TensorDyn {
    Tensor::<u8>::new(&[1080, 1920, 4], Some(TensorMemory::Mem))
        .unwrap()
        .into()
}

#[test]
fn a_peer_that_stops_reading_mid_message_is_given_up_on() {
    let (a, b) = UnixStream::pair().unwrap();
    let started = Instant::now();
    let err = send_as(&a, &big_inline_frame(), Transport::Inline).unwrap_err();
    assert!(err.to_string().contains("stopped reading"), "{err}");
    assert!(started.elapsed() < MID_MESSAGE_TIMEOUT + Duration::from_secs(2));
    drop(b);
}

#[test]
fn a_non_blocking_socket_still_sends_a_large_frame_whole() {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap(); // as Python's settimeout leaves it
    let reader = std::thread::spawn(move || recv(&b).unwrap());
    send_as(&a, &big_inline_frame(), Transport::Inline).unwrap();
    assert_eq!(reader.join().unwrap().shape(), &[1080, 1920, 4]);
}

#[test]
fn more_fds_than_the_blob_names_is_an_error() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = frame(TensorMemory::Shm);
    let (bytes, _) = blob::export(&t.clone().into(), Transport::Reference).unwrap();
    let extra = [t.as_fd().unwrap(), t.as_fd().unwrap()];
    send_blob(&a, &bytes, &extra).unwrap();
    assert!(recv(&b).is_err());
}

#[test]
fn more_fds_than_any_blob_may_carry_is_an_error() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = frame(TensorMemory::Shm);
    let (bytes, _) = blob::export(&t.clone().into(), Transport::Reference).unwrap();
    let fd = t.as_fd().unwrap();
    // Bypass send_blob's own limit: attach 6 fds by hand.
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(6))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [fd; 6];
    assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &a,
        &[std::io::IoSlice::new(&bytes)],
        &mut control,
        rustix::net::SendFlags::empty(),
    )
    .unwrap();
    let err = recv(&b).unwrap_err();
    assert!(err.to_string().contains("more fds"), "{err}");
}

#[test]
fn a_reference_blob_without_its_fd_is_an_error() {
    let (a, b) = UnixStream::pair().unwrap();
    let (bytes, _) = blob::export(&frame(TensorMemory::Shm).into(), Transport::Reference).unwrap();
    send_blob(&a, &bytes, &[]).unwrap();
    let err = recv(&b).unwrap_err();
    assert!(err.to_string().contains("needs exactly 1 fd"), "{err}");
}

#[test]
fn an_absurd_length_prefix_is_refused_before_anything_is_allocated() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let mut prefix = b"HWTB\x01\x00\x60\x00".to_vec();
    prefix.extend_from_slice(&u32::MAX.to_le_bytes());
    a.write_all(&prefix).unwrap();
    let err = recv(&b).unwrap_err();
    assert!(err.to_string().contains("announced"), "{err}");
}
