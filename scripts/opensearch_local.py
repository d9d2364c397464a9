#!/usr/bin/env python3
"""Fetch and run a real OpenSearch (or Elasticsearch) node on 127.0.0.1, without Docker.

Stand-alone (standard library only, Python >= 3.11) and importable::

    python scripts/opensearch_local.py fetch            # download + install once, print the home
    python scripts/opensearch_local.py run [--port N]   # start, print the URL, Ctrl-C stops it

    node = start_node()            # ensure_installed() + a fresh, isolated node
    with node:
        print(node.url)            # http://127.0.0.1:<free port>

Distributions come from Maven Central through Maven's own client (``mvn``): OpenSearch's
minimal ``integ-test-zip`` distribution plus the k-NN plugin zip (installed with
``bin/opensearch-plugin install --batch``). The version lives in ``scripts/<engine>.version``.
Everything is cached outside the work tree in ``~/.cache/itlr/<engine>/<version>/``
(``ITLR_ENGINES_CACHE`` overrides ``~/.cache/itlr``, ``ITLR_MAVEN_REPO_LOCAL`` Maven's local
repository, ``ITLR_JAVA_HOME`` the JDK, which is otherwise found automatically).

Every node gets its own temporary directory (config copy, data, logs), binds to 127.0.0.1 only,
runs as a single-node cluster with security disabled (loopback only), and is stopped with its
whole process group. Both engines refuse to run as root: as root the node is started inside an
unprivileged user namespace (``unshare --user``), where it sees itself as an ordinary user.

The same code serves Elasticsearch (``engine="elasticsearch"``, or
``scripts/elasticsearch_local.py``); its integ-test-zip has no lang-painless module.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ENGINES",
    "EngineSpec",
    "LocalNode",
    "NodeStartError",
    "cache_dir",
    "ensure_installed",
    "find_java_home",
    "main",
    "read_version",
    "start_node",
]

SCRIPTS_DIR = Path(__file__).resolve().parent
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
INSTALLED_MARKER = ".itlr-installed"
DEFAULT_START_TIMEOUT = 180.0


class NodeStartError(RuntimeError):
    """The engine could not be installed or did not become healthy."""


@dataclass(frozen=True)
class EngineSpec:
    """What differs between the engines; everything else is shared."""

    name: str
    distribution: str  # Maven coordinates; "{version}" is substituted
    plugins: tuple[str, ...]  # Maven coordinates of plugin zips to install
    java_home_vars: tuple[str, ...]  # variables the launcher reads to find the JDK
    conf_var: str
    tmpdir_var: str
    # (first engine major, minimum Java major), newest first
    java_floor: tuple[tuple[int, int], ...]
    # settings that are only acceptable because the node listens on 127.0.0.1
    loopback_settings: Mapping[str, str] = field(default_factory=dict)

    def min_java(self, version: str) -> int:
        major = int(version.split(".", 1)[0])
        for first_major, java in self.java_floor:
            if major >= first_major:
                return java
        return self.java_floor[-1][1]

    def extra_settings(self, home: Path) -> dict[str, str]:
        settings = dict(self.loopback_settings)
        # OpenSearch: the security plugin is not in the integ-test-zip; disable it if present.
        if self.name == "opensearch" and (home / "plugins" / "opensearch-security").is_dir():
            settings["plugins.security.disabled"] = "true"
        return settings


ENGINES: dict[str, EngineSpec] = {
    "opensearch": EngineSpec(
        name="opensearch",
        distribution="org.opensearch.distribution.integ-test-zip:opensearch:{version}:zip",
        plugins=("org.opensearch.plugin:opensearch-knn:{version}.0:zip",),
        java_home_vars=("OPENSEARCH_JAVA_HOME", "JAVA_HOME"),
        conf_var="OPENSEARCH_PATH_CONF",
        tmpdir_var="OPENSEARCH_TMPDIR",
        java_floor=((3, 21), (1, 11)),
    ),
    "elasticsearch": EngineSpec(
        name="elasticsearch",
        distribution="org.elasticsearch.distribution.integ-test-zip:elasticsearch:{version}:zip",
        plugins=(),
        java_home_vars=("ES_JAVA_HOME",),
        conf_var="ES_PATH_CONF",
        tmpdir_var="ES_TMPDIR",
        java_floor=((9, 21), (8, 17), (7, 11)),
        loopback_settings={"xpack.security.enabled": "false"},
    ),
}


def _spec(engine: str) -> EngineSpec:
    try:
        return ENGINES[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; expected one of {sorted(ENGINES)}") from None


def _log(message: str) -> None:
    print(f"[{Path(__file__).stem}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- versions, paths


def read_version(engine: str = "opensearch") -> str:
    """The pinned version: the one line of ``scripts/<engine>.version``."""
    _spec(engine)
    path = SCRIPTS_DIR / f"{engine}.version"
    version = path.read_text(encoding="utf-8").strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"{path}: expected a version like 3.6.0, got {version!r}")
    return version


def cache_dir() -> Path:
    """Root of the download cache: ``$ITLR_ENGINES_CACHE`` or ``~/.cache/itlr``."""
    explicit = os.environ.get("ITLR_ENGINES_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "itlr"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- Java


def _java_major(java_home: Path) -> int | None:
    """Major version of the JDK at ``java_home`` (from its ``release`` file, else ``java -version``)."""
    text = ""
    release = java_home / "release"
    if release.is_file():
        match = re.search(r'^JAVA_VERSION="([^"]+)"', release.read_text(errors="replace"), re.M)
        text = match.group(1) if match else ""
    if not text and (java_home / "bin" / "java").is_file():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [str(java_home / "bin" / "java"), "-version"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            match = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
            text = match.group(1) if match else ""
    match = re.match(r"(\d+)(?:\.(\d+))?", text)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" -> 8


def _java_candidates() -> list[Path]:
    found: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        found.append(Path(os.environ["JAVA_HOME"]))
    java = shutil.which("java")
    if java:
        found.append(Path(java).resolve().parent.parent)
    for pattern_root, pattern in (
        ("/usr/lib/jvm", "*"),
        ("/usr/java", "*"),
        ("/opt/java", "*"),
        ("/opt", "*jdk*"),
        (str(Path.home() / ".sdkman/candidates/java"), "*"),
    ):
        root = Path(pattern_root)
        if root.is_dir():
            found.extend(sorted(root.glob(pattern)))
    unique: dict[Path, Path] = {}
    for path in found:
        with contextlib.suppress(OSError):
            real = path.resolve()
            if (real / "bin" / "java").is_file() and real not in unique:
                unique[real] = path
    return list(unique)


def find_java_home(min_major: int) -> Path:
    """A JDK of at least ``min_major``: ``$ITLR_JAVA_HOME`` if set, else ``$JAVA_HOME`` if new
    enough, else the newest JDK found (``java`` on PATH, /usr/lib/jvm, /usr/java, /opt, sdkman)."""
    explicit = os.environ.get("ITLR_JAVA_HOME")
    if explicit:
        home = Path(explicit).expanduser()
        major = _java_major(home)
        if major is None or major < min_major:
            raise NodeStartError(
                f"ITLR_JAVA_HOME={explicit} is Java {major}; this engine needs Java >= {min_major}"
            )
        return home
    versions = [(home, _java_major(home)) for home in _java_candidates()]
    usable = [(home, major) for home, major in versions if major is not None and major >= min_major]
    if not usable:
        seen = ", ".join(f"{home} (Java {major})" for home, major in versions) or "none"
        raise NodeStartError(
            f"no JDK >= {min_major} found (seen: {seen}); install one (e.g. "
            f"`apt-get install openjdk-{min_major}-jdk-headless`) or set ITLR_JAVA_HOME"
        )
    java_home_env = os.environ.get("JAVA_HOME")
    if java_home_env:
        preferred = Path(java_home_env).resolve()
        for home, _ in usable:
            if home == preferred:
                return home
    return max(usable, key=lambda item: item[1])[0]


# --------------------------------------------------------------------------- fetch + install


def _mvn_copy(coordinates: str, dest: Path) -> Path:
    """Download one artifact with Maven's own client and copy it to ``dest``."""
    mvn = shutil.which("mvn")
    if not mvn:
        raise NodeStartError(
            "Maven (`mvn`) is needed to fetch the distribution: apt-get install maven"
        )
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        mvn,
        "-B",
        "-q",
        "--no-transfer-progress",
        f"{MAVEN_DEPENDENCY_PLUGIN}:copy",
        f"-Dartifact={coordinates}",
        f"-DoutputDirectory={dest}",
    ]
    repo_local = os.environ.get("ITLR_MAVEN_REPO_LOCAL")
    if repo_local:
        cmd.append(f"-Dmaven.repo.local={Path(repo_local).expanduser()}")
    _log(f"mvn: fetching {coordinates}")
    # cwd=dest: a directory without pom.xml, so Maven runs without a project.
    result = subprocess.run(cmd, cwd=dest, capture_output=True, text=True)
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise NodeStartError(
            f"mvn could not fetch {coordinates} (exit {result.returncode}):\n{output}"
        )
    _group, artifact, version, ext = coordinates.split(":")
    path = dest / f"{artifact}-{version}.{ext}"
    if not path.is_file():
        raise NodeStartError(f"mvn reported success but {path} is missing")
    return path


def _unzip(archive: Path, dest: Path) -> None:
    """Extract keeping Unix permissions and symlinks (zipfile alone drops both)."""
    dest = dest.resolve()
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = (dest / info.filename).resolve()
            if target != dest and dest not in target.parents:
                raise NodeStartError(f"{archive}: entry {info.filename!r} escapes the target")
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(zf.read(info).decode(), target)
                continue
            zf.extract(info, dest)
            if mode & 0o7777 and not info.is_dir():
                os.chmod(target, mode & 0o7777)


def _java_env(spec: EngineSpec, java_home: Path) -> dict[str, str]:
    env = os.environ.copy()
    for var in spec.java_home_vars:
        env[var] = str(java_home)
    return env


def _installed_version(home: Path) -> str:
    marker = home / INSTALLED_MARKER
    if marker.is_file():
        with contextlib.suppress(ValueError, KeyError):
            return json.loads(marker.read_text())["version"]
    match = re.search(r"-(\d+\.\d+\.\d+)$", home.name)
    if not match:
        raise NodeStartError(f"cannot tell the version of {home}")
    return match.group(1)


def ensure_installed(version: str | None = None, *, engine: str = "opensearch") -> Path:
    """Download (via ``mvn``) and unpack the distribution, install its plugins; return its home.

    Idempotent and safe to call concurrently: a finished install is marked by
    ``<home>/.itlr-installed`` and reused without touching the network.
    """
    spec = _spec(engine)
    version = version or read_version(engine)
    base = cache_dir() / engine / version
    home = base / f"{engine}-{version}"
    if (home / INSTALLED_MARKER).is_file():
        return home
    with _file_lock(base / ".lock"):
        if (home / INSTALLED_MARKER).is_file():
            return home
        java_home = find_java_home(spec.min_java(version))  # fail before a large download
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=base) as tmp_name:
            tmp = Path(tmp_name)
            distribution = _mvn_copy(spec.distribution.format(version=version), tmp / "downloads")
            plugins = [
                _mvn_copy(coords.format(version=version), tmp / "downloads")
                for coords in spec.plugins
            ]
            _log(f"unpacking {distribution.name}")
            _unzip(distribution, tmp / "stage")
            staged = tmp / "stage" / home.name
            if not (staged / "bin" / engine).is_file():
                raise NodeStartError(f"{distribution.name} has no {home.name}/bin/{engine}")
            for plugin in plugins:
                _log(f"installing plugin {plugin.name}")
                result = subprocess.run(
                    [
                        str(staged / "bin" / f"{engine}-plugin"),
                        "install",
                        "--batch",
                        plugin.as_uri(),
                    ],
                    env=_java_env(spec, java_home),
                    capture_output=True,
                    text=True,
                )
                if result.returncode != 0:
                    raise NodeStartError(
                        f"installing {plugin.name} failed (exit {result.returncode}):\n"
                        + (result.stdout + result.stderr)[-3000:]
                    )
            if home.exists():  # a partial or hand-made install: replace it
                shutil.rmtree(home)
            staged.rename(home)
        marker = {
            "engine": engine,
            "version": version,
            "distribution": spec.distribution.format(version=version),
            "plugins": [coords.format(version=version) for coords in spec.plugins],
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(time.monotonic() - started, 1),
        }
        (home / INSTALLED_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _log(f"installed {engine} {version} in {marker['seconds']}s at {home}")
    return home


# --------------------------------------------------------------------------- run


def _free_port(exclude: tuple[int, ...] = ()) -> int:
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in exclude:
            return port
    raise NodeStartError("no free port on 127.0.0.1")


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@functools.cache
def _unprivileged_prefix() -> tuple[str, ...]:
    """Command prefix that makes the node not run as root (both engines refuse root)."""
    if os.geteuid() != 0:
        return ()
    unshare = shutil.which("unshare")
    if unshare:
        # Mapped to a non-root uid first: Elasticsearch 9 attaches an agent to itself, which needs
        # consistent uids; the unmapped form is enough for OpenSearch.
        for args in (("--user", "--map-user=1000", "--map-group=1000"), ("--user",)):
            probe = subprocess.run([unshare, *args, "true"], capture_output=True)
            if probe.returncode == 0:
                return (unshare, *args)
    raise NodeStartError(
        "OpenSearch/Elasticsearch refuse to run as root, and `unshare --user` is not available "
        "here to start them in an unprivileged user namespace: run as an ordinary user"
    )


def _parent_death_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM the node if the process that started it dies (best effort)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# (pattern, whether the path names a directory) for paths the shipped jvm.options gives relative
# to the install (OpenSearch's launcher runs from its home), i.e. shared by every node.
_RELATIVE_JVM_PATHS = (
    (re.compile(r"(-Xlog:\S*?:file=)([^:\s]+)"), False),
    (re.compile(r"(-XX:ErrorFile=)(\S+)"), False),
    (re.compile(r"(-XX:HeapDumpPath=)(\S+)"), True),
)


def _isolate_jvm_options(jvm_options: Path, logs: Path) -> None:
    """Point GC logs, JVM error files and heap dumps at this node's own log directory."""
    text = jvm_options.read_text()
    for pattern, is_directory in _RELATIVE_JVM_PATHS:

        def absolute(match: re.Match[str], is_directory: bool = is_directory) -> str:
            path = match.group(2)
            if os.path.isabs(path):
                return match.group(0)
            return match.group(1) + str(logs if is_directory else logs / Path(path).name)

        text = pattern.sub(absolute, text)
    jvm_options.write_text(text)


@dataclass
class LocalNode:
    """A running node; ``stop()`` (or leaving the ``with`` block) ends it and removes its files."""

    engine: str
    version: str
    home: Path
    url: str
    port: int
    transport_port: int
    run_dir: Path
    process: subprocess.Popen[bytes]
    cluster_name: str
    keep_run_dir: bool = False
    _console: object = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        """Console output of the node (the same lines as its main log)."""
        return self.run_dir / "console.log"

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def health(self, timeout: float = 5.0) -> dict | None:
        """``GET /_cluster/health`` (waiting up to 1 s for yellow), or None if unreachable."""
        request = f"{self.url}/_cluster/health?wait_for_status=yellow&timeout=1s"
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:  # 408 when the wait timed out, 503 early on
            with contextlib.suppress(ValueError, OSError):
                return json.loads(err.read())
            return None
        except (OSError, ValueError):
            return None

    def wait_until_ready(self, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Wait for yellow/green; raise ``NodeStartError`` with the log tail otherwise."""

        def failure(problem: str) -> NodeStartError:
            return NodeStartError(
                f"{self.engine} {self.version} on {self.url}: {problem} (files kept in "
                f"{self.run_dir}); last lines of {self.log_path}:\n{self.log_tail()}"
            )

        deadline = time.monotonic() + timeout
        last: dict | None = None
        while True:
            code = self.process.poll()
            if code is not None:
                raise failure(f"exited with code {code} while starting")
            health = self.health()
            if health and health.get("cluster_name") not in (None, self.cluster_name):
                raise failure(f"another cluster ({health.get('cluster_name')}) answers there")
            last = health or last
            if last and last.get("status") in ("yellow", "green"):
                return
            if time.monotonic() > deadline:
                raise failure(f"not yellow/green after {timeout:.0f}s (last health: {last})")
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        """Terminate the node's whole process group, wait for it, remove its directory."""
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        if self._console is not None:
            with contextlib.suppress(OSError):
                self._console.close()  # type: ignore[attr-defined]
            self._console = None
        if not self.keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> LocalNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_node(
    home: Path | None = None,
    port: int | None = None,
    heap: str = "512m",
    *,
    engine: str = "opensearch",
    transport_port: int | None = None,
    settings: Mapping[str, object] | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    keep_run_dir: bool = False,
) -> LocalNode:
    """Start a fresh single-node cluster on 127.0.0.1 and wait until it is yellow or green.

    ``home`` defaults to ``ensure_installed(engine=engine)``; ``port`` and ``transport_port``
    default to free ports. ``settings`` adds or overrides node settings. The node's config,
    data and logs live in a new temporary directory, removed by ``stop()`` (kept when the
    start fails, and always with ``keep_run_dir``). Raises ``NodeStartError`` with the tail of
    the node's log if it does not come up within ``timeout`` seconds.
    """
    node = _launch_node(
        home,
        port,
        heap,
        engine=engine,
        transport_port=transport_port,
        settings={"discovery.type": "single-node", **(settings or {})},
        keep_run_dir=keep_run_dir,
    )
    try:
        node.wait_until_ready(timeout)
    except BaseException:
        node.keep_run_dir = True  # the error message points at the kept logs
        node.stop()
        raise
    return node


def _launch_node(
    home: Path | None,
    port: int | None,
    heap: str,
    *,
    engine: str,
    transport_port: int | None,
    settings: Mapping[str, object],
    keep_run_dir: bool,
    cluster_name: str | None = None,
    node_name: str | None = None,
) -> LocalNode:
    """Start one node process on 127.0.0.1 without waiting for it (see start_node)."""
    spec = _spec(engine)
    home = Path(home) if home is not None else ensure_installed(engine=engine)
    launcher = home / "bin" / engine
    if not launcher.is_file():
        raise NodeStartError(f"{home} is not an {engine} home (no bin/{engine})")
    if not re.fullmatch(r"\d+[kKmMgG]?", heap):
        raise ValueError(f"heap must look like 512m or 1g, got {heap!r}")
    version = _installed_version(home)
    java_home = find_java_home(spec.min_java(version))
    if str(settings.get("network.host", "127.0.0.1")) != "127.0.0.1":
        raise ValueError("local nodes run with security disabled: they bind to 127.0.0.1 only")
    command = [*_unprivileged_prefix(), str(launcher)]
    if port and _port_in_use(port):
        raise NodeStartError(f"port {port} on 127.0.0.1 is already in use")
    http_port = port or _free_port()
    transport_port = transport_port or _free_port(exclude=(http_port,))

    run_dir = Path(tempfile.mkdtemp(prefix=f"itlr-{engine}-{http_port}-"))
    conf, data, logs, tmp = (run_dir / name for name in ("config", "data", "logs", "tmp"))
    shutil.copytree(home / "config", conf)
    for directory in (data, logs, tmp):
        directory.mkdir()
    node_settings: dict[str, object] = {
        # unique, so that the health check cannot mistake another node for this one
        "cluster.name": cluster_name or f"itlr-{run_dir.name.removeprefix('itlr-')}",
        "node.name": node_name or f"itlr-{engine}-{http_port}",
        "network.host": "127.0.0.1",
        "http.port": http_port,
        "transport.port": transport_port,
        "path.data": str(data),
        "path.logs": str(logs),
        # tests must not go read-only on a nearly full disk
        "cluster.routing.allocation.disk.threshold_enabled": "false",
        **spec.extra_settings(home),
        **settings,
    }
    (conf / f"{engine}.yml").write_text(
        "# written by opensearch_local.py for this node only\n"
        + "".join(f"{key}: {_yaml_value(value)}\n" for key, value in node_settings.items())
    )
    (conf / "jvm.options.d").mkdir(exist_ok=True)
    (conf / "jvm.options.d" / "itlr-heap.options").write_text(f"-Xms{heap}\n-Xmx{heap}\n")
    _isolate_jvm_options(conf / "jvm.options", logs)

    env = _java_env(spec, java_home)
    env[spec.conf_var] = str(conf)
    env[spec.tmpdir_var] = str(tmp)
    console = (run_dir / "console.log").open("wb")
    in_main_thread = threading.current_thread() is threading.main_thread()
    try:
        process = subprocess.Popen(
            command,
            cwd=run_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # the death signal follows the starting *thread*: only safe from the main thread
            preexec_fn=_parent_death_signal if in_main_thread else None,
        )
    except BaseException:
        console.close()
        raise
    node = LocalNode(
        engine=engine,
        version=version,
        home=home,
        url=f"http://127.0.0.1:{http_port}",
        port=http_port,
        transport_port=transport_port,
        run_dir=run_dir,
        process=process,
        cluster_name=str(node_settings["cluster.name"]),
        keep_run_dir=keep_run_dir,
        _console=console,
    )
    atexit.register(node.stop)
    return node


def _yaml_value(value: object) -> str:
    """A setting as YAML: lists (discovery.seed_hosts) as flow sequences, the rest as strings."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json.dumps(str(v)) for v in value) + "]"
    return json.dumps(str(value))


@dataclass
class LocalCluster:
    """Several nodes of one cluster on 127.0.0.1; ``stop()`` ends them all."""

    nodes: list[LocalNode]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def health(self) -> dict | None:
        for node in self.nodes:
            if node.running() and (health := node.health()) is not None:
                return health
        return None

    def kill(self, index: int) -> None:
        """SIGKILL one node's process group, as a crash would (its files stay until stop())."""
        node = self.nodes[index]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(30)

    def wait_for(self, status: str, nodes: int, timeout: float = DEFAULT_START_TIMEOUT) -> dict:
        """Wait until the cluster reports `status` (or better) with `nodes` nodes, and every
        running node answers on its own HTTP port: a node counts in the cluster's health once
        it has joined, which is before it opens its HTTP port, so a request sent to it at once
        could be refused."""
        rank = {"red": 0, "yellow": 1, "green": 2}
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while time.monotonic() < deadline:
            last = self.health() or last
            if (
                last
                and rank.get(str(last.get("status")), -1) >= rank[status]
                and last.get("number_of_nodes") == nodes
                and all(n.health() is not None for n in self.nodes if n.running())
            ):
                return last
            time.sleep(0.5)
        tails = "\n".join(f"--- {n.url}\n{n.log_tail(20)}" for n in self.nodes)
        raise NodeStartError(
            f"cluster not {status} with {nodes} nodes after {timeout:.0f}s "
            f"(last health: {last}):\n{tails}"
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(
    nodes: int = 3,
    heap: str = "512m",
    *,
    home: Path | None = None,
    engine: str = "opensearch",
    timeout: float = DEFAULT_START_TIMEOUT,
) -> LocalCluster:
    """Start a cluster of `nodes` nodes on 127.0.0.1 (one process and one data path each) and
    wait until it is green with all of them. Every node is master-eligible and a data node."""
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, got {nodes}")
    http_ports: list[int] = []
    transport_ports: list[int] = []
    for _ in range(nodes):
        taken = (*http_ports, *transport_ports)
        http_ports.append(_free_port(exclude=taken))
        transport_ports.append(_free_port(exclude=(*taken, http_ports[-1])))
    cluster_name = f"itlr-cluster-{http_ports[0]}"
    names = [f"itlr-{engine}-node{i}" for i in range(nodes)]
    manager_key = (
        "cluster.initial_cluster_manager_nodes"
        if engine == "opensearch"
        else "cluster.initial_master_nodes"
    )
    settings = {
        "discovery.seed_hosts": [f"127.0.0.1:{port}" for port in transport_ports],
        manager_key: names,
    }
    started: list[LocalNode] = []
    cluster = LocalCluster(started)
    try:
        for i in range(nodes):
            started.append(
                _launch_node(
                    home,
                    http_ports[i],
                    heap,
                    engine=engine,
                    transport_port=transport_ports[i],
                    settings=settings,
                    keep_run_dir=False,
                    cluster_name=cluster_name,
                    node_name=names[i],
                )
            )
        cluster.wait_for("green", nodes, timeout)
    except BaseException:
        for node in started:
            node.keep_run_dir = True
        cluster.stop()
        raise
    return cluster


# --------------------------------------------------------------------------- CLI


def _interrupt_on_signals() -> None:
    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # explicit, because a shell starts background jobs with SIGINT ignored
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, terminate)


def _run_cluster(nodes: int, heap: str, home: Path, engine: str, timeout: float) -> int:
    started = time.monotonic()
    cluster = start_cluster(nodes, heap, home=home, engine=engine, timeout=timeout)
    _interrupt_on_signals()
    with cluster:
        _log(f"{engine} cluster of {nodes} nodes up in {time.monotonic() - started:.1f}s")
        print(",".join(cluster.urls), flush=True)
        try:
            while all(node.running() for node in cluster.nodes):
                time.sleep(1)
        except KeyboardInterrupt:
            _log("stopping")
            return 0
        _log("a node exited; stopping the cluster")
        return 1


def main(argv: list[str] | None = None, *, engine: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Fetch and run a local OpenSearch/Elasticsearch node on 127.0.0.1 (no Docker)."
    )
    if engine is None:
        parser.add_argument("--engine", choices=sorted(ENGINES), default="opensearch")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="download and install only; print the home directory")
    run = sub.add_parser("run", help="start a node, print its URL, run until Ctrl-C")
    for command in (fetch, run):
        command.add_argument("--version", help="engine version (default: scripts/<engine>.version)")
    run.add_argument("--port", type=int, help="HTTP port (default: a free one)")
    run.add_argument("--heap", default="512m", help="JVM heap, e.g. 512m or 1g (default 512m)")
    run.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT)
    run.add_argument(
        "--nodes", type=int, default=1, help="nodes in the cluster (default 1: single-node)"
    )
    args = parser.parse_args(argv)
    engine = engine or args.engine

    try:
        started = time.monotonic()
        home = ensure_installed(args.version, engine=engine)
        if args.command == "fetch":
            _log(f"ready in {time.monotonic() - started:.1f}s")
            print(home)
            return 0
        started = time.monotonic()
        if args.nodes > 1:
            return _run_cluster(args.nodes, args.heap, home, engine, args.timeout)
        node = start_node(home, port=args.port, heap=args.heap, engine=engine, timeout=args.timeout)
    except NodeStartError as err:
        _log(f"error: {err}")
        return 1

    _interrupt_on_signals()
    with node:
        _log(
            f"{engine} {node.version} up in {time.monotonic() - started:.1f}s "
            f"(pid {node.pid}, files in {node.run_dir}); Ctrl-C stops it"
        )
        print(node.url, flush=True)
        try:
            while node.running():
                time.sleep(1)
        except KeyboardInterrupt:
            _log("stopping")
            return 0
        _log(f"node exited with code {node.process.returncode}:\n{node.log_tail()}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
