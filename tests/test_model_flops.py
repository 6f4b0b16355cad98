"""Model FLOPs come from MaxText: the figure behind MFU, tokens/s and the cost estimate is
MaxText's own count for the resolved configuration (the one it logs TFLOP/s/device with), for a
dense, an MoE and a GPT-style model, where the Llama formula it replaces is off by up to 1.7x.

The table is asked of MaxText once, in one process (the config check's, trainer/validate_config.py);
everything after reads its cache. The expected figures are counted here by hand from each
model's published shape, layer by layer, the way MaxText documents its count: 3 x the forward
matmuls (one forward, two backward), the MLP as its architecture runs it (gated or not; for an
MoE the router and the experts each token is routed to), the unembedding but not the embedding
lookup, and attention's two S x S products halved for the causal mask.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest

from domain.perf import fit_results, maxtext_check, maxtext_validation
from domain.perf.capacity import LLAMA_FORMULA, MAXTEXT_FLOPS, llama_formula_flops
from domain.tpu.tpu_catalog import accelerator
from domain.training.job import JobSpec, resolve_job
from policies.check import resources_of
from policies.evaluate import evaluate
from tests.support.tiny_step import TINY_BUFFERS, TINY_HLO, fake_compile
from tests.support.workloads_program import run_workloads
from trainer import fit_check

CHIPS = 32  # the llama3-8b preset: 2 x v6e-16
BATCH, LENGTH = 4, 4096  # the preset's per-device batch and sequence length
PEAK = accelerator("v6e").peak_bf16_tflops_per_chip * 1e12


@dataclass(frozen=True)
class Model:
    """A model's shape as published (MaxText's configs/models/<name>.yml)."""

    name: str
    emb: int
    layers: int
    mlp: int  # per expert for an MoE
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated: bool  # two input projections (SwiGLU), or one (GELU)
    experts: int = 1
    experts_per_token: int = 1
    length: int = LENGTH  # the job's sequence length: the preset's, unless the model's config fixes it

    def flops_per_step(self, batch: int = BATCH) -> float:
        """On all the preset's chips, at `batch` sequences per chip."""
        return self.flops_per_token(self.length) * batch * self.length * CHIPS

    def flops_per_token(self, length: int) -> float:
        mlp = 2 * self.emb * self.mlp * (3 if self.gated else 2) * self.experts_per_token
        router = 2 * self.emb * self.experts if self.experts > 1 else 0
        qkv = 2 * self.emb * (self.heads + 2 * self.kv_heads) * self.head_dim
        out = 2 * self.emb * self.heads * self.head_dim
        unembedding = 2 * self.emb * self.vocab
        weights = 3 * (self.layers * (mlp + router + qkv + out) + unembedding)
        attention = 3 * self.layers * 4 * length * self.heads * self.head_dim / 2
        return weights + attention


DENSE = Model("llama3-8b", 4096, 32, 14336, 32, 8, 128, 128256, gated=True)
MOE = Model("mixtral-8x7b", 4096, 32, 14336, 32, 8, 128, 32000, gated=True, experts=8, experts_per_token=2)
GPT = Model("gpt3-6b", 3072, 48, 12288, 12, 12, 256, 32768, gated=False, length=1024)
MODELS = (DENSE, MOE, GPT)


def job(model: Model, **overrides: str) -> JobSpec:
    return resolve_job(
        "llama3-8b",
        run_name="flops",
        checkpoint_root="/tmp/flops",
        overrides={"model_name": model.name, "max_target_length": str(model.length), **overrides},
    )


@pytest.fixture(scope="module")
def asked() -> list[JobSpec]:
    """Every job of this module asked of MaxText at once (one process), into the checkout's
    config-check cache, where the workloads program and the policies find the answers."""
    jobs = [job(model) for model in MODELS] + [job(DENSE, gradient_accumulation_steps="2")]
    answers = maxtext_check.run_requests([maxtext_validation.flops_request(j) for j in jobs])
    assert [answer["errors"] for answer in answers] == [[]] * len(jobs)
    return jobs


@pytest.mark.parametrize("model", MODELS, ids=[model.name for model in MODELS])
def test_the_products_flops_are_maxtexts_count_for_each_architecture(asked, model):
    flops = maxtext_check.model_flops(job(model))
    assert flops.source == MAXTEXT_FLOPS and flops.fallback_reason is None
    assert flops.per_step == pytest.approx(model.flops_per_step(), rel=1e-9)
    assert (flops.chips, flops.tokens_per_step) == (CHIPS, BATCH * model.length * CHIPS)


def test_the_llama_formula_it_replaces_is_wrong_outside_the_dense_llama():
    """Why MaxText counts: the formula the product used counted one expert of an MoE's two and a
    gated MLP and untied input embedding for every model."""
    ratios = {
        model.name: llama_formula_flops(job(model).maxtext_overrides, chips=CHIPS).per_step / model.flops_per_step()
        for model in MODELS
    }
    assert ratios[DENSE.name] == pytest.approx(1.065, abs=0.005)  # the embedding counted too
    assert ratios[MOE.name] == pytest.approx(0.59, abs=0.01)
    assert ratios[GPT.name] == pytest.approx(1.34, abs=0.01)


def test_a_second_count_is_read_from_the_cache_without_maxtext(asked, monkeypatch):
    def not_asked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("MaxText was asked again for a counted configuration")

    monkeypatch.setattr(maxtext_check, "_ask", not_asked)
    assert all(maxtext_check.model_flops(j).source == MAXTEXT_FLOPS for j in asked)


def test_the_config_check_of_a_job_answers_its_flops_count_too(tmp_path, monkeypatch):
    """The workloads stack checks a job's configuration with its user overrides, then counts its
    FLOPs: one MaxText process for both."""
    monkeypatch.setattr(maxtext_check, "CACHE_DIR", tmp_path)
    user = {"model_name": MOE.name, "per_device_batch_size": "2"}
    moe = resolve_job("llama3-8b", run_name="flops", checkpoint_root="/tmp/flops", overrides=user)
    assert maxtext_check.maxtext_problems(moe, user) == []
    started = []
    monkeypatch.setattr(maxtext_check, "_ask", lambda *args, **kwargs: started.append(args) or [])
    flops = maxtext_check.model_flops(moe)
    assert started == [] and flops.source == MAXTEXT_FLOPS
    assert flops.per_step == pytest.approx(MOE.flops_per_step(batch=2), rel=1e-9)


def test_without_the_trainer_environment_the_fallback_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(maxtext_check, "CACHE_DIR", tmp_path)
    flops = maxtext_check.model_flops(job(MOE), python=tmp_path / "no-python")
    assert flops.source == LLAMA_FORMULA
    assert flops.per_step == llama_formula_flops(job(MOE).maxtext_overrides, chips=CHIPS).per_step
    assert flops.described.startswith("the Llama formula (6 x parameters x tokens + attention; wrong for MoE")
    assert "MaxText could not be asked (" in flops.described and "./scripts/setup" in flops.described


def test_the_fit_checks_mfu_and_tokens_per_second_are_maxtexts(asked, tmp_path, monkeypatch):
    """With gradient accumulation one step runs two micro-batches: MaxText counts both (the
    formula counted one)."""
    compile_, _ = fake_compile(TINY_HLO.read_text(), buffers=TINY_BUFFERS.read_text())
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(fit_check, "compile_step", compile_)
    accumulated = job(DENSE, gradient_accumulation_steps="2")
    result = fit_check.run_fit_check(accumulated)
    per_chip = DENSE.flops_per_token(LENGTH) * 2 * BATCH * LENGTH
    assert result.tokens_per_chip == 2 * BATCH * LENGTH
    assert result.model_flops_per_chip == pytest.approx(per_chip, rel=1e-9)
    assert result.model_flops_source == MAXTEXT_FLOPS
    prediction = result.prediction
    assert prediction is not None
    assert prediction.mfu == pytest.approx(per_chip / (prediction.step_seconds * PEAK), rel=1e-9)
    assert "(MFU and tokens/s from the model FLOPs and tokens of MaxText's count" in result.report()


def test_a_fit_check_recorded_with_the_formula_is_recounted_not_recompiled(asked, tmp_path, monkeypatch):
    compile_, calls = fake_compile(TINY_HLO.read_text(), buffers=TINY_BUFFERS.read_text())
    monkeypatch.setattr(fit_results, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(fit_check, "compile_step", compile_)
    moe = job(MOE)
    fresh = fit_check.run_fit_check(moe)
    old = llama_formula_flops(moe.maxtext_overrides, chips=CHIPS)
    recorded = tmp_path / f"{fit_results.cache_key(moe, fit_check.libtpu_flags(moe))}.json"
    stale = fit_check.FitResult.from_json(recorded.read_text())
    # What an earlier version recorded: the formula's figures, no source.
    stale = dataclasses.replace(stale, model_flops_per_chip=old.per_chip, model_flops_source=None)
    recorded.write_text(stale.to_json())
    again = maxtext_check.recorded_result(moe)
    assert again is not None and again.model_flops_per_chip == fresh.model_flops_per_chip
    assert again.prediction == fresh.prediction and len(calls) == 1


def test_the_workloads_cost_estimate_uses_maxtexts_flops_and_says_so():
    outputs = run_workloads("dev", maxtextOverrides={"model_name": MOE.name})[0].outputs
    expected = MOE.flops_per_step()
    assert outputs["flopsSource"] == MAXTEXT_FLOPS and outputs["estimateSource"] == "assumedMfu"
    assert outputs["flopsPerStep"] == pytest.approx(expected, rel=1e-9)
    assert outputs["estimatedStepSeconds"] == round(expected / (CHIPS * PEAK * 0.40), 3)


def test_the_cost_policy_prices_maxtexts_flops_or_names_its_fallback(tmp_path, monkeypatch):
    resources = resources_of(run_workloads("dev", maxtextOverrides={"model_name": MOE.name, "steps": 10000})[0])
    config = {"rayjob-predicted-cost": {"budgetDollars": 1}}
    [violation] = [v for v in evaluate(resources, config) if v.policy_name == "rayjob-predicted-cost"]
    seconds = MOE.flops_per_step() / CHIPS / (PEAK * 0.40)
    assert f"10000 steps of {seconds:.2f} s on 32 chips" in violation.message
    assert "40% MFU of the model FLOPs of MaxText's count for this configuration" in violation.message
    # A policy run without the trainer environment (a pull request's): the formula, named.
    monkeypatch.setattr(maxtext_check, "CACHE_DIR", tmp_path)
    # Then the project's own interpreter is asked, and it has no MaxText.
    monkeypatch.setattr(maxtext_check, "TRAINER_PYTHON", tmp_path / "no-trainer-python")
    [violation] = [v for v in evaluate(resources, config) if v.policy_name == "rayjob-predicted-cost"]
    assert "40% MFU of the model FLOPs of the Llama formula" in violation.message
    assert "MaxText could not be asked" in violation.message
