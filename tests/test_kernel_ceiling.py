"""scripts/kernel_ceiling.py: it compiles the signature kernel, finds its innermost loop and
counts it right (docs/gpu.md's ceiling comes from its output).

The PTX path runs live (NVRTC through CuPy, no GPU); the SASS counting is checked on a listing
written here in nvdisasm's format, whose answer is known by construction.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from gpudedup.backends.cuda_kernels import minhash_tunables

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kernel_ceiling.py"

pytest.importorskip("cupy", reason="the ceiling script compiles with CuPy's NVRTC binding: pip install cupy-cuda12x "
                                   "nvidia-cuda-nvrtc-cu12 (no GPU needed)")


def load_script():
    spec = importlib.util.spec_from_file_location("kernel_ceiling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


ceiling = load_script()


@pytest.mark.parametrize("num_perm", [96, 128, 224])
def test_ptx_loop_is_the_permutation_loop(num_perm):
    defines = minhash_tunables(num_perm)
    perms = defines.get("PERMS_PER_THREAD", 2)
    ptx = ceiling.nvrtc_compile(defines, "90", ptx=True).decode()
    count = ceiling.count_ptx(ptx)
    # One multiply-add per update, PERMS_PER_THREAD per shingle (the loop may be unrolled over
    # shingles); each update also needs its minimum, and each shingle its shared-memory load.
    assert count.updates % perms == 0 and count.updates >= perms
    shingles = count.updates // perms
    assert sum(line.startswith("min.u32") for line in count.listing) == count.updates
    assert sum(line.startswith("ld.shared") for line in count.listing) == shingles
    assert re.match(r"(@%p\d+\s+)?bra", count.listing[-1])  # the back edge closes it
    assert count.instructions >= 2 * count.updates + shingles


# A listing in nvdisasm's format: an outer loop (L_x_1) around an inner one (L_x_2) of 2
# shingles x 2 permutations, with uniform, shared-memory and branch instructions, and address
# arithmetic that uses IMAD forms which are not updates.
LISTING = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0010*/                   IMAD.WIDE R2, R0, 0x4, R4 ;
        /*0020*/                   LDG.E.CONSTANT R6, desc[UR4][R2.64] ;
        /*0030*/                   STS [R7], R6 ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.L_x_2:
        /*0050*/                   ULEA UR7, UR4, UR8, 0x2 ;
        /*0060*/                   LDS.64 R8, [UR7] ;
        /*0070*/                   IMAD R10, R8, R20, R21 ;
        /*0080*/                   IMAD R11, R9.reuse, R20, R21 ;
        /*0090*/                   IMAD R12, R8, R22, R23 ;
        /*00a0*/                   IMAD R13, R9, R22, R23 ;
        /*00b0*/                   VIMNMX3.U32 R30, R10, R30, R11, PT ;
        /*00c0*/                   VIMNMX3.U32 R31, R12, R31, R13, PT ;
        /*00d0*/                   IMAD.MOV.U32 R14, RZ, RZ, R15 ;
        /*00e0*/                   ISETP.GT.AND P0, PT, R14, 0x2, PT ;
        /*00f0*/                   NOP ;
        /*0100*/               @P0 BRA `(.L_x_2) ;
        /*0110*/                   IMAD R16, R0, 0x80, R1 ;
        /*0120*/              @!P1 BRA `(.L_x_1) ;
        /*0130*/                   EXIT ;
"""


def test_sass_counting_finds_the_innermost_loop():
    count = ceiling.count_sass(LISTING)
    # ULEA, LDS, 4 IMAD, 2 VIMNMX3, IMAD.MOV, ISETP, BRA (the NOP is padding, not counted)
    assert count.instructions == 11
    assert count.updates == 4  # IMAD of three registers; not IMAD.MOV, IMAD.WIDE or an immediate
    assert count.fma_pipe == 5  # every IMAD form runs on the FMA pipe
    assert count.alu_pipe == 3  # VIMNMX3 x 2, ISETP
    assert count.per_update == 11 / 4
    per_clock, limit = ceiling.updates_per_sm_clock(count)
    # issue 128 / 2.75 = 46.5; FMA 64 * 4 / 5 = 51.2; ALU 64 * 4 / 3 = 85.3
    assert limit == "issue" and per_clock == pytest.approx(128 / 2.75)
    with pytest.raises(ValueError, match="no loop"):
        ceiling.count_sass(LISTING.replace("@P0 BRA `(.L_x_2)", "@P0 BRA `(.L_x_9)")
                           .replace("@!P1 BRA `(.L_x_1)", "@!P1 BRA `(.L_x_9)"))


def test_cubin_padding_restores_the_elf_extent():
    cubin = ceiling.nvrtc_compile({}, "90", ptx=False)
    assert cubin.startswith(b"\x7fELF")
    padded = ceiling.elf_complete(cubin)
    assert padded.startswith(cubin) and len(padded) - len(cubin) <= 8 and not padded[len(cubin):].strip(b"\0")
    assert ceiling.elf_complete(padded) == padded


def test_script_prints_a_computed_ceiling(monkeypatch, capsys):
    # Without nvdisasm (as in CI) the ceiling comes from the PTX count, and says so.
    monkeypatch.setattr(ceiling, "find_nvdisasm", lambda: None)
    assert ceiling.main(["--num-perm", "96"]) == 0
    output = capsys.readouterr().out
    assert "not measured" in output and "nvdisasm not found" in output
    assert re.search(r"PTX  inner loop: \d+ instructions for \d+ updates", output)
    assert re.search(r"ceiling: [\d.]+ updates per clock per SM \(limited by issue\)", output)
    for gpu in ("H100 SXM5", "H100 PCIe", "H200 SXM"):
        assert gpu in output
