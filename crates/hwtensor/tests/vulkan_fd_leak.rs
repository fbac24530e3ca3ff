//! No fd leaks over a thousand GPU hand-offs into another process (its own binary: the helper
//! process counts its fds). Another process, because inside the producer's own process a
//! buffer handed back comes home as itself and nothing is imported.

#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::{Command, Stdio};

use common::device_or_skip;
use hwtensor::blob::{self, Transport};
use hwtensor::handoff::{recv, recv_blob, send_as, send_blob};
use hwtensor::{Tensor, TensorDyn, TensorMemory};

const ROUNDS: usize = 1000;
const ROLE: &str = "HWTENSOR_TEST_FD_LEAK_SOCKET";
const TEST: &str = "a_thousand_gpu_hand_offs_into_another_process_leak_no_fd";

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The receiving process: imports every hand-off (and a truncated one after each), keeping
/// nothing, and reports how many fds it holds at the end against the start.
fn receive(socket: &str) {
    let stream =
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(socket).unwrap()).unwrap();
    // Warm up what is made once: the device, its waiter, the rendezvous.
    drop(recv(&stream).unwrap());
    let before = open_fds();
    for _ in 0..ROUNDS {
        let got = recv(&stream).unwrap();
        assert_eq!(got.memory(), TensorMemory::Gpu);
        drop(got);
        let (bytes, fds) = recv_blob(&stream).unwrap();
        assert!(blob::import(&bytes[..bytes.len() - 1], fds).is_err());
    }
    println!("fds before {before} after {}", open_fds());
}

#[test]
fn a_thousand_gpu_hand_offs_into_another_process_leak_no_fd() {
    if let Ok(socket) = std::env::var(ROLE) {
        return receive(&socket);
    }
    if device_or_skip(TEST).is_none() {
        return;
    }
    let name = format!("hwtensor-fd-leak-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, &name)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (stream, _) = listener.accept().unwrap();
    let t: TensorDyn = Tensor::<u8>::new(&[64 * 1024], Some(TensorMemory::Gpu))
        .unwrap()
        .into();
    send_as(&stream, &t, Transport::Reference).unwrap();
    for _ in 0..ROUNDS {
        send_as(&stream, &t, Transport::Reference).unwrap();
        let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
        send_blob(&stream, &bytes, &fds).unwrap();
    }
    let mut report = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("fds before ") {
            report = line[at..].to_string();
        }
    }
    assert!(
        child.wait().unwrap().success(),
        "the receiving process failed"
    );
    let numbers: Vec<usize> = report
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "no report from the receiver: {report:?}");
    assert_eq!(
        numbers[0], numbers[1],
        "the receiver leaked fds over {ROUNDS} GPU hand-offs"
    );
}

/// How long the completion waiter is given to close the fds of waits their callers abandoned.
const LET_GO: std::time::Duration = std::time::Duration::from_secs(5);

#[test]
fn completion_fds_the_caller_closed_are_not_kept_by_the_waiter() {
    const T: &str = "completion_fds_the_caller_closed_are_not_kept_by_the_waiter";
    if std::env::var(ROLE).is_ok() {
        return; // only the hand-off test has a child role
    }
    let Some(d) = device_or_skip(T) else {
        return;
    };
    // A value allocated and not yet submitted, so the waiter holds every fd made for it; the
    // other test of this binary may submit it meanwhile, which proves nothing: then try again.
    for _ in 0..5 {
        let before = open_fds();
        let pending = d.signal_deferred().unwrap();
        let fds: Vec<_> = (0..200)
            .map(|_| d.completion_fd(pending).unwrap())
            .collect();
        drop(fds);
        // The waiter lets go on its own thread: given up to LET_GO (QEMU's emulator in the
        // test command's DMA-BUF leg once took longer than a fixed 100 ms).
        let deadline = std::time::Instant::now() + LET_GO;
        let mut after = open_fds();
        while after > before + 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            after = open_fds();
        }
        let still_pending = d.completed_value().unwrap() < pending;
        d.flush().unwrap();
        if still_pending {
            assert!(
                after <= before + 2,
                "{before} fds before, {after} with the waits abandoned"
            );
            return;
        }
    }
    panic!("{T}: the value completed every time before the check; nothing was proven");
}
