"""The NVIDIA security table names vulnerable Container Toolkit and driver versions; it must never clear one.

Each driver example below was read from the bulletin's Tesla/Linux rows: one version below the branch's fix
(affected) and the fix itself (clear), per advisory.
"""

from __future__ import annotations

import re
from datetime import date
from urllib.parse import urlsplit

import pytest

from gpuready.nvidia.security import (
    ADVISORIES,
    DRIVER,
    DRIVER_ADVISORIES,
    TOOLKIT,
    TOOLKIT_ADVISORIES,
    Advisory,
    DriverStatus,
    compare_versions,
    describe,
    driver_advisories,
    driver_branch,
    driver_fix,
    driver_floors,
    driver_status,
    toolkit_advisories,
    version_key,
)


def _by_bulletin(bulletin: str) -> Advisory:
    (adv,) = [adv for adv in ADVISORIES if adv.bulletin == bulletin]
    return adv


def _cves(advisories: list[Advisory]) -> set[str]:
    return {cve for adv in advisories for cve in adv.cves}


# --- Container Toolkit ---------------------------------------------------------------------------------------


def test_1_17_3_is_below_nvidiascape_and_describe_names_the_fix():
    affected = toolkit_advisories("1.17.3")
    assert "CVE-2025-23266" in _cves(affected)
    nvidiascape = [adv for adv in affected if "CVE-2025-23266" in adv.cves]
    assert describe(nvidiascape) == "CVE-2025-23266, CVE-2025-23267 (fixed in 1.17.8)"
    line = describe(affected)
    assert "CVE-2025-23266" in line and "CVE-2025-23359" in line
    assert line.endswith("(fixed in 1.19.1)")  # the newest floor clears them all


def test_1_17_8_is_clear_of_the_july_2025_advisory():
    assert not {"CVE-2025-23266", "CVE-2025-23267"} & _cves(toolkit_advisories("1.17.8"))
    assert not {"CVE-2025-23266", "CVE-2025-23267"} & _cves(toolkit_advisories("1.17.10"))


def test_1_18_0_is_clear_of_everything_up_to_1_17_8():
    remaining = toolkit_advisories("1.18.0")
    assert all(compare_versions(str(adv.fixed), "1.17.8") > 0 for adv in remaining)
    assert _cves(remaining) == {"CVE-2026-24260"}  # June 2026, fixed in 1.19.1


def test_current_toolkit_is_clear_and_old_ones_carry_every_toolkit_cve():
    assert toolkit_advisories("1.19.1") == []
    assert toolkit_advisories("1.20.0") == []
    assert toolkit_advisories("1.16.1") == list(TOOLKIT_ADVISORIES)


@pytest.mark.parametrize(
    ("version", "floor", "below"),
    [
        ("1.16.1", "1.16.2", True),
        ("1.16.2", "1.16.2", False),
        ("1.16.2", "1.17.0", True),
        ("1.17.2", "1.17.3", True),
        ("1.17.3", "1.17.4", True),
        ("1.17.7", "1.17.8", True),
        ("1.17.10", "1.17.8", False),  # numeric, not lexical
        ("1.17.9", "1.17.10", True),
        ("1.18.0-rc.1", "1.18.0", True),  # a pre-release comes before its release
        ("1.18.0-rc.1", "1.17.8", False),  # ...and after the release before it
        ("1.18.0~rc.1-1", "1.18.0", True),  # Debian spelling of a pre-release
        ("1.18.0rc1", "1.18.0", True),
        ("1.18.0-rc.2", "1.18.0-rc.10", True),
        ("1.18.0-beta.1", "1.18.0-rc.1", True),
        ("1.17.8-1", "1.17.8", False),  # Debian package revision: the same version
        ("1.17.8-1.el9", "1.17.8", False),  # RPM release: the same version
        ("v1.17.8", "1.17.8", False),
        ("1.18", "1.18.0", False),
        ("1.18.0+build.5", "1.18.0", False),
    ],
)
def test_version_ordering(version, floor, below):
    assert (version_key(version) < version_key(floor)) is below


@pytest.mark.parametrize(("a", "b"), [("1.18", "1.18.0"), ("v1.17.8", "1.17.8-1"), ("1:1.17.8-1", "1.17.8")])
def test_equal_spellings(a, b):
    assert compare_versions(a, b) == 0


@pytest.mark.parametrize("bad", ["", "latest", "v", "x1.17", "1.17.8-", "1.17.8/1"])
def test_garbage_is_not_a_version(bad):
    with pytest.raises(ValueError):
        version_key(bad)
    with pytest.raises(ValueError):
        toolkit_advisories(bad)


def test_driver_versions_compare_numerically():
    assert compare_versions("580.95.05", "580.82.07") > 0
    assert compare_versions("535.288.01", "535.274.02") > 0
    assert compare_versions("570.86.15", "570.86.16") < 0
    assert compare_versions("580.126.09", "580.95.05") > 0
    assert driver_branch("580.95.05") == "580"
    assert driver_branch("580.95.05-0ubuntu1") == "580"


# --- Driver ----------------------------------------------------------------------------------------------------

# (bulletin, version, status) read from the bulletins' Tesla/Linux rows.
DRIVER_EXAMPLES = [
    ("5520", "535.154.05", DriverStatus.AFFECTED),
    ("5520", "535.161.07", DriverStatus.FIXED),
    ("5520", "470.223.02", DriverStatus.AFFECTED),
    ("5520", "550.54.14", DriverStatus.FIXED),
    ("5551", "535.161.08", DriverStatus.AFFECTED),
    ("5551", "535.183.01", DriverStatus.FIXED),
    ("5551", "550.54.15", DriverStatus.AFFECTED),
    ("5551", "550.90.07", DriverStatus.FIXED),
    ("5586", "550.90.07", DriverStatus.AFFECTED),
    ("5586", "550.127.05", DriverStatus.FIXED),
    ("5586", "535.183.01", DriverStatus.AFFECTED),
    ("5586", "535.216.01", DriverStatus.FIXED),
    ("5586", "470.256.02", DriverStatus.NO_FIX_ON_BRANCH),  # older than every listed branch
    ("5586", "560.35.03", DriverStatus.NOT_AFFECTED),  # newer than every listed branch
    ("5614", "535.216.03", DriverStatus.AFFECTED),
    ("5614", "535.230.02", DriverStatus.FIXED),
    ("5614", "570.86.10", DriverStatus.AFFECTED),
    ("5614", "570.86.15", DriverStatus.FIXED),  # data center fix (GeForce's is 570.86.16)
    ("5630", "570.124.06", DriverStatus.AFFECTED),
    ("5630", "570.133.07", DriverStatus.FIXED),
    ("5630", "575.51.01", DriverStatus.AFFECTED),
    ("5630", "575.51.02", DriverStatus.FIXED),
    ("5670", "570.158.01", DriverStatus.AFFECTED),
    ("5670", "570.172.08", DriverStatus.FIXED),
    ("5670", "535.247.01", DriverStatus.AFFECTED),
    ("5670", "535.261.03", DriverStatus.FIXED),
    ("5670", "575.57.08", DriverStatus.NOT_AFFECTED),
    (
        "5670",
        "550.163.01",
        DriverStatus.NO_FIX_ON_BRANCH,
    ),  # unlisted, older than R570: conservatively affected
    ("5703", "580.82.07", DriverStatus.AFFECTED),
    ("5703", "580.95.05", DriverStatus.FIXED),
    ("5703", "570.172.08", DriverStatus.AFFECTED),
    ("5703", "570.195.03", DriverStatus.FIXED),
    ("5747", "580.105.08", DriverStatus.AFFECTED),
    ("5747", "580.126.09", DriverStatus.FIXED),
    ("5747", "590.44.01", DriverStatus.AFFECTED),
    ("5747", "590.48.01", DriverStatus.FIXED),
    ("5821", "580.126.20", DriverStatus.AFFECTED),  # Cloud Native Stack 19.0's pin
    ("5821", "580.159.03", DriverStatus.FIXED),
    ("5821", "595.58.03", DriverStatus.AFFECTED),
    ("5821", "595.71.05", DriverStatus.FIXED),
    ("5821", "570.211.01", DriverStatus.NO_FIX_ON_BRANCH),  # R570 got no update in May 2026
    ("5861", "595.71.05", DriverStatus.AFFECTED),
    ("5861", "595.91.07", DriverStatus.FIXED),
    ("5861", "580.159.03", DriverStatus.AFFECTED),
    ("5861", "580.178.04", DriverStatus.FIXED),
    ("5861", "535.309.01", DriverStatus.NO_FIX_ON_BRANCH),  # R535 is not in the September 2026 bulletin
    ("5861", "620.10.01", DriverStatus.NOT_AFFECTED),
]


@pytest.mark.parametrize(("bulletin", "version", "status"), DRIVER_EXAMPLES)
def test_driver_examples(bulletin, version, status):
    adv = _by_bulletin(bulletin)
    assert driver_status(adv, version) is status
    assert (adv in driver_advisories(version)) is status.vulnerable


def test_every_driver_advisory_has_an_affected_and_a_fixed_example():
    for adv in DRIVER_ADVISORIES:
        seen = {status for bulletin, _, status in DRIVER_EXAMPLES if bulletin == adv.bulletin}
        assert {DriverStatus.AFFECTED, DriverStatus.FIXED} <= seen, adv.bulletin


@pytest.mark.parametrize("adv", DRIVER_ADVISORIES, ids=lambda adv: adv.bulletin)
def test_branch_rules_hold_for_every_listed_branch(adv):
    assert not isinstance(adv.fixed, dict)  # stored read-only
    for branch, fix in adv.fixed.items():
        assert driver_status(adv, fix) is DriverStatus.FIXED
        assert driver_status(adv, f"{branch}.0.1") is DriverStatus.AFFECTED
        assert driver_fix(adv, f"{branch}.0.1") == fix
    oldest, newest = int(adv.branches[0]), int(adv.branches[-1])
    assert driver_status(adv, f"{oldest - 5}.999.99") is DriverStatus.NO_FIX_ON_BRANCH
    assert driver_fix(adv, f"{oldest - 5}.999.99") is None
    assert driver_status(adv, f"{newest + 5}.0.1") is DriverStatus.NOT_AFFECTED
    assert driver_fix(adv, f"{newest + 5}.0.1") is None


@pytest.mark.parametrize("version", ["580.178.04", "595.91.07", "610.57.04", "615.71.09"])
def test_current_branch_fixes_are_clear_of_every_driver_advisory(version):
    assert driver_advisories(version) == []
    assert describe(driver_advisories(version), version) == "no known advisories"


def test_cns_driver_pin_is_named_with_its_branch_fix():
    affected = driver_advisories("580.126.20")
    assert [adv.bulletin for adv in affected] == ["5821", "5861"]
    line = describe(affected, "580.126.20")
    assert line.startswith("CVE-2025-33221, CVE-2026-24182, ")
    assert line.endswith("(fixed in 580.178.04)")


def test_a_branch_without_a_fix_says_so_and_names_the_way_out():
    line = describe(driver_advisories("570.211.01"), "570.211.01")
    assert "no fix on the R570 branch" in line
    assert "580.178.04" in line and "595.91.07" in line


def test_driver_floors_leave_out_branches_some_advisory_does_not_fix():
    floors = driver_floors(DRIVER_ADVISORIES)
    assert floors == {"580": "580.178.04", "595": "595.91.07", "610": "610.57.04", "615": "615.71.09"}
    assert driver_floors([_by_bulletin("5703"), _by_bulletin("5747")]) == {
        "535": "535.288.01",
        "570": "570.211.01",
        "580": "580.126.09",
        "590": "590.48.01",  # 5703 lists nothing newer than R580
    }


def test_describe_without_advisories_and_mixed_components():
    assert describe([]) == "no known advisories"
    line = describe([_by_bulletin("5659"), _by_bulletin("5703")])
    assert line == (
        "CVE-2025-23266, CVE-2025-23267 (fixed in 1.17.8); CVE-2025-23280, CVE-2025-23282, CVE-2025-23300, "
        "CVE-2025-23330, CVE-2025-23332, CVE-2025-23345 (fixed in 535.274.02, 570.195.03 or 580.95.05)"
    )


# --- The table itself ------------------------------------------------------------------------------------------


def test_table_is_split_by_component():
    assert ADVISORIES == TOOLKIT_ADVISORIES + DRIVER_ADVISORIES
    assert all(adv.component == TOOLKIT for adv in TOOLKIT_ADVISORIES)
    assert all(adv.component == DRIVER for adv in DRIVER_ADVISORIES)


@pytest.mark.parametrize("adv", ADVISORIES, ids=lambda adv: adv.bulletin)
def test_every_row_cites_an_nvidia_bulletin(adv):
    url = urlsplit(adv.source)
    assert url.scheme == "https"
    assert url.hostname == "nvidia.custhelp.com" or (url.hostname or "").endswith("nvidia.com")
    assert adv.bulletin.isdigit()
    assert adv.summary and "\n" not in adv.summary
    assert adv.verified or adv.note, "an unverified row must say why"


@pytest.mark.parametrize("adv", ADVISORIES, ids=lambda adv: adv.bulletin)
def test_cve_ids_are_well_formed(adv):
    assert adv.cves
    for cve in adv.cves:
        assert re.fullmatch(r"CVE-(\d{4})-\d{4,}", cve), cve
        assert 2022 <= int(cve[4:8]) <= 2026


def test_no_cve_or_bulletin_appears_twice():
    cves = [cve for adv in ADVISORIES for cve in adv.cves]
    assert len(cves) == len(set(cves))
    bulletins = [adv.bulletin for adv in ADVISORIES]
    assert len(bulletins) == len(set(bulletins))


@pytest.mark.parametrize("adv", ADVISORIES, ids=lambda adv: adv.bulletin)
def test_fixed_versions_parse(adv):
    if adv.component == TOOLKIT:
        assert isinstance(adv.fixed, str)
        version_key(adv.fixed)
        assert version_key(adv.fixed)[1] == 1  # a release, not a pre-release
    else:
        assert adv.fixed
        for branch, fix in adv.fixed.items():
            assert branch.isdigit()
            assert re.fullmatch(r"\d{3}\.\d+\.\d+", fix), fix
            assert driver_branch(fix) == branch


def test_published_dates_are_iso_and_in_order():
    for group in (TOOLKIT_ADVISORIES, DRIVER_ADVISORIES):
        dates = [date.fromisoformat(adv.published) for adv in group]
        assert dates == sorted(dates)
        assert all(date(2024, 1, 1) <= day <= date(2026, 12, 31) for day in dates)


def test_toolkit_floors_only_rise():
    fixes = [version_key(str(adv.fixed)) for adv in TOOLKIT_ADVISORIES]
    assert fixes == sorted(fixes)


def test_advisory_is_immutable_and_checks_its_shape():
    adv = TOOLKIT_ADVISORIES[0]
    with pytest.raises(AttributeError):
        adv.fixed = "9.9.9"  # type: ignore[misc]
    with pytest.raises(TypeError):
        DRIVER_ADVISORIES[0].fixed["535"] = "535.999.99"  # type: ignore[index]
    hash(DRIVER_ADVISORIES[0])
    with pytest.raises(ValueError):
        Advisory("firmware", ("CVE-2026-00001",), "1.0", "2026-01-01", "https://nvidia.com", "x", True)
    with pytest.raises(TypeError):
        Advisory(DRIVER, ("CVE-2026-00001",), "580.1.1", "2026-01-01", "https://nvidia.com", "x", True)
    with pytest.raises(TypeError):
        Advisory(TOOLKIT, ("CVE-2026-00001",), {"1": "1.0"}, "2026-01-01", "https://nvidia.com", "x", True)
    with pytest.raises(ValueError):
        driver_status(adv, "580.95.05")
