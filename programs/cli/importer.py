"""``cascade import PATH``: upload an existing trace folder or timeline file to a running app.

Uses the same presigned flow as the profiler: create the trace, upload what has not arrived
yet with a progress bar, report each upload, then seal with the full file list.

Which app and token: ``--url`` (``--app``), else the stack ``cascade up`` runs (found from
any folder, see ``cascade status``), else http://127.0.0.1:8080; ``--token``, else
``$CASCADE_API_TOKEN``, else the token ``cascade up`` keeps in its data dir
(``credentials.json``).

Re-importing a folder: the trace id of every (app, PATH) pair is kept in a state file
(``.cascade-import.json`` next to the data, or under ``~/.cascade/`` when that folder is
read-only), and the command says in one line what it does with it. An earlier upload that
is not sealed yet is resumed (files the app holds with the same size and ETag are skipped)
when ``--resume`` asks for it or when no other ``--name`` is given. A sealed one is never
reused under another name or with other files: the folder becomes a new trace (a ready
trace that already holds exactly this folder is left as it is, nothing uploaded); one sealed
incomplete (an interrupted ``cascade profile``) is finished with ``--resume``. These notes go
to stderr; stdout holds the summary ("trace ID (name N): uploaded ...").

Exit status: 0 done; 1 the app refused the request or the trace failed / is incomplete;
2 the app could not be reached or refused the token. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from cascade.errors import CascadeError, ConfigError, ValidationError
from cascade.traces.files import check_name, classify_files
from programs.client import (
    IMPORT_STATE_NAME,
    RIDE_THROUGH_S,
    ApiError,
    AppUnreachableError,
    CascadeClient,
    UploadError,
    already_there,
)

TOKEN_ENV = "CASCADE_API_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8080"
START_HINT = "start it with `make run` or `cascade up`, or pass --url"


def register(subparsers: Any) -> None:
    """Add the ``import`` sub-command."""
    p = subparsers.add_parser(
        "import", help="upload an existing trace folder or timeline file to a running app",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", type=Path, help="trace folder (kernel-N.trace[g][.xz], kernelslist, "
                   "stats.csv, timeline files) or one timeline file")
    p.add_argument("--url", "--app", dest="app", default=None,
                   help="the app's URL (default: the stack `cascade up` runs, else "
                        f"{DEFAULT_URL})")
    p.add_argument("--token", default=None,
                   help=f"bearer token (default: ${TOKEN_ENV}, else the token `cascade up` "
                        "keeps in its data dir)")
    p.add_argument("--resume", action="store_true",
                   help="continue the earlier, unsealed upload of PATH (even under another "
                        "--name)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="give up on an api request after SECONDS (default 300)")
    p.add_argument("--name", default=None, help="trace name (default: the folder or file name)")
    p.add_argument("--source-gpu", default=None,
                   help="GPU the trace was captured on: spec id or driver device name "
                        "(default: the GPU its timeline files name; required otherwise)")
    p.add_argument("--force-source-gpu", action="store_true",
                   help="use --source-gpu even where the trace's files name another GPU")
    p.add_argument("--kind", choices=("instructions", "timeline", "both"), default=None,
                   help="what the trace holds (default: from the files found)")
    p.add_argument("--workload", default="", help="free-form workload description")
    p.add_argument("--trace-id", default=None, help="continue this trace instead of the remembered one")
    p.add_argument("--state-file", type=Path, default=None,
                   help=f"where the PATH -> trace id mapping is kept (default: PATH's folder/{IMPORT_STATE_NAME})")
    p.add_argument("--no-seal", action="store_true", help="upload only; do not seal the trace")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="after sealing, wait up to SECONDS for the trace to be ready")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--run", default=None, metavar="CONFIGS",
                   help="once the trace is ready, simulate it on these GPU configs (comma-"
                        "separated spec ids, e.g. SM90_H100,SM90_H200,SM80_A100), wait for the "
                        "run and print each config's predicted end-to-end time (needs --wait)")
    p.add_argument("--model", default="auto", metavar="MODEL",
                   help="kernel model of the --run (auto, scaled, analytical, roofline, accel-sim: "
                        "Accel-Sim on the trace's instruction files where the server has it; "
                        "default auto)")
    p.set_defaults(func=main)


def named_device(files: list[Path]) -> tuple[str, Path | None]:
    """The GPU name the first timeline file that records one names ('' if none does)."""
    from cascade.traces.timeline import timeline_device

    for f in files:
        if check_name(f.name).kind == "timeline":
            device, _sm = timeline_device(f)
            if device:
                return device, f
    return "", None


def source_gpu_for(files: list[Path], given: str | None, *, force: bool = False) -> str:
    """The ``source_gpu`` of a new trace: ``given``, else the GPU its timeline files name.

    A ``given`` GPU that contradicts the files' one (both known) is an error naming both,
    unless ``force``."""
    from cascade.gpus import default_registry

    device, where = named_device(files)
    if not given:
        if not device:
            raise ValidationError("a new trace needs --source-gpu (spec id or device name): "
                                  "none of its files names the GPU it was recorded on",
                                  field="--source-gpu")
        return device
    if device and not force:
        reg = default_registry()
        named, chosen = reg.resolve(device), reg.resolve(given)
        if named is not None and chosen is not None and named.id != chosen.id:
            raise ValidationError(
                f"{where} was recorded on {named.id} ({device!r}) but --source-gpu {given!r} "
                f"is {chosen.id}; drop --source-gpu to use the trace's GPU, or pass "
                "--force-source-gpu to import it as captured on " + chosen.id,
                field="--source-gpu")
    return given


def infer_kind(files: list[Path]) -> str:
    """instructions, timeline or both, from the file names."""
    kinds = {check_name(f.name).kind for f in files}
    has_kernels = "kernel" in kinds
    has_timeline = "timeline" in kinds
    if has_kernels and has_timeline:
        return "both"
    return "timeline" if has_timeline else "instructions"


def state_file_for(path: Path, override: Path | None) -> Path:
    """The state file to use: next to the data when writable, else ~/.cascade/imports.json."""
    if override is not None:
        return override
    folder = path if path.is_dir() else path.parent
    if os.access(folder, os.W_OK):
        return folder / IMPORT_STATE_NAME
    return Path.home() / ".cascade" / "imports.json"


def _load_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
    tmp.replace(path)


def default_url() -> str:
    """The URL of the stack ``cascade up`` runs (found from any folder), else the default."""
    from programs.embedded.locate import locate_data_dir
    from programs.embedded.stack import StackLayout, load_state

    data_dir, _how = locate_data_dir(None)
    state = load_state(StackLayout(data_dir))
    return state.http_url if state is not None and state.http_url else DEFAULT_URL


def resolve_token(given: str | None, url: str) -> tuple[str | None, str]:
    """(token, where it was read from): ``given``, ``$CASCADE_API_TOKEN``, else the
    credentials of the ``cascade up`` stack serving ``url`` (or of this folder's data dir)."""
    from programs.embedded.locate import locate_data_dir, stack_for_url
    from programs.embedded.stack import StackLayout, read_credentials

    if given:
        return given, "--token"
    if os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    folders: list[Path] = []
    entry = stack_for_url(url)
    if entry is not None:
        folders.append(Path(entry.data_dir))
    folders.append(locate_data_dir(None)[0])
    for folder in dict.fromkeys(folders):
        layout = StackLayout(folder)
        creds = read_credentials(layout)
        if creds is not None:
            return creds.api_token, str(layout.credentials)
    return None, ""


def _say(text: str) -> None:
    """One line on what the import does with an earlier upload (stderr: stdout keeps the
    summary, its first word the trace id, for scripts)."""
    print(text, file=sys.stderr, flush=True)


async def _earlier_trace(api: CascadeClient, args: argparse.Namespace, entry: dict[str, Any],
                         name: str, path: Path, files: list[Path]) -> dict[str, Any] | None:
    """The trace to continue, or None for a new one (saying which, in one line).

    Ready earlier trace: the same again (name agreeing, every file there) is a no-op,
    anything else a new trace. Sealed but not ready (incomplete, failed): continued with
    ``--resume`` only. Unsealed: continued with ``--resume`` or when the name agrees."""
    if args.trace_id:
        return await api.get_trace(args.trace_id)
    earlier_id = entry.get("trace_id")
    if not earlier_id:
        if args.resume:
            raise ValidationError(f"nothing to resume: no earlier upload of {path} to "
                                  f"{api.base_url} is recorded; drop --resume",
                                  field="--resume")
        return None
    try:
        earlier = await api.get_trace(earlier_id)
    except ApiError as exc:
        if exc.http_status != 404:
            raise
        if args.resume:
            raise ValidationError(f"nothing to resume: trace {earlier_id} of the earlier upload "
                                  f"of {path} is gone from {api.base_url}; drop --resume",
                                  field="--resume") from None
        return None
    old_name = str(earlier.get("name", ""))
    state = str(earlier.get("state", ""))
    agrees = not args.name or args.name == old_name
    earlier_of = f"the earlier upload of this folder, trace {earlier_id} (name {old_name})"
    if state == "ready":
        remote = {f["name"]: f for f in earlier.get("files", [])}
        sizes: dict[str, int] = dict(entry.get("part_sizes") or {})
        same = all(already_there(f, remote.get(f.name), sizes.get(f.name)) for f in files)
        if same and (agrees or args.resume):
            _say(f"trace {earlier_id} (name {old_name}) already holds this folder (ready); "
                 "nothing to upload")
            return earlier
        if args.resume:
            raise ValidationError(
                f"cannot resume trace {earlier_id} (name {old_name}): it is ready (sealed, it "
                f"takes no more uploads) and this folder's files differ from it; drop --resume "
                f"to import {path} as a new trace", field="--resume")
        _say(f"{earlier_of}, is sealed (ready); importing it as a new trace (name {name})")
        return None
    if earlier.get("sealed"):
        if args.resume:
            _say(f"resuming trace {earlier_id} (name {old_name}, sealed {state}) from the "
                 "earlier upload of this folder")
            return earlier
        _say(f"{earlier_of}, is sealed ({state}); importing it as a new trace (name {name}); "
             "--resume continues the earlier one instead")
        return None
    if args.resume or agrees:
        _say(f"resuming trace {earlier_id} (name {old_name}) from the earlier upload of this "
             "folder")
        return earlier
    _say(f"{earlier_of}, is not sealed and stays as it is; importing a new trace (name {name}); "
         "--resume continues the earlier one instead")
    return None


async def run_import(args: argparse.Namespace) -> dict[str, Any]:
    """Do the import; returns a summary (trace id, uploaded, skipped, final state)."""
    for option, default in (("resume", False), ("timeout", 300.0), ("token_source", None),
                            ("trace_id", None), ("name", None), ("token", None), ("app", None)):
        if not hasattr(args, option):
            setattr(args, option, default)
    path: Path = args.path.resolve()
    files, skipped_files = classify_files(path)
    if not getattr(args, "quiet", False):
        for skipped_name, why in skipped_files.items():
            print(f"skipped {skipped_name}: {why}")
    if not args.app:
        args.app = default_url()
    if args.token_source is None:
        args.token, args.token_source = resolve_token(args.token, args.app)
    name = args.name or path.name
    state_path = state_file_for(path, args.state_file)
    state = _load_state(state_path)
    entry_key = f"{args.app.rstrip('/')} {path}"
    entry: dict[str, Any] = dict(state.get(entry_key) or {})
    async with CascadeClient(args.app, args.token, timeout=float(args.timeout),
                             ride_through_s=RIDE_THROUGH_S) as api:
        trace = await _earlier_trace(api, args, entry, name, path, files)
        if trace is None:
            source_gpu = source_gpu_for(files, args.source_gpu,
                                        force=bool(getattr(args, "force_source_gpu", False)))
            created = await api.create_trace(
                name=name, source_gpu=source_gpu,
                kind=args.kind or infer_kind(files), workload=args.workload,
            )
            trace = await api.get_trace(created["id"])
            entry = {"trace_id": created["id"], "part_sizes": {}}
        elif str(trace["id"]) != entry.get("trace_id"):
            entry = {"trace_id": str(trace["id"]), "part_sizes": {}}
        trace_id = str(trace["id"])
        entry["trace_id"] = trace_id
        entry["name"] = str(trace.get("name", name))
        state[entry_key] = entry
        _save_state(state_path, state)
        remote = {f["name"]: f for f in trace.get("files", [])}
        part_sizes: dict[str, int] = dict(entry.get("part_sizes") or {})
        todo = [f for f in files if not already_there(f, remote.get(f.name), part_sizes.get(f.name))]
        skipped = len(files) - len(todo)
        if todo:
            answer = await api.request_uploads(trace_id, [(f.name, f.stat().st_size) for f in todo])
            by_name = {f.name: f for f in todo}
            for target in answer["uploads"]:
                if target.get("multipart"):
                    part_sizes[target["name"]] = int(target["multipart"]["part_size"])
            entry["part_sizes"] = part_sizes
            _save_state(state_path, state)
            await _upload_all(api, trace_id, answer["uploads"], by_name, quiet=args.quiet)
        final = trace
        if not args.no_seal and not (trace.get("state") == "ready" and not todo):
            final = await api.seal(trace_id, expected_files=[f.name for f in files],
                                   skipped_files=skipped_files or None)
            if args.wait > 0:
                final = await api.wait_for_state(trace_id, {"ready", "incomplete", "failed"},
                                                 timeout=args.wait)
        run = None
        if getattr(args, "run", None) and final.get("state") == "ready":
            run = await _run_on(api, trace_id, [c.strip() for c in args.run.split(",") if c.strip()],
                                timeout=max(float(args.wait), 60.0),
                                model=getattr(args, "model", "auto") or "auto")
    return {"run": run, "trace_id": trace_id, "name": final.get("name", name), "uploaded": len(todo),
            "skipped": skipped, "skipped_files": skipped_files, "state": final.get("state"),
            "kernels_prepared": final.get("kernels_prepared"),
            "kernels_total": final.get("kernels_total"), "errors": final.get("errors", []),
            "warnings": final.get("warnings", []), "state_file": str(state_path)}


async def _run_on(api: CascadeClient, trace_id: str, configs: list[str], *,
                  timeout: float, model: str = "auto") -> dict[str, Any]:
    """Start a run of ``trace_id`` on ``configs`` with kernel model ``model``, wait (bounded) for
    it to end; its results."""
    started = await api.request("POST", "/api/runs", json={"trace_id": trace_id, "configs": configs,
                                                          "model": model})
    run_id = started["id"]
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        detail = await api.request("GET", f"/api/runs/{run_id}")
        state = detail["run"]["state"]
        if state in ("completed", "partial", "failed", "cancelled"):
            break
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"run {run_id} still {state} after {timeout:g} s; follow it in the "
                               f"web UI or GET /api/runs/{run_id}")
        await asyncio.sleep(0.25)
    results = await api.request("GET", f"/api/runs/{run_id}/results") if state in ("completed", "partial") else {}
    return {"id": run_id, "state": state, "error": detail["run"].get("error"),
            "configs": [{"config": c["config"], "predicted_e2e_ms": c.get("predicted_e2e_ms")}
                        for c in results.get("configs", [])]}


async def _upload_all(api: CascadeClient, trace_id: str, targets: list[dict[str, Any]],
                      by_name: dict[str, Path], *, quiet: bool) -> None:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    total = sum(by_name[t["name"]].stat().st_size for t in targets)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), disable=quiet) as bar:
        task = bar.add_task(f"uploading {len(targets)} files", total=total)
        for target in targets:
            path = by_name[target["name"]]
            bar.update(task, description=f"{path.name}")
            await api.upload_target(trace_id, target, path,
                                    progress=lambda n: bar.advance(task, n))


def failure_line(exc: BaseException, url: str, token_source: str) -> tuple[str, int]:
    """(one-line message, exit status) for an import that could not go on."""
    if isinstance(exc, AppUnreachableError):
        return f"cascade import: {exc}; {START_HINT}", 2
    if isinstance(exc, ApiError) and exc.http_status in (401, 403):
        what = "401 unauthorized" if exc.http_status == 401 else "403 forbidden"
        if token_source:
            return (f"cascade import: the app at {url} refused the token ({what}); it was read "
                    f"from {token_source}; pass the token `cascade up` printed with --token or "
                    f"${TOKEN_ENV}"), 2
        return (f"cascade import: the app at {url} needs a token ({what}) and none was found "
                f"(no --token, no ${TOKEN_ENV}, no credentials.json of a `cascade up` data "
                "dir); pass --token"), 2
    if isinstance(exc, ApiError) and exc.http_status >= 500:
        return (f"cascade import: the app at {url} failed ({exc.http_status} {exc.code}: "
                f"{exc.message}); see its logs (`cascade status` shows where)"), 1
    if isinstance(exc, TimeoutError):
        return f"cascade import: {exc}", 1
    return f"cascade import: {exc}", 1


def main(args: argparse.Namespace) -> int:
    """Entry point of ``cascade import``."""
    args.token_source = None
    try:
        summary = asyncio.run(run_import(args))
    except (ApiError, AppUnreachableError, UploadError, TimeoutError) as exc:
        line, code = failure_line(exc, args.app or DEFAULT_URL, args.token_source or "")
        print(line, file=sys.stderr)
        return code
    except ConfigError as exc:
        print(f"cascade import: {exc}", file=sys.stderr)
        return 2
    except CascadeError as exc:
        print(f"cascade import: {exc}", file=sys.stderr)
        return 1
    print(f"trace {summary['trace_id']} (name {summary['name']}): uploaded "
          f"{summary['uploaded']}, already there {summary['skipped']}, skipped "
          f"{len(summary['skipped_files'])} other files, state {summary['state']}")
    if summary["state"] == "ready" and summary.get("kernels_total"):
        print(f"kernels: {summary['kernels_prepared']} of {summary['kernels_total']} prepared")
    for note in summary.get("warnings", []):
        print(f"warning: {note}")
    if summary["state"] in ("ready", "failed"):
        for err in summary.get("errors", [])[:20]:
            print(f"error: {err}")
    run = summary.get("run")
    if run is not None:
        figures = ", ".join(f"{c['config']} {c['predicted_e2e_ms']:.2f} ms" for c in run["configs"]
                            if c["predicted_e2e_ms"] is not None)
        print(f"run {run['id']} {run['state']}" + (f": predicted end to end {figures}" if figures else "")
              + (f" ({run['error']})" if run.get("error") else ""))
        if run["state"] != "completed":
            return 1
    elif getattr(args, "run", None):
        print(f"not run: the trace is {summary['state']}" + ("" if args.wait else " (pass --wait)"))
        return 1
    return 0 if summary["state"] not in ("failed", "incomplete") else 1
