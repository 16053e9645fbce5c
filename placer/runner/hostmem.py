"""Host memory for embedding rows, and how the GPU reads it (the "host read mechanism").

Three mechanisms, reported as ``host_read_mechanism`` in every run:

- ``uva``: the rows live in page-locked host memory that is mapped into the GPU's address space
  (cudaHostRegister with the Mapped flag). A CUDA tensor is wrapped around the device pointer, so the ordinary
  ``embedding_bag`` / ``index_select`` kernels gather rows straight across PCIe, and the optimizer's
  read-modify-write of cold rows runs on the GPU across PCIe too. Two ways to get the device view, tried in
  order: CuPy (``runtime.hostRegister`` + ``runtime.hostGetDevicePointer``, handed to PyTorch by DLPack), then
  PyTorch alone (``torch.cuda.cudart().cudaHostRegister``, the device pointer from cudaHostGetDevicePointer via
  ctypes - under unified virtual addressing it equals the host pointer - wrapped through
  ``__cuda_array_interface__``). Each is checked
  with a small read and write before it is used.
- ``cpu_gather_copy``: no device view could be made (or it failed the check). The CPU gathers the needed rows
  from pinned host memory and copies them to the GPU (H2D), where they are pooled; gradients come back as
  pooled gradients (D2H) and the CPU updates the rows.
- ``cpu``: a CPU run. "Device" and host memory are both RAM; the GPU-read path runs the very same kernels on
  plain CPU tensors (the CPU stands in for the GPU reading host memory).

Large registrations avoid PyTorch's and CuPy's pinned-memory pools, which round every request up to a power of
two: the buffer is an ordinary page-aligned allocation that is registered in place.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

PAGE = 4096
CUDA_HOST_REGISTER_PORTABLE = 1
CUDA_HOST_REGISTER_MAPPED = 2
MECHANISMS = ("uva", "cpu_gather_copy", "cpu")

_TYPESTR = {torch.float32: "<f4", torch.float16: "<f2", torch.int32: "<i4", torch.int64: "<i8", torch.uint8: "|u1",
            torch.bfloat16: "<i2"}  # no bf16 typestr: its 2-byte words, viewed back as bf16 (_map)


@dataclass
class HostTensor:
    """Rows in host memory: ``cpu`` is the CPU view; ``dev`` a view the GPU kernels can read and write
    (the same memory, mapped), or None when the GPU cannot address it (then rows travel by copy)."""

    cpu: torch.Tensor
    dev: torch.Tensor | None
    pinned: bool
    owner: object = None  # keeps the backing allocation alive

    @property
    def nbytes(self) -> int:
        return self.cpu.numel() * self.cpu.element_size()


class _CudaArray:
    """Minimal ``__cuda_array_interface__`` exporter so torch.as_tensor can wrap a raw device pointer."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: torch.dtype, owner: object):
        self.__cuda_array_interface__ = {"data": (int(ptr), False), "shape": tuple(int(s) for s in shape),
                                         "typestr": _TYPESTR[dtype], "strides": None, "version": 2}
        self._owner = owner


def _aligned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor whose storage starts on a page boundary (safe to register with the CUDA driver)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = 1
    for s in shape:
        numel *= int(s)
    nbytes = max(numel * itemsize, 1)
    raw = torch.empty(nbytes + PAGE, dtype=torch.uint8)
    offset = (-raw.data_ptr()) % PAGE
    return raw[offset:offset + numel * itemsize].view(dtype).view(*shape) if numel else raw[:0].view(dtype).view(*shape)


def _host_get_device_pointer(ptr: int) -> int:
    """cudaHostGetDevicePointer through ctypes on the CUDA runtime torch loaded; the host pointer itself when
    the runtime library cannot be found (with unified virtual addressing the two are equal on Linux GPUs that
    can use host pointers for registered memory, which the probe then verifies)."""
    import ctypes

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"):
        try:
            fn = ctypes.CDLL(name).cudaHostGetDevicePointer
            out = ctypes.c_void_p()
            err = fn(ctypes.byref(out), ctypes.c_void_p(ptr), ctypes.c_uint(0))
        except (OSError, AttributeError):
            continue
        if err == 0 and out.value:
            return int(out.value)
        break  # this runtime refused (e.g. not the one torch uses): rely on the UVA identity, which the probe checks
    return int(ptr)


def _cuda_error_code(err) -> int:
    value = getattr(err, "value", err)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0 if str(err).endswith("Success") else -1


@dataclass
class HostMemory:
    """Allocates host-resident rows for one run and knows how the compute device reads them.

    ``prefer``: "auto" (uva if it works, else cpu_gather_copy), "uva" (fail if unavailable), or
    "cpu_gather_copy" (force the fallback; on a CPU run it exercises the fallback's code with copies that are
    no-ops)."""

    device: torch.device
    prefer: str = "auto"
    mechanism: str = field(init=False)
    detail: str = field(init=False)
    _registered: list = field(default_factory=list, init=False, repr=False)
    _way: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.prefer not in ("auto", "uva", "cpu_gather_copy"):
            raise ValueError(f"unknown host read mechanism {self.prefer!r}")
        if self.device.type != "cuda":
            if self.prefer == "cpu_gather_copy":
                self.mechanism, self.detail = "cpu_gather_copy", "CPU run with the gather+copy path forced"
            else:
                self.mechanism, self.detail = "cpu", "CPU run: host rows are plain RAM tensors read in place"
            return
        if self.prefer == "cpu_gather_copy":
            self.mechanism, self.detail = "cpu_gather_copy", "forced by --host-read cpu_gather_copy"
            return
        failures = []
        for way in ("cupy", "torch_cudart"):
            try:
                self._probe(way)
                self._way = way
                self.mechanism = "uva"
                self.detail = {"cupy": "pinned host rows mapped with CuPy hostRegister + hostGetDevicePointer, "
                                       "wrapped as a CUDA tensor through DLPack",
                               "torch_cudart": "pinned host rows registered with cudaHostRegister(Mapped); the UVA "
                                               "pointer wrapped as a CUDA tensor (__cuda_array_interface__)"}[way]
                return
            except Exception as exc:  # noqa: BLE001 - any failure means: this way does not work here
                failures.append(f"{way}: {type(exc).__name__}: {exc}")
        if self.prefer == "uva":
            from placer.errors import PlacerError
            raise PlacerError("no way for the GPU to read pinned host memory here (" + "; ".join(failures) + ")")
        self.mechanism = "cpu_gather_copy"
        self.detail = "GPU mapping of host memory unavailable (" + "; ".join(failures) + ")"

    # ---- allocation ---------------------------------------------------------------------------------------

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype, *, gpu_readable: bool) -> HostTensor:
        """Host rows; ``gpu_readable`` asks for a device view (only honoured under the uva mechanism)."""
        shape = tuple(int(s) for s in shape)
        if self.device.type != "cuda":
            t = torch.empty(shape, dtype=dtype)
            return HostTensor(cpu=t, dev=t if self.mechanism == "cpu" else None, pinned=False)
        cpu = _aligned_empty(shape, dtype)
        want_map = gpu_readable and self.mechanism == "uva"
        if cpu.numel() == 0:
            return HostTensor(cpu=cpu, dev=cpu.to(self.device) if want_map else None, pinned=False)
        if want_map:
            dev = self._map(cpu, self._way)
            return HostTensor(cpu=cpu, dev=dev, pinned=True, owner=cpu)
        pinned = self._register(cpu, CUDA_HOST_REGISTER_PORTABLE, "torch_cudart", quiet=True)
        return HostTensor(cpu=cpu, dev=None, pinned=pinned, owner=cpu)

    def zeros(self, shape, dtype, *, gpu_readable: bool) -> HostTensor:
        h = self.empty(shape, dtype, gpu_readable=gpu_readable)
        h.cpu.zero_()
        return h

    # ---- CUDA plumbing ------------------------------------------------------------------------------------

    def _register(self, cpu: torch.Tensor, flags: int, way: str, quiet: bool = False) -> bool:
        ptr, nbytes = cpu.data_ptr(), cpu.numel() * cpu.element_size()
        try:
            if way == "cupy":
                import cupy
                cupy.cuda.runtime.hostRegister(ptr, nbytes, flags)
            else:
                err = torch.cuda.cudart().cudaHostRegister(ptr, nbytes, flags)
                if _cuda_error_code(err) != 0:
                    raise RuntimeError(f"cudaHostRegister returned {err}")
        except Exception:
            if quiet:
                return False
            raise
        self._registered.append((way, ptr, cpu))  # the reference keeps the memory alive until unregistered
        return True

    def _map(self, cpu: torch.Tensor, way: str) -> torch.Tensor:
        """Register ``cpu`` as mapped pinned memory and return a CUDA tensor over the same bytes."""
        self._register(cpu, CUDA_HOST_REGISTER_PORTABLE | CUDA_HOST_REGISTER_MAPPED, way)
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        if way == "cupy":
            import cupy
            with cupy.cuda.Device(index):
                dptr = cupy.cuda.runtime.hostGetDevicePointer(cpu.data_ptr(), 0)
                nbytes = cpu.numel() * cpu.element_size()
                mem = cupy.cuda.UnownedMemory(dptr, nbytes, cpu, index)
                arr = cupy.ndarray(tuple(cpu.shape), dtype=str(cpu.dtype).replace("torch.", ""),
                                   memptr=cupy.cuda.MemoryPointer(mem, 0))
                return torch.from_dlpack(arr)
        with torch.cuda.device(index):
            dptr = _host_get_device_pointer(cpu.data_ptr())
            out = torch.as_tensor(_CudaArray(dptr, tuple(cpu.shape), cpu.dtype, cpu), device=self.device)
            return out.view(torch.bfloat16) if cpu.dtype == torch.bfloat16 else out

    def _probe(self, way: str) -> None:
        """Map a small buffer, read it with a gather kernel on the GPU and write it from the GPU."""
        if way == "cupy":
            import cupy  # noqa: F401  (ImportError = not available)
        rows, cols = 4096, 8
        cpu = _aligned_empty((rows, cols), torch.float32)
        cpu.copy_(torch.arange(rows * cols, dtype=torch.float32).view(rows, cols))
        try:
            dev = self._map(cpu, way)
            if dev.device.type != "cuda":
                raise RuntimeError(f"mapped view is on {dev.device}, not CUDA")
            idx = torch.tensor([0, 17, 4095, 1234], device=self.device)
            got = torch.nn.functional.embedding_bag(idx, dev, torch.tensor([0, 2], device=self.device), mode="sum")
            want = torch.nn.functional.embedding_bag(idx.cpu(), cpu, torch.tensor([0, 2]), mode="sum")
            if not torch.equal(got.cpu(), want):
                raise RuntimeError("GPU read of mapped host memory returned wrong values")
            dev.mul_(2.0)
            torch.cuda.synchronize(self.device)
            if cpu[4095, 7].item() != 2.0 * (rows * cols - 1):
                raise RuntimeError("GPU write to mapped host memory not visible on the host")
            del dev
        finally:
            torch.cuda.synchronize(self.device)
            self.close()

    def close(self) -> None:
        """Unregister everything this object registered (call when the run is over: mapped device views stop
        being valid). Registered buffers are kept alive until then, so no freed range stays registered."""
        while self._registered:
            way, ptr, _buffer = self._registered.pop()
            try:
                if way == "cupy":
                    import cupy
                    cupy.cuda.runtime.hostUnregister(ptr)
                else:
                    torch.cuda.cudart().cudaHostUnregister(ptr)
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse instead of returning it to the OS (no mmap for large blocks, no
    trimming), so that a tensor freed in one step and allocated again in the next reuses warm pages instead
    of page-faulting fresh ones: PyTorch's CPU allocator has no cache of its own. The runner and ``placer
    calibrate`` both call it, so that op costs are measured in the regime the runner runs in. Returns False
    where mallopt is not available (not glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
