//! CPU maps: direction-typed guards over the buffer's persistent mapping.
//!
//! A map is a pointer into the mapping made when the buffer was, plus a claim that keeps Rust's
//! aliasing rules across views and, on a DMA-BUF, the cache-sync bracket. Read maps deref to
//! `&[T]` only; there is no way to get `&mut` from one:
//!
//! ```compile_fail
//! use hwtensor::{Tensor, TensorMemory};
//! let t = Tensor::<u8>::new(&[4], Some(TensorMemory::Mem)).unwrap();
//! let mut m = t.map_read().unwrap();
//! m[0] = 1; // error: a read map gives no mutable access
//! ```

// Maps hand out slices and ndarray views over raw mapped memory.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use crate::access::{MapDirection, ReadOnly, ReadWrite, Writable, WriteOnly};
use crate::buffer::{AccessGuard, Footprint};
use crate::geometry::{contiguous_tail, for_each_run};
use crate::{Direction, Element, Error, Result, Tensor};

/// A live CPU map of a tensor whose elements are contiguous, as a slice of them. See
/// [`MapRead`], [`MapWrite`], [`MapReadWrite`]; a tensor with gaps between its elements is
/// mapped as a [`StridedMap`].
pub struct TensorMap<'a, T: Element, D: MapDirection> {
    tensor: &'a Tensor<T>,
    ptr: *mut T,
    len: usize,
    _access: AccessGuard<'a>,
    _direction: PhantomData<D>,
}

/// A CPU map as bytes, of any element type and direction ([`Tensor::map_bytes`],
/// [`TensorDyn::map_bytes`](crate::TensorDyn::map_bytes)): a pointer and a length for a caller
/// outside Rust, who addresses it through the tensor's byte strides.
pub struct ByteMap<'a> {
    ptr: *mut u8,
    len: usize,
    direction: Direction,
    _access: AccessGuard<'a>,
}

impl std::fmt::Debug for ByteMap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteMap")
            .field("len", &self.len)
            .field("direction", &self.direction)
            .finish()
    }
}

impl ByteMap<'_> {
    /// The first mapped byte. Write through it only when [`Self::direction`] allows writing.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// The mapped bytes, from the tensor's first element to its last (row padding included).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether nothing is mapped (an empty tensor).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The direction the map was made for.
    pub fn direction(&self) -> Direction {
        self.direction
    }
    /// The mapped bytes, for a map made to read (`None` for a write-only one, whose staged
    /// bytes need not hold the tensor's values).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        if self.direction == Direction::Write {
            return None;
        }
        if self.len == 0 {
            return Some(&[]);
        }
        // SAFETY: `ptr` is the start of `len` mapped bytes, readable in this direction, and the
        // claim held by `_access` keeps them mapped and unwritten by others for `&self`'s life.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }
    /// The mapped bytes to write, for a map made to write (`None` for a read-only one).
    pub fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        if self.direction == Direction::Read {
            return None;
        }
        if self.len == 0 {
            return Some(&mut []);
        }
        // SAFETY: `ptr` is the start of `len` mapped bytes, writable in this direction, and the
        // claim held by `_access` excludes every other access to them for `&mut self`'s life.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }
    /// Whether ending the map does more than give back its claim: a staged GPU or CUDA map's
    /// write-back, a DMA-BUF's sync. Ending a map that is not bracketed is an atomic operation
    /// (for a part, a short list update under a lock) and runs no driver code.
    #[inline]
    pub fn is_bracketed(&self) -> bool {
        self._access.is_bracketed()
    }
}

/// Waits, bounded, for the sync_file a tensor's bytes are complete at: a producer that never
/// finishes costs a map [`GPU_WAIT`](crate::gpu::GPU_WAIT), then an error.
#[cold]
#[cfg(target_os = "linux")]
fn wait_for_acquire(fence: &crate::AcquireFence) -> Result<()> {
    fence.wait(crate::gpu::GPU_WAIT)
}

/// Windows has no sync_files (the type has no values).
#[cfg(not(target_os = "linux"))]
fn wait_for_acquire(fence: &crate::AcquireFence) -> Result<()> {
    match *fence {}
}

/// What a map needs of a tensor, its element type set aside: one body of code claims every
/// map (a map of a `TensorDyn` dispatched to the typed code was 40% slower than a typed map).
#[derive(Clone, Copy)]
pub(crate) struct MapSite<'a> {
    buffer: &'a crate::buffer::Buffer,
    /// The tensor's shape and byte strides: the footprint a map of a part claims.
    shape: &'a [usize],
    strides: &'a [usize],
    elem: usize,
    offset: usize,
    /// Bytes from the first element to the end of the last.
    extent: usize,
    empty: bool,
    access: crate::CpuAccess,
    /// The element alignment: an empty tensor's pointer (it maps nothing).
    align: usize,
    /// A sync_file the bytes are complete at.
    acquire: Option<&'a crate::AcquireFence>,
}

impl<'a> MapSite<'a> {
    /// Claims the buffer for a CPU access in `direction`: the first element's address, the
    /// mapped extent in bytes, and the claim. Inlined, so a constant direction folds the
    /// branches on it (the typed maps pass one; `byte_map` makes one per arm).
    #[inline(always)]
    fn claim(self, direction: Direction) -> Result<(*mut u8, usize, AccessGuard<'a>)> {
        if let Some(fence) = self.acquire {
            wait_for_acquire(fence)?;
        }
        if !self.access.allows(direction) {
            return Err(Error::AccessDenied {
                requested: match direction {
                    Direction::Read => "read",
                    Direction::Write => "write",
                    Direction::ReadWrite => "read-write",
                },
                declared: self.access,
            });
        }
        let footprint = || {
            let (shape, strides) = (self.shape, self.strides);
            Footprint::of(shape, strides, self.elem, self.offset, self.extent)
        };
        let access = self
            .buffer
            .begin_access_at(direction, self.offset, self.extent, footprint)?;
        let ptr = if self.empty {
            // An empty view at the far edge of an image may start past the buffer's end: it
            // maps nothing, so it gets no pointer into the buffer at all (an aligned dangling
            // one, as for an empty slice).
            std::ptr::null_mut::<u8>().wrapping_add(self.align)
        } else {
            // SAFETY: `offset + extent` of a non-empty tensor lies within the buffer (checked
            // when it or the view it came from was made): the pointer stays inside.
            unsafe { self.buffer.ptr().add(self.offset) }
        };
        Ok((ptr, self.extent, access))
    }

    /// A byte map in `direction`: one arm per direction, each claiming with a constant (a
    /// caller outside Rust passes the direction at run time, and the branches on it were a
    /// third of a map's cost).
    #[inline(always)]
    pub(crate) fn byte_map(self, direction: Direction) -> Result<ByteMap<'a>> {
        match direction {
            Direction::Read => self.byte_map_in(Direction::Read),
            Direction::Write => self.byte_map_in(Direction::Write),
            Direction::ReadWrite => self.byte_map_in(Direction::ReadWrite),
        }
    }

    #[inline(always)] // see `byte_map`
    fn byte_map_in(self, direction: Direction) -> Result<ByteMap<'a>> {
        let (ptr, len, access) = self.claim(direction)?;
        Ok(ByteMap {
            ptr,
            len,
            direction,
            _access: access,
        })
    }
}

/// A read map: `&[T]` only.
pub type MapRead<'a, T> = TensorMap<'a, T, ReadOnly>;
/// A write map.
pub type MapWrite<'a, T> = TensorMap<'a, T, WriteOnly>;
/// A read-write map.
pub type MapReadWrite<'a, T> = TensorMap<'a, T, ReadWrite>;

/// A read map of a tensor of any layout: rows and ndarray views, no slice.
pub type StridedRead<'a, T> = StridedMap<'a, T, ReadOnly>;
/// A write map of a tensor of any layout.
pub type StridedWrite<'a, T> = StridedMap<'a, T, WriteOnly>;
/// A read-write map of a tensor of any layout.
pub type StridedReadWrite<'a, T> = StridedMap<'a, T, ReadWrite>;

impl<T: Element> Tensor<T> {
    /// Maps the tensor for reading, as a slice of its elements. The elements must be
    /// contiguous ([`Error::NotContiguous`] otherwise: a view of part of the rows, an image
    /// with padded rows); [`Tensor::map_strided_read`] maps any tensor.
    #[inline(always)]
    pub fn map_read(&self) -> Result<MapRead<'_, T>> {
        self.check_contiguous()?;
        self.map_as()
    }

    /// Maps the tensor for writing, as a slice (contiguous tensors only, as for
    /// [`Tensor::map_read`]).
    #[inline(always)]
    pub fn map_write(&self) -> Result<MapWrite<'_, T>> {
        self.check_contiguous()?;
        self.map_as()
    }

    /// Maps the tensor for reading and writing, as a slice (contiguous tensors only, as for
    /// [`Tensor::map_read`]).
    #[inline(always)]
    pub fn map(&self) -> Result<MapReadWrite<'_, T>> {
        self.check_contiguous()?;
        self.map_as()
    }

    /// Maps a tensor of any layout for reading: its rows (each maximal contiguous run of
    /// elements) and, with the `ndarray` feature, an ndarray view. Never a slice, which for a
    /// view or a padded image would reach bytes that are not its elements.
    pub fn map_strided_read(&self) -> Result<StridedRead<'_, T>> {
        self.map_as().map(StridedMap)
    }

    /// Maps a tensor of any layout for writing (see [`Tensor::map_strided_read`]).
    pub fn map_strided_write(&self) -> Result<StridedWrite<'_, T>> {
        self.map_as().map(StridedMap)
    }

    /// Maps a tensor of any layout for reading and writing (see [`Tensor::map_strided_read`]).
    pub fn map_strided(&self) -> Result<StridedReadWrite<'_, T>> {
        self.map_as().map(StridedMap)
    }

    /// Refuses a slice map of a tensor whose elements have gaps between them. On every slice
    /// map's path, so a loop over the dimensions with no allocation.
    #[inline(always)]
    fn check_contiguous(&self) -> Result<()> {
        let (_, outside) = contiguous_tail(&self.shape, &self.strides, Self::elem());
        // A tensor with no elements has nothing between them.
        if outside == 0 || self.shape.contains(&0) {
            return Ok(());
        }
        Err(Error::NotContiguous {
            shape: self.shape.clone(),
            strides: self.strides.clone(),
        })
    }

    /// A map of the span from the first element to the last, whatever lies between: for a
    /// whole buffer's bytes (an inline blob of a padded image carries its padding).
    pub(crate) fn map_span_read(&self) -> Result<MapRead<'_, T>> {
        self.map_as()
    }

    /// [`Self::map_span_read`] for writing (an image composed or copied plane by plane).
    pub(crate) fn map_span_write(&self) -> Result<MapWrite<'_, T>> {
        self.map_as()
    }

    #[inline(always)] // the typed maps' hot path, as `byte_map` is the byte maps'
    fn map_as<D: MapDirection>(&self) -> Result<TensorMap<'_, T, D>> {
        let (ptr, bytes, access) = self.begin_map(D::DIRECTION)?;
        Ok(TensorMap {
            tensor: self,
            ptr: ptr.cast::<T>(),
            len: bytes / Self::elem(),
            _access: access,
            _direction: PhantomData,
        })
    }

    /// Claims the buffer for a CPU access in `direction`: the first element's address, the
    /// mapped extent in bytes, and the claim.
    #[inline(always)]
    fn begin_map(&self, direction: Direction) -> Result<(*mut u8, usize, AccessGuard<'_>)> {
        self.map_site()
            .claim(direction)
            .map_err(|e| self.why_not_mapped(e))
    }

    /// A refused map's error, naming the image's layout when that is why: an image of a
    /// non-linear DRM modifier declares no CPU access (see [`Tensor::with_drm_modifier`]), so
    /// its refusal costs the mapping path nothing and is explained only here, once it failed.
    #[cold]
    pub(crate) fn why_not_mapped(&self, e: Error) -> Error {
        match (&e, self.image) {
            (Error::AccessDenied { .. }, Some(info)) if !info.modifier.is_linear() => {
                info.modifier.refusal("a CPU map")
            }
            _ => e,
        }
    }

    /// What a map needs of this tensor, its element type set aside.
    #[inline(always)]
    pub(crate) fn map_site(&self) -> MapSite<'_> {
        let extent = self.byte_extent();
        MapSite {
            buffer: &self.buffer,
            shape: &self.shape,
            strides: &self.strides,
            elem: Self::elem(),
            offset: self.offset,
            extent,
            // Only a tensor with no elements has no extent (an element is at least a byte).
            empty: extent == 0,
            access: self.access,
            align: std::mem::align_of::<T>(),
            acquire: self.acquire.as_ref(),
        }
    }

    /// Whether dropping this tensor would free a buffer that a CPU map still claims. Rust's
    /// lifetimes rule it out; a caller outside Rust that ends maps by hand (the C ABI) asks
    /// before it lets go of a tensor, and keeps it instead, so a late end of the map touches
    /// live memory.
    pub fn drop_would_free_a_mapped_buffer(&self) -> bool {
        self.buffer.is_last_owner_while_mapped()
    }

    /// Maps the tensor as bytes in `direction`, the element type set aside: what a C or Python
    /// caller gets. The same claims and rules as the typed maps.
    pub fn map_bytes(&self, direction: Direction) -> Result<ByteMap<'_>> {
        self.map_site()
            .byte_map(direction)
            .map_err(|e| self.why_not_mapped(e))
    }

    /// Copies the elements into `dst` in logical order without row padding: the tight layout an
    /// NPU or a file wants. `dst` must hold exactly [`len`](Tensor::len) elements.
    pub fn copy_to_flat(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len() {
            return Err(Error::Length(format!(
                "copy_to_flat needs {} elements, the slice has {}",
                self.len(),
                dst.len()
            )));
        }
        let map = self.map_strided_read()?;
        let mut at = 0;
        for row in map.rows() {
            dst[at..at + row.len()].copy_from_slice(row);
            at += row.len();
        }
        Ok(())
    }

    /// The elements in logical order without padding, as a new vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len()];
        self.copy_to_flat(&mut v)?;
        Ok(v)
    }

    /// Fills the tensor from `src`, given in logical order without padding.
    pub fn copy_from_flat(&self, src: &[T]) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::Length(format!(
                "copy_from_flat needs {} elements, the slice has {}",
                self.len(),
                src.len()
            )));
        }
        let mut map = self.map_strided_write()?;
        let mut at = 0;
        for row in map.rows_mut() {
            row.copy_from_slice(&src[at..at + row.len()]);
            at += row.len();
        }
        Ok(())
    }
}

impl<T: Element, D: MapDirection> TensorMap<'_, T, D> {
    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }

    /// The tensor's byte strides.
    pub fn strides(&self) -> &[usize] {
        self.tensor.strides()
    }

    /// The mapped elements (see the type's note on padding).
    pub fn as_slice(&self) -> &[T] {
        self
    }

    /// The mapped bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the same memory as the element slice, viewed as bytes: u8 has alignment 1 and
        // every element type is plain data without padding.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.cast::<u8>(),
                std::mem::size_of_val(self.as_slice()),
            )
        }
    }

    #[cfg(feature = "ndarray")]
    fn nd_shape(&self) -> ndarray::StrideShape<ndarray::IxDyn> {
        use ndarray::ShapeBuilder;
        let elem = T::DTYPE.size();
        let strides: Vec<usize> = self.tensor.strides().iter().map(|s| s / elem).collect();
        ndarray::IxDyn(self.tensor.shape()).strides(ndarray::IxDyn(&strides))
    }

    /// The tensor as an ndarray view with its real strides.
    #[cfg(feature = "ndarray")]
    pub fn view(&self) -> ndarray::ArrayViewD<'_, T> {
        // SAFETY: every index of shape x strides lands inside the mapped extent (that is how
        // the extent is computed), the pointer is aligned for T (offsets and strides are whole
        // elements over an aligned base), and `&self` keeps the map alive for the view's life.
        unsafe { ndarray::ArrayViewD::from_shape_ptr(self.nd_shape(), self.ptr.cast_const()) }
    }
}

impl<T: Element, D: Writable> TensorMap<'_, T, D> {
    /// The mapped elements, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        self
    }

    /// The mapped bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let len = std::mem::size_of_val(self.as_slice());
        // SAFETY: as in `as_bytes`; and any byte pattern is a valid element, so writes through
        // the byte view cannot make an invalid T.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), len) }
    }

    /// The tensor as a mutable ndarray view with its real strides.
    #[cfg(feature = "ndarray")]
    pub fn view_mut(&mut self) -> ndarray::ArrayViewMutD<'_, T> {
        // SAFETY: as in `view`; the strides are all positive, so no two indices alias, and
        // `&mut self` makes this the only access through this map while the buffer's claim
        // excludes every other map of the buffer.
        unsafe { ndarray::ArrayViewMutD::from_shape_ptr(self.nd_shape(), self.ptr) }
    }
}

impl<T: Element, D: MapDirection> Deref for TensorMap<'_, T, D> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr..ptr+len` is inside the buffer's live mapping (held by the tensor the
        // map borrows), aligned for T, and every bit pattern is a valid T (Element is sealed to
        // plain numbers). The claim forbids a concurrent write map of this buffer in-process.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Element, D: Writable> DerefMut for TensorMap<'_, T, D> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for Deref; in addition the write claim is exclusive, so no other map of
        // this buffer exists in this process while this one lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Element, D: MapDirection> std::fmt::Debug for TensorMap<'_, T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMap")
            .field("shape", &self.shape())
            .field("len", &self.len)
            .finish()
    }
}

/// A live CPU map of a tensor of any layout ([`Tensor::map_strided`]): its elements by rows, by
/// index, or as an ndarray view, and nothing between them. There is no slice of a strided map:
///
/// ```compile_fail
/// use hwtensor::{Region, Tensor, TensorMemory};
/// let t = Tensor::<u8>::new(&[8, 8], Some(TensorMemory::Mem)).unwrap();
/// let view = t.view(Region::new(0, 0, 4, 4)).unwrap();
/// let mut m = view.map_strided().unwrap();
/// *m.get_mut(&[0, 0]).unwrap() = 1; // this much compiles
/// m[0] = 1; // error: a strided map is no slice (it would reach the rest of each row)
/// ```
pub struct StridedMap<'a, T: Element, D: MapDirection>(TensorMap<'a, T, D>);

impl<T: Element, D: MapDirection> StridedMap<'_, T, D> {
    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        self.0.shape()
    }

    /// The tensor's byte strides.
    pub fn strides(&self) -> &[usize] {
        self.0.strides()
    }

    /// The element offset (from the first) of each row, and its length in elements: every
    /// maximal run of contiguous elements, in logical order (one for a contiguous tensor).
    fn runs(&self) -> Vec<(usize, usize)> {
        let elem = T::DTYPE.size();
        let mut runs = Vec::new();
        for_each_run(self.shape(), self.strides(), elem, |offset, bytes| {
            runs.push((offset / elem, bytes / elem))
        });
        runs
    }

    /// The rows: each maximal run of contiguous elements, in logical order. A padded image's
    /// rows hold its pixels without the padding; a tight tensor is one row.
    pub fn rows(&self) -> impl Iterator<Item = &[T]> + '_ {
        let base = self.0.ptr.cast_const();
        // SAFETY: each run lies inside the mapped span (computed from the same shape and
        // strides), aligned for T, every bit pattern a valid T; the map's claim covers exactly
        // these runs (a sibling crop may be written between them, so no reference to the span
        // as a whole is ever made) and `&self` keeps it for the rows' life.
        self.runs()
            .into_iter()
            .map(move |(at, n)| unsafe { std::slice::from_raw_parts(base.add(at), n) })
    }

    /// The element at `index` (one coordinate per dimension), `None` outside the shape.
    pub fn get(&self, index: &[usize]) -> Option<&T> {
        let at = self.element_at(index)?;
        // SAFETY: an element of the tensor (index checked against the shape), so inside its
        // claimed runs; aligned, valid, and kept by `&self` as in `rows`.
        Some(unsafe { &*self.0.ptr.add(at) })
    }

    /// The span offset, in elements, of the element at `index`.
    fn element_at(&self, index: &[usize]) -> Option<usize> {
        if index.len() != self.shape().len() || index.iter().zip(self.shape()).any(|(i, d)| i >= d)
        {
            return None;
        }
        let bytes: usize = index.iter().zip(self.strides()).map(|(i, s)| i * s).sum();
        Some(bytes / T::DTYPE.size())
    }

    /// The tensor as an ndarray view with its real strides.
    #[cfg(feature = "ndarray")]
    pub fn view(&self) -> ndarray::ArrayViewD<'_, T> {
        self.0.view()
    }
}

impl<T: Element, D: Writable> StridedMap<'_, T, D> {
    /// The rows, mutably (see [`StridedMap::rows`]).
    pub fn rows_mut(&mut self) -> impl Iterator<Item = &mut [T]> + '_ {
        let runs = self.runs();
        let base = self.0.ptr;
        // SAFETY: as in `rows`; no two runs overlap (distinct indices of a tensor never share
        // an element: its strides come from a shape, a view or a reshape of one), and `&mut
        // self` is the only access through this map, whose write claim excludes every other
        // map of these bytes, for as long as the rows are borrowed.
        runs.into_iter()
            .map(move |(at, n)| unsafe { std::slice::from_raw_parts_mut(base.add(at), n) })
    }

    /// The element at `index`, mutably; `None` outside the shape.
    pub fn get_mut(&mut self, index: &[usize]) -> Option<&mut T> {
        let at = self.element_at(index)?;
        // SAFETY: as in `get`; the write claim and `&mut self` make it the only access.
        Some(unsafe { &mut *self.0.ptr.add(at) })
    }

    /// Sets every element to `value`, and nothing between them.
    pub fn fill(&mut self, value: T) {
        for row in self.rows_mut() {
            row.fill(value);
        }
    }

    /// The tensor as a mutable ndarray view with its real strides.
    #[cfg(feature = "ndarray")]
    pub fn view_mut(&mut self) -> ndarray::ArrayViewMutD<'_, T> {
        self.0.view_mut()
    }
}

impl<T: Element, D: MapDirection> std::fmt::Debug for StridedMap<'_, T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StridedMap")
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .finish()
    }
}
