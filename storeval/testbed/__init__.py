"""`storeval testbed`: real MinIO, XRootD and HDFS servers on 127.0.0.1, for tests, demos and trials.

``Testbed(directory).up(["minio", "xrootd", "hdfs"])`` installs what is missing, starts each server with
its data under ``directory/<kind>``, waits until it answers, saves the processes in ``directory/state.json``
and writes ``storeval-testbed.yaml`` with a ready target per server. ``down()`` stops exactly those
processes and removes their data. Tests use the same class through pytest fixtures.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import yaml

from .base import Server, ServerState, TestbedError, save_json

# kind -> "module:Class"; imported on use so a missing optional piece only affects its own server
SERVERS: dict[str, str] = {
    "minio": "storeval.testbed.minio:MinioServer",
    "minio-ec": "storeval.testbed.minio:MinioECServer",
    "xrootd": "storeval.testbed.xrootd:XrootdServer",
    "hdfs": "storeval.testbed.hdfs:HdfsServer",
}
DEFAULT_DIR = "storeval-testbed"
TARGETS_FILE = "storeval-testbed.yaml"


def server_class(kind: str) -> type[Server]:
    if kind not in SERVERS:
        raise TestbedError(f"unknown testbed server '{kind}' (known: {', '.join(SERVERS)})")
    module, name = SERVERS[kind].split(":")
    return getattr(importlib.import_module(module), name)


class Testbed:
    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | Path = DEFAULT_DIR, targets_file: str | Path | None = None) -> None:
        self.dir = Path(directory).absolute()
        self.targets_file = Path(targets_file) if targets_file else self.dir.parent / TARGETS_FILE
        self.state_file = self.dir / "state.json"

    # -- state ------------------------------------------------------------------------------------
    def load(self) -> dict[str, Server]:
        if not self.state_file.exists():
            return {}
        data = json.loads(self.state_file.read_text())
        out = {}
        for kind, st in data.get("servers", {}).items():
            state = ServerState.from_json(st)
            out[kind] = server_class(kind)(Path(state.root), state.info.get("options", {}), state)
        return out

    def _save(self, servers: dict[str, Server]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        save_json(self.state_file, {"servers": {k: s.state.to_json() for k, s in servers.items()}})

    def targets(self, servers: dict[str, Server] | None = None) -> dict[str, dict[str, Any]]:
        servers = self.load() if servers is None else servers
        out: dict[str, dict[str, Any]] = {}
        for server in servers.values():
            out.update(server.targets())
        return out

    def _write_targets(self, servers: dict[str, Server]) -> None:
        header = ("# Written by `storeval testbed up`: one target per running testbed server.\n"
                  "# `storeval run storeval-testbed.yaml --workload bandwidth` measures them;"
                  " `storeval testbed down` stops them.\n")
        body = yaml.safe_dump({"targets": self.targets(servers)}, sort_keys=False, default_flow_style=False)
        self.targets_file.write_text(header + body)

    # -- commands ---------------------------------------------------------------------------------------
    def up(self, kinds: list[str], options: dict[str, dict[str, Any]] | None = None, *, log=print) -> dict[str, Server]:
        """Start the servers of ``kinds`` that are not running yet; return every running server."""
        options = options or {}
        servers = self.load()
        for kind in kinds:
            server_class(kind)  # unknown kinds fail before anything starts
        try:
            for kind in kinds:
                if kind in servers and servers[kind].alive():
                    log(f"{kind}: already running")
                    continue
                if kind in servers:  # a dead one from an earlier session: clean it away first
                    servers.pop(kind).stop()
                server = server_class(kind)(self.dir / kind, options.get(kind, {}))
                server.state.info["options"] = options.get(kind, {})
                log(f"{kind}: installing (first use can take minutes)…")
                server.install()
                log(f"{kind}: starting")
                servers[kind] = server
                server.start()
                self._save(servers)
                server.wait_ready()
                self._save(servers)
                log(f"{kind}: ready — {server.status()}")
        finally:
            self._save(servers)
            self._write_targets({k: s for k, s in servers.items() if s.state.procs})
        return servers

    def down(self, kinds: list[str] | None = None, *, log=print) -> None:
        servers = self.load()
        for kind in list(servers):
            if kinds and kind not in kinds:
                continue
            servers.pop(kind).stop()
            log(f"{kind}: stopped, data removed")
        if servers:
            self._save(servers)
            self._write_targets(servers)
        else:
            self.state_file.unlink(missing_ok=True)
            self.targets_file.unlink(missing_ok=True)
            try:
                self.dir.rmdir()
            except OSError:
                pass

    def status(self) -> list[str]:
        return [s.status() for s in self.load().values()]


__all__ = ["Testbed", "Server", "TestbedError", "SERVERS", "server_class"]
