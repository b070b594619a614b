#!/usr/bin/env python3
"""Where a BPF program's time goes, by source line.

This VM has no PMU and its perf has no libbfd, so `perf annotate` cannot
read JIT code. cpu-clock samples still land in the programs' JIT images
(perf names them bpf_prog_<tag>_<name>+<offset>), and the kernel keeps,
for every program loaded with BTF line info, the JIT address of each line
record (bpf_prog_info.jited_line_info). Together they place every sample
on a source line.

  bpf_lines.py dump ID... DIR    while the programs are loaded: one JSON per
                                 program (name, tag, JIT length, line table)
  bpf_lines.py report DIR PERF.DATA... [--top N]
                                 samples per program and source line

A sample's address is where the CPU was when the timer fired: on this VM
it lands on the instruction after one that waited (a load that missed, a
helper call's return), so read a line's share as the cost of the work
that ends there. Samples at a program's first instructions are the
indirect call into it (retpolines here), which every program on the hook
pays, a do-nothing one included.
"""
import bisect
import collections
import ctypes
import json
import os
import re
import struct
import subprocess
import sys

SYS_BPF = 321  # x86-64
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
INFO_SIZE = 256  # struct bpf_prog_info, with room to spare
# Offsets in struct bpf_prog_info (include/uapi/linux/bpf.h).
OFF_TAG, OFF_JITED_LEN, OFF_JITED_INSNS = 8, 16, 24
OFF_NAME = 64
OFF_NR_LINE_INFO, OFF_LINE_INFO, OFF_JITED_LINE_INFO = 148, 152, 160
OFF_NR_JITED_LINE_INFO, OFF_LINE_INFO_REC, OFF_JITED_LINE_INFO_REC = 168, 172, 176
LINE_INFO_REC = 16  # struct bpf_line_info: insn_off, file_name_off, line_off, line_col

libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(bytes(attr), len(attr))
    if libc.syscall(SYS_BPF, cmd, buf, len(attr)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def prog_fd(prog_id):
    attr = struct.pack("<IIII", prog_id, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(SYS_BPF, BPF_PROG_GET_FD_BY_ID, buf, len(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"program {prog_id}: {os.strerror(err)}")
    return fd


def prog_info(fd, query):
    out = ctypes.create_string_buffer(bytes(query), INFO_SIZE)
    bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, INFO_SIZE, ctypes.addressof(out)))
    return out.raw


def source_by_insn(prog_id):
    """Instruction index -> "file:line  source text", from bpftool's linum dump."""
    out = subprocess.run(["bpftool", "prog", "dump", "xlated", "id", str(prog_id), "linum"],
                         capture_output=True, text=True, check=True).stdout
    src, cur = {}, "?"
    for line in out.splitlines():
        if line.startswith(";"):
            m = re.search(r"\[file:\S*?([^/\s]+) line_num:(\d+)", line)
            text = line[1:].split(" [file:")[0].strip()
            cur = f"{m.group(1)}:{m.group(2)}  {text}" if m else text
            continue
        m = re.match(r"\s*(\d+):", line)
        if m:
            src[int(m.group(1))] = cur
    return src


def dump(prog_id, outdir):
    fd = prog_fd(prog_id)
    try:
        first = prog_info(fd, bytearray(INFO_SIZE))
        n_li = struct.unpack_from("<I", first, OFF_NR_LINE_INFO)[0]
        n_jli = struct.unpack_from("<I", first, OFF_NR_JITED_LINE_INFO)[0]
        li = ctypes.create_string_buffer(max(1, n_li) * LINE_INFO_REC)
        jli = ctypes.create_string_buffer(max(1, n_jli) * 8)
        q = bytearray(INFO_SIZE)
        struct.pack_into("<I", q, OFF_NR_LINE_INFO, n_li)
        struct.pack_into("<Q", q, OFF_LINE_INFO, ctypes.addressof(li))
        struct.pack_into("<Q", q, OFF_JITED_LINE_INFO, ctypes.addressof(jli))
        struct.pack_into("<I", q, OFF_NR_JITED_LINE_INFO, n_jli)
        struct.pack_into("<I", q, OFF_LINE_INFO_REC, LINE_INFO_REC)
        struct.pack_into("<I", q, OFF_JITED_LINE_INFO_REC, 8)
        info = prog_info(fd, q)
    finally:
        os.close(fd)
    name = info[OFF_NAME:OFF_NAME + 16].split(b"\0")[0].decode()
    tag = info[OFF_TAG:OFF_TAG + 8].hex()
    jited_len = struct.unpack_from("<I", info, OFF_JITED_LEN)[0]
    if n_li == 0 or n_li != n_jli:
        print(f"{name}: no JIT line info (built without BTF?)", file=sys.stderr)
        return
    addrs = struct.unpack_from(f"<{n_jli}Q", jli.raw)
    insns = [struct.unpack_from("<I", li.raw, i * LINE_INFO_REC)[0] for i in range(n_li)]
    src = source_by_insn(prog_id)
    table = sorted((a - addrs[0], src.get(i, "?")) for a, i in zip(addrs, insns))
    with open(os.path.join(outdir, f"{name}.json"), "w") as f:
        json.dump({"name": name, "tag": tag, "jited_len": jited_len, "lines": table}, f)


def samples(perf_files):
    """(tag, name) -> Counter of JIT offsets."""
    by_prog = collections.defaultdict(collections.Counter)
    for data in perf_files:
        out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,symoff"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.search(r"bpf_prog_([0-9a-f]{16})_(\w+)\+0x([0-9a-f]+)", line)
            if m:
                by_prog[(m.group(1), m.group(2))][int(m.group(3), 16)] += 1
    return by_prog


def report(jitdir, perf_files, top):
    progs = {}
    for fn in sorted(os.listdir(jitdir)):
        if fn.endswith(".json"):
            p = json.load(open(os.path.join(jitdir, fn)))
            progs[(p["tag"], p["name"])] = p
    counts = samples(perf_files)
    for key, p in sorted(progs.items(), key=lambda kv: -sum(counts[kv[0]].values())):
        offs = counts.get(key)
        if not offs:
            continue
        starts = [a for a, _ in p["lines"]]
        per_line = collections.Counter()
        for off, n in offs.items():
            i = bisect.bisect_right(starts, off) - 1
            # The first instructions: the call into the program.
            per_line["(entry: the call into the program)" if off < 16
                     else p["lines"][max(i, 0)][1]] += n
        total = sum(offs.values())
        print(f"   {p['name']} ({total} samples, {p['jited_len']} bytes of JIT code)")
        for text, n in per_line.most_common(top):
            print(f"     {100 * n / total:5.1f}%  {text[:100]}")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "dump":
        for pid in sys.argv[2:-1]:
            dump(int(pid), sys.argv[-1])
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        args, top = sys.argv[2:], 12
        if "--top" in args:
            i = args.index("--top")
            top = int(args[i + 1])
            del args[i:i + 2]
        report(args[0], args[1:], top)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
