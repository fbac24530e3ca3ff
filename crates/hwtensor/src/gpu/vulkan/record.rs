//! The rendezvous: one per-process record through which independently linked copies of this
//! library find the process device, its timeline semaphore, the shared signal counter and the
//! shared queue lock.
//!
//! The record is a page of POSIX shared memory named after the pid namespace and the process
//! id, mode 0600. Every copy maps the same page, so its atomics are the same memory for all of
//! them. It names the process by pid *and* start time, checked before any handle in it is
//! touched: a leftover from a killed process whose pid was reused must never be adopted (its
//! Vulkan handles are pointers into a dead address space; using them would crash, not fail).
//!
//! What a hostile or unlucky neighbour could do, and what stops it:
//! - a symlink or hard link planted at the name: the record is opened `O_NOFOLLOW` and must be
//!   a regular, owner-only file of our uid with one link and at most a page;
//! - a live process of another pid namespace with our pid (containers sharing `/dev/shm`):
//!   the namespace is part of the name, so the two never meet;
//! - a process killed mid-claim: the claim word carries the claimer's start time with the
//!   `CLAIMING` marker in one atomic store, so a claim not ours is known stale at once;
//! - a process killed at all: its record stays (no `atexit` runs), so making a device sweeps
//!   the records of dead processes of our uid and namespace.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::gpu::claim::claim_word;
pub(crate) use crate::gpu::claim::{CLAIMING, EMPTY};
use crate::os::pid_namespace;
pub(crate) use crate::os::ProcessKey;
use crate::{Error, Result};

/// The layout version this copy writes and trusts (2: the claim word carries the claimer).
pub(crate) const LAYOUT_V2: u32 = 0x4857_0002;

/// Size of the mapping: one page, though the record needs far less.
const RECORD_BYTES: usize = 4096;

/// What a publisher writes: the handles another copy needs to adopt the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Published {
    pub instance: u64,
    pub physical_device: u64,
    pub device: u64,
    pub queue: u64,
    pub queue_family: u32,
    pub queue_index: u32,
    /// 0 when the device has no shareable timeline semaphore.
    pub semaphore: u64,
    /// The `vkGetInstanceProcAddr` the device was made with.
    pub get_instance_proc_addr: u64,
    /// `Features` bits of the device.
    pub features: u32,
    /// The transfer-only queue and its family (`u32::MAX`: none).
    pub transfer_queue: u64,
    pub transfer_family: u32,
}

/// The shared record. Every field is atomic: several copies read and write it concurrently.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Record {
    /// The claim word: the version word (`EMPTY`, `CLAIMING`, a layout) in the low half, the
    /// claimer's [`ProcessKey::token`] in the high half, changed together by one CAS.
    pub state: AtomicU64,
    pub pid: AtomicU32,
    pub start_time: AtomicU64,
    /// The shared signal counter: the last timeline value allocated. Never reset.
    pub counter: AtomicU64,
    /// Highest value allocated by `signal_deferred` and not yet submitted.
    pub pending: AtomicU64,
    /// The shared queue lock: 0 free, 1 held.
    pub queue_lock: AtomicU32,
    pub queue_family: AtomicU32,
    pub queue_index: AtomicU32,
    pub features: AtomicU32,
    pub instance: AtomicU64,
    pub physical_device: AtomicU64,
    pub device: AtomicU64,
    pub queue: AtomicU64,
    pub semaphore: AtomicU64,
    pub get_instance_proc_addr: AtomicU64,
    /// The highest timeline value whose signal has been submitted: the next submission, on
    /// either queue, waits for it, so signals execute in the order they were allocated.
    pub submitted: AtomicU64,
    pub transfer_queue: AtomicU64,
    pub transfer_family: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Record>() <= RECORD_BYTES);

/// What a reader found in the record.
pub(crate) type Found = crate::gpu::rendezvous::Found<Published>;

impl Record {
    /// Reads the record, waiting out a claim in progress (bounded).
    pub(crate) fn read_as(&self, me: ProcessKey) -> Found {
        crate::gpu::claim::wait_settled(|| {
            let state = self.state.load(Ordering::Acquire);
            let (version, claimer) = (state as u32, (state >> 32) as u32);
            let owner = ProcessKey {
                pid: self.pid.load(Ordering::Acquire),
                start_time: self.start_time.load(Ordering::Acquire),
            };
            match version {
                EMPTY => Some(Found::Empty),
                LAYOUT_V2 if owner == me => Some(Found::Ours(self.published())),
                LAYOUT_V2 => Some(Found::Stale(state)),
                // A copy of ours is writing: wait for it.
                CLAIMING if claimer == me.token() => None,
                // A claim by a process that died mid-write is as stale as its record.
                CLAIMING => Some(Found::Stale(state)),
                other => Some(Found::Foreign(other)),
            }
        })
        .unwrap_or(Found::Unsettled)
    }

    fn published(&self) -> Published {
        let l = |a: &AtomicU64| a.load(Ordering::Acquire);
        Published {
            instance: l(&self.instance),
            physical_device: l(&self.physical_device),
            device: l(&self.device),
            queue: l(&self.queue),
            queue_family: self.queue_family.load(Ordering::Acquire),
            queue_index: self.queue_index.load(Ordering::Acquire),
            semaphore: l(&self.semaphore),
            get_instance_proc_addr: l(&self.get_instance_proc_addr),
            features: self.features.load(Ordering::Acquire),
            transfer_queue: l(&self.transfer_queue),
            transfer_family: self.transfer_family.load(Ordering::Acquire),
        }
    }

    /// Claims the record (from `expected`: `EMPTY`, or the claim word of a stale record),
    /// writes `p`, and publishes it with a release store of the version last. The counter is
    /// left as it is: resetting it would make the next signal value go backwards.
    pub(crate) fn publish_as(&self, expected: u64, me: ProcessKey, p: &Published) -> bool {
        if !crate::gpu::claim::try_claim_as(&self.state, expected, me.token()) {
            return false;
        }
        self.pid.store(me.pid, Ordering::Release);
        self.start_time.store(me.start_time, Ordering::Release);
        let s = |a: &AtomicU64, v| a.store(v, Ordering::Release);
        s(&self.instance, p.instance);
        s(&self.physical_device, p.physical_device);
        s(&self.device, p.device);
        s(&self.queue, p.queue);
        s(&self.semaphore, p.semaphore);
        s(&self.get_instance_proc_addr, p.get_instance_proc_addr);
        self.queue_family.store(p.queue_family, Ordering::Release);
        self.queue_index.store(p.queue_index, Ordering::Release);
        self.features.store(p.features, Ordering::Release);
        self.transfer_queue
            .store(p.transfer_queue, Ordering::Release);
        self.transfer_family
            .store(p.transfer_family, Ordering::Release);
        // The new device's semaphore starts at the counter; nothing of it is submitted yet.
        self.submitted.store(0, Ordering::Release);
        // A stale record's lock may have been held by the dead process.
        self.queue_lock.store(0, Ordering::Release);
        self.pending.store(0, Ordering::Release);
        self.state
            .store(claim_word(LAYOUT_V2, me.token()), Ordering::Release);
        true
    }
}

/// Where POSIX shared memory lives: the record is opened there by path, so `O_NOFOLLOW` and
/// `O_EXCL` can be asked for (`shm_open` in rustix adds neither).
const SHM_DIR: &str = "/dev/shm";
/// The start of every record's file name.
const RECORD_PREFIX: &str = "hwtensor-gpu-";

/// The state machine's view of the record, as this process.
impl crate::gpu::rendezvous::RecordLayout for Record {
    type Published = Published;
    const EMPTY_STATE: u64 = EMPTY as u64;

    fn read(&self) -> Found {
        match ProcessKey::current() {
            Some(me) => self.read_as(me),
            // Without a start time no record can be proven ours: trust none.
            None => Found::Foreign(0),
        }
    }

    fn publish(&self, expected: u64, p: &Published) -> bool {
        ProcessKey::current().is_some_and(|me| self.publish_as(expected, me, p))
    }

    fn on_published(&self) {
        if let Some(me) = ProcessKey::current() {
            unlink_at_exit(me.pid);
        }
    }
}

/// The record's file name for process `pid` of this pid namespace.
pub(crate) fn record_name(pid: u32) -> String {
    format!("{RECORD_PREFIX}{}-{pid}", pid_namespace())
}

/// Opens (creating if needed) and maps this process's record. `Err` is a reason to warn about:
/// the device still works, other copies just will not find it.
pub(crate) fn open_record(pid: u32) -> Result<&'static Record> {
    let fd = open_checked(&record_name(pid))?;
    let map = memmap2::MmapOptions::new()
        .len(RECORD_BYTES)
        .map_raw(&fd)
        .map_err(|e| Error::Os {
            op: "mmap of the GPU rendezvous",
            source: e,
        })?;
    let ptr = map.as_mut_ptr().cast::<Record>();
    // The mapping lives as long as the process: every `&'static` below depends on it.
    std::mem::forget(map);
    // SAFETY: the mapping is page aligned, RECORD_BYTES long (>= size_of::<Record>()), shared,
    // zero-filled when new (all-zero is a valid Record of atomics), and never unmapped.
    Ok(unsafe { &*ptr })
}

/// Opens `name` under [`SHM_DIR`] without following links, creating it exclusively when it is
/// not there, and checks that it is a record we made: a regular file of our uid, mode 0600,
/// one link, at most a page. Sized to a page (the same size, so never truncating a live one).
fn open_checked(name: &str) -> Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let path = format!("{SHM_DIR}/{name}");
    let base = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::RUSR | Mode::WUSR;
    let fd = match rustix::fs::open(&path, base | OFlags::CREATE | OFlags::EXCL, mode) {
        Err(rustix::io::Errno::EXIST) => rustix::fs::open(&path, base, mode),
        other => other,
    }
    .map_err(|e| {
        Error::Fd(format!(
            "cannot open {path} (a symlink there is refused): {e}"
        ))
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::Fd(format!("cannot stat {path}: {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    let regular = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
    if !regular || st.st_uid != me || st.st_mode & 0o077 != 0 || st.st_nlink != 1 {
        return Err(Error::Fd(format!(
            "{path} is not an owner-only record of uid {me} (uid {}, mode {:o}, {} links); not trusted",
            st.st_uid, st.st_mode, st.st_nlink
        )));
    }
    if st.st_size as u64 > RECORD_BYTES as u64 {
        return Err(Error::Fd(format!(
            "{path} holds {} bytes, more than a record; not ours",
            st.st_size
        )));
    }
    if (st.st_size as usize) < RECORD_BYTES {
        rustix::fs::ftruncate(&fd, RECORD_BYTES as u64)
            .map_err(|e| Error::Fd(format!("cannot size {path}: {e}")))?;
    }
    Ok(fd)
}

/// Removes the records of dead processes of our uid and pid namespace: a process killed by a
/// signal never runs its `atexit`, and its record would stay until reboot.
pub(crate) fn sweep_dead_records() {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return;
    };
    let prefix = format!("{RECORD_PREFIX}{}-", pid_namespace());
    let me = rustix::process::geteuid().as_raw();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = pid
            .parse::<i32>()
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        let ours = std::os::unix::fs::MetadataExt::uid(&match entry.metadata() {
            Ok(m) => m,
            Err(_) => continue,
        }) == me;
        let dead = rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH);
        if ours && dead {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

static PUBLISHED_NAME: OnceLock<CString> = OnceLock::new();

extern "C" fn unlink_record_at_exit() {
    if let Some(path) = PUBLISHED_NAME.get() {
        let _ = rustix::fs::unlink(path.as_c_str());
    }
}

/// Arranges for this process's record to be removed at normal exit.
pub(crate) fn unlink_at_exit(pid: u32) {
    let Ok(name) = CString::new(format!("{SHM_DIR}/{}", record_name(pid))) else {
        return;
    };
    if PUBLISHED_NAME.set(name).is_ok() {
        // SAFETY: `atexit` takes a plain function of this copy; in a library unloaded early glibc
        // runs it at dlclose instead, while the code is still mapped.
        if !crate::os::at_exit(unlink_record_at_exit) {
            log::warn!(
                "hwtensor: cannot register the rendezvous cleanup; {} may outlive the process",
                record_name(pid)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const ME: ProcessKey = ProcessKey {
        pid: 42,
        start_time: 1000,
    };

    fn published(device: u64) -> Published {
        Published {
            device,
            semaphore: device + 1,
            ..Published::default()
        }
    }

    #[test]
    fn an_empty_record_is_claimed_once_and_read_back() {
        let r = Record::default();
        assert_eq!(r.read_as(ME), Found::Empty);
        assert!(r.publish_as(u64::from(EMPTY), ME, &published(7)));
        assert!(
            !r.publish_as(u64::from(EMPTY), ME, &published(8)),
            "a second claim of a published record fails"
        );
        assert_eq!(r.read_as(ME), Found::Ours(published(7)));
    }

    /// The claim word a claimer with `key` writes while it fills the record.
    fn claiming(key: ProcessKey) -> u64 {
        claim_word(CLAIMING, key.token())
    }

    #[test]
    fn a_reader_waits_out_a_claim_of_its_own_process_instead_of_calling_it_stale() {
        let r = Arc::new(Record::default());
        r.state.store(claiming(ME), Ordering::Release);
        let writer = {
            let r = r.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                r.device.store(9, Ordering::Release);
                r.pid.store(ME.pid, Ordering::Release);
                r.start_time.store(ME.start_time, Ordering::Release);
                r.state.store(u64::from(LAYOUT_V2), Ordering::Release);
            })
        };
        assert!(matches!(r.read_as(ME), Found::Ours(p) if p.device == 9));
        writer.join().unwrap();
    }

    #[test]
    fn a_claim_left_half_written_by_a_killed_process_is_stale_and_reclaimed() {
        let r = Record::default();
        let dead = ProcessKey {
            pid: ME.pid,
            start_time: 999,
        };
        // Killed right after its claim: not even its pid and start time were written.
        r.state.store(claiming(dead), Ordering::Release);
        let started = std::time::Instant::now();
        let found = r.read_as(ME);
        assert_eq!(found, Found::Stale(claiming(dead)));
        assert!(
            started.elapsed() < std::time::Duration::from_millis(10),
            "no settle wait"
        );
        assert!(r.publish_as(claiming(dead), ME, &published(3)));
        assert_eq!(r.read_as(ME), Found::Ours(published(3)));
    }

    #[test]
    fn a_claim_of_our_own_that_never_settles_is_reported_as_it_stands() {
        let r = Record::default();
        r.state.store(claiming(ME), Ordering::Release);
        let started = std::time::Instant::now();
        assert_eq!(r.read_as(ME), Found::Unsettled);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn racing_publishers_converge_on_one_record() {
        let r = Arc::new(Record::default());
        let winners: usize = (0..8)
            .map(|i| {
                let r = r.clone();
                std::thread::spawn(move || {
                    r.publish_as(u64::from(EMPTY), ME, &published(100 + i)) as usize
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(winners, 1);
        let Found::Ours(p) = r.read_as(ME) else {
            panic!("nothing published")
        };
        assert!((100..108).contains(&p.device));
    }

    #[test]
    fn a_record_of_another_process_is_stale_and_reclaimed_without_resetting_the_counter() {
        let r = Record::default();
        let dead = ProcessKey {
            pid: 42,
            start_time: 999,
        };
        assert!(r.publish_as(u64::from(EMPTY), dead, &published(1)));
        r.counter.store(5000, Ordering::Release);
        r.queue_lock.store(dead.pid, Ordering::Release); // the dead process died holding it
        let Found::Stale(state) = r.read_as(ME) else {
            panic!("not stale")
        };
        assert!(r.publish_as(state, ME, &published(2)));
        assert_eq!(r.read_as(ME), Found::Ours(published(2)));
        assert_eq!(r.counter.load(Ordering::Acquire), 5000);
        drop(crate::gpu::claim::QueueLock::acquire(&r.queue_lock).unwrap());
    }

    #[test]
    fn a_record_of_another_layout_is_not_trusted() {
        let r = Record::default();
        r.state.store(0x4857_0003, Ordering::Release);
        assert_eq!(r.read_as(ME), Found::Foreign(0x4857_0003));
        assert!(!r.publish_as(u64::from(EMPTY), ME, &published(1)));
        assert!(!r.publish_as(u64::from(LAYOUT_V2), ME, &published(1)));
    }

    #[test]
    fn the_record_name_carries_the_pid_namespace() {
        let name = record_name(42);
        assert!(name.ends_with("-42"), "{name}");
        assert_ne!(pid_namespace(), 0, "/proc/self/ns/pid is readable here");
        assert!(name.contains(&pid_namespace().to_string()), "{name}");
    }

    /// A name of this test's own under /dev/shm, removed with its guard.
    struct TestName(String);
    impl TestName {
        fn new(what: &str) -> TestName {
            let n = format!("hwtensor-test-{what}-{}", std::process::id());
            let _ = std::fs::remove_file(format!("{SHM_DIR}/{n}"));
            TestName(n)
        }
        fn path(&self) -> String {
            format!("{SHM_DIR}/{}", self.0)
        }
    }
    impl Drop for TestName {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.path());
        }
    }

    #[test]
    fn a_symlink_planted_at_the_record_name_is_refused_and_its_target_untouched() {
        let target = TestName::new("target");
        std::fs::write(target.path(), b"precious").unwrap();
        let link = TestName::new("link");
        std::os::unix::fs::symlink(target.path(), link.path()).unwrap();
        let err = open_checked(&link.0).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(std::fs::read(target.path()).unwrap(), b"precious");
    }

    #[test]
    fn a_planted_file_that_is_not_an_owner_only_record_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let open = TestName::new("open");
        std::fs::write(open.path(), b"").unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(open_checked(&open.0)
            .unwrap_err()
            .to_string()
            .contains("owner-only"));
        let big = TestName::new("big");
        std::fs::write(big.path(), vec![0u8; RECORD_BYTES + 1]).unwrap();
        std::fs::set_permissions(big.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(open_checked(&big.0)
            .unwrap_err()
            .to_string()
            .contains("more than a record"));
        let fresh = TestName::new("fresh");
        open_checked(&fresh.0).unwrap();
        assert_eq!(
            std::fs::metadata(fresh.path()).unwrap().len(),
            RECORD_BYTES as u64
        );
    }

    #[test]
    fn making_a_device_sweeps_records_of_dead_processes_and_keeps_live_ones() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_path = format!("{SHM_DIR}/{}", record_name(dead));
        let live_path = format!("{SHM_DIR}/{}", record_name(1));
        std::fs::write(&dead_path, b"").unwrap();
        let live_planted = std::fs::write(&live_path, b"").is_ok();
        sweep_dead_records();
        assert!(
            !std::path::Path::new(&dead_path).exists(),
            "the dead process's record stays"
        );
        if live_planted {
            assert!(
                std::path::Path::new(&live_path).exists(),
                "a live process's record went"
            );
            let _ = std::fs::remove_file(&live_path);
        }
    }
}
