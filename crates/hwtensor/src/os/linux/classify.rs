//! What kind of memory a foreign fd holds, judged by the filesystem it lives on.
//!
//! `fstatfs` tells a DMA-BUF from a memfd or shm file without side effects; `fstat` gives the
//! size, so an fd smaller than the tensor it claims to hold is refused before anything maps it
//! (mapping past the end of a file and touching it is a SIGBUS, not an error).

// Only the tests borrow a raw (closed) fd number.
#![cfg_attr(test, allow(unsafe_code))]

use std::os::fd::BorrowedFd;

use rustix::fs::{FileType, Stat};

use crate::{Error, Result, TensorMemory};

/// `f_type` of a DMA-BUF (`DMA_BUF_MAGIC`, linux/magic.h).
pub(crate) const DMA_BUF_MAGIC: u32 = 0x444d_4142;
/// `f_type` of tmpfs, where memfds and `/dev/shm` files live (`TMPFS_MAGIC`).
pub(crate) const TMPFS_MAGIC: u32 = 0x0102_1994;
/// `f_type` of hugetlbfs, where `MFD_HUGETLB` memfds live (`HUGETLBFS_MAGIC`).
pub(crate) const HUGETLBFS_MAGIC: u32 = 0x9584_58f6;

/// `f_type` of the anonymous-inode filesystem: eventfds, sync files and many drivers' objects.
pub(crate) const ANON_INODE_FS_MAGIC: u32 = 0x0904_1934;

/// The `/proc/self/fd` link of a DMA-fence sync_file: the kernel makes each one an anonymous
/// inode named `sync_file` (drivers/dma-buf/sync_file.c), so the name tells it from an eventfd
/// or a driver's own fence object, which poll differently or not at all.
const SYNC_FILE_LINK: &str = "anon_inode:sync_file";

/// Names of memfds that GPU drivers export as memory handles. Such a file starts with the
/// driver's own header (lavapipe: size and data offset), so mapping it as plain shared memory
/// and writing through it corrupts the allocation for every importer.
const GPU_DRIVER_MEMFDS: &[(&str, &str)] = &[("llvmpipe memory fd", "lavapipe")];

/// Filesystems worth naming when we refuse an fd, so the error says what the caller passed.
const KNOWN_REFUSED: &[(u32, &str)] = &[
    (0x5049_5045, "a pipe"),
    (0x534f_434b, "a socket"),
    (
        ANON_INODE_FS_MAGIC,
        "an anonymous inode (eventfd, timerfd, epoll, ...)",
    ),
    (0xef53, "a file on ext2/3/4"),
    (0x5846_5342, "a file on XFS"),
    (0x9123_683e, "a file on btrfs"),
    (0x794c_7630, "a file on overlayfs"),
    (0x9fa0, "a /proc file"),
    (0x6265_6572, "a sysfs file"),
];

/// The kind of memory `fd` holds, judged without touching its content. A GPU driver's memfd
/// is refused by name: it is GPU memory, importable only as such.
///
/// The size is not read here: a shared-memory fd must be sealed first (see `shm`), or a peer
/// could shrink it between our size check and our mapping.
#[cfg(test)]
pub(crate) fn inspect(fd: BorrowedFd<'_>) -> Result<TensorMemory> {
    inspect_with(fd, &stat(fd)?)
}

/// `inspect`, with the `fstat` of `fd` the caller already made.
pub(crate) fn inspect_with(fd: BorrowedFd<'_>, st: &Stat) -> Result<TensorMemory> {
    let kind = FdKind::with_stat(fd, st)?;
    let memory = classify(kind.magic, FileType::from_raw_mode(kind.mode)).map_err(Error::Fd)?;
    let memfd_name = kind.name.as_deref().and_then(|n| n.strip_prefix("/memfd:"));
    if let Some((_, driver)) = GPU_DRIVER_MEMFDS
        .iter()
        .find(|(name, _)| memfd_name == Some(*name))
    {
        return Err(Error::Fd(format!(
            "the fd is GPU memory exported by {driver} (its first bytes are the driver's header), not shared memory; import it as GPU memory"
        )));
    }
    Ok(memory)
}

/// `fstat` of `fd`, as an fd error.
pub(crate) fn stat(fd: BorrowedFd<'_>) -> Result<Stat> {
    rustix::fs::fstat(fd).map_err(|e| Error::Fd(format!("fstat on fd {fd:?} failed: {e}")))
}

/// The size a `stat` reports.
pub(crate) fn size_of(st: &Stat) -> Result<u64> {
    u64::try_from(st.st_size)
        .map_err(|_| Error::Fd(format!("fd reports a negative size {}", st.st_size)))
}

/// The fd's size now.
pub(crate) fn size(fd: BorrowedFd<'_>) -> Result<u64> {
    size_of(&stat(fd)?)
}

/// What sort of file an fd is, precisely enough to tell a driver's export from a stand-in:
/// the filesystem, the file type, the device number of a device node, and the name an
/// anonymous inode or memfd carries (`anon_inode:[eventfd]`, `/memfd:llvmpipe memory fd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FdKind {
    magic: u32,
    mode: u32,
    rdev: u64,
    name: Option<String>,
}

impl FdKind {
    /// Reads the kind of `fd` (fstatfs, fstat, and the `/proc/self/fd` link for names).
    pub(crate) fn of(fd: BorrowedFd<'_>) -> Result<FdKind> {
        FdKind::with_stat(fd, &stat(fd)?)
    }

    /// The kind of `fd`, whose `fstat` the caller already made (fstatfs and the link only).
    pub(crate) fn with_stat(fd: BorrowedFd<'_>, st: &Stat) -> Result<FdKind> {
        let fs = rustix::fs::fstatfs(fd)
            .map_err(|e| Error::Fd(format!("fstatfs on fd {fd:?} failed: {e}")))?;
        let magic = fs.f_type as u64 as u32;
        let named = matches!(magic, ANON_INODE_FS_MAGIC | TMPFS_MAGIC | HUGETLBFS_MAGIC);
        Ok(FdKind {
            magic,
            mode: st.st_mode & libc::S_IFMT,
            rdev: st.st_rdev,
            name: named.then(|| link_name(fd)).flatten(),
        })
    }

    /// Whether this is a regular file on tmpfs (a memfd), whose size a peer could change.
    pub(crate) fn is_memfd(&self) -> bool {
        matches!(self.magic, TMPFS_MAGIC | HUGETLBFS_MAGIC)
            && FileType::from_raw_mode(self.mode) == FileType::RegularFile
    }

    /// Whether this is a DMA-fence sync_file.
    pub(crate) fn is_sync_file(&self) -> bool {
        self.magic == ANON_INODE_FS_MAGIC && self.name.as_deref() == Some(SYNC_FILE_LINK)
    }

    /// Says what this kind is, for errors.
    pub(crate) fn describe(&self) -> String {
        let kind = FileType::from_raw_mode(self.mode);
        let what = match classify(self.magic, kind) {
            Ok(m) => format!("{m} memory"),
            Err(_) => refused_name(self.magic, kind),
        };
        match &self.name {
            Some(n) => format!("{what} named {n:?}"),
            None if self.rdev != 0 => format!("{what}, device {:#x}", self.rdev),
            None => what,
        }
    }
}

/// The `/proc/self/fd` link of `fd` without the " (deleted)" a memfd's carries.
fn link_name(fd: BorrowedFd<'_>) -> Option<String> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let text = link.to_string_lossy();
    Some(text.strip_suffix(" (deleted)").unwrap_or(&text).to_string())
}

/// The backing an fd on filesystem `magic` with file type `kind` can be, or why none.
fn classify(magic: u32, kind: FileType) -> std::result::Result<TensorMemory, String> {
    match magic {
        DMA_BUF_MAGIC => Ok(TensorMemory::DmaBuf),
        TMPFS_MAGIC | HUGETLBFS_MAGIC if kind == FileType::RegularFile => Ok(TensorMemory::Shm),
        TMPFS_MAGIC | HUGETLBFS_MAGIC => Err(format!(
            "a {} on tmpfs, not a memfd or shared-memory file",
            file_type_name(kind)
        )),
        _ => Err(format!(
            "expected a DMA-BUF or a memfd/shared-memory file, got {}",
            refused_name(magic, kind)
        )),
    }
}

/// What a file that is no memory is, in words ("a pipe"): for refusals that expected
/// something else, whatever that was (memory, a sync_file).
fn refused_name(magic: u32, kind: FileType) -> String {
    KNOWN_REFUSED
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| name.to_string())
        .unwrap_or_else(|| {
            format!(
                "a {} on a filesystem with magic {magic:#x}",
                file_type_name(kind)
            )
        })
}

fn file_type_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dmabuf_and_tmpfs_files_are_accepted() {
        assert_eq!(
            classify(DMA_BUF_MAGIC, FileType::Unknown),
            Ok(TensorMemory::DmaBuf)
        );
        assert_eq!(
            classify(TMPFS_MAGIC, FileType::RegularFile),
            Ok(TensorMemory::Shm)
        );
        assert_eq!(
            classify(HUGETLBFS_MAGIC, FileType::RegularFile),
            Ok(TensorMemory::Shm)
        );
    }

    #[test]
    fn a_device_node_on_devtmpfs_is_refused_by_name() {
        let err = classify(TMPFS_MAGIC, FileType::CharacterDevice).unwrap_err();
        assert!(err.contains("character device"), "{err}");
    }

    #[test]
    fn refusals_name_what_was_passed() {
        assert!(classify(0x5049_5045, FileType::Fifo)
            .unwrap_err()
            .contains("pipe"));
        assert!(classify(0xef53, FileType::RegularFile)
            .unwrap_err()
            .contains("ext2/3/4"));
        assert!(classify(0x1234, FileType::RegularFile)
            .unwrap_err()
            .contains("0x1234"));
    }

    #[test]
    fn a_closed_fd_is_an_error_not_a_crash() {
        let (r, w) = std::io::pipe().unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&r);
        drop((r, w));
        // SAFETY: the number is closed; fstatfs/fstat only look it up in the fd table and fail
        // with EBADF. Nothing else in this test binary opens fds between the drop and the call
        // on this thread's behalf, and a stray match would only be inspected, never closed.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let err = inspect(fd).unwrap_err().to_string();
        assert!(err.contains("fstatfs") || err.contains("fstat"), "{err}");
    }

    #[test]
    fn an_eventfd_and_a_pipe_are_kinds_apart_from_a_memfd() {
        use std::os::fd::AsFd;
        let memfd = rustix::fs::memfd_create("m", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let ev = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        let (r, _w) = std::io::pipe().unwrap();
        let m = FdKind::of(memfd.as_fd()).unwrap();
        assert!(m.is_memfd());
        assert_ne!(m, FdKind::of(ev.as_fd()).unwrap());
        assert_ne!(m, FdKind::of(r.as_fd()).unwrap());
        assert!(FdKind::of(ev.as_fd())
            .unwrap()
            .describe()
            .contains("eventfd"));
    }

    #[test]
    fn a_pipe_is_described_as_a_pipe_whatever_the_caller_expected() {
        use std::os::fd::AsFd;
        let (r, _w) = std::io::pipe().unwrap();
        let said = FdKind::of(r.as_fd()).unwrap().describe();
        assert_eq!(said, "a pipe");
        let err = crate::SyncFile::from_fd(r.into()).unwrap_err().to_string();
        assert!(
            err.contains("expected a DMA-fence sync_file, got a pipe"),
            "{err}"
        );
        assert!(!err.contains("expected a DMA-BUF"), "{err}");
    }

    #[test]
    fn a_gpu_drivers_memfd_is_not_shared_memory() {
        use std::os::fd::AsFd;
        let fd = rustix::fs::memfd_create("llvmpipe memory fd", rustix::fs::MemfdFlags::CLOEXEC)
            .unwrap();
        let err = inspect(fd.as_fd()).unwrap_err().to_string();
        assert!(err.contains("lavapipe"), "{err}");
    }
}
