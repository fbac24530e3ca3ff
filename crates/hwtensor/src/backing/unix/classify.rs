//! What kind of memory a foreign fd holds, judged by the filesystem it lives on.
//!
//! `fstatfs` tells a DMA-BUF from a memfd or shm file without side effects; `fstat` gives the
//! size, so an fd smaller than the tensor it claims to hold is refused before anything maps it
//! (mapping past the end of a file and touching it is a SIGBUS, not an error).

use std::os::fd::BorrowedFd;

use rustix::fs::FileType;

use crate::{Error, Result, TensorMemory};

/// `f_type` of a DMA-BUF (`DMA_BUF_MAGIC`, linux/magic.h).
pub(crate) const DMA_BUF_MAGIC: u32 = 0x444d_4142;
/// `f_type` of tmpfs, where memfds and `/dev/shm` files live (`TMPFS_MAGIC`).
pub(crate) const TMPFS_MAGIC: u32 = 0x0102_1994;
/// `f_type` of hugetlbfs, where `MFD_HUGETLB` memfds live (`HUGETLBFS_MAGIC`).
pub(crate) const HUGETLBFS_MAGIC: u32 = 0x9584_58f6;

/// Filesystems worth naming when we refuse an fd, so the error says what the caller passed.
const KNOWN_REFUSED: &[(u32, &str)] = &[
    (0x5049_5045, "a pipe"),
    (0x534f_434b, "a socket"),
    (
        0x0904_1934,
        "an anonymous inode (eventfd, timerfd, epoll, ...)",
    ),
    (0xef53, "a file on ext2/3/4"),
    (0x5846_5342, "a file on XFS"),
    (0x9123_683e, "a file on btrfs"),
    (0x794c_7630, "a file on overlayfs"),
    (0x9fa0, "a /proc file"),
    (0x6265_6572, "a sysfs file"),
];

/// What `inspect` learned of an fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdInfo {
    pub memory: TensorMemory,
    pub size: u64,
}

/// Classifies `fd` and reads its size.
pub(crate) fn inspect(fd: BorrowedFd<'_>) -> Result<FdInfo> {
    let fs = rustix::fs::fstatfs(fd)
        .map_err(|e| Error::Fd(format!("fstatfs on fd {fd:?} failed: {e}")))?;
    let st =
        rustix::fs::fstat(fd).map_err(|e| Error::Fd(format!("fstat on fd {fd:?} failed: {e}")))?;
    let memory = classify(fs.f_type as u64 as u32, FileType::from_raw_mode(st.st_mode))
        .map_err(Error::Fd)?;
    let size = u64::try_from(st.st_size)
        .map_err(|_| Error::Fd(format!("fd reports a negative size {}", st.st_size)))?;
    Ok(FdInfo { memory, size })
}

/// The backing an fd on filesystem `magic` with file type `kind` can be, or why none.
pub(crate) fn classify(magic: u32, kind: FileType) -> std::result::Result<TensorMemory, String> {
    match magic {
        DMA_BUF_MAGIC => Ok(TensorMemory::DmaBuf),
        TMPFS_MAGIC | HUGETLBFS_MAGIC if kind == FileType::RegularFile => Ok(TensorMemory::Shm),
        TMPFS_MAGIC | HUGETLBFS_MAGIC => Err(format!(
            "a {} on tmpfs, not a memfd or shared-memory file",
            file_type_name(kind)
        )),
        _ => {
            let what = KNOWN_REFUSED
                .iter()
                .find(|(m, _)| *m == magic)
                .map(|(_, name)| name.to_string())
                .unwrap_or_else(|| {
                    format!(
                        "a {} on a filesystem with magic {magic:#x}",
                        file_type_name(kind)
                    )
                });
            Err(format!(
                "expected a DMA-BUF or a memfd/shared-memory file, got {what}"
            ))
        }
    }
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
}
