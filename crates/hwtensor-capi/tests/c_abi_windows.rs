//! The Windows half of the C ABI, called through the DLL as a C host would: the device handle,
//! a signal, the completion event, and the fence handles (absent under Wine, where the device
//! has no `ID3D11Device5`).

// Calls into the C ABI through raw function pointers and out-pointers.
#![allow(unsafe_code)]
#![cfg(windows)]

use std::ffi::c_void;

use hwtensor::gpu::windows::Win32::Foundation::{CloseHandle, HANDLE, WAIT_OBJECT_0};
use hwtensor::gpu::windows::Win32::System::Threading::WaitForSingleObject;

mod common;
mod loader;

use loader::{GetU64, Library};

type Event = unsafe extern "C" fn(u64, *mut *mut c_void) -> i32;
type Handle = unsafe extern "C" fn(*mut *mut c_void) -> i32;
const OK: i32 = 0;
const UNAVAILABLE: i32 = 1;
const INVALID_ARGUMENT: i32 = 3;

#[test]
fn a_c_host_signals_waits_on_an_event_and_learns_whether_there_is_a_fence() {
    let lib = Library::open_private(&common::cdylib_dir().join(common::CDYLIB));
    // SAFETY: the symbols have these signatures (include/hwtensor.h, HWT_WINDOWS part).
    let (device, signal, fence, event, export): (GetU64, GetU64, GetU64, Event, Handle) = unsafe {
        (
            lib.get(c"hwt_gpu_device_handle"),
            lib.get(c"hwt_gpu_signal"),
            lib.get(c"hwt_gpu_fence_handle"),
            lib.get(c"hwt_gpu_completion_event"),
            lib.get(c"hwt_gpu_export_fence_handle"),
        )
    };
    let mut handle = 0;
    // SAFETY: valid out-pointers throughout; handles returned to us are closed here.
    unsafe {
        match device(&mut handle) {
            OK => assert_ne!(handle, 0),
            status if std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
                panic!("no device through the C ABI (status {status})")
            }
            _ => {
                eprintln!("SKIPPED: a_c_host_signals_waits_on_an_event_and_learns_whether_there_is_a_fence - no GPU device");
                return;
            }
        }
        assert_eq!(
            device(std::ptr::null_mut()),
            INVALID_ARGUMENT,
            "a null out-pointer"
        );

        let mut value = 0;
        assert_eq!(signal(&mut value), OK);
        let mut ev: *mut c_void = std::ptr::null_mut();
        assert_eq!(event(value, &mut ev), OK);
        assert_eq!(
            WaitForSingleObject(HANDLE(ev), 5000),
            WAIT_OBJECT_0,
            "the event is set"
        );
        CloseHandle(HANDLE(ev)).unwrap();

        let (mut f, mut exported) = (0u64, std::ptr::null_mut());
        let has_fence = fence(&mut f) == OK;
        let exports = export(&mut exported) == OK;
        if has_fence {
            assert!(exports, "a shared fence exports an NT handle");
            CloseHandle(HANDLE(exported)).unwrap();
        } else {
            // Wine: no ID3D11Device5, so neither a fence pointer nor a handle, and both say so.
            assert_eq!(fence(&mut f), UNAVAILABLE);
            assert_eq!(export(&mut exported), UNAVAILABLE);
            assert!(
                exported.is_null(),
                "out-pointers are written only on success"
            );
        }
    }
}

/// `HwtIdentity`, as the header lays it out.
#[repr(C)]
#[derive(Default, Debug, PartialEq, Eq)]
struct Identity {
    kind: u32,
    a: u64,
    b: u64,
    c: u64,
}

type PipeOpen = unsafe extern "C" fn(*const std::ffi::c_char, u64, *mut *mut c_void) -> i32;
type PipeClose = unsafe extern "C" fn(*mut c_void);
type SendFn = unsafe extern "C" fn(*const c_void, *const c_void, u32, u64) -> i32;
type Recv = unsafe extern "C" fn(*const c_void, u64, u32, *mut *mut c_void) -> i32;
type New = unsafe extern "C" fn(*const usize, usize, u32, u32, *mut *mut c_void) -> i32;
type IdentityOf = unsafe extern "C" fn(*const c_void, *mut Identity) -> i32;
type Release = unsafe extern "C" fn(*const c_void) -> i32;
const SECONDS: u64 = 10_000_000_000;
const U8: u32 = 1;
const SHM: u32 = 2;
const REFERENCE: u32 = 1;
const SECTION: u32 = 4;

#[test]
fn a_c_host_hands_a_shared_memory_tensor_over_a_named_pipe_as_its_section() {
    let lib = Library::open_private(&common::cdylib_dir().join(common::CDYLIB));
    // SAFETY: the symbols have these signatures (include/hwtensor.h, HWT_WINDOWS part and the
    // tensor calls).
    let (accept, connect, close, send, recv, new, identity, release): (
        PipeOpen,
        PipeOpen,
        PipeClose,
        SendFn,
        Recv,
        New,
        IdentityOf,
        Release,
    ) = unsafe {
        (
            lib.get(c"hwt_pipe_accept"),
            lib.get(c"hwt_pipe_connect"),
            lib.get(c"hwt_pipe_close"),
            lib.get(c"hwt_send"),
            lib.get(c"hwt_recv"),
            lib.get(c"hwt_tensor_new"),
            lib.get(c"hwt_tensor_identity"),
            lib.get(c"hwt_tensor_release"),
        )
    };
    let name = std::ffi::CString::new(format!("hwtensor-capi-{}", std::process::id())).unwrap();
    let client_name = name.clone();
    // SAFETY: valid strings and out-pointers; every handle made is released or closed here.
    unsafe {
        let client = std::thread::spawn(move || {
            let mut pipe = std::ptr::null_mut();
            assert_eq!(connect(client_name.as_ptr(), SECONDS, &mut pipe), OK);
            let mut got = std::ptr::null_mut();
            assert_eq!(recv(pipe, SECONDS, 0, &mut got), OK);
            let mut id = Identity::default();
            assert_eq!(identity(got, &mut id), OK);
            assert_eq!(release(got), OK);
            close(pipe);
            id
        });
        let mut pipe = std::ptr::null_mut();
        assert_eq!(accept(name.as_ptr(), SECONDS, &mut pipe), OK);
        let mut t = std::ptr::null_mut();
        let shape = [64usize, 64];
        assert_eq!(new(shape.as_ptr(), 2, U8, SHM, &mut t), OK);
        assert_eq!(send(pipe, t, REFERENCE, SECONDS), OK);
        let mut ours = Identity::default();
        assert_eq!(identity(t, &mut ours), OK);
        assert_eq!(ours.kind, SECTION);
        assert_eq!(
            client.join().unwrap(),
            ours,
            "the receiver has the same section"
        );
        assert_eq!(recv(pipe, 0, 7, &mut t), INVALID_ARGUMENT, "unknown flags");
        assert_eq!(release(t), OK);
        close(pipe);
        close(std::ptr::null_mut());
    }
}

/// `HwtFrameMeta` as the header lays it out.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FrameMeta {
    seq: u64,
    timestamp_ns: u64,
    payload_len: u32,
    payload: [u8; 32],
}

type ProducerNew = unsafe extern "C" fn(*const *const c_void, usize, *mut *mut c_void) -> i32;
type Attach = unsafe extern "C" fn(*mut c_void, *const c_void) -> i32;
type ConnectPipe = unsafe extern "C" fn(*const c_void, u64, *mut *mut c_void) -> i32;
type Acquire = unsafe extern "C" fn(*mut c_void, u64, *mut u32, *mut *mut c_void) -> i32;
type SendFrame = unsafe extern "C" fn(*mut c_void, u32, *const FrameMeta) -> i32;
type RecvFrame = unsafe extern "C" fn(*mut c_void, u32, u64, *mut *mut c_void) -> i32;
type Meta = unsafe extern "C" fn(*const c_void, *mut FrameMeta, *mut u32) -> i32;
type Free = unsafe extern "C" fn(*mut c_void);
const TIMED: u32 = 3;
const FRAMES: u64 = 10;

#[test]
fn a_c_host_streams_frames_through_the_channel_on_a_named_pipe() {
    let lib = Library::open_private(&common::cdylib_dir().join(common::CDYLIB));
    // SAFETY: the symbols have these signatures (include/hwtensor.h: the channel, its
    // HWT_WINDOWS attach and connect, the pipe and tensor calls).
    let (accept, connect, close, new, release): (PipeOpen, PipeOpen, PipeClose, New, Release) = unsafe {
        (
            lib.get(c"hwt_pipe_accept"),
            lib.get(c"hwt_pipe_connect"),
            lib.get(c"hwt_pipe_close"),
            lib.get(c"hwt_tensor_new"),
            lib.get(c"hwt_tensor_release"),
        )
    };
    // SAFETY: as above.
    let (producer_new, attach, connect_pipe, acquire, send, recv, meta, frame_release) = unsafe {
        (
            lib.get::<ProducerNew>(c"hwt_producer_new"),
            lib.get::<Attach>(c"hwt_producer_attach_pipe"),
            lib.get::<ConnectPipe>(c"hwt_consumer_connect_pipe"),
            lib.get::<Acquire>(c"hwt_producer_acquire"),
            lib.get::<SendFrame>(c"hwt_producer_send"),
            lib.get::<RecvFrame>(c"hwt_consumer_recv"),
            lib.get::<Meta>(c"hwt_frame_meta"),
            lib.get::<Free>(c"hwt_frame_release"),
        )
    };
    // SAFETY: as above.
    let (producer_free, consumer_free): (Free, Free) =
        unsafe { (lib.get(c"hwt_producer_free"), lib.get(c"hwt_consumer_free")) };
    let name =
        std::ffi::CString::new(format!("hwtensor-capi-chan-{}", std::process::id())).unwrap();
    let client_name = name.clone();
    // SAFETY: valid strings, handles and out-pointers; every handle made is freed here.
    unsafe {
        let consumer = std::thread::spawn(move || {
            let mut pipe = std::ptr::null_mut();
            assert_eq!(connect(client_name.as_ptr(), SECONDS, &mut pipe), OK);
            let mut c = std::ptr::null_mut();
            assert_eq!(connect_pipe(pipe, SECONDS, &mut c), OK);
            close(pipe); // the channel keeps its own handle
            let mut seqs = Vec::new();
            for _ in 0..FRAMES {
                let mut f = std::ptr::null_mut();
                assert_eq!(recv(c, TIMED, SECONDS, &mut f), OK);
                let (mut m, mut slot) = (FrameMeta::default(), 0u32);
                assert_eq!(meta(f, &mut m, &mut slot), OK);
                seqs.push(m.seq);
                frame_release(f);
            }
            consumer_free(c);
            seqs
        });
        let mut pipe = std::ptr::null_mut();
        assert_eq!(accept(name.as_ptr(), SECONDS, &mut pipe), OK);
        let shape = [4096usize];
        let pool: Vec<*const c_void> = (0..3)
            .map(|_| {
                let mut t = std::ptr::null_mut();
                assert_eq!(new(shape.as_ptr(), 1, U8, SHM, &mut t), OK);
                t.cast_const()
            })
            .collect();
        let mut p = std::ptr::null_mut();
        assert_eq!(producer_new(pool.as_ptr(), pool.len(), &mut p), OK);
        pool.iter().for_each(|&t| assert_eq!(release(t), OK));
        assert_eq!(attach(p, std::ptr::null()), INVALID_ARGUMENT, "a null pipe");
        assert_eq!(attach(p, pipe), OK);
        for seq in 0..FRAMES {
            let (mut slot, mut t) = (0u32, std::ptr::null_mut());
            assert_eq!(acquire(p, SECONDS, &mut slot, &mut t), OK);
            assert_eq!(release(t), OK);
            let m = FrameMeta {
                seq,
                ..FrameMeta::default()
            };
            assert_eq!(send(p, slot, &m), OK);
        }
        assert_eq!(consumer.join().unwrap(), (0..FRAMES).collect::<Vec<_>>());
        producer_free(p);
        close(pipe);
    }
}
