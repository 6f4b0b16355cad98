"""The tests' view of the mock engine (policies/mock_engine.py), which the offline policy check
uses too."""

from policies.mock_engine import (  # noqa: F401 (re-exported for the tests)
    FAKE_CA,
    FAKE_ENDPOINT,
    FAKE_PROJECT_NUMBER,
    INFRA_PROJECT,
    PROJECT_ROOT,
    ProgramRun,
    RecordingMonitor,
    Registration,
    cli_engine_config,
    run_program,
    stack_config,
)
