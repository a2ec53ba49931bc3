"""deploy/: the files parse, reference real files, and the configs they mount load; the same
topology runs with real processes (redis-server + 2 replicas + nginx)."""

from __future__ import annotations

import shutil
import subprocess
import sys
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


def test_kubernetes_manifests(tmp_path):
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "budgeter.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
                          "PodDisruptionBudget"}
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["grpc"]["port"] == 50051
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["models"]["readOnly"] and mounts["config"]["mountPath"] == "/etc/budgeter"
    config = tmp_path / "budgeter.toml"
    config.write_text(kinds["ConfigMap"]["data"]["budgeter.toml"])
    settings = load_settings(config)  # the mounted config loads
    assert settings.store_url == "redis://redis:6379/0" and settings.grace == 10.0
    assert kinds["HorizontalPodAutoscaler"]["spec"]["minReplicas"] >= 2
    assert kinds["PodDisruptionBudget"]["spec"]["minAvailable"] == 1


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
