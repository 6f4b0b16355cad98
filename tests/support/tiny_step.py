"""The tiny step's fixtures (an optimized HLO module and its buffer assignment, as XLA dumps
them), a toy hardware with round rates to predict its time on, and a fake compile that dumps them
as the fit check's compile does."""

from __future__ import annotations

from pathlib import Path

from domain.perf.step_time import Hardware

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY_HLO = FIXTURES / "tiny_step.hlo.txt"
TINY_BUFFERS = FIXTURES / "tiny_step.buffer-assignment.txt"

# Rates in units per second, round so the tests can work the times out by hand.
TOY_HARDWARE = Hardware(
    generation="test",
    peak_flops=1000.0,
    mxu_width=4,
    matmul_flops_per_second=100.0,
    kernel_flops_per_second=1000.0,
    memory_bytes_per_second=100.0,
    reduce_bytes_per_second=50.0,
    slice_bytes_per_second=25.0,
    ici_bytes_per_second=10.0,
    dcn_bytes_per_second=1.0,
    host_bytes_per_second=5.0,
)


def fake_compile(hlo: str | None, output: str = "", buffers: str | None = None):
    """A compile that dumps `hlo` (the optimized module) where XLA_FLAGS says, as XLA does, and
    either gets as far as buffer assignment (`buffers`: it dumps it and is stopped there) or
    ends, printing `output`."""
    calls = []

    def compile_(command, *, env, dump_dir, full, **kwargs):
        calls.append(command)
        assert f"--xla_dump_to={dump_dir}" in env["XLA_FLAGS"]
        dump_dir.mkdir(parents=True)
        if hlo is not None:
            (dump_dir / "module_0000.jit_train_step.cl_1.after_optimizations.txt").write_text(hlo)
        if buffers is not None and not full:
            (dump_dir / "module_0000.jit_train_step.cl_1.after_optimizations-buffer-assignment.txt").write_text(buffers)
            return "", True
        return output, False

    return compile_, calls
