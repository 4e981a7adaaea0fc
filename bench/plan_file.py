"""``variant-autoscaler plan -f`` on a 1,000-variant plan file: where the time goes.

The same seeded plan document (8 accelerator types, 1,000 variants with a profile on each, 3 service
classes, limited mode) written as JSON and as YAML; each read by PyYAML's pure-Python ``safe_load`` (what
``plan`` used before) and by :func:`variant_autoscaler.api.documents.load_document` (a JSON parser for
JSON, libyaml's C loader for YAML); then validated (``build_inputs``) and planned (the one planner), and
the whole command timed as a user runs it.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from variant_autoscaler.api.documents import load_document
from variant_autoscaler.commands.plan import build_inputs, make_plan
from variant_autoscaler.core.analyzer import clear_sizing_memo

VARIANTS = 1000
ACCELERATORS = (
    ("A100", "NVIDIA-A100-PCIE-80GB", 40.0, 1.0),
    ("H100", "NVIDIA-H100-80GB-HBM3", 100.0, 2.5),
    ("L40S", "NVIDIA-L40S", 25.0, 0.6),
    ("MI300X", "AMD-MI300X-192GB", 65.0, 2.0),
    ("G2", "Intel-Gaudi-2-96GB", 23.0, 0.8),
    ("A10G", "NVIDIA-A10G", 10.0, 0.3),
    ("L4", "NVIDIA-L4", 8.0, 0.25),
    ("H200", "NVIDIA-H200-141GB", 120.0, 3.0),
)
CLASSES = (("Premium", 1, 500, 40), ("Standard", 5, 1000, 60), ("Freemium", 10, 2000, 90))
REPEATS = 3


def document(seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    models = [f"family-{i}/model" for i in range(VARIANTS // 4)]
    classes = [
        {
            "name": name,
            "priority": priority,
            "data": [
                {"model": m, "slo-ttft": ttft, "slo-tpot": itl}
                for j, m in enumerate(models)
                if j % 3 == index
            ],
        }
        for index, (name, priority, ttft, itl) in enumerate(CLASSES)
    ]
    variants = []
    for i in range(VARIANTS):
        scale = rng.uniform(0.5, 1.5)
        variants.append(
            {
                "name": f"v{i:04d}",
                "namespace": f"team-{i % 20}",
                "modelID": models[i % len(models)],
                "accelerator": ACCELERATORS[i % len(ACCELERATORS)][0],
                "currentReplicas": rng.randint(0, 4),
                "modelProfile": {
                    "accelerators": [
                        {
                            "acc": acc,
                            "accCount": 1,
                            "maxBatchSize": 64,
                            "perfParms": {
                                "decodeParms": {
                                    "alpha": f"{20 * scale / speed:.4f}",
                                    "beta": f"{0.2 * scale / speed:.5f}",
                                },
                                "prefillParms": {
                                    "gamma": f"{20 * scale / speed:.4f}",
                                    "delta": f"{0.004 * scale / speed:.6f}",
                                },
                            },
                        }
                        for acc, _, _, speed in ACCELERATORS
                    ]
                },
                "load": {
                    "arrivalRate": round(rng.uniform(10, 600), 1),
                    "avgInputTokens": rng.choice([128, 512, 1024]),
                    "avgOutputTokens": rng.choice([64, 128, 256]),
                },
            }
        )
    return {
        "optimizer": {"unlimited": False, "saturationPolicy": "PriorityExhaustive", "batchSizes": 1},
        "accelerators": {
            name: {"device": device, "cost": f"{cost:.2f}"} for name, device, cost, _ in ACCELERATORS
        },
        "serviceClasses": classes,
        "capacity": {device: 600 for _, device, _, _ in ACCELERATORS},
        "variants": variants,
    }


def _best(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _command(path: Path) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "variant-autoscaler"), "plan", "-f", str(path), "-o", "json"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run() -> str:
    doc = document()
    work = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    files = {"JSON": work / "plan.json", "YAML": work / "plan.yaml"}
    files["JSON"].write_text(json.dumps(doc))
    files["YAML"].write_text(yaml.safe_dump(doc, sort_keys=False))
    rows = []
    for kind, path in files.items():
        text = path.read_text()
        pure = _best(lambda: yaml.safe_load(text))  # noqa: B023 - called at once
        ours = _best(lambda: load_document(text, source=str(path)))  # noqa: B023
        inputs = build_inputs(load_document(text, source=str(path)))
        validate = _best(lambda: build_inputs(load_document(text, source=str(path))))  # noqa: B023
        clear_sizing_memo()  # each file planned cold, as by the command
        started = time.perf_counter()
        plan, invalid = make_plan(inputs)
        planning = time.perf_counter() - started
        assert not invalid and len(plan.decisions) == VARIANTS
        rows.append(
            f"| {kind} ({path.stat().st_size / 1e6:.1f} MB) | {pure:.2f} s | {ours:.3f} s | "
            f"{validate - ours:.2f} s | {planning:.2f} s ({plan.analyzer_seconds or 0:.2f} s sizing) | "
            f"{_command(path):.2f} s |"
        )
    return "\n".join(
        [
            "## `plan -f` on a 1,000-variant file",
            "",
            f"Command: `python bench/run_all.py --only plan_file`. {VARIANTS} variants × {len(ACCELERATORS)} "
            "accelerator profiles, 3 service classes, limited mode, batch fixed (the file is generated, "
            f"seeded). Reads and validation: best of {REPEATS}; the command: median of {REPEATS} runs, "
            "process start included.",
            "",
            "| file | read, PyYAML pure-Python `safe_load` | read, `load_document` "
            "| validate (`build_inputs`) | plan (analyzer + MILP) | `variant-autoscaler plan -f … -o json` |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )


if __name__ == "__main__":
    print(run())
