//! Who this process is and what runs at its exit: the pid and start time the rendezvous record
//! is keyed and claimed by, the pid namespace, and `atexit`.

// atexit.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// Who this process is: pid and start time (clock ticks after boot, from /proc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessKey {
    pub pid: u32,
    pub start_time: u64,
}

impl ProcessKey {
    /// The claim token: the low half of the start time. Two processes that held the same pid
    /// in one namespace (the only ones that share a record) started at different ticks; their
    /// tokens collide only if their starts are a multiple of 2^32 ticks (over a year) apart.
    pub(crate) fn token(self) -> u32 {
        self.start_time as u32
    }

    /// This process: its pid and start time. The start time is read from `/proc` once per pid
    /// (every GPU allocation and every rendezvous step asks), and again only after a fork.
    pub(crate) fn current() -> Option<ProcessKey> {
        static KNOWN: std::sync::Mutex<Option<ProcessKey>> = std::sync::Mutex::new(None);
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        let mut known = KNOWN.lock().ok()?;
        if let Some(key) = *known {
            if key.pid == pid {
                return Some(key);
            }
        }
        let key = ProcessKey {
            pid,
            start_time: start_time_of("self")?,
        };
        *known = Some(key);
        Some(key)
    }
}

/// Field 22 of /proc/<pid>/stat: when the process started.
pub(crate) fn start_time_of(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`), 0 where it cannot be read.
/// Part of the GPU rendezvous record's name: a process of another namespace may have our pid.
pub(crate) fn pid_namespace() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| rustix::fs::stat("/proc/self/ns/pid").map_or(0, |st| st.st_ino))
}

/// Whether process `pid` of this pid namespace exists.
pub(crate) fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}

/// Runs `hook` at normal process exit (or at `dlclose` of a library that registered it, while
/// its code is still mapped). `false` when it cannot be registered.
pub(crate) fn at_exit(hook: extern "C" fn()) -> bool {
    // SAFETY: `atexit` takes a plain function of this copy and keeps only its address.
    unsafe { libc::atexit(hook) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_time() {
        let me = ProcessKey::current().unwrap();
        assert!(me.start_time > 0);
        assert_eq!(start_time_of(&me.pid.to_string()), Some(me.start_time));
    }
}
