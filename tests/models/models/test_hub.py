"""Models by name: ``hf:``, ``vllm:`` and ``tether.VERL(model=...)`` find a model as transformers does — a local
directory, the Hugging Face cache (a fake one under a temporary ``HF_HOME``, laid out as huggingface_hub lays it
out), and, offline, an error naming the model and the ways to make it available. Nothing is downloaded: every
test runs with ``HF_HUB_OFFLINE=1``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.models import ChatRequest, open_backend
from tether.models._hub import hub_cache, locate
from tether.models.hf import HFBackend
from tether.models.vllm import VLLMBackend

REPO = "tether-test/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face home, offline."""
    home = tmp_path / "hf-home"
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


@pytest.fixture
def cached(hf_home: Path, chatml_dir: Path) -> Path:
    """``chatml_dir`` in the cache as ``tether-test/tiny-llama``: blobs, a snapshot of links to them, refs/main."""
    repo = hf_home / "hub" / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(chatml_dir.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_the_cache_folder_follows_the_environment(hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub_cache() == hf_home / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "elsewhere"))
    assert hub_cache() == hf_home / "elsewhere"


async def test_hf_serves_a_hub_id_from_the_cache(cached: Path, chatml_dir: Path) -> None:
    backend = open_backend(f"hf:{REPO}")
    assert isinstance(backend, HFBackend) and Path(backend.base_dir) == cached.resolve()
    request = ChatRequest(messages=[{"role": "user", "content": "hello"}], temperature=0.0, max_tokens=5)
    local = HFBackend(str(chatml_dir))
    got, expected = await backend.chat(request), await local.chat(request)
    assert got.choices[0].response_token_ids == expected.choices[0].response_token_ids
    await backend.close()
    await local.close()


def test_a_local_directory_comes_first(cached: Path, chatml_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder named like the hub id, relative to the working directory, wins over the cache."""
    monkeypatch.chdir(chatml_dir.parent)
    (chatml_dir.parent / "tether-test").mkdir(exist_ok=True)
    local = chatml_dir.parent / REPO
    if not local.exists():
        local.symlink_to(chatml_dir, target_is_directory=True)
    assert locate(REPO) == Path(REPO)
    local.unlink()
    assert locate(REPO) == cached


def test_offline_and_not_cached_names_the_model_and_the_fixes(hf_home: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        open_backend("hf:tether-test/absent")
    message = str(caught.value)
    for part in ("hf:tether-test/absent", "huggingface-cli download tether-test/absent", "HF_HUB_OFFLINE"):
        assert part in message, message
    assert str(hf_home / "hub") in message and "local checkpoint directory" in message
    with pytest.raises(FileNotFoundError, match="no such directory"):
        HFBackend(str(tmp_path / "a" / "b" / "c"))


def test_vllm_lora_training_locates_the_weights_it_loads(cached: Path) -> None:
    """The trainer's torch copy and the server's --model are the same cached folder; absent, the error says how."""
    backend = VLLMBackend(REPO, command=["vllm-standin"])
    backend.attach_lora(tether.LoRA(r=4))
    located = backend._locate()
    assert located is not None and Path(located) == cached
    backend._model_dir = located
    assert backend.build_command(8000)[1:3] == ["--model", located]
    assert backend.build_command(8000)[backend.build_command(8000).index("--served-model-name") + 1] == REPO
    absent = VLLMBackend("tether-test/absent", command=["vllm-standin"])
    absent.attach_lora(tether.LoRA(r=4))
    with pytest.raises(FileNotFoundError, match=r"vllm:tether-test/absent.*huggingface-cli download"):
        absent._locate()
    # without LoRA and with a stand-in server, the name goes to the server as given
    assert VLLMBackend("tether-test/absent", command=["vllm-standin"])._locate() is None


def test_verl_model_by_hub_id(cached: Path) -> None:
    from tether.algorithms.verl.algorithm import VERL

    session: Any = None  # the session is read only when VERL has no model of its own
    assert VERL(model=REPO)._model_path(session) == str(cached)
    with pytest.raises(FileNotFoundError, match=r"tether.VERL model=tether-test/absent.*huggingface-cli download"):
        VERL(model="tether-test/absent")._model_path(session)
