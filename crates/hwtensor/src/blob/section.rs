//! The handle path of the blob (Windows): shared memory, a section, by reference. The blob is
//! the same as on Linux (one plane table naming handle index 0); the section's handle travels
//! beside it, as an fd does on Linux, and the receiver maps it only after checking that it is
//! a section at least as large as the blob says.

use std::os::windows::io::{BorrowedHandle, OwnedHandle};

use super::{bad, Described, Outgoing};
use crate::backing::{SectionMapping, Storage};
use crate::buffer::Buffer;
use crate::identity::BufferIdentity;
use crate::{Element, Error, Result, Tensor, TensorDyn, TensorMemory};

/// The blob of `tensor` by reference, its section's handle and its identity: shared memory
/// only (other memory has no section to lend; send it inline).
pub(crate) fn export(tensor: &TensorDyn) -> Result<(Vec<u8>, BorrowedHandle<'_>, BufferIdentity)> {
    each_tensor!(tensor, t => export_typed(t))
}

fn export_typed<T: Element>(
    t: &Tensor<T>,
) -> Result<(Vec<u8>, BorrowedHandle<'_>, BufferIdentity)> {
    let handle = t
        .buffer
        .section_handle()
        .ok_or_else(|| Error::Unavailable {
            memory: t.memory(),
            reason: "only shared memory (a section) goes by handle; send it inline instead, or \
                 allocate it on shm"
                .into(),
        })?;
    let out = Outgoing::reference(t);
    Ok((out.write(t, None)?, handle, t.identity()))
}

/// The tensor a reference blob describes over `section`, a handle this process owns (closed on
/// every error), named by `identity`.
pub(crate) fn import(
    blob: &[u8],
    section: OwnedHandle,
    identity: BufferIdentity,
) -> Result<TensorDyn> {
    let d = Described::read(blob)?;
    if d.inline.is_some() || d.memory != TensorMemory::Shm || d.header.fd_count != 1 {
        return Err(bad(format!(
            "a blob by handle must be shared memory by reference with one handle (this is {} \
             memory, {} handle(s))",
            d.memory, d.header.fd_count
        )));
    }
    if d.header.completion_fd != super::wire::NO_FENCE {
        return Err(bad("a section by handle carries no completion fence"));
    }
    let mapping = SectionMapping::import(section, d.buffer_len, identity)?;
    let buffer = Buffer::new(Storage::Section(mapping))?;
    d.tensor(buffer)
}
