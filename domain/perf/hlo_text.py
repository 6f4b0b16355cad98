"""The TPU compiler's dumps read as text: an optimized HLO module's computations and
instructions (`parse_module`), the arrays of its shapes, a loop's trip count and a collective's
replica groups; and the per-chip HBM of a buffer assignment (`buffer_memory`).

Pure text processing: no JAX, no MaxText. What a step does, from the parsed module, is
domain/perf/hlo_profile.py's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

DTYPE_BITS = {
    "pred": 8,
    "s4": 4,
    "u4": 4,
    "s8": 8,
    "u8": 8,
    "f8e4m3fn": 8,
    "f8e5m2": 8,
    "s16": 16,
    "u16": 16,
    "f16": 16,
    "bf16": 16,
    "s32": 32,
    "u32": 32,
    "f32": 32,
    "s64": 64,
    "u64": 64,
    "f64": 64,
    "c64": 64,
    "c128": 128,
}
# TPU memory spaces in a layout's `S(n)`: none is HBM, 1 the core's VMEM, 5 host memory.
HOST_SPACE = 5
HOST_MEMORY_SPACE = f"S({HOST_SPACE})"
_ARRAY = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\](\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\})?")
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) \(.*\{$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT )?%([\w.\-]+) = (.*?) ([a-z][a-z0-9\-]*)\((.*)$")
_SPACE = re.compile(r"S\((\d+)\)")
_OPERAND = re.compile(r"%([\w.\-]+(?:#\d+)?)")
_CALLED = re.compile(r"\b(calls|body|condition|to_apply)=%([\w.\-]+)")
_CYCLES = re.compile(r'"estimated_cycles":"(\d+)"')
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CONSTANT = re.compile(r"[su]32\[\][^ ]* constant\((\d+)\)")


class HloError(ValueError):
    """The text is not an optimized HLO module this reader understands."""


@dataclass(frozen=True)
class Array:
    dtype: str
    dims: tuple[int, ...]
    space: int  # memory space: 0 HBM, 1 VMEM, 5 host, ...

    @property
    def bytes(self) -> int:
        return math.prod(self.dims) * DTYPE_BITS.get(self.dtype, 32) // 8

    @property
    def host(self) -> bool:
        return self.space == HOST_SPACE


def arrays(shape_text: str) -> list[Array]:
    """Every array in a (possibly tuple) HLO shape, in order."""
    found = []
    for dtype, dims, layout in _ARRAY.findall(shape_text):
        if dtype not in DTYPE_BITS:
            continue
        space = _SPACE.search(layout or "")
        found.append(Array(dtype, tuple(int(d) for d in dims.split(",") if d), int(space.group(1)) if space else 0))
    return found


def array_texts(shape_text: str) -> list[str]:
    """The text of every array in a (possibly tuple) HLO shape, in order: `arrays`' own spans."""
    return [m.group(0) for m in _ARRAY.finditer(shape_text) if m.group(1) in DTYPE_BITS]


def hbm_bytes(shape_text: str) -> int:
    """Bytes of the arrays of a shape that live in HBM."""
    return sum(a.bytes for a in arrays(shape_text) if a.space == 0)


@dataclass(frozen=True)
class Instruction:
    name: str
    shape: str
    opcode: str
    rest: str

    @property
    def called(self) -> dict[str, str]:
        return dict(_CALLED.findall(self.rest))

    @property
    def operands(self) -> list[str]:
        """Operand names, `name#k` for element k of a tuple-shaped operand."""
        depth = 1
        for position, char in enumerate(self.rest):
            depth += char == "("
            depth -= char == ")"
            if depth == 0:
                return _OPERAND.findall(self.rest[:position])
        return []

    @property
    def estimated_cycles(self) -> int:
        """libtpu's cost-model estimate: only in a dump written after code generation."""
        found = _CYCLES.search(self.rest)
        return int(found.group(1)) if found else 0


@dataclass(frozen=True)
class Module:
    entry: str
    computations: dict[str, list[Instruction]]


def parse_module(text: str) -> Module:
    """Splits an HLO module's text into computations and instructions (an instruction's
    attributes may run over several lines: they are joined)."""
    computations: dict[str, list[Instruction]] = {}
    entry = None
    current: list[Instruction] | None = None
    pending: list[str] = []

    def flush() -> None:
        if current is not None and pending:
            found = _INSTRUCTION.match(" ".join(pending))
            if found:
                current.append(Instruction(*found.groups()))
        pending.clear()

    for line in text.splitlines():
        header = None if line.startswith(" ") else _HEADER.match(line)
        if header:
            flush()
            current = computations.setdefault(header.group(2), [])
            if header.group(1):
                entry = header.group(2)
        elif line == "}":
            flush()
            current = None
        elif current is not None:
            if line.startswith("  %") or line.startswith("  ROOT %"):
                flush()
            pending.append(line)
    flush()
    if entry is None:
        raise HloError("no ENTRY computation: not an HLO module's text")
    return Module(entry, computations)


def trip_count(module: Module, loop: Instruction) -> int:
    """A while loop's trip count: the compiler's known_trip_count when it wrote one, else the
    bound its condition compares the counter against (MaxText's scanned layers: `i < N`; the
    loops of a windowed, collective matmul count with an unsigned counter)."""
    known = _TRIP_COUNT.search(loop.rest)
    if known:
        return int(known.group(1))
    condition = module.computations.get(loop.called.get("condition", ""), [])
    bounds = [
        int(c) for i in condition if i.opcode == "constant" for c in _CONSTANT.findall(f"{i.shape} constant({i.rest}")
    ]
    if len(bounds) != 1:
        raise HloError(f"cannot tell the trip count of {loop.name}: its condition has {len(bounds)} constants")
    return bounds[0]


def group_crosses_slices(replica_groups: str, chips_per_slice: int) -> tuple[int, bool]:
    """(group size, whether a group spans slices) for an HLO `replica_groups=` value in any of
    its three forms: explicit `{{0,1},{2,3}}`, iota `[2,2]<=[4]` (with an optional transpose
    `T(1,0)` of the reshaped iota), or mesh axes `mesh['a'=2,'b'=16] {'a'}`. Device ids are
    numbered slice by slice, so a group spans slices when its ids fall in different blocks of
    `chips_per_slice`."""
    groups = _expand_groups(replica_groups)
    size = len(groups[0]) if groups else 1
    crosses = any(len({device // chips_per_slice for device in group}) > 1 for group in groups)
    return size, crosses


def group_slices(replica_groups: str, chips_per_slice: int) -> int:
    """How many slices the widest group of an HLO `replica_groups=` value spans."""
    groups = _expand_groups(replica_groups)
    return max((len({device // chips_per_slice for device in group}) for group in groups), default=1)


def _expand_groups(text: str) -> list[list[int]]:
    text = text.strip()
    mesh = re.match(r"mesh\[([^\]]*)\]\s*\{([^}]*)\}", text)
    if mesh:
        axes = [(name, int(size)) for name, size in re.findall(r"'([^']+)'=(\d+)", mesh.group(1))]
        chosen = set(re.findall(r"'([^']+)'", mesh.group(2)))
        return _mesh_groups([size for _, size in axes], [name in chosen for name, _ in axes])
    iota = re.match(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    if iota:
        group_shape = [int(d) for d in iota.group(1).split(",")]
        reshape = [int(d) for d in iota.group(2).split(",")]
        order = [int(d) for d in iota.group(3).split(",")] if iota.group(3) else list(range(len(reshape)))
        ids = _transposed_iota(reshape, order)
        width = group_shape[-1] if len(group_shape) > 1 else len(ids)
        return [ids[i : i + width] for i in range(0, len(ids), width)]
    explicit = re.findall(r"\{([\d,\s]*)\}", text)
    return [[int(d) for d in g.split(",") if d.strip()] for g in explicit if g.strip()]


def _transposed_iota(dims: list[int], order: list[int]) -> list[int]:
    """The ids 0..N-1 shaped as `dims`, transposed by `order`, flattened."""
    strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
    shape = [dims[i] for i in order]
    ids = []
    for flat in range(math.prod(dims)):
        index, rem = [], flat
        for extent in reversed(shape):
            index.append(rem % extent)
            rem //= extent
        index.reverse()
        ids.append(sum(index[k] * strides[order[k]] for k in range(len(order))))
    return ids


def _mesh_groups(sizes: list[int], chosen: list[bool]) -> list[list[int]]:
    strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
    inner = [i for i, c in enumerate(chosen) if c]
    outer = [i for i, c in enumerate(chosen) if not c]
    groups = []
    for fixed in _index_space([sizes[i] for i in outer]):
        base = sum(f * strides[i] for f, i in zip(fixed, outer, strict=True))
        groups.append(
            [
                base + sum(v * strides[i] for v, i in zip(free, inner, strict=True))
                for free in _index_space([sizes[i] for i in inner])
            ]
        )
    return groups


def _index_space(sizes: list[int]) -> Iterator[tuple[int, ...]]:
    if not sizes:
        yield ()
        return
    for head in range(sizes[0]):
        for tail in _index_space(sizes[1:]):
            yield (head, *tail)


@dataclass(frozen=True)
class BufferMemory:
    """Per-chip HBM the compiled step needs, from the compiler's buffer assignment, known before
    code generation. Against the memory analysis MaxText prints after a full compile (four
    compiles: two tiny models, the llama3-8b preset, the 70B anchor): arguments, outputs and
    aliased bytes equal; temporaries 16,352 bytes fewer (code generation's own scratch,
    presumably)."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.temp_bytes + self.output_bytes - self.alias_bytes


_ALLOCATION = re.compile(r"^allocation \d+: size (\d+), (.*):$", re.MULTILINE)


def buffer_memory(text: str) -> BufferMemory:
    """Reads a `*-buffer-assignment.txt` dump. HBM allocations carry no color (others are VMEM,
    host memory, ...): entry parameters are arguments, `maybe-live-out` ones outputs (both:
    aliased, donated), and the one `preallocated-temp` block holds every temporary."""
    argument = output = alias = temp = 0
    found = False
    for size_text, tags in _ALLOCATION.findall(text):
        found = True
        if re.search(r"\bcolor [1-9]", tags):
            continue
        size = int(size_text)
        parameter, live_out = "parameter" in tags, "maybe-live-out" in tags
        argument += size if parameter else 0
        output += size if live_out else 0
        alias += size if parameter and live_out else 0
        temp += size if "preallocated-temp" in tags else 0
    if not found:
        raise HloError("no allocations: not a buffer assignment dump")
    return BufferMemory(argument, output, alias, temp)
