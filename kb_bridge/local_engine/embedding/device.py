"""Which device the model runs on: KB_ENGINE_DEVICE (or --device) `auto`, `cpu`, `cuda` or `mps`.

`auto` takes CUDA, then Apple's MPS, then the CPU. A device asked for by name that this machine lacks
stops the engine at start with a message naming the setting: silently falling back to the CPU would make a
GPU deployment ten times slower without anyone noticing. The probe is injectable so that the choice is
tested on machines without a GPU (tests/engine/test_engine_device.py); the GPU paths themselves run only
where there is one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from pathlib import Path

from ..errors import ConfigError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
_PREFERENCE = ("cuda", "mps")

Probe = Callable[[], Collection[str]]


def available_accelerators() -> set[str]:
    """The accelerators torch can use here ("cuda", "mps"); imports torch."""
    import torch

    found = set()
    if torch.cuda.is_available():
        found.add("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.add("mps")
    return found


def accelerator_may_be_present() -> bool:
    """False only where there is plainly no GPU for torch: not macOS (MPS) and no NVIDIA or AMD (ROCm) driver
    on Linux. It spares importing torch (1.5 s and 200 MB here) just to learn that the CPU it is."""
    if not sys.platform.startswith("linux"):
        return True  # macOS may have MPS; elsewhere there is no cheap look
    return any(Path(path).exists() for path in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd"))


def select_device(choice: str, probe: Probe = available_accelerators) -> str:
    """The device to run the model on for this choice; ConfigError when a named device is absent."""
    if choice not in DEVICE_CHOICES:
        raise ConfigError(f"KB_ENGINE_DEVICE (--device) must be one of {', '.join(DEVICE_CHOICES)}, got {choice!r}")
    if choice == "cpu":
        return "cpu"
    found = probe()
    if choice == "auto":
        return next((device for device in _PREFERENCE if device in found), "cpu")
    if choice not in found:
        what = {"cuda": "no CUDA device is visible to torch (torch.cuda.is_available() is False; is this a CUDA "
                        "build of torch, and is the driver loaded?)",
                "mps": "Apple's MPS is not available (torch.backends.mps.is_available() is False)"}[choice]
        raise ConfigError(f"KB_ENGINE_DEVICE={choice} (--device {choice}) but {what}; "
                          "use --device auto or --device cpu")
    return choice


def half_precision(device: str) -> str:
    """The 16-bit number format to try on this device: bfloat16 where the hardware has it, else float16."""
    if device == "cuda":
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if device == "mps":
        return "float16"
    return "bfloat16"
