"""ops/k8s: every overlay renders (kustomize, through kubectl, where it is installed),
every object is valid against the Kubernetes 1.32 schemas (kubernetes-validate, offline),
and what the manifests name exists in Vigil: the CLI flags and environment, the probes'
paths, the metric the autoscalers read, a grace period that covers the drain."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from vigil.platform.cli import build_parser
from vigil.platform.control.webhooks.addresses import (
    WebhookAddressPolicy,
    choose_address,
    host_refusal,
)
from vigil.platform.settings import serve_settings, worker_settings
from vigil.platform.telemetry.metrics import EngineStatsCollector

K8S = Path(__file__).parents[2] / "ops" / "k8s"
OVERLAYS = ["base", "overlays/gpu", "overlays/keda", "overlays/hpa"]
CUSTOM = {"monitoring.coreos.com", "keda.sh"}  # CRDs: not in the core schemas


def rendered(overlay: str) -> list[dict[str, Any]]:
    """The overlay's objects: kustomize's output, or, without kubectl, the files it lists
    (patches left out)."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run(
            [kubectl, "kustomize", str(K8S / overlay)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]
    docs: list[dict[str, Any]] = []
    folder = K8S / overlay
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    for entry in kustomization["resources"]:
        path = folder / entry
        files = [path] if path.is_file() else [K8S / "base" / f for f in _base_files()]
        for f in files:
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def _base_files() -> list[str]:
    return list(yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())["resources"])


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [d for d in rendered(overlay) if d["kind"] == kind]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_against_the_kubernetes_schemas(overlay: str) -> None:
    docs = rendered(overlay)
    assert docs
    for doc in docs:
        group = doc["apiVersion"].split("/")[0]
        if group in CUSTOM:
            assert doc["spec"], doc
            continue
        kubernetes_validate.validate(doc, "1.32", strict=True)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from secret>") for e in container.get("env", [])}


def test_the_gateway_and_worker_run_commands_vigil_takes() -> None:
    deployments = {d["metadata"]["name"]: d for d in objects("base", "Deployment")}
    gateway = _container(deployments["vigil-gateway"])
    worker = _container(deployments["vigil-worker"])
    parser = build_parser()
    args = vars(parser.parse_args(gateway["args"]))
    env = {f"VIGIL_{k.removeprefix('VIGIL_')}": v for k, v in _env(gateway).items()}
    env["VIGIL_REDIS_URL"] = "redis://redis:6379"  # what the Secret's redis-url would hold
    settings = serve_settings(args, env)
    assert settings.auth == "keys" and settings.workers == 0 and settings.host == "0.0.0.0"
    # The in-cluster Alertmanager is the one internal address webhooks may call.
    policy = WebhookAddressPolicy.of(settings.webhook_allow)
    assert host_refusal("alertmanager-operated.monitoring.svc", policy) is None
    assert choose_address("alertmanager-operated.monitoring.svc", ["10.96.0.9"], policy)
    assert host_refusal("10.96.0.9", policy) is not None
    grace = deployments["vigil-gateway"]["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    assert grace > settings.drain_delay_s + settings.drain_timeout_s
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    wargs = [a.replace("$(POD_IP)", "10.0.0.7") for a in worker["args"]]
    wenv = {**_env(worker), "VIGIL_WORKER_TOKEN": "t"}
    wsettings = worker_settings(vars(parser.parse_args(wargs)), wenv)
    assert wsettings.gateway_urls == ("http://vigil-gateway-internal:8000",)
    assert wsettings.resolve_gateways  # every gateway pod behind the headless Service
    assert wsettings.port == 9000 and wsettings.advertise_host == "10.0.0.7"
    wgrace = deployments["vigil-worker"]["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"
    ]
    assert wgrace > wsettings.drain_timeout_s
    startup = worker["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # a model load
    services = {s["metadata"]["name"]: s for s in objects("base", "Service")}
    internal = services["vigil-gateway-internal"]["spec"]
    assert internal["publishNotReadyAddresses"] is True and internal["clusterIP"] == "None"
    # Two gateways, each evictable while the other serves: the loops move, nothing stops.
    assert deployments["vigil-gateway"]["spec"]["replicas"] == 2
    budgets = {b["metadata"]["name"]: b["spec"] for b in objects("base", "PodDisruptionBudget")}
    assert budgets["vigil-gateway"]["maxUnavailable"] == 1
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in gateway["env"] if "valueFrom" in e
    }
    assert secrets["VIGIL_REDIS_URL"] == {"name": "vigil", "key": "redis-url", "optional": True}
    [job] = objects("base", "Job")
    assert _container(job)["args"] == ["migrate"]


def test_the_autoscalers_read_a_metric_vigil_exposes() -> None:
    registry = CollectorRegistry()
    registry.register(EngineStatsCollector(list))  # the gateway's engine gauges
    exposed = {family.name for family in registry.collect()}
    [scaled] = objects("overlays/keda", "ScaledObject")
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    [hpa] = objects("overlays/hpa", "HorizontalPodAutoscaler")
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    assert metric in exposed and query == f"sum({metric})"


@pytest.mark.skipif(not shutil.which("kubectl"), reason="the patch needs kustomize to apply")
def test_the_gpu_overlay_gives_workers_a_gpu_and_cuda() -> None:
    [worker] = [
        d for d in objects("overlays/gpu", "Deployment") if "worker" in d["metadata"]["name"]
    ]
    container = _container(worker)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert _env(container)["VIGIL_DEVICE"] == "cuda"
    assert container["image"].endswith("-cuda")
