"""How close the fit check's roofline comes to libtpu's own cost model, class of work by class.

The fit check stops the compile before code generation, so it never sees libtpu's per-instruction
`estimated_cycles`; it times each instruction by its matmul FLOPs or HBM bytes instead, at the
rates in domain/perf/speed_anchors.py. Those rates come from this comparison. Run it on the dump of a
full compile:

    .venv/bin/python -m trainer.fit_check --preset llama3-8b --full-compile --hlo-dump /tmp/dump
    .venv/bin/python -m benchmarks.roofline_vs_cost_model /tmp/dump/*jit_train_step*.after_codegen.txt

It prints, per dump and class, the class's share of the cost model's cycles and the cost model's
cycles over the roofline's at peak (918 TFLOP/s, 1640 GB/s on v6e): the divisor of the peak rate
in domain/perf/speed_anchors.py. Then the step's compute at the model's rates over the cost model's.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from domain.perf.hlo_profile import WORK_KINDS, computation_runs, computation_work
from domain.perf.hlo_text import parse_module
from domain.perf.speed_anchors import V6E, V6E_HBM

# The cost model's cycle: 524,288 FLOPs per cycle at peak (it times the largest matmul fusions
# at 95% of peak at this clock).
FLOPS_PER_CYCLE = 524_288


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+", type=Path, help="*.after_codegen.txt of full compiles")
    args = parser.parse_args()
    clock = V6E.peak_flops / FLOPS_PER_CYCLE
    peak = {"matmul_flops": V6E.peak_flops, "memory_bytes": V6E_HBM, "reduce_bytes": V6E_HBM, "slice_bytes": V6E_HBM}
    model = {
        "matmul_flops": V6E.matmul_flops_per_second,
        "memory_bytes": V6E.memory_bytes_per_second,
        "reduce_bytes": V6E.reduce_bytes_per_second,
        "slice_bytes": V6E.slice_bytes_per_second,
    }
    for dump in args.dumps:
        module = parse_module(dump.read_text())
        cost_model: dict[str, float] = defaultdict(float)
        amounts: dict[str, float] = defaultdict(float)
        for name, runs in computation_runs(module).items():
            for instruction, kind, amount in computation_work(module, name, 1 << 30, V6E.mxu_width):
                if kind in WORK_KINDS:
                    cost_model[kind] += runs * instruction.estimated_cycles / clock
                    amounts[kind] += runs * amount
        total = sum(cost_model.values())
        if not total:
            raise SystemExit(f"{dump}: no estimated_cycles (not a dump written after code generation)")
        print(dump.name)
        for kind in WORK_KINDS:
            roofline = amounts[kind] / peak[kind]
            ratio = cost_model[kind] / roofline if roofline else float("nan")
            print(f"  {kind:13s} {100 * cost_model[kind] / total:5.1f}% of cycles, cost model / roofline {ratio:6.2f}")
        modelled = sum(amounts[kind] / model[kind] for kind in WORK_KINDS)
        print(f"  compute at the model's rates / cost model's: {modelled / total:.4f}")


if __name__ == "__main__":
    main()
