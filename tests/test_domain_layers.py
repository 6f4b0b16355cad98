"""domain/'s packages are layers without a cycle: each imports only the packages below it, an
import under TYPE_CHECKING counted too. The contract is pyproject.toml's [tool.importlinter];
import-linter checks it (and the config's other contracts: tests/test_package_boundaries.py), and
its report says which import breaks it."""

from __future__ import annotations

import tomllib

from domain.paths import PROJECT_ROOT
from tests.support.import_contracts import run_lint_imports


def test_domain_keeps_its_layers():
    checked = run_lint_imports(PROJECT_ROOT, PROJECT_ROOT / "pyproject.toml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_contract_names_each_package_of_domain_whole():
    """Its layers name domain/'s packages and top-level modules, every one of them and nothing
    inside a package: a module added to a package is in its package's layer, with no change here."""
    options = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in options["contracts"] if c["name"] == "domain is layered"]
    named = [name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")]
    domain = PROJECT_ROOT / "domain"
    present = {
        f"domain.{path.stem}"
        for path in domain.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists()) or (path.suffix == ".py" and path.stem != "__init__")
    }
    assert sorted(named) == sorted(present)


def test_a_type_checking_import_of_a_higher_layer_breaks_the_contract(tmp_path):
    """The same contract over a copy of domain's package names, where the lowest layer's first
    package names the highest under TYPE_CHECKING: the check fails, naming that import."""
    options = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in options["contracts"] if c["type"] == "layers" and c["layers"][0].startswith("domain.")]
    layers = [layer.replace("domain.", "toy.") for layer in contract["layers"]]
    names = [name.strip() for layer in layers for name in layer.replace(":", "|").split("|")]
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # and the packages on its way (toy.gcp of toy.gcp.dcn)
            package = tmp_path.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
    (tmp_path / "toy" / "__init__.py").write_text("")
    highest, lowest = names[0], names[-1]
    tmp_path.joinpath(*lowest.split("."), "__init__.py").write_text(
        f"from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import {highest}\n"
    )
    config = tmp_path / "pyproject.toml"
    lines = [
        "[tool.importlinter]",
        'root_package = "toy"',
        f"exclude_type_checking_imports = {str(options['exclude_type_checking_imports']).lower()}",
        "[[tool.importlinter.contracts]]",
        f"name = {contract['name']!r}",
        'type = "layers"',
        f"layers = {layers!r}",
    ]
    config.write_text("\n".join(lines) + "\n")

    checked = run_lint_imports(tmp_path, config)

    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "BROKEN" in checked.stdout and f"{lowest} -> {highest}" in checked.stdout, checked.stdout
