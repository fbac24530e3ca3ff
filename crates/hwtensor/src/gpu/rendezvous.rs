//! The adopt-or-publish state machine of the rendezvous, written once for both backends.
//!
//! A copy of the library that needs the process device reads the record and then: adopts what
//! this process published; claims an empty record (or a stale one, left by a dead process with
//! our pid) and publishes a device it made; or, for a record it cannot trust (another layout)
//! or a claim that never settles, keeps a device of its own and says so. A copy that loses the
//! publication race discards what it built and adopts the winner's. Backends only read and write
//! their record layout ([`RecordLayout`]) and make, adopt, describe and discard a device
//! ([`DeviceMaker`]).

use std::fmt::Debug;

use crate::Result;

/// What a reader found in a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found<P> {
    /// Nothing published: this copy may claim it.
    Empty,
    /// A device published by this process.
    Ours(P),
    /// A record left by another process with our pid, in the claim state given: may be
    /// re-claimed from that state. (Linux only: a Windows record dies with its processes.)
    #[cfg_attr(windows, allow(dead_code))]
    Stale(u64),
    /// A layout (or an owner) this copy does not know: not to be trusted or overwritten.
    Foreign(u32),
    /// A claim by this process that did not settle within the budget.
    Unsettled,
}

/// A backend's record, as the state machine sees it.
pub(crate) trait RecordLayout: Sync + 'static {
    /// What a publisher writes: the handles another copy needs to adopt the device.
    type Published: Debug;
    /// The claim state of an empty record, to claim it from.
    const EMPTY_STATE: u64;
    /// Reads the record (waiting out a claim in progress, bounded).
    fn read(&self) -> Found<Self::Published>;
    /// Claims the record from `expected` and publishes `p`; `false` when another copy won.
    fn publish(&self, expected: u64, p: &Self::Published) -> bool;
    /// Called once this copy's device is published (Linux: remove the record at exit).
    fn on_published(&self) {}
}

/// A backend's device, as the state machine sees it.
pub(crate) trait DeviceMaker {
    /// The record type this backend meets its other copies in.
    type Record: RecordLayout;
    /// The device.
    type Device;
    /// Makes a device of this copy (or takes the host's), sharing the record's counter and lock
    /// when there is a record.
    fn own(record: Option<&'static Self::Record>) -> Result<Self::Device>;
    /// Adopts the device another copy of this process published. The state machine passes
    /// only what the backend's own [`RecordLayout::read`] returned as [`Found::Ours`]: a record
    /// it proved names this very process, so the handles are live here (a dead process's would
    /// crash, not fail). That proof is the backend's, so the unsafety stays in its impl.
    fn adopt(
        record: &'static Self::Record,
        p: &<Self::Record as RecordLayout>::Published,
    ) -> Result<Self::Device>;
    /// What to publish for `device`.
    fn published(device: &Self::Device) -> <Self::Record as RecordLayout>::Published;
    /// Destroys a device this copy built and never published.
    fn discard(device: Self::Device);
}

/// The process device, met through `record`: adopted, published, or (when the record cannot
/// be trusted) our own.
pub(crate) fn adopt_or_publish<M: DeviceMaker>(record: &'static M::Record) -> Result<M::Device> {
    match record.read() {
        Found::Ours(p) => M::adopt(record, &p),
        Found::Empty => publish_or_adopt::<M>(record, M::Record::EMPTY_STATE),
        Found::Stale(state) => {
            log::info!(
                "hwtensor: re-claiming a GPU rendezvous left by a dead process with this pid"
            );
            publish_or_adopt::<M>(record, state)
        }
        Found::Foreign(v) => {
            log::warn!("hwtensor: the GPU rendezvous has layout {v:#x} or another owner; not trusted, keeping a device of our own");
            M::own(None)
        }
        Found::Unsettled => {
            log::warn!("hwtensor: the GPU rendezvous stayed claimed past its settle budget; keeping a device of our own");
            M::own(None)
        }
    }
}

/// Makes a device and publishes it; a copy that loses the race drops what it built and adopts
/// the winner's.
fn publish_or_adopt<M: DeviceMaker>(
    record: &'static M::Record,
    expected: u64,
) -> Result<M::Device> {
    let device = M::own(Some(record))?;
    if record.publish(expected, &M::published(&device)) {
        record.on_published();
        return Ok(device);
    }
    match record.read() {
        Found::Ours(p) => {
            M::discard(device);
            M::adopt(record, &p)
        }
        other => {
            log::warn!("hwtensor: could not publish the process device ({other:?}); other copies will make their own");
            Ok(device)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// A record in memory: its state word and the device id published.
    struct FakeRecord {
        state: AtomicU64,
        device: AtomicU64,
    }

    const CLAIMED: u64 = 7;
    const FOREIGN: u64 = 0xF0;
    const STALE: u64 = 0x5;

    impl RecordLayout for FakeRecord {
        type Published = u64;
        const EMPTY_STATE: u64 = 0;
        /// Waits out a claim in progress (state 1), bounded, as the trait asks and the real
        /// records do: a fake that reported a claim mid-publication as unsettled made a racing
        /// loser keep a device of its own, now and then.
        fn read(&self) -> Found<u64> {
            let settled =
                crate::gpu::claim::wait_settled(|| match self.state.load(Ordering::Acquire) {
                    1 => None,
                    0 => Some(Found::Empty),
                    CLAIMED => Some(Found::Ours(self.device.load(Ordering::Acquire))),
                    STALE => Some(Found::Stale(STALE)),
                    FOREIGN => Some(Found::Foreign(FOREIGN as u32)),
                    _ => Some(Found::Unsettled),
                });
            settled.unwrap_or(Found::Unsettled)
        }
        fn publish(&self, expected: u64, p: &u64) -> bool {
            // Claim, then write, then publish: the order the real records keep.
            if self
                .state
                .compare_exchange(expected, 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return false;
            }
            self.device.store(*p, Ordering::Release);
            self.state.store(CLAIMED, Ordering::Release);
            true
        }
    }

    static MADE: AtomicUsize = AtomicUsize::new(0);

    /// Devices are numbers; making one counts.
    struct Fake;

    impl DeviceMaker for Fake {
        type Record = FakeRecord;
        type Device = (u64, &'static str);
        fn own(_: Option<&'static FakeRecord>) -> Result<(u64, &'static str)> {
            Ok((MADE.fetch_add(1, Ordering::SeqCst) as u64 + 100, "own"))
        }
        fn adopt(_: &'static FakeRecord, p: &u64) -> Result<(u64, &'static str)> {
            Ok((*p, "adopted"))
        }
        fn published(d: &(u64, &'static str)) -> u64 {
            d.0
        }
        fn discard(_: (u64, &'static str)) {}
    }

    fn record(state: u64) -> &'static FakeRecord {
        Box::leak(Box::new(FakeRecord {
            state: AtomicU64::new(state),
            device: AtomicU64::new(0),
        }))
    }

    #[test]
    fn racing_copies_converge_on_one_published_device() {
        let r = record(0);
        let devices: Vec<u64> = std::thread::scope(|s| {
            let copies: Vec<_> = (0..8)
                .map(|_| s.spawn(|| adopt_or_publish::<Fake>(r).unwrap().0))
                .collect();
            copies.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let published = r.device.load(Ordering::Acquire);
        assert!(
            devices.iter().all(|&d| d == published),
            "{devices:?} vs {published}"
        );
    }

    #[test]
    fn a_stale_record_is_reclaimed_and_a_foreign_one_left_alone() {
        let stale = record(STALE);
        let (d, how) = adopt_or_publish::<Fake>(stale).unwrap();
        assert_eq!(how, "own");
        assert_eq!(
            stale.device.load(Ordering::Acquire),
            d,
            "published over the stale record"
        );
        let foreign = record(FOREIGN);
        let (_, how) = adopt_or_publish::<Fake>(foreign).unwrap();
        assert_eq!(how, "own");
        assert_eq!(
            foreign.state.load(Ordering::Acquire),
            FOREIGN,
            "not overwritten"
        );
    }

    #[test]
    fn a_published_device_is_adopted_without_making_one() {
        let r = record(CLAIMED);
        r.device.store(42, Ordering::Release);
        // "adopted" comes only from `adopt`, on a path that never calls `own`. (A count of
        // devices made would race with the other tests of this module, which make some.)
        assert_eq!(adopt_or_publish::<Fake>(r).unwrap(), (42, "adopted"));
    }
}
