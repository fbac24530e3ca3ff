//! The pooled channel from C (see `hwtensor::stream`): a producer lends a pool of tensors to
//! consumers once (on Unix sockets on Linux, named pipes on Windows: the platform folders
//! attach and connect); after that a frame is a buffer id and its metadata.

use std::sync::Mutex;
use std::time::Duration;

use hwtensor::stream::{Consumer, Frame, FrameMeta, Lending, Producer, Slot, Wait, PAYLOAD_BYTES};

use crate::status::{free_handle, guard, invalid, put, slice_in, HwtStatus, OrStatus};
use crate::tensor::{hand_out, tensor, HwtTensor};

/// The most buffers a pool may have.
const MAX_POOL: usize = 1024;

/// Bytes of a frame's user payload.
pub const HWT_FRAME_PAYLOAD_BYTES: usize = 32;
// The C struct's array is the channel's own payload, by construction.
const _: () = assert!(HWT_FRAME_PAYLOAD_BYTES == PAYLOAD_BYTES);

/// How a receive waits (`uint32_t` parameters named `wait`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwtWait {
    /// Spin on the ring, never sleeping.
    Spin = 1,
    /// Spin briefly, then sleep until a frame comes.
    Block = 2,
    /// As `BLOCK`, for at most the call's timeout.
    Timed = 3,
}

/// What travels with a frame besides its buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HwtFrameMeta {
    /// The producer's sequence number.
    pub seq: u64,
    /// The producer's timestamp in nanoseconds (`CLOCK_MONOTONIC` is shared by all processes).
    pub timestamp_ns: u64,
    /// Bytes of `payload` in use (at most `HWT_FRAME_PAYLOAD_BYTES`).
    pub payload_len: u32,
    /// A small user payload.
    pub payload: [u8; HWT_FRAME_PAYLOAD_BYTES],
}

/// The sending side of a channel (opaque). One thread at a time uses it.
pub struct HwtProducer(pub(crate) Mutex<Producer>);
/// The receiving side of a channel (opaque).
pub struct HwtConsumer(pub(crate) Mutex<Consumer>);
/// A received frame (opaque): `hwt_frame_release` hands its buffer back.
pub struct HwtFrame(Frame);

/// The producer behind `p`, locked; null refused.
///
/// # Safety
/// `p` must be null or a live producer.
pub(crate) unsafe fn producer<'a>(
    p: *mut HwtProducer,
) -> Result<std::sync::MutexGuard<'a, Producer>, HwtStatus> {
    // SAFETY: null refused; otherwise a live producer (the caller's contract).
    let p = unsafe { p.as_ref() }.ok_or_else(|| invalid("the producer is null"))?;
    locked(&p.0)
}

/// Connects a consumer on `link` (made by `link`, once `out` is known to be writable) within
/// `timeout_ns` and hands it out through `out`: both platforms' connect calls.
pub(crate) fn connect_into(
    out: *mut *mut HwtConsumer,
    timeout_ns: u64,
    link: impl FnOnce() -> Result<hwtensor::stream::Link, HwtStatus>,
) -> crate::status::Outcome {
    connect_into_with(out, timeout_ns, Lending::Read, link)
}

/// As [`connect_into`], asking the producer for `lending`.
pub(crate) fn connect_into_with(
    out: *mut *mut HwtConsumer,
    timeout_ns: u64,
    lending: Lending,
    link: impl FnOnce() -> Result<hwtensor::stream::Link, HwtStatus>,
) -> crate::status::Outcome {
    if out.is_null() {
        return Err(invalid("out is null"));
    }
    let timeout = Duration::from_nanos(timeout_ns);
    let consumer = Consumer::connect_with(link()?, timeout, lending).or_status()?;
    put(
        out,
        "out",
        Box::into_raw(Box::new(HwtConsumer(Mutex::new(consumer)))),
    )
}

pub(crate) fn locked<'a, T>(m: &'a Mutex<T>) -> Result<std::sync::MutexGuard<'a, T>, HwtStatus> {
    m.lock().map_err(|_| {
        crate::status::fail(
            HwtStatus::Failed,
            "an earlier call on this channel panicked",
        )
    })
}

/// A producer over the `n` tensors of `pool` (Linux: shm, DMA-BUF or GPU memory; Windows: shm;
/// each keeps its own reference, the caller's stay). Free it with `hwt_producer_free`.
///
/// # Safety
/// `pool` must hold `n` live handles; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_new(
    pool: *const *const HwtTensor,
    n: usize,
    out: *mut *mut HwtProducer,
) -> HwtStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { hwt_producer_new_with_room(pool, n, n, out) }
}

/// A producer over the `n` tensors of `pool` that may grow to `room` buffers with
/// `hwt_producer_add` after consumers attached (Linux; `room` at least `n`). Free it with
/// `hwt_producer_free`.
///
/// # Safety
/// `pool` must hold `n` live handles; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_new_with_room(
    pool: *const *const HwtTensor,
    n: usize,
    room: usize,
    out: *mut *mut HwtProducer,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let handles = unsafe { slice_in(pool, n, "the pool", MAX_POOL) }?;
        let tensors = handles
            .iter()
            .map(|&h| tensor(h, "a pool tensor").cloned())
            .collect::<Result<Vec<_>, _>>()?;
        let producer = Producer::with_room(tensors, room).or_status()?;
        put(
            out,
            "out",
            Box::into_raw(Box::new(HwtProducer(Mutex::new(producer)))),
        )
    })
}

/// Adds `t` to the pool (the producer keeps its own reference): every attached consumer
/// receives it now, later ones with the rest. `*out_slot` is its slot, which
/// `hwt_producer_acquire` never hands out: acquire it by name (`hwt_producer_acquire_slot`).
/// Refused past the room the producer was made with, and on Windows.
///
/// # Safety
/// `p` must be a live producer, `t` a live tensor; `out_slot` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_add(
    p: *mut HwtProducer,
    t: *const HwtTensor,
    out_slot: *mut u32,
) -> HwtStatus {
    guard(|| {
        // Checked before the add: the buffer must not reach consumers on a call that fails.
        if out_slot.is_null() {
            return Err(invalid("out_slot is null"));
        }
        let t = tensor(t, "the added tensor")?.clone();
        // SAFETY: the caller's contract.
        let slot = unsafe { producer(p) }?.add(t).or_status()?;
        put(out_slot, "out_slot", slot.index() as u32)
    })
}

/// Acquires `slot` (an added buffer) by name once no consumer holds it, waiting at most
/// `timeout_ns` (`HWT_STATUS_TIMEOUT`); then write it and `hwt_producer_send` it.
///
/// # Safety
/// `p` must be a live producer.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_acquire_slot(
    p: *mut HwtProducer,
    slot: u32,
    timeout_ns: u64,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        let slot = slot_of(&producer, slot)?;
        producer
            .acquire_slot(slot, Duration::from_nanos(timeout_ns))
            .or_status()
    })
}

/// A free buffer to write the next frame into, waiting at most `timeout_ns` while consumers
/// hold every buffer (`HWT_STATUS_TIMEOUT`): `*out_slot` is its index and `*out_tensor` a new
/// reference to it (release it when written).
///
/// # Safety
/// `p` must be a live producer; the out-pointers valid for one write each.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_acquire(
    p: *mut HwtProducer,
    timeout_ns: u64,
    out_slot: *mut u32,
    out_tensor: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        if out_slot.is_null() || out_tensor.is_null() {
            return Err(invalid("an out-pointer of hwt_producer_acquire is null"));
        }
        let slot = producer
            .acquire(Duration::from_nanos(timeout_ns))
            .or_status()?;
        let t = producer.tensor(slot).clone();
        hand_out(out_tensor, t)?;
        put(out_slot, "out_slot", slot.index() as u32)
    })
}

pub(crate) fn meta_of(m: &HwtFrameMeta) -> Result<FrameMeta, HwtStatus> {
    let len = usize::try_from(m.payload_len).unwrap_or(usize::MAX);
    let payload = m.payload.get(..len).ok_or_else(|| {
        invalid(format!(
            "payload_len {} is over {PAYLOAD_BYTES}",
            m.payload_len
        ))
    })?;
    FrameMeta::new(m.seq, m.timestamp_ns)
        .with_payload(payload)
        .or_status()
}

/// Sends the frame in `slot` (acquired and written) to every attached consumer with `meta`.
///
/// # Safety
/// `p` must be a live producer; `meta` valid for one read.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_send(
    p: *mut HwtProducer,
    slot: u32,
    meta: *const HwtFrameMeta,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        // SAFETY: null refused; otherwise a live meta (the contract).
        let meta = unsafe { meta.as_ref() }.ok_or_else(|| invalid("meta is null"))?;
        let meta = meta_of(meta)?;
        let slot = slot_of(&producer, slot)?;
        producer.send(slot, meta).or_status()
    })
}

/// Gives back a slot acquired and not sent.
///
/// # Safety
/// `p` must be a live producer.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_release_slot(p: *mut HwtProducer, slot: u32) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let mut producer = unsafe { producer(p) }?;
        let slot = slot_of(&producer, slot)?;
        producer.release(slot);
        Ok(())
    })
}

/// The `Slot` a C index names, refused out of the pool.
fn slot_of(producer: &Producer, index: u32) -> Result<Slot, HwtStatus> {
    producer
        .slot(index as usize)
        .ok_or_else(|| invalid(format!("slot {index} is not in the pool")))
}

/// Frees a producer: its consumers see it leave (their receive errs; frames they hold stay
/// valid). Null is ignored.
///
/// # Safety
/// `p` must be null or a producer from `hwt_producer_new`, freed once.
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_free(p: *mut HwtProducer) {
    // SAFETY: the caller's contract, as above.
    unsafe { free_handle(p) }
}

/// The next frame, waiting as `wait` says (`HWT_WAIT_TIMED`: at most `timeout_ns`, then
/// `HWT_STATUS_TIMEOUT`). A producer that left is `HWT_STATUS_PEER_GONE`; a frame naming a
/// buffer out of the pool or one still held is refused. Release the frame to hand it back.
///
/// # Safety
/// `c` must be a live consumer; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_recv(
    c: *mut HwtConsumer,
    wait: u32,
    timeout_ns: u64,
    out: *mut *mut HwtFrame,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise a live consumer (the contract).
        let c = unsafe { c.as_ref() }.ok_or_else(|| invalid("the consumer is null"))?;
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        let wait = match wait {
            w if w == HwtWait::Spin as u32 => Wait::Spin,
            w if w == HwtWait::Block as u32 => Wait::Block,
            w if w == HwtWait::Timed as u32 => Wait::For(Duration::from_nanos(timeout_ns)),
            other => return Err(invalid(format!("{other} is not an HwtWait"))),
        };
        let frame = locked(&c.0)?.recv(wait).or_status()?;
        put(out, "out", Box::into_raw(Box::new(HwtFrame(frame))))
    })
}

/// Frees a consumer (frames it handed out stay valid until released) and shuts its connection
/// down, on the caller's socket too: the producer sees the consumer leave. Null is ignored.
///
/// # Safety
/// `c` must be null or a consumer from `hwt_consumer_connect`, freed once.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_free(c: *mut HwtConsumer) {
    // SAFETY: the caller's contract, as above.
    unsafe { free_handle(c) }
}

/// A new reference to the frame's tensor (release it; it stays valid after the frame is).
///
/// # Safety
/// `f` must be a live frame; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hwt_frame_tensor(
    f: *const HwtFrame,
    out: *mut *mut HwtTensor,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise a live frame (the contract).
        let f = unsafe { f.as_ref() }.ok_or_else(|| invalid("the frame is null"))?;
        hand_out(out, f.0.tensor().clone())
    })
}

/// The frame's metadata and its buffer's index in the pool (`out_slot` may be null).
///
/// # Safety
/// `f` must be a live frame; `out` valid for one write, `out_slot` null or valid.
#[no_mangle]
pub unsafe extern "C" fn hwt_frame_meta(
    f: *const HwtFrame,
    out: *mut HwtFrameMeta,
    out_slot: *mut u32,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise a live frame (the contract).
        let f = unsafe { f.as_ref() }.ok_or_else(|| invalid("the frame is null"))?;
        let m = f.0.meta();
        let mut meta = HwtFrameMeta {
            seq: m.seq,
            timestamp_ns: m.timestamp_ns,
            payload_len: m.payload().len() as u32,
            payload: [0; PAYLOAD_BYTES],
        };
        meta.payload[..m.payload().len()].copy_from_slice(m.payload());
        put(out, "out", meta)?;
        if !out_slot.is_null() {
            put(out_slot, "out_slot", f.0.slot() as u32)?;
        }
        Ok(())
    })
}

/// Hands the frame's buffer back to the producer and frees the frame. Null is ignored. A tensor
/// reference taken with `hwt_frame_tensor` stays valid, but the producer may rewrite the buffer.
///
/// # Safety
/// `f` must be null or a frame from `hwt_consumer_recv`, released once.
#[no_mangle]
pub unsafe extern "C" fn hwt_frame_release(f: *mut HwtFrame) {
    // SAFETY: the caller's contract, as above.
    unsafe { free_handle(f) }
}

/// Sets the stream's description (`len` bytes of your own format, at most 4096), which each
/// consumer attaching from now on reads with `hwt_consumer_stream_info` (`hwtensorsink` puts
/// its caps there).
///
/// # Safety
/// `p` must be a live producer; `info` valid for `len` bytes of reads (null with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn hwt_producer_set_stream_info(
    p: *mut HwtProducer,
    info: *const u8,
    len: usize,
) -> HwtStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice_in(info, len, "info", hwtensor::stream::MAX_STREAM_INFO) }?;
        // SAFETY: the caller's contract.
        unsafe { producer(p) }?.set_stream_info(bytes).or_status()
    })
}

/// Copies the producer's stream description into `buf` (up to `cap` bytes) and says its whole
/// length through `out_len` (0: none); a `cap` below it copies nothing and is
/// `HWT_STATUS_INVALID_ARGUMENT`, with the length said all the same.
///
/// # Safety
/// `c` must be a live consumer; `buf` null or valid for `cap` bytes; `out_len` valid.
#[no_mangle]
pub unsafe extern "C" fn hwt_consumer_stream_info(
    c: *mut HwtConsumer,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> HwtStatus {
    guard(|| {
        // SAFETY: null refused; otherwise a live consumer (the caller's contract).
        let c = unsafe { c.as_ref() }.ok_or_else(|| invalid("the consumer is null"))?;
        let consumer = locked(&c.0)?;
        let info = consumer.stream_info();
        put(out_len, "out_len", info.len())?;
        if info.is_empty() {
            return Ok(());
        }
        if buf.is_null() || cap < info.len() {
            return Err(invalid(format!(
                "the stream description is {} bytes; buf holds {cap}",
                info.len()
            )));
        }
        // SAFETY: `buf` is valid for `cap` >= `info.len()` bytes (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(info.as_ptr(), buf, info.len()) };
        Ok(())
    })
}
