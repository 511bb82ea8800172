"""A Spark standalone cluster on this machine, from the PySpark distribution, and a job on it.

    python -m examples.spark_cluster pipeline    # pack, start, submit spark_pipeline.py, stop
    python -m examples.spark_cluster up          # a master and two workers until Ctrl-C
    python -m examples.spark_cluster pack        # only the packed environment (prints its path)

The way a job that uses ``leveret.spark`` runs on a cluster (``docs/spark.md``, "Running on a
cluster"):

1. **The executors' Python environment is packed once** (``pack_environment``): a virtualenv
   with the connector's third-party dependencies (pyarrow, pandas, numpy, at the versions
   installed here), archived by ``venv-pack``. ``spark-submit --archives env.tar.gz#environment``
   unpacks it in every executor's working directory and
   ``spark.pyspark.python=./environment/bin/python`` runs the Python workers in it. PySpark
   itself comes from the cluster's ``SPARK_HOME`` (``python/lib/pyspark.zip``), so it is not
   packed.
2. **Leveret travels as a wheel** (``build_wheel``; ``--py-files``, renamed ``.zip``: PySpark
   adds only ``.zip`` / ``.egg`` / ``.jar`` files to the workers' path): pure Python, it is
   imported from the zip, so a new version of the job's code needs no new environment.
3. **The cluster** (``StandaloneCluster``): ``spark-class`` runs the standalone Master and two
   Workers (one core, 1 GiB each) from the ``SPARK_HOME`` of the installed ``pyspark``, on
   127.0.0.1 with free ports; ``spark-submit --master spark://127.0.0.1:PORT`` runs the driver
   here (client mode) and the executors on the workers. Spark plans a Python data source in
   a Python process on the driver started with the same ``./environment/bin/python``, so
   ``spark-submit`` runs in a directory where ``environment`` is the driver's own
   environment (``StandaloneCluster.driver_directory``).

The brokers must be reachable from every executor (here: the same machine).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
PACKED = ("pyarrow", "pandas", "numpy")  # the executors' third-party dependencies
_MASTER = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = "Successfully registered with master"
START_TIMEOUT = 90.0


def spark_home() -> Path:
    """The ``SPARK_HOME`` of the installed ``pyspark`` (it ships ``bin/spark-class``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _requirements() -> list[str]:
    return [f"{name}=={importlib.metadata.version(name)}" for name in PACKED]


def pack_environment(cache: Path) -> Path:
    """The packed environment for the executors (built once per set of versions)."""
    key = hashlib.sha256(" ".join([sys.version, *_requirements()]).encode()).hexdigest()[:12]
    archive = cache / f"leveret-spark-env-{key}.tar.gz"
    if archive.exists():
        return archive
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        env = Path(tmp) / "env"
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)  # noqa: S603
        subprocess.run(  # noqa: S603 - our own interpreter and pinned names
            [str(env / "bin" / "python"), "-m", "pip", "install", "-q", *_requirements()],
            check=True,
        )
        partial = Path(tmp) / archive.name
        subprocess.run(  # noqa: S603
            [
                sys.executable,
                "-m",
                "venv_pack",
                "--prefix",
                str(env),
                "--output",
                str(partial),
                "--compress-level",
                "1",
                "--quiet",
            ],
            check=True,
        )
        partial.rename(archive)
    return archive


def build_wheel(out: Path) -> Path:
    """Leveret's wheel (pure Python) for ``--py-files``, named ``.zip``: PySpark puts only
    ``.zip``, ``.egg`` and ``.jar`` files of ``--py-files`` on the workers' Python path (a
    wheel is a zip file, importable as it is)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("leveret-*.whl"), *out.glob("leveret-*.zip")]:
        old.unlink()
    subprocess.run(  # noqa: S603
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        # Pure Python: a zip on --py-files cannot carry extensions for the workers' Python.
        env={**os.environ, "LEVERET_PURE": "1"},
    )
    (wheel,) = out.glob("leveret-*.whl")
    return wheel.rename(wheel.with_suffix(".zip"))


class StandaloneCluster:
    """A standalone Master and ``workers`` Workers, as child processes (``with`` stops them)."""

    def __init__(self, work: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.master_url = ""
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[Path] = []

    def _env(self) -> dict[str, str]:
        home = spark_home()
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOG_DIR": str(self.work / "logs"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "384m",
        }

    def _spawn(self, name: str, *args: str) -> Path:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(  # noqa: S603 - the distribution's own launcher
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,  # stopped as a group: spark-class execs java
            )
        self._procs.append(proc)
        self._logs.append(log)
        return log

    def _wait_for(self, log: Path, pattern: re.Pattern[str] | str) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if isinstance(pattern, str):
                if pattern in text:
                    return pattern
            else:
                found = pattern.search(text)
                if found:
                    return found.group(1)
            if any(p.poll() is not None for p in self._procs):
                break
            time.sleep(0.25)
        raise RuntimeError(f"the Spark cluster did not start:\n{text[-3000:]}")

    def start(self) -> Self:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            master_log = self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--webui-port",
                "0",
            )
            self.master_url = self._wait_for(master_log, _MASTER)
            logs = [
                self._spawn(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.work / f"worker-{i}"),
                    self.master_url,
                )
                for i in range(self.workers)
            ]
            for log in logs:
                self._wait_for(log, _REGISTERED)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self._procs.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def submit_command(
        self, script: Path, *args: str, environment: Path, wheel: Path, conf: dict[str, str]
    ) -> list[str]:
        """The ``spark-submit`` command line of a Python job on this cluster."""
        settings = {
            "spark.pyspark.python": "./environment/bin/python",
            "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": "768m",
            "spark.cores.max": str(self.workers * self.cores),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            **conf,
        }
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            self.master_url,
            "--archives",
            f"{environment}#environment",
            "--py-files",
            str(wheel),
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, str(script), *args]

    def submit(
        self,
        script: Path,
        *args: str,
        environment: Path,
        wheel: Path,
        conf: dict[str, str] | None = None,
        timeout: float = 900.0,
    ) -> subprocess.CompletedProcess[str]:
        command = self.submit_command(
            script, *args, environment=environment, wheel=wheel, conf=conf or {}
        )
        return subprocess.run(  # noqa: S603
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self._env(), "PYSPARK_PYTHON": "./environment/bin/python"},
            cwd=str(self.driver_directory()),
            check=False,
        )

    def driver_directory(self) -> Path:
        """Where ``spark-submit`` runs: Spark plans a Python data source by starting
        ``spark.pyspark.python`` on the driver too, so in client mode ``./environment`` must
        exist there as well; here it is the driver's own environment (same packages)."""
        directory = self.work / "driver"
        directory.mkdir(parents=True, exist_ok=True)
        link = directory / "environment"
        if not link.exists():
            link.symlink_to(Path(sys.prefix))
        return directory


@contextlib.contextmanager
def ready_cluster(work: Path, cache: Path) -> Iterator[tuple[StandaloneCluster, Path, Path]]:
    """A started cluster, the packed environment and Leveret's wheel."""
    environment = pack_environment(cache)
    wheel = build_wheel(work / "dist")
    with StandaloneCluster(work / "cluster") as cluster:
        yield cluster, environment, wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("pipeline", "up", "pack"))
    parser.add_argument("--cache", type=Path, default=ROOT / "build" / "spark-env")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="pipeline: its arguments")
    args = parser.parse_args()
    if args.command == "pack":
        print(pack_environment(args.cache))
        return 0
    work = Path(tempfile.mkdtemp(prefix="leveret-spark-cluster-"))
    try:
        with ready_cluster(work, args.cache) as (cluster, environment, wheel):
            print(f"Spark master at {cluster.master_url} (2 workers; logs in {cluster.work})")
            if args.command == "up":
                command = cluster.submit_command(
                    Path("my_job.py"), environment=environment, wheel=wheel, conf={}
                )
                print("submit a job with:\n  " + " ".join(command))
                with contextlib.suppress(KeyboardInterrupt):
                    signal.pause()
                return 0
            result = cluster.submit(
                ROOT / "examples" / "spark_pipeline.py",
                *args.rest,
                environment=environment,
                wheel=wheel,
            )
            sys.stdout.write(result.stdout)
            if result.returncode:
                sys.stderr.write(result.stderr[-5000:])
            return result.returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
