"""The lock (``constraints.txt``): ``make install`` installs exactly the versions it names, and
they satisfy ``pyproject.toml``'s ranges, so a fresh clone runs (and benches, issue 9) what was
tested. ``make lock`` rewrites it."""

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def pins(text: str) -> dict[str, Version]:
    """``{canonical name: version}`` of a constraints file's ``name==version`` lines.

    Raises ``ValueError`` for any other non-comment line (a range or a URL would not make the
    install reproducible) and for a package pinned twice.
    """
    found: dict[str, Version] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        if not sep or not name or any(c in version for c in "<>=!~,; "):
            raise ValueError(f"constraints.txt:{number}: not an exact pin: {line!r}")
        key = canonicalize_name(name)
        if key in found:
            raise ValueError(f"constraints.txt:{number}: {name} is pinned twice")
        found[key] = Version(version)
    return found


def direct_requirements() -> list[Requirement]:
    """``pyproject.toml``'s dependencies and its ``test`` extra, for this interpreter."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + project["optional-dependencies"]["test"]
    return [r for r in map(Requirement, texts) if r.marker is None or r.marker.evaluate()]


LOCK = pins((REPO / "constraints.txt").read_text())


def test_pins_reject_ranges_and_repeats():
    assert pins("# c\n\nDuckDB==1.5.5\n") == {"duckdb": Version("1.5.5")}
    with pytest.raises(ValueError, match="not an exact pin"):
        pins("pyspark>=4.0\n")
    with pytest.raises(ValueError, match="pinned twice"):
        pins("duckdb==1.5.5\nDuckDB==1.5.4\n")


@pytest.mark.parametrize("requirement", direct_requirements(), ids=str)
def test_every_direct_dependency_is_pinned_within_its_range(requirement):
    key = canonicalize_name(requirement.name)
    assert key in LOCK, f"{requirement.name} is not in constraints.txt: run `make lock`"
    assert requirement.specifier.contains(LOCK[key], prereleases=True), (
        f"constraints.txt pins {requirement.name}=={LOCK[key]}, outside pyproject.toml's "
        f"{requirement}: run `make lock`"
    )


@pytest.mark.parametrize("requirement", direct_requirements(), ids=str)
def test_the_installed_version_is_the_pinned_one(requirement):
    installed = Version(importlib.metadata.version(requirement.name))
    assert installed == LOCK[canonicalize_name(requirement.name)], (
        f"{requirement.name} {installed} is installed, constraints.txt pins "
        f"{LOCK[canonicalize_name(requirement.name)]}: run `make install`"
    )
