"""The options of a ``model=`` string, checked before anything loads: ``hf:<model>?device=..&dtype=..&threads=..``
(and ``smollm2?...``), and the host of an ``http(s)://`` URL.

Each option is one ``_Option``: its name, the range a refusal states, and a check that returns the value the
backend takes or raises ``_Refused`` (why). ``parse_options`` refuses unknown and repeated keys, empty values and
any value its check refuses, naming the option and its range; adding an option is one more entry in ``OPTIONS``.
Nothing here imports torch unless a CUDA device is asked for (whether it exists is torch's to say).
"""

from __future__ import annotations

import importlib.util
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class _Refused(Exception):
    """A value outside its option's range (the message says why, when more than the range is needed)."""


@dataclass(frozen=True, slots=True)
class _Option:
    name: str
    #: the values it takes, as a refusal states them (a callable: a range known only on this machine)
    usage: Callable[[], str]
    check: Callable[[str], Any]


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS says, else the machine's)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return max(1, os.cpu_count() or 1)


def _ascii_int(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise _Refused(f"{value!r} is not a whole number written in the digits 0-9")
    return int(value)


def _threads(value: str) -> int:
    number = _ascii_int(value)
    if not 1 <= number <= usable_cores():
        raise _Refused(f"{number} is out of range")
    return number


def _cuda_count() -> int:
    """GPUs torch sees (0 without torch: the backend then asks for it by name)."""
    if importlib.util.find_spec("torch") is None:
        return -1  # unknown: no torch to ask; loading the model says what to install
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _device(value: str) -> str:
    if value == "cpu":
        return value
    kind, colon, index = value.partition(":")
    if kind != "cuda" or (colon and not (index.isascii() and index.isdigit())):
        raise _Refused(f"{value!r} is not a device tether runs on")
    count = _cuda_count()
    if count == 0:
        raise _Refused(f"{value!r} asks for a GPU, but torch sees none on this machine")
    if colon and count > 0 and int(index) >= count:
        raise _Refused(f"{value!r}: torch sees {count} GPU{'s' if count > 1 else ''} (cuda:0 to cuda:{count - 1})")
    return value


#: the names ``tether.models._device.pick_dtype`` takes (lower case)
DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")


def _dtype(value: str) -> str:
    if value.lower() not in DTYPES:
        raise _Refused(f"{value!r} is not a dtype tether loads")
    return value


def _threads_usage() -> str:
    return (
        f"the number of torch CPU threads, an integer from 1 to {usable_cores()} (the cores this process may use)"
    )


OPTIONS: dict[str, _Option] = {
    option.name: option
    for option in (
        _Option("device", lambda: "cpu, cuda or cuda:N (a GPU torch sees here)", _device),
        _Option("dtype", lambda: "one of " + ", ".join(DTYPES), _dtype),
        _Option("threads", _threads_usage, _threads),
    )
}


def options_usage() -> str:
    """What ``?`` takes, for errors: ``?device=<...>&dtype=<...>&threads=<...>``."""
    return (
        "?"
        + "&".join(f"{name}=<...>" for name in OPTIONS)
        + " ("
        + "; ".join(f"{name}: {option.usage()}" for name, option in OPTIONS.items())
        + ")"
    )


def parse_options(query: str, given: str, form: str) -> dict[str, Any]:
    """The options after ``?`` in ``given`` (a ``model=`` string of ``form``), checked: option name -> the
    value its backend takes. ``ValueError`` naming the option and its range otherwise."""
    options: dict[str, Any] = {}
    for item in query.split("&") if query else ():
        key, eq, value = item.partition("=")
        option = OPTIONS.get(key)
        if option is None or not eq or not value:
            raise ValueError(f"bad option {item!r} in {given!r}: {form} takes {options_usage()}")
        if key in options:
            raise ValueError(f"option {key!r} is given twice in {given!r}: give each option once")
        try:
            options[key] = option.check(value)
        except _Refused as exc:
            raise ValueError(f"bad option {item!r} in {given!r}: {exc}; {key} takes {option.usage()}") from None
    return options


def check_url(spec: str) -> None:
    """Refuse an ``http(s)://`` model URL that names no host (or a port that is not one)."""
    try:
        parts = urllib.parse.urlsplit(spec)
        parts.port  # noqa: B018 (raises ValueError when the port is not a number from 0 to 65535)
    except ValueError as exc:
        raise ValueError(
            f"model={spec!r} is not a URL tether can call ({exc}): use http(s)://host:port/v1"
        ) from None
    if not parts.hostname:
        raise ValueError(
            f"model={spec!r} names no host: an OpenAI-compatible server is http(s)://host:port/v1, "
            "e.g. http://127.0.0.1:8000/v1"
        )
