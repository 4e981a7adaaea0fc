"""Profiles learned online, in the engine (through the real adapters, against in-memory Kubernetes and
Prometheus): which profile sizes a variant as the learned one becomes confident, ``profileSource``, the
Events, the state in the VA's status (and, for annotated objects, in one ConfigMap) surviving a restart.

The pods' windows are computed from known parameters with the estimator's own relations
(:func:`vatesting.profiles.profile_window`), so the learning is exact and these tests are about the
wiring; its accuracy on real emulator metrics is tests/integration/test_profile_learning_*.py's and the
benchmark's (docs/benchmarks.md).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from variant_autoscaler.adapters.profile_metrics import QUERIES_PER_CYCLE as PROFILE_QUERIES
from variant_autoscaler.adapters.prometheus import QUERIES_PER_CYCLE
from variant_autoscaler.api.v1alpha1 import ACCELERATOR_LABEL, VariantAutoscaling
from variant_autoscaler.core.queueing import ServiceParms
from variant_autoscaler.engine.annotated_state import model_key
from variant_autoscaler.settings import Settings
from vatesting.fakes import NS, OPERATOR_NS, VA, Harness, deployment, load_yaml
from vatesting.profiles import WVA_A100, parms, profile_window
from vatesting.wva import crd_errors

MODEL = "default/default"
LEARNED_CM = "variant-autoscaler-learned-profiles"
# Fast enough for the premium class's 24 ms ITL at the batches below, on an A100 (the costs ConfigMap).
TRUTH = parms(alpha=10.0, beta=0.5, gamma=30.0, delta=0.02)
# The load moves: two pods at different points, changing every cycle (what identifies β and δ).
BATCHES = (3.0, 11.0, 5.0, 9.0, 2.0, 13.0)
MAX_BATCH = 16


def _va_without_profile(name: str = "vllme-a100", **spec: Any) -> dict[str, Any]:
    va = load_yaml("deploy/samples/variantautoscaling-final.yaml")
    va["metadata"]["name"] = name
    va["metadata"]["labels"] = {ACCELERATOR_LABEL: "A100"}
    va["spec"]["scaleTargetRef"]["name"] = name
    va["spec"].update(spec)
    return dict(va)


def _target(h: Harness, target: str = VA, *, replicas: int = 1, max_batch: int = MAX_BATCH) -> None:
    args = ["--model", MODEL, "--max-num-seqs", str(max_batch)]
    h.kube.put(deployment(target, NS, replicas=replicas, args=args))


def _serve(
    h: Harness, target: str, cycle: int, truth: ServiceParms = TRUTH, max_batch: int = MAX_BATCH
) -> None:
    """This cycle's windows of the target's two pods, and a light load the saturation analyzers see."""
    h.load(60.0)
    for i in range(2):
        pod = f"{target}-7d4f8b9c6d-{i:05d}"
        running = BATCHES[(cycle + 3 * i) % len(BATCHES)]
        h.prom.set_pod(MODEL, NS, pod, kv=0.2)
        prompt = 150.0 + 50.0 * ((cycle + i) % 3)
        window = profile_window(truth, running, prompt_tokens=prompt, max_batch=max_batch)
        h.prom.set_profile_window(MODEL, NS, pod, **window)


async def _cycles(h: Harness, target: str, count: int, start: int = 0, **kw: Any) -> list[dict[str, Any]]:
    """Run ``count`` cycles a minute apart; the VA's learnedProfile after each."""
    seen = []
    for cycle in range(start, start + count):
        _serve(h, target, cycle, **kw)
        await h.engine.run_cycle()
        h.advance(60.0)
        seen.append(copy.deepcopy(h.status(target).get("learnedProfile") or {}))
    return seen


def _events(h: Harness, reason: str) -> list[dict[str, Any]]:
    return [e for e in h.kube.events() if e["reason"] == reason]


def _reason(h: Harness, name: str) -> str:
    return str(h.status(name)["desiredOptimizedAlloc"].get("reason") or "")


async def test_a_va_without_a_profile_is_sized_by_saturation_until_the_learned_one_is_confident() -> None:
    h = Harness()
    h.add_va(_va_without_profile())
    _target(h, "vllme-a100")
    seen = await _cycles(h, "vllme-a100", 1)
    assert seen[0]["source"] == "saturation" and seen[0]["confidence"] in ("none", "low")
    assert _reason(h, "vllme-a100").startswith("saturation-v1")
    assert "until the learned profile is confident" in _reason(h, "vllme-a100")

    seen += await _cycles(h, "vllme-a100", 6, start=1)
    sources = [s["source"] for s in seen]
    switched = sources.index("learned")
    assert set(sources[:switched]) == {"saturation"} and set(sources[switched:]) == {"learned"}
    status = h.status("vllme-a100")
    learned = status["learnedProfile"]
    assert learned["confidence"] in ("high", "medium") and learned["accelerator"] == "A100"
    for name in ("alpha", "beta", "gamma", "delta"):
        value = float(learned[name]["value"])
        assert abs(value - getattr(TRUTH, name)) <= 0.05 * getattr(TRUTH, name), (name, learned[name])
        assert learned[name]["source"] == "learned"
    # Now the queueing model sizes it, with the learned profile, and says so.
    reason = _reason(h, "vllme-a100")
    assert reason.endswith(f"[learned profile, confidence {learned['confidence']}]"), reason
    assert not reason.startswith("saturation")
    assert status["desiredOptimizedAlloc"]["ttftAverage"] is not None  # the model's prediction
    (event,) = _events(h, "ProfileSourceChanged")
    assert event["message"].startswith("profile saturation -> learned: learned profile confident")
    # The status the engine wrote is one the CRD accepts.
    assert crd_errors(h.kube.get("variantautoscalings", NS, "vllme-a100")) == []
    VariantAutoscaling.model_validate(h.kube.get("variantautoscalings", NS, "vllme-a100"))


async def test_a_hand_profile_off_by_two_is_replaced_once_the_learned_one_is_confident() -> None:
    h = Harness()
    _target(h)  # the server runs batches up to 16 (its --max-num-seqs)
    h.add_va()  # WVA's sample: a hand profile on A100, batch 4
    truth = parms(*(v / 2 for v in (WVA_A100.alpha, WVA_A100.beta, WVA_A100.gamma, WVA_A100.delta)))
    seen = await _cycles(h, VA, 10, truth=truth)
    sources = [s["source"] for s in seen]
    assert sources[0] == "spec" and sources[-1] == "learned", sources
    switched = sources.index("learned")
    assert set(sources[switched:]) == {"learned"}
    assert float(h.status()["learnedProfile"]["alpha"]["value"]) < 0.55 * WVA_A100.alpha
    assert _reason(h, VA).endswith("confidence high]") or _reason(h, VA).endswith("confidence medium]")
    (event,) = _events(h, "ProfileSourceChanged")
    assert "spec -> learned" in event["message"] and "differs from spec" in event["message"]


async def test_profile_source_spec_never_switches_but_still_learns() -> None:
    h = Harness()
    _target(h)  # the server runs batches up to 16 (its --max-num-seqs)
    h.add_va(profileSource="spec")
    truth = parms(*(v / 2 for v in (WVA_A100.alpha, WVA_A100.beta, WVA_A100.gamma, WVA_A100.delta)))
    seen = await _cycles(h, VA, 10, truth=truth)
    assert {s["source"] for s in seen} == {"spec"}
    assert seen[-1]["confidence"] in ("high", "medium")  # learned and shown, not used
    assert _reason(h, VA).endswith("[spec profile]")
    assert _events(h, "ProfileSourceChanged") == []


def _queueing(h: Harness, **entries: str) -> None:
    h.kube.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "wva-queueing-model-config", "namespace": OPERATOR_NS},
            "data": dict(entries),
        }
    )


async def test_wva_tuning_enabled_false_keeps_the_hand_profile_unless_the_va_chooses() -> None:
    """WVA's switched-off tuner: a model that ``tuningEnabled: false`` covers stays on its hand profile
    however far the learned one is off (the learned one is still shown); a VA that states
    ``profileSource`` decides for itself."""
    truth = parms(*(v / 2 for v in (WVA_A100.alpha, WVA_A100.beta, WVA_A100.gamma, WVA_A100.delta)))
    h = Harness()
    _queueing(h, default="tuningEnabled: false")
    _target(h)
    h.add_va()
    seen = await _cycles(h, VA, 10, truth=truth)
    assert {s["source"] for s in seen} == {"spec"}
    assert seen[-1]["confidence"] in ("high", "medium")
    assert seen[-1]["reason"] == "tuningEnabled is false in wva-queueing-model-config[default]"
    assert _events(h, "ProfileSourceChanged") == []

    chooses = Harness()
    _queueing(chooses, default="tuningEnabled: false")
    _target(chooses)
    chooses.add_va(profileSource="auto")
    sources = [s["source"] for s in await _cycles(chooses, VA, 10, truth=truth)]
    assert sources[-1] == "learned", sources

    # A per-model entry turns it back on for its model.
    on = Harness()
    _queueing(on, default="tuningEnabled: false", mine=f"model_id: {MODEL}\ntuningEnabled: true")
    _target(on)
    on.add_va()
    assert (await _cycles(on, VA, 10, truth=truth))[-1]["source"] == "learned"


async def test_profile_source_learned_uses_the_learned_profile_before_it_is_confident() -> None:
    h = Harness()
    _target(h)  # the server runs batches up to 16 (its --max-num-seqs)
    h.add_va(profileSource="learned")
    seen = await _cycles(h, VA, 3)
    sources = [s["source"] for s in seen]
    assert sources[0] == "spec"  # nothing learned yet: the hand profile
    first = sources.index("learned")
    assert seen[first]["confidence"] in ("low", "none", "medium", "high")
    assert "profile choice is learned" in seen[first]["reason"]


async def test_the_learned_state_survives_a_restart() -> None:
    h = Harness()
    h.add_va(_va_without_profile())
    _target(h, "vllme-a100")
    before = (await _cycles(h, "vllme-a100", 6))[-1]
    assert before["source"] == "learned"
    events = len(h.kube.events())
    h.engine = h.new_engine()  # a new process, reading the stored status
    after = (await _cycles(h, "vllme-a100", 1, start=6))[-1]
    assert after["source"] == "learned"  # no relapse to saturation
    assert float(after["decodeWindows"]) > float(before["decodeWindows"])  # continued, not restarted
    assert _events(h, "ProfileSourceChanged")[1:] == [] and len(h.kube.events()) >= events
    assert "note" not in after


async def test_an_unreadable_stored_state_starts_over_and_says_so() -> None:
    h = Harness()
    h.add_va(_va_without_profile())
    _target(h, "vllme-a100")
    await _cycles(h, "vllme-a100", 2)
    stored = h.kube.get("variantautoscalings", NS, "vllme-a100")["status"]["learnedProfile"]
    stored["state"] = '{"version": 99}'
    h.engine = h.new_engine()
    after = (await _cycles(h, "vllme-a100", 1, start=2))[-1]
    assert "started over" in after["note"] and "unknown version 99" in after["note"]
    (warning,) = _events(h, "LearnedProfileReset")
    assert warning["type"] == "Warning" and "started over" in warning["message"]
    assert float(after["decodeWindows"]) <= 2.0  # one cycle's two pods


async def test_a_va_without_the_accelerator_label_learns_but_stays_on_saturation() -> None:
    h = Harness()
    va = _va_without_profile()
    del va["metadata"]["labels"]
    h.add_va(va)
    _target(h, "vllme-a100")
    last = (await _cycles(h, "vllme-a100", 6))[-1]
    assert last["source"] == "saturation" and last["confidence"] in ("high", "medium")
    assert "accelerator is unknown" in last["reason"] and ACCELERATOR_LABEL in last["reason"]
    assert "accelerator" not in last


async def test_learning_off_queries_nothing_and_writes_no_learned_profile() -> None:
    h = Harness()
    h.settings = Settings(
        debounce_seconds=0, leader_election=False, conflict_retries=3, profile_learning=False
    )
    h.engine = h.new_engine()
    _target(h)
    h.add_va()
    _serve(h, VA, 0)
    report = await h.engine.run_cycle()
    assert report.promql_queries == 12  # the load and per-pod queries only
    assert "learnedProfile" not in h.status()


async def test_the_profile_queries_are_counted_and_fixed_whatever_the_number_of_variants() -> None:
    h = Harness()
    for i in range(5):
        h.add_va(_va_without_profile(f"v{i}"))
        _target(h, f"v{i}")
    _serve(h, "v0", 0)
    before = h.prom.queries
    report = await h.engine.run_cycle()
    assert report.promql_queries == h.prom.queries - before == 12 + PROFILE_QUERIES
    # A cycle triggered early (a change) learns nothing: its window would overlap the last one's.
    h.advance(5.0)
    before = h.prom.queries
    await h.engine.run_cycle()
    assert h.prom.queries - before == 12


async def test_with_a_refresh_interval_learning_continues_between_status_writes() -> None:
    h = Harness(STATUS_REFRESH_INTERVAL="10m")
    h.add_va(_va_without_profile())
    _target(h, "vllme-a100")
    await _cycles(h, "vllme-a100", 8)
    # Only essential changes were written (the first status, the change of source)...
    assert h.kube.writes("PUT", "/status") < 8
    # ... and the source changed all the same: the engine kept the newer state between writes.
    assert h.status("vllme-a100")["learnedProfile"]["source"] == "learned"


# --- annotated HPAs: the state in one ConfigMap -----------------------------------------------------------


def _annotated_hpa(target: str) -> dict[str, Any]:
    hpa = load_yaml("deploy/hpa/hpa-annotated.yaml")
    hpa["metadata"]["name"] = f"{target}-hpa"
    hpa["metadata"].setdefault("labels", {})[ACCELERATOR_LABEL] = "A100"
    hpa["spec"]["scaleTargetRef"]["name"] = target
    return dict(hpa)


def _stored(h: Harness) -> dict[str, Any]:
    data = h.kube.get("configmaps", OPERATOR_NS, LEARNED_CM)["data"]
    return {k: json.loads(v) for k, v in data.items()}


async def test_an_annotated_hpas_learned_state_is_kept_in_one_configmap_and_survives_a_restart() -> None:
    h = Harness()
    h.kube.absent.add("scaledobjects")
    for target in ("dep-a", "dep-b"):
        _target(h, target)
        h.kube.put(_annotated_hpa(target))
    writes = []
    for cycle in range(6):
        for target in ("dep-a", "dep-b"):
            _serve(h, target, cycle)
        await h.engine.run_cycle()
        h.advance(60.0)
        writes.append(h.kube.writes("POST", "/configmaps") + h.kube.writes("PUT", "/configmaps/"))
    assert all(b - a <= 1 for a, b in zip([0, *writes], writes, strict=False))  # at most one per cycle
    stored = _stored(h)
    key = f"{NS}.HorizontalPodAutoscaler.dep-a-hpa"
    # One entry per object, and the forecast of the model they serve once.
    assert sorted(stored) == sorted([key, f"{NS}.HorizontalPodAutoscaler.dep-b-hpa", model_key(MODEL, NS)])
    entry = stored[key]["learnedProfile"]
    assert entry["source"] == "learned" and entry["accelerator"] == "A100"
    changed = [e for e in _events(h, "ProfileSourceChanged") if e["involvedObject"]["name"] == "dep-a-hpa"]
    assert len(changed) == 1 and changed[0]["involvedObject"]["kind"] == "HorizontalPodAutoscaler"

    h.engine = h.new_engine()
    _serve(h, "dep-a", 6)
    _serve(h, "dep-b", 6)
    await h.engine.run_cycle()
    after = _stored(h)[key]["learnedProfile"]
    assert after["source"] == "learned" and float(after["decodeWindows"]) > float(entry["decodeWindows"])
    assert len(_events(h, "ProfileSourceChanged")) == 2  # no new change after the restart


def _annotated_of_attainment_class(h: Harness) -> None:
    """An annotated HPA ``dep-a-hpa`` on ``dep-a`` whose model's class states attainment."""
    h.kube.absent.add("scaledobjects")
    classes = h.kube.get("configmaps", OPERATOR_NS, "service-classes-config")
    classes["data"] = {
        "premium.yaml": "name: Premium\npriority: 1\ndata:\n"
        "  - {model: default/default, slo-tpot: 24, slo-ttft: 500, slo-attainment: 99}\n"
    }
    _target(h, "dep-a")
    h.kube.put(_annotated_hpa("dep-a"))


async def test_an_annotated_hpa_of_an_attainment_class_is_planned_ahead_once_its_profile_is_learned() -> None:
    """A WVA v0.9 variant (an annotated HPA, no profile, no VA) whose model's class states attainment:
    once its profile is learned the tail model sizes it on its model's measured workload, for its
    model's demand forecast, as it does a VA; its forecaster's state is kept beside its learned profile
    in the ConfigMap (it has no status), so a restarted operator goes on from it."""
    h = Harness()
    _annotated_of_attainment_class(h)
    for cycle in range(6):
        _serve(h, "dep-a", cycle)
        report = await h.engine.run_cycle()
        h.advance(60.0)
    assert report.promql_queries == QUERIES_PER_CYCLE + PROFILE_QUERIES + 10  # the tail model's inputs
    assert _stored(h)[f"{NS}.HorizontalPodAutoscaler.dep-a-hpa"]["learnedProfile"]["source"] == "learned"
    step = h.engine.forecasts.status((MODEL, NS))
    assert step is not None and step["step"] == 6 and float(step["plannedRate"]) > 60.0
    decided = [e for e in _events(h, "DecisionChanged") if e["involvedObject"]["name"] == "dep-a-hpa"]
    assert decided and "planned for the forecast" in decided[-1]["message"]
    # Once per model (however many objects serve it), beside the objects' learned profiles.
    model_entry = model_key(MODEL, NS)
    assert sorted(_stored(h)) == sorted([f"{NS}.HorizontalPodAutoscaler.dep-a-hpa", model_entry])
    stored = _stored(h)[model_entry]["forecast"]
    assert stored["model"] == MODEL and stored["step"] == 6 and stored["errors"] == step["errors"]

    # A brand-new engine (a restart, or a new leader) resumes the forecaster from the ConfigMap: the
    # next interval is its seventh, with the errors it had, not a first one in a warm-up.
    h.engine = h.new_engine()
    _serve(h, "dep-a", 6)
    await h.engine.run_cycle()
    resumed = h.engine.forecasts.status((MODEL, NS))
    assert resumed is not None and resumed["step"] == 7
    assert _stored(h)[model_entry]["forecast"]["step"] == 7
    assert _stored(h)[f"{NS}.HorizontalPodAutoscaler.dep-a-hpa"]["learnedProfile"]["source"] == "learned"


async def test_an_annotated_hpas_forecast_is_kept_with_profile_learning_off() -> None:
    """With ``WVA_PROFILE_LEARNING=false`` nothing is learned, but the forecaster of an annotated
    object's model is still kept in its ConfigMap entry (and a broken entry is left, not fatal)."""
    h = Harness()
    h.settings = Settings(
        debounce_seconds=0, leader_election=False, conflict_retries=3, profile_learning=False
    )
    h.engine = h.new_engine()
    _annotated_of_attainment_class(h)
    for cycle in range(2):
        _serve(h, "dep-a", cycle)
        await h.engine.run_cycle()
        h.advance(60.0)
    assert list(_stored(h)) == [model_key(MODEL, NS)]  # no learnedProfile: only the model's forecast
    assert _stored(h)[model_key(MODEL, NS)]["forecast"]["step"] == 2
    # An unreadable forecast section: the forecaster starts afresh (and the entry is rewritten).
    cm = h.kube.get("configmaps", OPERATOR_NS, LEARNED_CM)
    cm["data"][model_key(MODEL, NS)] = json.dumps({"forecast": {"step": "x"}})
    h.engine = h.new_engine()
    _serve(h, "dep-a", 2)
    await h.engine.run_cycle()
    assert _stored(h)[model_key(MODEL, NS)]["forecast"]["step"] == 1
