//! The Windows backings besides the heap and the device's textures: shared memory as a
//! pagefile-backed section (`section.rs`).

mod section;

pub(crate) use section::SectionMapping;

use std::os::windows::io::BorrowedHandle;

use super::Storage;

impl Storage {
    /// The section handle of Windows shared memory, to hand to another process (`None` for
    /// every other storage).
    pub(crate) fn section_handle(&self) -> Option<BorrowedHandle<'_>> {
        match self {
            Storage::Section(s) => Some(s.handle()),
            _ => None,
        }
    }
}
