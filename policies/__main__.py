"""Serves the pack to the Pulumi engine. The SDK's PolicyPack starts a gRPC server and blocks
forever, so nothing else belongs here: every rule lives in `policies.rules`, importable and
testable without the engine."""

from pulumi_policy import PolicyPack

from policies.rules import ALL

PolicyPack(name="maxtext-tpu-policies", policies=ALL)
