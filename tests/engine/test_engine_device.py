"""KB_ENGINE_DEVICE / --device: which device the model runs on, and a clear stop when a named one is absent.

This machine has no GPU: the choice is tested with an injected probe, and for real only as far as a CPU-only
machine can show it (a named GPU stops the engine; the CPU is what status reports). The CUDA and MPS paths
themselves run only on machines that have them (docs/engine.md says so).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.embedding.document_pool import plan_workers, usable_cores
from kb_bridge.local_engine.embedding.device import half_precision, select_device
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir
from kb_bridge.local_engine.errors import ConfigError

from kb_bridge.testing.engine_app import API


@pytest.mark.parametrize(("found", "expected"), [
    ({"cuda", "mps"}, "cuda"),
    ({"cuda"}, "cuda"),
    ({"mps"}, "mps"),
    (set(), "cpu"),
])
def test_auto_takes_cuda_then_mps_then_the_cpu(found: set[str], expected: str) -> None:
    assert select_device("auto", lambda: found) == expected


def test_a_named_device_is_used_when_present() -> None:
    assert select_device("cuda", lambda: {"cuda"}) == "cuda"
    assert select_device("mps", lambda: {"mps", "cuda"}) == "mps"


def test_the_cpu_is_taken_without_probing() -> None:
    def probe() -> set[str]:
        raise AssertionError("cpu must not import torch to look for accelerators")

    assert select_device("cpu", probe) == "cpu"


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_an_absent_named_device_is_a_configuration_error_naming_the_setting(device: str) -> None:
    with pytest.raises(ConfigError) as raised:
        select_device(device, lambda: set())
    assert f"KB_ENGINE_DEVICE={device}" in raised.value.message and "--device" in raised.value.message


def test_the_setting_is_validated_when_read(tmp_path: Path) -> None:
    assert load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_ENGINE_DEVICE": "CUDA"}).device == "cuda"
    with pytest.raises(ConfigError, match="KB_ENGINE_DEVICE"):
        load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_ENGINE_DEVICE": "tpu"})


def test_the_half_precision_format_per_device() -> None:
    assert half_precision("cpu") == "bfloat16" and half_precision("mps") == "float16"


@pytest.mark.skipif(bundled_model_dir() is None, reason="needs the embedding model (kb-bridge[engine])")
def test_an_engine_asked_for_a_gpu_this_machine_lacks_stops_with_a_message(tmp_path: Path) -> None:
    from kb_bridge.local_engine.embedding.device import available_accelerators

    if "cuda" in available_accelerators():
        pytest.skip("this machine has CUDA")
    result = subprocess.run(
        [sys.executable, "-m", "kb_bridge", "engine", "--data", str(tmp_path / "data"), "--device", "cuda",
         "--bind", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "KB_ENGINE_DEVICE=cuda" in result.stderr and "torch.cuda.is_available() is False" in result.stderr


def test_status_reports_the_device_the_model_runs_on(vclient: object) -> None:
    status = vclient.get(f"{API}/status").json  # type: ignore[attr-defined]
    assert status["device"] == "cpu" and status["model"]["precision"]["documents"] in ("float32", "bfloat16", "int8")
    # the copies of the model embedding documents on this CPU (embedding/document_pool.py)
    assert status["model"]["document_workers"] == plan_workers(0, "cpu", usable_cores())[0]
