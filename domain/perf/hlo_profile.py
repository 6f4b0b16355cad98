"""What one training step does on each chip, read from the TPU compiler's optimized HLO.

The fit check's compile dumps the optimized, scheduled module (`*.after_optimizations.txt`,
written once buffer assignment has placed every buffer in HBM). This module walks it, as
domain/perf/hlo_text.py parses it, from its entry computation, multiplies every `while` body by
its trip count (MaxText scans its decoder layers, so most of the step is in loops) and sums, per
computation, the work each engine does:

- matmul FLOPs: every convolution (XLA's TPU form of a dot), counted over the positions its
  window really covers and padded to whole MXU tiles in the output-feature dimension;
- HBM bytes of everything else, in three classes the cost model rates differently: reductions,
  slices, and other memory-bound work (elementwise fusions, copies, broadcasts). A fusion reads
  only the slices it takes of an operand and writes only the update of a dynamic-update-slice;
- splash-attention (Pallas kernel) FLOPs, from the kernels' operands and block sizes;
- bytes each chip moves over ICI and over DCN (collectives, megascale sends), and to and from
  host memory (offloaded activations).

No JAX, no MaxText. domain/perf/step_time.py turns a profile into seconds. libtpu's own
per-instruction `estimated_cycles` appear only after code generation, which takes most of a
compile; `Instruction.estimated_cycles` reads them from such a dump, so the rates can be checked
against the cost model (benchmarks/roofline_vs_cost_model.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from domain.perf.hlo_text import (
    HOST_MEMORY_SPACE,
    Instruction,
    Module,
    array_texts,
    arrays,
    group_crosses_slices,
    group_slices,
    hbm_bytes,
    parse_module,
    trip_count,
)

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")

_KERNEL_BLOCKS = re.compile(r'\\"block_q(?:_dkv|_dq)?\\": (\d+), \\"block_kv(?:_dkv|_dq)?\\": (\d+)')


def all_reduce_bytes(size: float, members: int) -> float:
    """Bytes one member sends in a ring all-reduce of `size` bytes over `members` (chips or
    slices): a reduce-scatter then an all-gather, each sending (members - 1)/members of it."""
    return 2 * size * (members - 1) / members if members > 1 else 0.0


def collective_bytes(opcode: str, shape: str, group_size: int) -> float:
    """Bytes one chip sends for a collective with a ring algorithm over `group_size` chips."""
    size = sum(a.bytes for a in arrays(shape))
    if group_size <= 1:
        return 0.0
    share = (group_size - 1) / group_size
    if opcode == "all-reduce":
        return all_reduce_bytes(size, group_size)
    if opcode == "reduce-scatter":
        return size * (group_size - 1)  # the result is one chip's share of the input
    if opcode == "collective-permute":
        return float(size)
    return size * share  # all-gather (size of the gathered result), all-to-all


def attention_kernel_flops(instruction: Instruction) -> float:
    """FLOPs of one splash-attention Pallas kernel, which the cost model leaves out, from its
    query and key operands (leading dimensions: batch and heads; then sequence, head dim) and the
    block sizes in its metadata: causal masking skips the key blocks wholly above the diagonal.
    Matmuls per block: forward 2 (QK^T, PV); dq 3 (QK^T, dP, dQ); dkv 4 (QK^T, dV, dP, dK), or 5
    when fused with dq (it then returns dq too: three results)."""
    name = instruction.name
    if not name.startswith("splash_mha"):
        return 0.0
    operands = [a for a in arrays(_operand_constraints(instruction.rest)) if len(a.dims) >= 3 and a.dtype != "s8"]
    if len(operands) < 2:
        return 0.0
    query, key = operands[0], operands[1]
    rows, q_len, head_dim = math.prod(query.dims[:-2]), query.dims[-2], query.dims[-1]
    kv_len = key.dims[-2]
    blocks = _KERNEL_BLOCKS.search(instruction.rest)
    block_q, block_kv = (int(blocks.group(1)), int(blocks.group(2))) if blocks else (q_len, kv_len)
    computed = _causal_block_fraction(q_len, kv_len, block_q, block_kv)
    if "_fwd" in name:
        matmuls = 2
    elif "_dq" in name:
        matmuls = 3
    else:
        matmuls = 5 if len(arrays(instruction.shape)) >= 3 else 4
    return matmuls * 2.0 * rows * q_len * kv_len * head_dim * computed


def _operand_constraints(rest: str) -> str:
    found = re.search(r"operand_layout_constraints=\{(.*?)\}, (?:frontend_attributes|metadata|backend_config)", rest)
    return found.group(1) if found else ""


def _causal_block_fraction(q_len: int, kv_len: int, block_q: int, block_kv: int) -> float:
    rows, cols = max(1, q_len // block_q), max(1, kv_len // block_kv)
    computed = sum(min(cols, ((r + 1) * block_q + block_kv - 1) // block_kv) for r in range(rows))
    return computed / (rows * cols)


@dataclass
class Scope:
    """One computation's work per run, and how many times a step runs it."""

    name: str
    runs: int
    matmul_flops: float = 0.0  # padded to whole MXU tiles
    memory_bytes: float = 0.0  # HBM bytes of elementwise fusions, copies, broadcasts, ...
    reduce_bytes: float = 0.0  # HBM bytes of reductions
    slice_bytes: float = 0.0  # HBM bytes of slices
    kernel_flops: float = 0.0
    ici_bytes: float = 0.0
    dcn_bytes: float = 0.0
    # Ring steps of the transfers across slices (2(N-1) for an all-reduce over N slices, N-1 for
    # a gather or scatter): what each cross-slice transfer waits on besides its bytes.
    dcn_steps: float = 0.0
    dcn_transfers: float = 0.0  # how many transfers cross slices
    host_bytes: float = 0.0


@dataclass(frozen=True)
class StepProfile:
    """What one step does on each chip, computation by computation."""

    scopes: tuple[Scope, ...] = field(default_factory=tuple)

    def total(self, attribute: str) -> float:
        return sum(getattr(s, attribute) * s.runs for s in self.scopes)

    def to_json(self) -> dict[str, list[dict[str, float | int | str]]]:
        return {"scopes": [vars(s).copy() for s in self.scopes]}

    @classmethod
    def from_json(cls, data: dict[str, list[dict[str, float | int | str]]]) -> StepProfile:
        return cls(tuple(Scope(**s) for s in data["scopes"]))  # type: ignore[arg-type]


# Instructions that do no work of their own on the core: bookkeeping, control flow (their
# computations are walked), and what runs on other engines (counted as transfers).
NO_WORK = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "while",
        "call",
        "conditional",
        "custom-call",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "send",
        "send-done",
        "recv",
        "recv-done",
        "async-start",
        "async-update",
        "async-done",
        "copy-start",
        "copy-done",
    }
)
SLICES = frozenset({"slice", "dynamic-slice"})
WORK_KINDS = ("matmul_flops", "memory_bytes", "reduce_bytes", "slice_bytes")


def profile(text: str, *, chips_per_slice: int, mxu_width: int) -> StepProfile:
    """The step's profile from the optimized module's text, for a chip whose MXUs are
    `mxu_width` wide."""
    module = parse_module(text)
    scopes = []
    for name, runs in computation_runs(module).items():
        scope = Scope(name, runs)
        for _, kind, amount in computation_work(module, name, chips_per_slice, mxu_width):
            setattr(scope, kind, getattr(scope, kind) + amount)
        scopes.append(scope)
    return StepProfile(tuple(scopes))


def computation_runs(module: Module) -> dict[str, int]:
    """How many times one step runs each computation that holds scheduled work: the entry, and
    the bodies of its loops (times their trip counts) and calls."""
    runs: dict[str, int] = {}

    def walk(name: str, times: int) -> None:
        runs[name] = runs.get(name, 0) + times
        for instruction in module.computations.get(name, []):
            called = instruction.called
            if instruction.opcode == "while":
                walk(called["body"], times * trip_count(module, instruction))
            elif instruction.opcode in ("call", "conditional"):
                for target in called.values():
                    walk(target, times)

    walk(module.entry, 1)
    return runs


def computation_work(
    module: Module, name: str, chips_per_slice: int, mxu_width: int
) -> Iterator[tuple[Instruction, str, float]]:
    """(instruction, Scope attribute, amount) for every piece of work in one run of a computation."""
    instructions = module.computations.get(name, [])
    shapes = _Shapes(instructions)
    for instruction in instructions:
        if instruction.opcode == "custom-call":
            yield instruction, "kernel_flops", attention_kernel_flops(instruction)
        for kind, bytes_ in _transfers(module, instruction, chips_per_slice):
            yield instruction, kind, bytes_
        work = core_work(module, instruction, shapes, mxu_width)
        if work is not None:
            yield instruction, *work


def core_work(module: Module, instruction: Instruction, shapes: _Shapes, mxu_width: int) -> tuple[str, float] | None:
    """What bounds an instruction on the core: its MXU FLOPs when it multiplies matrices (the
    large ones are compute-bound by far), else the HBM bytes it reads and writes, by class."""
    opcode = instruction.opcode
    if opcode in NO_WORK or opcode.endswith(("-start", "-done")) or opcode in COLLECTIVES:
        return None
    if opcode == "convolution":
        return "matmul_flops", convolution_flops(instruction, shapes, mxu_width)
    if opcode == "fusion":
        fused = instruction.called.get("calls", "")
        flops = _fused_flops(module, fused, mxu_width)
        if flops:
            return "matmul_flops", flops
        return "memory_bytes", float(fusion_bytes(module, instruction, shapes))
    if opcode in SLICES:
        return "slice_bytes", 2.0 * hbm_bytes(instruction.shape)  # reads the slice, writes it
    total = hbm_bytes(instruction.shape) + sum(hbm_bytes(shapes[o]) for o in instruction.operands)
    return ("reduce_bytes" if opcode == "reduce" else "memory_bytes"), float(total)


class _Shapes:
    """A computation's instruction shapes by name; `name#k` is element k of a tuple."""

    def __init__(self, instructions: list[Instruction]) -> None:
        self.by_name = {i.name: i.shape for i in instructions}

    def __getitem__(self, name: str) -> str:
        base, _, element = name.partition("#")
        shape = self.by_name.get(base, "")
        if not element:
            return shape
        spans = array_texts(shape)
        return spans[int(element)] if int(element) < len(spans) else ""


def convolution_flops(instruction: Instruction, shapes: _Shapes, mxu_width: int) -> float:
    """FLOPs of a convolution (XLA's TPU form of every dot): 2 x batch x output features x input
    features x, per spatial dimension, the (output, window) position pairs that fall inside the
    input; batched matmuls put the batch in a padded window, so counting positions, not window
    sizes, keeps them exact. Output features are padded to whole MXU tiles: a 128-wide head on a
    256-wide MXU uses half of it."""
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", instruction.rest)
    operands = instruction.operands
    lhs = arrays(shapes[operands[0]]) if operands else []
    out = arrays(instruction.shape)
    if labels is None or not lhs or not out:
        return 0.0
    lhs_labels, _, out_labels = labels.groups()
    lhs_dims, out_dims = lhs[0].dims, out[0].dims
    window = re.search(r"window=\{([^}]*)\}", instruction.rest)
    attributes = dict(part.split("=", 1) for part in window.group(1).split()) if window else {}
    spatial = sum(c.isdigit() for c in out_labels)

    def per_dimension(key: str, default: int) -> list[int]:
        return [int(v) for v in attributes[key].split("x")] if key in attributes else [default] * spatial

    size, stride = per_dimension("size", 1), per_dimension("stride", 1)
    lhs_dilation, rhs_dilation = per_dimension("lhs_dilate", 1), per_dimension("rhs_dilate", 1)
    pads = [int(p.split("_")[0]) for p in attributes["pad"].split("x")] if "pad" in attributes else [0] * spatial
    groups = re.search(r"feature_group_count=(\d+)", instruction.rest)
    features = out_dims[out_labels.index("f")]
    padded = -(-features // mxu_width) * mxu_width
    multiplies = out_dims[out_labels.index("b")] * padded
    multiplies *= lhs_dims[lhs_labels.index("f")] // (int(groups.group(1)) if groups else 1)
    for d in range(spatial):
        inputs, outputs = lhs_dims[lhs_labels.index(str(d))], out_dims[out_labels.index(str(d))]
        covered = 0
        for o in range(outputs):
            for k in range(size[d]):
                position = o * stride[d] - pads[d] + k * rhs_dilation[d]
                if position >= 0 and position % lhs_dilation[d] == 0 and position // lhs_dilation[d] < inputs:
                    covered += 1
        multiplies *= covered
    return 2.0 * multiplies


def _fused_flops(module: Module, name: str, mxu_width: int) -> float:
    instructions = module.computations.get(name, [])
    shapes = _Shapes(instructions)
    total = 0.0
    for instruction in instructions:
        if instruction.opcode == "convolution":
            total += convolution_flops(instruction, shapes, mxu_width)
        elif instruction.opcode == "fusion":
            total += _fused_flops(module, instruction.called.get("calls", ""), mxu_width)
    return total


def fusion_bytes(module: Module, fusion: Instruction, shapes: _Shapes) -> int:
    """HBM bytes a fusion moves: each operand in full, except one it only slices (the slices) or
    only updates in place (nothing: the update is the write); plus its results, where a
    dynamic-update-slice writes only its update."""
    fused = module.computations.get(fusion.called.get("calls", ""), [])
    by_name = {i.name: i for i in fused}
    users: dict[str, list[Instruction]] = {}
    for instruction in fused:
        for operand in instruction.operands:
            users.setdefault(operand, []).append(instruction)

    def readers(name: str) -> list[tuple[Instruction, str]]:
        found = []
        for user in users.get(name, []):
            found += readers(user.name) if user.opcode == "bitcast" else [(user, name)]
        return found

    operands = fusion.operands
    total = 0
    for instruction in fused:
        if instruction.opcode != "parameter":
            continue
        index = int(re.match(r"\d+", instruction.rest).group(0))  # type: ignore[union-attr]
        full = hbm_bytes(shapes[operands[index]]) if index < len(operands) else 0
        uses = readers(instruction.name)
        if uses and all(u.opcode in SLICES and u.operands[0] == via for u, via in uses):
            total += min(full, sum(sum(a.bytes for a in arrays(u.shape)) for u, _ in uses))
        elif not (uses and all(u.opcode == "dynamic-update-slice" and u.operands[0] == via for u, via in uses)):
            total += full

    def written(node: Instruction | None) -> int:
        while node is not None and node.opcode == "bitcast":
            node = by_name.get(node.operands[0])
        if node is None:
            return 0
        if node.opcode == "tuple":
            return sum(written(by_name.get(o)) for o in node.operands)
        if node.opcode == "dynamic-update-slice":
            update = by_name.get(node.operands[1])
            return sum(a.bytes for a in arrays(update.shape)) if update else 0
        return hbm_bytes(node.shape)

    return total + (written(fused[-1]) if fused else hbm_bytes(fusion.shape))


def _transfers(module: Module, instruction: Instruction, chips_per_slice: int) -> Iterable[tuple[str, float]]:
    """(ici_bytes | dcn_bytes | host_bytes, bytes) this instruction moves off the chip."""
    opcode, shape, rest = instruction.opcode, instruction.shape, instruction.rest
    if opcode.endswith("-done"):
        return
    if opcode == "async-start":
        inner = module.computations.get(instruction.called.get("calls", ""), [])
        root = next((i for i in inner if i.opcode not in ("parameter", "constant")), None)
        if root is None:
            return
        if root.opcode in COLLECTIVES:
            yield from _collective(root.opcode, _async_result(shape), root.rest, chips_per_slice)
        elif HOST_MEMORY_SPACE in shape:
            yield "host_bytes", _host_async_bytes(root.opcode, shape)
        return
    if opcode == "send" and "_xla_megascale_transfer_type" in rest:
        yield "dcn_bytes", megascale_bytes(shape, rest)
        yield "dcn_steps", megascale_steps(rest)
        yield "dcn_transfers", 1.0
        return
    base = opcode.removesuffix("-start")
    if base in COLLECTIVES:
        result = _async_result(shape) if opcode.endswith("-start") else shape
        yield from _collective(base, result, rest, chips_per_slice)
    elif opcode == "copy-start" and HOST_MEMORY_SPACE in shape:
        yield "host_bytes", float(arrays(shape)[0].bytes)


def megascale_bytes(shape: str, rest: str) -> float:
    """Bytes one chip sends across slices for a megascale (DCN) send: libtpu lowers cross-slice
    collectives to host sends tagged with the collective and the slices it spans, e.g.
    `_xla_megascale_transfer_type="ALL_REDUCE"`, `_xla_megascale_target="{0,1}x{0:3}"`."""
    kind = re.search(r'_xla_megascale_transfer_type="(\w+)"', rest)
    target = re.search(r'_xla_megascale_target="\{([^}]*)\}', rest)
    slices = _count_ids(target.group(1)) if target else 2
    payload = [a for a in arrays(shape) if a.dims]
    size = payload[0].bytes if payload else 0
    if slices <= 1:
        return 0.0
    share = (slices - 1) / slices
    transfer = kind.group(1) if kind else ""
    if transfer == "ALL_REDUCE":
        return all_reduce_bytes(size, slices)
    if transfer == "ALL_GATHER":
        return float(size * (slices - 1))  # each slice's piece goes to every other slice
    if transfer in ("REDUCE_SCATTER", "ALL_TO_ALL"):
        return size * share  # each slice keeps its own share
    return float(size)


def megascale_steps(rest: str) -> float:
    """Ring steps of a megascale send over its N slices: an all-reduce is a reduce-scatter then an
    all-gather, N-1 steps each; any other transfer is one."""
    kind = re.search(r'_xla_megascale_transfer_type="(\w+)"', rest)
    target = re.search(r'_xla_megascale_target="\{([^}]*)\}', rest)
    return ring_steps(kind.group(1) if kind else "", _count_ids(target.group(1)) if target else 2)


def ring_steps(transfer: str, slices: int) -> float:
    """`transfer` as megascale names it (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ...)."""
    if slices <= 1:
        return 0.0
    if transfer == "ALL_REDUCE":
        return 2.0 * (slices - 1)
    if transfer in ("ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"):
        return float(slices - 1)
    return 1.0


def _count_ids(text: str) -> int:
    """How many ids `1,2` or `0:3` (an inclusive range: host_transfers.txt lists endpoints 0 to 3
    for it) or `0:2,5` names."""
    count = 0
    for part in text.split(","):
        if ":" in part:
            low, high = part.split(":")
            count += int(high) - int(low) + 1
        elif part.strip():
            count += 1
    return count


def _collective(opcode: str, shape: str, rest: str, chips_per_slice: int) -> Iterable[tuple[str, float]]:
    groups = re.search(
        r"replica_groups=(mesh\[[^\]]*\]\s*\{[^}]*\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?|\{(?:\{[\d,]*\},?)*\})",
        rest,
    )
    if opcode == "collective-permute":
        listed = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", rest)
        pairs = re.findall(r"\{(\d+),(\d+)\}", listed.group(1) if listed else "")
        crosses = any(int(a) // chips_per_slice != int(b) // chips_per_slice for a, b in pairs)
        yield ("dcn_bytes" if crosses else "ici_bytes"), collective_bytes(opcode, shape, 2)
        if crosses:
            yield "dcn_steps", 1.0
            yield "dcn_transfers", 1.0
        return
    size, crosses = group_crosses_slices(groups.group(1), chips_per_slice) if groups else (1, False)
    yield ("dcn_bytes" if crosses else "ici_bytes"), collective_bytes(opcode, shape, size)
    if crosses and groups:
        yield "dcn_steps", ring_steps(opcode.upper().replace("-", "_"), group_slices(groups.group(1), chips_per_slice))
        yield "dcn_transfers", 1.0


def _async_result(shape: str) -> str:
    """The result of an async start: `((operands...), result, context...)` for `async-start`,
    `(operand, result)` for `all-gather-start` and the like, or the result itself."""
    spans = array_texts(shape)
    text = shape.strip()
    if text.startswith("(("):
        depth = 0
        for position, char in enumerate(text[1:], start=1):
            depth += char == "("
            depth -= char == ")"
            if depth == 0:
                operands = len(arrays(text[1:position]))
                return spans[operands] if operands < len(spans) else shape
    if text.startswith("(") and len(spans) >= 2:
        payload = [span for span in spans if not span.startswith(("u32[]", "s32[]"))]
        return payload[-1] if payload else shape
    return shape


def _host_async_bytes(root_opcode: str, shape: str) -> float:
    """Bytes of an async host transfer: the update written to host memory, or the slice read."""
    parts = arrays(shape)
    if root_opcode == "dynamic-update-slice" and len(parts) > 1:
        return float(parts[1].bytes)  # operands are (buffer, update, indices...)
    result = [a for a in parts if not a.dims == ()]
    device_side = [a for a in result if not a.host]
    return float(device_side[-1].bytes if device_side else result[-1].bytes)
