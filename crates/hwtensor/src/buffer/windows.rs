//! What a buffer offers on Windows beyond the shared layers: its section's handle.

use std::os::windows::io::BorrowedHandle;

use super::Buffer;

impl Buffer {
    /// The section handle of Windows shared memory (`None` for other memory).
    pub(crate) fn section_handle(&self) -> Option<BorrowedHandle<'_>> {
        self.0.storage.section_handle()
    }
}
