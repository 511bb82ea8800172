"""Installing the client suites into a venv of their own and running them against one broker.

Owned by the conformance harness (``python -m conformance install|run``). Everything it makes
lives under the work directory (``.conformance/`` at the checkout's root, git-ignored):
``venv/`` (the suites' interpreter, never the project's ``.venv``), ``sdists/`` and ``src/``
(the source distributions from PyPI, and Debian packages fetched with ``apt-get download``,
unpacked, never installed), ``results/`` (one JSON per suite and broker,
written by ``plugins/conformance_report.py``) and ``logs/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.suites import BUILD_BACKENDS, SUITES, Suite

if TYPE_CHECKING:
    from conformance.brokers import Target

PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
DEFAULT_WORKDIR = ROOT / ".conformance"
REQUIREMENTS = PACKAGE_DIR / "requirements.txt"
PLUGINS = PACKAGE_DIR / "plugins"


@dataclass(frozen=True)
class Workdir:
    """The harness's directories."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def sdists(self) -> Path:
        return self.root / "sdists"

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def suite_dir(self, suite: Suite) -> Path:
        if suite.deb:
            name, version = suite.deb.split("==")
            return self.src / f"{name}-{version}"
        # sdists name their top folder with the project name normalised or not (aio_pika-…).
        name, version = suite.sdist.split("==")
        for candidate in (name, name.replace("-", "_"), name.lower()):
            path = self.src / f"{candidate}-{version}"
            if path.exists():
                return path
        return self.src / f"{name}-{version}"

    def result_file(self, suite: Suite, target: str) -> Path:
        return self.results / f"{suite.name}.{target}.json"


def _pip(work: Workdir, *args: str) -> None:
    env = {**os.environ, "PATH": f"{work.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(
        [str(work.python), "-m", "pip", "-q", "--disable-pip-version-check", *args],
        check=True,
        env=env,
    )


def install(work: Workdir, suites: list[Suite]) -> None:
    """Create the venv, install the pinned requirements, fetch and unpack each suite's sdist."""
    if not work.python.exists():
        print(f"creating {work.venv}", flush=True)
        venv.create(work.venv, with_pip=True)
    stamp = work.venv / "conformance-requirements.txt"
    wanted = REQUIREMENTS.read_text() + "\n".join(BUILD_BACKENDS)
    if not stamp.exists() or stamp.read_text() != wanted:
        print("installing the pinned client libraries and test tools", flush=True)
        _pip(work, "install", "-r", str(REQUIREMENTS))
        _pip(work, "install", *BUILD_BACKENDS)
        stamp.write_text(wanted)
    work.sdists.mkdir(parents=True, exist_ok=True)
    work.src.mkdir(parents=True, exist_ok=True)
    for suite in suites:
        dest = work.suite_dir(suite)
        if dest.exists():
            continue
        if suite.deb:
            _fetch_deb(work, suite.deb, dest)
            continue
        print(f"fetching the sdist of {suite.sdist}", flush=True)
        # --no-build-isolation: the build back ends are in the venv already (no extra
        # downloads per sdist); pip still prepares each sdist's metadata with them.
        _pip(
            work,
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "-d",
            str(work.sdists),
            suite.sdist,
        )
        archive = _find_sdist(work.sdists, suite)
        with tarfile.open(archive) as tar:
            tar.extractall(work.src, filter="data")
        # Named again: the folder's spelling is known only once it is unpacked.
        dest = work.suite_dir(suite)
        if not dest.exists():
            raise RuntimeError(f"{archive} did not unpack into {dest}")


def _fetch_deb(work: Workdir, spec: str, dest: Path) -> None:
    """Download the Debian package ``name==version`` and unpack it into ``dest``.

    ``apt-get download`` needs no root, only the package lists; a fresh machine has none
    until ``apt-get update``, which is run once here when the download fails and we are root.
    """
    name, version = spec.split("==")
    print(f"fetching the Debian package {name} {version}", flush=True)
    cmd = ["apt-get", "download", "-q", f"{name}={version}"]
    if subprocess.run(cmd, cwd=work.sdists, check=False).returncode != 0:
        if os.geteuid() != 0:
            raise RuntimeError(f"cannot download {name}={version}: run `apt-get update` as root")
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(cmd, cwd=work.sdists, check=True)
    # The file name spells an epoch's colon as %3a; the architecture ends it.
    archives = list(work.sdists.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
    if not archives:
        raise RuntimeError(f"apt-get download left no {name} {version} in {work.sdists}")
    subprocess.run(["dpkg-deb", "-x", str(archives[0]), str(dest)], check=True)


def _find_sdist(folder: Path, suite: Suite) -> Path:
    name, version = suite.sdist.split("==")
    wanted = {f"{name}-{version}.tar.gz".lower(), f"{name.replace('-', '_')}-{version}.tar.gz"}
    for path in folder.iterdir():
        if path.name.lower() in wanted:
            return path
    raise RuntimeError(f"no sdist for {suite.sdist} in {folder}")


@dataclass(frozen=True)
class RunResult:
    """One suite run against one broker."""

    suite: str
    target: str
    seconds: float
    exit_code: int
    timed_out: bool
    results: dict[str, dict[str, Any]]


def _has_pytest_config(folder: Path) -> bool:
    checks = (
        ("pytest.ini", ""),
        ("tox.ini", "[pytest]"),
        ("setup.cfg", "[tool:pytest]"),
        ("pyproject.toml", "[tool.pytest.ini_options]"),
    )
    for name, marker in checks:
        path = folder / name
        if path.exists() and marker in path.read_text(errors="replace"):
            return True
    return False


def _config_args(work: Workdir, folder: Path) -> list[str]:
    """Keep pytest's configuration search inside the suite.

    A suite without a pytest configuration of its own (rabbitpy, amqpstorm) would otherwise
    pick up this checkout's pyproject.toml further up (strict markers, warnings as errors).
    """
    if _has_pytest_config(folder):
        return [f"--rootdir={folder}"]
    empty = work.root / "pytest-empty.ini"
    empty.write_text("[pytest]\n")
    return ["-c", str(empty), f"--rootdir={folder}"]


def run_suite(work: Workdir, suite: Suite, target: Target) -> RunResult:
    """Run ``suite`` against ``target`` in the harness venv; per-test outcomes from the plugin."""
    cwd = work.suite_dir(suite)
    if not cwd.exists():
        raise RuntimeError(f"{cwd} is missing: run `python -m conformance install` first")
    work.results.mkdir(parents=True, exist_ok=True)
    work.logs.mkdir(parents=True, exist_ok=True)
    report = work.result_file(suite, target.name)
    report.unlink(missing_ok=True)
    partial = Path(f"{report}.partial")
    partial.unlink(missing_ok=True)
    plugin_args: list[str] = []
    for plugin in ("conformance_report", *suite.plugins):
        plugin_args += ["-p", plugin]
    cmd = [
        # In the broker's network namespace if it has one (``Target.enter``).
        *target.enter(),
        "nice",
        "-n",
        "10",
        str(work.python),
        "-m",
        "pytest",
        *suite.tests,
        *plugin_args,
        *suite.pytest_args,
        *_config_args(work, cwd),
        "-p",
        "no:cacheprovider",
        # A file that cannot be imported here (a Redis- or SQL-only test module) is one
        # failing entry; the rest of the suite still runs.
        "--continue-on-collection-errors",
        f"--timeout={suite.test_timeout}",
        "-q",
        "-rN",
    ]
    env = {
        **os.environ,
        **suite.env(target),
        "PYTHONPATH": str(PLUGINS),
        "CONFORMANCE_REPORT": str(report),
        "PATH": f"{work.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for var in ("VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(var, None)
    log_path = work.logs / f"{suite.name}.{target.name}.log"
    started = time.monotonic()
    timed_out = False
    with log_path.open("w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(suite.suite_timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                code = proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
    seconds = time.monotonic() - started
    results: dict[str, dict[str, Any]] = {}
    if report.exists():
        results = json.loads(report.read_text())
    elif partial.exists():
        # Stopped before the end (time limit): what finished; the rest count as missing.
        for line in partial.read_text().splitlines():
            entry = json.loads(line)
            results[entry.pop("nodeid")] = entry
        report.write_text(json.dumps(results, indent=1, sort_keys=True))
    if not results:
        print(f"  {suite.name}: no report; see {log_path}", file=sys.stderr)
    return RunResult(suite.name, target.name, seconds, code, timed_out, results)


def suites_named(names: list[str]) -> list[Suite]:
    """The suites named (all when ``names`` is empty), in the registry's order."""
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise SystemExit(f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}")
    return [s for n, s in SUITES.items() if not names or n in names]
