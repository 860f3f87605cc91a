"""gpuready as a user without a checkout has it: the wheel built from this checkout, alone in a fresh virtualenv
with exactly its plain install's dependencies (no extra: neither ``lab`` nor ``deploy`` nor ``dev``).

No index is needed: the dependencies are the closure of the wheel's own ``Requires-Dist`` (markers evaluated, no
extra requested), each distribution linked file by file (its RECORD) from this run's environment into the venv's
site-packages. So an import of something the wheel does not declare fails there as it would after
``pip install gpuready``. Used by tests/conformance/test_installed_suite.py and tests/lab/test_lab_installed_wheel.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
SHIPPED_SUITE = ("test_host.py", "test_gpu.py", "test_diag.py", "pytest.ini", "README.md")


def build_wheel(work: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = work.glob("gpuready-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for shipped in SHIPPED_SUITE:
        assert f"gpuready/conformance/suite/{shipped}" in names, f"the wheel lacks the suite's {shipped}"
    return wheel


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(archive.read(meta).decode())
    return [Requirement(r) for r in headers.get_all("Requires-Dist") or []]


def closure(
    requirements: list[Requirement], extras: frozenset[str] = frozenset()
) -> list[metadata.Distribution]:
    """The distributions of this environment that installing ``requirements`` (with ``extras``) pulls in."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(r, extras) for r in requirements]
    while todo:
        req, wanted = todo.pop()
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError as exc:
            raise AssertionError(f"{req} is a dependency of the wheel but not installed here") from exc
        assert dist.version in req.specifier or not req.specifier, (
            f"{req}: this environment has {dist.version}"
        )
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in found:
            continue
        found[key] = dist
        todo += [(Requirement(r), frozenset(req.extras)) for r in dist.requires or []]
    unique = {canonicalize_name(d.metadata["Name"]): d for d in found.values()}
    return list(unique.values())


def link_distributions(dists: list[metadata.Distribution], purelib: Path) -> None:
    for dist in dists:
        files = dist.files
        assert files is not None, f"{dist.metadata['Name']} has no RECORD: cannot tell its files"
        for f in files:
            if f.parts[0] == ".." or "__pycache__" in f.parts:  # scripts in bin/, byte code
                continue
            source, target = Path(str(dist.locate_file(f))), purelib / f
            if source.exists() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source)


def fresh_venv_with_wheel(work: Path) -> Path:
    """A virtualenv under ``work`` with the wheel and its plain install's dependencies; its path (the
    ``gpuready`` console script in ``bin/``, as pip writes it)."""
    wheel = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(
        subprocess.run(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(purelib), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    link_distributions(closure(wheel_requirements(wheel)), purelib)
    script = venv / "bin" / "gpuready"
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom gpuready.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return venv


def where_gpuready(venv: Path) -> str:
    """The file the venv's interpreter imports gpuready from (the wheel's, not this checkout's), as a user's shell
    without this checkout's PYTHONPATH would (a developer's `PYTHONPATH=src` is not the wheel's fault)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [venv / "bin" / "python", "-c", "import gpuready; print(gpuready.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
