"""``variant-autoscaler plan``: the file format, JSON and table output, and errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from variant_autoscaler.cli import main
from variant_autoscaler.commands.plan import build_inputs
from variant_autoscaler.core.inferred_slo import infer_slo
from variant_autoscaler.core.model import Profile
from variant_autoscaler.core.queueing import ServiceParms

DATA = Path(__file__).parent / "data" / "plan"
LIMITED = DATA / "limited.yaml"


def run_plan(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capfd.readouterr()
    return code, out, err


def write(tmp_path: Path, document: Any, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if name.endswith(".json") else yaml.safe_dump(document))
    return path


def base_document() -> dict[str, Any]:
    document = yaml.safe_load(LIMITED.read_text())
    assert isinstance(document, dict)
    return document


def test_json_output_has_the_documented_shape(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_plan(capfd, "-f", str(LIMITED), "-o", "json")
    assert code == 0
    plan = json.loads(out)
    assert set(plan) >= {"variants", "totalCost", "binding"}
    assert list(plan["variants"]) == sorted(plan["variants"])
    for decision in plan["variants"].values():
        assert set(decision) >= {"accelerator", "replicas", "maxBatch", "cost", "itl", "ttft", "reason"}
        assert decision["accelerator"] is None or isinstance(decision["accelerator"], str)
        assert isinstance(decision["replicas"], int) and isinstance(decision["cost"], float)
        assert decision["reason"]
    assert plan["totalCost"] == pytest.approx(sum(d["cost"] for d in plan["variants"].values()), abs=1e-3)
    assert plan["mode"] == "limited"


def test_limited_plan_respects_capacity_and_explains_itself(capfd: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_plan(capfd, "-f", str(LIMITED), "-o", "json")
    plan = json.loads(out)
    variants = plan["variants"]
    assert variants["llm-d-sim/broken"]["outcome"] == "invalid"
    assert "field 'load.arrivalRate'" in variants["llm-d-sim/broken"]["reason"]
    held = variants["llm-d-sim/no-metrics"]
    assert (held["accelerator"], held["replicas"], held["outcome"]) == ("A100", 1, "held")
    used: dict[str, int] = {}
    devices = {"A100": "NVIDIA-A100-PCIE-80GB", "G2": "Intel-Gaudi-2-96GB", "MI300X": "AMD-MI300X-192GB"}
    for decision in variants.values():
        if decision["accelerator"]:
            device = devices[decision["accelerator"]]
            used[device] = used.get(device, 0) + decision["replicas"]
    assert used.get("NVIDIA-A100-PCIE-80GB", 0) <= 3 and used.get("Intel-Gaudi-2-96GB", 0) <= 2
    assert used.get("AMD-MI300X-192GB", 0) == 0
    # capacity binds: the Freemium variant gets nothing and says why
    free = variants["llm-d-sim/free"]
    assert free["replicas"] == 0 and "no capacity left" in free["reason"]
    binding = {b["device"]: b for b in plan["binding"]}
    assert "llm-d-sim/free" in binding["Intel-Gaudi-2-96GB"]["variants"]
    assert binding["Intel-Gaudi-2-96GB"]["used"] == binding["Intel-Gaudi-2-96GB"]["capacity"] == 2


def test_reasons_name_the_class_the_slos_came_from(capfd: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_plan(capfd, "-f", str(LIMITED), "-o", "json")
    variants = json.loads(out)["variants"]
    assert variants["llm-d-sim/premium-a"]["reason"].endswith("[class Premium (by modelID)]")
    assert variants["llm-d-sim/free"]["reason"].endswith("[class Freemium (by modelID)]")


def test_table_output(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_plan(capfd, "-f", str(LIMITED), "-o", "table")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["VARIANT", "ACCELERATOR", "REPLICAS"]
    assert any(line.startswith("llm-d-sim/no-metrics") and " held " in line for line in lines)
    assert any(line.startswith("total cost: ") for line in lines)
    assert "binding capacity:" in lines


def test_unlimited_is_the_default_and_matches_wva(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    document = base_document()
    del document["optimizer"]
    del document["capacity"]
    document["variants"] = [
        {
            "name": f"va-{i}",
            "namespace": "default",
            "modelID": "meta/llama0-70b",
            "accelerator": "A100",
            "currentReplicas": 1,
            "keepAccelerator": True,
            "modelProfile": {
                "accelerators": [
                    {
                        "acc": "A100",
                        "accCount": 1,
                        "maxBatchSize": 4,
                        "perfParms": {
                            "decodeParms": {"alpha": "20.28", "beta": "0.72"},
                            "prefillParms": {"gamma": "0", "delta": "0"},
                        },
                    }
                ]
            },
            "load": {"arrivalRate": 1200, "avgInputTokens": 20, "avgOutputTokens": 200},
        }
        for i in range(3)
    ]
    document["serviceClasses"].append(
        {
            "name": "Big",
            "priority": 1,
            "data": [{"model": "meta/llama0-70b", "slo-tpot": 80, "slo-ttft": 500}],
        }
    )
    code, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document, "plan.json")), "-o", "json")
    assert code == 0
    plan = json.loads(out)
    assert plan["mode"] == "unlimited" and plan["binding"] == []
    for decision in plan["variants"].values():
        assert (decision["accelerator"], decision["replicas"], decision["maxBatch"], decision["cost"]) == (
            "A100",
            43,
            4,
            1720.0,
        )


def test_service_class_named_explicitly(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    document = base_document()
    document["variants"] = [dict(document["variants"][0], serviceClass="Freemium")]
    _, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    (decision,) = json.loads(out)["variants"].values()
    assert decision["outcome"] == "invalid"
    assert "service class 'Freemium' has no entry for model 'default/default'" in decision["reason"]


def test_the_queueing_model_configmap_gives_classless_models_their_slos(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    document = base_document()
    document["variants"] = [dict(v, modelID="classless/model") for v in document["variants"][:1]]
    document["queueingModel"] = {
        "default": "sloMultiplier: 3",
        "pinned": {"model_id": "pinned/model", "targetTTFT": 500, "targetITL": 24},
    }
    code, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    assert code == 0
    (decision,) = json.loads(out)["variants"].values()
    # The targets inferred from its current accelerator's profile (A100, batch 4, 100 in / 128 out).
    a100 = Profile("A100", 1, 4, ServiceParms(alpha=20.58, beta=0.41, gamma=20.58, delta=0.041))
    assert f"within {infer_slo(a100, 3.0, 100.0, 128.0).slo.describe()}" in decision["reason"]
    # As in the operator's status, the reason ends with where the SLOs came from.
    assert "[SLOs inferred with sloMultiplier 3 (queueingModel[default]): " in decision["reason"]
    # A model the ConfigMap states targets for is sized by them; without the section, by nothing.
    document["variants"] = [dict(v, modelID="pinned/model") for v in document["variants"]]
    _, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    (decision,) = json.loads(out)["variants"].values()
    assert "TTFT ≤ 500 ms" in decision["reason"] and "sloMultiplier" not in decision["reason"]
    assert decision["reason"].endswith("[SLOs of wva-queueing-model-config]")
    del document["queueingModel"]
    _, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    (decision,) = json.loads(out)["variants"].values()
    assert decision["outcome"] == "invalid" and "no service class has an entry" in decision["reason"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"queueingModel": {"default": "sloMultiplier: 1"}}, "field 'queueingModel': queueingModel[default]"),
        ({"optimizer": {"saturationPolicy": "Fair"}}, "field 'optimizer.saturationPolicy'"),
        ({"optimizer": {"unlimitd": False}}, "field 'optimizer.unlimitd'"),
        ({"optimizer": {"maxNumBatchedTokens": 0}}, "field 'optimizer.maxNumBatchedTokens'"),
        ({"accelerators": None}, "field 'accelerators'"),
        ({"accelerators": {"A100": {"device": "x", "cost": "lots"}}}, "accelerator-unit-costs[A100].cost"),
        ({"serviceClasses": [{"priority": 1}]}, "field 'serviceClasses'"),
        ({"capacity": {"NVIDIA-A100-PCIE-80GB": -1}}, "field 'capacity.NVIDIA-A100-PCIE-80GB'"),
        ({"capacity": {"NVIDIA-A100-PCIE-80GB": "many"}}, "field 'capacity.NVIDIA-A100-PCIE-80GB'"),
        ({"namespaceCapacity": {"team": {"NVIDIA-A100-PCIE-80GB": -1}}}, "field 'namespaceCapacity.team."),
        ({"extra": 1}, "field 'extra'"),
    ],
)
def test_bad_files_fail_naming_the_field(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    document = base_document()
    for key, value in change.items():
        if value is None:
            del document[key]
        elif isinstance(value, dict) and isinstance(document.get(key), dict) and key == "optimizer":
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    code, out, err = run_plan(capfd, "-f", str(write(tmp_path, document)))
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and message in err


def test_unreadable_or_malformed_files(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_plan(capfd, "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("variants: [unclosed\n")
    code, _, err = run_plan(capfd, "-f", str(bad))
    assert code == 2 and "not valid YAML or JSON" in err
    bad.write_text("- just\n- a list\n")
    code, _, err = run_plan(capfd, "-f", str(bad))
    assert code == 2 and "must be a mapping" in err


def test_a_bad_variant_does_not_stop_the_others(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    document = base_document()
    good = document["variants"][0]
    document["variants"] = [
        good,
        {"name": "no-profile", "modelID": "default/default"},
        {
            **good,
            "name": "bad-parms",
            "modelProfile": {
                "accelerators": [
                    dict(
                        good["modelProfile"]["accelerators"][0],
                        perfParms={
                            "decodeParms": {"alpha": "x", "beta": "1"},
                            "prefillParms": {"gamma": "1", "delta": "1"},
                        },
                    )
                ]
            },
        },
        dict(good),
        {"namespace": "x"},
    ]
    code, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    assert code == 0
    variants = json.loads(out)["variants"]
    assert variants["llm-d-sim/premium-a"]["replicas"] >= 1
    assert "field 'modelProfile'" in variants["default/no-profile"]["reason"]
    assert "decodeParms.alpha" in variants["llm-d-sim/bad-parms"]["reason"]
    assert "listed twice" in variants["llm-d-sim/premium-a (variants[3])"]["reason"]
    assert "field 'name'" in variants["variants[4]"]["reason"]


def test_kept_replicas_beyond_the_current_ones_are_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    document = base_document()
    document["variants"] = [dict(document["variants"][0], currentReplicas=1, keptReplicas=2)]
    _, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    (decision,) = json.loads(out)["variants"].values()
    assert decision["outcome"] == "invalid"
    assert "field 'keptReplicas': 2 is more than currentReplicas (1)" in decision["reason"]


def test_namespace_capacity_caps_a_namespaces_variants(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    document = base_document()
    document["capacity"] = {"NVIDIA-A100-PCIE-80GB": 16, "Intel-Gaudi-2-96GB": 2}
    _, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    free = json.loads(out)["variants"]["llm-d-sim/premium-a"]
    assert free["accelerator"] == "A100" and free["replicas"] > 2
    document["namespaceCapacity"] = {"llm-d-sim": {"NVIDIA-A100-PCIE-80GB": 2}}
    _, out, _ = run_plan(capfd, "-f", str(write(tmp_path, document)), "-o", "json")
    variants = json.loads(out)["variants"]
    on_a100 = [d for d in variants.values() if d["accelerator"] == "A100"]
    # The namespace holds 3 A100s now (premium-a, free, no-metrics), over its cap of 2: it keeps them and
    # grows no further; premium-b, which the plan would move onto A100s, stays on its Gaudis.
    assert sum(d["replicas"] for d in on_a100) == 3
    assert "limited by the plan file's namespaceCapacity to 1" in variants["llm-d-sim/premium-a"]["reason"]
    assert "3 held now" in variants["llm-d-sim/premium-a"]["reason"]
    kept = variants["llm-d-sim/premium-b"]
    assert (kept["accelerator"], kept["replicas"]) == ("G2", 2)
    assert "kept off NVIDIA-A100-PCIE-80GB" in kept["reason"]


def test_the_servers_prefill_is_the_operators_default_unless_the_file_says() -> None:
    """As the operator's CHUNKED_PREFILL and MAX_NUM_BATCHED_TOKENS: vLLM V1's chunked prefill with its
    2,048-token budget, unless the optimizer section says otherwise."""
    request = build_inputs(base_document()).request
    assert request.chunked_prefill and request.prefill_budget == 2048
    document = base_document()
    document["optimizer"] = {
        **document.get("optimizer", {}),
        "chunkedPrefill": False,
        "maxNumBatchedTokens": 8192,
    }
    request = build_inputs(document).request
    assert not request.chunked_prefill and request.prefill_budget == 8192
