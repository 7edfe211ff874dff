"""deploy/kubernetes/: every manifest valid against Kubernetes' own schemas (kubernetes-validate,
strict: an unknown field fails too), at the oldest and newest version it ships, and the parts
agree with each other, with the kustomization and with the Dockerfile."""

import re

import kubernetes_validate
import pytest
import yaml
from conftest import ROOT
from kubernetes_validate.utils import all_versions

FOLDER = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
VERSIONS = sorted(all_versions(), key=lambda version: tuple(map(int, version.split("."))))


def resources() -> dict[str, dict]:
    """The resources the kustomization lists, by kind."""
    listed = [yaml.safe_load((FOLDER / name).read_text()) for name in KUSTOMIZATION["resources"]]
    return {resource["kind"]: resource for resource in listed}


def generated_config_map() -> dict:
    """The ConfigMap that the kustomization's generator makes (before its name's hash)."""
    (generator,) = KUSTOMIZATION["configMapGenerator"]
    data = dict(literal.split("=", 1) for literal in generator["literals"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": generator["name"]},
        "data": data,
    }


def test_the_kustomization_lists_every_manifest_of_the_folder():
    manifests = {path.name for path in FOLDER.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(KUSTOMIZATION["resources"]) == sorted(manifests)
    assert set(resources()) == {"Deployment", "Service", "HorizontalPodAutoscaler"}


@pytest.mark.parametrize("version", [VERSIONS[0], VERSIONS[-1]])
def test_every_manifest_is_valid_against_kubernetes_schemas(version):
    for resource in [*resources().values(), generated_config_map()]:
        kubernetes_validate.validate(resource, version, strict=True)  # raises if not


def test_a_manifest_with_an_unknown_field_is_refused():
    deployment = resources()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_the_deployment_runs_the_image_as_the_dockerfile_builds_it():
    parts = resources()
    pod = parts["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The image and the export: named in the kustomization only.
    (image,) = KUSTOMIZATION["images"]
    assert container["image"] == image["name"]
    assert [source["configMapRef"]["name"] for source in container["envFrom"]] == [
        generated_config_map()["metadata"]["name"]
    ]
    assert "MODEL_PATH" in generated_config_map()["data"]
    assert re.search(r"^\s+MODEL_PATH=", dockerfile, re.MULTILINE)
    # The image's user, the port its server listens on, and the API key from a Secret.
    assert f"--uid {pod['securityContext']['runAsUser']} " in dockerfile
    env = {variable["name"]: variable for variable in container["env"]}
    (port,) = container["ports"]
    assert env["PORT"]["value"] == str(port["containerPort"])
    assert "secretKeyRef" in env["SERVE_API_KEY"]["valueFrom"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": port["name"]}
    assert set(container["resources"]) == {"requests", "limits"}
    # The Service reaches these pods, and the autoscaler scales this Deployment on CPU.
    labels = parts["Deployment"]["spec"]["template"]["metadata"]["labels"]
    service = parts["Service"]["spec"]
    assert service["selector"].items() <= labels.items()
    assert [p["targetPort"] for p in service["ports"]] == [port["name"]]
    autoscaler = parts["HorizontalPodAutoscaler"]["spec"]
    assert autoscaler["scaleTargetRef"]["name"] == parts["Deployment"]["metadata"]["name"]
    assert [m["resource"]["name"] for m in autoscaler["metrics"]] == ["cpu"]
    assert "replicas" not in parts["Deployment"]["spec"]  # the autoscaler's to set
