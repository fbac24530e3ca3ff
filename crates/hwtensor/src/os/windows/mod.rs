//! Windows: what the shared layers need of the operating system.

/// Whether process `pid` exists. A Windows rendezvous record dies with its last handle, so
/// the holder of anything in one is always a live process: yes.
pub(crate) fn process_alive(_pid: u32) -> bool {
    true
}

/// Windows has no sync_files: a tensor's fence field has this type without values, so it is
/// always `None` and callers carry no `cfg` (the Linux type is an `Arc<SyncFile>`).
pub(crate) type AcquireFence = std::convert::Infallible;

pub(crate) mod handles;
pub(crate) mod pipe;
pub(crate) mod sync;
