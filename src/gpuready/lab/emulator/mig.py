"""Emulated `nvidia-smi mig ...`: MIG profiles, GPU/compute instances, real table formats and messages.

Stdlib only (installed into lab hosts). GPU instances occupy memory slices at the placements the GPU's
profile table allows (copied into the hardware file from gpuready's catalogue); GPU instance IDs follow
the driver's numbering by placement (full GPU 0, halves 1-2, quarters 3-6, eighths 7-14), which real
listings show (e.g. H100: 3g.40gb at slot 4 is GI 2, 1g.10gb at slot 2 is GI 9).
"""

from __future__ import annotations

import sys

import nvemu
from gpu_tree import GpuView

# NVML compute instance profile IDs by slice count (NVML_COMPUTE_INSTANCE_PROFILE_*_SLICE).
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_SLICES_BY_PROFILE = {v: k for k, v in CI_PROFILE_BY_SLICES.items()}

EXIT_FAILED = nvemu.EXIT_OTHER

LGIP_HEAD = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
"""
LGIP_SEP = "+-----------------------------------------------------------------------------+"
LGI_HEAD = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
"""
LGI_SEP = "+-------------------------------------------------------+"
LCI_HEAD = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
"""
LCI_SEP = "+--------------------------------------------------------------------+"
LCIP_HEAD = """\
+--------------------------------------------------------------------------------------+
| Compute instance profiles:                                                           |
| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |
|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |
|         ID                                                          CE    JPEG       |
|======================================================================================|
"""
LCIP_SEP = "+--------------------------------------------------------------------------------------+"


def _out(text: str) -> None:
    sys.stdout.write(text)


class MigError(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def profiles(gpu: dict) -> list[dict]:
    return list(gpu.get("mig_profiles", []))


def find_profile(gpu: dict, token: str) -> dict | None:
    token = token.strip()
    name = token[4:] if token.upper().startswith("MIG ") else token
    for prof in profiles(gpu):
        if token.isdigit() and int(token) == prof["profile_id"]:
            return prof
        if name == prof["name"]:
            return prof
    return None


def occupied(gpu_state: dict) -> set[int]:
    slots: set[int] = set()
    for gi in gpu_state["gis"]:
        slots.update(range(gi["start"], gi["start"] + gi["size"]))
    return slots


def room_for(gpu: dict, gpu_state: dict, prof: dict) -> list[int]:
    """Free starts for one more instance of ``prof``: slots, instance count, compute slices, media engines."""
    by_id = {p["profile_id"]: p for p in profiles(gpu)}
    existing = [by_id[gi["profile_id"]] for gi in gpu_state["gis"]]
    if sum(1 for p in existing if p["profile_id"] == prof["profile_id"]) >= prof["max_instances"]:
        return []
    compute = gpu.get("mig_compute_slices") or 7
    if sum(p["compute_slices"] for p in existing) + prof["compute_slices"] > compute:
        return []
    # The one set of media extensions (OFA, JPEG) goes to at most one "+me" instance.
    if prof["name"].endswith("+me") and any(p["name"].endswith("+me") for p in existing):
        return []
    return free_placements(prof, occupied(gpu_state))


def free_placements(prof: dict, used: set[int]) -> list[int]:
    size = prof["placement_size"]
    return [s for s in prof["placements"] if not (set(range(s, s + size)) & used)]


def free_count(gpu: dict, prof: dict, gpu_state: dict) -> int:
    """How many more instances of this profile fit now, placed as creation places them (highest first)."""
    trial = {"gis": list(gpu_state["gis"])}
    count = 0
    while starts := room_for(gpu, trial, prof):
        start = max(starts)
        trial["gis"].append(
            {"profile_id": prof["profile_id"], "start": start, "size": prof["placement_size"]}
        )
        count += 1
    return count


def ci_name(gi_prof: dict, slices: int) -> str:
    if slices == gi_prof["compute_slices"]:
        return gi_prof["name"]
    return f"{slices}c.{gi_prof['name']}"


def ci_starts(gi_prof: dict, size: int) -> list[int]:
    step = 1
    while step < size:
        step *= 2
    total = gi_prof["compute_slices"]
    return [s for s in range(0, total, step) if s + size <= total]


# ---- commands -------------------------------------------------------------------------------------
def mig_gpus(drv: nvemu.Driver, ids: str | None) -> list[dict]:
    try:
        chosen = nvemu.select(drv, ids)
    except LookupError:
        raise MigError("No MIG-enabled devices found.", nvemu.EXIT_NOT_FOUND) from None
    enabled = [g for g in chosen if not drv.off_bus(g["index"]) and GpuView(drv, g).mig_current]
    if not enabled:
        raise MigError("No MIG-enabled devices found.", nvemu.EXIT_NOT_FOUND)
    return enabled


def list_gip(drv: nvemu.Driver, gpus: list[dict]) -> int:
    rows = []
    for gpu in gpus:
        st = drv.gpu_state(gpu)
        for p in profiles(gpu):  # the catalogue keeps the driver's -lgip order
            ft = f"{free_count(gpu, p, st)}/{p['max_instances']}"
            rows.append(
                f"|{gpu['index']:>4}  MIG {p['name']:<13}{p['profile_id']:>3}     {ft:<11}{p['memory_gib']:<11.2f}"
                f"{'No':<7}{p['sm_count']:<7}{p['decoders']:<6}{p['encoders']:<4}|"
            )
            rows.append(f"|{'':<60}{p['copy_engines']:>2}{'':5}{p['jpeg']:<6}{p['ofa']:<4}|")
            rows.append(LGIP_SEP)
    _out(LGIP_HEAD + "\n".join(rows) + "\n")
    return 0


def list_gipp(drv: nvemu.Driver, gpus: list[dict]) -> int:
    for gpu in gpus:
        for p in profiles(gpu):  # the catalogue keeps the driver's -lgip order
            starts = ",".join(str(s) for s in p["placements"])
            word = "Placements:" if len(p["placements"]) > 1 else "Placement :"
            _out(
                f"GPU {gpu['index']:>2} Profile ID {p['profile_id']:>2} {word} {{{starts}}}:{p['placement_size']}\n"
            )
    return 0


def _gi_filter(value: str | None) -> set[int] | None:
    if value is None:
        return None
    return {int(x) for x in value.split(",") if x.strip()}


def list_gi(drv: nvemu.Driver, gpus: list[dict], gi_ids: set[int] | None) -> int:
    rows = []
    for gpu in gpus:
        by_id = {p["profile_id"]: p for p in profiles(gpu)}
        for gi in sorted(drv.gpu_state(gpu)["gis"], key=lambda g: g["id"]):
            if gi_ids is not None and gi["id"] not in gi_ids:
                continue
            p = by_id[gi["profile_id"]]
            pl = f"{gi['start']}:{gi['size']}"
            rows.append(
                f"|{gpu['index']:>4}  MIG {p['name']:<15}{p['profile_id']:>3}{gi['id']:>9}{'':10}{pl:<8}|"
            )
            rows.append(LGI_SEP)
    if not rows:
        raise MigError("No GPU instances found: Not Found", nvemu.EXIT_NOT_FOUND)
    _out(LGI_HEAD + "\n".join(rows) + "\n")
    return 0


def _selected_gis(drv: nvemu.Driver, gpu: dict, gi_ids: set[int] | None) -> list[tuple[dict, dict]]:
    """The GPU's instances (with their profile), in id order, limited to ``-gi`` ids when given."""
    by_id = {p["profile_id"]: p for p in profiles(gpu)}
    return [
        (gi, by_id[gi["profile_id"]])
        for gi in sorted(drv.gpu_state(gpu)["gis"], key=lambda g: g["id"])
        if gi_ids is None or gi["id"] in gi_ids
    ]


def list_ci(drv: nvemu.Driver, gpus: list[dict], gi_ids: set[int] | None) -> int:
    rows = []
    for gpu in gpus:
        for gi, p in _selected_gis(drv, gpu, gi_ids):
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                name = ci_name(p, ci["size"])
                pl = f"{ci['start']}:{ci['size']}"
                rows.append(
                    f"|{gpu['index']:>4}{gi['id']:>7}       MIG {name:<15}{ci['profile_id']:>3}{ci['id']:>10}"
                    f"{'':10}{pl:<8}|"
                )
                rows.append(LCI_SEP)
    if not rows:
        raise MigError("No compute instances found: Not Found", nvemu.EXIT_NOT_FOUND)
    _out(LCI_HEAD + "\n".join(rows) + "\n")
    return 0


def list_cip(drv: nvemu.Driver, gpus: list[dict], gi_ids: set[int] | None) -> int:
    rows = []
    for gpu in gpus:
        for gi, p in _selected_gis(drv, gpu, gi_ids):
            used: set[int] = set()
            for ci in gi["cis"]:
                used.update(range(ci["start"], ci["start"] + ci["size"]))
            for slices in sorted(CI_PROFILE_BY_SLICES):
                if slices > p["compute_slices"] or (slices != p["compute_slices"] and slices in (6, 8)):
                    continue
                total = len(ci_starts(p, slices))
                free = sum(1 for s in ci_starts(p, slices) if not set(range(s, s + slices)) & used)
                pid = f"{CI_PROFILE_BY_SLICES[slices]}{'*' if slices == p['compute_slices'] else ''}"
                sm = p["sm_count"] * slices // p["compute_slices"]
                rows.append(
                    f"|{gpu['index']:>4}{gi['id']:>7}       MIG {ci_name(p, slices):<17}{pid:<7}{f'{free}/{total}':<9}"
                    f"{sm:>7}{p['decoders']:>9}{p['encoders']:>6}{p['ofa']:>6}   |"
                )
                rows.append(f"|{'':<62}{p['copy_engines']:>9}{p['jpeg']:>6}{'':<9}|")
                rows.append(LCIP_SEP)
    if not rows:
        raise MigError("No GPU instances found: Not Found", nvemu.EXIT_NOT_FOUND)
    _out(LCIP_HEAD + "\n".join(rows) + "\n")
    return 0


def create_ci(gpu: dict, gi: dict, gi_prof: dict, ci_profile: int | None) -> dict:
    slices = gi_prof["compute_slices"] if ci_profile is None else CI_SLICES_BY_PROFILE.get(ci_profile, 0)
    if slices <= 0 or slices > gi_prof["compute_slices"]:
        raise MigError(
            f"Unable to create a compute instance on GPU {gpu['index']:>2} GPU instance ID {gi['id']:>2} "
            f"using profile {ci_profile}: Not Found",
            nvemu.EXIT_NOT_FOUND,
        )
    used: set[int] = set()
    for ci in gi["cis"]:
        used.update(range(ci["start"], ci["start"] + ci["size"]))
    for start in ci_starts(gi_prof, slices):
        if not set(range(start, start + slices)) & used:
            taken = {ci["id"] for ci in gi["cis"]}
            new_id = next(i for i in range(16) if i not in taken)
            ci = {"id": new_id, "profile_id": CI_PROFILE_BY_SLICES[slices], "start": start, "size": slices}
            gi["cis"].append(ci)
            return ci
    raise MigError(
        f"Unable to create a compute instance on GPU {gpu['index']:>2} GPU instance ID {gi['id']:>2} "
        f"using profile {CI_PROFILE_BY_SLICES[slices]}: Insufficient Resources",
        EXIT_FAILED,
    )


def _ci_message(gpu: dict, gi: dict, gi_prof: dict, ci: dict) -> str:
    return (
        f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu['index']:>2} GPU instance ID "
        f"{gi['id']:>2} using profile MIG {ci_name(gi_prof, ci['size'])} (ID {ci['profile_id']:>2})\n"
    )


def create_gi(drv: nvemu.Driver, gpus: list[dict], spec: str, with_ci: bool) -> int:
    tokens = [t for t in spec.split(",") if t.strip()]
    for gpu in gpus:
        st = drv.gpu_state(gpu)
        for token in tokens:
            prof = find_profile(gpu, token)
            if prof is None:
                drv.save()
                _out(
                    f"Unable to create a GPU instance on GPU {gpu['index']:>2} using profile {token}: Not Found\n"
                )
                _out("Failed to create GPU instances: Not Found\n")
                return nvemu.EXIT_NOT_FOUND
            starts = room_for(gpu, st, prof)
            if not starts:
                drv.save()
                _out(
                    f"Unable to create a GPU instance on GPU {gpu['index']:>2} using profile "
                    f"{prof['profile_id']}: Insufficient Resources\n"
                )
                _out("Failed to create GPU instances: Insufficient Resources\n")
                return EXIT_FAILED
            # Highest free placement first: keeps the low slots for the larger profiles users list first.
            start = max(starts)
            size = prof["placement_size"]
            gi = {
                "id": gpu.get("mig_memory_slices", 8) // size - 1 + start // size,
                "profile_id": prof["profile_id"],
                "start": start,
                "size": size,
                "cis": [],
            }
            st["gis"].append(gi)
            _out(
                f"Successfully created GPU instance ID {gi['id']:>2} on GPU {gpu['index']:>2} using profile "
                f"MIG {prof['name']} (ID {prof['profile_id']:>2})\n"
            )
            if with_ci:
                ci = create_ci(gpu, gi, prof, None)
                _out(_ci_message(gpu, gi, prof, ci))
    drv.save()
    return 0


def create_ci_cmd(drv: nvemu.Driver, gpus: list[dict], spec: str | None, gi_ids: set[int] | None) -> int:
    ci_profiles: list[int | None] = [None]
    if spec:
        ci_profiles = [int(t) for t in spec.split(",") if t.strip()]
    done = False
    for gpu in gpus:
        by_id = {p["profile_id"]: p for p in profiles(gpu)}
        for gi in sorted(drv.gpu_state(gpu)["gis"], key=lambda g: g["id"]):
            if gi_ids is not None and gi["id"] not in gi_ids:
                continue
            for cp in ci_profiles:
                try:
                    ci = create_ci(gpu, gi, by_id[gi["profile_id"]], cp)
                except MigError as exc:
                    drv.save()
                    _out(f"{exc}\nFailed to create compute instances: {str(exc).rsplit(': ', 1)[1]}\n")
                    return exc.code
                _out(_ci_message(gpu, gi, by_id[gi["profile_id"]], ci))
                done = True
    drv.save()
    if not done:
        raise MigError("No GPU instances found: Not Found", nvemu.EXIT_NOT_FOUND)
    return 0


def destroy_ci(drv: nvemu.Driver, gpus: list[dict], gi_ids: set[int] | None, ci_ids: set[int] | None) -> int:
    done = False
    for gpu in gpus:
        for gi in sorted(drv.gpu_state(gpu)["gis"], key=lambda g: g["id"]):
            if gi_ids is not None and gi["id"] not in gi_ids:
                continue
            for ci in sorted(gi["cis"], key=lambda c: -c["id"]):
                if ci_ids is not None and ci["id"] not in ci_ids:
                    continue
                gi["cis"].remove(ci)
                done = True
                _out(
                    f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU {gpu['index']:>2} "
                    f"GPU instance ID {gi['id']:>2}\n"
                )
    drv.save()
    if not done:
        raise MigError("No compute instances found: Not Found", nvemu.EXIT_NOT_FOUND)
    return 0


def destroy_gi(drv: nvemu.Driver, gpus: list[dict], gi_ids: set[int] | None) -> int:
    done = False
    for gpu in gpus:
        st = drv.gpu_state(gpu)
        for gi in sorted(st["gis"], key=lambda g: -g["id"]):
            if gi_ids is not None and gi["id"] not in gi_ids:
                continue
            if gi["cis"]:
                drv.save()
                _out(
                    f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {gpu['index']:>2}: "
                    "In use by another client\nFailed to destroy GPU instances: In use by another client\n"
                )
                return EXIT_FAILED
            st["gis"].remove(gi)
            done = True
            _out(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {gpu['index']:>2}\n")
    drv.save()
    if not done:
        raise MigError("No GPU instances found: Not Found", nvemu.EXIT_NOT_FOUND)
    return 0


# ---- argument handling ---------------------------------------------------------------------------
FLAGS = {
    "-lgip": "lgip",
    "--list-gpu-instance-profiles": "lgip",
    "-lgipp": "lgipp",
    "--list-gpu-instance-possible-placements": "lgipp",
    "-lgi": "lgi",
    "--list-gpu-instances": "lgi",
    "-lci": "lci",
    "-lcip": "lcip",
    "--list-compute-instance-profiles": "lcip",
    "--list-compute-instances": "lci",
    "-dgi": "dgi",
    "--destroy-gpu-instance": "dgi",
    "-dci": "dci",
    "--destroy-compute-instance": "dci",
}


def main(argv: list[str]) -> int:
    action = None
    spec = None
    ids = gi_arg = ci_arg = None
    with_ci = False
    i = 0
    try:
        while i < len(argv):
            arg = argv[i]
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if arg in FLAGS:
                action = FLAGS[arg]
            elif arg in ("-cgi", "--create-gpu-instance"):
                if nxt is None:
                    raise MigError('Option "-cgi" requires a value.', 2)
                action, spec = "cgi", nxt
                i += 1
            elif arg in ("-cci", "--create-compute-instance"):
                action = "cci"
                if nxt is not None and not nxt.startswith("-"):
                    spec = nxt
                    i += 1
            elif arg in ("-C", "--default-compute-instance"):
                with_ci = True
            elif arg in ("-i", "--id"):
                ids = nxt
                i += 1
            elif arg in ("-gi", "--gpu-instance-id"):
                gi_arg = nxt
                i += 1
            elif arg in ("-ci", "--compute-instance-id"):
                ci_arg = nxt
                i += 1
            else:
                raise MigError(
                    "Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help.", 2
                )
            i += 1
        if action is None:
            raise MigError(
                "Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help.", 2
            )
        drv = nvemu.Driver()
        drv.check_loaded()
        gpus = mig_gpus(drv, ids)
        gi_ids, ci_ids = _gi_filter(gi_arg), _gi_filter(ci_arg)
        if action == "lgip":
            return list_gip(drv, gpus)
        if action == "lgipp":
            return list_gipp(drv, gpus)
        if action == "lgi":
            return list_gi(drv, gpus, gi_ids)
        if action == "lci":
            return list_ci(drv, gpus, gi_ids)
        if action == "lcip":
            return list_cip(drv, gpus, gi_ids)
        if action == "cgi":
            return create_gi(drv, gpus, spec or "", with_ci)
        if action == "cci":
            return create_ci_cmd(drv, gpus, spec, gi_ids)
        if action == "dci":
            return destroy_ci(drv, gpus, gi_ids, ci_ids)
        return destroy_gi(drv, gpus, gi_ids)
    except MigError as exc:
        _out(f"{exc}\n")
        return exc.code
    except nvemu.NvmlError as exc:
        _out(f"{exc}\n")
        return exc.code
