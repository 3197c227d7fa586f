"""The deploy/ manifests agree with each other, with the package and with the local broker script.

No Docker or cluster here: the files are parsed with pyyaml and cross-checked
(images, commands, environment, volumes, selectors, services), so a rename on
one side cannot silently break the other.
"""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
MEMFOLD_IMAGE = f"memfold:{VERSION}"
KAFKA_VERSION = re.search(r'^KAFKA_VERSION="([^"]+)"', (DEPLOY / "kafka" / "local-broker.sh").read_text(), re.M)[1]
SHARED_SETTINGS = {"MEMFOLD_TOPIC", "MEMFOLD_PARTITIONS", "MEMFOLD_POLICY", "MEMFOLD_POLICIES"}


def _kafka_target(command: list[str]) -> str:
    """Return what follows ``kafka://`` in a memfold command's ``--log`` value."""
    url = command[command.index("--log") + 1]
    assert url.startswith("kafka://"), url
    return url.removeprefix("kafka://")


def _check_memfold_command(command: list[str], subcommand: str) -> None:
    assert command[:2] == ["memfold", subcommand]
    assert command.count("--log") == 1
    if subcommand == "project":
        assert command.count("--data-dir") == 1


def _check_cluster_id(value: str) -> None:
    # KRaft wants a UUID: 16 bytes, URL-safe base64 without padding (22 characters).
    assert len(value) == 22
    assert len(base64.urlsafe_b64decode(value + "==")) == 16


# --------------------------------------------------------------------------- docker compose


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_compose_runs_kafka_a_worker_a_projector_and_the_service(compose):
    assert set(compose["services"]) == {"kafka", "memfold-worker", "memfold-projector", "memfold-service",
                                        "memfold-service-b"}


def test_compose_service_serves_on_its_own_volume_and_port(compose):
    spec = compose["services"]["memfold-service"]
    command = spec["command"]
    _check_memfold_command(command, "serve")
    assert command[command.index("--host") + 1] == "0.0.0.0"
    port = command[command.index("--port") + 1]
    assert spec["ports"] == [f"{port}:{port}"] and f":{port}/healthz" in " ".join(spec["healthcheck"]["test"])
    volume, target = spec["volumes"][0].split(":")
    assert target == command[command.index("--data-dir") + 1] and volume in compose["volumes"]
    assert volume != compose["services"]["memfold-projector"]["volumes"][0].split(":")[0]  # one DuckDB writer per file


def test_compose_kafka_is_a_kraft_broker_of_the_local_broker_version(compose):
    kafka = compose["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    _check_cluster_id(env["CLUSTER_ID"])
    node, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")
    assert node == env["KAFKA_NODE_ID"]
    assert voter.endswith(":9093") and "CONTROLLER://:9093" in env["KAFKA_LISTENERS"]
    data_mount = next(v for v in kafka["volumes"] if v.endswith(":" + env["KAFKA_LOG_DIRS"]))
    assert data_mount.split(":")[0] in compose["volumes"]


@pytest.mark.parametrize(("service", "subcommand"), [("memfold-worker", "worker"), ("memfold-projector", "project"),
                                                    ("memfold-service", "serve"), ("memfold-service-b", "serve")])
def test_compose_memfold_services_use_the_cli_against_the_advertised_broker(compose, service, subcommand):
    spec = compose["services"][service]
    assert spec["image"] == MEMFOLD_IMAGE
    assert spec["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert (DEPLOY / ".." / spec["build"]["dockerfile"]).is_file()
    _check_memfold_command(spec["command"], subcommand)
    advertised = compose["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"PLAINTEXT://{_kafka_target(spec['command'])}" in advertised.split(",")
    assert spec["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    assert SHARED_SETTINGS <= set(spec["environment"])


def test_compose_services_agree_on_topic_partitions_and_policies(compose):
    worker = compose["services"]["memfold-worker"]["environment"]
    projector = compose["services"]["memfold-projector"]["environment"]
    assert {k: worker[k] for k in SHARED_SETTINGS} == {k: projector[k] for k in SHARED_SETTINGS}


def test_compose_projector_keeps_its_data_dir_on_a_named_volume(compose):
    projector = compose["services"]["memfold-projector"]
    data_dir = projector["command"][projector["command"].index("--data-dir") + 1]
    assert projector["environment"]["MEMFOLD_DATA_DIR"] == data_dir
    volume, _, target = next(v for v in projector["volumes"] if v.endswith(":" + data_dir)).partition(":")
    assert target == data_dir and volume in compose["volumes"]


# --------------------------------------------------------------------------- kubernetes


@pytest.fixture(scope="module")
def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    on_disk = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk, "every manifest is listed in kustomization.yaml, and only those"
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for name in listed:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} defined twice"
            objects[key] = doc
    return objects


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj["spec"]["template"]["spec"]["containers"]


def _resolve(value: str, container: dict[str, Any], k8s) -> str:
    """Expand ``$(VAR)`` the way the kubelet does, from the container's env and envFrom ConfigMaps."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(k8s[("ConfigMap", source["configMapRef"]["name"])]["data"])
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    # Downward-API values, as the kubelet fills them for the first pod of a StatefulSet.
    fields = {"metadata.name": f"{container['name']}-0", "metadata.labels['apps.kubernetes.io/pod-index']": "0"}
    for e in container.get("env", []):
        if "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]

    def expand(match: re.Match[str]) -> str:
        assert match[1] in env, f"$({match[1]}) is not defined for container {container['name']}"
        return env[match[1]]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", expand, value)


def test_k8s_has_the_expected_objects(k8s):
    assert {
        ("ConfigMap", "memfold-config"),
        ("Deployment", "memfold-worker"),
        ("StatefulSet", "memfold-projector"),
        ("Service", "memfold-projector"),
        ("StatefulSet", "kafka"),
        ("Service", "kafka"),
    } <= set(k8s)


def test_k8s_selectors_match_their_pod_labels(k8s):
    for (kind, name), obj in k8s.items():
        if kind in ("Deployment", "StatefulSet"):
            labels = obj["spec"]["template"]["metadata"]["labels"]
            assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        if kind == "StatefulSet":
            service = k8s[("Service", obj["spec"]["serviceName"])]
            assert service["spec"]["clusterIP"] == "None", f"{name} needs a headless governing Service"
            assert service["spec"]["selector"].items() <= obj["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(("kind", "name", "subcommand"), [("Deployment", "memfold-worker", "worker"),
                                                          ("StatefulSet", "memfold-service", "serve"),
                                                          ("StatefulSet", "memfold-projector", "project")])
def test_k8s_memfold_workloads_use_the_cli_against_the_kafka_service(k8s, kind, name, subcommand):
    (container,) = _containers(k8s[(kind, name)])
    assert container["image"] == MEMFOLD_IMAGE
    command = [_resolve(part, container, k8s) for part in container["command"]]
    _check_memfold_command(command, subcommand)
    host, _, port = _kafka_target(command).partition(":")
    kafka_service = k8s[("Service", host)]
    assert int(port) in [p["port"] for p in kafka_service["spec"]["ports"]]
    # The broker advertises the address the clients are given.
    (broker,) = _containers(k8s[("StatefulSet", "kafka")])
    broker_env = {e["name"]: e["value"] for e in broker["env"]}
    assert f"PLAINTEXT://{host}:{port}" in broker_env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    config = k8s[("ConfigMap", "memfold-config")]["data"]
    assert SHARED_SETTINGS <= set(config)
    assert [s["configMapRef"]["name"] for s in container["envFrom"]] == ["memfold-config"]


def test_k8s_workers_share_the_topic_through_their_consumer_group(k8s):
    worker = k8s[("Deployment", "memfold-worker")]
    (container,) = _containers(worker)
    # No fixed --partitions: replicas split the partitions among themselves, so any count up to them is safe.
    assert 1 <= worker["spec"]["replicas"] <= int(k8s[("ConfigMap", "memfold-config")]["data"]["MEMFOLD_PARTITIONS"])
    assert "--partitions" not in container["command"]
    data_dir = container["command"][container["command"].index("--data-dir") + 1]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == data_dir)
    assert mount["name"] in [v["name"] for v in worker["spec"]["template"]["spec"]["volumes"]]


def test_k8s_projector_replicas_each_get_their_own_volume_at_the_data_dir(k8s):
    projector = k8s[("StatefulSet", "memfold-projector")]
    (container,) = _containers(projector)
    data_dir = container["command"][container["command"].index("--data-dir") + 1]
    (claim,) = projector["spec"]["volumeClaimTemplates"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert mount["mountPath"] == data_dir
    assert {e["name"]: e["value"] for e in container["env"]}["MEMFOLD_DATA_DIR"] == data_dir
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert projector["spec"]["template"]["spec"]["securityContext"]["fsGroup"] is not None


def test_k8s_service_pods_are_shard_nodes_with_stable_slices_and_more_than_one_replica(k8s):
    service = k8s[("StatefulSet", "memfold-service")]
    (container,) = _containers(service)
    command = container["command"]
    replicas = service["spec"]["replicas"]
    assert replicas >= 2  # more than one API replica: keys and rate limits are shared through the topic
    # Slice POD_INDEX of REPLICAS: pod k keeps the same partitions across restarts, and together they cover all.
    assert command[command.index("--partitions") + 1] == f"$(POD_INDEX)/{replicas}"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert replicas <= int(k8s[("ConfigMap", "memfold-config")]["data"]["MEMFOLD_PARTITIONS"])
    # Other pods reach it at its stable DNS name under the governing headless Service, on its port.
    advertised = command[command.index("--advertise") + 1]
    port = command[command.index("--port") + 1]
    assert advertised == f"http://$(POD_NAME).{service['spec']['serviceName']}:{port}"
    (claim,) = service["spec"]["volumeClaimTemplates"]
    assert next(m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"])["mountPath"] == \
        command[command.index("--data-dir") + 1]


def test_compose_runs_two_shard_service_nodes_covering_every_partition(compose):
    nodes = [compose["services"][name] for name in ("memfold-service", "memfold-service-b")]
    slices = [n["command"][n["command"].index("--partitions") + 1] for n in nodes]
    assert sorted(slices) == ["0/2", "1/2"]
    for name, node in zip(("memfold-service", "memfold-service-b"), nodes):
        command = node["command"]
        assert command[command.index("--advertise") + 1] == f"http://{name}:{command[command.index('--port') + 1]}"
    volumes = [n["volumes"][0].split(":")[0] for n in nodes]
    assert len(set(volumes)) == 2 and set(volumes) <= set(compose["volumes"])  # one DuckDB writer per file


def test_k8s_kafka_is_a_kraft_broker_of_the_local_broker_version(k8s):
    (broker,) = _containers(k8s[("StatefulSet", "kafka")])
    assert broker["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = {e["name"]: e["value"] for e in broker["env"]}
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    _check_cluster_id(env["CLUSTER_ID"])
    mount = next(m for m in broker["volumeMounts"] if m["mountPath"] == env["KAFKA_LOG_DIRS"])
    assert mount["name"] in [c["metadata"]["name"] for c in k8s[("StatefulSet", "kafka")]["spec"]["volumeClaimTemplates"]]


# --------------------------------------------------------------------------- both


def test_compose_and_k8s_agree_on_shared_settings(compose, k8s):
    config = k8s[("ConfigMap", "memfold-config")]["data"]
    worker = compose["services"]["memfold-worker"]["environment"]
    assert {k: str(worker[k]) for k in SHARED_SETTINGS} == {k: config[k] for k in SHARED_SETTINGS}


def test_the_image_installs_the_package_the_manifests_run():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for folder in ("memfold", "core", "engine", "streams", "projections", "cli"):
        assert f"COPY {folder} ./{folder}" in dockerfile
    assert "pip install --no-cache-dir ." in dockerfile
    assert re.search(r"^USER 10001$", dockerfile, re.M)
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    ignore = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*" and {"!memfold/", "!core/", "!engine/", "!streams/", "!projections/", "!cli/", "!pyproject.toml"} <= set(ignore)


# --------------------------------------------------------------------------- the CLI the manifests run


def _manifest_commands() -> list[tuple[str, list[str]]]:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = ("memfold-worker", "memfold-projector", "memfold-service", "memfold-service-b")
    commands = [(f"compose {name}", compose["services"][name]["command"]) for name in services]
    objects = {}
    for path in K8S.glob("*.yaml"):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            objects[(doc["kind"], doc["metadata"]["name"])] = doc
    for key in (("Deployment", "memfold-worker"), ("StatefulSet", "memfold-projector"), ("StatefulSet", "memfold-service")):
        (container,) = _containers(objects[key])
        commands.append((f"k8s {key[1]}", [_resolve(part, container, objects) for part in container["command"]]))
    return commands


MANIFEST_COMMANDS = _manifest_commands()


@pytest.mark.parametrize(("where", "command"), MANIFEST_COMMANDS, ids=[where for where, _ in MANIFEST_COMMANDS])
def test_the_cli_accepts_every_manifest_command(where, command):
    from memfold.cli.main import _parser

    args = _parser().parse_args(command[1:])
    assert args.command == command[1], where
    assert args.log == command[command.index("--log") + 1], where
    if "--data-dir" in command:
        assert str(args.data_dir) == command[command.index("--data-dir") + 1], where
    if args.command in ("serve", "project") and "--partitions" in command:
        from memfold.cli.main import shard_request

        fixed, group = shard_request(args, 8)
        assert fixed and group is None, where


def test_dockerfile_copies_every_package_folder():
    """pip install . in the image needs every folder pyproject maps to a package."""
    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    folders = {d.split("/")[0] for d in package_dirs.values()}
    copied = set(re.findall(r"^COPY (\S+) \./\1$", (DEPLOY / "Dockerfile").read_text(), re.M))
    assert folders <= copied, f"not copied into the image: {sorted(folders - copied)}"
    sent = set(re.findall(r"^!(\S+)/$", (DEPLOY / "Dockerfile.dockerignore").read_text(), re.M))
    assert folders <= sent, f"left out of the build context: {sorted(folders - sent)}"
