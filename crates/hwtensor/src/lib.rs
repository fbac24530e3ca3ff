//! hwtensor: zero-copy tensors over heap, shared-memory, DMA-BUF and GPU memory, with exact
//! image metadata, and one process-wide GPU device (Vulkan on Linux, D3D11 on Windows) with one
//! timeline fence shared by every copy of the library in the process.
//!
//! ```
//! use hwtensor::{CpuAccess, ImageSpec, PixelFormat, Region, Tensor, TensorMemory};
//!
//! // A 1080p RGBA frame in shared memory, written through a map and read through a view.
//! let spec = ImageSpec::new(PixelFormat::Rgba, 1920, 1080);
//! let frame = Tensor::<u8>::image(&spec, Some(TensorMemory::Shm), CpuAccess::ReadWrite)?;
//! frame.map_write()?.fill(7);
//! let crop = frame.view(Region::new(100, 50, 640, 480))?;
//! assert_eq!(crop.shape(), &[480, 640, 4]);
//! assert!(crop.to_vec()?.iter().all(|&b| b == 7));
//! # Ok::<(), hwtensor::Error>(())
//! ```

// On docs.rs (nightly rustdoc), every platform-only item is marked with its platform.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod macros;

mod access;
mod backing;
pub mod blob;
mod buffer;
mod color;
mod copy;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // the CUDA driver is called through raw handles
pub mod cuda;
/// What the buffers name of CUDA where there is none: uninhabited.
#[cfg(not(target_os = "linux"))]
#[path = "cuda/stub.rs"]
mod cuda;
#[cfg(target_os = "linux")]
mod cuda_map;
/// The Windows adapter choice is pure text handling: tested on every platform.
#[cfg(all(test, not(windows)))]
#[path = "gpu/d3d11/choice.rs"]
mod d3d11_choice;
mod dtype;
mod element;
mod error;
#[cfg(target_os = "linux")]
mod fd;
mod foreign;
mod format;
pub mod geometry;
pub mod gpu;
#[cfg(windows)]
mod handle;
#[cfg(any(target_os = "linux", windows))]
pub mod handoff;
mod identity;
mod image;
mod map;
mod memory;
mod modifier;
#[cfg(target_os = "linux")]
mod native;
mod os;
#[cfg(target_os = "linux")]
mod planes;
#[cfg(target_os = "linux")]
mod policy;
mod quantization;
mod region;
mod reshape;
#[cfg(any(target_os = "linux", windows))]
pub mod stream;
#[cfg(target_os = "linux")]
mod sync_file;
mod tensor;
mod tensor_dyn;
pub mod time;
mod view;

pub use access::{CpuAccess, Direction, MapDirection, ReadOnly, ReadWrite, Writable, WriteOnly};
pub use buffer::BufferLiveness;
pub use color::{ColorMatrix, ColorPrimaries, ColorRange, Colorimetry, TransferFunction};
#[cfg(target_os = "linux")]
pub use cuda_map::CudaMap;
pub use dtype::DType;
pub use element::Element;
pub use error::{Error, GpuErrorKind, Lang, Result};
pub use foreign::ForeignOwner;
pub use format::{fourcc, Layout, PixelFormat, Plane};
pub use identity::BufferIdentity;
pub use image::{ImageInfo, ImageSpec, IMAGE_PITCH_ALIGN};
pub use map::{
    ByteMap, MapRead, MapReadWrite, MapWrite, StridedMap, StridedRead, StridedReadWrite,
    StridedWrite, TensorMap,
};
pub use memory::{TensorMemory, FORCE_MEM_ENV};
pub use modifier::DrmModifier;
/// The ndarray crate the maps' `view()` and `view_mut()` speak, so a caller names its types
/// (`hwtensor::ndarray::ArrayViewD`) without pinning a second, possibly other, version.
#[cfg(feature = "ndarray")]
pub use ndarray;
#[cfg(target_os = "linux")]
pub use os::SyncFile;
#[cfg(target_os = "linux")]
pub use planes::PlaneFd;
#[cfg(target_os = "linux")]
pub use policy::ImportPolicy;
pub use quantization::{ChannelQuantization, Quantization, MAX_QUANT_CHANNELS};
pub use region::Region;

pub(crate) use os::AcquireFence;
pub use tensor::Tensor;
pub use tensor_dyn::TensorDyn;
pub use tensor_dyn::WrongDType;

pub use half::f16;
