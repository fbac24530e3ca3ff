//! The host id: what two processes must share for a frame to go by fd hand-off. fds pass only
//! within one kernel, and the hand-off socket is an abstract Unix socket, which lives in a
//! network namespace: so the id is this boot's id with the network namespace mixed in.

use std::sync::OnceLock;

use uuid::Uuid;

/// The kernel's id of this boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// The network namespace this process is in.
const NET_NS: &str = "/proc/self/ns/net";

/// This process's host id (nil where /proc cannot tell: then nothing counts as local).
pub fn host_id() -> Uuid {
    static ID: OnceLock<Uuid> = OnceLock::new();
    *ID.get_or_init(|| read_host_id().unwrap_or_default())
}

fn read_host_id() -> Option<Uuid> {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string(BOOT_ID).ok()?;
    let boot = Uuid::parse_str(boot.trim()).ok()?;
    let netns = std::fs::metadata(NET_NS).ok()?.ino();
    let (hi, lo) = boot.as_u64_pair();
    Some(Uuid::from_u64_pair(hi, lo ^ netns))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_id_is_stable_and_not_nil_on_linux() {
        let id = super::host_id();
        assert!(!id.is_nil());
        assert_eq!(id, super::host_id());
    }
}
