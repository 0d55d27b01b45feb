"""ops/k8s: every overlay renders (kustomize, through kubectl, where it is installed),
every object is valid against the Kubernetes 1.32 schemas (kubernetes-validate, offline),
and what the manifests name exists in Vigil: the CLI flags and environment, the probes'
paths, the metric the autoscalers read, a grace period that covers the drain, one console
secret for every gateway, the rules of ops/prometheus, the names prometheus.yml looks
up, who the network policies let in, one host for the Ingress and every link."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from vigil.platform.alerts.links import public_base_url
from vigil.platform.cli import build_parser
from vigil.platform.control.webhooks.addresses import (
    WebhookAddressPolicy,
    choose_address,
    host_refusal,
)
from vigil.platform.settings import serve_settings, worker_settings
from vigil.platform.telemetry.metrics import EngineStatsCollector

K8S = Path(__file__).parents[2] / "ops" / "k8s"
PROMETHEUS = Path(__file__).parents[2] / "ops" / "prometheus"
OVERLAYS = ["base", "overlays/gpu", "overlays/keda", "overlays/hpa", "overlays/models"]
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
    if overlay == "overlays/models":  # and the pod that writes to its volume
        docs += list(yaml.safe_load_all((K8S / overlay / "upload-pod.yaml").read_text()))
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


def _gateway_env(overlay: str = "base") -> dict[str, dict[str, Any]]:
    [gateway] = [
        d for d in objects(overlay, "Deployment") if d["metadata"]["name"] == "vigil-gateway"
    ]
    return {e["name"]: e for e in _container(gateway)["env"]}


def test_every_gateway_signs_console_forms_with_one_shared_secret() -> None:
    # Two gateways, no session affinity: a form from one posted to the other must verify.
    [gateway] = [
        d for d in objects("base", "Deployment") if d["metadata"]["name"] == "vigil-gateway"
    ]
    assert gateway["spec"]["replicas"] > 1
    secret = _gateway_env()["VIGIL_CONSOLE_SECRET"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "vigil", "key": "console-secret"}  # required: no optional
    args = vars(build_parser().parse_args(_container(gateway)["args"]))
    settings = serve_settings(args, {"VIGIL_CONSOLE_SECRET": "s3cret", "VIGIL_WORKER_TOKEN": "t"})
    assert settings.console_secret == "s3cret"


def test_the_ingress_host_is_the_external_url_and_every_alert_link_uses_it() -> None:
    [ingress] = objects("base", "Ingress")
    [rule] = ingress["spec"]["rules"]
    host = rule["host"]
    [tls] = ingress["spec"]["tls"]
    assert tls["hosts"] == [host] and tls["secretName"]
    assert {p["backend"]["service"]["name"] for p in rule["http"]["paths"]} == {"vigil"}
    external = _gateway_env()["VIGIL_EXTERNAL_URL"]["value"]
    settings = serve_settings({}, {"VIGIL_EXTERNAL_URL": external})
    assert public_base_url(settings.external_url, "0.0.0.0", 8000) == f"https://{host}"
    [rules] = objects("base", "PrometheusRule")
    links = [
        r["annotations"]["runbook_url"]
        for g in rules["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert links and all(link.startswith(f"https://{host}/runbooks/") for link in links)


def test_the_ingress_routes_the_public_paths_only() -> None:
    """The API, the console and its assets, the API docs and runbooks reach the outside;
    /metrics (open to anyone who reaches it), the probes and the workers' /internal do
    not."""
    [ingress] = objects("base", "Ingress")
    prefixes = [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]]

    def routed(path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)

    for public in ("/v1/chat/completions", "/api/admin/deployments", "/console/", "/schema"):
        assert routed(public), public
    for inside in ("/metrics", "/healthz", "/readyz", "/internal/workers/register"):
        assert not routed(inside), inside


def test_the_prometheus_rule_carries_the_rules_of_ops_prometheus() -> None:
    spec = importlib.util.spec_from_file_location("render", K8S / "render_prometheus_rule.py")
    assert spec is not None and spec.loader is not None
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    shipped = (K8S / "base" / "prometheus-rules.yaml").read_text()
    assert shipped == render.rendered(), "run ops/k8s/render_prometheus_rule.py"
    [rule] = objects("base", "PrometheusRule")
    names = {g["name"] for g in rule["spec"]["groups"]}
    for path in PROMETHEUS.glob("*.rules.yml"):
        assert {g["name"] for g in yaml.safe_load(path.read_text())["groups"]} <= names, path


def test_prometheus_yml_names_the_kits_services_and_the_job_its_rules_read() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    services = {s["metadata"]["name"]: s for s in objects("base", "Service")}
    [dns] = jobs["vigil-gateway"]["dns_sd_configs"]
    [every_gateway] = dns["names"]
    headless = services[every_gateway]["spec"]
    assert headless["clusterIP"] == "None" and dns["port"] == headless["ports"][0]["port"]
    [sd] = jobs["vigil-workers"]["http_sd_configs"]
    any_gateway = services["vigil"]
    assert sd["url"].startswith(f"http://vigil:{any_gateway['spec']['ports'][0]['port']}/")
    # The Operator's scrape of the same gateways gets the same job name (the rules read
    # up{job="vigil-gateway"}), and picks the client Service, not the headless one too.
    [monitor] = objects("base", "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    picked = [
        name
        for name, s in services.items()
        if selector.items() <= s["metadata"].get("labels", {}).items()
    ]
    assert picked == ["vigil"]
    assert any_gateway["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "vigil-gateway"


def _allowed_from(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]


def _egress_ports(policy: dict[str, Any]) -> set[int]:
    return {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}


def test_workers_are_reached_by_gateways_and_gateways_reach_what_they_call() -> None:
    policies = {p["metadata"]["name"]: p for p in objects("base", "NetworkPolicy")}
    worker, gateway = policies["vigil-worker"], policies["vigil-gateway"]
    assert (
        set(worker["spec"]["policyTypes"])
        == set(gateway["spec"]["policyTypes"])
        == {
            "Ingress",
            "Egress",
        }
    )
    pods = [p["podSelector"]["matchLabels"] for p in _allowed_from(worker) if "podSelector" in p]
    assert pods == [{"app.kubernetes.io/name": "vigil-gateway"}]  # and Prometheus's namespace
    assert [p["port"] for r in worker["spec"]["ingress"] for p in r["ports"]] == [9000]
    assert _egress_ports(worker) == {53, 8000}
    # PostgreSQL, Redis, workers, webhooks over HTTPS, the in-cluster Alertmanager, DNS.
    assert {5432, 6379, 9000, 443, 9093, 53} <= _egress_ports(gateway)
    from_pods = [p for p in _allowed_from(gateway) if "podSelector" in p]
    assert from_pods == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "vigil-worker"}}}
    ]


@pytest.mark.skipif(not shutil.which("kubectl"), reason="the patch needs kustomize to apply")
def test_the_models_overlay_mounts_one_volume_where_gateways_take_artifacts_from() -> None:
    [claim] = objects("overlays/models", "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # every gateway and worker
    deployments = {d["metadata"]["name"]: d for d in objects("overlays/models", "Deployment")}
    mounts = {}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        [volume] = pod["volumes"]
        assert volume["persistentVolumeClaim"] == {
            "claimName": claim["metadata"]["name"],
            "readOnly": True,
        }
        [mount] = _container(deployment)["volumeMounts"]
        mounts[name] = mount["mountPath"]
    env = {k: v.get("value", "") for k, v in _gateway_env("overlays/models").items()}
    settings = serve_settings({}, env)
    assert settings.resolved_model_dirs == (Path(mounts["vigil-gateway"]),)
    assert mounts["vigil-worker"] == mounts["vigil-gateway"]  # the path a version names
    [upload] = yaml.safe_load_all((K8S / "overlays/models/upload-pod.yaml").read_text())
    [volume] = upload["spec"]["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
