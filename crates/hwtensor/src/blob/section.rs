//! The handle path of the blob (Windows): shared memory (a section) and GPU images (a D3D11
//! texture with its completion) by reference. The blob is the same as on Linux (one plane
//! table naming handle index 0, the fence as index 1); the handles travel beside it, as fds do
//! on Linux, and the receiver opens them only after checking what they are: a section at least
//! as large as the blob says, a texture of this adapter that is the blob's image.
//!
//! A texture's GPU section names the exporter's adapter by LUID (in `device_uuid`: LowPart
//! then HighPart, little-endian, the rest zero): a texture opens only on the adapter it lives on.

use std::os::windows::io::{AsHandle, AsRawHandle, BorrowedHandle, OwnedHandle};

use super::wire::{bad, Described, Outgoing};
use super::REQUIRES_COMPLETION;
use crate::backing::{SectionMapping, Storage};
use crate::buffer::Buffer;
use crate::gpu::{GpuMemory, GpuReference, TextureRequest, GPU_WAIT};
use crate::identity::BufferIdentity;
use crate::{Element, Error, Result, Tensor, TensorDyn, TensorMemory};

/// A handle a blob lends: the section's own (borrowed from the tensor), or a texture's shared
/// handle made for this export.
#[derive(Debug)]
pub(crate) enum Lent<'a> {
    Borrowed(BorrowedHandle<'a>),
    Owned(OwnedHandle),
}

impl Lent<'_> {
    /// The handle's value in this process, for the receiver to duplicate.
    pub(crate) fn value(&self) -> u64 {
        match self {
            Lent::Borrowed(h) => h.as_raw_handle() as u64,
            Lent::Owned(h) => h.as_raw_handle() as u64,
        }
    }
}

/// A blob by reference and what travels beside it.
#[derive(Debug)]
pub(crate) struct Exported<'a> {
    pub blob: Vec<u8>,
    /// The memory: a section, or a texture.
    pub memory: Lent<'a>,
    /// A texture's fence, where its completion has one.
    pub fence: Option<OwnedHandle>,
    pub identity: BufferIdentity,
}

/// The blob of `tensor` by reference with its handles: shared memory, or a GPU image (other
/// memory has nothing to lend; send it inline).
pub(crate) fn export(tensor: &TensorDyn) -> Result<Exported<'_>> {
    each_tensor!(tensor, t => export_typed(t))
}

fn export_typed<T: Element>(t: &Tensor<T>) -> Result<Exported<'_>> {
    if let Some(handle) = t.buffer.section_handle() {
        return Ok(Exported {
            blob: Outgoing::reference(t).write(t, None)?,
            memory: Lent::Borrowed(handle),
            fence: None,
            identity: t.identity(),
        });
    }
    match t.buffer.gpu() {
        Some(mem) => export_texture(t, mem),
        None => Err(Error::Unavailable {
            memory: t.memory(),
            reason: "only shared memory (a section) and GPU images go by handle; send it inline \
                     instead, or allocate it on shm"
                .into(),
        }),
    }
}

/// A GPU image: a new shared handle of its texture, and its last write's completion (the
/// fence travels where the device has one; without, that write has finished already).
fn export_texture<'a, T: Element>(t: &'a Tensor<T>, mem: &GpuMemory) -> Result<Exported<'a>> {
    let share = t.share_gpu()?;
    let mut out = Outgoing::reference(t);
    out.gpu = GpuReference {
        device_uuid: luid_bytes(mem.device().luid()),
        driver_uuid: [0; 16],
        allocation_size: t.buffer_len() as u64,
        producer: mem.origin(),
    };
    if share.completion.fence.is_some() {
        out.completion = Some(share.completion.value);
        out.fd_count = 2;
    }
    Ok(Exported {
        blob: out.write(t, None)?,
        memory: Lent::Owned(share.texture),
        fence: share.completion.fence,
        identity: t.identity(),
    })
}

/// An adapter LUID as the blob's `device_uuid` carries it.
fn luid_bytes((high, low): (i32, u32)) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&low.to_le_bytes());
    b[4..8].copy_from_slice(&high.to_le_bytes());
    b
}

/// The tensor a reference blob describes over `memory` (a section or a texture's shared
/// handle) and `fence` (a texture's completion fence), handles this process owns (closed on
/// every error), named by `identity` (a section's: a section has no name to read).
pub(crate) fn import(
    blob: &[u8],
    memory: OwnedHandle,
    fence: Option<OwnedHandle>,
    identity: BufferIdentity,
) -> Result<TensorDyn> {
    let d = Described::read(blob)?;
    let fenced = d.header.required & REQUIRES_COMPLETION != 0;
    let handles = 1 + usize::from(fence.is_some());
    if d.inline.is_some() || d.header.fd_count != handles || fenced != fence.is_some() {
        return Err(bad(format!(
            "a blob by handle must be by reference, naming the handles that came ({} memory, \
             {} handle(s) named, {handles} came, completion {})",
            d.memory,
            d.header.fd_count,
            if fenced { "required" } else { "not required" }
        )));
    }
    let buffer = match d.memory {
        TensorMemory::Shm => section(&d, memory, identity)?,
        TensorMemory::Gpu => texture(&d, memory, fence)?,
        other => {
            return Err(bad(format!(
                "{other} memory does not go by handle (shared memory and GPU images do)"
            )))
        }
    };
    d.tensor(buffer)
}

fn section(d: &Described<'_>, handle: OwnedHandle, identity: BufferIdentity) -> Result<Buffer> {
    let mapping = SectionMapping::import(handle, d.buffer_len, identity)?;
    Buffer::new(Storage::Section(mapping))
}

/// A texture of this adapter that is the blob's image, once its completion is reached (waited
/// for on the CPU, at most `GPU_WAIT`: a peer that never signals is a timeout, never a hung
/// queue).
fn texture(d: &Described<'_>, handle: OwnedHandle, fence: Option<OwnedHandle>) -> Result<Buffer> {
    let device = crate::gpu::device()?;
    if d.header.gpu.device_uuid != luid_bytes(device.luid()) {
        return Err(bad(format!(
            "the texture lives on another adapter (this device is {})",
            device.adapter_label()
        )));
    }
    let image = d
        .header
        .image_info()?
        .ok_or_else(|| bad("a texture by handle must describe its image"))?;
    let req = TextureRequest {
        format: image.format,
        width: image.width,
        height: image.height,
        dtype: d.dtype,
        batch: 1,
    };
    let mem = GpuMemory::open_shared(handle.as_handle(), &req)?;
    if let Some(fence) = &fence {
        device
            .wait_for_peer(fence.as_handle(), d.header.completion_value, GPU_WAIT)
            .map_err(|e| bad(format!("completion: {e}")))?;
    }
    Buffer::new(Storage::Gpu(mem))
}

#[cfg(test)]
#[allow(unsafe_code)] // the tests make handles of their own to forge imports with
mod tests {
    use super::*;
    use crate::gpu::testing::device_or_skip;
    use crate::os::handles::held as handles;
    use crate::ImageSpec;
    use crate::{CpuAccess, PixelFormat};
    use std::os::windows::io::FromRawHandle;
    use windows::Win32::System::Threading::CreateEventW;

    /// A handle that is no texture: a new event.
    fn event() -> OwnedHandle {
        // SAFETY: an unnamed event, owned at once.
        let e = unsafe { CreateEventW(None, true, false, None) }.unwrap();
        // SAFETY: the handle just made, owned from here.
        unsafe { OwnedHandle::from_raw_handle(e.0) }
    }

    /// The blob a GPU image would travel as from adapter `luid`, naming a fence or not.
    fn texture_blob(t: &Tensor<u8>, luid: (i32, u32), completion: Option<u64>) -> Vec<u8> {
        let mut out = Outgoing::reference(t);
        out.gpu = GpuReference {
            device_uuid: luid_bytes(luid),
            allocation_size: t.buffer_len() as u64,
            ..GpuReference::default()
        };
        out.completion = completion;
        out.fd_count = 1 + usize::from(completion.is_some());
        out.write(t, None).unwrap()
    }

    /// A small GPU image on the process device.
    fn gpu_image() -> Tensor<u8> {
        let (format, access) = (PixelFormat::Rgba, CpuAccess::ReadWrite);
        Tensor::<u8>::image(
            &ImageSpec::new(format, 16, 8),
            Some(TensorMemory::Gpu),
            access,
        )
        .unwrap()
    }

    fn no_identity() -> BufferIdentity {
        BufferIdentity::Section { pid: 0, serial: 0 }
    }

    #[test]
    fn a_texture_of_another_adapter_or_a_handle_that_is_no_texture_is_refused_and_closed() {
        let Some(d) = device_or_skip(
            "a_texture_of_another_adapter_or_a_handle_that_is_no_texture_is_refused_and_closed",
        ) else {
            return;
        };
        let t = gpu_image();
        let (high, low) = d.luid();
        let before = handles();
        let elsewhere = texture_blob(&t, (high, low ^ 1), None);
        let err = import(&elsewhere, event(), None, no_identity()).unwrap_err();
        assert!(err.to_string().contains("another adapter"), "{err}");
        let here = texture_blob(&t, (high, low), None);
        let err = import(&here, event(), None, no_identity()).unwrap_err();
        assert!(err.to_string().contains("shared"), "{err}");
        assert_eq!(handles(), before, "a refused handle stayed open");
    }

    #[test]
    fn a_blob_and_the_handles_beside_it_must_agree() {
        let Some(d) = device_or_skip("a_blob_and_the_handles_beside_it_must_agree") else {
            return;
        };
        let t = gpu_image();
        let fenced = texture_blob(&t, d.luid(), Some(1));
        let err = import(&fenced, event(), None, no_identity()).unwrap_err();
        assert!(
            err.to_string().contains("2 handle(s) named, 1 came"),
            "{err}"
        );
        let shm = TensorDyn::from(Tensor::<u8>::new(&[64], Some(TensorMemory::Shm)).unwrap());
        let blob = export(&shm).unwrap().blob;
        let err = import(&blob, event(), Some(event()), no_identity()).unwrap_err();
        assert!(
            err.to_string().contains("1 handle(s) named, 2 came"),
            "{err}"
        );
    }

    #[test]
    fn a_luid_is_carried_low_part_first_and_tells_adapters_apart() {
        let b = luid_bytes((-2, 0x1234_5678));
        assert_eq!(&b[..8], &[0x78, 0x56, 0x34, 0x12, 0xfe, 0xff, 0xff, 0xff]);
        assert!(b[8..].iter().all(|&x| x == 0));
        assert_ne!(luid_bytes((0, 1)), luid_bytes((1, 0)));
    }
}
