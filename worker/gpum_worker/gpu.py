"""GPU telemetry: the ``GpuBackend`` interface, the real NVML backend and one-sample reads.

``NvmlBackend`` wraps ``pynvml`` from the ``nvidia-ml-py`` package and translates its
exceptions into the worker's ``GpuError`` types, so the sampling code never sees NVML
specifics:

* ``NVMLError_NotSupported``                         -> ``MetricNotSupported`` (absent metric)
* ``GpuIsLost``, ``GpuNotFound``, ``DriverNotLoaded``,
  ``Uninitialized``, ``LibRmVersionMismatch`` during
  a read                                             -> ``GpuLost`` (the GPU is flagged lost)
* any other ``NVMLError`` during a read             -> ``NvmlCallFailed`` (metric absent,
                                                       NVML_ERROR flag, logged)
* any ``NVMLError`` from the first ``nvmlInit``       -> ``NvmlUnavailable`` (fatal, clear text)

Driver reloads: after ``Uninitialized``, ``DriverNotLoaded`` or ``LibRmVersionMismatch``
(NVML as a whole is gone) every call reports the GPU lost without touching NVML until the
backend has shut NVML down and initialised it again; after ``GpuIsLost`` (one GPU) the
other GPUs keep being read and a re-initialisation is attempted too. Attempts back off:
the first at once, then 1 s doubling to ``reinit_cap_s`` (60 s) while the errors keep
coming; the backoff resets after ``2 * reinit_cap_s`` without such an error. After a
re-initialisation handles are looked up by UUID, so a GPU keeps its identity when the
driver numbers the devices differently.

``read_sample`` turns one round of backend calls into an immutable ``GpuSample``; it never
raises for a GPU-level failure. Nothing here ever falls back to simulated data.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import GpuError, GpuLost, MetricNotSupported, NvmlCallFailed, NvmlUnavailable

log = logging.getLogger("gpum_worker.gpu")

MIB = 1024 * 1024

METRICS = (
    "utilization",
    "memory",
    "temperature",
    "power",
    "power_limit",
    "fan",
    "ecc_uncorrected",
    "processes",
)
"""Metric names, in the order ``read_sample`` reads them."""


class GpuBackend(Protocol):
    """Read-only access to the GPUs of this machine (NVML, simulation or a test fake).

    Every per-GPU method raises ``MetricNotSupported``, ``GpuLost`` or ``NvmlCallFailed``
    (never a library-specific exception). ``init`` raises ``NvmlUnavailable``.
    """

    kind: str

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str | None: ...
    def device_count(self) -> int: ...
    def uuid(self, index: int) -> str: ...
    def name(self, index: int) -> str: ...
    def utilization(self, index: int) -> tuple[int, int]:
        """(gpu %, memory-controller %) over the driver's last sample period."""
        ...
    def memory(self, index: int) -> tuple[int, int]:
        """(used bytes, total bytes)."""
        ...
    def temperature(self, index: int) -> int:
        """Core temperature, degrees C."""
        ...
    def power_mw(self, index: int) -> int: ...
    def power_limit_mw(self, index: int) -> int: ...
    def fan_pct(self, index: int) -> int: ...
    def ecc_uncorrected(self, index: int) -> int:
        """Volatile (since driver load) total of uncorrected ECC errors."""
        ...
    def processes(self, index: int) -> list[tuple[int, int | None]]:
        """Running compute processes: (pid, used GPU memory bytes or None)."""
        ...


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str


@dataclass(frozen=True)
class GpuSample:
    """One read of one GPU. ``ok`` is False when the GPU was lost (then all metrics None).

    A metric is None when the GPU does not support it (name in ``unsupported``) or the
    call failed (name and message in ``errors``).
    """

    index: int
    uuid: str
    t: float
    ok: bool
    util_gpu_pct: int | None = None
    util_mem_pct: int | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    temp_c: int | None = None
    power_mw: int | None = None
    power_limit_mw: int | None = None
    fan_pct: int | None = None
    ecc_uncorrected_total: int | None = None
    processes: tuple[tuple[int, int | None], ...] | None = None
    unsupported: frozenset[str] = field(default_factory=frozenset)
    errors: tuple[tuple[str, str], ...] = ()
    lost_reason: str | None = None


def read_sample(backend: GpuBackend, gpu: GpuInfo, t: float) -> GpuSample:
    """Read every metric of ``gpu`` once. Never raises a ``GpuError``."""
    values: dict[str, Any] = {}
    unsupported: set[str] = set()
    errors: list[tuple[str, str]] = []
    calls = (
        ("utilization", backend.utilization),
        ("memory", backend.memory),
        ("temperature", backend.temperature),
        ("power", backend.power_mw),
        ("power_limit", backend.power_limit_mw),
        ("fan", backend.fan_pct),
        ("ecc_uncorrected", backend.ecc_uncorrected),
        ("processes", backend.processes),
    )
    for metric, call in calls:
        try:
            values[metric] = call(gpu.index)
        except MetricNotSupported:
            unsupported.add(metric)
        except GpuLost as e:
            return GpuSample(index=gpu.index, uuid=gpu.uuid, t=t, ok=False, lost_reason=str(e))
        except NvmlCallFailed as e:
            errors.append((metric, str(e)))
        except GpuError as e:  # any other GpuError subclass: treat like a failed call
            errors.append((metric, str(e)))
    util = values.get("utilization")
    mem = values.get("memory")
    procs = values.get("processes")
    return GpuSample(
        index=gpu.index,
        uuid=gpu.uuid,
        t=t,
        ok=True,
        util_gpu_pct=None if util is None else int(util[0]),
        util_mem_pct=None if util is None else int(util[1]),
        mem_used_mib=None if mem is None else int(mem[0]) // MIB,
        mem_total_mib=None if mem is None else int(mem[1]) // MIB,
        temp_c=values.get("temperature"),
        power_mw=values.get("power"),
        power_limit_mw=values.get("power_limit"),
        fan_pct=values.get("fan"),
        ecc_uncorrected_total=values.get("ecc_uncorrected"),
        processes=None if procs is None else tuple((int(p), u) for p, u in procs),
        unsupported=frozenset(unsupported),
        errors=tuple(errors),
    )


def discover(backend: GpuBackend) -> list[GpuInfo]:
    """List the GPUs the backend sees; a GPU whose identity cannot be read is logged and skipped."""
    gpus: list[GpuInfo] = []
    for i in range(backend.device_count()):
        try:
            uuid = backend.uuid(i)
        except GpuError as e:
            log.error("GPU %d: cannot read its UUID (%s); it will not be used", i, e)
            continue
        try:
            name = backend.name(i)
        except GpuError:
            name = "unknown"
        gpus.append(GpuInfo(index=i, uuid=uuid, name=name))
    return gpus


# ---------------------------------------------------------------------------- real NVML

_NO_DRIVER_HINT = (
    "no usable NVIDIA driver: {detail}. Install/load the NVIDIA driver (check `nvidia-smi`), "
    "or pass --simulate explicitly to run with simulated GPUs"
)


class NvmlBackend:
    """``GpuBackend`` over NVML (``pynvml`` from nvidia-ml-py).

    ``nvml`` may be injected (a module-like object with the pynvml API) for tests; by
    default the real ``pynvml`` module is imported lazily in ``init``.
    """

    kind = "nvml"

    def __init__(self, nvml: Any = None, *, clock: Any = time.monotonic,
                 reinit_base_s: float = 1.0, reinit_cap_s: float = 60.0) -> None:
        self._nv = nvml
        self._handles: dict[int, Any] = {}
        self._uuids: dict[int, str] = {}
        self._initialized = False
        self._clock = clock
        self.reinit_base_s = reinit_base_s
        self.reinit_cap_s = reinit_cap_s
        self.reinits = 0
        """Successful re-initialisations so far."""
        self._reinit_reason: str | None = None  # a re-init is wanted, and why
        self._blocked = False  # NVML as a whole is unusable until re-initialised
        self._reinit_attempts = 0
        self._next_reinit_at = 0.0
        self._last_trigger_at: float | None = None

    def init(self) -> None:
        if self._nv is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as e:  # pragma: no cover - dependency is declared
                raise NvmlUnavailable(
                    "the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
                ) from e
            self._nv = pynvml
        nv = self._nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise NvmlUnavailable(_NO_DRIVER_HINT.format(detail=_nvml_text(nv, e))) from e
        self._initialized = True

    def shutdown(self) -> None:
        if self._initialized:
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError as e:
                log.warning("nvmlShutdown failed: %s", _nvml_text(self._nv, e))
            self._initialized = False
            self._handles.clear()

    def _call(self, what: str, index: int | None, fn: Any, *args: Any) -> Any:
        nv = self._nv
        self._maybe_reinit()
        try:
            return fn(*args)
        except nv.NVMLError as e:
            raise self._translate(e, what, index) from e

    def _translate(self, e: Exception, what: str, index: int | None) -> GpuError:
        nv = self._nv
        where = f"GPU {index}: {what}" if index is not None else what
        text = _nvml_text(nv, e)
        if isinstance(e, nv.NVMLError_NotSupported):
            return MetricNotSupported(f"{where}: not supported")
        whole = (nv.NVMLError_DriverNotLoaded, nv.NVMLError_Uninitialized,
                 nv.NVMLError_LibRmVersionMismatch)
        if isinstance(e, whole):
            self._want_reinit(f"{where}: {text}", blocking=True)
            return GpuLost(f"{where}: {text}")
        if isinstance(e, nv.NVMLError_GpuIsLost):
            self._want_reinit(f"{where}: {text}", blocking=False)
            return GpuLost(f"{where}: {text}")
        if isinstance(e, nv.NVMLError_GpuNotFound) or (
                what == "get handle" and isinstance(e, nv.NVMLError_NotFound)):
            if index is not None:
                self._handles.pop(index, None)
            return GpuLost(f"{where}: {text}")
        return NvmlCallFailed(f"{where}: {text}")

    # ------------------------------------------------------------------ re-initialisation

    def _want_reinit(self, reason: str, *, blocking: bool) -> None:
        """Schedule a shutdown + init; ``blocking``: NVML is unusable until it succeeds."""
        now = self._clock()
        quiet = (self._last_trigger_at is None
                 or now - self._last_trigger_at >= 2 * self.reinit_cap_s)
        self._last_trigger_at = now
        if quiet:
            self._reinit_attempts = 0
        if self._reinit_reason is None:
            log.log(logging.ERROR if quiet else logging.DEBUG,
                    "NVML failed (%s); re-initialising NVML (a driver reload or a GPU "
                    "reset?); until then the GPUs concerned are not billable", reason)
            self._reinit_reason = reason
            self._next_reinit_at = max(self._next_reinit_at, now)
        self._blocked = self._blocked or blocking
        if blocking:
            self._handles.clear()

    def _maybe_reinit(self) -> None:
        """Re-initialise NVML when one is wanted and its backoff has passed.

        Raises ``GpuLost`` while NVML as a whole is unusable, so no call reaches it.
        """
        if self._reinit_reason is None:
            return
        now = self._clock()
        if now < self._next_reinit_at:
            if self._blocked:
                raise GpuLost(f"NVML is unavailable ({self._reinit_reason}); next "
                              f"re-initialisation in {self._next_reinit_at - now:.1f}s")
            return
        nv = self._nv
        self._reinit_attempts += 1
        delay = min(self.reinit_cap_s,
                    self.reinit_base_s * 2 ** min(self._reinit_attempts - 1, 30))
        self._next_reinit_at = now + delay
        self._handles.clear()
        if self._initialized:
            try:
                nv.nvmlShutdown()
            except nv.NVMLError:
                pass  # the old library state is gone anyway
            self._initialized = False
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            self._blocked = True
            log.warning("NVML re-initialisation %d failed (%s); next try in %.0fs",
                        self._reinit_attempts, _nvml_text(nv, e), delay)
            raise GpuLost(f"NVML re-initialisation failed: {_nvml_text(nv, e)}") from e
        self._initialized = True
        self.reinits += 1
        log.log(logging.WARNING if self._blocked or self._reinit_attempts == 1
                else logging.DEBUG, "NVML re-initialised (attempt %d) after: %s",
                self._reinit_attempts, self._reinit_reason)
        self._reinit_reason = None
        self._blocked = False

    def driver_version(self) -> str | None:
        try:
            v = self._call("driver version", None, self._nv.nvmlSystemGetDriverVersion)
        except GpuError:
            return None
        return v.decode() if isinstance(v, bytes) else str(v)

    def device_count(self) -> int:
        try:
            return int(self._call("device count", None, self._nv.nvmlDeviceGetCount))
        except GpuError as e:
            raise NvmlUnavailable(_NO_DRIVER_HINT.format(detail=str(e))) from e

    def _h(self, index: int) -> Any:
        self._maybe_reinit()  # first, so no handle from before a re-init is handed out
        h = self._handles.get(index)
        if h is None:
            uuid = self._uuids.get(index)
            if self.reinits and uuid is not None:  # indexes may have changed: find by UUID
                h = self._call("get handle", index, self._nv.nvmlDeviceGetHandleByUUID, uuid)
            else:
                h = self._call("get handle", index, self._nv.nvmlDeviceGetHandleByIndex,
                               index)
            self._handles[index] = h
        return h

    def uuid(self, index: int) -> str:
        v = self._call("uuid", index, self._nv.nvmlDeviceGetUUID, self._h(index))
        uuid = v.decode() if isinstance(v, bytes) else str(v)
        self._uuids.setdefault(index, uuid)  # the identity of index ``index`` from now on
        return uuid

    def name(self, index: int) -> str:
        v = self._call("name", index, self._nv.nvmlDeviceGetName, self._h(index))
        return v.decode() if isinstance(v, bytes) else str(v)

    def utilization(self, index: int) -> tuple[int, int]:
        u = self._call("utilization", index, self._nv.nvmlDeviceGetUtilizationRates,
                       self._h(index))
        return int(u.gpu), int(u.memory)

    def memory(self, index: int) -> tuple[int, int]:
        m = self._call("memory", index, self._nv.nvmlDeviceGetMemoryInfo, self._h(index))
        return int(m.used), int(m.total)

    def temperature(self, index: int) -> int:
        nv = self._nv
        return int(self._call("temperature", index, nv.nvmlDeviceGetTemperature, self._h(index),
                              nv.NVML_TEMPERATURE_GPU))

    def power_mw(self, index: int) -> int:
        return int(self._call("power", index, self._nv.nvmlDeviceGetPowerUsage, self._h(index)))

    def power_limit_mw(self, index: int) -> int:
        return int(self._call("power limit", index, self._nv.nvmlDeviceGetEnforcedPowerLimit,
                              self._h(index)))

    def fan_pct(self, index: int) -> int:
        return int(self._call("fan", index, self._nv.nvmlDeviceGetFanSpeed, self._h(index)))

    def ecc_uncorrected(self, index: int) -> int:
        nv = self._nv
        return int(self._call("ecc", index, nv.nvmlDeviceGetTotalEccErrors, self._h(index),
                              nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC))

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        procs = self._call("processes", index, self._nv.nvmlDeviceGetComputeRunningProcesses,
                           self._h(index))
        out: list[tuple[int, int | None]] = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            if used is not None and (used < 0 or used >= 2**64 - 1):
                used = None  # NVML_VALUE_NOT_AVAILABLE
            out.append((int(p.pid), None if used is None else int(used)))
        return out


def _nvml_text(nv: Any, e: Exception) -> str:
    try:
        return f"{type(e).__name__}: {e}"
    except Exception:  # noqa: BLE001 - pynvml's __str__ may call into the library
        return type(e).__name__
