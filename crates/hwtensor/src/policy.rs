//! What an importer accepts from the process on the other end: hwtensor's trust model.
//!
//! **Shared memory and DMA-BUFs** are plain bytes: any peer may send them. The receiver checks
//! what the fd is, seals a memfd against shrinking before it reads the size, and maps no more
//! than the fd holds, so the worst a hostile peer can do is change the bytes it shares.
//!
//! **GPU memory by reference** is different. A Vulkan OPAQUE_FD is an opaque driver object:
//! the spec requires it to come from a compatible exporter, and drivers trust its content
//! (lavapipe's is a memfd whose first words say where the data is; a forged one makes the
//! driver read and write other allocations of the receiver). Bytes cannot be checked for
//! honesty, so GPU memory is accepted only from a peer trusted as much as this process
//! itself: by default a process of the **same user** (which could already ptrace us), checked
//! with `SO_PEERCRED` by [`handoff::recv`](crate::handoff::recv). Whatever the peer, the fd
//! must be of the kind this device exports (never a pipe, socket, eventfd or plain file), and
//! a completion it claims is waited for on the CPU through the fence it sent, bounded, never
//! put on this process's timeline.
//!
//! [`blob::import`](crate::blob::import) has no peer to ask and applies the strict default;
//! a caller that knows where its fds came from says so with
//! [`blob::import_with`](crate::blob::import_with).

/// What an import accepts beyond plain, sealable shared memory and DMA-BUFs. `#[non_exhaustive]`:
/// start from [`ImportPolicy::STRICT`] (or `TRUSTED_PEER`) and say what else to accept, as in
/// `ImportPolicy::STRICT.with_unsealed_shm(true)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportPolicy {
    /// Accept GPU memory (and its completion fence) by reference: the peer is trusted as this
    /// process is. `handoff::recv` sets it for peers of this user.
    pub gpu_memory: bool,
    /// Accept shared memory that cannot be sealed against shrinking (a memfd made without
    /// `MFD_ALLOW_SEALING`, a `/dev/shm` file opened by name). A peer that truncates it then
    /// faults this process with SIGBUS on the next access: accept it only from peers you trust.
    pub unsealed_shm: bool,
}

impl ImportPolicy {
    /// The default: plain, sealable shared memory and DMA-BUFs; no GPU memory by reference.
    pub const STRICT: ImportPolicy = ImportPolicy {
        gpu_memory: false,
        unsealed_shm: false,
    };
    /// For a peer trusted as this process (its own user): GPU memory by reference too.
    pub const TRUSTED_PEER: ImportPolicy = ImportPolicy {
        gpu_memory: true,
        unsealed_shm: false,
    };

    /// The same policy, accepting GPU memory by reference or not.
    pub const fn with_gpu_memory(mut self, accept: bool) -> ImportPolicy {
        self.gpu_memory = accept;
        self
    }

    /// The same policy, accepting shared memory that cannot be sealed or not.
    pub const fn with_unsealed_shm(mut self, accept: bool) -> ImportPolicy {
        self.unsealed_shm = accept;
        self
    }
}
