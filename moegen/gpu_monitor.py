"""What the GPU's power state was while something ran: SM clock, board power, the software power
cap, and the energy counter, read through NVML (ctypes; no extra package).

A serving GPU runs at its power cap under load, and at lower SM clocks than a GPU that idles between
timings, so the tuner and the benchmark time at steady state and record these next to every
timing.  Without NVML (no driver, a CPU machine) every reading is None and nothing fails.
"""
from __future__ import annotations

import ctypes
import statistics
import threading
import time
from dataclasses import dataclass

NVML_CLOCK_SM = 1
SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap


@dataclass(frozen=True)
class PowerState:
    """Summary of the samples taken over one window."""
    sm_mhz_min: float | None = None
    sm_mhz_median: float | None = None
    power_w_median: float | None = None
    power_capped_share: float | None = None  # samples whose clock-event reasons include the SW power cap
    energy_j: float | None = None  # energy counter difference over the window


class _Nvml:
    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")

    def handle(self, pci_bus_id: str):
        h = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(h)) != 0:
            raise OSError(f"no NVML device at {pci_bus_id}")
        return h

    def sample(self, h) -> tuple[float, float, int] | None:
        mhz, mw, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        if (self.lib.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM, ctypes.byref(mhz)) != 0
                or self.lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(mw)) != 0):
            return None
        if self.lib.nvmlDeviceGetCurrentClocksEventReasons(h, ctypes.byref(reasons)) != 0:
            reasons.value = 0
        return float(mhz.value), mw.value / 1000.0, int(reasons.value)

    def energy_mj(self, h) -> int | None:
        e = ctypes.c_ulonglong()
        return int(e.value) if self.lib.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e)) == 0 else None


def _pci_bus_id(device) -> str | None:
    try:
        import torch
        p = torch.cuda.get_device_properties(device)
        return f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - no torch CUDA: no monitor
        return None


class GpuMonitor:
    """Samples the GPU every interval_s in a background thread; window() brackets a region."""

    def __init__(self, device="cuda", interval_s: float = 0.01):
        self._nvml = self._h = None
        self.samples: list[tuple[float, float, float, int]] = []  # (time, MHz, W, reasons)
        self._stop = threading.Event()
        self._thread = None
        bus = _pci_bus_id(device)
        try:
            if bus is None:
                raise OSError("no device")
            self._nvml = _Nvml()
            self._h = self._nvml.handle(bus)
        except (OSError, AttributeError):
            self._nvml = None
            return
        self.interval_s = interval_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def _run(self) -> None:
        while not self._stop.is_set():
            s = self._nvml.sample(self._h)
            if s is not None:
                self.samples.append((time.monotonic(), *s))
            self._stop.wait(self.interval_s)

    def energy_mj(self) -> int | None:
        return self._nvml.energy_mj(self._h) if self.available else None

    def summary(self, t0: float, t1: float, energy0: int | None, energy1: int | None) -> PowerState:
        energy = (energy1 - energy0) / 1000.0 if energy0 is not None and energy1 is not None else None
        return self.summary_over([(t0, t1)], energy)

    def summary_over(self, spans: list[tuple[float, float]], energy_j: float | None) -> PowerState:
        """One summary of the samples in several windows (a benchmark's interleaved rounds)."""
        window = [s for s in self.samples if any(t0 <= s[0] <= t1 for t0, t1 in spans)]
        if not window:
            return PowerState(energy_j=energy_j)
        mhz = [s[1] for s in window]
        return PowerState(sm_mhz_min=min(mhz), sm_mhz_median=statistics.median(mhz),
                          power_w_median=statistics.median(s[2] for s in window),
                          power_capped_share=sum(1 for s in window if s[3] & SW_POWER_CAP) / len(window),
                          energy_j=energy_j)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)


class Window:
    """with Window(monitor) as w: ...  then w.state (PowerState), w.seconds and w.span (monotonic start, end)."""

    def __init__(self, monitor: GpuMonitor | None):
        self.monitor, self.state, self.seconds = monitor, PowerState(), 0.0
        self.span = (0.0, 0.0)

    def __enter__(self) -> "Window":
        self._e0 = self.monitor.energy_mj() if self.monitor else None
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        t1 = time.monotonic()
        self.seconds, self.span = t1 - self._t0, (self._t0, t1)
        if self.monitor:
            self.state = self.monitor.summary(self._t0, t1, self._e0, self.monitor.energy_mj())
