//! The Linux-only backings on every other platform: uninhabited types with the methods
//! `Storage` calls on the real ones, so `Storage` and its matches name no platform (the pattern
//! of memmap2's `stub.rs`). No value of them can exist, so every method body is an empty match,
//! and the compiler proves the arms that hold them unreachable.

use std::marker::PhantomData;

use crate::gpu::GpuOrigin;
use crate::identity::BufferIdentity;
use crate::{Direction, Error, Result, TensorMemory};

/// No value: what makes every type here uninhabited.
#[derive(Debug)]
enum Never {}

/// Why an fd-backed kind cannot be allocated here: always, with what to use instead.
pub(crate) fn unavailable_reason(memory: TensorMemory) -> Option<String> {
    Some(format!(
        "{} memory is an fd-backed Linux kind; on this platform use shm (a section on \
         Windows), mem or gpu",
        memory.name()
    ))
}

/// Refuses to allocate an fd-backed kind (`Storage::allocate` has already said why).
pub(crate) fn allocate(memory: TensorMemory, _len: usize, _cpu_reads: bool) -> Result<FdMapping> {
    Err(Error::Unavailable {
        memory,
        reason: "not a backing of this platform".into(),
    })
}

/// A Linux-only mapping, of the kind `K` names: none on this platform.
#[derive(Debug)]
pub(crate) struct Absent<K>(Never, PhantomData<K>);

/// What `Absent` stands for: a memfd or DMA-BUF and its mapping...
#[derive(Debug)]
pub(crate) enum OneFd {}
/// ...or an image's planes in several fds, mapped as one.
#[derive(Debug)]
pub(crate) enum SeveralFds {}

pub(crate) type FdMapping = Absent<OneFd>;
pub(crate) type PlaneMapping = Absent<SeveralFds>;

impl<K> Absent<K> {
    pub(crate) fn ptr(&self) -> *mut u8 {
        match self.0 {}
    }
    pub(crate) fn len(&self) -> usize {
        match self.0 {}
    }
    pub(crate) fn memory(&self) -> TensorMemory {
        match self.0 {}
    }
    pub(crate) fn writable(&self) -> bool {
        match self.0 {}
    }
    pub(crate) fn identity(&self) -> Result<BufferIdentity> {
        match self.0 {}
    }
}

impl FdMapping {
    pub(crate) fn begin_cpu(&self, _: Direction) -> Result<Option<SyncBracket<'_>>> {
        match self.0 {}
    }
}

impl PlaneMapping {
    pub(crate) fn begin_cpu(&self, _: Direction) -> Result<Vec<SyncBracket<'_>>> {
        match self.0 {}
    }
}

/// A DMA-BUF's CPU-access bracket: none on this platform.
#[derive(Debug)]
pub(crate) struct SyncBracket<'a>(Never, PhantomData<&'a ()>);

/// CUDA, a Linux backing in this build.
pub(crate) mod cuda {
    use super::*;

    /// Why CUDA memory cannot be allocated here: always.
    pub(crate) fn unavailable_reason() -> Option<String> {
        Some("CUDA memory is a Linux backing in this build".into())
    }

    /// CUDA device memory: none on this platform.
    #[derive(Debug)]
    pub(crate) struct CudaMemory(Never);

    impl CudaMemory {
        /// Refuses (`Storage::allocate` has already said why).
        pub(crate) fn allocate(_len: usize) -> Result<CudaMemory> {
            Err(Error::Unavailable {
                memory: TensorMemory::Cuda,
                reason: "not a backing of this platform".into(),
            })
        }
        pub(crate) fn ptr(&self) -> *mut u8 {
            match self.0 {}
        }
        pub(crate) fn len(&self) -> usize {
            match self.0 {}
        }
        pub(crate) fn origin(&self) -> GpuOrigin {
            match self.0 {}
        }
        pub(crate) fn begin_cpu(&self, _write: bool) -> Result<CudaCpuAccess<'_>> {
            match self.0 {}
        }
    }

    /// A CPU access of CUDA memory: none on this platform.
    #[derive(Debug)]
    pub(crate) struct CudaCpuAccess<'a>(Never, PhantomData<&'a ()>);
}
