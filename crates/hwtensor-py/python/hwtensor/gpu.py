"""The process GPU device and its timeline fence: one per process, whichever copies of
hwtensor are loaded (this package, the C library through ctypes)."""

from ._native import GpuDevice, device

__all__ = ["GpuDevice", "device"]
