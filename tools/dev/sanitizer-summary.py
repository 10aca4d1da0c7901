#!/usr/bin/env python3
"""sanitizer-summary.py [--total] LOG [LOG ...] | --self-test — what compute-sanitizer found, sorted by whose it is.

Reads compute-sanitizer's text output (lines starting "========= ", possibly "[rank N] "-prefixed by syrun and
mixed with the program's own lines) and splits its reports into records: a record opens with a line whose text
starts right after "========= " and holds the indented lines that follow. Each record is one of:
  filtered     a CUDA API error that NCCL raises on purpose: cudaFuncGetAttributes probing kernels of other
               architectures while NVSHMEM's team init brings NCCL up (the record's host frames name NCCL);
  third-party  a report whose first frame outside the CUDA driver and runtime (host backtrace) or whose kernel
               (device reports) belongs to NCCL, NVSHMEM or CUPTI;
  warning      racecheck's "Warning:" records (reported, not counted as errors);
  ours         everything else: switchyard's kernels and host code, the tests — 0 expected;
and lines that are not findings (the banner, the summaries, "Target application returned an error") are skipped.
Prints one line per log (and a total line for several), the first lines of up to three of our records;
--total prints the total line alone. Exits 1 when any log has one of ours, 2 when a log has no "ERROR SUMMARY"
line (the tool did not finish). racecheck prints no "ERROR SUMMARY" when it found nothing, only "RACECHECK SUMMARY:
0 hazards displayed (0 errors, 0 warnings)": that line, alone, is its finish and its count.
"""
import re
import sys

FILTERED_APIS = {"cudaFuncGetAttributes"}
THIRD_PARTY = re.compile(r"nccl|nvshmem|cupti", re.I)
RUNTIME = re.compile(r"libcuda\.so|libcudart|libcudadebugger|sanitizer", re.I)
API_ERROR = re.compile(r'Program hit (\w+) \(error \d+\) due to ".*" on CUDA API call to (\w+)')
PREFIX = re.compile(r"^(\[rank \d+\] )?=========(.*)$")
NOT_FINDINGS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                "Target application returned an error", "This instance", "Note:")


def records(text):
    """The records of one log: lists of lines (without the "========= " prefix), first line the header. Each rank's
    lines ("[rank N] "-prefixed by syrun; ranks under the tool at once interleave theirs) make records of their own."""
    out, current = [], {}
    for raw in text.splitlines():
        m = PREFIX.match(raw)
        if not m:
            continue
        rank, body = m.group(1), m.group(2)
        if not body.strip():  # "=========" alone ends a record
            current[rank] = None
        elif body.startswith(" ") and not body.startswith("  "):  # "========= X": a new record
            current[rank] = [body[1:]]
            out.append(current[rank])
        elif current.get(rank) is not None:
            current[rank].append(body.strip())
    return out


def host_modules(rec):
    """The modules of the record's host frames, innermost first ("in /path/libx.so" on or after a frame line)."""
    mods, want = [], False
    for line in rec[1:]:
        if line.startswith("Host Frame"):
            m = re.search(r" in (/\S+)", line)
            if m and not re.search(r":\d+", m.group(1)):
                mods.append(m.group(1))
            else:
                want = True
            continue
        if want and line.startswith("in "):
            mods.append(line[3:].strip())
            want = False
    return mods


def classify(rec):
    head = rec[0].strip()
    if head.startswith(NOT_FINDINGS):
        return None
    if head.startswith("Warning:"):
        return "warning"
    api = API_ERROR.search(head)
    if api:
        if api.group(2) in FILTERED_APIS and any(THIRD_PARTY.search(line) for line in rec[1:]):
            return "filtered"
        outside = [m for m in host_modules(rec) if not RUNTIME.search(m)]
        return "third-party" if outside and THIRD_PARTY.search(outside[0]) else "ours"
    # device reports name the code as "at FUNCTION+0xOFFSET" (racecheck: "... access at FUNCTION+0x...")
    for text in [head] + rec[1:3]:
        m = re.search(r"\bat (.+?)\+0x", text)
        if m:
            return "third-party" if THIRD_PARTY.search(m.group(1)) else "ours"
    return "ours"


def summarise(text):
    counts = {"ours": 0, "third-party": 0, "filtered": 0, "warning": 0}
    examples = []
    for rec in records(text):
        kind = classify(rec)
        if kind is None:
            continue
        counts[kind] += 1
        if kind == "ours" and len(examples) < 3:
            examples.append(" | ".join(rec[:3]))
    # every rank's count ("ERROR SUMMARY: N errors"; not its "N errors were not printed")
    found = (re.findall(r"ERROR SUMMARY: (\d+) errors?\s*$", text, re.M)
             or re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", text))
    return counts, (sum(int(n) for n in found) if found else None), examples


def line(name, counts, total):
    said = "no ERROR SUMMARY (did not finish)" if total is None else f"ERROR SUMMARY {total}"
    return (f"{name}: {counts['ours']} ours, {counts['third-party']} third-party, {counts['filtered']} NCCL probes "
            f"filtered, {counts['warning']} warnings ({said})")


def main(paths, total_only=False):
    grand = {"ours": 0, "third-party": 0, "filtered": 0, "warning": 0}
    unfinished, summed = 0, 0
    for path in paths:
        with open(path, errors="replace") as f:
            counts, total, examples = summarise(f.read())
        if not total_only:
            print(line(path, counts, total))
            for e in examples:
                print("  ours: " + e)
        for k in grand:
            grand[k] += counts[k]
        unfinished += total is None
        summed += total or 0
    if total_only or len(paths) > 1:
        print(line(f"{len(paths)} logs", grand, None if unfinished else summed))
    return 1 if grand["ours"] else 2 if unfinished else 0


# ---- self-test: logs in compute-sanitizer's format, each with what it must count -----------------------------------
SAMPLES = [
    ("clean memcheck run", """========= COMPUTE-SANITIZER
[test rank 0] passed: test_gpu_ring
========= ERROR SUMMARY: 0 errors
""", {"ours": 0, "third-party": 0, "filtered": 0, "warning": 0}, 0),
    ("NCCL's probes inside NVSHMEM's team init, a launch error of ours, syrun's prefixes",
     """[rank 0] ========= COMPUTE-SANITIZER
[rank 0] ========= Program hit cudaErrorInvalidDeviceFunction (error 98) due to "invalid device function" on CUDA API call to cudaFuncGetAttributes.
[rank 0] =========     Saved host backtrace up to driver entry point at error
[rank 0] =========     Host Frame: [0x480996]
[rank 0] =========                in /lib/x86_64-linux-gnu/libcuda.so.1
[rank 0] =========     Host Frame:cudaFuncGetAttributes [0x54d01]
[rank 0] =========                in /usr/local/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2
[rank 0] =========     Host Frame:nvshmemi_team_init [0x1234]
[rank 0] =========                in /usr/local/lib/python3/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3
[rank 0] =========     Host Frame:sy__cuda_comm_init [0x99]
[rank 0] =========                in /work/build/lib/libswitchyard.so.0
[rank 0] =========
[rank 0] ========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaMemcpyAsync.
[rank 0] =========     Saved host backtrace up to driver entry point at error
[rank 0] =========     Host Frame: [0x480996]
[rank 0] =========                in /lib/x86_64-linux-gnu/libcuda.so.1
[rank 0] =========     Host Frame:cudaMemcpyAsync [0x54d01]
[rank 0] =========                in /usr/local/cuda/lib64/libcudart.so.13
[rank 0] =========     Host Frame:sy__cuda_attn_run in attn.cu:512 [0x17a49]
[rank 0] =========                in /work/build/lib/libswitchyard.so.0
[rank 0] =========
[rank 0] ========= ERROR SUMMARY: 2 errors
""", {"ours": 1, "third-party": 0, "filtered": 1, "warning": 0}, 1),
    ("a device error in our kernel, one in NVSHMEM's, a race warning, the app's exit",
     """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 16 bytes
=========     at void sy::moe_dispatch_kernel<1>(sy::moe_params)+0x1c70 in dispatch.cu:88
=========     by thread (31,0,0) in block (2,0,0)
=========     Address 0x7f00deadbeef is out of bounds
=========
========= Invalid __global__ read of size 8 bytes
=========     at nvshmemi_barrier_kernel(int)+0x70
=========     by thread (0,0,0) in block (0,0,0)
=========
========= Warning: Race reported between Write access at sy::attn_kernel(sy::attn_params)+0x170
=========     and Read access at sy::attn_kernel(sy::attn_params)+0x1a0 [4 hazards]
=========
========= Target application returned an error
========= ERROR SUMMARY: 3 errors
""", {"ours": 1, "third-party": 1, "filtered": 0, "warning": 1}, 1),
    ("racecheck and synccheck errors of ours",
     """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at sy::moe_combine_kernel<0>(sy::moe_params)+0x170 in combine_recv.cuh:40
=========     and Read access at sy::moe_combine_kernel<0>(sy::moe_params)+0x1a0 in combine_recv.cuh:52 [2 hazards]
=========
========= Barrier error detected. Divergent thread(s) in warp
=========     at sy::attn_kernel(sy::attn_params)+0x3f0 in attn.cu:200
=========     by thread (4,0,0) in block (0,0,0)
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
========= ERROR SUMMARY: 2 errors
""", {"ours": 2, "third-party": 0, "filtered": 0, "warning": 0}, 1),
    ("a clean racecheck run (no ERROR SUMMARY line)", """[rank 0] ========= COMPUTE-SANITIZER
[rank 0] [test rank 0] passed: test_gpu_moe_ht
[rank 0] ========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
""", {"ours": 0, "third-party": 0, "filtered": 0, "warning": 0}, 0),
    ("two ranks under the tool at once, their records interleaved, one error of ours on rank 1",
     """[rank 0] ========= COMPUTE-SANITIZER
[rank 1] ========= COMPUTE-SANITIZER
[rank 0] ========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image is available for execution on the device" on CUDA API call to cudaFuncGetAttributes.
[rank 0] =========     Saved host backtrace up to driver entry point at error
[rank 1] ========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image is available for execution on the device" on CUDA API call to cudaFuncGetAttributes.
[rank 0] =========         Host Frame:  [0x4cb045] in libcuda.so.1
[rank 1] =========     Saved host backtrace up to driver entry point at error
[rank 0] =========         Host Frame:  [0x1babc0] in libnccl.so.2
[rank 1] =========         Host Frame:  [0x4cb045] in libcuda.so.1
[rank 0] =========         Host Frame: nvshmemi_team_init() [0x12ea54] in libnvshmem_host.so.3
[rank 1] =========         Host Frame:  [0x1babc0] in libnccl.so.2
[rank 0] =========
[rank 1] =========         Host Frame: pncclCommInitRank [0x885ea] in libnccl.so.2
[rank 1] =========
[rank 1] ========= Invalid __global__ write of size 4 bytes
[rank 1] =========     at void sy::dispatch_kernel<0, 1>(sy::ht_params const&)+0x1c70 in dispatch.cu:120
[rank 1] =========
[rank 1] ========= ERROR SUMMARY: 2 errors
[rank 0] ========= ERROR SUMMARY: 1 error
[rank 0] ========= ERROR SUMMARY: 4 errors were not printed. Use --print-limit option to adjust the number of printed errors
""", {"ours": 1, "third-party": 0, "filtered": 2, "warning": 0}, 1),
    ("a run that never finished", """========= COMPUTE-SANITIZER
[test rank 0] case 1 ok
""", {"ours": 0, "third-party": 0, "filtered": 0, "warning": 0}, 2),
]


def self_test():
    import os
    import tempfile
    bad = 0
    for name, text, want, want_rc in SAMPLES:
        counts, total, _ = summarise(text)
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write(text)
        rc = main([f.name])
        os.unlink(f.name)
        if counts != want or rc != want_rc:
            print(f"FAILED: {name}: counted {counts} exit {rc}, want {want} exit {want_rc}")
            bad += 1
    print(f"{len(SAMPLES) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    args = sys.argv[1:]
    total_only = bool(args) and args[0] == "--total"
    args = args[1:] if total_only else args
    if not args or args[0].startswith("-"):
        print(__doc__)
        sys.exit(2)
    sys.exit(main(args, total_only))
