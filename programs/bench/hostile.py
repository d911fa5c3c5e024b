"""`cascade bench hostile`: hostile and malformed input against a real `cascade up`, and what came of it.

Starts the real command on free ports in a temporary data directory, then tries, through the
real HTTP API and presigned S3 uploads:

- trace files: a fuzzed kernel trace (random bytes spliced into a real one), a truncated xz,
  an xz bomb (a tiny file that decompresses to far more than the limit), a kernel trace with
  one huge line, a Chrome-trace JSON holding one huge string, gzip that is not gzip, beside
  one good kernel: each bad file must fail alone with its reason while the good one prepares;
- path tricks as upload names (``..``, absolute paths, NUL, separators, leading dots);
- wrong JSON on every route that takes a body (read from ``/openapi.json``): not JSON, the
  wrong top-level type, each property of the wrong type, unknown fields;
- an oversized body.

Expected: a clear 4xx, or a failed file with its reason; never a 5xx; no process of the stack
restarted; the api's peak memory stays under ``--rss-limit-mb``. Prints one line per case group
and the totals (``--json`` for one JSON object).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import lzma
import random
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

NAME = "hostile"
HELP = "hostile input (fuzzed traces, bombs, huge lines, path tricks, wrong JSON types) against a real stack"

#: Upload names that must be refused.
PATH_TRICKS: tuple[str, ...] = (
    "../kernel-1.traceg", "/etc/passwd", "kernel-1.traceg/../../x", "a/b.json", "a\\b.json",
    "kernel-1\x00.traceg", ".hidden.json", "..", ".", "", "kernel-1.traceg ", "x" * 300 + ".json",
    "%2e%2e%2fkernel-1.traceg", "kernel-1.traceg\n",
)
#: Values of a wrong type for each JSON schema type.
WRONG: dict[str, list[Any]] = {
    "string": [123, [], {}, None, True],
    "integer": ["7", 1.5, [], {}, None, 1e300],
    "number": ["1.0", [], {}, None],
    "boolean": ["true", 1, []],
    "array": ["x", 1, {}],
    "object": ["x", 1, []],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``cascade bench hostile``."""
    parser.add_argument("--seed", type=int, default=0, help="seed of the fuzzing (0)")
    parser.add_argument("--fuzz", type=int, default=8, help="fuzzed kernel traces (8)")
    parser.add_argument("--bomb-mb", type=int, default=2048,
                        help="decompressed size of the xz bomb, MB (2048)")
    parser.add_argument("--huge-line-mb", type=int, default=64,
                        help="length of the huge line in a kernel trace, MB (64)")
    parser.add_argument("--rss-limit-mb", type=float, default=1024.0,
                        help="peak memory the api, ingest and prepare may each reach, MB (1024)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds the trace may take to settle (300)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


# --------------------------------------------------------------------------- inputs


def _good_kernel(folder: Path) -> bytes:
    from cascade.traces.generate import TraceSpec, write_trace_folder

    written = write_trace_folder(folder, [TraceSpec(grid=(4, 1, 1), block=(64, 1, 1), iterations=2)])
    return written[0][0].read_bytes()


def _fuzzed(good: bytes, rng: random.Random) -> bytes:
    lines = good.split(b"\n")
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(lines))
        lines[at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    return b"\n".join(lines)


def _xz_bomb(mb: int) -> bytes:
    out = io.BytesIO()
    with lzma.open(out, "wb", preset=9) as f:
        f.write(b"-kernel name = k\n")
        chunk = b"\0" * (1 << 20)
        for _ in range(mb):
            f.write(chunk)
    return out.getvalue()


def _huge_line(good: bytes, mb: int) -> bytes:
    head, _, tail = good.partition(b"\n")
    return head + b"\n" + b"7" * (mb << 20) + b"\n" + tail


def _huge_string_json(mb: int) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb") as f:
        f.write(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "')
        chunk = b"A" * (1 << 20)
        for _ in range(mb):
            f.write(chunk)
        f.write(b'", "ts": 1, "dur": 2, "pid": 0, "tid": 7}]}')
    return out.getvalue()


def hostile_files(folder: Path, rng: random.Random, args: argparse.Namespace) -> dict[str, bytes]:
    """File name -> bytes: one good kernel and every hostile one (kernel ids from 2)."""
    good = _good_kernel(folder / "good")
    files: dict[str, bytes] = {"kernel-1.traceg": good}
    kid = 2
    for _ in range(args.fuzz):
        files[f"kernel-{kid}.traceg"] = _fuzzed(good, rng)
        kid += 1
    xz = lzma.compress(good)
    files[f"kernel-{kid}.traceg.xz"] = xz[: len(xz) // 2]  # truncated
    files[f"kernel-{kid + 1}.traceg.xz"] = _xz_bomb(args.bomb_mb)
    files[f"kernel-{kid + 2}.traceg"] = _huge_line(good, args.huge_line_mb)
    files[f"kernel-{kid + 3}.traceg.xz"] = b"not xz at all"
    return files


# --------------------------------------------------------------------------- HTTP


def _request(stack: Any, method: str, path: str, data: bytes | None, *,
             content_type: str = "application/json", timeout: float = 60.0) -> tuple[int, bytes]:
    req = urllib.request.Request(stack.base + path, data=data, method=method, headers={
        "Authorization": f"Bearer {stack.token}", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc).encode()


def _put(url: str, body: bytes, timeout: float = 120.0) -> int:
    req = urllib.request.Request(url, data=body, method="PUT",
                                 headers={"Content-Length": str(len(body))})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _upload(stack: Any, trace_id: str, name: str, body: bytes) -> str:
    """Upload one file through a presigned URL and report it; '' or why it could not."""
    status, raw = _request(stack, "POST", f"/api/traces/{trace_id}/uploads",
                           json.dumps({"files": [{"name": name, "size": len(body)}]}).encode())
    if status != 200:
        return f"uploads {status}: {raw[:200]!r}"
    target = json.loads(raw)["uploads"][0]
    if target.get("multipart"):
        parts = target["multipart"]["parts"]
        etags = []
        for part in parts:
            start = (part["part_number"] - 1) * target["multipart"]["part_size"]
            req = urllib.request.Request(part["url"], data=body[start:start + part["size"]],
                                         method="PUT")
            with urllib.request.urlopen(req, timeout=120) as resp:
                etags.append({"part_number": part["part_number"],
                              "etag": resp.headers["ETag"].strip('"')})
        status, raw = _request(stack, "POST", f"/api/traces/{trace_id}/uploads/complete",
                               json.dumps({"name": name, "upload_id": target["multipart"]["upload_id"],
                                           "parts": etags}).encode())
        if status >= 300:
            return f"complete {status}: {raw[:200]!r}"
    else:
        put = _put(target["url"], body)
        if put >= 300:
            return f"PUT {put}"
    status, raw = _request(stack, "POST", f"/api/traces/{trace_id}/uploaded",
                           json.dumps({"name": name}).encode())
    return "" if status == 202 else f"uploaded {status}: {raw[:200]!r}"


# --------------------------------------------------------------------------- cases


def _trace_case(stack: Any, folder: Path, rng: random.Random, args: argparse.Namespace) -> dict[str, Any]:
    files = hostile_files(folder, rng, args)
    status, raw = _request(stack, "POST", "/api/traces", json.dumps(
        {"name": "hostile", "source_gpu": "SM80_A100"}).encode())
    if status != 201:
        raise SystemExit(f"POST /api/traces answered {status}: {raw[:300]!r}")
    tid = json.loads(raw)["id"]
    upload_errors = {name: err for name, body in files.items() if (err := _upload(stack, tid, name, body))}
    body_huge = _huge_string_json(max(1, args.huge_line_mb))
    upload_errors.update({n: e for n, e in [("timeline.pt.trace.json.gz",
                                               _upload(stack, tid, "timeline.pt.trace.json.gz", body_huge))]
                          if e})
    _request(stack, "POST", f"/api/traces/{tid}/seal", json.dumps(
        {"expected_kernels": len(files)}).encode())
    deadline = time.monotonic() + args.timeout
    detail: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status, raw = _request(stack, "GET", f"/api/traces/{tid}", None)
        detail = json.loads(raw) if status == 200 else {}
        queued = (detail.get("progress") or {}).get("queued", 1)
        if detail.get("state") in ("ready", "failed", "incomplete") and not queued:
            break
        time.sleep(0.5)
    units = {u["file"]: u for u in detail.get("kernels", [])}
    file_records = {f["name"]: f for f in detail.get("files", [])}
    rows = []
    for name in [*files, "timeline.pt.trace.json.gz"]:
        unit = units.get(name, {})
        rec = file_records.get(name, {})
        state = unit.get("state") or rec.get("state") or ("not uploaded" if name in upload_errors else "?")
        reason = unit.get("error") or rec.get("error") or upload_errors.get(name, "")
        good = name == "kernel-1.traceg"
        ok = (state == "prepared") if good else (state in ("failed", "rejected") and bool(reason)
                                                   or name in upload_errors)
        rows.append({"file": name, "state": state, "reason": str(reason)[:200], "ok": ok})
    return {"trace_id": tid, "trace_state": detail.get("state"), "files": rows}


def _path_case(stack: Any) -> list[dict[str, Any]]:
    status, raw = _request(stack, "POST", "/api/traces", json.dumps(
        {"name": "paths", "source_gpu": "SM80_A100"}).encode())
    tid = json.loads(raw)["id"]
    out = []
    for name in PATH_TRICKS:
        for path, body in ((f"/api/traces/{tid}/uploads", {"files": [{"name": name, "size": 10}]}),
                           (f"/api/traces/{tid}/uploaded", {"name": name})):
            status, raw = _request(stack, "POST", path, json.dumps(body).encode())
            out.append({"route": f"POST {path.replace(tid, '{id}')}", "input": repr(name)[:60],
                        "status": status, "ok": 400 <= status < 500, "answer": raw[:160].decode(errors="replace")})
    return out


def _schema_of(ref: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in ref:
        node: Any = spec
        for part in ref["$ref"].lstrip("#/").split("/"):
            node = node[part]
        ref = node
    return ref


def _json_case(stack: Any) -> list[dict[str, Any]]:
    status, raw = _request(stack, "GET", "/openapi.json", None)
    spec = json.loads(raw)
    out = []
    for path, ops in sorted(spec["paths"].items()):
        for method, op in sorted(ops.items()):
            content = ((op.get("requestBody") or {}).get("content") or {}).get("application/json")
            if not content:
                continue
            concrete = path
            for seg in [s for s in path.split("/") if s.startswith("{")]:
                concrete = concrete.replace(seg, "x-hostile")
            schema = _schema_of(content.get("schema", {}), spec)
            bodies: list[tuple[str, bytes]] = [("not JSON", b"{"), ("array", b"[]"),
                                               ("string", b'"x"'), ("number", b"7"),
                                               ("unknown field", b'{"no_such_field": 1}')]
            for prop, sub in (schema.get("properties") or {}).items():
                sub = _schema_of(sub, spec)
                for wrong in WRONG.get(str(sub.get("type")), []):
                    bodies.append((f"{prop}={json.dumps(wrong)[:20]}", json.dumps({prop: wrong}).encode()))
            for label, body in bodies:
                status, answer = _request(stack, method.upper(), concrete, body)
                out.append({"route": f"{method.upper()} {path}", "input": label, "status": status,
                            "ok": 400 <= status < 500, "answer": answer[:160].decode(errors="replace")})
    big = b'{"name": "' + b"x" * (64 << 20) + b'"}'
    status, answer = _request(stack, "POST", "/api/traces", big)
    out.append({"route": "POST /api/traces", "input": "64 MB body", "status": status,
                "ok": status == 413 or (400 <= status < 500), "answer": answer[:160].decode(errors="replace")})
    return out


def _peak_mb(pid: int | None) -> float | None:
    if not pid:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run(args: argparse.Namespace) -> int:
    from programs.bench.faults import _Stack

    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="cascade-bench-hostile-"))
    stack = _Stack(workdir, 30.0)
    try:
        stack.start(180)
        before = {n: (c.pid, c.restarts) for n, c in stack.components().items()}
        t0 = time.monotonic()
        traces = _trace_case(stack, workdir / "inputs", rng, args)
        paths = _path_case(stack)
        bodies = _json_case(stack)
        after = {n: (c.pid, c.restarts) for n, c in stack.components().items()}
        peaks = {n: _peak_mb(c.pid) for n, c in stack.components().items()
                 if n in ("api", "ingest", "prepare")}
        ready = stack.ready()
    finally:
        stack.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    restarted = sorted(n for n in before if after.get(n) != before[n])
    statuses = Counter(r["status"] for r in [*paths, *bodies])
    summary = {
        "seconds": round(time.monotonic() - t0, 1),
        "trace_files": {"tried": len(traces["files"]), "as_expected": sum(r["ok"] for r in traces["files"]),
                        "good_kernel_prepared": traces["files"][0]["state"] == "prepared",
                        "trace_state": traces["trace_state"], "rows": traces["files"]},
        "path_tricks": {"tried": len(paths), "refused_4xx": sum(r["ok"] for r in paths)},
        "json_bodies": {"tried": len(bodies), "refused_4xx": sum(r["ok"] for r in bodies),
                        "routes": len({r["route"] for r in bodies})},
        "status_counts": {str(k): v for k, v in sorted(statuses.items())},
        "http_5xx": sum(v for k, v in statuses.items() if k >= 500 or k == 0),
        "restarted": restarted, "ready_after": ready,
        "peak_rss_mb": {k: round(v, 1) if v else None for k, v in peaks.items()},
        "rss_limit_mb": args.rss_limit_mb,
        "unexpected": [r for r in [*paths, *bodies] if not r["ok"]][:20]
                      + [r for r in traces["files"] if not r["ok"]],
    }
    ok = (summary["http_5xx"] == 0 and not restarted and ready and not summary["unexpected"]
          and all((v or 0) <= args.rss_limit_mb for v in peaks.values()))
    summary["ok"] = ok
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0 if ok else 1
    print(f"cascade bench hostile ({summary['seconds']} s)")
    tf = summary["trace_files"]
    print(f"  trace files      {tf['as_expected']}/{tf['tried']} as expected (good kernel prepared: "
          f"{tf['good_kernel_prepared']}; trace {tf['trace_state']})")
    for row in tf["rows"]:
        print(f"    {row['file'][:40]:40s} {row['state']:12s} {row['reason'][:90]}")
    print(f"  path tricks      {summary['path_tricks']['refused_4xx']}/{summary['path_tricks']['tried']} refused with 4xx")
    jb = summary["json_bodies"]
    print(f"  wrong JSON       {jb['refused_4xx']}/{jb['tried']} refused with 4xx over {jb['routes']} routes")
    print(f"  statuses         {summary['status_counts']}; 5xx or no answer: {summary['http_5xx']}")
    print(f"  processes        restarted: {restarted or 'none'}; /readyz 200 after: {ready}")
    print(f"  peak RSS (MB)    {summary['peak_rss_mb']} (limit {args.rss_limit_mb:g})")
    for r in summary["unexpected"]:
        print(f"  UNEXPECTED {r}")
    print("  result:", "ok" if ok else "FAILED")
    return 0 if ok else 1
