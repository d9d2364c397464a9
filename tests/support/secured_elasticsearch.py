"""pytest plugin: an Elasticsearch with security on, for the tests that ask for it.

Session fixture ``secured_elasticsearch`` -> ``SecuredCluster``: the Maven Central integ-test-zip
CI already fetches (scripts/elasticsearch_local.py; it carries the x-pack-security module, not
lang-painless) started on 127.0.0.1 with

- TLS on HTTP, from a CA and a node certificate made by the distribution's own
  ``bin/elasticsearch-certutil`` (a second, unrelated CA is made too: the wrong one to trust);
- file-realm users made by ``bin/elasticsearch-users``: ``admin`` (role ``superuser``),
  ``reader``, whose role ``read_a`` reads only the indices ``itlr-secure-a*``, and ``dls``, whose
  role ``dls_b`` reads ``itlr-secure-b*`` under document-level security (the document ``d001``
  only; the node's trial license is started for it, ``dls`` None when it cannot be);
- an API key made by ``admin`` whose role descriptor allows all on ``itlr-secure-a*`` and
  ``monitor`` on the cluster, nothing more. The integ-test-zip cannot make one: API keys live
  in the `.security` index, whose mapping needs the `pattern_capture` token filter of the
  analysis-common module, which that build lacks (``Unknown filter type [pattern_capture] for
  [email]``; the module is not on Maven Central). ``api_key`` is then None and
  ``api_key_error`` says why.

The node is launched through ``opensearch_local``'s node code (its config dir, heap, loopback
binding, unprivileged user namespace as root) from a home whose ``config/`` holds the
certificates, users and roles; the readiness check is an HTTPS request as ``admin``. If the node
cannot be started the tests are skipped with the reason (failed with
``ITLR_REQUIRE_ELASTICSEARCH=1``).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from elasticsearch_fixture import ELASTICSEARCH, _server

READ_ROLE = """read_a:
  indices:
    - names: ["itlr-secure-a*"]
      privileges: ["read", "view_index_metadata"]
dls_b:
  indices:
    - names: ["itlr-secure-b*"]
      privileges: ["read", "view_index_metadata"]
      query: '{"term": {"_id": "d001"}}'
"""
INDEX_A = "itlr-secure-a"
INDEX_B = "itlr-secure-b"
START_TIMEOUT = 240.0


@dataclass(frozen=True)
class SecuredCluster:
    url: str  # https://127.0.0.1:<port>
    ca_file: str  # the CA that signed the node's certificate
    wrong_ca_file: str  # a CA that did not
    admin: tuple[str, str]  # superuser
    reader: tuple[str, str]  # reads only itlr-secure-a*
    api_key: str | None  # encoded (id:key in base64), all on itlr-secure-a*, cluster monitor
    api_key_error: str = ""  # why there is no API key
    # Reads itlr-secure-b* under document-level security: only the document with id d001.
    # None when the node's license has no document-level security (`dls_error` says why).
    dls: tuple[str, str] | None = None
    dls_error: str = ""

    def client(self, auth: tuple[str, str] | None = None) -> httpx.Client:
        """An HTTP client that trusts the cluster's CA, as `auth` (default admin)."""
        return httpx.Client(
            base_url=self.url, auth=auth or self.admin, verify=self.ca_file, timeout=60
        )


def _tool(home: Path, conf: Path, env: dict[str, str], *args: str) -> None:
    """Run one of the distribution's CLI tools against `conf`."""
    done = subprocess.run(
        [str(home / "bin" / args[0]), *args[1:]],
        env={**env, "ES_PATH_CONF": str(conf)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} {args[1]} failed: {done.stdout[-800:]} {done.stderr[-800:]}")


def _pem_zip(home: Path, conf: Path, env: dict[str, str], out: Path, *args: str) -> None:
    _tool(home, conf, env, "elasticsearch-certutil", *args, "--pem", "--silent", "--out", str(out))
    with zipfile.ZipFile(out) as archive:
        archive.extractall(out.parent)


def _secured_home(real: Path, work: Path, local: object) -> tuple[Path, Path]:
    """A home that shares the distribution's files but has its own config/ with certificates,
    users and roles; returns (home, the other CA's certificate)."""
    home = work / real.name  # the name carries the version the node code reads
    home.mkdir()
    for entry in real.iterdir():
        if entry.name != "config":
            (home / entry.name).symlink_to(entry)
    conf = home / "config"
    shutil.copytree(real / "config", conf)
    version = local._installed_version(real)  # type: ignore[attr-defined]
    spec = local._spec("elasticsearch")  # type: ignore[attr-defined]
    java = local.find_java_home(spec.min_java(version))  # type: ignore[attr-defined]
    env = local._java_env(spec, java)  # type: ignore[attr-defined]
    certs = conf / "certs"
    certs.mkdir()
    _pem_zip(home, conf, env, certs / "ca.zip", "ca")
    _pem_zip(
        home,
        conf,
        env,
        certs / "node.zip",
        "cert",
        "--name",
        "node",
        "--ca-cert",
        str(certs / "ca" / "ca.crt"),
        "--ca-key",
        str(certs / "ca" / "ca.key"),
        "--ip",
        "127.0.0.1",
        "--dns",
        "localhost",
    )
    other = work / "other"
    other.mkdir()
    _pem_zip(home, conf, env, other / "ca.zip", "ca")
    (conf / "roles.yml").write_text(READ_ROLE)
    for user, role in (("admin", "superuser"), ("reader", "read_a"), ("dls", "dls_b")):
        _tool(
            home,
            conf,
            env,
            "elasticsearch-users",
            "useradd",
            user,
            "-p",
            f"{user}-pw-1",
            "-r",
            role,
        )
    return home, other / "ca" / "ca.crt"


def _wait_ready(node: object, url: str, ca: Path, admin: tuple[str, str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        if not node.running():  # type: ignore[attr-defined]
            raise RuntimeError(f"exited while starting: {node.log_tail()}")  # type: ignore[attr-defined]
        try:
            answer = httpx.get(
                f"{url}/_cluster/health",
                params={"wait_for_status": "yellow", "timeout": "1s"},
                auth=admin,
                verify=str(ca),
                timeout=5,
            )
            if answer.status_code == 200 and answer.json()["status"] in ("yellow", "green"):
                return
            last = f"{answer.status_code} {answer.text[:200]}"
        except httpx.HTTPError as error:
            last = f"{type(error).__name__}: {error}"
        time.sleep(1)
    raise RuntimeError(f"not ready after {START_TIMEOUT:.0f}s ({last}): {node.log_tail()}")  # type: ignore[attr-defined]


def _api_key(url: str, ca: Path, admin: tuple[str, str]) -> tuple[str | None, str]:
    """(the encoded key, "") or (None, the engine's reason it could not make one)."""
    body = {
        "name": "itlr-tests",
        "role_descriptors": {
            "itlr_a": {
                "cluster": ["monitor"],
                "indices": [{"names": ["itlr-secure-a*"], "privileges": ["all"]}],
            }
        },
    }
    answer = httpx.post(
        f"{url}/_security/api_key", json=body, auth=admin, verify=str(ca), timeout=60
    )
    if answer.status_code != 200:
        return None, f"creating an API key: {answer.status_code} {answer.text[:300]}"
    made = answer.json()
    pair = f"{made['id']}:{made['api_key']}".encode()
    return made.get("encoded") or base64.b64encode(pair).decode(), ""


def _trial_license(url: str, ca: Path, admin: tuple[str, str]) -> str:
    """Document-level security needs more than the basic license: start the node's trial.
    "" when it runs, else the engine's reason."""
    answer = httpx.post(
        f"{url}/_license/start_trial",
        params={"acknowledge": "true"},
        auth=admin,
        verify=str(ca),
        timeout=60,
    )
    started = answer.status_code == 200 and (
        answer.json().get("trial_was_started") or "already" in answer.text
    )
    return "" if started else f"starting a trial license: {answer.status_code} {answer.text[:300]}"


@pytest.fixture(scope="session")
def secured_elasticsearch() -> Iterator[SecuredCluster]:
    """An Elasticsearch with TLS, users, roles and an API key (the module docstring)."""
    local = _server.load_local_module()
    work = Path(tempfile.mkdtemp(prefix="itlr-secured-es-"))
    node = None
    try:
        try:
            real = local.ensure_installed(engine="elasticsearch")
            home, wrong_ca = _secured_home(real, work, local)
            settings = {
                "discovery.type": "single-node",
                "xpack.security.enabled": "true",
                "xpack.security.authc.api_key.enabled": "true",
                "xpack.security.http.ssl.enabled": "true",
                "xpack.security.http.ssl.key": "certs/node/node.key",
                "xpack.security.http.ssl.certificate": "certs/node/node.crt",
                "xpack.security.http.ssl.certificate_authorities": "certs/ca/ca.crt",
                "xpack.security.transport.ssl.enabled": "false",
            }
            node = local._launch_node(
                home,
                None,
                "512m",
                engine="elasticsearch",
                transport_port=None,
                settings=settings,
                keep_run_dir=False,
            )
            url = f"https://127.0.0.1:{node.port}"
            ca = home / "config" / "certs" / "ca" / "ca.crt"
            admin = ("admin", "admin-pw-1")
            _wait_ready(node, url, ca, admin)
            key, key_error = _api_key(url, ca, admin)
            dls_error = _trial_license(url, ca, admin)
        except Exception as error:
            _server.unavailable(
                ELASTICSEARCH, f"secured node failed: {type(error).__name__}: {error}"
            )
            return
        reader = ("reader", "reader-pw-1")
        dls = None if dls_error else ("dls", "dls-pw-1")
        yield SecuredCluster(
            url, str(ca), str(wrong_ca), admin, reader, key, key_error, dls, dls_error
        )
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(work, ignore_errors=True)
