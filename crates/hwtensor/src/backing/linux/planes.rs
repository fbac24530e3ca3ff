//! One CPU mapping over an image whose planes live in several fds (V4L2 `NV12M`, libcamera
//! frame buffers with a buffer per plane): each fd's pages are mapped into one reserved range so
//! that every plane lands where the image's one-buffer layout puts it. The tensor above then
//! sees an ordinary image: one pointer, one row stride, the chroma rows after the luma rows.
//!
//! Pages are the limit: a plane that starts in another fd can only begin on a page of the
//! range, so the planes before it must end on a page boundary (a 640x480, 1280x720, 3840x2160
//! or 1920x1088 NV12 image does; 1920x1080 with a 1920-byte stride does not, and is refused with
//! the fix named, never copied behind the caller's back).

// Reserving address space and mapping fds into it are raw memory calls.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

use super::dmabuf;
use crate::format::Plane;
use crate::os::{classify, memfd};
use crate::{Direction, Error, Result, TensorMemory};

/// A plane as its producer hands it over: the fd, where the plane's first row starts in it.
#[derive(Debug)]
pub(crate) struct PlaneSource {
    pub fd: OwnedFd,
    pub offset: usize,
}

/// Consecutive planes that lie in one fd exactly as the image's layout has them, mapped by one
/// `mmap`: `[first, last]` planes, and where the mapping goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub first: usize,
    pub last: usize,
    /// Offset of the mapping in the reserved range (a multiple of the page).
    pub at: usize,
    /// File offset the mapping starts from (a multiple of the page).
    pub file_offset: usize,
    /// Bytes mapped.
    pub len: usize,
    /// Bytes of the fd the planes need (their last byte, plus one).
    pub needed: usize,
}

/// Where each fd's pages go, for an image whose first byte lies `lead` bytes into its first
/// page: the layout `model` (the image's planes relative to its first byte), the planes'
/// `offsets` in their fds and whether each plane shares its fd with the one before (`same`).
/// Refuses a plane that cannot start on a page of the range.
pub(crate) fn layout(
    model: &[Plane],
    offsets: &[usize],
    same: &[bool],
    page: usize,
) -> Result<(usize, Vec<Group>)> {
    let lead = offsets[0] % page;
    let mut groups: Vec<Group> = Vec::new();
    for (k, plane) in model.iter().enumerate() {
        let follows = k > 0
            && same[k]
            && offsets[k].checked_sub(offsets[k - 1]) == Some(plane.offset - model[k - 1].offset);
        let end = offsets[k]
            .checked_add(plane.size)
            .ok_or_else(|| Error::InvalidArgument(format!("plane {k}'s offset overflows")))?;
        if follows {
            let g = groups.last_mut().expect("plane 0 opened a group");
            g.last = k;
            g.needed = end;
            continue;
        }
        let at_in_range = lead + plane.offset;
        if k > 0 && (!at_in_range.is_multiple_of(page) || !offsets[k].is_multiple_of(page)) {
            return Err(Error::Image(format!(
                "plane {k} is in its own buffer, so it must start on a page ({page} bytes) both \
                 in its fd (it starts at byte {}) and in the image (it starts {} bytes after the \
                 first plane's page): pad the row stride or the height until the planes before it \
                 end on a page (1920x1080 NV12, for one, fits as 1920x1088 or with a \
                 2048-byte stride), put the planes in one buffer, or [[copy_planes]]",
                offsets[k], at_in_range
            )));
        }
        groups.push(Group {
            first: k,
            last: k,
            at: at_in_range - offsets[k] % page,
            file_offset: offsets[k] - offsets[k] % page,
            len: 0,
            needed: end,
        });
    }
    for g in &mut groups {
        g.len = g.needed - g.file_offset;
    }
    Ok((lead, groups))
}

/// How an image in several fds lies: what a blob with an fd per plane describes.
#[derive(Debug)]
pub(crate) struct PlaneFds<'a> {
    /// Each plane's fd, in plane order.
    pub fds: &'a [OwnedFd],
    /// Where each plane's first row starts in its fd.
    pub offsets: &'a [usize],
    /// Where the image's first byte lies in the mapping: a tensor at another offset is a view
    /// of part of the image.
    pub lead: usize,
    /// The planes as the mapping lays them out from `lead`.
    pub model: &'a [Plane],
}

/// The planes' pages, mapped into one reserved range; unmapped whole on drop, then the fds close.
#[derive(Debug)]
pub(crate) struct PlaneMapping {
    base: NonNull<u8>,
    reserved: usize,
    /// One fd per plane, in plane order (a plane that shares its fd with the one before has
    /// its own duplicate): what a hand-off sends.
    fds: Vec<OwnedFd>,
    /// Where each plane's first row starts in its fd: what a receiver maps them from.
    offsets: Vec<usize>,
    /// Where the image's first byte lies in the range.
    lead: usize,
    /// The image's planes, as the range lays them out from `lead`.
    model: Vec<Plane>,
    /// The DMA-BUFs among the fds: their CPU accesses are bracketed by `DMA_BUF_IOCTL_SYNC`.
    dmabufs: Vec<usize>,
    memory: TensorMemory,
    writable: bool,
}

// SAFETY: the range is plain shared memory owned by this value; access to it is ordered by the
// buffer's map claims, as for `FdMapping`.
unsafe impl Send for PlaneMapping {}
// SAFETY: as above; `&PlaneMapping` hands out only the address.
unsafe impl Sync for PlaneMapping {}

/// How a plane list lies: each fd's kind, and where each run of planes goes in the range.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Where the image's first byte lies in the range.
    pub lead: usize,
    groups: Vec<Group>,
    kinds: Vec<TensorMemory>,
    model: Vec<Plane>,
}

impl Plan {
    /// Looks at each fd once (its kind, and which fd it shares a file with) and lays the
    /// planes out over `model`; refuses a plane that cannot start on a page.
    pub(crate) fn of(planes: &[PlaneSource], model: &[Plane]) -> Result<Plan> {
        let mut kinds = Vec::with_capacity(planes.len());
        let mut files = Vec::with_capacity(planes.len());
        for p in planes {
            let st = classify::stat(p.fd.as_fd())?;
            kinds.push(classify::inspect_with(p.fd.as_fd(), &st)?);
            files.push((st.st_dev, st.st_ino));
        }
        let same: Vec<bool> = (0..planes.len())
            .map(|k| k > 0 && files[k] == files[k - 1])
            .collect();
        let offsets: Vec<usize> = planes.iter().map(|p| p.offset).collect();
        let (lead, groups) = layout(model, &offsets, &same, rustix::param::page_size())?;
        Ok(Plan {
            lead,
            groups,
            kinds,
            model: model.to_vec(),
        })
    }

    /// Whether the planes lie in one fd exactly as one buffer of the image has them.
    pub(crate) fn is_one_buffer(&self) -> bool {
        self.groups.len() == 1
    }
}

impl PlaneMapping {
    /// Maps `planes` as `plan` lays them out, so the image's first byte is at `plan.lead` of
    /// the range. Each fd is checked as an import is: shared memory sealed against shrinking,
    /// every fd holding the bytes its planes need.
    pub(crate) fn new(
        planes: Vec<PlaneSource>,
        plan: &Plan,
        allow_unsealed: bool,
    ) -> Result<PlaneMapping> {
        for (p, kind) in planes.iter().zip(&plan.kinds) {
            if *kind == TensorMemory::Shm {
                memfd::seal_for_import(p.fd.as_fd(), allow_unsealed)?;
            }
        }
        for g in &plan.groups {
            let size = classify::size(planes[g.first].fd.as_fd())?;
            if size < g.needed as u64 {
                return Err(Error::TooSmall {
                    needed: g.needed,
                    capacity: usize::try_from(size).unwrap_or(usize::MAX),
                });
            }
        }
        let end = plan.groups.last().map_or(0, |g| g.at + g.len);
        let reserved = end.next_multiple_of(rustix::param::page_size());
        let base = reserve(reserved)?;
        let mut mapping = PlaneMapping {
            base,
            reserved,
            fds: Vec::new(),
            offsets: planes.iter().map(|p| p.offset).collect(),
            lead: plan.lead,
            model: plan.model.clone(),
            dmabufs: Vec::new(),
            memory: TensorMemory::Shm,
            writable: true,
        };
        for g in &plan.groups {
            let fd = planes[g.first].fd.as_fd();
            mapping.writable &= mapping.map_group(fd, g)?;
        }
        for (p, kind) in planes.into_iter().zip(&plan.kinds) {
            if *kind == TensorMemory::DmaBuf {
                mapping.memory = TensorMemory::DmaBuf;
                mapping.dmabufs.push(mapping.fds.len());
            }
            mapping.fds.push(p.fd);
        }
        Ok(mapping)
    }

    /// Maps one group over its place in the range: read-write where the fd allows it, else
    /// read-only (a decoder's read-only DMA-BUF). Whether it is writable.
    fn map_group(&self, fd: BorrowedFd<'_>, g: &Group) -> Result<bool> {
        // SAFETY: `base + at .. + len` lies inside the range this value reserved (the layout
        // keeps every group inside `reserved`), so MAP_FIXED replaces only our own reservation.
        let addr = unsafe { self.base.as_ptr().add(g.at) }.cast();
        let map = |prot| {
            // SAFETY: as above; the fd holds `file_offset + len` bytes (checked by the caller).
            unsafe {
                rustix::mm::mmap(
                    addr,
                    g.len,
                    prot,
                    MapFlags::SHARED | MapFlags::FIXED,
                    fd,
                    g.file_offset as u64,
                )
            }
        };
        match map(ProtFlags::READ | ProtFlags::WRITE) {
            Ok(_) => Ok(true),
            Err(rw) => match map(ProtFlags::READ) {
                Ok(_) => Ok(false),
                Err(_) => Err(Error::os("mmap of an image plane's fd", rw)),
            },
        }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.reserved
    }

    pub(crate) fn memory(&self) -> TensorMemory {
        self.memory
    }

    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    /// The first plane's fd: what identifies the buffer.
    pub(crate) fn first_fd(&self) -> BorrowedFd<'_> {
        self.fds[0].as_fd()
    }

    /// How the planes lie, for a hand-off that sends an fd per plane.
    pub(crate) fn plane_fds(&self) -> PlaneFds<'_> {
        PlaneFds {
            fds: &self.fds,
            offsets: &self.offsets,
            lead: self.lead,
            model: &self.model,
        }
    }

    /// Opens the sync bracket of every DMA-BUF among the planes.
    pub(crate) fn begin_cpu(&self, direction: Direction) -> Result<Vec<dmabuf::SyncBracket<'_>>> {
        self.dmabufs
            .iter()
            .map(|&i| dmabuf::SyncBracket::begin(self.fds[i].as_fd(), direction))
            .collect()
    }
}

impl Drop for PlaneMapping {
    fn drop(&mut self) {
        // SAFETY: the whole range this value reserved; no map outlives the buffer that owns it.
        if let Err(e) = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.reserved) } {
            log::error!("hwtensor: unmapping an image's planes failed: {e}");
        }
    }
}

/// Reserves `len` bytes of address space, inaccessible until the planes are mapped over it.
fn reserve(len: usize) -> Result<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping at an address the kernel picks; nothing aliases it.
    let at = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::empty(),
            MapFlags::PRIVATE | MapFlags::NORESERVE,
        )
    }
    .map_err(|e| Error::os("mmap reserving an image's planes", e))?;
    NonNull::new(at.cast()).ok_or_else(|| Error::InvalidOperation("mmap returned null".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PixelFormat;

    const PAGE: usize = 4096;

    fn nv12(w: usize, h: usize, stride: usize) -> Vec<Plane> {
        PixelFormat::Nv12.plane_table(w, h, stride).unwrap()
    }

    #[test]
    fn an_nv12m_image_whose_luma_ends_on_a_page_maps_its_chroma_right_after_it() {
        let (lead, groups) = layout(&nv12(640, 480, 640), &[0, 0], &[false, false], PAGE).unwrap();
        assert_eq!(lead, 0);
        assert_eq!(groups.len(), 2);
        assert_eq!((groups[1].at, groups[1].file_offset), (640 * 480, 0));
        assert_eq!(groups[1].needed, 640 * 240);
    }

    #[test]
    fn planes_of_one_fd_laid_out_as_one_buffer_are_one_mapping() {
        let planes = nv12(1920, 1080, 1920);
        let (lead, groups) = layout(
            &planes,
            &[4096 + 16, 4096 + 16 + 1920 * 1080],
            &[false, true],
            PAGE,
        )
        .unwrap();
        assert_eq!(lead, 16);
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].file_offset, 4096);
        assert_eq!(groups[0].needed, 4096 + 16 + 1920 * 1080 * 3 / 2);
    }

    #[test]
    fn a_chroma_plane_that_cannot_start_on_a_page_is_refused_with_the_fix_named() {
        let err = layout(&nv12(1920, 1080, 1920), &[0, 0], &[false, false], PAGE).unwrap_err();
        assert!(err.to_string().contains("1920x1088"), "{err}");
        let err = layout(&nv12(640, 480, 640), &[0, 64], &[false, false], PAGE).unwrap_err();
        assert!(err.to_string().contains("byte 64"), "{err}");
        let padded = layout(&nv12(1920, 1080, 2048), &[0, 0], &[false, false], PAGE);
        assert!(padded.is_ok(), "a 2048-byte stride ends the luma on a page");
    }
}
