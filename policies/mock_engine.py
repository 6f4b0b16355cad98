"""Runs a Pulumi program under the SDK's mocks and records every registration as the engine
would receive it: type, name, inputs (camelCase, as serialized), parent, dependencies and options.

This is how the offline policy check (`python -m policies.check`) sees a stack without cloud
credentials, and how the tests inspect the programs. Mocks run no provider code, so computed
outputs a real provider would return (a cluster's endpoint, a service account's email, the
project number) are filled in here with fake values.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks as pulumi_mocks

from domain.config import cli_config
from domain.paths import INFRA_PROJECT, PROJECT_ROOT, WORKLOADS_DIR

FAKE_PROJECT_NUMBER = "123456789012"
FAKE_ENDPOINT = "203.0.113.10"
FAKE_CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"
# How Pulumi's wire format marks a secret value (the "4dabf18193072939515e22adb298388d" key of a
# property value holds this signature).
SECRET_SIGNATURE = "1b47061264138c4ac30d75fd1eb44270"


@dataclass
class Registration:
    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    custom: bool
    parent: str
    dependencies: list[str]
    delete_before_replace: bool
    provider: str
    custom_timeouts: dict[str, str]
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_inputs: frozenset[str] = frozenset()  # top-level inputs that hold a secret on the wire


class _FakeProviderOutputs(pulumi.runtime.Mocks):
    """Echoes inputs back as outputs, plus what the real providers would compute, and serves
    other stacks' outputs to StackReferences."""

    def __init__(self, stack_outputs: dict[str, dict[str, Any]] | None = None):
        self.stack_outputs = stack_outputs or {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if args.typ == "pulumi:pulumi:StackReference":
            name = args.inputs["name"]
            return name, {"name": name, "outputs": self.stack_outputs[name], "secretOutputNames": []}
        outputs = dict(args.inputs)
        outputs.setdefault("name", args.name)
        resource_id = f"{args.name}-id"
        if args.typ == "gcp:container/cluster:Cluster":
            outputs["endpoint"] = FAKE_ENDPOINT
            outputs["masterAuth"] = {"clusterCaCertificate": FAKE_CA}
            # The provider's id of a cluster is its full resource name.
            resource_id = (
                f"projects/{args.inputs['project']}/locations/{args.inputs['location']}/clusters/{outputs['name']}"
            )
        elif args.typ == "gcp:serviceaccount/account:Account":
            outputs["email"] = f"{args.inputs['accountId']}@{args.inputs['project']}.iam.gserviceaccount.com"
        return resource_id, outputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        if args.token == "gcp:organizations/getProject:getProject":
            return {"number": FAKE_PROJECT_NUMBER, "projectId": args.args.get("projectId")}
        raise AssertionError(f"unexpected invoke {args.token}")


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, stack_outputs: dict[str, dict[str, Any]] | None = None):
        super().__init__(_FakeProviderOutputs(stack_outputs))
        self.registrations: list[Registration] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            state = self.resources[response.urn].state
            self.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    inputs=pulumi.runtime.rpc.deserialize_properties(request.object),
                    secret_inputs=frozenset(
                        key for key, value in request.object.fields.items() if SECRET_SIGNATURE in str(value)
                    ),
                    custom=request.custom,
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    delete_before_replace=request.deleteBeforeReplace,
                    provider=request.provider,
                    custom_timeouts={
                        "create": request.customTimeouts.create,
                        "update": request.customTimeouts.update,
                        "delete": request.customTimeouts.delete,
                    },
                    outputs=state,
                )
            )
        return response


@dataclass
class ProgramRun:
    registrations: list[Registration]
    outputs: dict[str, Any]

    def of_type(self, type_token: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_token]

    def one(self, type_token: str) -> Registration:
        found = self.of_type(type_token)
        assert len(found) == 1, f"expected one {type_token}, found {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> Registration:
        found = [r for r in self.registrations if r.name == name]
        assert len(found) == 1, f"expected one resource named {name}, found {len(found)}"
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.registrations if r.urn == urn)

    def custom_resources(self, kind: str) -> list[Registration]:
        return [r for r in self.registrations if r.type.endswith(f":{kind}") and r.type.startswith("kubernetes:")]


def stack_config(stack: str = "dev", project_dir: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The `config:` map of a stack file, as `pulumi config` would hand it to the program."""
    data = yaml.safe_load((project_dir / f"Pulumi.{stack}.yaml").read_text())
    return dict(data.get("config") or {})


def project_directory(project: str) -> Path:
    """The directory of this checkout's project named `project` (the infra or the workloads one)."""
    for directory in (PROJECT_ROOT, WORKLOADS_DIR):
        if cli_config.project_document(directory)["name"] == project:
            return directory
    raise ValueError(f"no Pulumi.yaml of this checkout names the project {project!r}; pass its project_dir")


def cli_engine_config(
    config: dict[str, Any], *, project: str, stack: str, project_dir: Path | None = None
) -> dict[str, str]:
    """What the CLI's language host hands the program of a stack whose file holds `config`: the
    project file's defaults merged in, every value as text. Raises CliConfigError where the CLI
    would stop instead."""
    document = cli_config.project_document(project_dir or project_directory(project))
    return cli_config.engine_text(cli_config.merged(document, stack, config, project=project))


def run_program(
    program: Callable[[], dict[str, Any] | Awaitable[dict[str, Any]]],
    config: dict[str, Any],
    *,
    project: str = INFRA_PROJECT,
    stack: str = "dev",
    monitor: RecordingMonitor | None = None,
    secret_keys: frozenset[str] = frozenset(),
    project_dir: Path | None = None,
) -> ProgramRun:
    """Runs `program` (which returns its stack outputs, or a coroutine that does, as an async
    program given to `pulumi.run` would) under mocks with the config the CLI would hand it for a
    stack file holding `config`: the project file's defaults merged in, every value as text
    (domain/config/cli_config.py). What the CLI would refuse raises CliConfigError before the
    program starts.

    Pass a `monitor` to inspect what was registered even when the program raises, `secret_keys`
    for config set with `pulumi config set --secret`, and `project_dir` for a project named
    otherwise than this checkout's two.
    """
    engine_config = cli_engine_config(config, project=project, stack=stack, project_dir=project_dir)
    monitor = monitor or RecordingMonitor()
    pulumi.runtime.set_mocks(monitor.mocks, project=project, stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(engine_config, sorted(secret_keys))
    captured: dict[str, Any] = {}

    @pulumi.runtime.test
    def evaluate():
        outputs = program()
        return pulumi.Output.from_input(outputs).apply(captured.update)

    try:
        evaluate()
    finally:
        pulumi.runtime.set_all_config({})
    return ProgramRun(monitor.registrations, captured)
