//! The rendezvous: one per-process record through which independently linked copies of this
//! library find the process device, its timeline semaphore, the shared signal counter and the
//! shared queue lock.
//!
//! The record is a page of POSIX shared memory named after the process id, mode 0600. Every
//! copy maps the same page, so its atomics are the same memory for all of them. It names the
//! process by pid *and* start time, checked before any handle in it is touched: a leftover from
//! a killed process whose pid was reused must never be adopted (its Vulkan handles are pointers
//! into a dead address space; using them would crash, not fail). The publishing copy unlinks
//! the name at normal exit.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

pub(crate) use crate::claim::{QueueLock, CLAIMING, EMPTY};

use rustix::fs::Mode;
use rustix::shm::OFlags;

/// The layout version this copy writes and trusts.
pub(crate) const LAYOUT_V1: u32 = 0x4857_0001;

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
    pub version: AtomicU32,
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

/// Who this process is: pid and start time (clock ticks after boot, from /proc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessKey {
    pub pid: u32,
    pub start_time: u64,
}

impl ProcessKey {
    pub(crate) fn current() -> Option<ProcessKey> {
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        Some(ProcessKey {
            pid,
            start_time: start_time_of("self")?,
        })
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

/// What a reader found in the record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing published: this copy may claim it.
    Empty,
    /// A device published by this process.
    Ours(Published),
    /// A record left by another process (pid reuse after a crash): may be re-claimed.
    Stale,
    /// A layout this copy does not know: not to be trusted or overwritten.
    Foreign(u32),
    /// A claim by this process that did not settle within the budget.
    Unsettled,
}

impl Record {
    /// Reads the record, waiting out a claim in progress (bounded).
    pub(crate) fn read(&self, me: ProcessKey) -> Found {
        crate::claim::wait_settled(|| {
            let version = self.version.load(Ordering::Acquire);
            let owner = ProcessKey {
                pid: self.pid.load(Ordering::Acquire),
                start_time: self.start_time.load(Ordering::Acquire),
            };
            match version {
                EMPTY => Some(Found::Empty),
                LAYOUT_V1 if owner == me => Some(Found::Ours(self.published())),
                LAYOUT_V1 => Some(Found::Stale),
                // A claim by another process that died mid-write is as stale as its record.
                CLAIMING if owner != me && owner.pid != 0 => Some(Found::Stale),
                CLAIMING => None,
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

    /// Claims the record (from `expected`: `EMPTY`, or the version word of a stale record),
    /// writes `p`, and publishes it with a release store of the version last. The counter is
    /// left as it is: resetting it would make the next signal value go backwards.
    pub(crate) fn publish(&self, expected: u32, me: ProcessKey, p: &Published) -> bool {
        if !crate::claim::try_claim(&self.version, expected) {
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
        self.version.store(LAYOUT_V1, Ordering::Release);
        true
    }
}

/// The record name of process `pid` (POSIX shm, so `/dev/shm/hwtensor-gpu-<pid>`).
pub(crate) fn record_name(pid: u32) -> String {
    format!("/hwtensor-gpu-{pid}")
}

/// Opens (creating if needed) and maps this process's record. `Err` is a reason to warn about:
/// the device still works, other copies just will not find it.
pub(crate) fn open_record(pid: u32) -> Result<&'static Record, String> {
    let name = record_name(pid);
    let fd = rustix::shm::open(
        name.as_str(),
        OFlags::CREATE | OFlags::RDWR, // shm_open sets close-on-exec itself
        Mode::RUSR | Mode::WUSR,
    )
    .map_err(|e| format!("cannot open {name}: {e}"))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat {name}: {e}"))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me || st.st_mode & 0o077 != 0 {
        return Err(format!(
            "{name} belongs to uid {} with mode {:o}; only an owner-only record of uid {me} is trusted",
            st.st_uid,
            st.st_mode & 0o777
        ));
    }
    // Another copy may have created the name and not sized it yet: size it ourselves (the same
    // size, so this never truncates a live record) rather than map past its end.
    if (st.st_size as usize) < RECORD_BYTES {
        rustix::fs::ftruncate(&fd, RECORD_BYTES as u64)
            .map_err(|e| format!("cannot size {name}: {e}"))?;
    }
    let map = memmap2::MmapOptions::new()
        .len(RECORD_BYTES)
        .map_raw(&fd)
        .map_err(|e| format!("cannot map {name}: {e}"))?;
    let ptr = map.as_mut_ptr().cast::<Record>();
    // The mapping lives as long as the process: every `&'static` below depends on it.
    std::mem::forget(map);
    // SAFETY: the mapping is page aligned, RECORD_BYTES long (>= size_of::<Record>()), shared,
    // zero-filled when new (all-zero is a valid Record of atomics), and never unmapped.
    Ok(unsafe { &*ptr })
}

static PUBLISHED_NAME: OnceLock<CString> = OnceLock::new();

extern "C" fn unlink_record_at_exit() {
    if let Some(name) = PUBLISHED_NAME.get() {
        let _ = rustix::shm::unlink(name.as_c_str());
    }
}

/// Arranges for this process's record to be removed at normal exit.
pub(crate) fn unlink_at_exit(pid: u32) {
    let Ok(name) = CString::new(record_name(pid)) else {
        return;
    };
    if PUBLISHED_NAME.set(name).is_ok() {
        // SAFETY: `atexit` takes a plain function of this copy; in a library unloaded early glibc
        // runs it at dlclose instead, while the code is still mapped.
        if unsafe { libc::atexit(unlink_record_at_exit) } != 0 {
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
        assert_eq!(r.read(ME), Found::Empty);
        assert!(r.publish(EMPTY, ME, &published(7)));
        assert!(
            !r.publish(EMPTY, ME, &published(8)),
            "a second claim of a published record fails"
        );
        assert_eq!(r.read(ME), Found::Ours(published(7)));
    }

    #[test]
    fn a_reader_waits_out_a_claim_instead_of_calling_the_record_stale() {
        let r = Arc::new(Record::default());
        r.version.store(CLAIMING, Ordering::Release);
        r.pid.store(ME.pid, Ordering::Release);
        r.start_time.store(ME.start_time, Ordering::Release);
        let writer = {
            let r = r.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                r.device.store(9, Ordering::Release);
                r.version.store(LAYOUT_V1, Ordering::Release);
            })
        };
        assert!(matches!(r.read(ME), Found::Ours(p) if p.device == 9));
        writer.join().unwrap();
    }

    #[test]
    fn a_claim_that_never_settles_is_reported_as_it_stands() {
        let r = Record::default();
        r.version.store(CLAIMING, Ordering::Release);
        let started = std::time::Instant::now();
        assert_eq!(
            r.read(ProcessKey {
                pid: 0,
                start_time: 0
            }),
            Found::Unsettled
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn racing_publishers_converge_on_one_record() {
        let r = Arc::new(Record::default());
        let winners: usize = (0..8)
            .map(|i| {
                let r = r.clone();
                std::thread::spawn(move || r.publish(EMPTY, ME, &published(100 + i)) as usize)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(winners, 1);
        let Found::Ours(p) = r.read(ME) else {
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
        assert!(r.publish(EMPTY, dead, &published(1)));
        r.counter.store(5000, Ordering::Release);
        r.queue_lock.store(1, Ordering::Release); // the dead process died holding it
        assert_eq!(r.read(ME), Found::Stale);
        assert!(r.publish(LAYOUT_V1, ME, &published(2)));
        assert_eq!(r.read(ME), Found::Ours(published(2)));
        assert_eq!(r.counter.load(Ordering::Acquire), 5000);
        drop(QueueLock::acquire(&r.queue_lock));
    }

    #[test]
    fn a_record_of_another_layout_is_not_trusted() {
        let r = Record::default();
        r.version.store(0x4857_0002, Ordering::Release);
        assert_eq!(r.read(ME), Found::Foreign(0x4857_0002));
        assert!(!r.publish(EMPTY, ME, &published(1)));
        assert!(!r.publish(LAYOUT_V1, ME, &published(1)));
    }

    #[test]
    fn this_process_has_a_start_time() {
        let me = ProcessKey::current().unwrap();
        assert!(me.start_time > 0);
        assert_eq!(start_time_of(&me.pid.to_string()), Some(me.start_time));
    }
}
