"""What an extra of a distribution needs, read from the distribution's own metadata (``Requires-Dist: x>=1;
extra == "y"``), and which of those requirements this environment does not meet — so a plugin whose framework
is installed at a version its extra does not support is reported, with the version found, instead of failing
later inside the framework."""

from __future__ import annotations

import importlib.metadata


def unmet(dist: importlib.metadata.Distribution | None, extra: str) -> list[str]:
    """``"name (not installed)"`` or ``"name 0.3 (needs name>=1.0)"`` for each requirement of ``extra`` this
    environment does not meet; [] when ``dist`` is unknown (a plugin run from a source tree)."""
    if dist is None or not dist.requires:
        return []
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    own = canonicalize_name(dist.metadata["Name"] or "")
    found: list[str] = []
    for line in dist.requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is None or "extra" not in str(marker) or not marker.evaluate({"extra": extra}):
            continue
        if canonicalize_name(requirement.name) == own:  # tether[embedded] inside another extra
            continue
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{requirement.name} (not installed)")
            continue
        if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
            found.append(f"{requirement.name} {installed} (needs {requirement.name}{requirement.specifier})")
    return found
