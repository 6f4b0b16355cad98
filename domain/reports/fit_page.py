"""The fit check as a page: a chip's HBM by what holds it against the usable capacity, the margin,
what to change when it does not fit, and the predicted speed with its error band.

Each value is formatted as FitResult.report() prints it and keyed (`data-key`) by the result's
field or the prediction's attribute it shows, so a test compares the page with the result."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from domain.perf.capacity import FLOPS_SOURCES
from domain.perf.fit_results import BUFFER_ASSIGNMENT, FitResult, ways_to_fit
from domain.perf.step_time import Prediction
from domain.reports import page, plots
from domain.training.maxtext_config import base_config

# Bytes per element of the dtypes MaxText stores weights and AdamW's first moment in; another
# dtype leaves the arguments unsplit.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The parts a predicted step adds up to (Prediction's attributes), as its report names them.
STEP_PARTS = (
    ("compute", "compute_seconds", "#27ae60"),
    ("exposed ICI", "exposed_ici_seconds", "#2e86c1"),
    ("exposed DCN", "exposed_dcn_seconds", "#8e44ad"),
    ("host transfer", "exposed_host_seconds", "#7f8c8d"),
)


def fit_page(result: FitResult) -> str:
    maxtext = result.configuration.get("maxtext", {})
    verdict = "FITS" if result.fits else "DOES NOT FIT"
    sections = [
        page.Section(
            "Verdict",
            [
                page.Fact("result", verdict, "fits"),
                page.Fact("target", f"{result.slices} x {result.slice_type}", "slice_type"),
                page.Fact("chips", str(result.chips), "chips"),
                *_compiler(result),
            ],
            warning=not result.fits,
        ),
        _memory(result, maxtext),
    ]
    if not result.fits:
        # The settings that lower a step's HBM, with the job's values: each needs a check of its own.
        ways = [page.Fact(f"{n}.", way, "ways_to_fit") for n, way in enumerate(ways_to_fit(maxtext), 1)]
        sections.append(page.Section("To fit, try one of (then check again)", ways, warning=True))
    sections.append(_speed(result))
    settings = [page.Fact(key, value, f"maxtext.{key}") for key, value in sorted(maxtext.items())]
    sections.append(page.Section("MaxText settings compiled (over its base.yml)", settings))
    title = f"Fit check: {maxtext.get('model_name', 'a model')} on {result.slices} x {result.slice_type}"
    return page.render(title, f"{result.chips} chips: {verdict}", sections)


def _compiler(result: FitResult) -> list[page.Fact]:
    facts = []
    if result.compile_seconds is not None:
        stage = "the whole compile" if result.full_compile_seconds is not None else "to buffer assignment"
        facts.append(page.Fact("compiler time here", f"{result.compile_seconds:.0f} s ({stage})", "compile_seconds"))
    if result.flops_per_step is not None:  # XLA counts a scanned loop's body once: shown as it says
        facts.append(page.Fact("compiler's FLOPs per step per chip", f"{result.flops_per_step:.4g}", "flops_per_step"))
    return facts


def _memory(result: FitResult, maxtext: Mapping[str, str]) -> page.Section:
    usable = page.Fact("usable HBM per chip", f"{result.usable_gib:.2f} GiB", "usable_gib")
    notes = [f"compiler: {result.message}"] if result.message else []
    if result.compiled_through == BUFFER_ASSIGNMENT:
        notes.append("compiled through buffer assignment (code generation skipped: --full-compile runs it)")
    if result.total_gib is None or result.argument_gib is None or result.temp_gib is None:
        # An out-of-memory error without the buffer assignment dumped before it: no sizes.
        notes.insert(0, "the compiler gave no per-chip sizes, only its verdict")
        return page.Section("HBM per chip", [usable], notes=notes, warning=not result.fits)
    output, alias = result.output_gib or 0.0, result.alias_gib or 0.0
    facts = [
        page.Fact("arguments (parameters, optimizer state, batch)", f"{result.argument_gib:.2f} GiB", "argument_gib"),
        page.Fact("temporaries (activations, gradients, XLA's scratch)", f"{result.temp_gib:.2f} GiB", "temp_gib"),
        page.Fact("output", f"{output:.2f} GiB", "output_gib"),
        page.Fact("aliased (outputs written over arguments)", f"{alias:.2f} GiB", "alias_gib"),
        page.Fact("total", f"{result.total_gib:.2f} GiB", "total_gib"),
        usable,
        page.Fact("headroom", f"{result.headroom_percent:.1f}%", "headroom_percent"),
    ]
    over = result.total_gib - result.usable_gib
    if not result.fits:
        facts.append(page.Fact("over the limit by", f"{over:.2f} GiB per chip", "over_gib"))
        facts.append(page.Fact("over, of usable HBM", f"{100 * over / result.usable_gib:.1f}%", "over_percent"))
    elif over > 0:
        notes.append(
            f"the compiler placed every buffer in {result.total_gib:.2f} GiB, above the {result.usable_gib:.2f} GiB "
            f"the catalog gives a TPU {result.slice_type.split('-')[0]} chip: its limit is higher with this libtpu"
        )
    # The bar adds up to the total as MaxText computes it: arguments + temporaries + outputs
    # - aliased, so only the outputs not written over arguments take HBM of their own.
    split = _state_split(result.argument_gib, maxtext)
    if split is None:
        notes.append(
            "The compiler reports the arguments as one (the parameters, the optimizer's state and the batch): "
            "they are not split here, as the optimizer or its dtypes are not ones this page can size."
        )
        parts = [plots.Part("arguments: state, batch", result.argument_gib, "#2e86c1")]
    else:
        parameters, state, assumed = split
        facts[1:1] = [
            page.Fact("of which parameters (derived)", f"{parameters:.2f} GiB", "parameter_gib"),
            page.Fact("of which optimizer state (derived)", f"{state:.2f} GiB", "optimizer_state_gib"),
        ]
        notes.append(assumed)
        parts = [
            plots.Part("parameters", parameters, "#2e86c1"),
            plots.Part("optimizer state", state, "#85c1e9"),
        ]
    parts.append(plots.Part("temporaries: activations, grads, scratch", result.temp_gib, "#f39c12"))
    if output - alias > 0.005:
        parts.append(plots.Part("outputs not aliased", output - alias, "#7d3c98"))
    figure = plots.stacked_bar(
        "hbm",
        "HBM per chip by kind",
        parts,
        xlabel="GiB per chip",
        limit=plots.Level(result.usable_gib, f"usable HBM ({result.usable_gib:.2f} GiB)"),
        caption=f"{result.total_gib:.2f} GiB of {result.usable_gib:.2f} GiB usable, as the compiler placed it",
    )
    return page.Section("HBM per chip", facts, [figure], notes, warning=not result.fits)


def _state_split(argument_gib: float, maxtext: Mapping[str, str]) -> tuple[float, float, str] | None:
    """The arguments as parameters and optimizer state, derived from the dtypes the configuration
    stores them in; None when that is not known. The compiler reports the arguments as one."""
    defaults = _maxtext_defaults()
    setting = {key: str(maxtext.get(key, defaults.get(key, ""))) for key in ("opt_type", "weight_dtype", "mu_dtype")}
    # optax.adamw keeps its first moment (mu) in mu_dtype (MaxText: the weight dtype when unset)
    # and its second (nu) in each parameter's dtype, sharded as the parameter is.
    weight = DTYPE_BYTES.get(setting["weight_dtype"])
    mu = DTYPE_BYTES.get(setting["mu_dtype"] or setting["weight_dtype"])
    if setting["opt_type"] != "adamw" or weight is None or mu is None:
        return None
    parameters = argument_gib * weight / (2 * weight + mu)
    assumed = (
        "Parameters and optimizer state are derived, not reported: the compiler gives the arguments as one. "
        f"AdamW keeps mu in {setting['mu_dtype'] or setting['weight_dtype']} and nu in the weights' "
        f"{setting['weight_dtype']}, each sharded as its parameter, so the parameters are "
        f"{Fraction(weight, 2 * weight + mu)} of the arguments (the batch and step counters in the arguments "
        "are counted with them)."
    )
    return parameters, argument_gib - parameters, assumed


def _maxtext_defaults() -> Mapping[str, Any]:
    """MaxText's base.yml (the installed MaxText, as the trainer lock pins it); empty when it is
    not installed, and the arguments then stay unsplit."""
    try:
        return base_config()
    except (RuntimeError, OSError):
        return {}


def _speed(result: FitResult) -> page.Section:
    prediction = result.prediction
    if prediction is None:
        return page.Section(
            "Predicted speed", [page.Fact("predicted step time", f"none ({result.missing_prediction})", "step_seconds")]
        )
    step = prediction.step_seconds
    band = prediction.band
    span = band.step_range(step) if band is not None else None
    facts = [
        page.Fact("predicted step time", f"{step:.3f} s", "step_seconds"),
        page.Fact(
            "step time the error band allows",
            f"{span[0]:.3f} to {span[1]:.3f} s" if span else "uncalibrated",
            "step_range",
        ),
        page.Fact("error band", band.describe(step) if band else "uncalibrated: no error band", "band"),
        page.Fact(
            "predicted tokens/s per chip", f"{prediction.tokens_per_second_per_chip:,.0f}", "tokens_per_second_per_chip"
        ),
        page.Fact("predicted MFU", f"{100 * prediction.mfu:.1f}%", "mfu"),
    ]
    facts += [page.Fact(f"of which {label}", f"{getattr(prediction, key):.3f} s", key) for label, key, _ in STEP_PARTS]
    if prediction.calibrated_on:
        facts.append(page.Fact("calibrated on", ", ".join(prediction.calibrated_on), "calibrated_on"))
    cost = prediction.multislice
    if cost is not None and cost.not_known is not None:
        facts.append(page.Fact("DCN term", cost.not_known, "multislice_band"))
    elif cost is not None:
        facts += [
            page.Fact("DCN share of the step", f"{100 * cost.share:.1f}% ({cost.dcn_seconds:.3f} s)", "dcn_share"),
            page.Fact(
                f"per-chip throughput on {cost.slices} slices against one",
                f"{cost.slowdown_percent:+.1f}%",
                "multislice_slowdown_percent",
            ),
            page.Fact("DCN term's band", cost.band.describe(), "multislice_band"),
            page.Fact(
                f"on {cost.slices + 1} slices",
                f"step {cost.next_step_seconds:.3f} s, dollars per token {cost.next_token_cost_percent:+.1f}%",
                "next_slice",
            ),
        ]
    source = FLOPS_SOURCES.get(result.model_flops_source or "", "a count this result does not name")
    notes = [
        f"MFU and tokens/s from the model FLOPs and tokens of {source}.",
        "A compiler-model estimate, not a TPU measurement: docs/capacity.md gives its error.",
    ]
    return page.Section("Predicted speed", facts, [_step_bar(prediction, span)], notes)


def _step_bar(prediction: Prediction, span: tuple[float, float] | None) -> page.Figure:
    """The predicted step as its parts (they add up to it), with the slowest step the band allows."""
    parts = [plots.Part(label, getattr(prediction, key), color) for label, key, color in STEP_PARTS]
    shown = [part for part in parts if part.value > 0] or parts[:1]
    return plots.stacked_bar(
        "step_time",
        "Predicted step time by part",
        shown,
        xlabel="seconds per step",
        limit=plots.Level(span[1], f"slowest the band allows ({span[1]:.3f} s)") if span else None,
        caption=(
            f"{prediction.step_seconds:.3f} s predicted"
            + (f"; the error band allows {span[0]:.3f} to {span[1]:.3f} s" if span else "; uncalibrated: no band")
            + " (parts with no time are left out)"
        ),
    )
