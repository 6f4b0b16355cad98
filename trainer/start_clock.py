"""Times a worker group's start on its rank 0, phase by phase (domain/training/start_phases.py),
and writes each phase as an event when it ends.

MaxText already marks the points that matter for Google's goodput library: the end of its
training preparation (the model, the optimizer state and the data pipeline are ready, the
checkpoint restored) and the start of each step. It hands those marks to a recorder it makes with
`create_goodput_recorder`, none unless `enable_goodput_recording`; `StartClock.install` wraps
that function so MaxText's recorder (if any) gets every call as before and this clock gets the
marks too. The restore is timed around MaxText's `checkpointing.load_state_if_possible`, and what
the persistent compilation cache did for the train step comes from JAX's own log of it (JAX
counts hits in `jax.monitoring` too, but without saying which program, and not misses).
tests/test_start_clock.py fails if MaxText or JAX change any of these.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from domain.training.start_phases import TRAIN_STEP_MODULE, CacheResult, TrainerPhase, not_written

# JAX logs each persistent-cache lookup under this logger, at DEBUG, with the program's name and
# its key: "Persistent compilation cache hit for 'jit_train_step' with key '...'" or
# "PERSISTENT COMPILATION CACHE MISS for ...". After a miss it says, at DEBUG too, when it does
# not write what it compiled: "Not writing persistent cache entry for 'jit_train_step' because it
# took < 1.00 seconds to compile (0.52s)".
JAX_COMPILER_LOGGER = "jax._src.compiler"
CACHE_HIT = "Persistent compilation cache hit for"
CACHE_MISS = "PERSISTENT COMPILATION CACHE MISS for"
CACHE_NOT_WRITTEN = "Not writing persistent cache entry for"

Emit = Callable[..., None]


def process_start_time() -> float:
    """When this process started (epoch seconds): Ray starts a worker's process once it has
    placed the worker group."""
    import psutil  # type: ignore[import-untyped]  # psutil ships no type information

    return psutil.Process().create_time()


class _CacheLookups(logging.Filter):
    """Notes what JAX's persistent cache did for the train step. A filter on JAX's compiler
    logger: it sees each lookup JAX logs at DEBUG and lets through only what the logger let
    through before (its level is lowered to DEBUG to see them)."""

    def __init__(self, clock: StartClock, passes: int):
        super().__init__()
        self.clock = clock
        self.passes = passes

    def filter(self, record: logging.LogRecord) -> bool:
        message, args = str(record.msg), record.args
        if isinstance(args, tuple) and args and args[0] == TRAIN_STEP_MODULE:
            key = args[1] if len(args) > 1 and isinstance(args[1], str) else None
            if message.startswith(CACHE_HIT):
                self.clock.cache_result("hit", key)
            elif message.startswith(CACHE_MISS):
                self.clock.cache_result("miss", key)
            elif message.startswith(CACHE_NOT_WRITTEN) and len(args) == 3:
                minimum, took = args[1], args[2]
                if isinstance(minimum, (int, float)) and isinstance(took, (int, float)):
                    self.clock.cache_not_written(minimum, took)
        return record.levelno >= self.passes


class _Recorder:
    """Stands in for MaxText's goodput recorder: forwards every call to MaxText's own (None
    unless enable_goodput_recording) and gives the clock the marks it needs."""

    def __init__(self, clock: StartClock, inner: Any):
        self._clock = clock
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        forward = getattr(self._inner, name, None) if self._inner is not None else None
        mark = {
            "record_training_preparation_end_time": self._clock.prepared,
            "record_step_start_time": self._clock.step_started,
        }.get(name)
        if mark is None:
            return forward

        def both(*args: Any) -> Any:
            mark()
            return forward(*args) if forward is not None else None

        return both


class StartClock:
    """One worker group's start on its rank 0, from the moment its training loop started
    (`loop_started`). The phases are written through `emit` as each ends; a second run of MaxText
    in the same group (the trainer's save where the data ended) writes nothing more."""

    def __init__(self, loop_started: float, emit: Emit, *, cache_on: bool, now: Callable[[], float] = time.time):
        self.loop_started = loop_started
        self.emit = emit
        self.now = now
        self.cache: CacheResult | None = None if cache_on else "off"
        self.cache_key: str | None = None
        self.not_written: str | None = None
        self.restore_seconds = 0.0
        self._prepared_at: float | None = None
        self._step_started_at: float | None = None
        self._first_step_written = False
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- the marks
    def restored(self, seconds: float) -> None:
        """MaxText restored a checkpoint (its train state and data position) in `seconds`."""
        if self._prepared_at is None:
            self.restore_seconds += seconds

    def prepared(self) -> None:
        """MaxText's training preparation ended: its set-up and the restore are done."""
        with self._lock:
            if self._prepared_at is not None:
                return
            self._prepared_at = at = self.now()
        start = max(at - self.loop_started - self.restore_seconds, 0.0)
        self._phase("trainer_start", at - self.restore_seconds, start)
        self._phase("restore", at, self.restore_seconds)

    def step_started(self) -> None:
        """MaxText starts a step: the first one ends the compile (MaxText compiles the train step
        ahead of it)."""
        with self._lock:
            if self._prepared_at is None or self._step_started_at is not None:
                return
            self._step_started_at = at = self.now()
        # None if the cache was on but JAX logged no lookup of the train step: unknown, not
        # guessed. The key and the reason it was not written only where JAX said them.
        said = {"cache_key": self.cache_key, "cache_not_written": self.not_written}
        self._phase(
            "compile",
            at,
            at - self._prepared_at,
            cache=self.cache,
            **{name: value for name, value in said.items() if value is not None},
        )

    def step_logged(self, logged_at: float) -> None:
        """MaxText logged a step at `logged_at` (its own record's time): the first ends the start."""
        with self._lock:
            if self._step_started_at is None or self._first_step_written:
                return
            self._first_step_written = True
        self._phase("first_step", logged_at, max(logged_at - self._step_started_at, 0.0))

    def cache_result(self, result: CacheResult, key: str | None = None) -> None:
        # Without a cache directory JAX still looks each program up (its cache is enabled by
        # default, only never initialized) and logs a miss: a job without a cache stays "off".
        if self._step_started_at is None and self.cache != "off":
            self.cache, self.cache_key = result, key

    def cache_not_written(self, minimum_seconds: float, compile_seconds: float) -> None:
        """JAX compiled the train step and did not write it: it took under JAX's minimum."""
        if self._step_started_at is None and self.cache == "miss":
            self.not_written = not_written(minimum_seconds, compile_seconds)

    def _phase(self, phase: TrainerPhase, ended: float, seconds: float, **fields: Any) -> None:
        self.emit("phase", time=round(ended, 3), phase=phase, seconds=round(seconds, 3), **fields)

    # ---------------------------------------------------------------- hooking MaxText and JAX
    def install(self, train_module: Any, checkpointing_module: Any) -> Callable[[], None]:
        """Hooks this clock into MaxText's train module and checkpointing module, and JAX's
        compiler log; returns what undoes it."""
        make_recorder = train_module.create_goodput_recorder
        load_state = checkpointing_module.load_state_if_possible
        clock = self

        def create_goodput_recorder(config: Any) -> _Recorder:
            return _Recorder(clock, make_recorder(config))

        def load_state_if_possible(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            result = load_state(*args, **kwargs)
            restored = result[0] if isinstance(result, tuple) else result
            if restored is not None:
                clock.restored(time.monotonic() - started)
            return result

        train_module.create_goodput_recorder = create_goodput_recorder
        checkpointing_module.load_state_if_possible = load_state_if_possible
        logger = logging.getLogger(JAX_COMPILER_LOGGER)
        level = logger.level
        lookups = _CacheLookups(self, passes=logger.getEffectiveLevel())
        logger.addFilter(lookups)
        logger.setLevel(logging.DEBUG)

        def uninstall() -> None:
            train_module.create_goodput_recorder = make_recorder
            checkpointing_module.load_state_if_possible = load_state
            logger.removeFilter(lookups)
            logger.setLevel(level)

        return uninstall
