"""Tests of the offline conformance checker itself.

Other tests trust "no errors" from it, so each check is shown to accept the upstream reference
manifests and to reject a realistic mistake at the right path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.k8s_conformance import (
    CELRuleError,
    apply_defaults,
    crd_schema,
    normalize_numbers,
    require_schema,
    schemas_dir,
    validate_against_schema,
    validate_builtin,
    validate_custom_resource,
    validate_pod_template,
)
from tests.support.shared import require_shared

PLACEHOLDERS = {
    "${KSA_NAME}": "ray-workload",
    "${GS_BUCKET}": "maxtext-checkpoints-demo",
    "${DOCKER_IMAGE}": "rayproject/ray:2.60.0-py312-tpu",
}


def reference_documents(name: str) -> list[dict]:
    text = require_shared(f"reference/{name}").read_text()
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return [document for document in yaml.safe_load_all(text) if document]


@pytest.fixture(scope="module")
def raycluster_crd() -> Path:
    return require_schema("ray.io_rayclusters.yaml")


@pytest.fixture(scope="module")
def computeclass_schema() -> dict:
    return json.loads(require_schema("computeclass_v1.json").read_text())


@pytest.fixture
def claim_template() -> dict:
    return reference_documents("ray-cluster.tpu-multi-slice.yaml")[0]


@pytest.fixture
def raycluster() -> dict:
    return reference_documents("ray-cluster.tpu-multi-slice.yaml")[1]


@pytest.fixture
def compute_class() -> dict:
    return reference_documents("autopilot-dranet-compute-class.yaml")[0]


def assert_one_error(errors: list[str], path: str, text: str = "") -> None:
    matching = [error for error in errors if error.startswith(f"{path}:") and text in error]
    assert matching, f"no error at {path!r} mentioning {text!r} in {errors}"


# --------------------------------------------------------------------------- RayCluster CRD


def test_reference_multi_slice_raycluster_is_valid(raycluster, raycluster_crd):
    assert validate_custom_resource(raycluster, raycluster_crd) == []


def test_reference_v6e_16_raycluster_is_valid(raycluster_crd):
    (cluster,) = reference_documents("ray-cluster.tpu-v6e-16.yaml")
    assert validate_custom_resource(cluster, raycluster_crd) == []


def test_unknown_field_in_spec_is_rejected(raycluster, raycluster_crd):
    raycluster["spec"]["workerGroups"] = []
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert errors == ["spec.workerGroups: unknown field"]


def test_unknown_field_deep_in_worker_group_is_rejected(raycluster, raycluster_crd):
    container = raycluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["securityContext"]["privilegd"] = True
    errors = validate_custom_resource(raycluster, raycluster_crd)
    path = "spec.workerGroupSpecs[0].template.spec.containers[0].securityContext.privilegd"
    assert errors == [f"{path}: unknown field"]


def test_unknown_metadata_field_is_rejected_as_object_meta(raycluster, raycluster_crd):
    raycluster["metadata"]["label"] = {"app": "ray"}
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert_one_error(errors, "metadata", "'label' was unexpected")


def test_wrong_api_version_is_rejected(raycluster, raycluster_crd):
    raycluster["apiVersion"] = "ray.io/v2"
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert_one_error(errors, "apiVersion", "ray.io/v1")


def test_num_of_hosts_as_string_is_rejected(raycluster, raycluster_crd):
    raycluster["spec"]["workerGroupSpecs"][0]["numOfHosts"] = "4"
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert_one_error(errors, "spec.workerGroupSpecs[0].numOfHosts", "integer")


def test_replicas_above_int32_is_rejected(raycluster, raycluster_crd):
    raycluster["spec"]["workerGroupSpecs"][0]["replicas"] = 2**31
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert_one_error(errors, "spec.workerGroupSpecs[0].replicas", "int32")


def test_int32_maximum_itself_is_accepted(raycluster, raycluster_crd):
    raycluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 2**31 - 1
    assert validate_custom_resource(raycluster, raycluster_crd) == []


def test_container_ports_are_a_list_map_keyed_by_port_and_protocol(raycluster, raycluster_crd):
    # ports is x-kubernetes-list-type: map with keys (containerPort, protocol); protocol
    # defaults to TCP, so a second 6379 without protocol collides with the gcs-server port.
    ports = raycluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
    ports.append({"containerPort": 6379, "name": "gcs-again"})
    errors = validate_custom_resource(raycluster, raycluster_crd)
    path = "spec.headGroupSpec.template.spec.containers[0].ports[3]"
    assert_one_error(errors, path, "Duplicate value")


def test_same_container_port_with_another_protocol_is_a_distinct_key(raycluster, raycluster_crd):
    ports = raycluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
    ports.append({"containerPort": 6379, "name": "gcs-udp", "protocol": "UDP"})
    assert validate_custom_resource(raycluster, raycluster_crd) == []


def test_duplicate_items_of_a_list_set_are_rejected(raycluster, raycluster_crd):
    container = raycluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["restartPolicy"] = "Never"
    container["restartPolicyRules"] = [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42, 42]}}]
    errors = validate_custom_resource(raycluster, raycluster_crd)
    rule = "spec.workerGroupSpecs[0].template.spec.containers[0].restartPolicyRules[0]"
    assert_one_error(errors, f"{rule}.exitCodes.values[1]", "Duplicate value")


def test_missing_required_field_without_default_is_rejected(raycluster, raycluster_crd):
    del raycluster["spec"]["workerGroupSpecs"][0]["groupName"]
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert errors == ["spec.workerGroupSpecs[0].groupName: Required value"]


def test_required_fields_with_defaults_may_be_omitted(raycluster, raycluster_crd):
    # minReplicas and maxReplicas are required by the CRD but defaulted by it.
    spec_schema = crd_schema(raycluster_crd)["properties"]["spec"]
    group_schema = spec_schema["properties"]["workerGroupSpecs"]["items"]
    assert {"minReplicas", "maxReplicas"} <= set(group_schema["required"])
    assert "minReplicas" not in raycluster["spec"]["workerGroupSpecs"][0]
    assert validate_custom_resource(raycluster, raycluster_crd) == []


def test_apply_defaults_fills_worker_group_defaults(raycluster, raycluster_crd):
    group = raycluster["spec"]["workerGroupSpecs"][0]
    del group["numOfHosts"]
    defaulted = apply_defaults(raycluster, crd_schema(raycluster_crd))
    defaulted_group = defaulted["spec"]["workerGroupSpecs"][0]
    assert defaulted_group["numOfHosts"] == 1
    assert defaulted_group["minReplicas"] == 0
    assert defaulted_group["maxReplicas"] == 2**31 - 1
    head_port = defaulted["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][0]
    assert head_port["protocol"] == "TCP"
    assert "numOfHosts" not in group, "the input must not be mutated"


def test_null_in_non_nullable_field_is_defaulted_or_dropped(raycluster, raycluster_crd):
    group = raycluster["spec"]["workerGroupSpecs"][0]
    group["idleTimeoutSeconds"] = None
    group["minReplicas"] = None
    defaulted = apply_defaults(raycluster, crd_schema(raycluster_crd))
    defaulted_group = defaulted["spec"]["workerGroupSpecs"][0]
    assert "idleTimeoutSeconds" not in defaulted_group
    assert defaulted_group["minReplicas"] == 0
    assert validate_custom_resource(raycluster, raycluster_crd) == []


def test_managed_by_outside_allowed_values_fails_its_cel_rule(raycluster, raycluster_crd):
    raycluster["spec"]["managedBy"] = "someone-else"
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert errors == [
        "spec.managedBy: the managedBy field value must be either 'ray.io/kuberay-operator' "
        "or 'kueue.x-k8s.io/multikueue'"
    ]


def test_managed_by_allowed_value_passes_and_its_transition_rule_is_skipped(raycluster, raycluster_crd):
    # spec.managedBy also carries "self == oldSelf"; evaluating it on create would fail.
    raycluster["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert validate_custom_resource(raycluster, raycluster_crd) == []


def test_worker_pod_template_is_a_valid_kubernetes_pod_template(raycluster):
    for group in [raycluster["spec"]["headGroupSpec"], *raycluster["spec"]["workerGroupSpecs"]]:
        assert validate_pod_template(group["template"]) == []


def test_pod_template_with_unknown_container_field_is_rejected(raycluster):
    template = raycluster["spec"]["workerGroupSpecs"][0]["template"]
    template["spec"]["containers"][0]["resource"] = {}
    errors = validate_pod_template(template)
    assert_one_error(errors, "spec.containers[0]", "'resource' was unexpected")


# --------------------------------------------------------------------------- CEL evaluation


def name_with_rules(*rules: dict) -> dict:
    """An object schema whose string field `name` carries the given CEL rules."""
    name = {"type": "string", "x-kubernetes-validations": list(rules)}
    return {"type": "object", "properties": {"name": name}}


def test_transition_rule_is_skipped_on_create():
    schema = name_with_rules({"rule": "self == oldSelf", "message": "name is immutable"})
    assert validate_against_schema({"name": "head"}, schema) == []


def test_rule_without_message_reports_the_rule():
    schema = name_with_rules({"rule": "self.startsWith('ray-')"})
    errors = validate_against_schema({"name": "head"}, schema)
    assert errors == ["name: failed rule: self.startsWith('ray-')"]


def test_rule_cel_python_cannot_parse_is_a_checker_error():
    schema = name_with_rules({"rule": "self.startsWith("})
    with pytest.raises(CELRuleError, match="cannot parse"):
        validate_against_schema({"name": "head"}, schema)


def test_rule_calling_a_function_without_shim_is_a_checker_error_even_if_not_reached():
    # `name` is absent, so the rule is never evaluated; it must fail all the same.
    schema = name_with_rules({"rule": "self.lowerAscii() == self"})
    with pytest.raises(CELRuleError, match="lowerAscii"):
        validate_against_schema({}, schema)


def test_rule_evaluation_error_is_reported_not_swallowed():
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.missing == 1"}]}
    assert_one_error(validate_against_schema({}, schema), "(root)", "failed to evaluate")


# --------------------------------------------------------------------------- ComputeClass


def test_reference_compute_class_is_valid(compute_class, computeclass_schema):
    assert validate_against_schema(compute_class, computeclass_schema) == []


def test_compute_class_unknown_field_is_rejected(compute_class, computeclass_schema):
    compute_class["spec"]["priorities"][0]["tpuTopology"] = "4x4"
    errors = validate_against_schema(compute_class, computeclass_schema)
    assert errors == ["spec.priorities[0].tpuTopology: unknown field"]


def test_manual_accelerator_network_profile_fails_its_cel_rule(compute_class, computeclass_schema):
    compute_class["spec"]["priorities"][0]["acceleratorNetworkProfile"] = "manual"
    errors = validate_against_schema(compute_class, computeclass_schema)
    assert errors == [
        "spec.priorities[0].acceleratorNetworkProfile: acceleratorNetworkProfile must be 'auto' or start with 'auto-'"
    ]


def test_machine_family_with_machine_type_fails_its_cel_rule(compute_class, computeclass_schema):
    compute_class["spec"]["priorities"][0]["machineFamily"] = "ct6e"
    errors = validate_against_schema(compute_class, computeclass_schema)
    assert errors == ["spec.priorities[0]: MachineFamily and MachineType cannot be set together"]


@pytest.mark.parametrize(("machine_type", "valid"), [("n2d-standard-8", True), ("ct6e-standard-4t", False)])
def test_split_shim_runs_in_confidential_node_rule(compute_class, computeclass_schema, machine_type, valid):
    # The SEV rule calls machineType.split('-'), a Kubernetes CEL function cel-python lacks.
    compute_class["spec"]["nodePoolConfig"]["confidentialNodeType"] = "SEV"
    compute_class["spec"]["priorities"][0]["machineType"] = machine_type
    errors = validate_against_schema(compute_class, computeclass_schema)
    expected = "spec: ConfidentialNodeType SEV only supports N2D, C2D, C3D, C4D"
    assert errors == ([] if valid else [expected])


def test_size_of_dyn_map_runs_in_nodepools_rule(compute_class, computeclass_schema):
    compute_class["spec"]["priorities"] = [{"nodepools": ["tpu-pool"], "spot": True}]
    errors = validate_against_schema(compute_class, computeclass_schema)
    assert errors == ["spec.priorities[0]: Nodepool field cannot be set along with other fields"]


def test_compute_class_defaults_make_required_fields_optional(compute_class, computeclass_schema):
    # spec.whenUnsatisfiable is required, and the CEL rules on spec read self.priorities.
    defaulted = apply_defaults({"spec": {}}, computeclass_schema)
    assert defaulted["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert defaulted["spec"]["priorities"] == []
    assert defaulted["spec"]["nodePoolAutoCreation"] == {"enabled": False}


# --------------------------------------------------------------------------- built-in kinds


def test_reference_resource_claim_template_is_valid(claim_template):
    assert validate_builtin(claim_template) == []


def test_resource_claim_template_with_string_count_is_rejected(claim_template):
    claim_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    errors = validate_builtin(claim_template)
    assert_one_error(errors, "spec.spec.devices.requests[0].exactly.count", "'two'")


def test_resource_claim_template_with_unknown_field_is_rejected(claim_template):
    claim_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["counts"] = 2
    errors = validate_builtin(claim_template)
    assert_one_error(errors, "spec.spec.devices.requests[0].exactly", "'counts' was unexpected")


SERVICE_ACCOUNT = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {
        "name": "ray-workload",
        "namespace": "default",
        "annotations": {"iam.gke.io/gcp-service-account": "ray@demo.iam.gserviceaccount.com"},
    },
}


def test_service_account_is_valid():
    assert validate_builtin(SERVICE_ACCOUNT) == []


def test_service_account_with_unknown_field_is_rejected():
    errors = validate_builtin({**SERVICE_ACCOUNT, "automountToken": False})
    assert_one_error(errors, "(root)", "'automountToken' was unexpected")


def test_unknown_builtin_kind_is_a_checker_error():
    with pytest.raises(LookupError, match="RayCluster"):
        validate_builtin({"apiVersion": "v1", "kind": "RayCluster", "metadata": {"name": "x"}})


# --------------------------------------------------------------------------- helpers


def test_normalize_numbers_restores_integral_floats_only():
    captured = {"replicas": 2.0, "ratios": [2.5, 3.0], "flag": True, "name": "a"}
    normalized = normalize_numbers(captured)
    assert normalized == {"replicas": 2, "ratios": [2.5, 3], "flag": True, "name": "a"}
    assert type(normalized["replicas"]) is int
    assert type(normalized["ratios"][0]) is float


def test_mock_float_fails_until_normalized(raycluster, raycluster_crd):
    raycluster["spec"]["workerGroupSpecs"][0]["replicas"] = 2.0
    errors = validate_custom_resource(raycluster, raycluster_crd)
    assert_one_error(errors, "spec.workerGroupSpecs[0].replicas", "integer")
    assert validate_custom_resource(normalize_numbers(raycluster), raycluster_crd) == []


def test_schemas_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SHARED_SCHEMAS_DIR", str(tmp_path))
    assert schemas_dir() == tmp_path
    with pytest.raises(pytest.skip.Exception, match=r"not found at .*; set SHARED_SCHEMAS_DIR"):
        require_schema("ray.io_rayclusters.yaml")


# --------------------------------------------------------------------------- capacity and scaling (issue 20)
# The checks the generated manifests rely on (tests/test_kuberay_manifests.py) bite on the fields
# issue 20 added: a wrong value there is rejected at its path, as the API server would.


def test_flex_start_with_spot_in_one_priority_fails_its_cel_rule(compute_class, computeclass_schema):
    compute_class["spec"]["priorities"][0].update({"flexStart": {"enabled": True}, "spot": True})
    errors = validate_against_schema(compute_class, computeclass_schema)
    assert errors == ["spec.priorities[0]: Flex Start provisioning model is incompatible with Spot"]


def test_a_specific_reservation_needs_its_name_and_affinity(compute_class, computeclass_schema):
    compute_class["spec"]["priorities"][0]["reservations"] = {"affinity": "Specific"}
    errors = validate_against_schema(compute_class, computeclass_schema)
    assert errors == ["spec.priorities[0].reservations: At least 1 specific reservation required for specific affinity"]


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("whenUnsatisfiable", "FallBack", "spec.whenUnsatisfiable"),
        ("tpu", {"type": "tpu-v6e-slice", "chips": 4}, "spec.priorities[0].tpu.chips"),
        ("tpu", {"type": "tpu-v6e-slice", "count": "4"}, "spec.priorities[0].tpu.count"),
    ],
    ids=["when-unsatisfiable", "tpu-misspelt-count", "tpu-count-as-string"],
)
def test_compute_class_capacity_fields_are_checked(compute_class, computeclass_schema, field, value, path):
    target = compute_class["spec"] if field == "whenUnsatisfiable" else compute_class["spec"]["priorities"][0]
    target[field] = value
    assert_one_error(validate_against_schema(compute_class, computeclass_schema), path)


@pytest.mark.parametrize(
    ("options", "path"),
    [
        ({"version": "v3"}, "spec.autoscalerOptions.version"),
        ({"upscalingMode": "Fast"}, "spec.autoscalerOptions.upscalingMode"),
        ({"idleTimeoutSeconds": "300"}, "spec.autoscalerOptions.idleTimeoutSeconds"),
        ({"idleTimeout": 300}, "spec.autoscalerOptions.idleTimeout"),
    ],
    ids=["version", "upscaling-mode", "idle-timeout-as-string", "idle-timeout-misspelt"],
)
def test_autoscaler_options_are_checked(raycluster, raycluster_crd, options, path):
    raycluster["spec"]["enableInTreeAutoscaling"] = True
    raycluster["spec"]["autoscalerOptions"] = {"version": "v2", **options}
    assert_one_error(validate_custom_resource(raycluster, raycluster_crd), path)


def test_an_autoscaled_reference_cluster_is_valid(raycluster, raycluster_crd):
    """The reference's worker group as the stack scales it: no replicas, 0 to 2 slices."""
    raycluster["spec"]["enableInTreeAutoscaling"] = True
    raycluster["spec"]["autoscalerOptions"] = {"version": "v2", "idleTimeoutSeconds": 300, "upscalingMode": "Default"}
    group = raycluster["spec"]["workerGroupSpecs"][0]
    del group["replicas"]
    group.update({"minReplicas": 0, "maxReplicas": 2})
    assert validate_custom_resource(raycluster, raycluster_crd) == []
