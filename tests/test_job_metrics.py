"""Step metrics from MaxText's step lines: no line can make the parsing raise, step 0 (it
includes compilation) gives no throughput, and every number in the summary is finite or None."""

from __future__ import annotations

import json

import pytest

from domain.training.job_events import event_line
from domain.training.job_log import DATA_OUTPUTS, JobLog, StepCollector

STEP = (
    "completed step: {step}, seconds: {seconds}, TFLOP/s/device: {tflops}, Tokens/s/device: {tokens}, "
    "total_weights: 64, loss: {loss}"
)


def line(step: int, loss: object = 2.5, tokens: object = 100.0, tflops: object = 2.0, seconds: object = 0.5) -> str:
    return STEP.format(step=step, seconds=seconds, tflops=tflops, tokens=tokens, loss=loss)


NO_DATA = dict.fromkeys(DATA_OUTPUTS)


class Recording(StepCollector):
    """A collector that also lists the steps the reader gave it."""

    def __init__(self):
        super().__init__()
        self.read: list[int] = []

    def add_step(self, step):
        self.read.append(step.step)
        super().add_step(step)


def strict_json(summary: dict) -> dict:
    return json.loads(json.dumps(summary, allow_nan=False))


# Step lines whose numbers do not read: the regular expression matches them, float() or int()
# would not.
UNREADABLE = {
    "loss is a dash": line(5, loss="-"),
    "loss is a word": line(5, loss="abc"),
    "loss runs into text": line(5, loss="2.5abc"),
    "seconds with two points": line(5, seconds="1.2.3"),
    "throughput is a point": line(5, tokens="."),
    "tflops with two points": line(5, tflops="1..0"),
    "step of 5000 digits": line(int("9" * 4000), loss=1.0).replace("9" * 4000, "9" * 5000),
}


@pytest.mark.parametrize("bad", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_a_step_line_whose_numbers_do_not_read_is_no_step(bad):
    log = "\n".join([line(1, loss=3.0), bad, line(2, loss=2.0)])
    collector = Recording()
    JobLog(collector).add_text(log)
    assert collector.read == [1, 2]
    assert collector.summary()["steps_completed"] == 3 and collector.summary()["final_loss"] == 2.0


def test_a_bad_last_line_leaves_the_last_good_loss():
    collector = StepCollector()
    collector.add("\n".join([line(1, loss=3.0), line(2, loss="-")]))
    assert collector.summary()["final_loss"] == 3.0 and collector.summary()["diverged"] is False


def test_only_step_0_seen_gives_no_throughput_but_counts_the_step():
    """Step 0 includes XLA compilation: its throughput is not the run's."""
    collector = StepCollector()
    collector.add(line(0, loss=4.0, tokens=1.0, tflops=0.01))
    assert collector.summary() == {
        "steps_completed": 1,
        "final_loss": 4.0,
        "diverged": False,
        "tokens_per_second_per_device": None,
        "tflops_per_device": None,
        **NO_DATA,
        "tokens_trained": 64,
    }
    collector.add("\n".join([line(0, loss=4.0, tokens=1.0), line(1, loss=3.0, tokens=500.0, tflops=3.0)]))
    summary = collector.summary()
    assert (summary["steps_completed"], summary["tokens_per_second_per_device"], summary["tflops_per_device"]) == (
        2,
        500.0,
        3.0,
    )


@pytest.mark.parametrize("loss", ["nan", "inf", "-inf", "NaN"])
def test_a_last_loss_that_is_not_finite_is_a_divergence_not_a_number(loss):
    collector = StepCollector()
    collector.add("\n".join([line(0, loss=2.0), line(1, loss=loss)]))
    summary = strict_json(collector.summary())
    assert summary["final_loss"] is None and summary["diverged"] is True
    assert summary["steps_completed"] == 2


def test_a_run_that_recovers_is_not_diverged():
    collector = StepCollector()
    collector.add("\n".join([line(1, loss="nan"), line(2, loss=1.5)]))
    assert (collector.summary()["final_loss"], collector.summary()["diverged"]) == (1.5, False)


def test_no_step_seen_says_nothing_about_divergence():
    collector = StepCollector()
    collector.add("no steps here")
    assert collector.summary() == {
        "steps_completed": 0,
        "final_loss": None,
        "diverged": None,
        "tokens_per_second_per_device": None,
        "tflops_per_device": None,
        **NO_DATA,
    }


def test_each_step_s_tokens_count_once_however_often_it_ran():
    """A step recomputed after a restart trained its batch into the model once."""
    collector = StepCollector()
    collector.add("\n".join([line(0), line(1), line(2), line(1), line(2), line(3)]))
    assert collector.summary()["tokens_trained"] == 4 * 64


def weighted(step: int, tokens: int) -> str:
    return line(step).replace("total_weights: 64", f"total_weights: {tokens}")


def saved(step: int, tokens: int, process: int, processes: int = 2) -> str:
    return event_line("step_tokens", step=step, tokens=tokens, process=process, processes=processes)


def test_a_checkpointed_step_never_logged_counts_as_its_processes_said():
    """A preemption save at step 3: MaxText logs step 2 (one step late) and stops before logging
    3; the group restarted from that checkpoint logs from step 4. Counting step 3 as step 4's
    size was off by their difference (issue 32: 6047 or 6141 tokens against a true 6059)."""
    lines = [weighted(0, 50), weighted(1, 51), weighted(2, 52), saved(3, 20, 0), saved(3, 33, 1)]
    lines += [weighted(4, 90), weighted(5, 55)]
    collector = StepCollector()
    collector.add("\n".join(lines))
    assert collector.summary()["tokens_trained"] == 50 + 51 + 52 + 53 + 90 + 55


def test_a_step_whose_processes_did_not_all_say_counts_as_its_successor():
    lines = [weighted(0, 50), saved(1, 20, 0), weighted(2, 90)]  # process 1 of 2 never said
    collector = StepCollector()
    collector.add("\n".join(lines))
    assert collector.summary()["tokens_trained"] == 50 + 90 + 90
    # A checkpointed step that was logged counts once, as logged; a share read after is no more.
    collector = StepCollector()
    collector.add("\n".join([saved(0, 7, 0, 1), weighted(0, 50), saved(0, 9, 0, 1), weighted(1, 60)]))
    assert collector.summary()["tokens_trained"] == 110


def test_the_data_outputs_name_the_corpus_and_count_its_passes_and_the_last_eval():
    # A step of one sequence reads its 64 targets and the sequence's first token: 4 steps read
    # 260 tokens, two passes of 130.
    dataset = event_line(
        "dataset",
        files="/dataset/c/data-*.array_record",
        content_hash="sha256:ab",
        tokens=130,
        passes=2,
        sequences_per_step=1,
    )
    evaluated = (
        "I1204 ... Completed eval after train step 3, loss=5.125, perplexity=168.2, total_weights=256, avg_z_loss=0"
    )
    collector = StepCollector()
    collector.add("\n".join([dataset, line(0), line(1), evaluated, line(2), line(3)]))
    summary = collector.summary()
    assert {key: summary[key] for key in DATA_OUTPUTS} == {
        "tokens_trained": 256,
        "tokens_truncated": None,  # a manifest without each document's tokens
        "epochs": 2.0,
        "eval_loss": 5.125,
        "dataset_files": "/dataset/c/data-*.array_record",
        "dataset_hash": "sha256:ab",
    }


@pytest.mark.parametrize(
    "fields, epochs",
    [
        # Issue 32: 7,521 of a corpus's tokens dropped by the trim made a full pass 0.85 epochs.
        # Two steps of one sequence read 2 x (64 + 1): the 130 a pass keeps of 160.
        ({"tokens": 160, "tokens_truncated": 30, "sequences_per_step": 1}, 1.0),
        ({"tokens": 160, "sequences_per_step": 1}, 0.812),  # without the trim's count: over all 160
        # Steps of 2 sequences: the last a part batch at the end of the data, padded with an
        # empty sequence that reads nothing: counted as read (132 / 130), but no run reads more
        # than the passes it may make.
        ({"tokens": 130, "sequences_per_step": 2}, 1.0),
        ({"tokens": 130, "sequences_per_step": 2, "passes": 2}, 1.015),
        ({"tokens": 130}, None),  # the trainer did not say how many sequences a step reads
    ],
)
def test_a_full_pass_is_one_epoch(fields, epochs):
    collector = StepCollector()
    collector.add("\n".join([event_line("dataset", files="/d/c.array_record", **fields), line(0), line(1)]))
    assert collector.summary()["epochs"] == epochs


def test_throughput_numbers_that_overflow_are_left_out_of_the_medians():
    collector = StepCollector()
    collector.add(
        "\n".join(
            [
                line(1, tokens="9" * 400, tflops="9" * 400),  # float() reads these as inf
                line(2, tokens=200.0, tflops=4.0),
                line(3, tokens=400.0, tflops=8.0),
            ]
        )
    )
    summary = strict_json(collector.summary())
    assert (summary["tokens_per_second_per_device"], summary["tflops_per_device"]) == (300.0, 6.0)
    assert summary["steps_completed"] == 4  # the step happened; only its throughput is unreadable


def test_a_median_that_overflows_is_none():
    collector = StepCollector()
    huge = "1" + "7" * 308  # 1.7e308 read from a line: finite, but two of them average to inf
    collector.add("\n".join([line(1, tokens=huge, tflops=huge), line(2, tokens=huge, tflops=huge)]))
    summary = strict_json(collector.summary())
    assert summary["tokens_per_second_per_device"] is None and summary["tflops_per_device"] is None


def test_only_unreadable_throughput_gives_none_not_nan():
    collector = StepCollector()
    collector.add(line(1, tokens="9" * 400))
    assert strict_json(collector.summary())["tokens_per_second_per_device"] is None
