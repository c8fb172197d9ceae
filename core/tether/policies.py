"""Which policy serves each sub-agent's calls and which of them train: ``tether.wrap(optimize=...)`` as a map.

``optimize`` takes three shapes:

- ``None`` (default): one policy, ``"policy"``, serves every sub-agent, and every call trains.
- a list of sub-agent names: one shared policy, ``"policy"``, still serves every sub-agent (today's meaning:
  the agents left out are served by the model being trained) but only the named ones' calls train.
- a mapping ``{policy: [sub-agent, ...]}``: each key is a policy with its own trainable weights, serving and
  trained on its sub-agents' calls; every sub-agent not named is served by the frozen starting model
  (``FROZEN_POLICY``), whose weights never change.

The proxy routes each call to ``policy_of(agent_name)``; transitions record it.

Names match by one rule, ``agent_key``: surrounding whitespace is ignored (CrewAI roles written in YAML as
``role: >`` end in a newline; ``optimize=["Activity Planner"]`` still names that agent), everything else must
be equal. Captured names are kept and shown as the framework wrote them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: the one policy of ``optimize=None`` or a list
DEFAULT_POLICY = "policy"
#: the frozen starting weights that serve the sub-agents no policy names (mapping form only)
FROZEN_POLICY = "frozen"


def agent_key(name: str | None) -> str | None:
    """The form in which sub-agent names are compared: the name without surrounding whitespace (None for no
    name or a blank one)."""
    if name is None:
        return None
    key = name.strip()
    return key or None


@dataclass(frozen=True, slots=True)
class PolicyMap:
    """Trained policies (in the order given) and the sub-agents each serves (None: every sub-agent)."""

    policies: Mapping[str, frozenset[str] | None]
    #: one model serves every sub-agent, trained or not (``optimize=None`` or a list)
    shared: bool = True

    @classmethod
    def from_optimize(cls, optimize: Mapping[str, Iterable[str] | str] | Iterable[str] | str | None) -> PolicyMap:
        """The map for a ``wrap(optimize=...)`` value; ``ValueError`` naming what is wrong with a bad one."""
        if optimize is None:
            return cls({DEFAULT_POLICY: None}, shared=True)
        if isinstance(optimize, Mapping):
            return cls(_policies(optimize), shared=False)
        return cls({DEFAULT_POLICY: _names(optimize, "optimize=")}, shared=True)

    @property
    def names(self) -> list[str]:
        """The trained policies, in the order given."""
        return list(self.policies)

    @property
    def agents(self) -> frozenset[str] | None:
        """Every sub-agent that trains (None: all of them)."""
        if any(agents is None for agents in self.policies.values()):
            return None
        return frozenset().union(*(a for a in self.policies.values() if a is not None))

    def policy_of(self, agent_name: str | None) -> str:
        """The policy that serves ``agent_name``'s calls: its policy, ``DEFAULT_POLICY`` when shared, else
        ``FROZEN_POLICY``."""
        if self.shared:
            return DEFAULT_POLICY
        key = agent_key(agent_name)
        for name, agents in self.policies.items():
            if agents is None or (key is not None and key in agents):
                return name
        return FROZEN_POLICY

    def to_metadata(self) -> dict[str, Any]:
        """What a rollout's metadata records (``spans.POLICIES_METADATA``): each policy's sub-agents, sorted
        (None: every sub-agent), and whether one model serves them all."""
        agents = {name: sorted(a) if a is not None else None for name, a in self.policies.items()}
        return {"policies": agents, "shared": self.shared}

    @classmethod
    def from_metadata(cls, value: Any) -> PolicyMap | None:
        """The map a rollout's metadata recorded; None when it recorded none (or one this version cannot read)."""
        if not isinstance(value, Mapping) or not isinstance(value.get("policies"), Mapping):
            return None
        try:
            policies = {
                str(name): (_names(agents, "metadata") if agents is not None else None)
                for name, agents in value["policies"].items()
            }
        except ValueError:
            return None
        return cls(policies, shared=bool(value.get("shared", True))) if policies else None

    def trains(self, agent_name: str | None) -> bool:
        """Whether ``agent_name``'s calls train their policy."""
        key = agent_key(agent_name)
        for agents in self.policies.values():
            if agents is None or (key is not None and key in agents):
                return True
        return False


def _policies(optimize: Mapping[Any, Any]) -> dict[str, frozenset[str] | None]:
    if not optimize:
        raise ValueError("optimize= maps policy names to sub-agent names; got an empty mapping")
    out: dict[str, frozenset[str] | None] = {}
    owner: dict[str, str] = {}
    for policy, agents in optimize.items():
        if not isinstance(policy, str) or not policy or "/" in policy:
            raise ValueError(f"optimize= policy names must be non-empty strings without '/', got {policy!r}")
        if policy == FROZEN_POLICY:
            raise ValueError(
                f"a policy cannot be named {FROZEN_POLICY!r}: that name is the frozen starting model, which "
                "serves the sub-agents no policy names"
            )
        names = _names(agents, f"optimize[{policy!r}]")
        for agent in names:
            if agent in owner:
                raise ValueError(
                    f"sub-agent {agent!r} is in two policies, {owner[agent]!r} and {policy!r}: a sub-agent's "
                    "calls are served by one policy"
                )
            owner[agent] = policy
        out[policy] = names
    return out


def _names(value: Any, where: str) -> frozenset[str]:
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else None
    if not names or any(not isinstance(n, str) or not agent_key(n) for n in names):
        raise ValueError(f"{where} takes sub-agent names (non-empty strings), got {value!r}")
    return frozenset(n.strip() for n in names)
