"""deploy/: the files parse, reference real files, and the configs they mount load; the same
topology runs with real processes (redis-server + 2 replicas + nginx)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from budgeter.settings import load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_compose_file_parses_and_references_real_files():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "budgeter-1", "budgeter-2", "nginx", "prometheus"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    for svc in services.values():
        for volume in svc.get("volumes", ()):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), source
    build = services["budgeter-1"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).exists()
    tool = shutil.which("docker-compose")
    if tool:
        out = subprocess.run([tool, "-f", str(DEPLOY / "docker-compose.yml"), "config", "-q"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def test_dockerfile_is_multi_stage_non_root_with_a_grpc_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.count("FROM ") == 2 and "USER 10001" in text
    assert 'HEALTHCHECK' in text and '"budgeter", "health"' in text


def k8s_docs() -> list[dict]:
    return [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


def by_kind(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def pod_specs(docs: list[dict]) -> list[tuple[dict, dict]]:
    """(pod template labels, pod spec) of every workload."""
    return [(d["spec"]["template"]["metadata"]["labels"], d["spec"]["template"]["spec"])
            for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def test_kubernetes_manifests_validate_against_the_api_schemas():
    """Every object is valid for Kubernetes (strict: no unknown fields), checked offline with the
    schemas the kubernetes-validate package ships."""
    kv = pytest.importorskip("kubernetes_validate")
    docs = k8s_docs()
    for doc in docs:
        kv.validate(doc, "1.30.0", strict=True)
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    files = {f.name for f in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_kubernetes_manifests_apply_to_an_empty_cluster(tmp_path):
    """Everything a pod refers to is defined in deploy/k8s: no volume claim, ConfigMap, Service or
    port that an empty cluster lacks; images name a registry and a version."""
    from importlib.metadata import version

    docs = k8s_docs()
    objects = by_kind(docs)
    for _, spec in pod_specs(docs):
        claims = {t["metadata"]["name"] for d in docs if d["kind"] == "StatefulSet"
                  for t in d["spec"].get("volumeClaimTemplates", ())}
        for volume in spec.get("volumes", ()):
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in objects
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in objects, volume
        for c in spec["containers"]:
            registry, _, rest = c["image"].partition("/")
            assert "." in registry and ":" in rest and not rest.endswith(":latest"), c["image"]
            volumes = {v["name"] for v in spec.get("volumes", ())} | claims
            assert {m["name"] for m in c.get("volumeMounts", ())} <= volumes
    budgeter = objects[("Deployment", "budgeter")]["spec"]["template"]["spec"]["containers"][0]
    assert budgeter["image"] == f"registry.example.com/budgeter:{version('budgeter')}"
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "registry.example.com/budgeter", "newTag": version("budgeter")}]
    for svc in (d for d in docs if d["kind"] == "Service"):  # each Service reaches pods and ports
        targets = [spec for labels, spec in pod_specs(docs) if svc["spec"]["selector"].items() <= labels.items()]
        assert targets, svc["metadata"]["name"]
        ports = {p["name"] for spec in targets for c in spec["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports
    config = tmp_path / "budgeter.toml"
    config.write_text(objects[("ConfigMap", "budgeter")]["data"]["budgeter.toml"])
    settings = load_settings(config)  # the mounted config loads, and its Redis is a Service here
    assert settings.store_url == "redis://redis:6379/0" and settings.grace == 10.0
    assert ("Service", "redis") in objects and ("StatefulSet", "redis") in objects
    assert objects[("HorizontalPodAutoscaler", "budgeter")]["spec"]["minReplicas"] >= 2
    assert objects[("PodDisruptionBudget", "budgeter")]["spec"]["minAvailable"] == 1
    mounts = {m["name"]: m for m in budgeter["volumeMounts"]}
    assert mounts["models"]["readOnly"] and mounts["config"]["mountPath"] == "/etc/budgeter"


def test_balancers_hash_the_session_header_the_client_sends():
    from budgeter.affinity import HEADER

    objects = by_kind(k8s_docs())
    envoy = yaml.safe_load(objects[("ConfigMap", "budgeter-balancer")]["data"]["envoy.yaml"])
    cluster = envoy["static_resources"]["clusters"][0]
    assert cluster["lb_policy"] == "RING_HASH" and cluster["type"] == "STRICT_DNS"
    host = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    headless = objects[("Service", host["address"])]
    assert headless["spec"]["clusterIP"] == "None" and host["port_value"] == 50051
    route = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hashing = route["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["hash_policy"]
    assert hashing == [{"header": {"header_name": HEADER}}]
    assert objects[("Service", "budgeter")]["spec"]["selector"] == {"app.kubernetes.io/name": "budgeter-balancer"}
    nginx = (DEPLOY / "nginx" / "grpc.conf").read_text()
    assert f"hash $http_{HEADER.replace('-', '_')} consistent;" in nginx


def test_liveness_probe_stays_serving_through_a_redis_outage(private_redis):
    """The probes of the manifest, asked of a real server whose Redis goes away: readiness turns
    NOT_SERVING (the pod leaves the balancer), liveness stays SERVING (no restart loop)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from budgeter.service.server import create_server
    from tests.service.conftest import settings

    container = by_kind(k8s_docs())[("Deployment", "budgeter")]["spec"]["template"]["spec"]["containers"][0]
    probes = {name: container[name]["grpc"].get("service", "") for name in
              ("readinessProbe", "livenessProbe", "startupProbe")}
    srv = create_server(settings(store=private_redis.url, store_check_interval=0.1))

    def status(service: str) -> int:
        with grpc.insecure_channel(srv.target) as channel:
            return health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=600).status

    serving = health_pb2.HealthCheckResponse.SERVING
    try:
        assert {name: status(s) for name, s in probes.items()} == dict.fromkeys(probes, serving)
        private_redis.stop()
        deadline = time.monotonic() + 600
        while status(probes["readinessProbe"]) == serving:
            assert time.monotonic() < deadline, "readiness never followed the store"
            time.sleep(0.05)
        time.sleep(0.5)
        assert status(probes["livenessProbe"]) == status(probes["startupProbe"]) == serving
    finally:
        srv.stop(0)


def test_shared_configs_load():
    settings = load_settings(DEPLOY / "budgeter.toml")
    assert settings.store_url.startswith("redis://") and settings.metrics_port == 9464
    assert tomllib.loads((DEPLOY / "budgeter.toml").read_text())["default_tokenizer"] == "qwen3.6"
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["budgeter-1:9464", "budgeter-2:9464"]


def test_local_topology_through_nginx():
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None or shutil.which("redis-server") is None:
        pytest.skip("needs nginx and redis-server (Debian: nginx-light, redis-server)")
    out = subprocess.run([sys.executable, str(DEPLOY / "local_topology.py"), "--replicas", "2"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "80 turns" in out.stdout and "2 replicas" in out.stdout
    # session affinity: nginx hashed each session's calls onto one replica, and both were used
    assert "session affinity: 16 of 16 sessions on one replica each, 2 replicas used" in out.stdout
