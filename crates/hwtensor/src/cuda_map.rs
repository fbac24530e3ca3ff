//! CUDA maps, the tensor's side (the driver's is `cuda/`): a tensor's bytes as a CUDA device
//! address, direction-typed like CPU maps, ordered on a caller's stream by the process timeline.
//!
//! A map queues on the stream a wait for the GPU work it must follow (the tensor's last write;
//! for a write map its last read too) and, when it ends, the signal of a new timeline value,
//! which the buffer records: Vulkan work, CPU maps and other processes then order behind what
//! CUDA queued meanwhile. A read map that is dropped (or ended by [`CudaMap::end`])
//! records a CUDA event instead: later writes follow that event, and no signal is queued (on
//! NVIDIA a consumer's signal per frame stalled its producer's CUDA work by 150-265 us; see
//! `cuda/event.rs`). Nothing waits on the CPU.

use std::marker::PhantomData;

use crate::access::{MapDirection, ReadOnly, ReadWrite, WriteOnly};
use crate::buffer::AccessGuard;
use crate::cuda::{device, BufferImport, CudaDevice, CudaStream, ReadMark};
use crate::{Direction, Element, Error, Result, Tensor};

/// A tensor mapped for CUDA on one stream: the device address of its first element, its shape
/// and byte strides. Ends with [`CudaMap::finish`], which signals and returns a timeline value,
/// or with [`CudaMap::end`] or when dropped: a write map then signals, a read map records a
/// CUDA event, which costs other processes' CUDA work nothing.
pub struct CudaMap<'a, T: Element, D: MapDirection> {
    tensor: &'a Tensor<T>,
    import: &'a BufferImport,
    stream: CudaStream,
    ptr: u64,
    /// The timeline value the stream was made to wait for when the map began.
    waited: u64,
    finished: bool,
    _hold: AccessGuard<'a>,
    _direction: PhantomData<D>,
}

impl<T: Element, D: MapDirection> std::fmt::Debug for CudaMap<'_, T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMap")
            .field("ptr", &self.ptr)
            .field("shape", &self.tensor.shape())
            .field("direction", &D::DIRECTION)
            .finish()
    }
}

impl<T: Element, D: MapDirection> CudaMap<'_, T, D> {
    /// The device address (`CUdeviceptr`) of the tensor's first element.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }
    /// The tensor's strides in bytes.
    pub fn strides(&self) -> &[usize] {
        self.tensor.strides()
    }
    /// The stream the map's work is ordered on.
    pub fn stream(&self) -> CudaStream {
        self.stream
    }

    /// Ends the map: queues on the stream the signal of a new timeline value, which the tensor
    /// records as its last write (or read), and returns that value.
    pub fn finish(mut self) -> Result<u64> {
        self.signal()
    }

    /// Ends the map as dropping it does, with its error: a write map signals (as
    /// [`Self::finish`]); a read map records a CUDA event on the stream instead, which later
    /// writes of the tensor (Vulkan, CPU, CUDA, a channel's hand-back of the frame) follow and
    /// which costs other processes' CUDA work nothing. Use `finish` where a read's timeline
    /// value is wanted (to wait for it, or to hand it to Vulkan work).
    pub fn end(mut self) -> Result<()> {
        self.end_as_dropped()
    }

    fn end_as_dropped(&mut self) -> Result<()> {
        match D::DIRECTION {
            Direction::Read => {
                self.finished = true;
                mark_read(self.import, self.stream)
            }
            _ => self.signal().map(|_| ()),
        }
    }

    fn signal(&mut self) -> Result<u64> {
        self.finished = true;
        let device = device()?;
        let _current = device.enter()?;
        let value = device.signal_from_stream(self.stream.cast(), self.waited)?;
        self.import.used_until(value);
        self.tensor
            .buffer
            .record_device_use(value, D::DIRECTION != Direction::Read);
        Ok(value)
    }
}

impl<T: Element, D: MapDirection> Drop for CudaMap<'_, T, D> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Err(e) = self.end_as_dropped() {
            log::error!("hwtensor: ending a CUDA map failed: {e}");
        }
    }
}

/// Records on `stream` the end of a CUDA read of `import`'s buffer (a [`ReadMark`]).
fn mark_read(import: &BufferImport, stream: CudaStream) -> Result<()> {
    let device = device()?;
    let _current = device.enter()?;
    import.read_until(ReadMark::record(device, stream.cast())?);
    Ok(())
}

impl<T: Element> Tensor<T> {
    /// Maps the tensor for CUDA kernels that read it, on `stream` (a raw `CUstream`; null for
    /// the default stream). CUDA, GPU, heap (a page or more) and shm tensors can be mapped;
    /// the first map of a buffer imports it into CUDA, later ones reuse that.
    pub fn cuda_map_read(&self, stream: CudaStream) -> Result<CudaMap<'_, T, ReadOnly>> {
        self.cuda_map(stream)
    }

    /// Maps the tensor for CUDA kernels that write it, on `stream` (see [`Self::cuda_map_read`]).
    pub fn cuda_map_write(&self, stream: CudaStream) -> Result<CudaMap<'_, T, WriteOnly>> {
        self.cuda_map(stream)
    }

    /// Maps the tensor for CUDA kernels that read and write it, on `stream`.
    pub fn cuda_map_read_write(&self, stream: CudaStream) -> Result<CudaMap<'_, T, ReadWrite>> {
        self.cuda_map(stream)
    }

    /// The timeline value CUDA work on the buffer must follow (for a write, its last read
    /// too); a write to a read-only import is refused.
    fn cuda_follows(&self, import: &BufferImport, write: bool) -> Result<u64> {
        if write && !import.writable() {
            return Err(read_only_import());
        }
        Ok(self.buffer.device_after(write).max(import.last_use()))
    }

    /// See [`TensorDyn::cuda_ready`].
    fn cuda_ready(&self, direction: Direction, stream: CudaStream) -> Result<u64> {
        let write = direction != Direction::Read;
        let device = device()?;
        let _current = device.enter()?;
        let _hold = self.buffer.hold_for_cuda(direction)?;
        let import = self.buffer.cuda_import()?;
        let after = self.cuda_follows(import, write)?;
        follow(device, import, stream, after, write)?;
        Ok(import.device_ptr() + self.offset as u64)
    }

    fn cuda_map<D: MapDirection>(&self, stream: CudaStream) -> Result<CudaMap<'_, T, D>> {
        let write = D::DIRECTION != Direction::Read;
        let device = device()?;
        let _current = device.enter()?;
        let hold = self.buffer.hold_for_cuda(D::DIRECTION)?;
        let import = self.buffer.cuda_import()?;
        let after = self.cuda_follows(import, write)?;
        follow(device, import, stream, after, write)?;
        Ok(CudaMap {
            tensor: self,
            import,
            stream,
            ptr: import.device_ptr() + self.offset as u64,
            waited: after,
            finished: false,
            _hold: hold,
            _direction: PhantomData,
        })
    }
}

impl crate::TensorDyn {
    /// Orders CUDA work on `stream` against the process timeline in one step, for a consumer
    /// that keeps a tensor's device address beyond a map (DLPack): the stream waits for the
    /// tensor's last device write (and, for a write, its last read); then a new timeline
    /// value is signalled from the stream and recorded as the tensor's last use. Returns the
    /// device address of the first element and that value.
    ///
    /// Call it again after queuing work on the stream (with [`Direction::Write`] or
    /// `ReadWrite` after writes) so Vulkan work, CPU maps and other processes order behind it.
    /// The address stays valid while the buffer lives: imports are cached per buffer.
    pub fn cuda_order(&self, direction: Direction, stream: CudaStream) -> Result<(u64, u64)> {
        use crate::TensorDyn;
        each_tensor!(self, t => match direction {
            Direction::Read => t.cuda_map_read(stream).and_then(pointer_and_value),
            Direction::Write => t.cuda_map_write(stream).and_then(pointer_and_value),
            Direction::ReadWrite => t.cuda_map_read_write(stream).and_then(pointer_and_value),
        })
    }
}

/// Makes `stream` wait GPU-side for timeline value `after`, unless it has completed, and for
/// a `write` for the CUDA reads of the buffer still pending (their events): a frame loop's
/// maps then queue no external-semaphore wait in the steady state. A consumer process whose
/// CUDA map of each frame queued a semaphore wait and, at its end, a signal stalled CUDA work
/// in both processes of a channel by ~145 us a frame on the H100 (hwtensor bench's CUDA row:
/// 315 us one way, against 10 us for a consumer that queued neither).
fn follow(
    device: &CudaDevice,
    import: &BufferImport,
    stream: CudaStream,
    after: u64,
    write: bool,
) -> Result<()> {
    if write {
        import.order_reads_before(stream.cast())?;
    }
    if after > device.gpu().completed_value()? {
        device.wait_on_stream(stream.cast(), after)?;
    }
    Ok(())
}

fn read_only_import() -> Error {
    Error::InvalidOperation(
        "this buffer is mapped read-only (a foreign fd), so CUDA cannot write it".into(),
    )
}

impl crate::TensorDyn {
    /// The device address of the first element, `stream` made to wait GPU-side for what work
    /// on it must follow: the tensor's last device write (for a write, its last read too). No
    /// wait is queued when that has completed, and nothing is signalled: for a consumer that
    /// keeps the address (DLPack, the CUDA Array Interface) and reports its own work with
    /// [`Self::cuda_order`] once it has queued it. Half the driver calls of `cuda_order`, and
    /// none at all for a frame whose write is done (a channel's consumer receives it so).
    pub fn cuda_ready(&self, direction: Direction, stream: CudaStream) -> Result<u64> {
        use crate::TensorDyn;
        each_tensor!(self, t => t.cuda_ready(direction, stream))
    }
}

impl<T: Element> Tensor<T> {
    /// See [`TensorDyn::cuda_read_done`].
    fn cuda_read_done(&self, stream: CudaStream) -> Result<()> {
        let _hold = self.buffer.hold_for_cuda(Direction::Read)?;
        mark_read(self.buffer.cuda_import()?, stream)
    }
}

impl crate::TensorDyn {
    /// Says that the work queued on `stream` so far reads the tensor (through an address from
    /// [`Self::cuda_ready`], DLPack or the CUDA Array Interface): records a CUDA event on the
    /// stream, which later writes (Vulkan, CPU, CUDA, a channel frame's hand-back) follow.
    /// Unlike [`Self::cuda_order`] it signals no timeline value: on NVIDIA a signal per frame
    /// stalls CUDA work in the other processes on the GPU (150-265 us a frame), an event does not.
    pub fn cuda_read_done(&self, stream: CudaStream) -> Result<()> {
        use crate::TensorDyn;
        each_tensor!(self, t => t.cuda_read_done(stream))
    }
}

fn pointer_and_value<T: Element, D: MapDirection>(map: CudaMap<'_, T, D>) -> Result<(u64, u64)> {
    let ptr = map.device_ptr();
    Ok((ptr, map.finish()?))
}
