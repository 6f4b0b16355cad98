"""Which package may import which: the domain is shared by all and imports none of them; the
Pulumi side (the infra and workloads programs, the policy pack) reads fit-check results through
the domain, never through the trainer's command-line fit check; the local Ray cluster
(workloads/local_ray/) imports nothing else of workloads/ (a contract in pyproject.toml's
[tool.importlinter], which tests/test_domain_layers.py checks over the product)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from domain.paths import PROJECT_ROOT

PRODUCT_PACKAGES = ("trainer", "workloads", "infra", "policies", "benchmarks", "stack_config", "tools")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((PROJECT_ROOT / "domain").rglob("*.py")), ids=lambda p: p.name)
def test_the_domain_imports_no_other_package_of_the_product(path):
    outside = {name for name in imported_modules(path) if name.split(".")[0] in PRODUCT_PACKAGES}
    assert not outside, f"{path.relative_to(PROJECT_ROOT)} imports {sorted(outside)}"


def test_the_pulumi_side_loads_no_module_of_the_trainer():
    """The fit check's results and MaxText's config check are read through the domain; the
    trainer's command-line modules run in the trainer environment, by module name."""
    code = (
        "import sys\n"
        "import infra.program, workloads.program, workloads.job_inputs, workloads.job_resolution, policies.rules.rayjob\n"
        "print(sorted(m for m in sys.modules if m == 'trainer' or m.startswith('trainer.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_the_check_would_see_an_import_of_the_trainer(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from trainer.fit_check import FitResult\nimport workloads.ray_job\n")
    assert {"trainer.fit_check", "workloads.ray_job"} <= imported_modules(module)


def test_no_test_module_imports_another_and_the_benchmarks_import_no_test_code():
    """What tests share lives in tests/support/ (or tests/conftest.py's fixtures, which pytest
    shares without an import); the benchmarks are product code and import nothing of the tests."""
    tests = sorted((PROJECT_ROOT / "tests").glob("*.py"))
    test_imports = {
        path.name: sorted(name for name in imported_modules(path) if name.startswith(("tests.test_", "tests.conftest")))
        for path in tests
    }
    assert {name: found for name, found in test_imports.items() if found} == {}
    benchmark_imports = {
        path.name: sorted(name for name in imported_modules(path) if name.split(".")[0] == "tests")
        for path in sorted((PROJECT_ROOT / "benchmarks").rglob("*.py"))
    }
    assert {name: found for name, found in benchmark_imports.items() if found} == {}


CLOCK = re.compile(r"\b(monotonic|perf_counter|time\.time|sleep)\(")


def test_a_test_module_that_reads_the_clock_is_marked_timed():
    """./scripts/test runs the tests not marked `timed` beside the timed ones at a lower priority,
    where a deadline a test asserts could pass for want of CPU: a module that reads the clock,
    itself or through a support module that does, marks it (`slow` implies it, tests/conftest.py)."""
    support = {
        f"tests.support.{path.stem}"
        for path in (PROJECT_ROOT / "tests" / "support").glob("*.py")
        if CLOCK.search(path.read_text())
    }
    unmarked = [
        path.name
        for path in sorted((PROJECT_ROOT / "tests").glob("test_*.py"))
        if (CLOCK.search(text := path.read_text()) or imported_modules(path) & support)
        and not re.search(r"\bmark\.(timed|slow)\b", text)
    ]
    assert support, "no support module reads the clock: the pattern no longer finds it"
    assert unmarked == []


def test_no_property_test_is_held_to_a_deadline():
    """Hypothesis' deadline is a bound on the clock that a property test (not `timed`, run at a
    lower priority) could miss for want of CPU: the suite's profile has none, and no test sets one."""
    from hypothesis import settings

    assert settings.default.deadline is None
    setting = re.compile(r"\bdeadline=(?!None\b)")
    assert [
        path.name for path in sorted((PROJECT_ROOT / "tests").glob("test_*.py")) if setting.search(path.read_text())
    ] == []


def test_the_local_ray_contract_sees_an_import_of_the_rest_of_workloads(tmp_path):
    """pyproject.toml's contract for workloads.local_ray, over a toy workloads/: kept while
    local_ray's modules import only each other (its forbidden wildcard, workloads.*, matches
    local_ray itself, which import-linter skips), broken, naming the import, once one of them
    imports another module of workloads/."""
    options = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in options["contracts"] if c.get("source_modules") == ["workloads.local_ray"]]
    package = tmp_path / "workloads" / "local_ray"
    package.mkdir(parents=True)
    for module in ("__init__.py", "local_ray/__init__.py", "local_ray/ports.py", "jobs_api.py"):
        (tmp_path / "workloads" / module).write_text("")
    (package / "head.py").write_text("from workloads.local_ray import ports\n")
    config = tmp_path / "pyproject.toml"
    lines = [
        "[tool.importlinter]",
        'root_package = "workloads"',
        "[[tool.importlinter.contracts]]",
        f"name = {contract['name']!r}",
        f"type = {contract['type']!r}",
        f"source_modules = {contract['source_modules']!r}",
        f"forbidden_modules = {contract['forbidden_modules']!r}",
    ]
    config.write_text("\n".join(lines) + "\n")
    lint_imports = [str(Path(sys.executable).with_name("lint-imports")), "--config", str(config), "--no-cache"]

    kept = subprocess.run(lint_imports, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    (package / "head.py").write_text("from workloads.local_ray import ports\nimport workloads.jobs_api\n")
    broken = subprocess.run(lint_imports, cwd=tmp_path, capture_output=True, text=True, timeout=120)

    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "workloads.local_ray.head -> workloads.jobs_api" in broken.stdout, broken.stdout
