"""NVIDIA security bulletins for the two host components gpuready installs: the Container Toolkit and the driver.

Why the table exists
--------------------
gpuready installs a pinned NVIDIA driver and a pinned NVIDIA Container Toolkit on every GPU node. A pin that an
NVIDIA security bulletin has since marked vulnerable must be named where an operator sees it (plan, report,
conformance result), never installed silently. This module answers one question offline: "which published
advisories does this exact version fall under, and which version clears them?". It is pure data plus version
arithmetic: no I/O, no network, standard library only, so the deploys, the conformance suite and the lab can all
call it.

How it is kept
--------------
One :class:`Advisory` per NVIDIA bulletin, each with the bulletin's URL in ``source``. To add one, open the
bulletin (``https://nvidia.custhelp.com/app/answers/detail/a_id/<id>``; the same text, plus CSAF JSON and one CVE
record per CVE, is mirrored at ``github.com/NVIDIA/product-security/tree/main/<year>/<id>``) and copy:

- Container Toolkit bulletins: the CVE ids and the "Updated Version" of the ``NVIDIA Container Toolkit`` row;
- GPU Display Driver bulletins: only the rows whose product is ``Tesla`` (NVIDIA's name for the data center
  driver) and whose platform is ``Linux(R<branch>)``, with the CVEs that have such a row. GeForce, RTX/Quadro,
  Windows, vGPU guest and vGPU manager rows are not what gpuready installs and are left out.

``published`` is the bulletin's initial release date (its revision history), not the date of a later revision.

What ``verified`` means
-----------------------
``verified=True``: every figure in the row (CVE ids, fixed versions, date, URL) was read from NVIDIA's own
publication: the bulletin, its CVE records, or NVIDIA's product documentation, and the row is complete.
``verified=False``: something in the row could not be confirmed or is known to be incomplete; ``note`` says what.
Rows are never guessed: a figure that could not be checked is left out of the row and the gap is named in ``note``.

How a driver version is matched
-------------------------------
A driver version's branch is its first component ("580" of "580.95.05"). For one advisory:

- branch listed, version below the fixed one: affected (:attr:`DriverStatus.AFFECTED`);
- branch listed, version at or above the fixed one: fixed (:attr:`DriverStatus.FIXED`);
- branch not listed and newer than every listed branch: not affected (:attr:`DriverStatus.NOT_AFFECTED`);
- branch not listed and older than the newest listed branch: affected with no fix on that branch
  (:attr:`DriverStatus.NO_FIX_ON_BRANCH`). NVIDIA's bulletins say that earlier branches "might also be affected"
  and that users of a branch with no listed update should move to a newer branch. This covers branches older
  than every listed one (e.g. R470 against a bulletin listing R535 and later) and, conservatively, unlisted
  branches between two listed ones (e.g. R570 against the May 2026 bulletin, which lists R535, R580 and R595:
  R570 had reached end of life and received no update).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

TOOLKIT = "container-toolkit"
DRIVER = "driver"
COMPONENTS = (TOOLKIT, DRIVER)

_BULLETIN = "https://nvidia.custhelp.com/app/answers/detail/a_id/"


@dataclass(frozen=True)
class Advisory:
    """One NVIDIA security bulletin, reduced to what a version check needs.

    ``fixed`` is, for the Container Toolkit, the first version that fixes every CVE of the bulletin; for the
    driver, a mapping from branch ("580") to the first fixed version on that branch ("580.95.05"). The mapping is
    stored read-only.
    """

    component: str
    cves: tuple[str, ...]
    fixed: str | Mapping[str, str] = field(hash=False)
    published: str
    source: str
    summary: str
    verified: bool
    note: str = ""

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ValueError(f"component must be one of {COMPONENTS}, not {self.component!r}")
        object.__setattr__(self, "cves", tuple(self.cves))
        if self.component == TOOLKIT:
            if not isinstance(self.fixed, str):
                raise TypeError("a container-toolkit advisory's fixed version is one version string")
        else:
            if isinstance(self.fixed, str) or not isinstance(self.fixed, Mapping):
                raise TypeError("a driver advisory's fixed versions are a mapping branch -> version")
            object.__setattr__(self, "fixed", MappingProxyType(dict(self.fixed)))

    @property
    def bulletin(self) -> str:
        """NVIDIA's bulletin number (the ``a_id`` of ``source``), "" when the URL carries none."""
        match = re.search(r"a_id/(\d+)", self.source)
        return match.group(1) if match else ""

    @property
    def branches(self) -> tuple[str, ...]:
        """The driver branches the bulletin lists, oldest first (empty for the Container Toolkit)."""
        if self.component != DRIVER:
            return ()
        assert isinstance(self.fixed, Mapping)
        return tuple(sorted(self.fixed, key=int))


def _driver(bulletin: int, **row) -> Advisory:
    return Advisory(component=DRIVER, source=f"{_BULLETIN}{bulletin}", **row)


def _toolkit(bulletin: int, **row) -> Advisory:
    return Advisory(component=TOOLKIT, source=f"{_BULLETIN}{bulletin}", **row)


TOOLKIT_ADVISORIES: tuple[Advisory, ...] = (
    _toolkit(
        5582,
        published="2024-09-25",
        cves=("CVE-2024-0132", "CVE-2024-0133"),
        fixed="1.16.2",
        summary="TOCTOU race lets a crafted image reach the host file system (legacy hook mode; CDI not affected)",
        verified=True,
    ),
    _toolkit(
        5585,
        published="2024-11-05",
        cves=("CVE-2024-0134",),
        fixed="1.17.0",
        summary="crafted image can create files on the host through a symlink",
        verified=True,
        note="The bulletin gives the updated version as 'v1.17', i.e. 1.17.0.",
    ),
    _toolkit(
        5599,
        published="2025-01-14",
        cves=("CVE-2024-0135", "CVE-2024-0136", "CVE-2024-0137"),
        fixed="1.17.3",
        summary="improper isolation: host binary overwrite, host device access, host network namespace",
        verified=True,
        note=(
            "The bulletin and the CVE records say 'up to and including 1.17.0, updated version 1.17.1'; NVIDIA's "
            "GPU Operator security page (NVIDIA/cloud-native-docs) lists the same CVEs as 'up to and including "
            "1.17.2, fixed in 1.17.3'. The table keeps the stricter 1.17.3. CVE-2024-0136/0137 need a non-default "
            "configuration (a container-relative ldconfig path)."
        ),
    ),
    _toolkit(
        5616,
        published="2025-02-11",
        cves=("CVE-2025-23359",),
        fixed="1.17.4",
        summary="TOCTOU race in the default mode gives a crafted image host file-system access (CDI not affected)",
        verified=True,
        note="The fix stops mounting CUDA compat libraries from the container by default.",
    ),
    _toolkit(
        5659,
        published="2025-07-15",
        cves=("CVE-2025-23266", "CVE-2025-23267"),
        fixed="1.17.8",
        summary="container escape via the CUDA compat hook (NVIDIAScape); update-ldcache hook follows links",
        verified=True,
        note=(
            "Before 1.17.5 only CDI mode is affected. With crun as the low-level runtime CVE-2025-23266 does not "
            "apply and 1.17.7 already fixes CVE-2025-23267. Bulletin revised 2025-08-12."
        ),
    ),
    _toolkit(
        5850,
        published="2026-06-30",
        cves=("CVE-2026-24260",),
        fixed="1.19.1",
        summary="TOCTOU race leading to code execution and privilege escalation on the host",
        verified=True,
    ),
)

DRIVER_ADVISORIES: tuple[Advisory, ...] = (
    _driver(
        5520,
        published="2024-02-28",
        cves=("CVE-2022-42265", "CVE-2024-0074", "CVE-2024-0075"),
        fixed={"470": "470.239.06", "535": "535.161.07", "550": "550.54.14"},
        summary="kernel-mode out-of-bounds access, NULL dereference and integer overflow",
        verified=True,
    ),
    _driver(
        5551,
        published="2024-06-06",
        cves=("CVE-2024-0090", "CVE-2024-0091", "CVE-2024-0092"),
        fixed={"470": "470.256.02", "535": "535.183.01", "550": "550.90.07"},
        summary="out-of-bounds write and untrusted pointer dereference in the driver (local escalation)",
        verified=True,
    ),
    _driver(
        5586,
        published="2024-10-22",
        cves=("CVE-2024-0126",),
        fixed={"535": "535.216.01", "550": "550.127.05"},
        summary="improper input validation lets a privileged user escalate beyond its scope",
        verified=True,
    ),
    _driver(
        5614,
        published="2025-01-16",
        cves=("CVE-2024-0131", "CVE-2024-0147", "CVE-2024-0149", "CVE-2024-0150", "CVE-2024-53869"),
        fixed={"535": "535.230.02", "550": "550.144.03", "570": "570.86.15"},
        summary="out-of-bounds write, use-after-free and UVM memory leak in the Linux driver",
        verified=True,
        note="R570 rows were added in the bulletin's 2025-01-30 revision; the data center R570 fix is 570.86.15.",
    ),
    _driver(
        5630,
        published="2025-04-24",
        cves=("CVE-2025-23244",),
        fixed={"535": "535.247.01", "550": "550.163.01", "570": "570.133.07", "575": "575.51.02"},
        summary="incorrect authorization lets an unprivileged user escalate privileges",
        verified=True,
    ),
    _driver(
        5670,
        published="2025-07-24",
        cves=("CVE-2025-23279", "CVE-2025-23286"),
        fixed={"535": "535.261.03", "570": "570.172.08"},
        summary=".run installer race (R570) and invalid memory read (R535)",
        verified=True,
    ),
    _driver(
        5703,
        published="2025-10-09",
        cves=(
            "CVE-2025-23280",
            "CVE-2025-23282",
            "CVE-2025-23300",
            "CVE-2025-23330",
            "CVE-2025-23332",
            "CVE-2025-23345",
        ),
        fixed={"535": "535.274.02", "570": "570.195.03", "580": "580.95.05"},
        summary="use-after-free, race condition and NULL dereferences in the Linux kernel driver",
        verified=True,
    ),
    _driver(
        5747,
        published="2026-01-28",
        cves=("CVE-2025-33219", "CVE-2025-33220"),
        fixed={"535": "535.288.01", "570": "570.211.01", "580": "580.126.09", "590": "590.48.01"},
        summary="integer overflow in the Linux kernel module (code execution, escalation)",
        verified=True,
    ),
    _driver(
        5821,
        published="2026-05-19",
        cves=(
            "CVE-2025-33221",
            "CVE-2026-24182",
            "CVE-2026-24187",
            "CVE-2026-24190",
            "CVE-2026-24192",
            "CVE-2026-24193",
            "CVE-2026-24194",
            "CVE-2026-24196",
            "CVE-2026-24197",
            "CVE-2026-24198",
            "CVE-2026-24199",
        ),
        fixed={"535": "535.309.01", "580": "580.159.03", "595": "595.71.05"},
        summary="use-after-free, heap overflow and permission bugs in the Linux driver, incl. MIG reconfiguration",
        verified=True,
        note="No R570 row: R570 received no update. Revised 2026-05-20 (R590 replaced by R595) and 2026-05-21.",
    ),
    _driver(
        5861,
        published="2026-09-30",
        cves=("CVE-2026-47489", "CVE-2026-47491", "CVE-2026-47492", "CVE-2026-47599"),
        fixed={"580": "580.178.04", "595": "595.91.07", "610": "610.57.04", "615": "615.71.09"},
        summary="over a hundred kernel-module memory-safety and permission bugs",
        verified=False,
        note=(
            "CVE list incomplete: the bulletin names about 114 CVEs and only the four listed were checked against "
            "their Tesla/Linux rows. The branches and fixed versions are confirmed: the bulletin's CSAF product "
            "tree lists Tesla Linux R580, R595, R610 and R615 only (no R535, no R570), and every checked row "
            "carries these versions."
        ),
    ),
)

ADVISORIES: tuple[Advisory, ...] = TOOLKIT_ADVISORIES + DRIVER_ADVISORIES


# --------------------------------------------------------------------------------------------------------------
# Versions
# --------------------------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^(?:\d+:)?[vV]?(?P<release>\d+(?:\.\d+)*)(?P<rest>.*)$")


def version_key(version: str) -> tuple:
    """A sort key that orders version strings numerically.

    "1.17.10" > "1.17.8"; "1.18" == "1.18.0"; a leading "v" and a Debian epoch ("1:") are ignored. A pre-release
    ("1.18.0-rc.1", "1.18.0~rc.1-1", "1.18.0rc1") sorts before its release and after the one before; a package
    revision ("1.17.8-1", "580.95.05-0ubuntu1") and build metadata ("+build") do not change the version.
    Raises ``ValueError`` for a string that is not a version.
    """
    text = version.strip()
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    release = [int(part) for part in match.group("release").split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    rest = match.group("rest")
    pre = ""
    if not rest or rest.startswith("+"):
        pass
    elif rest.startswith("~"):
        pre = rest[1:].split("-", 1)[0].split("+", 1)[0]
    elif rest.startswith("-"):
        tail = rest[1:].split("+", 1)[0]
        if not tail:
            raise ValueError(f"not a version: {version!r}")
        if not tail[0].isdigit():
            pre = tail
    elif rest[0].isalpha():
        pre = rest.split("+", 1)[0]
    else:
        raise ValueError(f"not a version: {version!r}")
    if not pre:
        return (tuple(release), 1, ())
    parts = re.findall(r"\d+|[A-Za-z]+", pre)
    if not parts:
        raise ValueError(f"not a version: {version!r}")
    return (tuple(release), 0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p.lower()) for p in parts))


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` is older than, the same as, or newer than ``b``."""
    ka, kb = version_key(a), version_key(b)
    return (ka > kb) - (ka < kb)


def driver_branch(version: str) -> str:
    """The driver branch of a version: its first component, "580" of "580.95.05"."""
    return str(version_key(version)[0][0])


# --------------------------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------------------------


class DriverStatus(StrEnum):
    """Where one driver version stands against one driver advisory (see the module docstring)."""

    AFFECTED = "affected"
    FIXED = "fixed"
    NO_FIX_ON_BRANCH = "no-fix-on-branch"
    NOT_AFFECTED = "not-affected"

    @property
    def vulnerable(self) -> bool:
        return self in (DriverStatus.AFFECTED, DriverStatus.NO_FIX_ON_BRANCH)


def _branch_status(advisory: Advisory, branch: str) -> str | None:
    """The fixed version on ``branch``, None if unlisted and newer than every listed branch, "" if no fix."""
    assert isinstance(advisory.fixed, Mapping)
    if branch in advisory.fixed:
        return advisory.fixed[branch]
    if int(branch) > max(int(listed) for listed in advisory.fixed):
        return None
    return ""


def driver_status(advisory: Advisory, version: str) -> DriverStatus:
    """How the driver ``version`` stands against one driver ``advisory``."""
    if advisory.component != DRIVER:
        raise ValueError(f"not a driver advisory: {advisory.source}")
    fix = _branch_status(advisory, driver_branch(version))
    if fix is None:
        return DriverStatus.NOT_AFFECTED
    if fix == "":
        return DriverStatus.NO_FIX_ON_BRANCH
    return DriverStatus.AFFECTED if version_key(version) < version_key(fix) else DriverStatus.FIXED


def driver_fix(advisory: Advisory, version: str) -> str | None:
    """The version that fixes ``advisory`` on ``version``'s own branch.

    None when the advisory gives no fix on that branch: either the branch is unaffected (newer than every listed
    branch) or it is affected with no fix (:attr:`DriverStatus.NO_FIX_ON_BRANCH`: move to a listed branch). Use
    :func:`driver_status` to tell the two apart.
    """
    fix = _branch_status(advisory, driver_branch(version)) if advisory.component == DRIVER else None
    return fix or None


def toolkit_advisories(version: str) -> list[Advisory]:
    """The Container Toolkit advisories ``version`` is below, oldest first."""
    key = version_key(version)
    return [adv for adv in TOOLKIT_ADVISORIES if key < version_key(str(adv.fixed))]


def driver_advisories(version: str) -> list[Advisory]:
    """The driver advisories affecting that exact ``version``, oldest first.

    Includes advisories with no fix on the version's branch (:attr:`DriverStatus.NO_FIX_ON_BRANCH`).
    """
    return [adv for adv in DRIVER_ADVISORIES if driver_status(adv, version).vulnerable]


def driver_floors(advisories: Iterable[Advisory]) -> dict[str, str]:
    """Per branch, the lowest driver version that clears every one of the driver ``advisories``.

    A branch is left out when one of the advisories gives it no fix. Branches oldest first.
    """
    drivers = [adv for adv in advisories if adv.component == DRIVER]
    branches = sorted({branch for adv in drivers for branch in adv.branches}, key=int)
    floors: dict[str, str] = {}
    for branch in branches:
        needed: list[str] = []
        for adv in drivers:
            fix = _branch_status(adv, branch)
            if fix == "":
                break
            if fix is not None:
                needed.append(fix)
        else:
            floors[branch] = max(needed, key=version_key)
    return floors


def _cve_key(cve: str) -> tuple[int, int, str]:
    match = re.fullmatch(r"CVE-(\d{4})-(\d+)", cve)
    return (int(match.group(1)), int(match.group(2)), "") if match else (0, 0, cve)


def _cve_list(advisories: Iterable[Advisory]) -> str:
    return ", ".join(sorted({cve for adv in advisories for cve in adv.cves}, key=_cve_key))


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def describe(advisories: Iterable[Advisory], version: str | None = None) -> str:
    """One line naming every CVE and the version that fixes all of them.

    ``"CVE-2025-23266, CVE-2025-23267 (fixed in 1.17.8)"``. For driver advisories the fix depends on the branch:
    with ``version`` the line names the fix on that version's branch, or says there is none there and names the
    branches' fixes that clear everything; without ``version`` it names every branch's fix.
    """
    advisories = list(advisories)
    if not advisories:
        return "no known advisories"
    parts: list[str] = []
    toolkit = [adv for adv in advisories if adv.component == TOOLKIT]
    if toolkit:
        fix = max((str(adv.fixed) for adv in toolkit), key=version_key)
        parts.append(f"{_cve_list(toolkit)} (fixed in {fix})")
    drivers = [adv for adv in advisories if adv.component == DRIVER]
    if drivers:
        floors = driver_floors(drivers)
        every = _or(list(floors.values())) if floors else ""
        if version is not None and driver_branch(version) in floors:
            where = f"fixed in {floors[driver_branch(version)]}"
        elif version is not None:
            where = f"no fix on the R{driver_branch(version)} branch"
            where += f"; fixed in {every}" if every else "; no single branch fixes all of them"
        else:
            where = f"fixed in {every}" if every else "no single branch fixes all of them"
        parts.append(f"{_cve_list(drivers)} ({where})")
    return "; ".join(parts)
