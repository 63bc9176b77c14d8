"""The hang watchdog: runs one replica's command and ends it when the job stops making
progress, after writing every rank's Python stack into the job folder.

``-cfg watchdog=15m`` (any backend; :mod:`distspec.specs.faults`) compiles each
replica's command into::

    python -m distspec.runtime.watchdog --every 900 --role R --replica I --replicas N -- COMMAND...

so the watchdog runs where the job runs, beside its ranks, never in the submitting
CLI. It relays the command's stdout and stderr unchanged and watches for progress:

- **heartbeats**: once any rank has called ``distspec.runtime.heartbeat()`` or
  ``log()`` in this attempt (:mod:`distspec.runtime.progress`), progress is the newest
  heartbeat of any rank, in ``$DISTSPEC_JOB_DIR/hang/beats/``;
- **output**, for scripts that do not use the runtime: progress is the newest output
  of any replica (each watchdog marks its own in ``hang/output/<role>-<i>``).

When there has been none for ``--every`` seconds (counted from the start at first),
the first watchdog to see it writes ``hang/hung``; every watchdog then dumps the
Python stack of each process below it (``py-spy dump``, which reads a process
without its help; where py-spy cannot, a process that registered :mod:`faulthandler`
on SIGUSR2, as the runtime does, writes its own stack to its log), writes them into
``hang/stacks/``, waits (up to 20 s) for the other replicas to have done the same,
so that no rank is stopped before its stack was taken, then stops its command
(SIGTERM, SIGKILL after 10 s) and exits with :data:`~distspec.hangs.HUNG_EXIT`
(124). :mod:`distspec.hangs` reads the records back.

A job folder that is a URL, or none, is replaced by a temporary folder: then each
replica is watched on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from distspec.hangs import HANG_DIR, HUNG_EXIT
from distspec.runtime.progress import BEATS_DIR, STACK_SIGNAL, WATCHDOG_ENV
from distspec.torchrun_output import WORKER_EXEC_ENV

__all__ = ["Watchdog", "main"]

#: How long a watchdog waits for the other replicas' stacks before it stops its command.
GATHER_SECONDS = 20.0
#: Between SIGTERM and SIGKILL when the command is stopped.
GRACE_SECONDS = 10.0
#: How long one py-spy dump may take.
DUMP_SECONDS = 30.0


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m distspec.runtime.watchdog",
        description="Run COMMAND; end it, with every rank's stack, when the job stops "
        "making progress (docs/fault-tolerance.md).",
    )
    parser.add_argument("--every", type=float, required=True, help="the period, in seconds")
    parser.add_argument("--role", default="replica", help="the role's name")
    parser.add_argument("--replica", default="0", help="this replica's number in its role")
    parser.add_argument("--replicas", type=int, default=1, help="replicas in the job")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the command after --")
    if not args.every > 0:
        parser.error(f"--every must be > 0, got {args.every}")
    return args


class Watchdog:
    """One replica's watchdog (see the module's docstring)."""

    def __init__(
        self,
        command: list[str],
        every: float,
        *,
        key: str,
        replicas: int,
        folder: Path,
        tick: float = 1.0,
        upload: str = "",
    ) -> None:
        self.command = command
        self.upload = upload
        self.every = every
        self.key = key
        self.replicas = max(1, replicas)
        self.hang = folder / HANG_DIR
        self.tick = min(tick, every / 4)
        self.start = time.time()
        self.last_output = self.start
        self.marked = 0.0
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    # -- the command ---------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env[WATCHDOG_ENV] = str(int(self.every))  # the ranks' heartbeats on
        # torchrun starts its workers with distspec's worker Python (their stderr joined
        # to their stdout), as the batch scripts' worker_exec_line does for a torchrun
        # command that is not wrapped.
        worker = env.get(WORKER_EXEC_ENV, "")
        is_torchrun = os.path.basename(self.command[0]) == "torchrun"
        if is_torchrun and "PYTHON_EXEC" not in env and worker and os.access(worker, os.X_OK):
            env["PYTHON_EXEC"] = worker
        return env

    def _pump(self, source: Any, fd: int) -> None:
        while True:
            try:
                data = os.read(source.fileno(), 65536)
            except OSError:
                return
            if not data:
                return
            self.last_output = time.time()
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except InterruptedError:
                    continue
                except OSError:
                    break  # our own output is gone: keep reading, or the command blocks

    def _forward(self, signum: int, _frame: Any) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)

    def run(self) -> int:
        """Run the command to its end (its exit code) or to a hang (124)."""
        try:
            self.child = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._env()
            )
        except OSError as err:
            print(f"distspec watchdog: cannot run {self.command[0]}: {err}", file=sys.stderr)
            return 127
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._forward)
        pumps = [
            threading.Thread(target=self._pump, args=(self.child.stdout, 1), daemon=True),
            threading.Thread(target=self._pump, args=(self.child.stderr, 2), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        hung = False
        while self.child.poll() is None:
            time.sleep(self.tick)
            if self.stopping:
                continue
            self._mark_output()
            record = self._hung_record() or self._check()
            if record is not None:
                hung = True
                self._on_hang(record)
                break
        code = self.child.wait()
        for pump in pumps:
            pump.join(timeout=5)
        if hung:
            return HUNG_EXIT
        return code if code >= 0 else 128 - code

    # -- progress ------------------------------------------------------------------

    def _mark_output(self) -> None:
        if self.last_output > self.marked + 1.0 or (
            self.last_output > self.marked and time.time() - self.marked > 1.0
        ):
            path = self.hang / "output" / self.key
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
                os.utime(path, (self.last_output, self.last_output))
                self.marked = self.last_output

    def _times(self, folder: Path) -> list[float]:
        found = []
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return []
        for entry in entries:
            with contextlib.suppress(OSError):
                found.append(entry.stat().st_mtime)
        # Marks older than this attempt are an earlier attempt's (a requeue, a retry).
        return [t for t in found if t >= self.start - 1.0]

    def progress(self) -> tuple[str, float]:
        """``(mode, time)``: what progress is judged by, and its newest time."""
        beats = self._times(self.hang.parent / BEATS_DIR)
        if beats:
            return "heartbeat", max(beats)
        outputs = self._times(self.hang / "output")
        return "output", max([self.start, self.last_output, *outputs])

    def _check(self) -> dict[str, Any] | None:
        mode, last = self.progress()
        now = time.time()
        if now - last < self.every:
            return None
        record = {
            "time": now,
            "period": self.every,
            "replica": self.key,
            "mode": mode,
            "last": last,
        }
        path = self.hang / "hung"
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                current = self._hung_record()
                if current is not None:
                    return current  # another replica saw it first
                with contextlib.suppress(OSError):
                    path.unlink()  # an earlier attempt's
                continue
            except OSError as err:
                print(f"distspec watchdog: cannot write {path}: {err}", file=sys.stderr)
                return record
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            return record
        return record

    def _hung_record(self) -> dict[str, Any] | None:
        try:
            record = json.loads((self.hang / "hung").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or float(record.get("time") or 0) < self.start:
            return None
        return record

    # -- a hang ------------------------------------------------------------------------

    def _on_hang(self, record: dict[str, Any]) -> None:
        from distspec.hangs import Hang, summary_lines

        period = Hang(record, []).headline()
        print(
            f"distspec watchdog: {period}; writing every rank's stack to {self.hang}/stacks",
            file=sys.stderr,
            flush=True,
        )
        assert self.child is not None
        processes = dump_tree(self.child.pid, record.get("time"))
        stacks = self.hang / "stacks"
        with contextlib.suppress(OSError):
            stacks.mkdir(parents=True, exist_ok=True)
            _write(stacks / f"{self.key}.txt", "".join(p.pop("text", "") for p in processes))
            _write(stacks / f"{self.key}.json", json.dumps(processes, indent=1))
        for line in summary_lines(Hang(record, processes)):
            print(f"distspec watchdog: {line}", file=sys.stderr, flush=True)
        if self.upload:
            self._upload()
        self._gather(record)
        print("distspec watchdog: stopping the job (HUNG)", file=sys.stderr, flush=True)
        stop(self.child)

    def _upload(self) -> None:
        """A job folder that is an fsspec URL (Kubernetes' ``job_dir``): copy this
        replica's ``hang/hung`` and stacks there, beside the other pods' (each pod is
        watched on its own: the URL is not a folder the replicas share as files)."""
        try:
            import fsspec

            fs, root = fsspec.core.url_to_fs(self.upload.rstrip("/") + "/" + HANG_DIR)
            for name in ("hung", f"stacks/{self.key}.txt", f"stacks/{self.key}.json"):
                local = self.hang / name
                if local.exists():
                    target = (
                        f"{root}/{name}"
                        if name.startswith("stacks/")
                        else f"{root}/hung-{self.key}"
                    )
                    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                    fs.put_file(str(local), target)
        except Exception as err:  # the pod's log has the summary still
            print(
                f"distspec watchdog: cannot copy the stacks to {self.upload}: {err}",
                file=sys.stderr,
            )
            return
        print(
            f"distspec watchdog: stacks copied to {self.upload.rstrip('/')}/{HANG_DIR}/stacks/",
            file=sys.stderr,
            flush=True,
        )

    def _gather(self, record: dict[str, Any]) -> None:
        """Wait until every replica has written its stacks (or GATHER_SECONDS)."""
        deadline = time.monotonic() + GATHER_SECONDS
        while time.monotonic() < deadline:
            done = 0
            with contextlib.suppress(OSError):
                for path in (self.hang / "stacks").glob("*.json"):
                    with contextlib.suppress(OSError, ValueError):
                        items = json.loads(path.read_text())
                        if not items or items[0].get("hung_at") == record.get("time"):
                            done += 1
            if done >= self.replicas:
                return
            time.sleep(0.5)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- processes -------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    table: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            table.setdefault(int(fields[1]), []).append(int(name))
    return table


def descendants(root: int) -> list[int]:
    """``root`` and its live descendants, parents first."""
    table = _children()
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(sorted(table.get(pid, [])))
    return found


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _is_python(pid: int) -> bool:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return os.path.basename(exe).startswith("python")


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def dump_tree(root: int, hung_at: Any) -> list[dict[str, Any]]:
    """The stacks of the Python processes in ``root``'s tree (see :mod:`distspec.hangs`
    for the records), each with its py-spy text under ``text``."""
    host = socket.gethostname()
    tool = _py_spy()
    out = []
    for pid in descendants(root):
        if not _is_python(pid):
            continue
        env = _environ(pid)
        rank = env.get("RANK", "")
        record: dict[str, Any] = {
            "rank": int(rank) if rank.isdigit() else None,
            "local_rank": int(env["LOCAL_RANK"]) if env.get("LOCAL_RANK", "").isdigit() else None,
            "host": host,
            "pid": pid,
            "main_process": pid == root,
            "hung_at": hung_at,
            "tool": "none",
            "error": None,
            "threads": [],
            "where": None,
            "text": "",
        }
        if tool is not None:
            _spy(tool, pid, record)
        else:
            record["error"] = "py-spy is not installed"
        if record["tool"] == "none":
            sig = getattr(signal, STACK_SIGNAL)
            if _catches(pid, sig):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
                    record["tool"] = "faulthandler"
        out.append(record)
    return out


def _spy(tool: str, pid: int, record: dict[str, Any]) -> None:
    who = f"rank {record['rank']}" if record["rank"] is not None else "process"
    head = f"--- {who}, pid {pid} on {record['host']} ---\n"
    try:
        done = subprocess.run(
            [tool, "dump", "--pid", str(pid), "--json"],
            capture_output=True,
            text=True,
            timeout=DUMP_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        record["error"] = f"py-spy: {err}"
        return
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        record["error"] = "py-spy: " + (lines[-1] if lines else f"exit {done.returncode}")
        return
    try:
        threads = json.loads(done.stdout)
    except ValueError:
        record["error"] = "py-spy: output is not JSON"
        return
    record["tool"] = "py-spy"
    text = [head]
    for thread in threads:
        frames = [
            {"name": f.get("name"), "file": f.get("filename"), "line": f.get("line")}
            for f in thread.get("frames", [])
        ]
        main = thread.get("os_thread_id") == pid or thread.get("thread_name") == "MainThread"
        record["threads"].append(
            {"name": thread.get("thread_name"), "main": main, "frames": frames}
        )
        text.append(f'Thread {thread.get("os_thread_id")} "{thread.get("thread_name")}"\n')
        text += [f"    {f['name']} ({f['file']}:{f['line']})\n" for f in frames]
        if main:
            record["where"] = where(frames)
    record["text"] = "".join(text)


def _library(path: str) -> bool:
    if not path or path.startswith("<"):
        return True
    if "site-packages" in path or "dist-packages" in path:
        return True
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return (bool(stdlib) and path.startswith(stdlib + os.sep)) or "/lib/python3" in path


def where(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first frame (innermost first) in the user's own code, and the function it
    was in the middle of calling; the innermost frame when every frame is a library's."""
    if not frames:
        return None
    for i, frame in enumerate(frames):
        if not _library(str(frame.get("file") or "")):
            if i == 0:
                return _place(frame, frame["name"])
            # The library function the user's code called; through a decorator's
            # wrapper (torch.distributed's collectives have one), the one it wraps.
            callee = i - 1
            while callee > 0 and _is_wrapper(str(frames[callee].get("name") or "")):
                callee -= 1
            return _place(frame, frames[callee]["name"])
    return _place(frames[0], frames[0]["name"])


def _is_wrapper(name: str) -> bool:
    return "<locals>" in name or name.rsplit(".", 1)[-1] in ("wrapper", "wrapped", "inner")


def _place(frame: dict[str, Any], call: Any) -> dict[str, Any]:
    return {
        "file": os.path.basename(str(frame.get("file") or "?")),
        "path": frame.get("file"),
        "line": frame.get("line"),
        "function": frame.get("name"),
        "call": call,
    }


def stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to ``child``, then, after :data:`GRACE_SECONDS`, SIGKILL to what is left
    of its tree (torchrun's workers run in sessions of their own)."""
    tree = descendants(child.pid)
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    for pid in tree + descendants(child.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """``python -m distspec.runtime.watchdog``: the command's exit code, or 124."""
    args = _args(argv)
    folder_text = os.environ.get("DISTSPEC_JOB_DIR", "")
    upload = folder_text if "://" in folder_text else ""
    if not folder_text or upload:
        # Watched on its own, in a folder of this pod's; the stacks go to the URL too.
        folder_text = tempfile.mkdtemp(prefix="distspec-watchdog-")
    watchdog = Watchdog(
        args.command,
        args.every,
        key=f"{args.role}-{args.replica}",
        replicas=1 if upload else args.replicas,
        folder=Path(folder_text),
        upload=upload,
    )
    return watchdog.run()


if __name__ == "__main__":
    sys.exit(main())
