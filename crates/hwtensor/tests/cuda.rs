//! CUDA interop: the device matched by UUID, maps of GPU and host tensors, and a CUDA kernel
//! that reads what Vulkan wrote and writes what Vulkan then reads. Where CUDA is absent these
//! print `SKIPPED` (a failure under `HWTENSOR_TEST_REQUIRE_CUDA=1`), except the test that pins
//! what happens without CUDA.

#![cfg(target_os = "linux")]
// The test launches its own kernel through the raw driver API.
#![allow(unsafe_code)]

mod common;

use common::cuda_or_skip;

use std::ffi::{c_void, CString};

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::process::Command;

use cudarc::driver::sys;
use hwtensor::blob::Transport;
use hwtensor::cuda::{self, CudaDevice};
use hwtensor::handoff::{recv, send_as};
use hwtensor::{
    CpuAccess, Direction, ImageSpec, PixelFormat, Region, Tensor, TensorDyn, TensorMemory,
};

/// The tests of this binary run one at a time: the leak test counts the process's fds and
/// device memory, which a test running beside it would move.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn ok(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// `out[i] = in[i] + 1` for `i < n`, over bytes: a kernel of our own, in PTX the driver
/// compiles for whatever GPU this is.
const ADD_ONE_PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry add_one(
    .param .u64 in_ptr,
    .param .u64 out_ptr,
    .param .u64 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<9>;
    .reg .b16 %rs<3>;

    ld.param.u64 %rd1, [in_ptr];
    ld.param.u64 %rd2, [out_ptr];
    ld.param.u64 %rd3, [n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    cvt.u64.u32 %rd4, %r4;
    setp.ge.u64 %p1, %rd4, %rd3;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd5, %rd1;
    cvta.to.global.u64 %rd6, %rd2;
    add.s64 %rd7, %rd5, %rd4;
    ld.global.u8 %rs1, [%rd7];
    add.s16 %rs2, %rs1, 1;
    add.s64 %rd8, %rd6, %rd4;
    st.global.u8 [%rd8], %rs2;
DONE:
    ret;
}

.visible .entry spin_until_open(
    .param .u64 gate_ptr,
    .param .u64 limit
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [gate_ptr];
    ld.param.u64 %rd2, [limit];
    cvta.to.global.u64 %rd3, %rd1;
    mov.u64 %rd4, 0;
SPIN:
    ld.volatile.global.u32 %r1, [%rd3];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra OPEN;
    add.u64 %rd4, %rd4, 1;
    setp.lt.u64 %p2, %rd4, %rd2;
    @%p2 bra SPIN;
OPEN:
    ret;
}
"#;

/// Looks at most this many times at a gate before `spin_until_open` gives up: each look reads
/// host memory over PCIe (about a microsecond), so a test that never opens its gate holds the
/// stream for seconds, not for ever.
const SPIN_LIMIT: u64 = 10_000_000;
/// How long a test holds a gate shut: work that does not wait for the gated stream has run by
/// then.
const HELD: std::time::Duration = std::time::Duration::from_millis(200);

/// A stream and the loaded kernels, in the primary context.
struct Kernel {
    context: sys::CUcontext,
    module: sys::CUmodule,
    function: sys::CUfunction,
    spin: sys::CUfunction,
    stream: sys::CUstream,
}

/// Threads per block of the test kernel.
const BLOCK: u32 = 256;

impl Kernel {
    fn load(cuda: &CudaDevice) -> Kernel {
        let context: sys::CUcontext = cuda.context().cast();
        let ptx = CString::new(ADD_ONE_PTX).unwrap();
        let mut module = std::ptr::null_mut();
        let mut function = std::ptr::null_mut();
        let mut spin = std::ptr::null_mut();
        let mut stream = std::ptr::null_mut();
        // SAFETY: the primary context hwtensor retained; out-pointers to locals; a
        // NUL-terminated PTX image.
        unsafe {
            ok(sys::cuCtxPushCurrent_v2(context), "push");
            ok(
                sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast()),
                "load PTX",
            );
            ok(
                sys::cuModuleGetFunction(&mut function, module, c"add_one".as_ptr()),
                "get add_one",
            );
            ok(
                sys::cuModuleGetFunction(&mut spin, module, c"spin_until_open".as_ptr()),
                "get spin_until_open",
            );
            ok(sys::cuStreamCreate(&mut stream, 1), "stream");
        }
        Kernel {
            context,
            module,
            function,
            spin,
            stream,
        }
    }

    /// Holds the stream until `gate` opens (or [`SPIN_LIMIT`] looks): work queued after this
    /// is pending for as long as the test likes.
    fn hold_until(&self, gate: &Gate) {
        let (mut g, mut limit) = (gate.device, SPIN_LIMIT);
        let mut params = [
            (&mut g as *mut u64).cast::<c_void>(),
            (&mut limit as *mut u64).cast::<c_void>(),
        ];
        // SAFETY: the kernel's two u64 parameters; the gate lives until the stream is idle
        // (its drop synchronises the context first).
        let r = unsafe {
            sys::cuLaunchKernel(
                self.spin,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        ok(r, "launch spin_until_open");
    }

    fn stream(&self) -> cuda::CudaStream {
        self.stream.cast()
    }

    /// Queues `out[i] = in[i] + 1` for `n` bytes on the stream.
    fn add_one(&self, input: u64, output: u64, n: usize) {
        let (mut i, mut o, mut n64) = (input, output, n as u64);
        let mut params = [
            (&mut i as *mut u64).cast::<c_void>(),
            (&mut o as *mut u64).cast::<c_void>(),
            (&mut n64 as *mut u64).cast::<c_void>(),
        ];
        let grid = (n as u32).div_ceil(BLOCK);
        // SAFETY: the kernel's three u64 parameters, each pointed to by `params`; the
        // addresses are of maps that live across the launch.
        let r = unsafe {
            sys::cuLaunchKernel(
                self.function,
                grid,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        ok(r, "launch add_one");
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // SAFETY: the stream and module made in `load`, in the context it pushed.
        unsafe {
            sys::cuStreamSynchronize(self.stream);
            sys::cuStreamDestroy_v2(self.stream);
            sys::cuModuleUnload(self.module);
            let mut popped = std::ptr::null_mut();
            sys::cuCtxPopCurrent_v2(&mut popped);
            assert_eq!(popped, self.context);
        }
    }
}

/// A word of pinned host memory a kernel spins on until the test opens it. Made and dropped
/// while a [`Kernel`] holds the primary context current.
struct Gate {
    host: *mut u32,
    device: u64,
}

impl Gate {
    fn new() -> Gate {
        let mut host = std::ptr::null_mut();
        let mut device = 0;
        // SAFETY: out-pointers to locals; four bytes of pinned memory, written before use.
        unsafe {
            ok(sys::cuMemAllocHost_v2(&mut host, 4), "pinned gate");
            std::ptr::write_volatile(host.cast::<u32>(), 0);
            ok(
                sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0),
                "gate's device address",
            );
        }
        Gate {
            host: host.cast(),
            device,
        }
    }

    /// Opens the gate: a spinning kernel sees it at its next look.
    fn open(&self) {
        // SAFETY: the pinned word this gate owns.
        unsafe { std::ptr::write_volatile(self.host, 1) };
    }

    /// Opens the gate after `after`, from another thread.
    fn open_after(&self, after: std::time::Duration) -> std::thread::JoinHandle<()> {
        let word = self.host as usize;
        std::thread::spawn(move || {
            std::thread::sleep(after);
            // SAFETY: the gate outlives the thread (its test joins it before the drop).
            unsafe { std::ptr::write_volatile(word as *mut u32, 1) };
        })
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        // SAFETY: every stream of the context is idle after the synchronise; then nothing
        // reads the word any more.
        unsafe {
            sys::cuCtxSynchronize();
            sys::cuMemFreeHost(self.host.cast());
        }
    }
}

fn numbered(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// A GPU tensor Vulkan filled (a transfer from a host tensor).
fn vulkan_written(data: &[u8]) -> Tensor<u8> {
    let host = Tensor::<u8>::new(&[data.len()], Some(TensorMemory::Mem)).unwrap();
    host.map_write().unwrap().copy_from_slice(data);
    let gpu = Tensor::<u8>::new(&[data.len()], Some(TensorMemory::Gpu)).unwrap();
    gpu.copy_from(&host).unwrap();
    gpu
}

#[test]
fn cuda_is_the_device_with_the_process_gpus_uuid_in_its_primary_context() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let gpu = hwtensor::gpu::device().unwrap();
    assert_eq!(cuda.uuid(), gpu.device_uuid());
    let mut primary = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local; the device hwtensor found. Released below.
    unsafe {
        ok(
            sys::cuDevicePrimaryCtxRetain(&mut primary, cuda.raw_device()),
            "retain",
        );
        assert_eq!(primary.cast(), cuda.context());
        ok(
            sys::cuDevicePrimaryCtxRelease_v2(cuda.raw_device()),
            "release",
        );
    }
    assert_eq!(
        TensorMemory::Cuda.unavailable_reason(),
        None,
        "CUDA memory is a backing here"
    );
}

#[test]
fn without_cuda_every_cuda_call_is_an_error_that_says_why() {
    let _serial = serial();
    if cuda::device().is_ok() {
        eprintln!("SKIPPED: {} - CUDA is here", test_name!());
        return;
    }
    let why = cuda::unavailable_reason().expect("a reason");
    assert!(!why.is_empty());
    let t = Tensor::<u8>::new(&[1 << 16], Some(TensorMemory::Mem)).unwrap();
    let err = t.cuda_map_read(std::ptr::null_mut()).unwrap_err();
    assert!(err.to_string().contains(&why), "{err} / {why}");
    let reason = TensorMemory::Cuda.unavailable_reason().unwrap();
    assert!(reason.contains(&why), "{reason}");
}

#[test]
fn a_cuda_kernel_reads_a_vulkan_written_frame_and_vulkan_reads_its_answer() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    let frame = vulkan_written(&data);
    let answer = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    let kernel = Kernel::load(cuda);
    {
        let input = frame.cuda_map_read(kernel.stream()).unwrap();
        let output = answer.cuda_map_write(kernel.stream()).unwrap();
        kernel.add_one(input.device_ptr(), output.device_ptr(), n);
    } // both maps signal the timeline; no CPU wait so far
      // Vulkan reads the answer: a GPU-side copy ordered after CUDA's signal, then the CPU.
    let copy = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    copy.copy_from(&answer).unwrap();
    let got = copy.to_vec().unwrap();
    let bad = (0..n).find(|&i| got[i] != data[i].wrapping_add(1));
    assert_eq!(bad, None, "first wrong byte");
}

#[test]
fn a_kernel_on_a_stream_made_ready_reads_the_pending_vulkan_write_it_follows() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    // A GPU-to-GPU copy returns at once: its write is still pending when CUDA is asked.
    let pending = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    pending.copy_from(&vulkan_written(&data)).unwrap();
    let answer = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    let kernel = Kernel::load(cuda);
    let input = TensorDyn::from(pending.clone())
        .cuda_ready(Direction::Read, kernel.stream())
        .unwrap();
    {
        let output = answer.cuda_map_write(kernel.stream()).unwrap();
        kernel.add_one(input, output.device_ptr(), n);
    }
    let got = answer.to_vec().unwrap();
    let bad = (0..n).find(|&i| got[i] != data[i].wrapping_add(1));
    assert_eq!(bad, None, "first wrong byte");
    // Once the write is done, the same call queues nothing and gives the same address.
    let again = TensorDyn::from(pending).cuda_ready(Direction::Read, kernel.stream());
    assert_eq!(again.unwrap(), input);
}

#[test]
fn a_map_of_a_pending_vulkan_write_makes_its_stream_wait_for_it() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    let kernel = Kernel::load(cuda);
    for round in 0..2 {
        // A GPU-to-GPU copy returns at once: its write is pending when the first map is made,
        // which must queue the wait; by the second it may be done, when the map queues none.
        let pending = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
        pending.copy_from(&vulkan_written(&data)).unwrap();
        let answer = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
        for input in [&pending, &pending] {
            let i = input.cuda_map_read(kernel.stream()).unwrap();
            let o = answer.cuda_map_write(kernel.stream()).unwrap();
            kernel.add_one(i.device_ptr(), o.device_ptr(), n);
        }
        let got = answer.to_vec().unwrap();
        let bad = (0..n).find(|&i| got[i] != data[i].wrapping_add(1));
        assert_eq!(bad, None, "round {round}: first wrong byte");
    }
}

#[test]
fn a_kernel_reads_and_writes_host_tensors_registered_once() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1 << 20;
    let data = numbered(n);
    let kernel = Kernel::load(cuda);
    for memory in [TensorMemory::Mem, TensorMemory::Shm] {
        let input = Tensor::<u8>::new(&[n], Some(memory)).unwrap();
        input.map_write().unwrap().copy_from_slice(&data);
        let output = Tensor::<u8>::new(&[n], Some(memory)).unwrap();
        let first = {
            let i = input.cuda_map_read(kernel.stream()).unwrap();
            let o = output.cuda_map_write(kernel.stream()).unwrap();
            kernel.add_one(i.device_ptr(), o.device_ptr(), n);
            i.device_ptr()
        };
        // The CPU map waits for the kernel (through the timeline value the map signalled).
        let got = output.to_vec().unwrap();
        assert!(
            (0..n).all(|i| got[i] == data[i].wrapping_add(1)),
            "{memory}: the kernel's answer"
        );
        let again = input.cuda_map_read(kernel.stream()).unwrap();
        assert_eq!(again.device_ptr(), first, "{memory}: registered once");
    }
}

#[test]
fn a_map_of_a_view_points_at_its_first_element_with_byte_strides() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let kernel = Kernel::load(cuda);
    let image = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 32),
        Some(TensorMemory::Gpu),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    let view = image.view(Region::new(8, 4, 16, 8)).unwrap();
    let whole = image.cuda_map_read(kernel.stream()).unwrap().device_ptr();
    let map = view.cuda_map_read(kernel.stream()).unwrap();
    assert_eq!(map.device_ptr() - whole, view.byte_offset() as u64);
    assert_eq!(map.strides(), view.strides());
    assert_eq!(map.shape(), &[8, 16, 4]);
}

#[test]
fn a_host_buffer_below_a_page_is_refused_with_the_reason() {
    let _serial = serial();
    let Some(_) = cuda_or_skip(test_name!()) else {
        return;
    };
    let small = Tensor::<u8>::new(&[100], Some(TensorMemory::Mem)).unwrap();
    let err = small.cuda_map_read(std::ptr::null_mut()).unwrap_err();
    assert!(err.to_string().contains("whole pages"), "{err}");
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_thousand_maps_of_short_lived_tensors_leak_no_import_or_fd() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let kernel = Kernel::load(cuda);
    let mut free_before = 0usize;
    let mut total = 0usize;
    let warm = Tensor::<u8>::new(&[1 << 20], Some(TensorMemory::Gpu)).unwrap();
    drop(warm.cuda_map_read(kernel.stream()).unwrap());
    drop(warm);
    let fds_before = open_fds();
    // SAFETY: out-pointers to locals, in the context the kernel pushed.
    ok(
        unsafe { sys::cuMemGetInfo_v2(&mut free_before, &mut total) },
        "mem info",
    );
    for i in 0..1000 {
        let t = Tensor::<u8>::new(&[1 << 20], Some(TensorMemory::Gpu)).unwrap();
        let m = t.cuda_map_write(kernel.stream()).unwrap();
        assert_ne!(m.device_ptr(), 0, "map {i}");
        drop(m);
        drop(t);
    }
    let mut free_after = 0usize;
    // SAFETY: as above.
    ok(
        unsafe { sys::cuMemGetInfo_v2(&mut free_after, &mut total) },
        "mem info",
    );
    assert_eq!(open_fds(), fds_before, "fds");
    // 1000 leaked 1 MiB imports would be ~1 GiB; allow the driver's own slack.
    let lost = free_before.saturating_sub(free_after);
    assert!(
        lost < 64 << 20,
        "{lost} bytes of device memory lost over 1000 maps"
    );
}

/// The environment variable that makes this binary the peer process of the cross-process test.
const PEER: &str = "HWTENSOR_TEST_CUDA_PEER";
const ACROSS: &str = "a_cuda_kernel_in_another_process_reads_our_frame_and_we_read_its_answer";

/// The peer: receives a frame and an answer buffer, runs the kernel on them in CUDA, sends the
/// answer back (its completion is the value CUDA signals), and waits for the word to exit (so
/// its fence lives until the other side has waited on it).
fn cuda_peer(socket: &str) {
    let stream =
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(socket).unwrap()).unwrap();
    let cuda = cuda::device().unwrap();
    let kernel = Kernel::load(cuda);
    let frame = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
    let answer = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
    // CUDA memory of our own too: the other side imports it into its CUDA context.
    let ours = Tensor::<u8>::new(&[frame.len()], Some(TensorMemory::Cuda)).unwrap();
    {
        let input = frame.cuda_map_read(kernel.stream()).unwrap();
        let output = answer.cuda_map_write(kernel.stream()).unwrap();
        let own = ours.cuda_map_write(kernel.stream()).unwrap();
        kernel.add_one(input.device_ptr(), output.device_ptr(), frame.len());
        kernel.add_one(output.device_ptr(), own.device_ptr(), frame.len());
    }
    send_as(&stream, &TensorDyn::from(answer), Transport::Reference).unwrap();
    send_as(&stream, &TensorDyn::from(ours), Transport::Reference).unwrap();
    let mut done = [0u8];
    (&stream).read_exact(&mut done).unwrap();
}

#[test]
fn a_cuda_kernel_in_another_process_reads_our_frame_and_we_read_its_answer() {
    let _serial = serial();
    if let Ok(socket) = std::env::var(PEER) {
        return cuda_peer(&socket);
    }
    if cuda_or_skip(ACROSS).is_none() {
        return;
    }
    let name = format!("hwtensor-cuda-peer-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([ACROSS, "--exact", "--nocapture", "--test-threads=1"])
        .env(PEER, &name)
        .spawn()
        .unwrap();
    let (stream, _) = listener.accept().unwrap();
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    let frame = vulkan_written(&data);
    let answer = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    send_as(
        &stream,
        &TensorDyn::from(frame.clone()),
        Transport::Reference,
    )
    .unwrap();
    send_as(
        &stream,
        &TensorDyn::from(answer.clone()),
        Transport::Reference,
    )
    .unwrap();
    // Our own buffer comes home, once the peer's CUDA signal is reached (through its fence).
    let back = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
    assert_eq!(back.identity(), answer.identity());
    let copy = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    copy.copy_from(&back).unwrap();
    let got = copy.to_vec().unwrap();
    // The peer's CUDA memory, imported into our CUDA context, read by Vulkan and the CPU.
    let theirs = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
    assert_eq!(theirs.memory(), TensorMemory::Cuda);
    let through_vulkan = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    through_vulkan.copy_from(&theirs).unwrap();
    let twice = through_vulkan.to_vec().unwrap();
    (&stream).write_all(&[1]).unwrap();
    assert!(child.wait().unwrap().success(), "the CUDA peer failed");
    let bad = (0..n).find(|&i| got[i] != data[i].wrapping_add(1));
    assert_eq!(bad, None, "first wrong byte of the peer's answer");
    let bad = (0..n).find(|&i| twice[i] != data[i].wrapping_add(2));
    assert_eq!(bad, None, "first wrong byte of the peer's CUDA memory");
}

/// Starts this binary again as the peer of `test` (told by `role`, with `env` set), and returns
/// it with the connected socket.
fn spawn_peer(test: &str, role: &str, env: &[(&str, &str)]) -> (std::process::Child, UnixStream) {
    let name = format!("hwtensor-cuda-{role}-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(role, &name)
        .envs(env.iter().copied())
        .spawn()
        .unwrap();
    let (stream, _) = listener.accept().unwrap();
    (child, stream)
}

fn connect(socket: &str) -> UnixStream {
    UnixStream::connect_addr(&SocketAddr::from_abstract_name(socket).unwrap()).unwrap()
}

const VULKAN_ONLY_PEER: &str = "HWTENSOR_TEST_VULKAN_ONLY_PEER";
const VULKAN_ONLY: &str =
    "cuda_memory_reaches_a_vulkan_only_process_as_gpu_memory_and_its_answer_returns_to_cuda";

/// The Vulkan-only peer (CUDA turned off): receives CUDA memory as GPU memory, checks its bytes
/// on the CPU, copies it with Vulkan into a GPU tensor of its own and sends that back.
fn vulkan_only_peer(socket: &str) {
    let stream = connect(socket);
    let why = cuda::unavailable_reason().expect("CUDA is turned off in this process");
    assert!(why.contains(cuda::CUDA_ENV), "{why}");
    let theirs = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
    assert_eq!(
        theirs.memory(),
        TensorMemory::Gpu,
        "CUDA memory lands as GPU memory"
    );
    let expected: Vec<u8> = numbered(theirs.len())
        .iter()
        .map(|b| b.wrapping_add(1))
        .collect();
    assert!(
        theirs.to_vec().unwrap() == expected,
        "the CUDA-written bytes"
    );
    let ours = Tensor::<u8>::new(&[theirs.len()], Some(TensorMemory::Gpu)).unwrap();
    ours.copy_from(&theirs).unwrap();
    send_as(&stream, &TensorDyn::from(ours), Transport::Reference).unwrap();
    let mut done = [0u8];
    (&stream).read_exact(&mut done).unwrap();
}

#[test]
fn cuda_memory_reaches_a_vulkan_only_process_as_gpu_memory_and_its_answer_returns_to_cuda() {
    let _serial = serial();
    if let Ok(socket) = std::env::var(VULKAN_ONLY_PEER) {
        return vulkan_only_peer(&socket);
    }
    let Some(cuda) = cuda_or_skip(VULKAN_ONLY) else {
        return;
    };
    let (mut child, stream) = spawn_peer(VULKAN_ONLY, VULKAN_ONLY_PEER, &[(cuda::CUDA_ENV, "off")]);
    let kernel = Kernel::load(cuda);
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    let frame = vulkan_written(&data);
    let written = Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    {
        let input = frame.cuda_map_read(kernel.stream()).unwrap();
        let output = written.cuda_map_write(kernel.stream()).unwrap();
        kernel.add_one(input.device_ptr(), output.device_ptr(), n);
    }
    send_as(&stream, &TensorDyn::from(written), Transport::Reference).unwrap();
    // The peer's Vulkan copy, read by a kernel here once its completion is reached.
    let back = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
    let answer = Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    {
        let input = back.cuda_map_read(kernel.stream()).unwrap();
        let output = answer.cuda_map_write(kernel.stream()).unwrap();
        kernel.add_one(input.device_ptr(), output.device_ptr(), n);
    }
    let got = answer.to_vec().unwrap();
    (&stream).write_all(&[1]).unwrap();
    assert!(
        child.wait().unwrap().success(),
        "the Vulkan-only peer failed"
    );
    let bad = (0..n).find(|&i| got[i] != data[i].wrapping_add(2));
    assert_eq!(bad, None, "first wrong byte after CUDA -> Vulkan -> CUDA");
}

const HANDOFF_PEER: &str = "HWTENSOR_TEST_CUDA_HANDOFF_PEER";
const HANDOFFS: &str = "a_thousand_cross_process_hand_offs_into_cuda_leak_no_import_or_fd";
/// Hand-offs before the counts are taken: the peer's fence import and the driver's pools settle.
const WARM_HANDOFFS: usize = 10;
/// Hand-offs counted.
const COUNTED_HANDOFFS: usize = 1000;

/// The hand-off peer: a fresh tensor per hand-off, GPU and CUDA memory in turn, each sent by
/// reference and dropped here at once (the receiver's import keeps the memory).
fn handoff_peer(socket: &str) {
    let stream = connect(socket);
    for i in 0..WARM_HANDOFFS + COUNTED_HANDOFFS {
        let memory = if i % 2 == 0 {
            TensorMemory::Gpu
        } else {
            TensorMemory::Cuda
        };
        let t = Tensor::<u8>::new(&[1 << 20], Some(memory)).unwrap();
        send_as(&stream, &TensorDyn::from(t), Transport::Reference).unwrap();
        let mut ack = [0u8];
        (&stream).read_exact(&mut ack).unwrap();
    }
}

#[test]
fn a_thousand_cross_process_hand_offs_into_cuda_leak_no_import_or_fd() {
    let _serial = serial();
    if let Ok(socket) = std::env::var(HANDOFF_PEER) {
        return handoff_peer(&socket);
    }
    let Some(cuda) = cuda_or_skip(HANDOFFS) else {
        return;
    };
    let (mut child, stream) = spawn_peer(HANDOFFS, HANDOFF_PEER, &[]);
    let kernel = Kernel::load(cuda);
    let one = |i: usize| {
        let t = recv(&stream).unwrap().into_tensor::<u8>().unwrap();
        let m = t.cuda_map_read(kernel.stream()).unwrap();
        assert_ne!(m.device_ptr(), 0, "hand-off {i}");
        drop(m);
        drop(t);
        (&stream).write_all(&[1]).unwrap();
    };
    (0..WARM_HANDOFFS).for_each(one);
    let free = || {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: out-pointers to locals, in the context the kernel pushed.
        ok(
            unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
            "mem info",
        );
        free
    };
    let (fds_before, free_before) = (open_fds(), free());
    (WARM_HANDOFFS..WARM_HANDOFFS + COUNTED_HANDOFFS).for_each(one);
    let (fds_after, free_after) = (open_fds(), free());
    assert!(child.wait().unwrap().success(), "the hand-off peer failed");
    assert_eq!(
        fds_after, fds_before,
        "fds after {COUNTED_HANDOFFS} hand-offs"
    );
    // 1000 leaked imports of 1-2 MiB would be over 1 GiB; allow the driver's own slack.
    let lost = free_before.saturating_sub(free_after);
    assert!(
        lost < 64 << 20,
        "{lost} bytes of device memory lost over the hand-offs"
    );
}

#[test]
fn cuda_memory_starts_zeroed_and_cpu_maps_stage_through_pinned_memory() {
    let _serial = serial();
    let Some(_) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 300_000;
    let t = Tensor::<u32>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    assert_eq!(t.memory(), TensorMemory::Cuda);
    assert!(t.map_read().unwrap().iter().all(|&v| v == 0));
    let data: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    t.map_write().unwrap().copy_from_slice(&data);
    assert_eq!(t.to_vec().unwrap(), data);
    let other = Tensor::<u32>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    assert_ne!(t.identity(), other.identity());
    assert!(matches!(t.identity(), hwtensor::BufferIdentity::Gpu { .. }));
}

#[test]
fn a_kernel_writes_cuda_memory_that_the_cpu_and_vulkan_then_read() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    let input = Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    input.map_write().unwrap().copy_from_slice(&data);
    let output = Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    let kernel = Kernel::load(cuda);
    {
        let i = input.cuda_map_read(kernel.stream()).unwrap();
        let o = output.cuda_map_write(kernel.stream()).unwrap();
        kernel.add_one(i.device_ptr(), o.device_ptr(), n);
    }
    let got = output.to_vec().unwrap(); // waits for the kernel through the timeline
    assert!(
        (0..n).all(|i| got[i] == data[i].wrapping_add(1)),
        "the CPU's view"
    );
    let gpu = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    gpu.copy_from(&output).unwrap();
    let seen = gpu.to_vec().unwrap();
    assert!(
        (0..n).all(|i| seen[i] == data[i].wrapping_add(1)),
        "Vulkan's copy"
    );
}

#[test]
fn host_copies_of_gpu_memory_cuda_maps_run_on_cuda_in_timeline_order() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1920 * 1080 * 4;
    let data = numbered(n);
    let host = Tensor::<u8>::new(&[n], Some(TensorMemory::Mem)).unwrap();
    host.map_write().unwrap().copy_from_slice(&data);
    let gpu = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    let runs = cuda::testing::copies_run;
    // Memory CUDA has not mapped stays with the GPU device's copy engine.
    let before = runs();
    gpu.copy_from(&host).unwrap();
    assert_eq!(runs(), before, "a fresh GPU tensor was copied on CUDA");
    // Once CUDA maps it (as a PyTorch consumer does), host copies run on CUDA.
    let kernel = Kernel::load(cuda);
    gpu.cuda_map_read(kernel.stream())
        .unwrap()
        .finish()
        .unwrap();
    // A Vulkan write still pending (a GPU-to-GPU copy returns at once) must land first: the
    // host copy after it overwrites it, so the bytes read back are the host's, not the zeros.
    let zeros = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    gpu.copy_from(&zeros).unwrap();
    let before = runs();
    gpu.copy_from(&host).unwrap();
    let back = Tensor::<u8>::new(&[n], Some(TensorMemory::Mem)).unwrap();
    back.copy_from(&gpu).unwrap();
    assert_eq!(
        runs(),
        before + 2,
        "the host copies of a mapped GPU tensor ran elsewhere"
    );
    assert!(
        back.to_vec().unwrap() == data,
        "host -> gpu -> host on CUDA"
    );
    // Vulkan sees CUDA's write: a GPU-to-GPU copy and a CPU map through the device.
    let seen = Tensor::<u8>::new(&[n], Some(TensorMemory::Gpu)).unwrap();
    seen.copy_from(&gpu).unwrap();
    assert!(
        seen.to_vec().unwrap() == data,
        "Vulkan reads what CUDA copied in"
    );
}

#[test]
fn copies_between_cuda_memory_and_every_other_backing_preserve_the_bytes() {
    let _serial = serial();
    let Some(_) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 100_000;
    let data = numbered(n);
    for other in [
        TensorMemory::Mem,
        TensorMemory::Shm,
        TensorMemory::Gpu,
        TensorMemory::Cuda,
    ] {
        let source = Tensor::<u8>::new(&[n], Some(other)).unwrap();
        source.copy_from_flat(&data).unwrap();
        let cuda = Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
        cuda.copy_from(&source).unwrap();
        assert!(cuda.to_vec().unwrap() == data, "{other} -> cuda");
        let back = Tensor::<u8>::new(&[n], Some(other)).unwrap();
        back.copy_from(&cuda).unwrap();
        assert!(back.to_vec().unwrap() == data, "cuda -> {other}");
    }
}

#[test]
fn cuda_memory_travels_inline_and_by_reference_and_a_wrong_fd_is_refused() {
    let _serial = serial();
    let Some(_) = cuda_or_skip(test_name!()) else {
        return;
    };
    let data = numbered(8192);
    let t = Tensor::<u8>::new(&[8192], Some(TensorMemory::Cuda)).unwrap();
    t.copy_from_flat(&data).unwrap();
    let d = TensorDyn::from(t);
    let inline =
        hwtensor::blob::import_inline(&hwtensor::blob::export_inline(&d).unwrap()).unwrap();
    assert_eq!(inline.into_tensor::<u8>().unwrap().to_vec().unwrap(), data);
    let (bytes, fds) = hwtensor::blob::export(&d, Transport::Reference).unwrap();
    let owned = |fds: &[std::os::fd::BorrowedFd<'_>]| -> Vec<std::os::fd::OwnedFd> {
        fds.iter()
            .map(|f| f.try_clone_to_owned().unwrap())
            .collect()
    };
    let trusted = hwtensor::ImportPolicy::TRUSTED_PEER;
    let back = hwtensor::blob::import_with(&bytes, owned(&fds), &trusted).unwrap();
    assert_eq!(back.memory(), TensorMemory::Cuda);
    assert_eq!(back.identity(), d.identity());
    assert_eq!(back.into_tensor::<u8>().unwrap().to_vec().unwrap(), data);
    assert!(
        hwtensor::blob::import(&bytes, owned(&fds)).is_err(),
        "CUDA memory by reference needs a trusted peer"
    );
    let mut wrong = owned(&fds);
    let memfd = rustix::fs::memfd_create("not-cuda", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&memfd, 4 << 20).unwrap();
    wrong[0] = memfd;
    let err = hwtensor::blob::import_with(&bytes, wrong, &trusted).unwrap_err();
    assert!(err.to_string().contains("CUDA exports memory as"), "{err}");
}

#[test]
fn a_strided_crop_copies_between_cuda_memory_and_the_gpu_run_by_run() {
    let _serial = serial();
    let Some(_) = cuda_or_skip(test_name!()) else {
        return;
    };
    let image = |memory| {
        Tensor::<u8>::image(
            &ImageSpec::new(PixelFormat::Rgba, 64, 32),
            Some(memory),
            CpuAccess::ReadWrite,
        )
        .unwrap()
    };
    let source = image(TensorMemory::Cuda);
    source.copy_from_flat(&numbered(64 * 32 * 4)).unwrap();
    let region = Region::new(8, 4, 16, 8);
    let crop = source.view(region).unwrap();
    let expected = crop.to_vec().unwrap();
    for memory in [TensorMemory::Gpu, TensorMemory::Mem] {
        let target = image(memory);
        let into = target.view(region).unwrap();
        into.copy_from(&crop).unwrap();
        assert_eq!(
            into.to_vec().unwrap(),
            expected,
            "cuda crop -> {memory} crop"
        );
        let back = image(TensorMemory::Cuda);
        let back_crop = back.view(region).unwrap();
        back_crop.copy_from(&into).unwrap();
        assert_eq!(
            back_crop.to_vec().unwrap(),
            expected,
            "{memory} crop -> cuda crop"
        );
        assert!(
            back.to_vec().unwrap().iter().filter(|&&b| b != 0).count() <= expected.len(),
            "nothing outside the crop was written"
        );
    }
}

#[test]
fn cuda_memory_of_another_library_is_wrapped_without_a_copy_and_travels_only_inline() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1 << 20;
    let data = numbered(n);
    // "Another library's" memory: a CUDA tensor of ours, kept alive by the wrap as its owner.
    let owner = Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap();
    owner.map_write().unwrap().copy_from_slice(&data);
    let map = owner.cuda_map_read(std::ptr::null_mut()).unwrap();
    let ptr = map.device_ptr();
    map.finish().unwrap();
    let ready = cuda.import_stream().unwrap();
    // SAFETY: `ptr` is `n` bytes of the CUDA device's memory, kept by the owner we pass.
    let wrapped = unsafe {
        Tensor::<u8>::from_foreign_cuda(ptr, n, &[n], None, Box::new(owner.clone()), ready)
    }
    .unwrap();
    assert_eq!(wrapped.memory(), TensorMemory::Cuda);
    assert_eq!(wrapped.to_vec().unwrap(), data, "a CPU map through staging");
    let map = wrapped.cuda_map_read(std::ptr::null_mut()).unwrap();
    assert_eq!(map.device_ptr(), ptr, "a CUDA map is the memory itself");
    drop(map);
    let wrapped = TensorDyn::from(wrapped);
    let err = hwtensor::blob::export(&wrapped, Transport::Reference).unwrap_err();
    assert!(err.to_string().contains("Transport::Inline"), "{err}");
    let (bytes, fds) = hwtensor::blob::export(&wrapped, Transport::Inline).unwrap();
    assert!(fds.is_empty() && bytes.len() > n);
}

#[test]
fn a_channel_of_cuda_frames_carries_their_completion_to_the_consumer() {
    use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
    let _serial = serial();
    if cuda_or_skip(test_name!()).is_none() {
        return;
    }
    let n = 1 << 16;
    let data = numbered(n);
    let pool = (0..2)
        .map(|_| TensorDyn::from(Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap()))
        .collect();
    let (a, b) = UnixStream::pair().unwrap();
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::new(pool).unwrap();
    producer.attach(a).unwrap();
    let mut consumer = consumer.join().unwrap();
    let host = Tensor::<u8>::new(&[n], Some(TensorMemory::Mem)).unwrap();
    host.map_write().unwrap().copy_from_slice(&data);
    let slot = producer.acquire(std::time::Duration::from_secs(5)).unwrap();
    let frame = producer.tensor(slot).as_tensor::<u8>().unwrap();
    frame.copy_from(&host).unwrap(); // a CUDA copy: its value is the frame's completion
    producer.send(slot, FrameMeta::new(1, 0)).unwrap();
    let got = consumer
        .recv(Wait::For(std::time::Duration::from_secs(5)))
        .unwrap();
    assert_eq!(got.tensor().memory(), TensorMemory::Cuda);
    assert_eq!(
        got.tensor().as_tensor::<u8>().unwrap().to_vec().unwrap(),
        data
    );
}

/// `data`'s bytes plus one, as `add_one` writes them.
fn plus_one(data: &[u8]) -> Vec<u8> {
    data.iter().map(|b| b.wrapping_add(1)).collect()
}

/// How a held read's map ends: both mark it with a CUDA event, neither signals.
#[derive(Clone, Copy)]
enum Ending {
    End,
    Drop,
}

/// A CUDA read of a tensor held back on its stream by a shut gate: `add_one` of it into a CUDA
/// tensor, queued behind `spin_until_open`, its map already ended. Fields drop in order: the
/// gate opens and the context drains before the kernel's stream goes.
struct HeldRead {
    answer: TensorDyn,
    gate: Gate,
    kernel: Kernel,
}

impl HeldRead {
    /// Queues the read of `input`'s `n` bytes and ends its map as `ending` says, checking that
    /// the end signalled nothing.
    fn start(cuda: &CudaDevice, input: &Tensor<u8>, n: usize, ending: Ending) -> HeldRead {
        let gpu = hwtensor::gpu::device().unwrap();
        let answer = TensorDyn::from(Tensor::<u8>::new(&[n], Some(TensorMemory::Cuda)).unwrap());
        let kernel = Kernel::load(cuda);
        let gate = Gate::new();
        kernel.hold_until(&gate);
        let out = answer
            .cuda_ready(Direction::Write, kernel.stream())
            .unwrap();
        let before = gpu.last_signalled();
        let read = input.cuda_map_read(kernel.stream()).unwrap();
        kernel.add_one(read.device_ptr(), out, n);
        match ending {
            Ending::End => read.end().unwrap(),
            Ending::Drop => drop(read),
        }
        assert_eq!(
            gpu.last_signalled(),
            before,
            "ending a read map signalled the timeline"
        );
        HeldRead {
            answer,
            gate,
            kernel,
        }
    }

    /// What the read gave, once the gate is open: the input's bytes plus one, if nothing
    /// overwrote the input before the read.
    fn answer(&self) -> Vec<u8> {
        self.gate.open();
        self.answer
            .cuda_order(Direction::Write, self.kernel.stream())
            .unwrap();
        self.answer.as_tensor::<u8>().unwrap().to_vec().unwrap()
    }
}

/// Holds a CUDA read of a Vulkan-written tensor back, lets `zero` queue a GPU write of zeros
/// over it (returning at once; what it returns lives to the end), and checks that the read saw
/// the bytes from before and the zeros landed after it: had the write not waited for the read,
/// it would run while the gate holds the read back.
fn a_gpu_write_waits_for_a_held_read<K>(
    test: &str,
    overtook: &str,
    zero: impl FnOnce(&CudaDevice, &Tensor<u8>, usize) -> K,
) {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test) else {
        return;
    };
    let n = 1 << 20;
    let data = numbered(n);
    let src = vulkan_written(&data);
    let read = HeldRead::start(cuda, &src, n, Ending::End);
    let _kept = zero(cuda, &src, n);
    std::thread::sleep(HELD);
    assert!(read.answer() == plus_one(&data), "{overtook}");
    assert!(src.to_vec().unwrap().iter().all(|&b| b == 0));
}

#[test]
fn a_vulkan_write_after_a_cuda_read_waits_for_the_read_though_the_read_signals_nothing() {
    let overtook = "the Vulkan write overtook the CUDA read";
    a_gpu_write_waits_for_a_held_read(test_name!(), overtook, |_, src, n| {
        src.copy_from(&vulkan_written(&vec![0; n])).unwrap(); // a Vulkan copy
    });
}

#[test]
fn a_cpu_write_after_a_cuda_read_of_host_memory_waits_for_the_read() {
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let n = 1 << 20;
    let data = numbered(n);
    let src = Tensor::<u8>::new(&[n], Some(TensorMemory::Mem)).unwrap();
    src.map_write().unwrap().copy_from_slice(&data);
    let read = HeldRead::start(cuda, &src, n, Ending::Drop);
    let opener = read.gate.open_after(HELD);
    let (_, slept) = hwtensor::gpu::cpu_waits();
    src.map_write().unwrap().fill(0); // must wait for the kernel's read
    opener.join().unwrap();
    assert!(
        hwtensor::gpu::cpu_waits().1 > slept,
        "the map's wait for the read is not counted among the CPU waits"
    );
    assert!(
        read.answer() == plus_one(&data),
        "the CPU write overtook the CUDA read"
    );
}

#[test]
fn a_frame_read_by_cuda_goes_back_to_its_producer_only_once_the_read_is_done() {
    use hwtensor::stream::{Consumer, FrameMeta, Producer, Wait, CONNECT_TIMEOUT};
    let _serial = serial();
    let Some(cuda) = cuda_or_skip(test_name!()) else {
        return;
    };
    let wait = std::time::Duration::from_secs(5);
    let n = 1 << 16;
    let data = numbered(n);
    let pool = vec![TensorDyn::from(vulkan_written(&data))];
    let (a, b) = UnixStream::pair().unwrap();
    let consumer = std::thread::spawn(move || Consumer::connect(b, CONNECT_TIMEOUT).unwrap());
    let mut producer = Producer::new(pool).unwrap();
    producer.attach(a).unwrap();
    let mut consumer = consumer.join().unwrap();
    let slot = producer.acquire(wait).unwrap();
    producer.send(slot, FrameMeta::new(0, 0)).unwrap();
    let frame = consumer.recv(Wait::For(wait)).unwrap();
    let input = frame.tensor().as_tensor::<u8>().unwrap();
    let read = HeldRead::start(cuda, input, n, Ending::End);
    drop(frame);
    assert!(
        matches!(producer.acquire(HELD), Err(hwtensor::Error::Timeout(_))),
        "the producer got the frame back while the consumer's CUDA read of it was pending"
    );
    read.gate.open();
    assert_eq!(producer.acquire(wait).unwrap(), slot);
    assert!(read.answer() == plus_one(&data));
}

#[test]
fn a_cuda_write_on_another_stream_waits_for_a_cuda_read_by_its_event() {
    let overtook = "the CUDA write on another stream overtook the CUDA read";
    a_gpu_write_waits_for_a_held_read(test_name!(), overtook, |cuda, src, n| {
        let writer = Kernel::load(cuda);
        let w = src.cuda_map_write(writer.stream()).unwrap();
        // SAFETY: the map's address and length, on the writer's stream.
        let r = unsafe { sys::cuMemsetD8Async(w.device_ptr(), 0, n, writer.stream.cast()) };
        ok(r, "memset");
        drop(w);
        writer // its stream lives until the checks are done
    });
}
