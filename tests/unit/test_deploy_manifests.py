"""deploy/'s manifests, read as files: what the operator Deployment must carry, and the image tag."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANAGER = ROOT / "deploy" / "manager"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_the_image_tag_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    (container,) = _load(MANAGER / "deployment.yaml")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"variant-autoscaler:{version}"


def test_the_operator_pod_is_probed_protected_and_fenced() -> None:
    deployment = _load(MANAGER / "deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    assert container["livenessProbe"]["httpGet"]["port"] == "health"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    resources = _load(MANAGER / "kustomization.yaml")["resources"]
    pdb = _load(MANAGER / "poddisruptionbudget.yaml")
    policy = _load(MANAGER / "networkpolicy.yaml")
    assert {"poddisruptionbudget.yaml", "networkpolicy.yaml"} <= set(resources)
    for selector in (pdb["spec"]["selector"]["matchLabels"], policy["spec"]["podSelector"]["matchLabels"]):
        assert selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ports = {p["name"] for p in container["ports"]}
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == ports
