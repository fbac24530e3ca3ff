"""hwtensor: zero-copy tensors in heap, shared, dma-buf, GPU and CUDA memory.

Tensors map into NumPy without a copy (``with t.map_read() as a:``), export through DLPack
(``torch.from_dlpack(t)``, ``np.from_dlpack(t)``), and travel between processes over Unix
sockets (``hwtensor.send`` / ``hwtensor.recv``). GPU work is ordered by one process-wide
timeline (``hwtensor.gpu``).
"""

from ._native import (
    AccessError,
    BusyError,
    Consumer,
    CudaError,
    Error,
    Frame,
    GpuError,
    HandoffError,
    ImageSpec,
    InvalidArgument,
    Listener,
    Map,
    Marker,
    NotPermittedError,
    PeerGone,
    Producer,
    Tensor,
    TimeoutError,
    Unavailable,
    __version__,
    cuda_unavailable_reason,
    export_blob,
    from_dlpack,
    import_blob,
    recv,
    send,
)
from . import gpu

__all__ = [
    "AccessError",
    "BusyError",
    "Consumer",
    "CudaError",
    "Error",
    "Frame",
    "GpuError",
    "HandoffError",
    "ImageSpec",
    "InvalidArgument",
    "Listener",
    "Map",
    "Marker",
    "NotPermittedError",
    "PeerGone",
    "Producer",
    "Tensor",
    "TimeoutError",
    "Unavailable",
    "__version__",
    "cuda_unavailable_reason",
    "export_blob",
    "from_dlpack",
    "gpu",
    "import_blob",
    "recv",
    "send",
]
