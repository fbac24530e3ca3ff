//! `hwtensor`: what this machine offers (probe), two processes sharing frames (demo), and the
//! library's figures (bench).

mod bench;
mod device;
mod pattern;
mod probe;
mod timing;

// The platform's own parts: the demo and hand-off benchmarks need Linux sockets and fds; the
// GPU probe and figures are Vulkan's or D3D11's.
#[cfg(target_os = "linux")]
#[path = "linux/mod.rs"]
mod platform;
#[cfg(windows)]
#[path = "windows/mod.rs"]
mod platform;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "hwtensor",
    version,
    about = "Zero-copy tensors: probe, demo, bench"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Which backings this machine offers, and why not where not.
    Probe {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A producer process hands 1080p frames to a consumer process, zero-copy.
    Demo {
        /// Frames to stream through the pool of buffers (at least one: a demo of nothing would
        /// report a success it never showed).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        frames: u32,
        /// Hand over GPU tensors on the process device instead of shared memory.
        #[arg(long)]
        gpu: bool,
        /// GPU tensors, consumed by CUDA: the consumer imports each frame into CUDA and
        /// copies it into CUDA memory on CUDA's copy engine before it verifies it.
        #[arg(long)]
        cuda: bool,
        /// Another consumer program, run through `sh -c` with `--socket NAME` (an abstract
        /// Unix socket) and `--gpu` appended: `examples/python/consumer.py`, say.
        #[arg(long)]
        consumer: Option<String>,
        /// Publish the frames over Zenoh on loopback to a subscriber process (Linux): by fd
        /// hand-off on one host, or with `--inline` as bytes, as to another host.
        #[arg(long)]
        zenoh: bool,
        /// With `--zenoh`: the subscriber takes no local delivery (the path across hosts).
        #[arg(long, requires = "zenoh")]
        inline: bool,
        /// With `--zenoh`: publish EdgeFirst `CameraFrame` messages (pid and fd numbers, or
        /// inline data with `--inline`) to a plain Zenoh subscriber that decodes them with the
        /// schema crate, takes the fds with pidfd_getfd and verifies every pixel.
        #[arg(long, requires = "zenoh")]
        edgefirst: bool,
    },
    /// Core and hand-off benchmarks, with the reference figures measured in the same run.
    Bench {
        /// Fewer samples: a quick look, not figures to quote.
        #[arg(long)]
        quick: bool,
    },
    /// The consumer half of the channel benchmark (started by `bench`).
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    BenchPeer {
        #[arg(long)]
        fd: i32,
        #[arg(long)]
        frames: usize,
        #[arg(long)]
        spin: bool,
        #[arg(long)]
        socket: bool,
        /// Read one byte of each frame with CUDA (GPU frames).
        #[arg(long)]
        cuda: bool,
        /// With --cuda: through the address `cuda_ready` gives instead of a CUDA map.
        #[arg(long)]
        cuda_address: bool,
    },
    /// The consumer half of the channel benchmark (started by `bench`).
    #[cfg(windows)]
    #[command(hide = true)]
    BenchPeer {
        #[arg(long)]
        pipe: String,
        #[arg(long)]
        frames: usize,
        #[arg(long)]
        spin: bool,
    },
    /// The subscriber half of `demo --zenoh` (started by the publisher).
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    DemoZenohSubscriber {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        frames: u32,
        #[arg(long)]
        inline: bool,
        #[arg(long)]
        edgefirst: bool,
    },
    /// The consumer half of `demo` (started by the producer).
    #[command(hide = true)]
    DemoConsumer {
        #[arg(long)]
        socket: String,
        #[arg(long)]
        gpu: bool,
        #[arg(long)]
        cuda: bool,
    },
}

fn main() -> ExitCode {
    // Warnings by default: a library warning (an adapter the variable names that is missing, a
    // rendezvous that could not be trusted) must reach the operator, not vanish.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let result = match Cli::parse().command {
        Command::Probe { json } => probe::run(json),
        Command::Demo {
            frames,
            zenoh: true,
            inline,
            edgefirst,
            ..
        } => zenoh_demo(frames, inline, edgefirst),
        Command::Demo {
            frames,
            gpu,
            cuda,
            consumer,
            ..
        } => platform::demo::producer(frames, gpu || cuda, cuda, consumer.as_deref()),
        #[cfg(target_os = "linux")]
        Command::DemoZenohSubscriber {
            port,
            frames,
            inline,
            edgefirst: false,
        } => platform::zenoh_demo::subscriber(port, frames, inline),
        #[cfg(target_os = "linux")]
        Command::DemoZenohSubscriber {
            port,
            frames,
            edgefirst: true,
            ..
        } => platform::zenoh_demo::edgefirst_subscriber(port, frames),
        Command::Bench { quick } => bench::run(quick),
        Command::DemoConsumer { socket, gpu, cuda } => {
            platform::demo::consumer(&socket, gpu || cuda, cuda)
        }
        #[cfg(target_os = "linux")]
        Command::BenchPeer {
            fd,
            frames,
            spin,
            socket,
            cuda,
            cuda_address,
        } => {
            use platform::channel::CudaRead;
            let read = match cuda_address {
                true => CudaRead::Address,
                false => CudaRead::Map,
            };
            platform::channel::peer(fd, frames, spin, socket, cuda.then_some(read))
        }
        #[cfg(windows)]
        Command::BenchPeer { pipe, frames, spin } => platform::channel::peer(&pipe, frames, spin),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `demo --zenoh`: the publisher side (Linux: the one-host path passes fds).
fn zenoh_demo(frames: u32, inline: bool, edgefirst: bool) -> Result {
    #[cfg(target_os = "linux")]
    return platform::zenoh_demo::publisher(frames, inline, edgefirst);
    #[cfg(not(target_os = "linux"))]
    return Err(format!(
        "demo --zenoh (inline: {inline}, edgefirst: {edgefirst}, {frames} frames) runs on Linux"
    )
    .into());
}

/// Errors of the command: a library error or a failed check, as one line.
pub type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;
