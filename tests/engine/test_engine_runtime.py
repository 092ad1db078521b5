"""KB_ENGINE_RUNTIME: ONNX on the CPU by default, torch where it is installed and a GPU is present, and a clear
stop when a runtime named explicitly is not installed.

This machine has no GPU (and has both runtimes installed): what is installed, the cheap look for a GPU driver
and torch's own probe are all injected, so that every branch runs here. The CUDA and MPS paths themselves
run only where there is such a device (docs/engine.md says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import flask
import pytest

from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.embedding import runtime as runtime_module
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir
from kb_bridge.local_engine.embedding.runtime import Installed, needs_accelerator_probe, select_runtime
from kb_bridge.local_engine.errors import ConfigError

from kb_bridge.testing.engine_app import wait_for

BOTH = Installed(onnx=True, torch=True)
ONNX_ONLY = Installed(onnx=True, torch=False)
TORCH_ONLY = Installed(onnx=False, torch=True)


def probe_finding(*found: str) -> Callable[[], set[str]]:
    return lambda: set(found)


def never(what: str) -> Callable[[], set[str]]:
    def called() -> set[str]:
        raise AssertionError(f"{what} must not be probed")

    return called


def no_driver() -> bool:
    return False


def driver() -> bool:
    return True


@pytest.mark.parametrize(("found", "expected"), [
    ({"cuda"}, ("torch", "cuda")),
    ({"mps"}, ("torch", "mps")),
    ({"cuda", "mps"}, ("torch", "cuda")),
    (set(), ("onnx", "cpu")),
])
def test_auto_takes_torch_only_with_a_gpu(found: set[str], expected: tuple[str, str]) -> None:
    assert select_runtime("auto", "auto", BOTH, probe_finding(*found), driver) == expected


def test_auto_without_torch_is_onnx_and_looks_for_no_gpu() -> None:
    assert select_runtime("auto", "auto", ONNX_ONLY, never("torch"), driver) == ("onnx", "cpu")


def test_auto_does_not_import_torch_where_there_is_plainly_no_gpu() -> None:
    assert select_runtime("auto", "auto", BOTH, never("torch"), no_driver) == ("onnx", "cpu")


def test_auto_on_a_named_cpu_is_onnx_even_with_a_gpu() -> None:
    assert select_runtime("auto", "cpu", BOTH, probe_finding("cuda"), driver) == ("onnx", "cpu")


def test_auto_with_a_named_gpu_takes_torch() -> None:
    assert select_runtime("auto", "cuda", BOTH, probe_finding("cuda"), no_driver) == ("torch", "cuda")


def test_auto_with_a_named_gpu_but_without_torch_says_what_to_install() -> None:
    with pytest.raises(ConfigError) as raised:
        select_runtime("auto", "cuda", ONNX_ONLY, never("torch"), driver)
    assert "KB_ENGINE_DEVICE=cuda" in raised.value.message and "kb-bridge[gpu]" in raised.value.message


def test_auto_with_a_named_gpu_that_is_absent_names_the_device() -> None:
    with pytest.raises(ConfigError, match="KB_ENGINE_DEVICE=mps"):
        select_runtime("auto", "mps", BOTH, probe_finding(), driver)


def test_auto_with_torch_but_without_onnx_runs_torch_on_the_cpu() -> None:
    assert select_runtime("auto", "auto", TORCH_ONLY, probe_finding(), no_driver) == ("torch", "cpu")


def test_onnx_is_the_cpu() -> None:
    assert select_runtime("onnx", "auto", BOTH, never("torch"), driver) == ("onnx", "cpu")
    assert select_runtime("onnx", "cpu", BOTH, never("torch"), driver) == ("onnx", "cpu")
    with pytest.raises(ConfigError, match="KB_ENGINE_RUNTIME=onnx runs on the CPU, but KB_ENGINE_DEVICE=cuda"):
        select_runtime("onnx", "cuda", BOTH, probe_finding("cuda"), driver)


def test_onnx_named_but_not_installed_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"KB_ENGINE_RUNTIME=onnx .*kb-bridge\[engine\]"):
        select_runtime("onnx", "auto", TORCH_ONLY, never("torch"), driver)


def test_torch_named_runs_torch_on_the_device_it_finds() -> None:
    assert select_runtime("torch", "auto", BOTH, probe_finding(), no_driver) == ("torch", "cpu")
    assert select_runtime("torch", "auto", BOTH, probe_finding("cuda"), no_driver) == ("torch", "cuda")


def test_torch_named_but_not_installed_names_the_setting() -> None:
    with pytest.raises(ConfigError) as raised:
        select_runtime("torch", "auto", ONNX_ONLY, never("torch"), driver)
    assert "KB_ENGINE_RUNTIME=torch" in raised.value.message and "kb-bridge[gpu]" in raised.value.message


@pytest.mark.parametrize(("choice", "device", "installed", "hint", "expected"), [
    ("auto", "auto", BOTH, driver, True),       # a driver: torch must look, in the background
    ("auto", "auto", BOTH, no_driver, False),   # plainly no GPU: decided at once, torch never imported
    ("auto", "auto", ONNX_ONLY, driver, False),
    ("auto", "auto", TORCH_ONLY, no_driver, True),
    ("torch", "auto", BOTH, no_driver, True),
    ("torch", "auto", ONNX_ONLY, driver, False),  # not installed: an error at start, not in the background
    ("onnx", "auto", BOTH, driver, False),
    ("auto", "cuda", BOTH, driver, False),       # a named device is checked at start (device.py)
])
def test_what_is_decided_at_start_and_what_while_loading(choice: str, device: str, installed: Installed,
                                                         hint: Callable[[], bool], expected: bool) -> None:
    assert needs_accelerator_probe(choice, device, installed, hint) is expected


def test_the_setting_is_validated_when_read(tmp_path: Path) -> None:
    assert load_config({"KB_ENGINE_DATA": str(tmp_path)}).runtime == "auto"
    assert load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_ENGINE_RUNTIME": "ONNX"}).runtime == "onnx"
    with pytest.raises(ConfigError, match="KB_ENGINE_RUNTIME must be one of auto, onnx, torch"):
        load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_ENGINE_RUNTIME": "tensorflow"})


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(runtime_module, "installed_runtimes", lambda: ONNX_ONLY)
    yield


@pytest.mark.skipif(bundled_model_dir() is None, reason="needs the embedding model (kb-bridge[engine])")
@pytest.mark.parametrize("embedder", ["auto", "minilm"])
def test_an_engine_told_to_use_torch_without_it_stops_at_start(
    make_app: Callable[..., flask.Flask], without_torch: None, embedder: str,
) -> None:
    with pytest.raises(ConfigError, match=r"KB_ENGINE_RUNTIME=torch .*kb-bridge\[gpu\]"):
        make_app(embedder=embedder, runtime="torch", wait_for_model=True)


def _processes(pid: int) -> list[int]:
    """`pid` and its descendants (the engine's gunicorn master and its worker)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            found += _processes(int(child))
    return found


@pytest.mark.skipif(bundled_model_dir() is None or not runtime_module.installed_runtimes().onnx,
                    reason="needs the model and the ONNX runtime (kb-bridge[engine])")
def test_a_real_engine_reports_its_runtime_precision_and_device(tmp_path: Path) -> None:
    """The default start-up path in a real engine process: the runtime auto picks here, in status, and (on
    this machine, without a GPU) no torch in the process at all."""
    from .test_engine_process import EngineProcess

    expected_runtime, expected_device = select_runtime("auto", "auto", runtime_module.installed_runtimes())
    engine = EngineProcess(tmp_path / "data", tmp_path / "engine.log",
                           {"KB_ENGINE_RUNTIME": "auto", "KB_ENGINE_DEVICE": "auto", "KB_ENGINE_WAIT_FOR_MODEL": "1"})
    try:
        engine.wait_ready()
        status = engine.request("GET", "/api/v1/status")[1]
        assert status["embedder"]["state"] == "ready", engine.log()
        assert status["model"]["runtime"] == expected_runtime and status["device"] == expected_device
        # int8 where the calibration at load keeps it (embedding/onnx_precision.py), else float32
        assert set(status["model"]["precision"].values()) <= {"float32", "int8"} or expected_runtime == "torch"
        if "int8" in status["model"]["precision"].values():  # and its form, as this CPU gets it (onnx_int8.py)
            from kb_bridge.local_engine.embedding.onnx_int8 import cpu_form

            assert status["model"]["int8_form"] == cpu_form()
        if expected_runtime == "onnx" and Path("/proc").is_dir():
            maps = "".join(Path(f"/proc/{pid}/maps").read_text() for pid in _processes(engine.process.pid))
            assert "onnxruntime" in maps and "libtorch" not in maps
        job = engine.request("POST", "/api/v1/jobs", {"text": "a thrush sings at dawn"})[1]
        wait_for(lambda: engine.request("GET", f"/api/v1/jobs/{job['id']}")[1]["status"] == "done", "the note")
        result = engine.request("POST", "/api/v1/search", {"query": "bird singing in the morning"})[1]
        assert result["mode"] == "hybrid" and result["results"][0]["text"] == "a thrush sings at dawn"
        assert engine.stop() == 0
    finally:
        engine.kill()


@pytest.mark.skipif(bundled_model_dir() is None or not runtime_module.installed_runtimes().onnx,
                    reason="needs the model and the ONNX runtime (kb-bridge[engine])")
def test_a_16_bit_precision_for_the_onnx_runtime_stops_the_engine_at_start(
    make_app: Callable[..., flask.Flask],
) -> None:
    with pytest.raises(ConfigError, match="KB_ENGINE_QUERY_PRECISION=float16 is for KB_ENGINE_RUNTIME=torch"):
        make_app(embedder="auto", runtime="onnx", query_precision="float16")  # loading in the background

