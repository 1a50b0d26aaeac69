"""kernels/harness/sass.py: parsing, counting, loops -- on a real cubin where a disassembler exists."""

import pytest

from kernels.harness import cuda_cpp, sass

TEXT = """
//--------------------- .text.k                  --------------------------
        .global         k
k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   ULDC.64 UR4, c[0x0][0x208] ;
.L_x_1:
        /*0020*/                   FFMA R2, R2, R3, UR4 ;
        /*0030*/                   LDG.E.64 R4, desc[UR4][R4.64] ;
        /*0040*/               @P0 BRA `(.L_x_1) ;
        /*0050*/                   STL [R1], R2 ;
        /*0060*/                   EXIT ;
"""


def test_parse_counts_and_loops_on_text():
    ins = sass.parse(TEXT)["k"]
    assert [i.opcode for i in ins] == ["LDC", "ULDC.64", "FFMA", "LDG.E.64", "BRA", "STL", "EXIT"]
    assert ins[4].predicate == "@P0" and ins[2].label == ".L_x_1"
    c = sass.counts(ins)
    assert c["FFMA"] == 1 and c["global load"] == 1 and c["local store (spill)"] == 1
    assert c["uniform datapath"] == 3  # ULDC, and FFMA / LDG reading UR4
    (body,) = sass.loops(ins)
    assert [i.base for i in body] == ["FFMA", "LDG", "BRA"]


def test_missing_kernel_is_a_clear_error():
    if not sass.available():
        pytest.skip("no nvdisasm/cuobjdump: pip install nvidia-cuda-nvdisasm")
    compiled = cuda_cpp.compile_cubin("machine/smem_read.cu", "sm_90")
    with pytest.raises(ValueError, match="no kernel 'nope'"):
        sass.disassemble(compiled, "nope")
    ins = sass.disassemble(compiled, "smem_read")
    assert sass.counts(ins)["shared load"] >= 1 and sass.loops(ins)


def test_a_cubin_is_disassembled_once_for_every_process(tmp_path, monkeypatch):
    """The text goes to the disk cache; a later process (here: the in-process cache cleared) reads it
    back without running the disassembler."""
    if not sass.available():
        pytest.skip("no nvdisasm/cuobjdump: pip install nvidia-cuda-nvdisasm")
    monkeypatch.setenv("BOOK_CACHE", str(tmp_path))
    cubin = cuda_cpp.compile_cubin("machine/smem_read.cu", "sm_90").cubin
    sass.disassemble_text.cache_clear()
    text = sass.disassemble_text(cubin)
    assert "smem_read" in text and len(list((tmp_path / "sass").iterdir())) == 1
    version = sass._tool_version(sass.find_tool()[1])
    sass.disassemble_text.cache_clear()
    monkeypatch.setattr(sass, "_tool_version", lambda path: version)
    monkeypatch.setattr(sass.subprocess, "run", None)  # a call to the disassembler would fail
    assert sass.disassemble_text(cubin) == text
    sass.disassemble_text.cache_clear()


def test_unavailable_tool_raises(monkeypatch):
    monkeypatch.setattr(sass.device, "cuda_program", lambda name: None)
    assert not sass.available()
    with pytest.raises(sass.SassUnavailable, match="nvdisasm"):
        sass.find_tool()


@pytest.mark.parametrize(
    "line, reads",
    [
        ("FFMA R2, R4.reuse, R6, R8", [(0, 4, True), (1, 6, False), (2, 8, False)]),  # R2 is written
        ("STS [R1+0x10], R5", [(0, 1, False), (1, 5, False)]),  # a store writes none
        ("RED.E.ADD.STRONG.GPU [R2.64], R5", [(0, 2, False), (1, 5, False)]),
        ("ATOMS.ADD R3, [R2], R5", [(0, 2, False), (1, 5, False)]),  # R3 gets the old value
        ("ATOMG.E.ADD.STRONG.GPU PT, R3, [R2.64], R5", [(0, 2, False), (1, 5, False)]),  # and a predicate before it
    ],
)
def test_register_reads_skip_destinations(line, reads):
    (insn,) = sass.parse(f"//----- .text.k -----\n/*0000*/ {line} ;\n")["k"]
    assert sass.register_reads(insn) == reads


def test_an_atomic_destination_is_no_bank_conflict():
    """R3 and R5 share a bank, but R3 is written, not read: only R2 and R5 are fetched."""
    (insn,) = sass.parse("//----- .text.k -----\n/*0000*/ ATOMS.ADD R3, [R2], R5 ;\n")["k"]
    assert not sass.bank_conflict(insn)
