"""Type stubs of hwtensor's native module."""

import builtins
import socket
from types import TracebackType
from typing import Any, Optional, Tuple, Union

__version__: str

class Error(Exception):
    """Every error hwtensor raises; the message is the library's own."""

class InvalidArgument(Error):
    """A shape, dtype, format, region, stride or value that does not describe valid memory."""

class Unavailable(Error):
    """A backing this machine or build cannot provide, with the reason."""

class BusyError(Error):
    """A map that would alias a live write map of the same buffer."""

class AccessError(Error):
    """An access the tensor was not declared for, or an operation its memory cannot do."""

class HandoffError(Error):
    """A failed hand-off: a bad fd or socket, a hostile or short message, a peer gone."""

class NotPermittedError(Error):
    """A channel's producer refused this consumer, or a consumer the producer was asked to attach."""

class PeerGone(HandoffError):
    """The peer of a channel left: the end of a stream; what it sent before stays valid."""

class TimeoutError(Error, builtins.TimeoutError):
    """A bounded wait that ran out; also a builtin TimeoutError (``except TimeoutError:``)."""

class GpuError(Error):
    """The GPU device or driver refused or lost something."""

    kind: str
    """Which way: ``"lost"`` (restart the device's users), ``"out_of_memory"``,
    ``"unsupported"`` (the driver or build cannot do it), ``"timeout"`` or ``"driver"``."""

class CudaError(Error):
    """A CUDA driver call failed."""

class Map:
    """A CPU map; ``with t.map_read() as a:`` gives a read-only NumPy array over the tensor's
    memory (heap, shm, DMA-BUF); ``with t.map_write() as a:`` (and any map of GPU or CUDA memory)
    an array over a copy the map owns, written back when the block ends. No array or view kept
    past the block reaches the tensor's memory."""

    @property
    def __array_interface__(self) -> dict: ...
    @property
    def nbytes(self) -> int: ...
    def __enter__(self) -> Any: ...
    def __exit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def close(self) -> None: ...

class Tensor:
    """A tensor in heap ("mem"), shared ("shm"), "dmabuf", "gpu" or "cuda" memory."""

    def __init__(
        self, shape: Tuple[int, ...] | list, dtype: Any = "uint8", memory: Optional[str] = None
    ) -> None: ...
    @staticmethod
    def image(
        spec: "ImageSpec",
        dtype: Any = "uint8",
        memory: Optional[str] = None,
        access: str = "read_write",
    ) -> "Tensor": ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def strides(self) -> Tuple[int, ...]: ...
    @property
    def memory(self) -> str: ...
    @property
    def access(self) -> str: ...
    @property
    def format(self) -> Optional[str]: ...
    @property
    def width(self) -> Optional[int]: ...
    @property
    def height(self) -> Optional[int]: ...
    @property
    def row_stride(self) -> Optional[int]: ...
    @property
    def chroma_stride(self) -> Optional[int]: ...
    def with_sync_file(self, fd: int) -> "Tensor": ...
    def export_sync_file(self) -> Optional[int]: ...
    @property
    def plane_table(self) -> list[Tuple[int, int, int, int]]: ...
    @property
    def colorimetry(self) -> Optional[dict]: ...
    def with_colorimetry(
        self,
        *,
        primaries: Optional[str] = None,
        transfer: Optional[str] = None,
        matrix: Optional[str] = None,
        range: Optional[str] = None,
    ) -> "Tensor": ...
    @property
    def identity(self) -> Tuple[Any, ...]: ...
    @property
    def nbytes(self) -> int: ...
    def view(self, x: int, y: int, w: int, h: int) -> "Tensor": ...
    def batch(self, i: int) -> "Tensor": ...
    def reshape(self, shape: Tuple[int, ...] | list) -> "Tensor": ...
    def repoint(
        self,
        shape: Optional[Tuple[int, ...] | list] = None,
        *,
        width: Optional[int] = None,
        height: Optional[int] = None,
        format: Optional[str] = None,
        row_stride: Optional[int] = None,
    ) -> "Tensor": ...
    def copy_from(self, src: "Tensor") -> None: ...
    @staticmethod
    def from_fd(fd: int, shape: Tuple[int, ...] | list, dtype: Any = "uint8", offset: int = 0) -> "Tensor":
        """A tensor over ``fd`` (duplicated: close your own) from byte ``offset`` on."""
    @staticmethod
    def image_from_fd(
        fd: int,
        spec: "ImageSpec",
        dtype: Any = "uint8",
        offset: int = 0,
        access: str = "read_write",
    ) -> "Tensor":
        """The image ``spec`` describes over ``fd`` (duplicated) from byte ``offset`` on."""
    @staticmethod
    def image_from_planes(
        planes: list[Tuple[int, int, int]],
        spec: "ImageSpec",
        dtype: Any = "uint8",
        access: str = "read_write",
    ) -> "Tensor":
        """The image ``spec`` describes over one ``(fd, offset, row_stride)`` per plane."""
    def fd(self) -> int:
        """The buffer's fd, borrowed: valid while the tensor lives; never close it."""
    def clone_fd(self) -> int:
        """A new fd of the buffer, yours to close."""
    def to_memory(self, memory: str) -> "Tensor": ...
    @property
    def drm_modifier(self) -> int:
        """The image's DRM format modifier (0: LINEAR)."""
    def with_drm_modifier(self, modifier: int) -> "Tensor":
        """The same image laid out by ``modifier``; non-LINEAR: no CPU access, carried as is."""
    @property
    def quantization(self) -> Optional[dict]: ...
    def with_quantization(
        self,
        scale: Optional[float] = None,
        zero_point: int = 0,
        *,
        axis: Optional[int] = None,
        scales: Optional[list[float]] = None,
        zero_points: Optional[list[int]] = None,
    ) -> "Tensor": ...
    def map_read(self) -> Map: ...
    def map_write(self) -> Map: ...
    def map_read_write(self) -> Map: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def __cuda_array_interface__(self) -> dict: ...
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any:
        """Raises TypeError: read a tensor with ``map_read()`` or ``np.from_dlpack(t)``."""
    def cuda_done(self, stream: Optional[Any] = None) -> int: ...
    def cuda_read_done(self, stream: Optional[Any] = None) -> None:
        """Marks the end of CUDA reads queued on ``stream`` with a CUDA event (no timeline
        signal): later writes, and a channel frame's hand-back, wait for it."""
    def cuda_ptr(self, stream: Optional[Any] = None) -> int: ...
    def torch(self) -> Any:
        """A PyTorch tensor over this memory in one call (``torch.from_dlpack(t)``, cheaper);
        CUDA memory is ordered on PyTorch's current stream. Needs PyTorch."""

class ImageSpec:
    """What an image is asked to be: format, size, and where dictated, strides, colours and
    the DRM format modifier (taken by every image constructor)."""

    def __init__(
        self,
        format: str,
        width: int,
        height: int,
        *,
        row_stride: Optional[int] = None,
        chroma_stride: Optional[int] = None,
        colorimetry: Optional[dict] = None,
        drm_modifier: int = 0,
    ) -> None: ...
    @property
    def format(self) -> str: ...
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def row_stride(self) -> Optional[int]: ...
    @property
    def chroma_stride(self) -> Optional[int]: ...
    @property
    def drm_modifier(self) -> int: ...

class Marker:
    """A frame's marker: kind "frame", "end_of_stream" or "caps_change", PTS and duration."""

    def __init__(
        self, kind: str = "frame", pts_ns: Optional[int] = None, duration_ns: Optional[int] = None
    ) -> None: ...
    @staticmethod
    def decode(payload: bytes) -> "Marker": ...
    def encode(self) -> bytes: ...
    @property
    def kind(self) -> str: ...
    @property
    def pts_ns(self) -> Optional[int]: ...
    @property
    def duration_ns(self) -> Optional[int]: ...

class Frame:
    """A received frame; leaving its `with` block (or `release()`) hands the buffer back."""

    @property
    def tensor(self) -> Tensor: ...
    @property
    def seq(self) -> int: ...
    @property
    def timestamp_ns(self) -> int: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def slot(self) -> int: ...
    def marker(self) -> "Marker":
        """What a media producer (hwtensorsink) says of the frame; raises HandoffError for an
        unknown kind."""
    def release(self) -> None: ...
    def __enter__(self) -> "Frame": ...
    def __exit__(self, *exc: Any) -> bool: ...

class Consumer:
    """The receiving side of a pooled channel, attached on a connected Unix socket."""

    def __init__(
        self, sock: Union[socket.socket, int], timeout: float = 10.0, write: bool = False
    ) -> None: ...
    @staticmethod
    def connect(address: str, timeout: float = 10.0, write: bool = False) -> "Consumer": ...
    @property
    def writable(self) -> bool: ...
    @property
    def stream_info(self) -> bytes: ...
    def recv(self, timeout: Optional[float] = None) -> Frame: ...
    @property
    def pool(self) -> list[Tensor]: ...

class Producer:
    """The sending side of a pooled channel over a pool of tensors."""

    def __init__(self, pool: list[Tensor], room: Optional[int] = None) -> None: ...
    def attach(self, sock: Union[socket.socket, int]) -> None: ...
    def accept(self, listener: "Listener", timeout: float = 5.0) -> bool: ...
    def admit(
        self,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
        anyone: bool = False,
        write: bool = False,
    ) -> None: ...
    @property
    def refused(self) -> int: ...
    def set_stream_info(self, info: bytes) -> None: ...
    def add(self, tensor: Tensor) -> int: ...
    def acquire(self, timeout: float = 5.0) -> int: ...
    def acquire_slot(self, slot: int, timeout: float = 5.0) -> None: ...
    def tensor(self, slot: int) -> Tensor: ...
    def send(
        self,
        slot: int,
        seq: int,
        timestamp_ns: int = 0,
        payload: Optional[bytes] = None,
        marker: Optional[Marker] = None,
    ) -> None: ...
    def release(self, slot: int) -> None: ...
    @property
    def consumers(self) -> int: ...

class Listener:
    """Where a producer listens: a path, or "@name" for an abstract socket."""

    def __init__(self, address: str) -> None: ...
    @property
    def address(self) -> str: ...

class GpuDevice:
    """The process GPU device."""

    def cpu_waits(self) -> Tuple[int, int]: ...
    def signal(self) -> int: ...
    def wait(self, value: int, timeout: float = 5.0) -> None: ...
    def completion_fd(self, value: int) -> int: ...
    @property
    def completed_value(self) -> int: ...
    @property
    def last_signalled(self) -> int: ...
    @property
    def adapter(self) -> str: ...
    @property
    def uuid(self) -> bytes: ...
    @property
    def origin(self) -> str: ...

def device() -> GpuDevice: ...
def send(sock: Union[socket.socket, int], tensor: Tensor, inline: bool = False) -> None: ...
def recv(sock: Union[socket.socket, int], timeout: Optional[float] = None) -> Tensor: ...
def cuda_unavailable_reason() -> Optional[str]: ...
def export_blob(tensor: Tensor, inline: bool = False) -> Tuple[bytes, list[int]]:
    """The blob describing ``tensor`` and its fds (new ones, yours to close; none inline)."""
def import_blob(data: bytes, fds: list[int] = ...) -> Tensor:
    """The tensor a blob describes; ``fds`` are duplicated. Hostile input raises HandoffError."""
def from_dlpack(obj: Any) -> Tensor:
    """A tensor over a DLPack producer's memory (NumPy, PyTorch CPU or CUDA), without a copy."""
