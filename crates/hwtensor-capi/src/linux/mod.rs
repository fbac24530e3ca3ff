//! The Linux side of the C ABI: Vulkan handles, fds, hand-off and CUDA.

mod cuda;
mod fd;
mod gpu;
mod handoff;
mod stream;

pub use cuda::*;
pub use fd::*;
pub use gpu::*;
pub use handoff::*;
pub use stream::*;
