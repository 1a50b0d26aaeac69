"""SASS: disassemble a CUDA C++ kernel's cubin and count its instruction classes.

The SASS is the evidence that a probe measures what it claims: the loads really depend on each
other, the loop was not optimized away, an array went to local memory (STL/LDL). ``nvdisasm`` comes
with the CUDA toolkit (``/usr/local/cuda/bin``) and, for CPU machines, in the PyPI wheel
``nvidia-cuda-nvdisasm``; ``cuobjdump -sass`` is the fallback. Without either, ``disassemble`` raises
``SassUnavailable`` with one line saying so.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from . import device, disk_cache

# Instruction classes a probe's evidence is about: name -> opcode prefix (the part before the first dot).
CLASSES = {
    "FFMA": ("FFMA",),
    "DFMA": ("DFMA",),
    "global load": ("LDG",),
    "global store": ("STG",),
    "shared load": ("LDS",),
    "shared store": ("STS",),
    "local load (spill)": ("LDL",),
    "local store (spill)": ("STL",),
    "branch": ("BRA",),
    "constant load": ("LDC",),
}


class SassUnavailable(RuntimeError):
    """Neither nvdisasm nor cuobjdump could be found or run."""


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str
    opcode: str  # with modifiers, e.g. "LDG.E.64"
    operands: str
    label: str  # the label that precedes this instruction, if any ("" otherwise)

    @functools.cached_property  # read for every instruction of every simulated cycle
    def base(self) -> str:
        """The opcode without modifiers: "LDG.E.64" -> "LDG"."""
        return self.opcode.split(".")[0]

    @property
    def uniform(self) -> bool:
        """Runs on the uniform datapath: a U-opcode (ULDC, UIADD3, ...), S2UR/R2UR, or a UR operand."""
        return (
            self.base.startswith("U")
            or self.base in ("S2UR", "R2UR")
            or re.search(r"\bUR\d+", self.operands) is not None
        )

    def __str__(self) -> str:
        pred = f"{self.predicate} " if self.predicate else ""
        return f"/*{self.address:04x}*/ {pred}{self.opcode} {self.operands}".rstrip()


def find_tool() -> tuple[str, str]:
    """('nvdisasm' or 'cuobjdump', path) of the first disassembler found (``device.cuda_program``)."""
    for name in ("nvdisasm", "cuobjdump"):
        if path := device.cuda_program(name):
            return name, path
    raise SassUnavailable(
        "SASS needs nvdisasm or cuobjdump: install the CUDA toolkit or `pip install nvidia-cuda-nvdisasm`"
    )


def available() -> bool:
    try:
        find_tool()
        return True
    except SassUnavailable:
        return False


@functools.cache
def _tool_version(path: str) -> str:
    """The disassembler's own version line(s): part of a cached disassembly's name."""
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise SassUnavailable(f"{path} could not run: {e}") from e


@functools.lru_cache(maxsize=256)
def disassemble_text(cubin: bytes) -> str:
    """The raw disassembly of a cubin (all kernels); each cubin is disassembled once (disk_cache)."""
    name, path = find_tool()
    entry = disk_cache.key(cubin, name, _tool_version(path))
    if (text := disk_cache.get("sass", entry)) is not None:
        return text.decode()
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "kernel.cubin"
        f.write_bytes(cubin)
        cmd = [path, "-c", str(f)] if name == "nvdisasm" else [path, "-sass", str(f)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            raise SassUnavailable(f"{name} could not run: {e}") from e
    if out.returncode != 0:
        raise SassUnavailable(f"{name} failed on the cubin: {out.stderr.strip()[:500]}")
    disk_cache.put("sass", entry, out.stdout.encode())
    return out.stdout


_FUNC_NVDISASM = re.compile(r"^\s*//-+ \.text\.(\S+)\s+-+")
_FUNC_CUOBJDUMP = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L\w+):")


def parse(text: str) -> dict[str, list[Instruction]]:
    """{kernel name: instructions in address order} from nvdisasm or cuobjdump output."""
    kernels: dict[str, list[Instruction]] = {}
    current, label = None, ""
    for line in text.splitlines():
        if m := _FUNC_NVDISASM.match(line) or _FUNC_CUOBJDUMP.match(line):
            current, label = m.group(1), ""
            kernels[current] = []
        elif m := _LABEL.match(line):
            label = m.group(1)
        elif current and (m := _INSN.search(line)):
            kernels[current].append(
                Instruction(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip(), label)
            )
            label = ""
    return kernels


def select(kernels: dict[str, list[Instruction]], kernel: str | None, source: str = "the cubin") -> list[Instruction]:
    """One kernel's instructions from ``parse``'s answer for ``source``: the only one if ``kernel`` is None."""
    if kernel is None:
        if len(kernels) != 1:
            raise ValueError(f"{source} holds kernels {sorted(kernels)}: name one")
        return next(iter(kernels.values()))
    if kernel not in kernels:
        raise ValueError(f"no kernel {kernel!r} in {source}; it holds {sorted(kernels)}")
    return kernels[kernel]


def disassemble(compiled, kernel: str | None = None) -> list[Instruction]:
    """The SASS of one kernel in a ``cuda_cpp.Compiled`` (the only one if ``kernel`` is None)."""
    return select(parse(disassemble_text(compiled.cubin)), kernel)


def counts(instructions: list[Instruction], classes: dict | None = None) -> dict[str, int]:
    """How many instructions of each class (default: CLASSES, plus 'clock read' and 'uniform datapath')."""
    classes = CLASSES if classes is None else classes
    out = {name: sum(i.base in prefixes for i in instructions) for name, prefixes in classes.items()}
    out["clock read"] = sum("SR_CLOCK" in i.operands for i in instructions)
    out["uniform datapath"] = sum(i.uniform for i in instructions)
    return out


def opcodes(instructions: list[Instruction]) -> Counter:
    """Every base opcode and how often it occurs."""
    return Counter(i.base for i in instructions)


def loops(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The bodies of the loops: from a label to a backward branch that targets it, innermost first."""
    at_label = {i.label: n for n, i in enumerate(instructions) if i.label}
    bodies = []
    for n, insn in enumerate(instructions):
        if insn.base == "BRA":
            target = re.search(r"(\.L\w+)", insn.operands)
            if target and target.group(1) in at_label and at_label[target.group(1)] <= n:
                bodies.append(instructions[at_label[target.group(1)] : n + 1])
    return sorted(bodies, key=len)


_GPR = re.compile(r"(?<![U\w])R(\d+)(\.reuse)?")


def register_reads(insn: Instruction) -> list[tuple[int, int, bool]]:
    """(operand slot, register number, flagged .reuse) for each general register an instruction reads
    (RZ and uniform registers excluded). Stores and reductions (ST*, RED) have no destination and read
    every register operand. Otherwise the first operand is the destination and is skipped; an atomic
    (ATOM, ATOMS, ATOMG) may put a predicate result before it (``ATOMG.E.ADD PT, R3, [R2.64], R5``),
    which is skipped too."""
    ops = [o.strip() for o in insn.operands.split(",")]
    if insn.base.startswith(("ST", "RED")):
        sources = ops
    elif insn.base.startswith("ATOM") and re.fullmatch(r"!?U?P(\d+|T)", ops[0]):
        sources = ops[2:]
    else:
        sources = ops[1:]
    return [(slot, int(m.group(1)), bool(m.group(2))) for slot, o in enumerate(sources) for m in _GPR.finditer(o)]


def bank_conflict(insn: Instruction, previous: Instruction | None = None, banks: int = 2) -> bool:
    """True if two distinct registers that ``insn`` reads from the register file fall in one bank
    (register number mod ``banks``), each bank delivering one register per cycle: its operands then take
    two cycles to collect. An operand that ``previous`` flagged ``.reuse`` in the same slot comes from the
    operand-reuse cache instead. This is the strict model (one read port per bank, as Huerta et al. describe
    Ampere); Jia et al. find Volta's two banks 64 bits wide, where only three sources in one bank wait."""
    cached = {(slot, r) for slot, r, reuse in (register_reads(previous) if previous else []) if reuse}
    fetched = {r for slot, r, _ in register_reads(insn) if (slot, r) not in cached}
    return len(fetched) > len({r % banks for r in fetched})


def bank_conflicts(instructions: list[Instruction], opcode: str | None = None) -> int:
    """How many instructions (of base ``opcode``, or all) in a straight run have a register-bank conflict."""
    return sum(
        bank_conflict(i, prev)
        for prev, i in zip([None, *instructions], instructions, strict=False)  # the last is no one's predecessor
        if opcode is None or i.base == opcode
    )


def listing(instructions: list[Instruction], limit: int = 60) -> str:
    """Text of up to ``limit`` instructions, for printing in a notebook."""
    lines = [str(i) for i in instructions[:limit]]
    if len(instructions) > limit:
        lines.append(f"... ({len(instructions) - limit} more)")
    return "\n".join(lines)
