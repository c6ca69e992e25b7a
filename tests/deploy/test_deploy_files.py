"""deploy/ stays consistent with itself and with vixio: the Compose file's services and ports
are the ones haproxy.cfg balances, the config they run is valid, probes and health checks ask
paths the HTTP port serves, and the grace periods cover vixio's own shutdown. (Docker and
Kubernetes are not run here; HAProxy is, in test_haproxy_fleet.py.)"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from vixio.config import ConfigError
from vixio.config.loader import load_config
from vixio.config.models import VixioConfig
from vixio.config.preflight import config_problems
from vixio.testing.fleet import MISSING, haproxy_path
from vixio.transports.xiaozhi.http.ota import OtaServer
from vixio.transports.xiaozhi.session.auth import DeviceAuthenticator

pytestmark = pytest.mark.process

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ENVIRONMENT = {
    "VIXIO_PUBLIC_URL": "ws://voice.example.com:8000/xiaozhi/v1/",
    "VIXIO_ADMIN_TOKEN": "an-operator-token-for-tests",
    "REDIS_PASSWORD": "p" * 64,
    "VIXIO_FLEET_SECRET": "f" * 64,
}


@pytest.fixture(scope="module")
def config() -> VixioConfig:
    return load_config(DEPLOY / "config.fleet.yaml", environ=ENVIRONMENT)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text(encoding="utf-8"))


def haproxy_servers() -> dict[str, list[tuple[str, str, int, int | None]]]:
    """Backend -> its `server` lines as (name, host, port, check port)."""
    servers: dict[str, list[tuple[str, str, int, int | None]]] = {}
    backend = ""
    for line in (DEPLOY / "haproxy.cfg").read_text(encoding="utf-8").splitlines():
        words = line.split("#")[0].split()
        if words[:1] == ["backend"]:
            backend = words[1]
        elif words[:1] == ["server"]:
            host, port = words[2].rsplit(":", 1)
            check = int(words[words.index("port") + 1]) if "port" in words else None
            servers.setdefault(backend, []).append((words[1], host, int(port), check))
    return servers


def healthz_paths(config: VixioConfig) -> set[str]:
    ota = OtaServer(config.xiaozhi, DeviceAuthenticator(config.xiaozhi.auth), websocket_port=lambda: 0)
    return {resource.canonical for resource in ota.app.router.resources()}


def test_the_fleet_config_is_valid_and_shares_redis(config: VixioConfig) -> None:
    assert config.state.backend == "redis"
    assert config.xiaozhi.public_url == ENVIRONMENT["VIXIO_PUBLIC_URL"]
    assert config.xiaozhi.http.admin_token  # operator routes through a balancer need it
    assert (config.state.password, config.state.fleet_secret) == (
        ENVIRONMENT["REDIS_PASSWORD"],
        ENVIRONMENT["VIXIO_FLEET_SECRET"],
    )
    assert config_problems(config) == []
    for missing in ("REDIS_PASSWORD", "VIXIO_FLEET_SECRET", "VIXIO_PUBLIC_URL"):  # none has a default
        with pytest.raises(ConfigError, match=missing):
            load_config(DEPLOY / "config.fleet.yaml", environ={k: v for k, v in ENVIRONMENT.items() if k != missing})


def backend_lines(name: str) -> list[str]:
    """The settings of one backend of haproxy.cfg, without comments."""
    lines, inside = [], False
    for line in (DEPLOY / "haproxy.cfg").read_text(encoding="utf-8").splitlines():
        words = line.split("#")[0].split()
        if words[:1] in (["backend"], ["frontend"], ["defaults"], ["global"], ["resolvers"]):
            inside = words == ["backend", name]
        elif inside and words:
            lines.append(" ".join(words))
    return lines


def test_ota_requests_of_one_device_reach_one_instance() -> None:
    """An activation code is issued by the instance that answered: round-robin gave one device a new
    code at each OTA request (3 codes in 4 requests)."""
    http = backend_lines("vixio_http")
    assert [line for line in http if line.startswith("balance")] == ["balance source"]
    assert "hash-type consistent" in http
    assert [line for line in backend_lines("vixio_websocket") if line.startswith("balance")] == ["balance leastconn"]


def test_redis_takes_a_password_only_vixio_reaches_and_the_secrets_are_required(compose: dict[str, Any]) -> None:
    services = compose["services"]
    redis = services["redis"]
    assert "requirepass" in " ".join(redis["command"]) and "ports" not in redis  # never published on the host
    assert redis["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert redis["environment"]["REDISCLI_AUTH"].startswith("${REDIS_PASSWORD")  # the health check's ping
    for name in ("vixio1", "vixio2"):
        environment = services[name]["environment"]
        for key in ("REDIS_PASSWORD", "VIXIO_FLEET_SECRET", "VIXIO_PUBLIC_URL", "VIXIO_ADMIN_TOKEN"):
            assert environment[key].startswith(f"${{{key}:?"), (key, environment[key])  # Compose stops without it
        assert "localhost" not in environment["VIXIO_PUBLIC_URL"].split(" ")[0]
    redis_k8s = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "k8s" / "redis.yaml").read_text()) if d}
    (container,) = redis_k8s["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert "requirepass" in " ".join(container["command"])
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]} == {
        "REDIS_PASSWORD": "redis-password",
        "REDISCLI_AUTH": "redis-password",
    }
    policy = redis_k8s["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == redis_k8s["StatefulSet"]["spec"]["selector"]["matchLabels"]
    (rule,) = policy["ingress"]
    deployment = next(d for d in yaml.safe_load_all((DEPLOY / "k8s" / "vixio.yaml").read_text()) if d)
    assert [p["podSelector"]["matchLabels"] for p in rule["from"]] == [deployment["spec"]["selector"]["matchLabels"]]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]
    (vixio,) = deployment["spec"]["template"]["spec"]["containers"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in vixio["env"] if "valueFrom" in e}
    assert secrets["REDIS_PASSWORD"] == "redis-password" and secrets["VIXIO_FLEET_SECRET"] == "fleet-secret"


def test_compose_runs_what_haproxy_balances(compose: dict[str, Any], config: VixioConfig) -> None:
    services = compose["services"]
    instances = sorted(name for name in services if re.fullmatch(r"vixio\d+", name))
    assert instances == ["vixio1", "vixio2"] and {"redis", "haproxy"} <= set(services)
    backends = haproxy_servers()
    websocket, http = config.xiaozhi.port, config.xiaozhi.http.port
    assert [(name, host, port, check) for name, host, port, check in backends["vixio_websocket"]] == [
        (name, name, websocket, http) for name in instances
    ]  # checked on the HTTP port's /healthz
    assert [(name, host, port) for name, host, port, _ in backends["vixio_http"]] == [
        (name, name, http) for name in instances
    ]
    haproxy = services["haproxy"]
    assert sorted(haproxy["ports"]) == [f"{websocket}:{websocket}", f"{http}:{http}"]
    assert any(volume.startswith("./haproxy.cfg:") for volume in haproxy["volumes"])
    for name in instances:
        service = services[name]
        assert service["depends_on"]["redis"] == {"condition": "service_healthy"}
        assert service["environment"]["VIXIO_REDIS_URL"].startswith("redis://redis:")
        assert f"127.0.0.1:{http}/healthz" in " ".join(service["healthcheck"]["test"])


def test_health_checks_and_probes_ask_paths_vixio_serves(compose: dict[str, Any], config: VixioConfig) -> None:
    served = healthz_paths(config)
    text = (DEPLOY / "haproxy.cfg").read_text(encoding="utf-8")
    checked = set(re.findall(r"option httpchk GET (\S+)", text))
    assert checked == {"/healthz"} and checked <= served
    deployment, service = [d for d in yaml.safe_load_all((DEPLOY / "k8s" / "vixio.yaml").read_text()) if d]
    assert deployment["kind"] == "Deployment" and service["kind"] == "Service"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"websocket": config.xiaozhi.port, "http": config.xiaozhi.http.port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert "/healthz" in served
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    # SIGTERM comes after preStop; vixio then drains replies and closes sessions before the grace period ends.
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    server = config.server
    assert pod["terminationGracePeriodSeconds"] > pre_stop + server.drain_timeout + server.shutdown_timeout
    grace = int(compose["x-vixio"]["stop_grace_period"].rstrip("s"))
    assert grace > server.drain_timeout + server.shutdown_timeout
    redis = [d for d in yaml.safe_load_all((DEPLOY / "k8s" / "redis.yaml").read_text()) if d]
    assert {d["kind"] for d in redis} == {"StatefulSet", "Service", "NetworkPolicy"}
    assert any(env.get("value", "").startswith("redis://redis:") for env in container["env"])


def test_the_dockerfile_copies_what_exists_and_runs_the_fleet_config() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    root = DEPLOY.parent
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        *sources, _ = shlex.split(line)
        assert all((root / source).exists() for source in sources), line
    assert "COPY deploy/config.fleet.yaml /etc/vixio/config.yaml" in text
    assert '"serve", "--config", "/etc/vixio/config.yaml"' in text


@pytest.mark.skipif(haproxy_path() is None, reason=MISSING)
def test_haproxy_accepts_the_shipped_config() -> None:
    checked = subprocess.run(
        [str(haproxy_path()), "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
