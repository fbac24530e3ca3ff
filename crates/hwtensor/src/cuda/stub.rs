//! CUDA where the library has none (Windows): the one type the buffers name, uninhabited, so a
//! buffer's CUDA import is a field on every platform and never holds a value here (memmap2's
//! `stub.rs` pattern: no `cfg` on the field or on the code that reads it).

use crate::Result;

/// A buffer as CUDA reaches it: no value exists without CUDA.
#[derive(Debug)]
pub(crate) enum BufferImport {}

impl BufferImport {
    /// Waits until CUDA's work on the buffer is done: there is none.
    pub(crate) fn wait_idle(&self, _write: bool) -> Result<()> {
        match *self {}
    }
}
