"""Which runtime embeds: KB_ENGINE_RUNTIME `auto`, `onnx` or `torch`.

ONNX Runtime (onnx_embedder.py) is the default: on a CPU it is as fast as torch in float32 with a fraction of
the install and the memory, and the `engine` extra installs nothing else. torch with sentence-transformers
(the `gpu` extra) is what runs the model on a GPU. So `auto` takes torch only when it is installed AND a CUDA
or MPS device is present (KB_ENGINE_DEVICE=auto finds one, or names one), else ONNX on the CPU.

A runtime named explicitly that is not installed stops the engine at start with a message naming the
setting, as a named device does (device.py). What is installed and which accelerators exist are parameters,
so that every branch is tested on a machine with neither a GPU nor a missing package
(tests/engine/test_engine_runtime.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

from ..errors import ConfigError
from .device import Probe, accelerator_may_be_present, available_accelerators, select_device

RUNTIME_CHOICES = ("auto", "onnx", "torch")


@dataclasses.dataclass(frozen=True)
class Installed:
    """Which runtimes' packages can be imported here."""

    onnx: bool
    torch: bool


def installed_runtimes() -> Installed:
    def have(*modules: str) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in modules)

    # No `onnx` (onnx_proto.py writes the graph's bytes), no `tokenizers` (wordpiece.py reads tokenizer.json).
    return Installed(onnx=have("onnxruntime", "safetensors"),
                     torch=have("torch", "sentence_transformers"))


def needs_accelerator_probe(choice: str, device: str, installed: Installed,
                            hint: Callable[[], bool] = accelerator_may_be_present) -> bool:
    """Whether choosing means importing torch to look for a GPU (a second or two, so the loader does it in
    the background); a named device is looked for at start, as device.py does."""
    if not installed.torch or choice == "onnx" or device != "auto":
        return False
    return choice == "torch" or not installed.onnx or hint()


def select_runtime(choice: str, device: str, installed: Installed, probe: Probe = available_accelerators,
                   hint: Callable[[], bool] = accelerator_may_be_present) -> tuple[str, str]:
    """(runtime, device) for KB_ENGINE_RUNTIME=`choice` and KB_ENGINE_DEVICE=`device`; ConfigError naming the
    setting when the combination cannot run here. `hint()` is a cheap look for a GPU driver that spares
    importing torch (whose `probe` is the real test) on machines that plainly have none."""
    if choice not in RUNTIME_CHOICES:
        raise ConfigError(f"KB_ENGINE_RUNTIME must be one of {', '.join(RUNTIME_CHOICES)}, got {choice!r}")
    if choice == "torch":
        if not installed.torch:
            raise ConfigError("KB_ENGINE_RUNTIME=torch but torch and sentence-transformers are not installed: "
                              "pip install 'kb-bridge[gpu]', or set KB_ENGINE_RUNTIME=auto")
        return "torch", select_device(device, probe)
    if choice == "onnx":
        if not installed.onnx:
            raise ConfigError("KB_ENGINE_RUNTIME=onnx but onnxruntime and safetensors are not both "
                              "installed: pip install 'kb-bridge[engine]'")
        if device not in ("auto", "cpu"):
            raise ConfigError(f"KB_ENGINE_RUNTIME=onnx runs on the CPU, but KB_ENGINE_DEVICE={device}: "
                              "set KB_ENGINE_RUNTIME=auto or torch (with the `gpu` extra) for a GPU")
        return "onnx", "cpu"
    return _auto(device, installed, probe, hint)


def _auto(device: str, installed: Installed, probe: Probe, hint: Callable[[], bool]) -> tuple[str, str]:
    if device in ("cuda", "mps"):
        if not installed.torch:
            raise ConfigError(f"KB_ENGINE_DEVICE={device} (--device {device}) needs torch and "
                              "sentence-transformers: pip install 'kb-bridge[gpu]'")
        return "torch", select_device(device, probe)
    if installed.torch and device == "auto" and hint():
        found = select_device("auto", probe)
        if found != "cpu":
            return "torch", found
    if installed.onnx:
        return "onnx", "cpu"
    if installed.torch:  # an install with the `gpu` extra but without the `engine` one
        return "torch", select_device(device, probe)
    raise ConfigError("no embedding runtime is installed: pip install 'kb-bridge[engine]'")


def load_onnxruntime_first(embedder: str, runtime: str) -> None:
    """Import onnxruntime now, before the store imports usearch, wherever the model may run on it.

    usearch's wheels from 2.26.2 on carry a static copy of libstdc++ and export its symbols; loaded before
    onnxruntime (1.23 and later), they make onnxruntime's import kill the process (SIGSEGV in a virtual call
    on a codecvt facet during its module initialisation: usearch 2.26.6 with onnxruntime 1.32.0 here). In
    the other order both work. So the engine loads onnxruntime before it opens the store (engine.py), and
    the engine tests before they collect anything (tests/engine/conftest.py). setup.cfg holds usearch below
    2.25 now, but an environment may hold a later one: the order costs nothing.
    """
    if embedder == "none" or runtime == "torch" or importlib.util.find_spec("onnxruntime") is None:
        return
    import onnxruntime  # noqa: F401

