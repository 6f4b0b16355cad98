"""The product's packages are layers: the tools and the benchmarks on top, then the policy pack,
then the programs and the trainer, then the engine's config, then the domain; each imports only
the layers below it. The contract is pyproject.toml's "the product is layered"; import-linter
checks it (tests/test_domain_layers.py runs every contract over the tree), and here it is shown
to hold a back-up import: over a copy of the tree, and over a toy of its package names."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from domain.paths import PROJECT_ROOT
from tests.support.import_contracts import run_lint_imports

NAME = "the product is layered"
OPTIONS = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
(CONTRACT,) = [c for c in OPTIONS["contracts"] if c["name"] == NAME]
# Each layer's packages, highest layer first.
LAYERS = [[name.strip() for name in layer.replace(":", "|").split("|")] for layer in CONTRACT["layers"]]
PACKAGES = [name for layer in LAYERS for name in layer]


def lint_imports(root: Path, packages: list[str]) -> subprocess.CompletedProcess[str]:
    """import-linter's CLI on the packages under `root`, with only this contract."""
    lines = [
        "[tool.importlinter]",
        f"root_packages = {packages!r}",
        f"exclude_type_checking_imports = {str(OPTIONS['exclude_type_checking_imports']).lower()}",
        "[[tool.importlinter.contracts]]",
        f"name = {NAME!r}",
        'type = "layers"',
        f"layers = {CONTRACT['layers']!r}",
    ]
    config = root / "importlinter.toml"
    config.write_text("\n".join(lines) + "\n")
    return run_lint_imports(root, config)


def report(checked: subprocess.CompletedProcess[str]) -> str:
    return checked.stdout + checked.stderr


def test_every_package_of_the_product_is_in_a_layer():
    """A new top-level package cannot escape the contract: it must be given a layer."""
    found = {path.parent.name for path in PROJECT_ROOT.glob("*/__init__.py")} - {"tests"}
    assert sorted(PACKAGES) == sorted(found)
    assert sorted(OPTIONS["root_packages"]) == sorted(found)


def test_the_tree_keeps_its_layers():
    checked = run_lint_imports(PROJECT_ROOT)
    assert f"{NAME} KEPT" in checked.stdout, report(checked)


def test_a_copy_of_the_tree_breaks_the_contract_when_the_docs_generator_comes_back_down(tmp_path):
    """The arrow issue 34 removed: the generator of the docs tables, back in stack_config/ and
    reading the policy pack for the rules table, is the engine's config importing the pack."""
    for package in PACKAGES:
        shutil.copytree(PROJECT_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    kept = lint_imports(tmp_path, PACKAGES)
    (tmp_path / "stack_config" / "sync.py").write_text("from policies.rules import markdown_table as rules_table\n")
    broken = lint_imports(tmp_path, PACKAGES)

    assert kept.returncode == 0, report(kept)
    assert broken.returncode == 1, report(broken)
    assert "stack_config is not allowed to import policies" in broken.stdout, report(broken)
    assert "stack_config.sync -> policies.rules" in broken.stdout, report(broken)


# Every package of a layer below the top, importing a package of the layer above it.
BACK_UP = [(low, LAYERS[index - 1][0]) for index in range(1, len(LAYERS)) for low in LAYERS[index]]


@pytest.mark.parametrize("low, high", BACK_UP, ids=[f"{low}->{high}" for low, high in BACK_UP])
def test_any_import_of_a_higher_layer_breaks_the_contract(tmp_path, low, high):
    """Over a toy of the product's package names (one empty module each), one import of a higher
    layer, under TYPE_CHECKING as an annotation would make it, is reported by name."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "module.py").write_text("")
    kept = lint_imports(tmp_path, PACKAGES)
    (tmp_path / low / "module.py").write_text(
        f"from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import {high}.module\n"
    )
    broken = lint_imports(tmp_path, PACKAGES)

    assert kept.returncode == 0, report(kept)
    assert broken.returncode == 1, report(broken)
    assert f"{low}.module -> {high}.module" in broken.stdout, report(broken)


def test_packages_of_one_layer_split_by_a_bar_import_none_of_each_other(tmp_path):
    """`workloads | infra | trainer`: the two programs and the trainer stand apart."""
    siblings = next(layer for layer in LAYERS if "workloads" in layer)
    assert len(siblings) > 1
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / siblings[0] / "module.py").write_text(f"import {siblings[1]}\n")

    broken = lint_imports(tmp_path, PACKAGES)

    assert broken.returncode == 1, report(broken)
    assert f"{siblings[0]}.module -> {siblings[1]}" in broken.stdout, report(broken)
