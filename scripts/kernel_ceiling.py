#!/usr/bin/env python
"""The speed ceiling of the MinHash signature kernel, computed from its own instructions.

Nothing here runs on a GPU and nothing here is measured: the kernel (kernels/minhash.cu, with
the tunables the GPU backend launches) is compiled by NVRTC through CuPy's binding, as
tests/test_kernels_nvrtc.py does, and its innermost loop -- the one that applies the
permutations to the shingles staged in shared memory -- is found and counted:

- in PTX (always): instructions per (shingle, permutation) update, before ptxas optimises;
- in SASS (what the GPU runs), when nvdisasm is installed (the ``nvidia-cuda-nvdisasm`` wheel,
  or a CUDA toolkit on PATH): instructions per update, split by the pipe that executes them.

The ceiling is then the tightest of three per-SM limits, on compute capabilities 8.x and 9.0:
- issue: 4 SM sub-partitions, each with one warp scheduler that issues one warp instruction
  (32 threads) per clock: 128 thread-instructions per clock per SM (NVIDIA's A100 and H100
  architecture whitepapers: four partitions per SM, each with a warp scheduler and a dispatch
  unit of 32 threads per clock);
- the FMA pipe, which executes IMAD (the multiply-add a * x + b of every update): 64 per clock
  per SM (the CUDA C++ Programming Guide's throughput table for 8.x: 32-bit integer
  multiply-add; for 9.0 the same is assumed, as NVIDIA's engineers describe GH100 on their
  forums: IMAD on the FMA-heavy pipe, 16 lanes per partition);
- the ALU pipe, which executes the minimum (IMNMX, and VIMNMX3, a three-input minimum on
  9.0) and the other integer and logic instructions: 64 per clock per SM (the same table:
  compare, minimum, maximum; the same assumption for 9.0).
Uniform-datapath instructions (U*), shared-memory loads and branches use pipes of their own but
still take issue slots, so they count against the issue limit only.

    python scripts/kernel_ceiling.py            # the backend's launch choices for K = 96 and 128
    python scripts/kernel_ceiling.py --num-perm 192 --arch 80

A computed ceiling, not a measurement: it says how fast the kernel could go if every issue slot
(or the FMA pipe) were busy; latency, occupancy, memory and the other stages make real runs
slower. scripts/bench_gpu.py measures.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without an install
    sys.path.insert(0, str(REPO))

from gpudedup.backends.cuda_kernels import (CUPY_IMPLICIT_OPTIONS, compile_options, kernel_source,  # noqa: E402
                                            minhash_chunk, minhash_tunables)

ISSUE_PER_SM_CLOCK = 128  # 4 warp schedulers x 1 warp instruction (32 threads) per clock
FMA_PIPE_PER_SM_CLOCK = 64  # 32-bit integer multiply-add (IMAD)
ALU_PIPE_PER_SM_CLOCK = 64  # 32-bit integer compare / min / max, logic, add

# (name, SMs, boost clock in GHz): the published specifications; all compute capability 9.0.
GPUS = (
    ("H100 SXM5", 132, 1.98),
    ("H100 PCIe", 114, 1.755),
    ("H200 SXM", 132, 1.98),  # the same GH100 chip and clocks as the H100 SXM5
)

# Shingles per byte of text of the benchmark corpus (counted with the numpy backend; docs/gpu.md).
SHINGLES_PER_BYTE = {"word 5-grams": 0.183, "char 5-grams": 0.994}


@dataclass
class LoopCount:
    """The innermost loop of the kernel: its instructions and the updates it performs."""

    instructions: int  # every instruction of one pass of the loop body, the branch included
    updates: int  # (shingle, permutation) updates per pass: one multiply-add each
    fma_pipe: int  # IMAD (SASS); 0 for PTX
    alu_pipe: int  # integer ALU instructions, the minima among them (SASS); 0 for PTX
    listing: list[str]  # the loop's instructions, as printed

    @property
    def per_update(self) -> float:
        return self.instructions / self.updates


# --- compiling --------------------------------------------------------------------------------


def nvrtc_compile(defines: dict, arch: str, ptx: bool) -> bytes:
    """kernels/minhash.cu as the GPU backend compiles it, for sm_<arch> (a cubin) or
    compute_<arch> (PTX). CuPy's own compile functions ask the device for its architecture,
    so NVRTC is driven directly (tests/test_kernels_nvrtc.py says more)."""
    from cupy.cuda import nvrtc

    target = f"-arch=compute_{arch}" if ptx else f"-arch=sm_{arch}"
    options = (*compile_options(defines), *CUPY_IMPLICIT_OPTIONS, target)
    program = nvrtc.createProgram(kernel_source("minhash.cu"), "minhash.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as error:
            raise RuntimeError(f"NVRTC failed on minhash.cu with {options}:\n{nvrtc.getProgramLog(program)}") from error
        output = nvrtc.getPTX(program) if ptx else nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    return output if isinstance(output, bytes) else output.encode()


def elf_complete(cubin: bytes) -> bytes:
    """The cubin padded with zeros to the extent its ELF header claims (the section and program
    header tables): CuPy's getCUBIN can return it a byte short, which nvdisasm refuses."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    phoff, = struct.unpack_from("<Q", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    extent = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    return cubin + b"\0" * max(0, extent - len(cubin))


def find_nvdisasm() -> str | None:
    """nvdisasm on PATH, or the one the nvidia-cuda-nvdisasm wheel installs; None if neither."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia  # the namespace package of NVIDIA's CUDA wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob("*/bin/nvdisasm")):
            return str(candidate)
    return None


def disassemble(cubin: bytes, nvdisasm: str) -> str:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "minhash.cubin"
        path.write_bytes(elf_complete(cubin))
        run = subprocess.run([nvdisasm, "-c", str(path)], capture_output=True, text=True)
    if run.returncode != 0 or "minhash_signatures_u64" not in run.stdout:
        raise RuntimeError(f"nvdisasm failed:\n{run.stderr}")
    return run.stdout


# --- finding and counting the loop -----------------------------------------------------------


def innermost_loops(lines: list[str], label_pattern: str, branch_pattern: str) -> list[list[str]]:
    """Every innermost loop: the lines after a label up to a later branch back to it (a back
    edge), with no other back edge inside (which would be a loop nested in it)."""
    labels: dict[str, int] = {}
    back_edges = []  # (label's line, branch's line)
    for number, line in enumerate(lines):
        label = re.match(label_pattern, line)
        if label:
            labels[label.group(1)] = number
        branch = re.search(branch_pattern, line)
        if branch and branch.group(1) in labels:
            back_edges.append((labels[branch.group(1)], number))
    return [lines[start + 1 : stop + 1] for start, stop in back_edges
            if not any(start <= other_start and other_stop < stop for other_start, other_stop in back_edges)]


# SASS: `/*0d30*/  IMAD R9, R12, R2, R4.reuse ;`; a multiply-add of three registers is an update
# (the address arithmetic uses immediates, IMAD.WIDE, IMAD.MOV, or the uniform datapath).
SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;")
SASS_UPDATE = re.compile(r"^IMAD$")
REGISTER = re.compile(r"^-?R\d+(\.reuse)?$")


def sass_instructions(text: str) -> list[tuple[str, str]]:
    return [(match.group(1), match.group(2)) for match in map(SASS_INSTRUCTION.match, text.splitlines()) if match]


def count_sass(text: str) -> LoopCount:
    """The loop of the SASS listing with the most updates (multiply-adds of three registers)."""
    lines = text.splitlines()
    best = None
    for body in innermost_loops(lines, r"^\s*(\.L_x_\d+):", r"BRA\s+`\((\.L_x_\d+)\)"):
        instructions = [(opcode, operands, line) for line in body
                        for match in [SASS_INSTRUCTION.match(line)] if match
                        for opcode, operands in [(match.group(1), match.group(2))] if opcode != "NOP"]
        updates = sum(1 for opcode, operands, _ in instructions
                      if SASS_UPDATE.match(opcode) and all(REGISTER.match(o.strip()) for o in operands.split(",")))
        if updates and (best is None or updates > best.updates):
            fma = sum(1 for opcode, _, _ in instructions if opcode.split(".")[0] in ("IMAD", "IMUL"))
            alu = sum(1 for opcode, _, _ in instructions if is_alu(opcode))
            best = LoopCount(len(instructions), updates, fma, alu, [line.strip() for _, _, line in instructions])
    if best is None:
        raise ValueError("no loop with multiply-adds found in the SASS listing")
    return best


def is_alu(opcode: str) -> bool:
    """Executed by the integer ALU pipe: not a multiply-add (FMA pipe), not uniform (U*), not a
    memory, branch, barrier or special-register instruction."""
    base = opcode.split(".")[0]
    if base in ("IMAD", "IMUL") or base.startswith(("U", "R2UR", "S2R", "S2UR", "CS2R")):
        return False
    if base.startswith(("LD", "ST", "ATOM", "RED")) or base in ("BRA", "BAR", "BSSY", "BSYNC", "EXIT", "RET",
                                                                   "CALL", "WARPSYNC", "NOP"):
        return False
    return True


PTX_LABEL = r"^\s*(\$L__BB\d+_\d+):"
PTX_BRANCH = r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);"


def count_ptx(text: str) -> LoopCount:
    """The loop of the PTX with the most mad.lo (one per update), counted before ptxas."""
    lines = text.splitlines()
    best = None
    for body in innermost_loops(lines, PTX_LABEL, PTX_BRANCH):
        instructions = [line.strip() for line in body
                        if line.strip() and not line.strip().startswith(("//", ".", "$", "{", "}"))]
        updates = sum(1 for line in instructions if re.match(r"(@%p\d+\s+)?mad\.lo\.(s|u)32\b", line))
        if updates and (best is None or updates > best.updates):
            best = LoopCount(len(instructions), updates, 0, 0, instructions)
    if best is None:
        raise ValueError("no loop with mad.lo found in the PTX")
    return best


# --- the ceiling ------------------------------------------------------------------------------


def updates_per_sm_clock(count: LoopCount) -> tuple[float, str]:
    """The tightest of the issue, FMA-pipe and ALU-pipe limits, in updates per clock per SM,
    and which one it is."""
    limits = {"issue": ISSUE_PER_SM_CLOCK / count.per_update}
    if count.fma_pipe:
        limits["FMA pipe"] = FMA_PIPE_PER_SM_CLOCK * count.updates / count.fma_pipe
    if count.alu_pipe:
        limits["ALU pipe"] = ALU_PIPE_PER_SM_CLOCK * count.updates / count.alu_pipe
    name = min(limits, key=lambda key: limits[key])
    return limits[name], name


def report(num_perm: int, arch: str, nvdisasm: str | None, show_loop: bool) -> None:
    defines = minhash_tunables(num_perm)
    shape = f"{defines.get('BLOCK_SIZE', 64)} threads x {defines.get('PERMS_PER_THREAD', 2)} permutations"
    print(f"K = {num_perm}: minhash.cu with {defines or 'its defaults'} ({shape} = {minhash_chunk(defines)}), "
          f"sm_{arch}")
    ptx = count_ptx(nvrtc_compile(defines, arch, ptx=True).decode())
    print(f"  PTX  inner loop: {ptx.instructions} instructions for {ptx.updates} updates = "
          f"{ptx.per_update:.3f} per update (before ptxas)")
    count = ptx
    if nvdisasm is None:
        print("  SASS: nvdisasm not found (pip install nvidia-cuda-nvdisasm); the ceiling below uses the PTX count")
    else:
        count = count_sass(disassemble(nvrtc_compile(defines, arch, ptx=False), nvdisasm))
        print(f"  SASS inner loop: {count.instructions} instructions for {count.updates} updates = "
              f"{count.per_update:.3f} per update; FMA pipe {count.fma_pipe / count.updates:.3f}, "
              f"ALU pipe {count.alu_pipe / count.updates:.3f} per update")
        if show_loop:
            print("    " + "\n    ".join(count.listing))
    per_clock, limit = updates_per_sm_clock(count)
    print(f"  ceiling: {per_clock:.1f} updates per clock per SM (limited by {limit})")
    if arch != "90":
        print("    (the GPUs below are compute capability 9.0: compile for --arch 90 to rate them)")
        return
    for name, sms, ghz in GPUS:
        rate = per_clock * sms * ghz * 1e9
        text = ", ".join(f"{kind} {rate / (per_byte * num_perm) / 1e9:.0f} GB/s"
                         for kind, per_byte in SHINGLES_PER_BYTE.items())
        print(f"    {name:10s} {sms} SMs x {ghz} GHz: {rate:.2e} updates/s; text at K = {num_perm}: {text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-perm", type=int, action="append",
                        help="permutations computed (bands x rows); default: 96 and 128")
    parser.add_argument("--arch", default="90", help="compute capability without the dot (default 90)")
    parser.add_argument("--show-loop", action="store_true", help="print the SASS loop counted")
    args = parser.parse_args(argv)
    nvdisasm = find_nvdisasm()
    print(f"Computed from the compiled kernel, not measured. nvdisasm: {nvdisasm or 'not found'}")
    for num_perm in args.num_perm or [96, 128]:
        report(num_perm, args.arch, nvdisasm, args.show_loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
