//! Helpers shared by the test binaries: skips and REQUIRE flags, shared memory, hostile blobs.
#![allow(dead_code)]

/// The name of the test function it is written in, for `SKIPPED:` lines and REQUIRE failures:
/// a name spelled out by hand goes stale when the test is renamed, and the summary of a GPU run
/// then counts a skip under a test that no longer exists.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let test = path.strip_suffix("::here").unwrap_or(path);
        test.rsplit("::").next().unwrap_or(test)
    }};
}

// Not every binary that includes this module calls both.
#[allow(unused_imports)]
pub use hwtensor::gpu::testing::{device_or_skip, gpu_required};

/// Announces a skip for a feature the driver lacks (a failure when the GPU is required).
pub fn skip_unless_required(test: &str, reason: &str) {
    assert!(
        !gpu_required(),
        "{test}: HWTENSOR_TEST_REQUIRE_GPU=1 but {reason}"
    );
    eprintln!("SKIPPED: {test} - {reason}");
}

/// Shared memory (a memfd on Linux, a section on Windows): for tests about geometry and maps,
/// which behave the same on every host backing.
pub const SHARED: hwtensor::TensorMemory = hwtensor::TensorMemory::Shm;

/// Whether this run must prove the CUDA paths (`HWTENSOR_TEST_REQUIRE_CUDA=1`).
#[cfg(target_os = "linux")]
pub fn cuda_required() -> bool {
    std::env::var("HWTENSOR_TEST_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

#[cfg(target_os = "linux")]
/// The CUDA device, or a printed skip (a failure when CUDA is required).
pub fn cuda_or_skip(test: &str) -> Option<&'static hwtensor::cuda::CudaDevice> {
    match hwtensor::cuda::device() {
        Ok(d) => Some(d),
        Err(e) if cuda_required() => {
            panic!("{test}: HWTENSOR_TEST_REQUIRE_CUDA=1 but there is no CUDA device: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: {test} - {e}");
            None
        }
    }
}

/// Handles this process holds now (Windows): what a test counts before and after hostile input
/// to show nothing was left open.
#[cfg(windows)]
pub fn handles() -> u32 {
    let mut n = 0;
    // SAFETY: the pseudo handle of this process and a valid out pointer.
    #[allow(unsafe_code)]
    unsafe {
        windows::Win32::System::Threading::GetProcessHandleCount(
            windows::Win32::System::Threading::GetCurrentProcess(),
            &mut n,
        )
        .unwrap()
    };
    n
}

/// Runs this test binary again as the peer process of `test` (that one test, its output shown),
/// with `child_env` naming a new named pipe; returns the pipe once the peer connected, and the
/// peer. The peer's side of the test reads the variable and connects.
#[cfg(windows)]
pub fn spawn_pipe_peer(
    test: &str,
    child_env: &str,
    wait: std::time::Duration,
) -> (hwtensor::handoff::Pipe, std::process::Child) {
    let name = format!("hwtensor-{test}-{}", std::process::id());
    let mut listener = hwtensor::handoff::PipeListener::bind(&name).unwrap();
    let process = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(child_env, &name)
        .spawn()
        .unwrap();
    (listener.accept(wait).unwrap(), process)
}

/// Whether this run must prove real DMA-BUF memory (`HWTENSOR_TEST_REQUIRE_DMABUF=1`: the test
/// command's DMA-BUF leg sets it inside `scripts/dma-vm`, whose kernel has a dma-heap and udmabuf).
#[cfg(target_os = "linux")]
pub fn dmabuf_required() -> bool {
    std::env::var("HWTENSOR_TEST_REQUIRE_DMABUF").is_ok_and(|v| v == "1")
}

/// Whether `what` is here (`why_not` is `None`); else a printed skip, or a failure when real
/// DMA-BUF memory is required.
#[cfg(target_os = "linux")]
pub fn dmabuf_part_or_skip(test: &str, why_not: Option<String>) -> bool {
    let Some(why) = why_not else {
        return true;
    };
    assert!(
        !dmabuf_required(),
        "{test}: HWTENSOR_TEST_REQUIRE_DMABUF=1 but {why}"
    );
    eprintln!("SKIPPED: {test} - {why}");
    false
}

/// Whether DMA-BUF tensors can be allocated here (a dma-heap); else as [`dmabuf_part_or_skip`].
#[cfg(target_os = "linux")]
pub fn dma_heap_or_skip(test: &str) -> bool {
    dmabuf_part_or_skip(test, hwtensor::TensorMemory::DmaBuf.unavailable_reason())
}

/// Values a hostile peer puts in a blob's words: small counts and indices, and the edges of
/// the signed and unsigned ranges.
pub const HOSTILE_WORDS: [u32; 7] = [0, 1, 2, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, u32::MAX];

/// Every blob that differs from `bytes` in one of the 32-bit words at `words` (byte offsets)
/// set to one of [`HOSTILE_WORDS`], with where and what: each must be refused.
pub fn hostile_mutations(
    bytes: &[u8],
    words: impl Iterator<Item = usize>,
) -> Vec<(usize, u32, Vec<u8>)> {
    words
        .flat_map(|at| HOSTILE_WORDS.map(|v| (at, v)))
        .filter_map(|(at, v)| {
            let mut b = bytes.to_vec();
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            (b != bytes).then_some((at, v, b))
        })
        .collect()
}
