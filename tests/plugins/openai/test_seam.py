"""The redirect patches a PRIVATE method of the openai SDK. These tests fail loudly, naming the SDK version,
when a release moves or stops using it — update ``tether.capture.redirect`` (or pin openai) when they do."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from openai._base_client import BaseClient

from tether.capture import redirect
from tether.capture.context import RolloutScope, rollout_scope
from tether.capture.patching import SeamMissing
from tether.testing.fake_llm import FakeLLM, text

VERSION = openai.__version__


def test_the_private_seam_is_where_the_redirect_expects_it() -> None:
    try:
        cls, func = redirect.seam()
    except SeamMissing as exc:
        pytest.fail(f"openai {VERSION} moved the request-building seam the redirect patches: {exc}")
    assert cls is BaseClient
    assert func is BaseClient.__dict__["_build_request"]


async def test_every_client_kind_still_builds_its_requests_through_the_seam() -> None:
    seen: list[str] = []

    async with FakeLLM(default=text("ok")) as llm:
        sync_client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0)
        async_client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0)
        with redirect.installed(), rollout_scope(RolloutScope("ro", "at", llm.base_url)):
            messages: Any = [{"role": "user", "content": "sync"}]
            try:
                # a sync client from async code: run it in a thread so the server's loop keeps serving
                await asyncio.to_thread(sync_client.chat.completions.create, model="m", messages=messages)
                seen.append("sync")
                messages = [{"role": "user", "content": "async"}]
                await async_client.chat.completions.create(model="m", messages=messages)
                seen.append("async")
            except openai.APIConnectionError:
                pytest.fail(
                    f"openai {VERSION}: a {['sync', 'async'][len(seen)]} client sent its request to its own URL "
                    f"inside a rollout, so the SDK no longer builds requests through "
                    f"{redirect.SEAM_MODULE}.{redirect.SEAM_CLASS}.{redirect.SEAM_METHOD}; update "
                    f"tether.capture.redirect for this release"
                )
        sync_client.close()
        await async_client.close()
    assert [r.json["messages"][0]["content"] for r in llm.requests] == ["sync", "async"]


def test_a_moved_seam_is_reported_with_the_sdk_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(BaseClient, "_build_request")
    with pytest.raises(SeamMissing, match=rf"openai {VERSION}: .*BaseClient\._build_request not found"):
        redirect.install()
    assert not redirect.is_installed()


def test_a_changed_signature_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def _build_request(self: Any, opts: Any) -> Any:  # what a reshaped seam might look like
        raise AssertionError("must not be called")

    monkeypatch.setattr(BaseClient, "_build_request", _build_request)
    with pytest.raises(SeamMissing, match=rf"openai {VERSION}: .*unexpected signature"):
        redirect.install()
    assert not redirect.is_installed()
