//! EdgeFirst messages (edgefirst-schemas 4.x, CDR, encoded and parsed by the schema crate):
//! what EdgeFirst perception services exchange over Zenoh, so a pipeline can move to hwtensor
//! one end at a time.
//!
//! - **Publishing** ([`Encoding::EdgeFirst`](crate::Encoding::EdgeFirst)): an image goes as a
//!   `CameraFrame`, a plain tensor as a `TensorStamped` (the schema's message for a tensor on
//!   its own topic; a bare `Tensor` carries no stamp or sequence number). On one host a frame in
//!   shared memory or a DMA-BUF goes **by reference**: this process's pid and fd numbers, which
//!   stay open while the publisher holds the frame: the last
//!   [`keep_frames`](crate::PublisherOptions::keep_frames) frames published. A subscriber must
//!   take the fds within that window (a late one may find the number reused, and the import's
//!   checks refuse what is not a frame). Heap, GPU and CUDA frames, and every frame while a
//!   subscriber on another host is alive, go **inline** (`data`, read after the frame's
//!   completion). `fence_fd` is -1 (the frame is complete when it is published) unless a frame
//!   by reference carries a sync_file ([`Tensor::with_sync_file`](hwtensor::Tensor::with_sync_file)):
//!   then it is that fd's number, held open with the frame.
//! - **Subscribing**: a sample without hwtensor's frame record is read as an EdgeFirst
//!   `CameraFrame`, `TensorStamped` or bare `Tensor`. Planes by reference are copied out of the
//!   publisher with `pidfd_getfd` (which needs ptrace access to it: same user and
//!   `kernel.yama.ptrace_scope` 0, or `CAP_SYS_PTRACE`), then imported as any fd is; a
//!   `fence_fd` is taken the same way, checked to be a sync_file, and waited for on the CPU
//!   (bounded by [`GPU_WAIT`](hwtensor::gpu::GPU_WAIT)). Colorimetry, quantization and the DRM
//!   modifier are kept; a modifier of a vendor `drm_fourcc.h` does not list is refused.
//! - **Your own Zenoh code** (or a message from anywhere else) turns a message into a tensor
//!   with [`decode`], which applies the same checks.

mod codes;
pub(crate) mod decode;
mod encode;
mod fetch;

pub use decode::Decoded;
pub(crate) use encode::{encode, Stamp};

/// The tensor an EdgeFirst `CameraFrame`, `TensorStamped` or bare `Tensor` message describes:
/// planes by reference taken from the publisher and imported without a copy (after its
/// `fence_fd` signals), inline planes copied into heap memory. Every refusal names the field
/// that was wrong (`planes[1].handle: fd 9 is not open in process 4242`).
pub fn decode(message: &[u8]) -> crate::Result<Decoded> {
    decode::decode(message, hwtensor::gpu::GPU_WAIT).map_err(crate::Error::EdgeFirst)
}

/// The EdgeFirst message a sample carries, named in its Zenoh encoding
/// (`application/cdr;<schema>`), as EdgeFirst's own nodes name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Schema {
    CameraFrame,
    TensorStamped,
}

impl Schema {
    /// The ROS type name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Schema::CameraFrame => "edgefirst_msgs/msg/CameraFrame",
            Schema::TensorStamped => "edgefirst_msgs/msg/TensorStamped",
        }
    }

    /// The Zenoh encoding of a sample of this message, made once (a schema is a string Zenoh
    /// would otherwise allocate for every frame published).
    pub(crate) fn encoding(self) -> zenoh::bytes::Encoding {
        use std::sync::LazyLock;
        use zenoh::bytes::Encoding;
        fn cdr(s: Schema) -> Encoding {
            Encoding::APPLICATION_CDR.with_schema(s.name())
        }
        static CAMERA_FRAME: LazyLock<Encoding> = LazyLock::new(|| cdr(Schema::CameraFrame));
        static TENSOR_STAMPED: LazyLock<Encoding> = LazyLock::new(|| cdr(Schema::TensorStamped));
        match self {
            Schema::CameraFrame => CAMERA_FRAME.clone(),
            Schema::TensorStamped => TENSOR_STAMPED.clone(),
        }
    }
}

#[cfg(test)]
mod tests;

/// Held by every test here that opens fds: those that count this process's fds must not see
/// another test's come and go.
#[cfg(test)]
pub(crate) static FDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`FDS`] (whatever a failed test left it in).
#[cfg(test)]
pub(crate) fn fds_held() -> std::sync::MutexGuard<'static, ()> {
    FDS.lock().unwrap_or_else(|e| e.into_inner())
}
