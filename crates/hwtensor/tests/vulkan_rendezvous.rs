//! The rendezvous record across processes: a record left behind by a killed process must not
//! break (or be adopted by) a later process that gets the same pid; a record of a foreign
//! layout is not trusted. The later process is simulated by copying the leftover record to the
//! name of a fresh process before it first touches the GPU.

#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use common::device_or_skip;

const ROLE: &str = "HWTENSOR_TEST_RENDEZVOUS_ROLE";
const TEST: &str = "a_record_left_by_a_killed_process_does_not_break_the_next_one";

fn record_path(pid: u32) -> String {
    hwtensor::gpu::record_path(pid)
}

/// What the helper processes do.
fn run_role(role: &str) {
    let d = hwtensor::gpu::device().expect("the helper has a GPU");
    match role {
        "publisher" => {
            let mut last = 0;
            for _ in 0..100 {
                last = d.signal().unwrap();
            }
            println!("ready {last}");
            std::io::stdout().flush().unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        _ => {
            let v = d.signal().unwrap();
            d.wait(v, std::time::Duration::from_secs(5)).unwrap();
            println!("value {v} origin {:?}", d.origin());
        }
    }
}

fn spawn(role: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// The first stdout line of the helper that starts with `prefix`.
fn line_with(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the helper ended before printing {prefix:?}"
        );
        // libtest prints its own "test <name> ... " in front of the first line.
        if let Some(at) = line.find(&format!("{prefix} ")) {
            return line[at + prefix.len()..].trim().to_string();
        }
    }
}

/// Starts a late process, plants `record` under its name before it touches the GPU, lets it
/// go, and returns (value, origin) it reports.
fn late_process_with(record: &[u8]) -> (u64, String) {
    let (mut child, mut out) = spawn("late");
    let pid = child.id();
    std::fs::write(record_path(pid), record).unwrap();
    std::fs::set_permissions(
        record_path(pid),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let report = line_with(&mut out, "value");
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_file(record_path(pid));
    let (value, origin) = report.split_once(" origin ").unwrap();
    (value.parse().unwrap(), origin.to_string())
}

#[test]
fn a_record_left_by_a_killed_process_does_not_break_the_next_one() {
    if let Ok(role) = std::env::var(ROLE) {
        if role == "late" {
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
        }
        return run_role(&role);
    }
    if device_or_skip(TEST).is_none() {
        return;
    }
    let (mut publisher, mut out) = spawn("publisher");
    let last: u64 = line_with(&mut out, "ready").parse().unwrap();
    publisher.kill().unwrap(); // SIGKILL: no exit handlers run
    publisher.wait().unwrap();
    let leftover_path = record_path(publisher.id());
    let leftover =
        std::fs::read(&leftover_path).expect("a killed publisher leaves its record behind");
    std::fs::remove_file(&leftover_path).unwrap();

    let (value, origin) = late_process_with(&leftover);
    assert_eq!(
        origin, "Created",
        "a dead process's device is never adopted"
    );
    assert!(
        value > last,
        "the counter is never reset: {value} after {last}"
    );

    let mut foreign = leftover.clone();
    foreign[..4].copy_from_slice(&0x4857_0009u32.to_ne_bytes());
    let (value, origin) = late_process_with(&foreign);
    assert_eq!(origin, "Created");
    assert_eq!(
        value, 1,
        "a foreign record is not trusted: its counter is not used"
    );
}
