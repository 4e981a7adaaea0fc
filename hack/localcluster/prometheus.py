"""A real Prometheus on a free loopback port, configured for tests.

* Short scrape/evaluation intervals (2 s by default).
* Job ``pods``: file-based service discovery over ``<state>/prometheus/sd/pods/*.json``, written by the
  pod runner for every serving "pod" (labels ``namespace``, ``pod``, ``node``, ``container``, pod labels).
* Job ``targets``: file-based discovery over ``<state>/prometheus/sd/targets/*.json`` for anything a test
  wants scraped over plain HTTP (see :meth:`PrometheusServer.add_targets`).
* Extra jobs (HTTPS, bearer tokens, custom paths) added at runtime with :meth:`PrometheusServer.add_job`;
  the configuration is rewritten and reloaded through ``/-/reload``.
* Optional HTTPS for Prometheus' own API (``--web.config.file``) with a certificate from the cluster's CA,
  so clients can be tested with verification on.
* ``stop``/``start``/``restart`` keep the same port and TSDB directory, for fault tests.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from localcluster.errors import ComponentFailedError
from localcluster.net import LOOPBACK, free_port, http_get, ssl_context
from localcluster.pki import CertPair
from localcluster.procs import ManagedProcess, Supervisor, wait_until

PROCESS_NAME = "prometheus"


@dataclass(frozen=True)
class ScrapeJob:
    """An extra scrape job added at runtime."""

    name: str
    targets: tuple[str, ...]
    labels: tuple[tuple[str, str], ...] = ()
    scheme: str = "http"
    metrics_path: str = "/metrics"
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    server_name: str | None = None
    bearer_token_file: Path | None = None
    honor_labels: bool = False

    def config(self, interval: str) -> dict[str, Any]:
        job: dict[str, Any] = {
            "job_name": self.name,
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "scheme": self.scheme,
            "metrics_path": self.metrics_path,
            "honor_labels": self.honor_labels,
            "static_configs": [{"targets": list(self.targets), "labels": dict(self.labels)}],
        }
        if self.scheme == "https":
            tls: dict[str, Any] = {"insecure_skip_verify": self.insecure_skip_verify}
            if self.ca_file is not None:
                tls["ca_file"] = str(self.ca_file)
            if self.server_name is not None:
                tls["server_name"] = self.server_name
            job["tls_config"] = tls
        if self.bearer_token_file is not None:
            job["authorization"] = {"type": "Bearer", "credentials_file": str(self.bearer_token_file)}
        return job


@dataclass
class PrometheusServer:
    """Configuration, process and client-side helpers of the cluster's Prometheus."""

    binary: Path
    directory: Path
    supervisor: Supervisor
    scrape_interval: str = "2s"
    tls: CertPair | None = None
    ca_file: Path | None = None
    port: int = field(default_factory=free_port)
    jobs: dict[str, ScrapeJob] = field(default_factory=dict)
    process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{LOOPBACK}:{self.port}"

    @property
    def pods_sd_dir(self) -> Path:
        return self.directory / "sd" / "pods"

    @property
    def targets_sd_dir(self) -> Path:
        return self.directory / "sd" / "targets"

    @property
    def config_file(self) -> Path:
        return self.directory / "prometheus.yml"

    def client_ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context that verifies Prometheus' certificate (None when Prometheus serves plain HTTP)."""
        if self.tls is None:
            return None
        return ssl_context(self.ca_file)

    def write_config(self) -> None:
        self.pods_sd_dir.mkdir(parents=True, exist_ok=True)
        self.targets_sd_dir.mkdir(parents=True, exist_ok=True)
        interval = self.scrape_interval
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": [
                {
                    "job_name": "pods",
                    "file_sd_configs": [
                        {"files": [str(self.pods_sd_dir / "*.json")], "refresh_interval": "5s"}
                    ],
                },
                {
                    "job_name": "targets",
                    "file_sd_configs": [
                        {"files": [str(self.targets_sd_dir / "*.json")], "refresh_interval": "5s"}
                    ],
                },
                *(job.config(interval) for job in self.jobs.values()),
            ],
        }
        tmp = self.config_file.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        tmp.replace(self.config_file)
        if self.tls is not None:
            web = {"tls_server_config": {"cert_file": str(self.tls.cert), "key_file": str(self.tls.key)}}
            self._web_config_file().write_text(yaml.safe_dump(web), encoding="utf-8")

    def _web_config_file(self) -> Path:
        return self.directory / "web.yml"

    def argv(self) -> list[str]:
        argv = [
            str(self.binary),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        if self.tls is not None:
            argv.append(f"--web.config.file={self._web_config_file()}")
        return argv

    def start(self, timeout: float = 60.0) -> None:
        """Start Prometheus (same port and data as before, if it ran already) and wait until it is ready."""
        if self.process is not None and self.process.alive():
            return
        self.write_config()
        self.process = self.supervisor.start(PROCESS_NAME, self.argv())
        wait_until(self.ready, timeout=timeout, what="Prometheus /-/ready", process=self.process)

    def stop(self) -> None:
        self.supervisor.stop(PROCESS_NAME)
        self.process = None

    def restart(self, timeout: float = 60.0) -> None:
        """Stop and start again on the same port with the same TSDB (a "Prometheus restarted" fault)."""
        self.stop()
        self.start(timeout)

    def ready(self) -> bool:
        result = http_get(f"{self.url}/-/ready", self.client_ssl_context())
        return result is not None and result[0] == 200

    def reload(self) -> None:
        """Rewrite the configuration and make the running server load it."""
        self.write_config()
        if self.process is None or not self.process.alive():
            return
        connection: http.client.HTTPConnection
        if self.tls is not None:
            connection = http.client.HTTPSConnection(
                LOOPBACK, self.port, timeout=10, context=self.client_ssl_context()
            )
        else:
            connection = http.client.HTTPConnection(LOOPBACK, self.port, timeout=10)
        try:
            connection.request("POST", "/-/reload")
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise ComponentFailedError(f"Prometheus reload failed: {response.status} {body[:500]!r}")
        finally:
            connection.close()

    def add_job(self, job: ScrapeJob) -> None:
        """Add (or replace) a scrape job and reload."""
        self.jobs[job.name] = job
        self.reload()

    def remove_job(self, name: str) -> None:
        if self.jobs.pop(name, None) is not None:
            self.reload()

    def add_targets(self, name: str, targets: Sequence[str], labels: Mapping[str, str] | None = None) -> Path:
        """Publish plain-HTTP targets in the ``targets`` job (file SD; no reload needed). Returns the file."""
        path = self.targets_sd_dir / f"{name}.json"
        write_file_sd(path, [(list(targets), dict(labels or {}))])
        return path

    def remove_targets(self, name: str) -> None:
        (self.targets_sd_dir / f"{name}.json").unlink(missing_ok=True)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query; returns the ``data.result`` list (raises on an API error)."""
        result = http_get(
            f"{self.url}/api/v1/query?query={quote(promql)}", self.client_ssl_context(), timeout=10
        )
        if result is None:
            raise ComponentFailedError(f"Prometheus at {self.url} is not reachable")
        status, body = result
        payload = json.loads(body)
        if status != 200 or payload.get("status") != "success":
            raise ComponentFailedError(f"Prometheus query {promql!r} failed: {status} {body[:500]!r}")
        data = payload["data"]["result"]
        assert isinstance(data, list)
        return data


def write_file_sd(path: Path, groups: Sequence[tuple[Sequence[str], Mapping[str, str]]]) -> None:
    """Atomically write a Prometheus file-SD JSON file with the given (targets, labels) groups."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = [{"targets": list(targets), "labels": dict(labels)} for targets, labels in groups]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1), encoding="utf-8")
    tmp.replace(path)
