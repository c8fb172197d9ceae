"""Issue 37 item 2: a ``model=`` string's options are checked when the ``Trainer`` is built, before anything loads:
``threads`` from 1 to the cores this process may use, in ASCII digits; each option once; ``device`` one this
machine has; an ``http://`` URL with a host. Every refusal names the option and its range."""

from __future__ import annotations

import os

import pytest

import tether
from tether.models import check_model
from tether.models._spec import usable_cores


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.mark.parametrize(
    "option",
    ["threads=65536", "threads=0", f"threads={_cores() + 1}", "threads=100000000000000000000000", "threads=-1"],
)
def test_threads_beyond_this_machine_is_refused_with_its_range(option: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"bad option '{option}'.*threads takes .*, an integer from 1 to {_cores()}",
    ):
        tether.Trainer(model=f"hf:some/model?{option}")


@pytest.mark.parametrize("digits", ["²", "٣", "３", "1_0", " 1"])
def test_threads_must_be_written_in_ascii_digits(digits: str) -> None:
    with pytest.raises(
        ValueError,
        match=r"not a whole number written in the digits 0-9.*threads takes the number of torch CPU threads",
    ):
        tether.Trainer(model=f"hf:some/model?threads={digits}")


def test_an_option_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"option 'threads' is given twice"):
        tether.Trainer(model="hf:some/model?threads=1&threads=1")
    with pytest.raises(ValueError, match=r"option 'device' is given twice"):
        check_model("smollm2?device=cpu&device=cpu")


@pytest.mark.parametrize("device", ["meta", "cpu:7", "cpu:0", "CUDA", "cuda:x", "cuda:", "xla", "cuda:٣"])
def test_devices_tether_does_not_run_on_are_refused(device: str) -> None:
    with pytest.raises(ValueError, match=rf"bad option 'device={device}'.*device takes cpu, cuda or cuda:N"):
        tether.Trainer(model=f"hf:some/model?device={device}")


@pytest.mark.parametrize("model", ["http://", "https://", "http:///v1", "http://:8000/v1"])
def test_a_url_without_a_host_is_refused(model: str) -> None:
    with pytest.raises(ValueError, match=r"names no host.*http\(s\)://host:port/v1"):
        tether.Trainer(model=model)


def test_a_url_with_a_bad_port_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not a URL tether can call"):
        tether.Trainer(model="http://127.0.0.1:99999/v1")


def test_good_specs_are_accepted_and_unknown_options_name_every_option() -> None:
    for model in ("embedded", "hf:m?threads=1&device=cpu&dtype=bf16", "http://127.0.0.1:8000/v1", "vllm:m"):
        tether.Trainer(model=model)
    tether.Trainer(model=f"hf:m?threads={usable_cores()}")
    with pytest.raises(ValueError, match=r"bad option 'dtype=fp8'.*dtype takes one of float32"):
        tether.Trainer(model="hf:m?dtype=fp8")
    with pytest.raises(ValueError, match=r"bad option 'gpus=2'.*device=<\.\.\.>&dtype=<\.\.\.>&threads=<\.\.\.>"):
        tether.Trainer(model="hf:m?gpus=2")
