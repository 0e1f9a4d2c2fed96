"""warp (MinIO's S3 benchmark): the JSON of ``warp … --json`` or ``warp analyze --json`` read as a run — PUT and
GET as a bandwidth cell (write, read), STAT and DELETE as a metadata cell (file-stat, file-remove)."""

from __future__ import annotations

import json
from typing import Any

from ..core.records import NS
from .base import parse_guarded, IMPORTED, PeerCell, PeerError, PeerRun, percentile_words, record

TOOL = "warp"
COUNTING = ("warp's throughput: an operation type's bytes / its measured duration (warp leaves out the ramp at "
            "both ends: measure_duration_millis), average_bps and average_ops over all its concurrent requests; "
            "storeval's MiB/s and ops/s of an imported phase are those figures; its request-duration percentiles "
            "(ms) are named in the phase's note (storeval keeps no histogram of them)")
BANDWIDTH = {"PUT": "write", "GET": "read"}
METADATA = {"STAT": "file-stat", "DELETE": "file-remove"}


def _json_in(text: str) -> Any:
    """warp prints progress lines around its JSON: the first whole object in the text."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in it")
    doc, _ = json.JSONDecoder().raw_decode(text[start:])
    return doc


def detect(doc: Any) -> bool:
    ops = doc.get("operations") if isinstance(doc, dict) else None
    return isinstance(ops, list) and all(isinstance(o, dict) and "type" in o and "throughput" in o for o in ops)


def parse(doc: dict[str, Any], name: str) -> PeerRun:
    bw_steps, bw_recs, md_steps, md_recs, notes = [], [], [], [], []
    t, size, conc, hosts, date = 0, None, 1, [], None
    for op in doc["operations"]:
        kind = str(op.get("type"))
        phase = BANDWIDTH.get(kind) or METADATA.get(kind)
        if phase is None or op.get("skipped"):
            notes.append(f"{kind}: storeval has no such phase" if phase is None else f"{kind}: skipped by warp")
            continue
        tp = op["throughput"]
        seconds = float(tp["measure_duration_millis"]) / 1e3
        if seconds <= 0:
            notes.append(f"{kind}: warp measured no duration")
            continue
        nbytes = round(float(tp.get("average_bps") or 0) * seconds)
        reqs = op.get("single_sized_requests") or {}
        size = size or reqs.get("obj_size") or None
        conc = max(conc, int(op.get("concurrency") or 1))
        hosts = hosts or list(op.get("host_names") or [])
        date = date or tp.get("start_time")
        lat = {q: reqs.get(f"dur_{k}_millis") for q, k in (("p50", "median"), ("p90", "90"), ("p99", "99"))}
        said = (f"imported, measured by warp — storeval did not time this ({kind}: average_bps "
                f"{tp.get('average_bps')}, average_ops {tp.get('average_ops')}, {tp.get('operations')} operations "
                f"in {tp['measure_duration_millis']} ms, concurrency {op.get('concurrency')})"
                + percentile_words("warp", "ms", lat))
        rec = record(phase, 0, nbytes if phase in BANDWIDTH.values() else 0, int(tp.get("operations") or 0),
                     seconds, t, (hosts[0] if hosts else "?"),
                     extra={"warnings": [{"code": IMPORTED, "message": said}],
                            "peer": {"type": kind, "average_bps": tp.get("average_bps"),
                                     "average_ops": tp.get("average_ops"), "duration_ms": lat}})
        t = rec.end_ns + NS
        (bw_recs if phase in BANDWIDTH.values() else md_recs).append(rec)
        (bw_steps if phase in BANDWIDTH.values() else md_steps).append((phase, 0))
    cells = []
    if bw_recs:
        cells.append(PeerCell("bandwidth", {"file_size": int(size or 0) or 1, "transfer_size": int(size or 0) or 1,
                                            "phases": [p for p in ("write", "read") if (p, 0) in bw_steps],
                                            "layout": "file-per-client", "fsync": False}, conc, bw_steps, bw_recs,
                               defaults=False))
    if md_recs:
        cells.append(PeerCell("metadata", {"file_size": int(size or 0),
                                           "phases": [p for p in ("file-stat", "file-remove") if (p, 0) in md_steps]},
                              conc, md_steps, md_recs, defaults=False))
    if not cells:
        raise PeerError(f"{name}: warp JSON with no PUT, GET, STAT or DELETE results ({'; '.join(notes) or 'none'})")
    endpoint = hosts[0] if hosts else "warp"
    return PeerRun(TOOL, None, None, endpoint, date, endpoint, endpoint.replace("http://", "s3://", 1), COUNTING,
                   cells, notes=notes + ["warp's JSON names neither its version nor its command line"])


def load(text: str, name: str) -> PeerRun:
    try:
        doc = _json_in(text)
    except ValueError as e:
        raise PeerError(f"{name}: truncated or invalid warp JSON ({e}); import the whole output of warp … --json "
                        "or warp analyze --json") from None
    if not detect(doc):
        raise PeerError(f"{name}: not warp JSON (no operations with type and throughput; write it with warp … "
                        "--json or warp analyze --json)")
    return parse_guarded(parse, doc, name, "warp")
