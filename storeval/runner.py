"""Runs a planned study: cell by cell, through an engine, into the results store.

The coordinator owns the scratch space: ``storeval-<run id>/`` under each
target's path (with an owner record that proves the run live, see clean.py),
one ``cell-NNNN/`` directory per cell. After every cell — finished, failed or
interrupted — it asks the workload to remove whatever the cell may have left
and removes the cell directory; at the end it removes the run directory. It
removes nothing it did not create: names are storeval's own, and directories
are removed only when empty.

Stop signals (see interrupts.py) are acted on only at safe points: between
cells, by the engine between two polls of its clients, and while connecting to
a target or laying out its data. A cell that was started is always cleaned up
and stored, whatever arrives meanwhile.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import __version__, interrupts
from .clean import OWNER, claim_scratch, owner_record, release_scratch, scan
from .analysis.clocks import worst_skew
from .analysis.guards import host_shares
from .drivers import Driver, driver_class, join, make_driver
from .drivers.base import TargetError, TargetUnreachable
from .engine.clients import make_job
from .engine import watchdog
from .engine.forkserver import fork_server_process, start_fork_server
from .engine.local import LocalEngine
from .environment import collect_environment
from .errors import StorevalError, one_line
from .faults import FaultRunner, check_plan
from .core.cell import Cell
from .core.network import describe_link, rank_groups, server_endpoint
from .core.system import identity, label
from .core.outcome import CellOutcome
from .spec import Study
from .traces.recorded import render as render_trace, write_new
from .store import Store, now
from .systems import Systems
from .testbed import server_class
from .workloads import make_workload, preload_of


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


@dataclass
class RunResult:
    run_id: str
    status: str  # ok | failed | interrupted
    cells: int
    failed: int
    fatal: str | None = None  # why the engine could not go on (the job must end)
    not_run: int = 0  # cells never reached (after a fatal failure or an interruption)


class Runner:
    def __init__(self, study: Study, cells: list[Cell], store: Store, *, command_line: str, ui: Any,
                 engine: Any = None, run_id: str | None = None, regenerate: bool = False, live: Any = None) -> None:
        self.study, self.cells, self.store, self.ui = study, cells, store, ui
        self.live = live if live is not None and live.active else None  # report/live.py: the live view
        self.command_line = command_line
        self.engine = engine or LocalEngine(preload_of((c.kind, c.params) for c in cells))
        self.run_id = run_id or new_run_id()
        self.scratch = f"storeval-{self.run_id}"
        self.drivers: dict[str, Driver] = {}
        self.connect_errors: dict[str, str] = {}
        self.last_cell: dict[str, int] = {}  # target -> index of the last cell that used it
        self.events: list[dict[str, Any]] = []
        self.regenerate = regenerate
        self.prepared: set[tuple[str, str]] = set()  # (target, data key) laid out in this run
        self.guard = _Guard(self)
        self.loads: dict[str, list[float]] = {}  # host -> share of its CPU other processes used, per phase
        self.skews: dict[str, int] = {}  # host -> worst residual clock skew of its MPI clients (ns)
        self.systems = Systems(study.testbed, log=ui.log, on_pending=self.guard.teardown)

    # -- targets ---------------------------------------------------------------------------------------
    def _driver(self, cell: Cell) -> Driver:
        """The coordinator's driver of the cell's target, connected once per run. Every call it makes waits at
        most the target's timeout; a target that cannot be reached fails its cells, never the run."""
        name = cell.target.name
        self.last_cell[name] = cell.index  # what a scratch directory left behind at the end is recorded with
        if name in self.connect_errors:
            raise StorevalError(self.connect_errors[name])
        if name in self.drivers:
            self.drivers[name].retry_server()  # a new cell: a server that stopped answering may be back
            return self.drivers[name]
        driver = make_driver(cell.target.url, cell.target.options)
        driver.name = name
        try:
            driver.connect()
            with interrupts.deferred():  # the scratch directory and the driver that removes it go together
                claim_scratch(driver, self.scratch, self.guard.owner())
                self.drivers[name] = driver
        except Exception as e:  # noqa: BLE001 - a target that is down fails its cells, not the run
            self.connect_errors[name] = one_line(e) if isinstance(e, TargetError) else \
                f"target {name} ({cell.target.url}): {one_line(e)}"
            raise StorevalError(self.connect_errors[name]) from e
        self.guard.target(cell)
        self._warn_stale(cell, driver)
        self._finish_earlier_cleanups(driver, cell)
        driver.retry_server()  # an earlier run's leftovers that are still out of reach do not fail this cell
        try:  # what the server says it is, for the environment record (never credentials)
            settings = (cell.target.system or {}).get("settings")
            key = f"target:{name} {label(settings)}" if settings else f"target:{name}"  # each configuration's own
            self.store.add_environment(self.run_id, key, driver.describe())
        except Exception as e:  # noqa: BLE001 - a description is a nicety, not a reason to fail
            self.events.append({"kind": "warning", "message": f"cannot describe target {name}: {one_line(e)}"})
        return driver

    def _peers(self, cell: Cell, wl: Any) -> dict[str, tuple[Cell, Driver]]:
        """The other targets the cell's workload names (``Workload.target_params``: tpc's source), each resolved on
        the cell's system and connected like a cell's own (its scratch directory claimed and released with the
        run's): parameter -> (the cell as if on that target, its driver)."""
        out: dict[str, tuple[Cell, Driver]] = {}
        for param in type(wl).target_params:
            name = getattr(wl.p, param)
            spec = self.study.targets.get(name) or self.study.others.get(name)
            if spec is None:
                raise StorevalError(f"workload {cell.workload}: {param} {name} is not a target of the study")
            other = dataclasses.replace(cell, target=self.systems.other(spec, cell, param))
            out[param] = (other, self._driver(other))
        return out

    def _finish_earlier_cleanups(self, driver: Driver, cell: Cell) -> None:
        """Remove what earlier runs of this results store left behind on this target because its server could not
        be reached when they cleaned up (files, objects, incomplete uploads): storeval's own names in their own
        cell directories, for runs that have ended, whose clients are gone. A cleanup that works is recorded
        with the earlier run (``cleaned-up``), so it is done once."""
        name = cell.target.name
        try:
            pending = self.store.left_behind(name, cell.target.url)
        except Exception:  # noqa: BLE001 - a convenience: the cells of this run matter more
            return
        for run_id, cell_id, kind, params, clients in pending:
            scratch = f"storeval-{run_id}"
            cell_dir = join(scratch, f"cell-{cell_id:04d}")
            try:
                make_workload(kind, params).cell_cleanup(driver, cell_dir, clients)
                driver.rmdir_quietly(cell_dir)
                release_scratch(driver, scratch)  # the ended run's owner record goes with its last leftovers
                self.store.add_events(run_id, [{"kind": "cleaned-up", "cell": cell_id, "message":
                                                f"removed what this cell left on {name}, during run {self.run_id}"}])
            except Exception as e:  # noqa: BLE001 - still unreachable, or no longer ours to judge: stays recorded
                self.events.append({"kind": "warning", "message": f"cannot yet remove what run {run_id} left behind "
                                                                  f"in {cell_dir}/ on {name}: {one_line(e)}"})
                continue
            message = f"removed what run {run_id} left behind in {cell_dir}/ on {name}"
            self.events.append({"kind": "cleanup", "message": message})
            self.ui.log(message)

    def _left_behind(self, cell: int | None, what: str, name: str, driver: Driver, exc: BaseException) -> None:
        """Record (and say) what storeval created but could not remove, and where, so a user can remove it."""
        why = one_line(exc)
        message = f"left behind: {what} on {name} ({driver.url}): {why}"
        self.events.append({"kind": "left-behind", "cell": cell, "message": message})
        self.ui.log(message)

    def _warn_stale(self, cell: Cell, driver: Driver) -> None:
        """One line per target about scratch directories of dead storeval runs there (storeval clean removes
        them); the user's disk, not this run, is at stake, so a failure to look is not an error."""
        try:
            dead = [d.name for d in scan(driver, exclude=self.scratch) if d.state == "dead"]
        except Exception:  # noqa: BLE001
            return
        if dead:
            shown = ", ".join(dead[:3]) + (f" and {len(dead) - 3} more" if len(dead) > 3 else "")
            message = (f"target {cell.target.name} ({cell.target.url}) holds {len(dead)} scratch "
                       f"director{'y' if len(dead) == 1 else 'ies'} of dead storeval runs ({shown}); "
                       f"remove them with: storeval clean {cell.target.url}")
            self.events.append({"kind": "warning", "message": message})
            print(f"warning: {message}", file=sys.stderr, flush=True)

    def _release_targets(self, names: list[str] | None = None) -> None:
        """Remove the run's scratch directory from every target (or those named) and close the sessions. Never
        raises: what cannot be removed (a server that is gone) is recorded as left behind, and the run's results
        are written."""
        for name, driver in list(self.drivers.items()):
            if names is not None and name not in names:
                continue
            try:
                if not release_scratch(driver, self.scratch) and driver.exists(self.scratch):
                    self.events.append({"kind": "warning",
                                        "message": f"could not remove {self.scratch} on {name}: not empty"})
            except Exception as e:  # noqa: BLE001 - a server that went away must not take the results with it
                self._left_behind(self.last_cell.get(name), f"{self.scratch}/", name, driver, e)
            try:
                driver.shutdown()
            except Exception:  # noqa: BLE001
                pass
            if names is not None:  # the next cells of that name run on another configuration of its system
                del self.drivers[name]
                self.guard.forget(name)
        for name in names or []:
            self.connect_errors.pop(name, None)
            self.prepared = {p for p in self.prepared if p[0] != name}

    def _configure(self, cell: Cell) -> Cell:
        """The cell on its configured system (core/system.py): when the previous cell ran on another
        configuration, that one's scratch is released and it is undone first."""
        previous = self.systems.active
        if previous is not None and previous.key != identity(cell.target.system):
            self._release_targets(list(previous.resolved))
        cell = self.systems.enter(cell)
        if cell.faults and (cell.target.system or {}).get("testbed"):
            # the handles of a testbed the run brought up exist only now: a plan naming one it lacks (brick4 of
            # a 2-brick volume) fails this cell in one line
            check_plan(list(cell.faults), self.systems.testbed_dir, progress_counted=self.engine.name == "local")
        return cell

    # -- one cell ----------------------------------------------------------------------------------------
    def _live_feed(self, cell: Cell, job: Any) -> Any:
        """The live view's feed of this cell (None without one): each client's group, its host once the engine
        has placed it (``_clients_seen``)."""
        if self.live is None:
            return None
        return self.live.cell(cell.index, progress_label(cell), [], list(job.members))

    def _clients_seen(self, feed: Any) -> Any:
        """The engine's word on where the cell's clients run: for the watchdog, and the live view's hosts."""
        if feed is None:
            return self.guard.clients

        def seen(clients: list[dict[str, Any]]) -> None:
            feed.hosts = [str(c.get("host") or "") for c in clients]
            self.guard.clients(clients)
        return seen

    def run_cell(self, cell: Cell) -> CellOutcome:
        """Run, clean up and store one cell (inside ``run``'s deferred region: a stop signal interrupts only
        the connection and the data layout here, and the engine's watch; the rest always completes)."""
        started = now()
        wl = make_workload(cell.kind, cell.params)
        planned = wl.steps()
        bar = self.ui.cell(progress_label(cell), lambda ph: wl.expected(ph, cell.clients))
        skips: dict[str, str] = {}
        cell_dir = join(self.scratch, f"cell-{cell.index:04d}")
        driver: Driver | None = None
        peers: dict[str, tuple[Cell, Driver]] = {}
        faults: FaultRunner | None = None
        fault_events: list[dict[str, Any]] = []
        network_events: list[dict[str, Any]] = []
        state_events: list[dict[str, Any]] = []
        feed = None
        outcome: CellOutcome | None = None
        try:
            with interrupts.interruptible():
                cell = self._configure(cell)
                driver = self._driver(cell)
                peers = self._peers(cell, wl)
                skips = wl.skipped(driver.caps)
                to_run = [st for st in planned if st[0] not in skips]
                key = wl.target_data_key()
                if to_run and key is not None:
                    fresh = (cell.target.name, key) not in self.prepared
                    wl.prepare_target(driver, regenerate=self.regenerate and fresh, log=self.ui.log,
                                      clients=cell.clients)
                    self.prepared.add((cell.target.name, key))
            if to_run:
                driver.ensure_dir(cell_dir)
                for _, peer in peers.values():
                    peer.ensure_dir(cell_dir)
                placed = self._placement(cell)
                job = make_job(url=cell.target.url, options=cell.target.options, kind=cell.kind, params=wl.p,
                               target=cell.target.name, cell_dir=cell_dir, steps=to_run, seed=cell.index,
                               keep_cache=self.study.keep_cache, probe_interval=self.study.probe_interval,
                               faulted=tuple(sorted({f.phase for f in cell.faults})),
                               peers={param: {"target": pc.target.name, "url": pc.target.url,
                                              "options": pc.target.options} for param, (pc, _) in peers.items()},
                               parts=wl.client_parts(), hold=FaultRunner.holds(cell.faults), **placed)
                network_events = self._network_event(cell)
                self.guard.cell(cell, cell_dir)
                if cell.faults:
                    on_system = (cell.target.system or {}).get("testbed")
                    faults = FaultRunner(cell.faults, lambda ph: wl.expected(ph, cell.clients),
                                         self.systems.testbed_dir if on_system else self.study.testbed,
                                         log=self.ui.log, deadline=getattr(wl.p, "deadline", None),
                                         on_pending=self.guard.undos, redundancy=driver.redundancy)
                with interrupts.interruptible():  # a heal made anew may wait minutes for the system's word
                    state_events = self.systems.before_cell(driver, join(self.scratch, f"heal-fill-{cell.index:04d}"))
                feed = self._live_feed(cell, job)
                outcome = self.engine.run_cell(
                    job, cell.clients, cell.phase_timeout, self.guard.progress(bar.update),
                    on_clients=self._clients_seen(feed), watcher=faults, feed=feed)
            else:
                outcome = CellOutcome(status="ok")
        except KeyboardInterrupt as e:  # a stop signal while connecting or laying out data (or Python's own Ctrl-C)
            label = self.guard.state.get("phase")
            step = next((st for st in planned if label in (st[0], f"{st[0]} (iteration {st[1] + 1})")), None)
            outcome = CellOutcome(status="interrupted", error=str(e) or interrupts.reason(None), failed_step=step)
        except Exception as e:  # noqa: BLE001 - one cell's failure must not stop the others
            outcome = CellOutcome(status="failed", error=one_line(e))
        finally:
            if feed is not None:
                feed.close()
            if faults is not None:  # before the clean-up: a stopped or killed server is back first
                # a cell that failed or was stopped waits for no heal
                fault_events = faults.finish(heal=outcome is not None and outcome.status == "ok")
            state_events += self.systems.after_cell()  # what the system said while the cell ran; the fill removed
            if driver is not None:
                self._clean_cell(wl, driver, cell, cell_dir)
            for peer_cell, peer in peers.values():
                self._clean_cell(wl, peer, peer_cell, cell_dir)
            self.guard.cell(None, None)
        phases = []
        for step in planned:
            phase, iteration = step
            if phase in skips:
                phases.append((phase, iteration, "skipped", skips[phase]))
            elif step in outcome.complete_steps:
                phases.append((phase, iteration, "ok", None))
            elif step == outcome.failed_step:
                phases.append((phase, iteration, outcome.status, outcome.error))
            else:
                phases.append((phase, iteration, "not-run", None))
        events = network_events + state_events + outcome.events + (
            [{"kind": "cell-failed", "message": outcome.error}] if outcome.status == "failed" and not outcome.events
            else []) + fault_events
        events += self._write_traces(cell, outcome.records, planned)
        self.store.write_cell(self.run_id, cell, status=outcome.status, error=outcome.error, started=started,
                              phases=phases, records=outcome.records, events=events, samples=outcome.samples)
        self._note_host(outcome.records)
        bar.done(outcome.status)
        return outcome

    # -- record: true ---------------------------------------------------------------------------------------
    def _write_traces(self, cell: Cell, records: list, planned: list[tuple[str, int]]) -> list[dict[str, Any]]:
        """Take the recorded operations out of the records (the store keeps only their counts) and write one
        trace per phase: ``<results>/traces/<run>/cell-NNNN-<phase>[-<iteration>].jsonl.gz``; say where."""
        steps: dict[tuple[str, int], list] = {}
        for r in records:
            taken = r.extra.pop("trace", None)
            if taken is not None:
                steps.setdefault((r.phase, r.iteration), []).append((r, taken))
        events = []
        for (phase, iteration), recs in steps.items():
            iterated = sum(1 for p, _ in planned if p == phase) > 1
            name = f"cell-{cell.index:04d}-{phase}" + (f"-{iteration + 1}" if iterated else "") + ".jsonl.gz"
            path = os.path.join(self.store.dir, "traces", self.run_id, name)
            recs.sort(key=lambda x: x[0].rank)
            header = {"run": self.run_id, "cell": cell.index, "phase": phase, "iteration": iteration,
                      "workload": cell.workload, "kind": cell.kind, "target": cell.target.name,
                      "clients": len(recs), "bound": recs[0][0].extra["recorded"]["bound"],
                      "dropped": {str(r.rank): r.extra["recorded"]["dropped"] for r, _ in recs}}
            ops = sum(len(t["rows"]) for _, t in recs)
            if not ops:  # mkdir, stat, remove … have no kind in a trace: nothing to write
                self.ui.log(f"cell {cell.index} {phase}: no data operations to record (open, close, read, write "
                            f"and vector reads are traced)")
                continue
            try:
                write_new(path, render_trace(header, ((r.rank, r.start_ns, t["rows"], t["files"]) for r, t in recs)))
            except OSError as e:
                events.append({"kind": "warning", "phase": phase,
                               "message": f"record: true: the trace of {phase} could not be written to {path}: "
                                          f"{e.strerror or e}"})
                continue
            for r, _ in recs:
                r.extra["recorded"]["path"] = path
            dropped = sum(r.extra["recorded"]["dropped"] for r, _ in recs)
            self.ui.log(f"cell {cell.index} {phase}: trace of {ops} operations written to {path}"
                        + (f" ({dropped} beyond the bound not recorded)" if dropped else ""))
        return events

    # -- where the clients sit ------------------------------------------------------------------------------
    def _placement(self, cell: Cell) -> dict[str, Any]:
        """The job's groups and network namespaces, rank by rank (core/network.py), and the link probes."""
        net = self.systems.net if cell.network else None
        links = {"links": net.probe_spec()} if net is not None else {}  # also when every client sits here
        if not cell.groups:
            return links
        ranks = rank_groups(cell.groups)
        netns = tuple(net.netns(g["host"]) if net is not None and g.get("host") else None for g in ranks)
        # each client joins its host's control groups: the host's figures count it with the servers there
        hosted = tuple(net.host_groups(g["host"]) if net is not None and g.get("host") else () for g in ranks)
        return {"groups": tuple(cell.groups), "netns": netns if any(netns) else (),
                "host_groups": hosted if any(hosted) else (), **links}

    def _network_event(self, cell: Cell) -> list[dict[str, Any]]:
        """What the network was for this cell: each host's link as set and, for each group on an emulated
        host, the round trip to the target's server as requested and as measured (the kernel's
        round trip of TCP connects over the path)."""
        net = self.systems.net if cell.network else None
        if net is None:
            return []
        from .testbed.network import measure_rtt

        hosts, links = cell.network["hosts"], cell.network["links"]
        host_links = {h: links[link] for h, link in hosts.items() if link}
        system = cell.target.system or {}
        settings = system.get("settings", {})
        server_host = (server_class(system["testbed"]).host_of(system.get("use"), settings) if system.get("testbed")
                       else settings.get("host"))
        port = driver_class(cell.target.url).default_port
        endpoint = server_endpoint(cell.target.url, cell.target.options, port)
        rtt: dict[str, Any] = {}
        for g in cell.groups:
            host = g.get("host")
            if not host or endpoint is None:
                continue
            requested = sum(host_links.get(h, {}).get("rtt", 0.0) for h in {host, server_host} if h)
            address, port = endpoint
            try:
                measured = measure_rtt(net.netns(host), address, port)
            except Exception as e:  # noqa: BLE001 - a figure of the path, never the cell's failure
                rtt[g["name"]] = {"requested_s": requested, "error": one_line(e)}
                continue
            rtt[g["name"]] = {"requested_s": requested, **measured}
        groups = {g["name"]: g.get("host") for g in cell.groups}
        shown = "; ".join(f"{h}: {describe_link(s)}" for h, s in host_links.items()) or "no shaped link"
        shown_rtt = ", ".join(f"{n} {v['median_s'] * 1e3:.2f} ms (asked {v['requested_s'] * 1e3:g})"
                              for n, v in rtt.items() if "median_s" in v)
        cc = (self.systems.environment.get("network") or {}).get("tcp_congestion_control")
        lossy = any(s.get("loss") for s in host_links.values())
        caution = (f"; TCP here is {cc}, which barely slows for random loss: the loss shows in retransmissions more "
                   "than in throughput" if lossy and cc == "bbr" else "")
        return [{"kind": "network",
                 "message": f"links {shown}" + (f"; round trip {shown_rtt}" if shown_rtt else "") + caution,
                 "detail": {"links": host_links, "hosts": hosts, "groups": groups, "server_host": server_host,
                            "rtt": rtt, "tcp_congestion_control": cc}}]

    def _clean_cell(self, wl: Any, driver: Driver, cell: Cell, cell_dir: str) -> None:
        """Remove what the cell's clients may have left (files, then the directory; on object stores also the
        incomplete uploads under it). Never raises: a server that cannot be reached is waited for once, at most
        its timeout, and what stays is recorded as left behind."""
        try:
            wl.cell_cleanup(driver, cell_dir, cell.clients)
            if not driver.rmdir_quietly(cell_dir) and driver.exists(cell_dir):
                self.events.append({"kind": "warning", "cell": cell.index,
                                    "message": f"could not remove {cell_dir} on {cell.target.name}: not empty"})
        except TargetUnreachable as e:
            self._left_behind(cell.index, f"{cell_dir}/", cell.target.name, driver, e)
        except Exception as e:  # noqa: BLE001
            self.events.append({"kind": "warning", "cell": cell.index,
                                "message": f"cleanup of {cell_dir} on {cell.target.name} failed: {one_line(e)}"})

    # -- the run ---------------------------------------------------------------------------------------------
    def _note_host(self, records: list) -> None:
        """Keep what the environment record says about the hosts during the run: foreign CPU load per phase
        and clock skew (compare reads both: a verdict may be the host's, not the storage's)."""
        steps: dict[tuple[str, int], list] = {}
        for r in records:
            steps.setdefault(r.step, []).append(r)
        for recs in steps.values():
            for host, share in host_shares(recs).items():
                self.loads.setdefault(host, []).append(share)
        for host, skew in worst_skew(records).items():
            self.skews[host] = max(self.skews.get(host, 0), skew)

    def _store_host_notes(self) -> None:
        if self.loads:
            self.store.add_environment(self.run_id, "host_load", {
                host: {"mean": round(sum(v) / len(v), 4), "phases": len(v)}
                for host, v in self.loads.items()})
        if self.skews:
            self.store.add_environment(self.run_id, "clock_skew_us", {h: v / 1e3 for h, v in self.skews.items()})

    def run(self) -> RunResult:
        """Run every cell. The whole run is a deferred region (see interrupts.py): a stop signal stops the
        running cell at the engine's next poll, or the run before its next cell — never half a cell."""
        env = collect_environment(self.study, self.command_line)
        if len(hosts := self.engine.describe_hosts()) > 1:  # MPI across hosts: every one of them
            env["hosts"] = hosts
        status, failed, fatal = "ok", 0, None
        done = 0
        begun = False
        with interrupts.deferred():
            try:
                self.store.begin_run(self.run_id, study=self.study.resolved(), study_hash=self.study.hash(),
                                     version=__version__, command_line=self.command_line, source=self.study.source,
                                     engine=self.engine.name, environment=env)
                begun = True
                self.guard.start()
                with self.ui:
                    for cell in self.cells:
                        if interrupts.requested():  # a stop signal came between cells: this is the safe point
                            interrupts.take()
                            status = "interrupted"
                            break
                        self.guard.check()  # a watchdog killed from outside is replaced before the next cell
                        outcome = self.run_cell(cell)
                        done += 1
                        if outcome.status == "failed":
                            failed += 1
                        if outcome.status == "interrupted" or outcome.stop_requested:
                            interrupts.take()  # already acted upon: the run stops here
                            status = "interrupted"
                        if outcome.fatal:
                            fatal = outcome.error
                        if fatal or status == "interrupted":
                            break
            except KeyboardInterrupt:  # storeval used without interrupts.install(): Python's own Ctrl-C
                status = "interrupted"
            finally:
                if begun:
                    self._store_not_run(self.cells[done:], "the job was aborted" if fatal else "the run was interrupted")
                    self._release_targets()
                    self.systems.close()
                    self.events += self.systems.events
                    for key, value in self.systems.environment.items():
                        self.store.add_environment(self.run_id, key, value)
                    if self.events:
                        self.store.add_events(self.run_id, self.events)
                    self._store_host_notes()
                    if status == "ok" and failed:
                        status = "failed"
                    self.store.end_run(self.run_id, status)
                try:  # what a busy or full store held is stored now (a bounded wait), else one line says where it is
                    if begun:
                        self.store.settle()
                finally:  # the watchdog stays on duty while the coordinator waits for the store
                    self.guard.done()
        return RunResult(run_id=self.run_id, status=status, cells=len(self.cells), failed=failed, fatal=fatal,
                         not_run=len(self.cells) - done)

    def _store_not_run(self, cells: list[Cell], why: str) -> None:
        """Cells the run never reached are stored as not-run, so no report pretends the study was smaller: all
        of them in one write (a stop must not wait for one transaction per planned cell). The plan shares one
        parameter dict between the cells of a combination, so each combination's steps are worked out once."""
        steps: dict[tuple[str, int], list[tuple[str, int]]] = {}
        try:
            batch = []
            for cell in cells:
                key = (cell.kind, id(cell.params))
                if key not in steps:
                    steps[key] = make_workload(cell.kind, cell.params).steps()
                batch.append((cell, steps[key]))
            self.store.write_not_run(self.run_id, batch, f"{why} before this cell")
        except Exception:  # noqa: BLE001 - the run's own outcome matters more than this bookkeeping
            pass


CHECK_EVERY = 0.5  # seconds between two looks at the watchdog during a cell


class _Guard:
    """Keeps the watchdog's state file true: which cell runs, its clients' PIDs and hosts, the phase.

    If this process is killed (SIGKILL, the OOM killer, ``mpiexec`` ending the job because a rank died)
    the watchdog reads the file, cleans up what the cell created and names the client that died first.
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.path = f"{runner.store.dir}/.storeval-{runner.run_id}.watch"
        self.state: dict[str, Any] = {"run_id": runner.run_id, "results_dir": runner.store.dir,
                                      "scratch": runner.scratch, "targets": [], "cell": None, "phase": None,
                                      "done": False}
        self.proc: Any = None
        self._owner: dict[str, Any] | None = None
        self.restarts = 0
        self._checked = 0.0
        self._testbeds: set[tuple[str, str]] = set()  # (dir, kind) noted in the store

    def _save(self) -> None:
        if self.proc is not None:
            with interrupts.deferred():  # never half a state file, never a .tmp left behind
                try:
                    watchdog.save_state(self.path, self.state)
                    os.write(self.proc.stdin.fileno(), b".")  # wake it: it follows at once, not at its next poll
                except (OSError, ValueError):  # a full pipe (it is busy) or a gone watchdog (check() sees to it)
                    pass

    def start(self) -> None:
        """Start the watchdog and wait until it follows this process (called in a deferred region)."""
        self.state["job"] = getattr(self.runner.engine, "processes", lambda: [])()
        try:
            watchdog.save_state(self.path, self.state)
        except OSError:
            return  # no watchdog; the run itself is unaffected
        self.proc = self._spawn()
        if self.proc is None:
            self._unlink()

    def _spawn(self) -> Any:
        proc = watchdog.start(self.path)
        if proc is None:
            return None
        os.set_blocking(proc.stdin.fileno(), False)  # a busy watchdog never blocks the run
        watchdog.wait_ready(proc, stop=interrupts.requested)  # a run about to stop needs no wait
        proc.stdout.close()
        try:  # the store names every process that keeps the run live (a report judges a run nobody finished)
            self.runner.store.add_process(self.runner.run_id, "watchdog", proc.pid)
        except Exception:  # noqa: BLE001 - a nicety: the run goes on
            pass
        return proc

    MAX_RESTARTS = 3  # a watchdog that dies again at once is not started for ever

    def check(self) -> None:
        """Between cells, and a few times a second during one (from the engine's progress calls): a watchdog
        that ended — killed from outside; it never leaves on its own while the run goes on — is replaced by a
        new one that follows the same state file, and the run says so. The run itself goes on: stopping it
        would lose the rest of the study for the sake of its insurance. Past ``MAX_RESTARTS`` it says that
        the run now goes on without one."""
        if self.proc is None or self.proc.poll() is None:
            return
        dead = self.proc
        with interrupts.deferred():
            try:
                dead.stdin.close()
            except OSError:
                pass
            cell = self.state.get("cell")
            where = f"during cell {cell['index']}" if cell else "between cells"
            how = f"signal {-dead.returncode}" if dead.returncode < 0 else f"exit {dead.returncode}"
            if self.restarts >= self.MAX_RESTARTS:
                self.proc = None
                message = (f"the run's watchdog (pid {dead.pid}) ended ({how}) {where}, for the "
                           f"{self.restarts + 1}th time: the run goes on without one (if this process is killed "
                           "now, `storeval clean` removes what it leaves)")
            else:
                self.restarts += 1
                self.proc = self._spawn()
                self._owner = None
                if self.proc is not None:
                    self._reclaim()
                    self._save()
                    message = (f"the run's watchdog (pid {dead.pid}) ended ({how}) {where}; a new one "
                               f"(pid {self.proc.pid}) follows the run")
                else:
                    message = (f"the run's watchdog (pid {dead.pid}) ended ({how}) {where} and no new one could be "
                               "started: the run goes on without one")
            self.runner.events.append({"kind": "warning", "message": message})
            self.runner.ui.log(f"warning: {message}")

    def _reclaim(self) -> None:
        """Rewrite the owner record in each scratch directory: the new watchdog is what proves the run live."""
        for driver in self.runner.drivers.values():
            try:
                driver.put(join(self.runner.scratch, OWNER), json.dumps(self.owner()).encode())
            except Exception:  # noqa: BLE001 - the coordinator's own PID still proves the run live
                pass

    def owner(self) -> dict[str, Any]:
        """The owner record of this run's scratch directories (see clean.py)."""
        if self._owner is None:
            self._owner = owner_record(self.runner.run_id, self.proc.pid if self.proc is not None else None)
        return self._owner

    def teardown(self, pending: list[dict[str, Any]]) -> None:
        """The testbed systems this run started and has not stopped yet, as commands that stop them: the
        watchdog runs them if this process dies. Each testbed directory is noted in the store too, before its
        systems start (systems.py tells this before ``up``), so a later ``storeval clean`` can name it should
        this process and its watchdog both die."""
        self.state["teardown"] = pending
        self._save()
        self._note_testbeds(pending)

    def _note_testbeds(self, pending: list[dict[str, Any]]) -> None:
        systems = getattr(self.runner, "systems", None)
        owned = getattr(systems, "given_dir", None) is None
        for item in pending:
            argv = [str(a) for a in item.get("argv", [])]
            if "testbed" not in argv or "--dir" not in argv or argv.index("--dir") + 1 >= len(argv):
                continue
            directory = argv[argv.index("--dir") + 1]
            kind = argv[argv.index("down") + 1] if "down" in argv and argv.index("down") + 1 < len(argv) \
                and not argv[argv.index("down") + 1].startswith("-") else None
            key = (directory, kind or "")
            if key in self._testbeds:
                continue
            self._testbeds.add(key)
            try:
                self.runner.store.add_testbed(self.runner.run_id, directory, [kind] if kind else [], owned)
            except Exception:  # noqa: BLE001 - the watchdog still knows it; the run goes on
                pass

    def forget(self, name: str) -> None:
        """A target whose scratch was released (its configured system is undone): nothing left to clean there."""
        self.state["targets"] = [t for t in self.state["targets"] if t["name"] != name]
        self._save()

    def target(self, cell: Cell) -> None:
        self.state["targets"].append({"name": cell.target.name, "url": cell.target.url,
                                      "options": cell.target.options})
        self._save()

    def cell(self, cell: Cell | None, cell_dir: str | None) -> None:
        self.state["phase"] = None
        self.state["cell"] = None if cell is None else {**cell.state(cell_dir), "clients": []}
        if cell is not None and "fork_server" not in self.state:
            # the clients are forked by it: named before the first starts, so a coordinator killed before it
            # could name them leaves none running (the watchdog stops what the fork server forked)
            start_fork_server()
            server = fork_server_process()
            if server is not None:
                self.state["fork_server"] = server
        self._save()

    def undos(self, pending: list[dict[str, Any]]) -> None:
        """The faults in force now and the command that undoes each: the watchdog runs them if this process
        dies, so that a server storeval stopped is never left stopped."""
        self.state["undo"] = pending
        self._save()

    def clients(self, clients: list[dict[str, Any]]) -> None:
        if self.state["cell"] is not None:
            self.state["cell"]["clients"] = clients
            self._save()

    def progress(self, update: Any) -> Any:
        def on_progress(label: str, done: int, total: int) -> None:
            if label != self.state["phase"]:
                self.state["phase"] = label
                self._save()
            if time.monotonic() - self._checked >= CHECK_EVERY:  # a watchdog killed during a long cell, too
                self._checked = time.monotonic()
                self.check()
            update(label, done, total)
        return on_progress

    def done(self) -> None:
        """Tell the watchdog the run is over (the state says done, then EOF) and remove the state file."""
        if self.proc is None:
            return
        self.state["done"] = True
        self._save()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)  # it leaves at once; on a busy machine it may do so after this process
        except Exception:  # noqa: BLE001
            pass
        self._unlink()

    def _unlink(self) -> None:
        for path in (self.path, f"{self.path}.tmp"):
            try:
                os.unlink(path)
            except OSError:
                pass


def progress_label(cell: Cell) -> str:
    """A cell's progress line: Cell.label with its factors as a study writes them (sizes as sizes); core's Cell
    cannot know the workloads' parameter types."""
    from .analysis.scaling import factors_text
    from .units import plural

    shown = factors_text(cell.kind, {k: v for k, v in cell.factors.items() if not k.startswith("clients")}, ", ")
    if cell.groups:
        shown = ", ".join(x for x in (shown, " + ".join(f"{g['count']} {g['name']}" for g in cell.groups)) if x)
    return f"{cell.target.name} · {cell.workload}{f' ({shown})' if shown else ''} · {plural(cell.clients, 'client')}"
