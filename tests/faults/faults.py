#!/usr/bin/env python3
"""Jepsen-style fault injection for redlock, on one machine (stdlib only).

K clients loop `redlock run -k NAME ... -- program.py` over N servers (each behind a
fault-injecting proxy of ours) while a nemesis, driven by a seed, pauses, kills,
restarts, partitions and skews them. Every PROGRAM does a read-pause-write on a shared
register served here, stamping every message with CLOCK_MONOTONIC (shared by every
process on the machine), so the checkers can tell exactly who was alive when.

    tests/faults/faults.py                    N = 1, 3, 5 and the known-unsafe cases
    tests/faults/faults.py --servers 3        one configuration
    tests/faults/faults.py --unsafe           only the known-unsafe cases
    FAULTS_SECONDS=600 tests/faults/faults.py --servers 5    soak
    tests/faults/faults.py --servers 3 --seed 1234           replay a schedule
    tests/faults/faults.py --cron             the cron daemon (cron_faults.py)

Exit status 0 when no checker found a violation, 1 otherwise (the history slice that
proves it and the seed are printed). See README.md next to this file.
"""

import argparse
import atexit
import collections
import ctypes
import fcntl
import json
import os
import random
import shlex
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

import redlock_e2e as e2e  # noqa: E402
from redlock_e2e import (REDLOCK_BIN, SLACK, RedisError, RedisServer, RespClient,  # noqa: E402
                         isolated_env, pid_alive)

NAME = "faults"
KEY = f"lock:{NAME}"
FENCE_KEY = f"{{lock:{NAME}}}:fence"
QUEUE_KEYS = {f"{{lock:{NAME}}}:{k}" for k in ("queue", "waiting", "tickets")}
QUEUE_TTL_MS = 30_000
WAITERS_KEY = f"{{lock:{NAME}}}:waiters"
WAITERS_TTL_MS = 2 * 3_600_000  # the wait list expires 2 h after its last newcomer
HISTORY_KEY = f"{{lock:{NAME}}}:history"
# history_max_age's default, and up to a sixteenth more: the stream's expiry is pushed back
# once a sixteenth of it has passed (lock/scripts.hpp, k_history_counters)
HISTORY_TTL_MS = 30 * 86_400_000 * 17 // 16
STATS_KEY = f"{{lock:{NAME}}}:stats"
STATS_TTL_MS = 400 * 86_400_000  # the counters expire 400 days after the last run
PROGRAM = os.path.join(HERE, "program.py")
PROXY = os.path.join(HERE, "proxy.py")
MS = 1_000_000
S = 1_000_000_000
TTLS = (1.0, 2.0, 3.0)  # seconds; every run picks one
MAX_TTL = max(TTLS)


def now():
    return time.monotonic_ns()


def die_with_parent():
    e2e._die_with_parent()


# ---------------------------------------------------------------------------------------
# The clock shim (see clockshim.c): built once per run of the suite with the C compiler.

_shim_path = None


def clock_shim():
    global _shim_path
    if _shim_path is None:
        tmp = tempfile.mkdtemp(prefix="redlock-faults-shim-")
        atexit.register(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "clockshim.so")
        for cc in ("cc", "gcc", "clang"):
            if shutil.which(cc):
                r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out,
                                    os.path.join(HERE, "clockshim.c")],
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    _shim_path = out
                    break
                print(f"faults: {cc} could not build clockshim.c:\n{r.stderr}", flush=True)
        else:
            _shim_path = ""
        if not _shim_path:
            print("faults: no C compiler for the clock shim; clock faults are skipped",
                  flush=True)
            _shim_path = ""
    return _shim_path or None


# ---------------------------------------------------------------------------------------
# History: everything that happened, for the slices printed with a violation.


class History:
    def __init__(self):
        self.t0 = now()
        self.events = []  # (t_ns, text)
        self.lock = threading.Lock()
        self.echo = True

    def add(self, t, text):
        with self.lock:
            self.events.append((t, text))
        if text.startswith(("NEMESIS", "LIVENESS")) and self.echo:
            print(f"  {self.rel(t)}  {text}", flush=True)

    def rel(self, t):
        return f"{(t - self.t0) / MS:10.1f}ms" if t is not None else "         -  "

    def slice(self, t1, t2, margin=300 * MS, limit=80):
        with self.lock:
            rows = sorted(e for e in self.events if t1 - margin <= e[0] <= t2 + margin)
        if len(rows) > limit:
            rows = rows[:limit // 2] + [(rows[limit // 2][0], "...")] + rows[-limit // 2:]
        return "\n".join(f"    {self.rel(t)}  {text}" for t, text in rows)


# ---------------------------------------------------------------------------------------
# Runs: one `redlock run` process each.


class Run:
    def __init__(self, rid, client, args):
        self.id = rid
        self.client = client
        self.args = args
        self.spawn = None       # before fork: the acquisition starts after this
        self.exit = None
        self.status = None
        self.stderr = ""
        self.popen = None
        self.pid = None
        self.program_pid = None
        self.enter = None       # PROGRAM's first stamp
        self.last = None        # PROGRAM's last stamp: alive in [enter, last]
        self.fence = None
        self.token = None
        self.read = None        # "accepted" / "refused"
        self.write = None
        self.bye = False
        self.nemesis = set()    # what the nemesis did to it: "killed", "stopped"
        self.epoch = 0          # the register's epoch when it was spawned
        self.terminal = False   # run on a terminal of its own, without a cgroup
        self._pty = None        # the terminal's master side, while the run lasts

    @property
    def holding(self):
        return self.enter is not None and not self.bye and self.exit is None

    def describe(self, hist):
        return (f"run {self.id} (client {self.client}, redlock pid {self.pid}, PROGRAM pid "
                f"{self.program_pid}, fence {self.fence}, token {(self.token or '-')[:8]}): "
                f"spawned {hist.rel(self.spawn)}, PROGRAM alive "
                f"{hist.rel(self.enter)} .. {hist.rel(self.last)}, read {self.read}, write "
                f"{self.write}, exit {hist.rel(self.exit)} status {self.status}"
                + (f", nemesis: {','.join(sorted(self.nemesis))}" if self.nemesis else "")
                + (", on a terminal without a cgroup" if self.terminal else ""))


# ---------------------------------------------------------------------------------------
# The register: the resource the lock protects, served to program.py on a unix socket.


class Register:
    def __init__(self, path, hist):
        self.path = path
        self.hist = hist
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.runs = {}          # id -> Run (registered by the harness before spawning)
        self.plain = 0
        self.plain_writes = 0
        self.unclean = []       # (t, run, wrote, current): lost updates on the plain value
        self.fenced = 0
        self.fenced_writes = 0
        self.max_fence = 0      # the highest fence accepted (in the latest epoch)
        self.max_run = None
        # A server that came back empty lost its fence counter, so fences start again
        # lower: like an operator who re-initialises the resource with the lock service,
        # the register starts a new epoch. Runs spawned before the loss belong to the old
        # one and are refused once the new one has been written to.
        self.epoch = 0
        self.epoch_max = {0: (0, None)}
        self.top_epoch = 0
        self.refusals = []      # (t, run, op, fence, max_fence, max_run)
        self.last_enter = 0
        register = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                try:
                    for line in self.rfile:
                        reply = register.handle(line.decode().split())
                        if reply is not None:
                            self.wfile.write(reply.encode() + b"\n")
                except OSError:
                    return  # a PROGRAM killed mid-message (its stamps so far count)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(path, Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def new_epoch(self):
        with self.lock:
            self.epoch += 1
            self.epoch_max[self.epoch] = (0, None)

    def _fence_ok(self, run, fence):
        if run.epoch < self.top_epoch:
            return False
        top, top_run = self.epoch_max[run.epoch]
        return fence > top or (fence == top and run.id == top_run)

    def _accept(self, run, fence):
        self.epoch_max[run.epoch] = (fence, run.id)
        self.top_epoch = max(self.top_epoch, run.epoch)
        self.max_fence, self.max_run = fence, run.id

    def handle(self, words):
        op, rid = words[0], int(words[1])
        t_recv = now()
        with self.lock:
            run = self.runs.get(rid)
            if run is None:
                return "unknown"
            if op == "HELLO":
                run.program_pid = int(words[2])
                run.fence = int(words[3])
                run.token = words[4]
                run.enter = run.last = int(words[5])
                self.last_enter = max(self.last_enter, run.enter)
                self.hist.add(run.enter, f"run {rid} PROGRAM enters, fence {run.fence}, "
                              f"token {run.token[:8]}")
                self.cond.notify_all()
                return "ok"
            t = int(words[3] if op in ("READ", "WRITE") else words[2])
            run.last = max(run.last or t, t)
            if op == "BEAT":
                return None
            if op == "BYE":
                run.bye = True
                self.hist.add(t, f"run {rid} PROGRAM leaves")
                return None
            fence = int(words[2])
            if op == "READ":
                ok = self._fence_ok(run, fence)
                run.read = "accepted" if ok else "refused"
                if ok:
                    self._accept(run, fence)
                else:
                    self.refusals.append((t_recv, rid, op, fence, self.max_fence, self.max_run))
                self.hist.add(t, f"run {rid} READ plain={self.plain} fenced={self.fenced} "
                              f"fence {fence}: {run.read}")
                return f"{self.plain} {self.fenced} {run.read}"
            if op == "WRITE":
                plain, fenced = int(words[4]), int(words[5])
                if plain != self.plain + 1:
                    self.unclean.append((t, rid, plain, self.plain))
                self.plain = plain
                self.plain_writes += 1
                ok = fenced >= 0 and self._fence_ok(run, fence)
                run.write = "accepted" if ok else "refused"
                if ok:
                    self.fenced = fenced
                    self.fenced_writes += 1
                    self._accept(run, fence)
                else:
                    self.refusals.append((t_recv, rid, op, fence, self.max_fence, self.max_run))
                self.hist.add(t, f"run {rid} WRITE plain={plain} fence {fence}: {run.write}")
                return run.write
        return "unknown"

    def wait_enter_after(self, t, timeout):
        """True once some PROGRAM entered after t (within timeout seconds)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.last_enter <= t:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True


# ---------------------------------------------------------------------------------------
# Servers: redis-server with AOF (appendfsync always) under the clock shim.


class FaultServer(RedisServer):
    """A RedisServer (redlock_e2e) that keeps an AOF with appendfsync always, so kill -9
    then restart() loses nothing, while restart_empty() wipes it (a server restarted
    without its data). Under the clock shim when one was built: set_clock() steps its
    wall clock."""

    def __init__(self, shim, aof=True):
        self.shim = shim
        self.clock_dir = tempfile.mkdtemp(prefix="redlock-faults-clock-")
        self.clock_file = os.path.join(self.clock_dir, "offset")
        with open(self.clock_file, "wb") as f:
            f.write(struct.pack("=q", 0))
        self.clock_offset = 0.0
        extra = ["--appendonly", "yes", "--appendfsync", "always"] if aof else []
        super().__init__(extra_args=extra)

    def _command_line(self):
        args = super()._command_line()
        if self.shim:
            return ["env", f"LD_PRELOAD={self.shim}", f"CLOCKSHIM_FILE={self.clock_file}"] + args
        return args

    def set_clock(self, offset_s):
        self.clock_offset = offset_s
        fd = os.open(self.clock_file, os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("=q", int(offset_s * S)), 0)
        finally:
            os.close(fd)

    def start_again(self):
        if self.proc is not None:
            return
        for _ in range(5):
            if self._try_start():
                return
            time.sleep(0.1)
        raise RuntimeError(f"redis-server did not restart; log:\n{self.log_tail()}")

    def restart_empty(self):
        self.kill()
        shutil.rmtree(os.path.join(self.dir, "appendonlydir"), ignore_errors=True)
        self.start_again()

    def stop(self):
        super().stop()
        shutil.rmtree(self.clock_dir, ignore_errors=True)


class Proxy:
    """proxy.py in a process of its own, one listener per server."""

    def __init__(self, servers):
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-E", PROXY] + [f"127.0.0.1:{s.port}" for s in servers],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=die_with_parent)
        self.ports = [int(p) for p in self.proc.stdout.readline().split()]
        if len(self.ports) != len(servers):
            raise RuntimeError("proxy.py did not start")

    def cmd(self, **cmd):
        with self.lock:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            if self.proc.stdout.readline().strip() != "ok":
                raise RuntimeError(f"proxy.py did not take {cmd}")

    def heal(self, i):
        for d in ("c2s", "s2c"):
            self.cmd(op="mode", i=i, dir=d, mode="pass")

    def stop(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------
# The key monitor: watches lock:NAME on every server directly (not through the proxy).


class Monitor:
    """For every token T: on which servers T was seen, and when T was first seen gone
    again (a later sample on the same server with another value). The lock key is only
    ever created by SET NX with a fresh token and renewed by compare-and-pexpire, so a
    token seen gone from a server never comes back there (an AOF replay restores it only
    if it had not been seen gone: the sample that saw it gone logged its expiry or
    deletion first)."""

    def __init__(self, servers, hist, interval=0.015):
        self.servers = servers
        self.hist = hist
        self.interval = interval
        self.lock = threading.Lock()
        self.seen = [dict() for _ in servers]   # token -> t_recv first seen
        self.gone = [dict() for _ in servers]   # token -> t_recv first seen gone after seen
        self.current = [None for _ in servers]
        self.stopped = False
        self.threads = [threading.Thread(target=self._watch, args=(i,), daemon=True)
                        for i in range(len(servers))]
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopped = True
        for t in self.threads:
            t.join(5)

    def _watch(self, i):
        client = None
        while not self.stopped:
            try:
                if client is None:
                    client = RespClient(self.servers[i].address, timeout=0.3)
                t_send = now()
                value = client.execute("GET", KEY)
                t_recv = now()
            except (OSError, RedisError, ValueError):
                if client is not None:
                    client.close()
                client = None
                time.sleep(0.05)
                continue
            self._sample(i, t_send, t_recv, value)
            time.sleep(self.interval)
        if client is not None:
            client.close()

    def _sample(self, i, t_send, t_recv, value):
        with self.lock:
            if value is not None and value not in self.seen[i]:
                self.seen[i][value] = t_recv
            if value != self.current[i]:
                for token in list(self.seen[i]):
                    if token != value and token not in self.gone[i]:
                        self.gone[i][token] = t_recv
                self.hist.add(t_recv, f"server {i}: {KEY} = "
                              f"{value[:8] if value else '(none)'}")
                self.current[i] = value

    def free_at(self, token, majority):
        """The first moment at which `token` was surely held by fewer than a majority of
        the servers (seen gone on N - majority + 1 of them), or None."""
        with self.lock:
            times = sorted(g[token] for g in self.gone if token in g)
        need = len(self.servers) - majority + 1
        return times[need - 1] if len(times) >= need else None


# ---------------------------------------------------------------------------------------
# A world: servers, proxy, register, monitor, and the runs.


class World:
    def __init__(self, n, hist, rng, aof=True, use_proxy=True, verbose=True):
        self.n = n
        self.majority = n // 2 + 1
        self.hist = hist
        self.rng = rng
        self.tmp = tempfile.mkdtemp(prefix="redlock-faults-")
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(os.path.join(self.home, ".config"))
        self.shim = clock_shim()
        self.servers = []
        self.proxy = None
        self.register = None
        self.monitor = None
        self.verbose = verbose
        self.runs = []
        self.runs_lock = threading.Lock()
        self.next_id = 0
        self.counter_loss = []   # times a server came back without its fence counter
        try:
            self.servers = [FaultServer(self.shim, aof) for _ in range(n)]
            if use_proxy:
                self.proxy = Proxy(self.servers)
                self.urls = [f"redis://127.0.0.1:{p}" for p in self.proxy.ports]
            else:
                self.urls = [s.url() for s in self.servers]
            self.register = Register(os.path.join(self.tmp, "register.sock"), hist)
            self.monitor = Monitor(self.servers, hist)
        except BaseException:
            self.close()
            raise
        self.env = isolated_env(self.home)
        # PROGRAM's straggler leaves its session (setsid): a cgroup holds it where redlock
        # can make one, the watchdog's look at the tree elsewhere.
        self.env["FAULTS_SETSID"] = "1"

    def close(self):
        if self.monitor:
            self.monitor.stop()
        with self.runs_lock:
            runs = list(self.runs)
        for r in runs:
            if r.popen and r.popen.poll() is None:
                try:
                    r.popen.send_signal(signal.SIGCONT)
                    r.popen.kill()
                except OSError:
                    pass
            if r._pty is not None:
                os.close(r._pty)
                r._pty = None
        if self.proxy:
            self.proxy.stop()
        for s in self.servers:
            s.stop()
        if self.register:
            self.register.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def lost_counter(self):
        self.counter_loss.append(now())
        self.register.new_epoch()
        self.hist.add(now(), f"register: new epoch {self.register.epoch} (a fence counter "
                      "was lost)")

    def new_run(self, client, run_args, pause_ms):
        with self.runs_lock:
            rid = self.next_id
            self.next_id += 1
        args = [REDLOCK_BIN]
        for u in self.urls:
            args += ["-s", u]
        if self.verbose:
            args.append("-v")
        args += ["run", "-k", NAME] + run_args + [
            "--", sys.executable, "-S", "-E", PROGRAM, self.register.path, str(rid),
            str(pause_ms)]
        run = Run(rid, client, args)
        with self.register.lock:
            self.register.runs[rid] = run
        with self.runs_lock:
            self.runs.append(run)
        return run

    def start(self, run, terminal=False, prefix=()):
        """Starts `run`. On a terminal: redlock leads a session whose controlling terminal
        is a pty of its own (an ssh or interactive shell), without a cgroup
        (REDLOCK_NO_CGROUP=1, as for a user outside a delegated subtree), so PROGRAM stays
        in the terminal's session and its straggler leaves group and session: what only
        the watchdog's look at the tree catches once redlock is SIGKILLed. `prefix`: words
        to run redlock with (unshare)."""
        err = tempfile.TemporaryFile(dir=self.tmp)
        with self.register.lock:
            run.epoch = self.register.epoch
        env, preexec, slave = self.env, die_with_parent, None
        if terminal:
            run.terminal = True
            run._pty, slave = os.openpty()
            env = dict(self.env, REDLOCK_NO_CGROUP="1")

            def preexec():
                die_with_parent()
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        run.spawn = now()
        try:
            run.popen = subprocess.Popen(list(prefix) + run.args, env=env, cwd=self.tmp,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err, preexec_fn=preexec)
        finally:
            if slave is not None:
                os.close(slave)
        run.pid = run.popen.pid
        run._err = err
        self.hist.add(run.spawn, f"run {run.id} spawned by client {run.client}: "
                      f"{' '.join(run.args[1 + 2 * self.n:run.args.index('--')])}")

    def finish(self, run, timeout=None):
        try:
            status = run.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        run.exit = now()
        run.status = status
        run._err.seek(0)
        text = run._err.read().decode("utf-8", "replace")
        run._err.close()
        if run._pty is not None:
            os.close(run._pty)
            run._pty = None
        run.stderr = text if len(text) <= 3000 else "..." + text[-3000:]
        self.hist.add(run.exit, f"run {run.id} redlock exits {status}")
        return status

    def holder(self):
        with self.runs_lock:
            holders = [r for r in self.runs if r.holding]
        return holders[-1] if holders else None

    def keys(self):
        """Every key on every server that answers: {server: {key: pttl}}."""
        out = {}
        for i, s in enumerate(self.servers):
            try:
                with RespClient(s.address, timeout=1.0) as c:
                    keys = c.execute("KEYS", "*")
                    out[i] = {k: c.execute("PTTL", k) for k in keys}
            except (OSError, RedisError):
                out[i] = None
        return out


# ---------------------------------------------------------------------------------------
# Checkers


class Checker:
    def __init__(self, world, hist, seed, label, faults):
        self.w = world
        self.hist = hist
        self.seed = seed
        self.label = label
        self.faults = faults   # [(t_start, t_end, kind, detail)]
        self.violations = []
        self.notes = []

    def violation(self, kind, text, t1, t2):
        self.violations.append((kind, text, t1, t2))

    def note(self, kind, text, t1, t2):
        self.notes.append((kind, text, t1, t2))

    def report(self, items, title):
        # The first of each kind, then the rest in order, at most 6 in all.
        firsts, rest, kinds = [], [], set()
        for item in items:
            (rest if item[0] in kinds else firsts).append(item)
            kinds.add(item[0])
        items = firsts + rest
        for kind, text, t1, t2 in items[:6]:
            print(f"\n{title} [{self.label}, seed {self.seed}] {kind}: {text}")
            print("  history (ms since start):")
            print(self.hist.slice(t1, t2))
        if len(items) > 6:
            print(f"\n... and {len(items) - 6} more {title.lower()}s")

    def loss_between(self, t1, t2):
        return any(t1 <= t <= t2 for t in self.w.counter_loss)

    def held(self):
        return sorted((r for r in self.w.runs if r.enter is not None), key=lambda r: r.enter)

    def mutual_exclusion(self, exempt=lambda a, b: False):
        """No two PROGRAMs alive at once: [enter, last] are stamps of each one's own
        messages, so an overlap means both processes existed at one instant."""
        overlaps = []
        runs = self.held()
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                if b.enter >= a.last:
                    break
                overlaps.append((a, b))
                if exempt(a, b):
                    continue
                self.violation(
                    "two holders at once",
                    f"run {b.id}'s PROGRAM entered {(a.last - b.enter) / MS:.1f} ms before "
                    f"run {a.id}'s PROGRAM was last alive\n  {a.describe(self.hist)}\n  "
                    f"{b.describe(self.hist)}", a.enter, max(a.last, b.last))
        return overlaps

    def dead_before_free(self):
        """A PROGRAM is dead once its token is surely gone from a majority of servers."""
        for r in self.held():
            t_free = self.w.monitor.free_at(r.token, self.w.majority)
            if t_free is not None and r.last > t_free:
                self.violation(
                    "PROGRAM alive after its lock was gone",
                    f"run {r.id}'s PROGRAM was alive {(r.last - t_free) / MS:.1f} ms after "
                    f"its token was seen gone from a majority ({self.hist.rel(t_free)})\n  "
                    f"{r.describe(self.hist)}", r.enter, r.last)

    def fences(self):
        runs = self.held()
        by_fence = collections.defaultdict(list)
        for r in runs:
            if r.fence < 1:
                self.violation("fence below 1", r.describe(self.hist), r.enter, r.last)
            by_fence[r.fence].append(r)
        for fence, rs in by_fence.items():
            for a, b in zip(rs, rs[1:]):
                if self.loss_between(min(a.spawn, b.spawn), max(a.enter, b.enter)):
                    self.note("shared fence after a server lost its counter",
                              f"fence {fence}\n  {a.describe(self.hist)}\n  "
                              f"{b.describe(self.hist)}", a.spawn, b.last)
                else:
                    self.violation("two holders share a fence",
                                   f"fence {fence}\n  {a.describe(self.hist)}\n  "
                                   f"{b.describe(self.hist)}", a.spawn, b.last)
        # An acquisition that starts after another completed (PROGRAM entered) gets a
        # larger fence. Sorted by enter, the check against the largest fence of every run
        # that entered before W was spawned.
        spawned = sorted(runs, key=lambda r: r.spawn)
        best = None   # the run with the largest fence among those entered so far
        j = 0
        for w in spawned:
            while j < len(runs) and runs[j].enter < w.spawn:
                if best is None or runs[j].fence > best.fence:
                    best = runs[j]
                j += 1
            if best is not None and w.fence <= best.fence:
                text = (f"run {w.id} was spawned after run {best.id} had acquired, yet its "
                        f"fence {w.fence} is not larger than {best.fence}\n  "
                        f"{best.describe(self.hist)}\n  {w.describe(self.hist)}")
                if self.loss_between(best.spawn, w.enter):
                    self.note("fence not larger after a server lost its counter", text,
                              best.spawn, w.last)
                else:
                    self.violation("fence went back", text, best.spawn, w.last)
        # Stronger than the contract promises, reported only: holders one after the other
        # (the first one's PROGRAM gone before the second's entered) in fence order.
        prev_max = None
        for w in runs:
            if prev_max is not None and prev_max.last < w.enter and w.fence <= prev_max.fence \
                    and not self.loss_between(prev_max.spawn, w.enter) \
                    and not w.spawn > prev_max.enter:
                self.note("a later holder got a smaller fence (allowed: its acquisition "
                          "started before the earlier one completed)",
                          f"{prev_max.describe(self.hist)}\n  {w.describe(self.hist)}",
                          prev_max.enter, w.last)
            if prev_max is None or w.fence > prev_max.fence:
                prev_max = w

    def register(self):
        reg = self.w.register
        for t, rid, wrote, current in reg.unclean:
            run = self.w.register.runs[rid]
            self.violation("lost update on the lock-only value",
                           f"run {rid} wrote plain={wrote} over plain={current} (it read "
                           f"{wrote - 1}): another holder wrote in between\n  "
                           f"{run.describe(self.hist)}", run.enter, t)
        if reg.plain != reg.plain_writes:
            self.violation("count", f"plain value {reg.plain} after {reg.plain_writes} "
                           "writes", self.hist.t0, now())
        if reg.fenced != reg.fenced_writes:
            self.violation("count", f"fenced value {reg.fenced} after {reg.fenced_writes} "
                           "accepted writes", self.hist.t0, now())

    def statuses(self, expected=(0, 3, 69, 75, 79)):
        for r in self.w.runs:
            if r.status is None:
                continue
            if r.status == 0 and r.write != "accepted":
                self.violation("success without an accepted write",
                               f"redlock exited 0 but its PROGRAM's write was {r.write}\n  "
                               f"{r.describe(self.hist)}\n  stderr: {r.stderr[-800:]!r}",
                               r.spawn, r.exit)
            elif r.status < 0 and "killed" in r.nemesis:
                continue
            elif r.status not in expected:
                self.violation("unexpected exit status",
                               f"{r.describe(self.hist)}\n  stderr: {r.stderr[-1500:]!r}",
                               r.spawn, r.exit)


# ---------------------------------------------------------------------------------------
# Clients


class Client(threading.Thread):
    """Runs redlock again and again: mode 'n' (-n, retrying after a short pause), 'w'
    (-w 3s) or 'fair' (-w 3s --fair); on a terminal without a cgroup when `terminal`
    (World.start)."""

    def __init__(self, world, idx, mode, rng, stop, terminal=False):
        super().__init__(daemon=True)
        self.w = world
        self.idx = idx
        self.mode = mode
        self.terminal = terminal
        self.rng = rng
        self.stop_event = stop
        self.current = None
        self.error = None

    def run(self):
        try:
            while not self.stop_event.is_set():
                ttl = self.rng.choice(TTLS)
                args = ["-t", f"{ttl:g}s"]
                if self.mode == "n":
                    args.append("-n")
                else:
                    args += ["-w", "3s"] + (["--fair"] if self.mode == "fair" else [])
                run = self.w.new_run(self.idx, args, self.rng.randrange(0, 150))
                self.w.start(run, terminal=self.terminal)
                self.current = run
                status = self.w.finish(run)
                self.current = None
                if status == 75:
                    time.sleep(self.rng.uniform(0.01, 0.15))
                elif status == 69:  # servers unavailable: no point in spinning
                    time.sleep(self.rng.uniform(0.1, 0.4))
        except BaseException as e:  # reported by the scenario
            self.error = e


# ---------------------------------------------------------------------------------------
# The nemesis


_namespaces = None


def namespaces_work():
    """Whether a shell can run in a new pid namespace with its own /proc here (root and
    unshare(1)): what the forge-nested fault needs."""
    global _namespaces
    if _namespaces is None:
        _namespaces = False
        if os.geteuid() == 0 and shutil.which("unshare"):
            r = subprocess.run(UNSHARE + ["sh", "-c", "echo $$"], capture_output=True,
                               text=True)
            _namespaces = r.returncode == 0 and r.stdout.strip() == "1"
    return _namespaces


# A new pid namespace with its own /proc, all of it killed with unshare.
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]

# The forger's shell, pid 2 of its namespace (pid 1 is the one unshare started): it says
# "ready", then runs the script written to $1/request once, its status in $1/status.
FORGER = r"""
d=$1
: > "$d/ready"
while [ ! -e "$d/request" ]; do sleep 0.01; done
sh "$d/request" 2> "$d/err"
echo $? > "$d/status.tmp" && mv "$d/status.tmp" "$d/status"
"""


def environ_of_token(root, token):
    """The environment of the process below `root` whose REDLOCK_TOKEN is `token` (read as
    root), or None."""
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            if env.get(b"REDLOCK_TOKEN") == token.encode():
                return {k.decode(): v.decode() for k, v in env.items()}
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
    return None


def proc_state(pid):
    """The state letter of process `pid` ("T": stopped), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:][:1].decode()


def cgroup_of(pid):
    """Where process `pid`'s cgroup v2 is in the file system, or None."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            path = next((line[3:].strip() for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mount = next((line.split()[4] for line in f if " - cgroup2 " in line), None)
    except OSError:
        return None
    return mount + path if path and mount else None


def family_of(pid):
    """redlock `pid` and its children, with their process names."""
    out = [(pid, comm_of(pid))]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            out += [(int(p), comm_of(int(p))) for p in f.read().split()]
    except OSError:
        pass
    return out


def comm_of(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)


def memory_sharers(pid):
    """The processes sharing `pid`'s memory (kcmp KCMP_VM): what the OOM killer kills
    along with it. Unknown machine: only pid."""
    if not _KCMP_SYSCALL:
        return [pid]
    libc = ctypes.CDLL(None, use_errno=True)
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and libc.syscall(_KCMP_SYSCALL, pid, int(entry), 1, 0, 0) == 0:
            out.append(int(entry))
    return out


def stop_tree(pids, sig):
    """Signals pids through pidfds (no pid reuse races); returns those signalled."""
    done = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(fd, sig)
            done.append(fd)
        except OSError:
            os.close(fd)
    return done


def program_of(run):
    """PROGRAM's pid, if it is alive and still redlock's child."""
    pid = run.program_pid
    if not pid or not run.pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return pid if int(fields[1]) == run.pid and fields[0] not in (b"Z", b"X") else None


class Nemesis:
    KINDS = [
        # kind, weight
        ("freeze-minority", 3), ("freeze-majority", 2),
        ("stop-redlock", 3), ("stop-redlock+program", 3), ("kill-client", 3),
        ("kill-client-by-name", 2), ("kill-client-oom", 2), ("kill-terminal-client", 2),
        ("kill-client-phase", 3),
        ("forge-nested", 1),
        ("kill-servers-aof", 2), ("kill-servers-delayed", 2),
        ("proxy-delay", 2), ("proxy-hold", 3), ("proxy-drop", 2), ("proxy-reset", 1),
        ("clock-back", 1), ("clock-slow", 1),
        # Known-unsafe, never picked unless named with --nemesis: a check of the checkers.
        ("restart-empty-now", 0), ("clock-forward", 0),
    ]

    def __init__(self, world, clients, rng, hist, only=None):
        self.w = world
        self.clients = clients
        self.rng = rng
        self.hist = hist
        self.counts = collections.Counter()
        self.faults = []
        self.liveness = []   # (t_heal, kind) where nothing acquired within the bound
        self.recovery = []   # seconds from each heal to the next PROGRAM entering
        n = world.n
        self.kinds = [(k, wt if not only else max(wt, 1)) for k, wt in self.KINDS
                      if not (k == "freeze-minority" and n == 1)
                      and not (k.startswith("clock") and not world.shim)
                      and not (k == "forge-nested" and not namespaces_work())
                      and (not only or k in only)]

    def pick(self):
        total = sum(w for _, w in self.kinds)
        x = self.rng.uniform(0, total)
        for k, wt in self.kinds:
            x -= wt
            if x <= 0:
                return k
        return [k for k, wt in self.kinds if wt][-1] if any(wt for _, wt in self.kinds) \
            else self.kinds[-1][0]

    def servers_subset(self, majority):
        n = self.w.n
        minority = n - self.w.majority
        if minority == 0:
            majority = True
        size = self.rng.randint(self.w.majority, n) if majority else self.rng.randint(1, minority)
        return sorted(self.rng.sample(range(n), size))

    def target_run(self, need_holder=False):
        """The holder (70%, or always with need_holder: waiting up to 1 s for one) or the
        current run of a random client."""
        prefer_holder = self.rng.random() < 0.7 or need_holder
        idx = self.rng.randrange(len(self.clients))
        run = self.w.holder() if prefer_holder else None
        deadline = time.monotonic() + 1.0
        while need_holder and (run is None or program_of(run) is None) \
                and time.monotonic() < deadline:
            time.sleep(0.005)
            run = self.w.holder()
        if run is None:
            run = self.clients[idx].current
        return run

    def run_in_phase(self, phase, within=2.0):
        """A run in `phase` (waiting up to `within` seconds for one), or None."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if phase == "acquiring":
                runs = [c.current for c in self.clients if c.current is not None
                        and c.current.enter is None and c.current.exit is None]
                if runs:
                    return self.rng.choice(runs)
            elif phase == "releasing":
                with self.w.runs_lock:
                    runs = [r for r in self.w.runs if r.bye and r.exit is None]
                if runs:
                    return runs[-1]
            else:
                run = self.w.holder()
                if run is not None and phase == "holding":
                    return run
                if run is not None and "-t" in run.args:
                    # At its next renewal: every third of the TTL from acquiring.
                    ttl = float(run.args[run.args.index("-t") + 1].rstrip("s"))
                    held = (now() - run.enter) / S
                    time.sleep(ttl / 3 - held % (ttl / 3))
                    return run
            time.sleep(0.002)
        return None

    def terminal_holder(self):
        """The terminal client's run once its PROGRAM runs (waiting up to 2 s), or None."""
        client = next((c for c in self.clients if c.terminal), None)
        deadline = time.monotonic() + 2.0
        while client is not None and time.monotonic() < deadline:
            run = client.current
            if run is not None and program_of(run) is not None:
                return run
            time.sleep(0.005)
        return None

    def forge_nested(self):
        """A run nested by forgery, from another pid namespace of this host (a host-network
        container): a holder whose redlock is pid 2 of its namespace, and a forger whose
        shell is pid 2 of another one and started before the holder took the lock, so host,
        boot and an ancestor of that pid all match. The forger runs `run -n` of the name
        with the holder's token (read from a server) and even its nesting secret (read
        from its PROGRAM's environment, as root can). It must be an ordinary run (75 while
        the holder holds); a nested one would show as two holders at once, with one fence."""
        w = self.w
        d = tempfile.mkdtemp(prefix="forger-", dir=w.tmp)
        with open(f"{d}/serve", "w") as f:
            f.write(FORGER)
        forger = subprocess.Popen(UNSHARE + ["sh", "-c", 'sh "$1/serve" "$1"; true', "sh", d],
                                  env=w.env, cwd=w.tmp, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  preexec_fn=die_with_parent)
        holder = w.new_run(-1, ["-t", "3s", "-w", "5s"], int(1500 * SLACK))
        forged = None

        def undo():
            if forged is not None and forged.status is None:
                forged.exit = now()
            w.finish(holder, 60 * SLACK)
            forger.kill()
            forger.wait()

        deadline = time.monotonic() + 5 * SLACK
        while not os.path.exists(f"{d}/ready") and time.monotonic() < deadline:
            time.sleep(0.005)
        w.start(holder, prefix=UNSHARE + ["sh", "-c", '"$@"; exit $?', "sh"])
        while holder.enter is None and holder.popen.poll() is None:
            time.sleep(0.005)  # -w 5s: it gets the lock or gives up
        env = environ_of_token(holder.pid, holder.token) if holder.token else None
        if env is None:
            return f"run {holder.id}: the holder did not get the lock", undo
        forged = w.new_run(-1, ["-n"], 0)
        forged.nemesis.add("forged")
        words = ["env", f"REDLOCK_KEY={NAME}", f"REDLOCK_TOKEN={holder.token}"]
        if "REDLOCK_NEST_SECRET" in env:  # redlock before 0.4 had none
            words.append(f"REDLOCK_NEST_SECRET={env['REDLOCK_NEST_SECRET']}")
        words += forged.args
        with open(f"{d}/request.tmp", "w") as f:
            f.write("exec " + " ".join(shlex.quote(x) for x in words) + "\n")
        forged.spawn = now()
        w.hist.add(forged.spawn, f"run {forged.id} forged in another pid namespace with run "
                   f"{holder.id}'s token and secret")
        os.rename(f"{d}/request.tmp", f"{d}/request")
        deadline = time.monotonic() + 30 * SLACK
        while not os.path.exists(f"{d}/status") and time.monotonic() < deadline:
            time.sleep(0.005)
        forged.exit = now()
        if os.path.exists(f"{d}/status"):
            with open(f"{d}/status") as f:
                forged.status = int(f.read())
            with open(f"{d}/err", errors="replace") as f:
                forged.stderr = f.read()[-3000:]
        w.hist.add(forged.exit, f"run {forged.id} (forged) exits {forged.status}")
        return f"run {forged.id} against run {holder.id}", undo

    @staticmethod
    def family(kind):
        return kind.split("-")[0]

    def once(self):
        kinds = [self.pick()]
        if self.rng.random() < 0.3:  # sometimes two faults at once, of different families
            other = self.pick()
            if self.family(other) != self.family(kinds[0]):
                kinds.append(other)
        dur = self.rng.uniform(0.05, 3.0)
        t_start = now()
        undos = []
        for kind in kinds:
            heal = self.apply(kind)
            if heal is None:
                continue
            detail, undo = heal
            self.counts[kind] += 1
            self.hist.add(now(), f"NEMESIS {kind} {detail} for {dur:.2f}s")
            undos.append((kind, detail, undo))
        if not undos:
            return
        time.sleep(dur)
        for kind, detail, undo in reversed(undos):
            undo()
        t_heal = now()
        kind = "+".join(k for k, _, _ in undos)
        self.hist.add(t_heal, f"NEMESIS healed {kind}")
        self.faults.append((t_start, t_heal, kind, ""))
        # Live again: some PROGRAM enters within the bound after the heal. A killed or
        # stopped holder leaves its key until it expires (at most the TTL, longer on a
        # server whose clock was set back), a dropped --fair place holds its line 3 s.
        bound = (2 * MAX_TTL + 8.0) * SLACK
        if self.w.register.wait_enter_after(t_heal, bound):
            self.recovery.append((now() - t_heal) / S)
        else:
            self.liveness.append((t_heal, kind))
            self.hist.add(now(), f"LIVENESS nothing acquired {bound:.0f}s after the heal")
        time.sleep(self.rng.uniform(0.1, 0.5))

    def apply(self, kind):
        w = self.w
        if kind in ("freeze-minority", "freeze-majority"):
            idx = self.servers_subset(kind == "freeze-majority")
            for i in idx:
                w.servers[i].freeze()
            return f"servers {idx}", lambda: [w.servers[i].thaw() for i in idx]
        if kind in ("stop-redlock", "stop-redlock+program"):
            run = self.target_run(need_holder=kind == "stop-redlock+program")
            if run is None or run.popen is None or run.popen.poll() is not None:
                return None
            pids = [run.pid]
            if kind == "stop-redlock+program":
                p = program_of(run)
                if p is None:
                    return None
                pids.append(p)
            fds = stop_tree(pids, signal.SIGSTOP)
            run.nemesis.add("stopped")

            def cont():
                for fd in fds:
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGCONT)
                    except OSError:
                        pass
                    os.close(fd)
            return f"run {run.id} pids {pids}", cont
        if kind in ("kill-client", "kill-client-by-name", "kill-client-oom",
                    "kill-terminal-client"):
            # SIGKILL of redlock; of every process of its family named "redlock" (killall,
            # pkill); of every process sharing its memory (the OOM killer's kill); of the
            # terminal client's redlock while it holds.
            run = (self.terminal_holder() if kind == "kill-terminal-client"
                   else self.target_run())
            if run is None or run.popen is None or run.popen.poll() is not None:
                return None
            if kind == "kill-client-by-name":
                pids = [p for p, name in family_of(run.pid) if name == "redlock"]
            elif kind == "kill-client-oom":
                pids = memory_sharers(run.pid)
            else:
                pids = [run.pid]
            run.nemesis.add("killed")
            fds = stop_tree(pids, signal.SIGKILL)
            for fd in fds:
                os.close(fd)
            return f"run {run.id} pids {pids}", lambda: None
        if kind == "kill-client-phase":
            # SIGKILL of redlock in a phase picked at random: acquiring, holding, renewing
            # (at a renewal), releasing (PROGRAM said BYE, redlock not yet exited). Its
            # watchdog releases the lock once PROGRAM's tree is proven gone (issue 37):
            # never while any of it can still run.
            phase = self.rng.choice(["acquiring", "holding", "renewing", "releasing"])
            run = self.run_in_phase(phase)
            if run is None or run.popen is None or run.popen.poll() is not None:
                return None
            run.nemesis.add("killed")
            for fd in stop_tree([run.pid], signal.SIGKILL):
                os.close(fd)
            return f"run {run.id} pid {run.pid} while {phase}", lambda: None
        if kind in ("kill-servers-aof", "kill-servers-delayed"):
            delayed = kind == "kill-servers-delayed"
            idx = self.servers_subset(self.rng.random() < 0.4)
            for i in idx:
                w.servers[i].kill()
            # Delayed: down for longer than the longest TTL, then back without its data,
            # fence counter included. Otherwise back with its AOF (appendfsync always).
            down_until = now() + int((MAX_TTL + 0.3) * S if delayed else 0)

            def restart():
                left = down_until - now()
                if left > 0:
                    time.sleep(left / S)
                for i in idx:
                    if delayed:
                        w.servers[i].restart_empty()
                        w.lost_counter()
                    else:
                        w.servers[i].start_again()
            return f"servers {idx}" + (" (back empty after the longest TTL)" if delayed
                                       else " (back with the AOF)"), restart
        if kind.startswith("proxy") and w.proxy:
            idx = self.servers_subset(self.rng.random() < 0.4)
            p = w.proxy
            if kind == "proxy-reset":
                for i in idx:
                    p.cmd(op="reset", i=i)
                return f"servers {idx}", lambda: None
            dirs = self.rng.choice([["c2s"], ["s2c"], ["c2s", "s2c"]])
            if kind == "proxy-delay":
                base = self.rng.uniform(0.005, 0.4)
                jitter = self.rng.uniform(0, base)
                for i in idx:
                    for d in dirs:
                        p.cmd(op="mode", i=i, dir=d, mode="delay", base=base, jitter=jitter)
                detail = f"servers {idx} {'+'.join(dirs)} {base * 1000:.0f}+{jitter * 1000:.0f}ms"
            else:
                mode = "hold" if kind == "proxy-hold" else "drop"
                for i in idx:
                    for d in dirs:
                        p.cmd(op="mode", i=i, dir=d, mode=mode)
                detail = f"servers {idx} {'+'.join(dirs)}"
            release = self.rng.random() < 0.5

            def undo():
                for i in idx:
                    p.heal(i)
                    if kind == "proxy-hold" and not release:
                        p.cmd(op="reset", i=i)
            return detail + (" (then delivered late)" if kind == "proxy-hold" and release
                             else ""), undo
        if kind == "forge-nested":
            return self.forge_nested()
        if kind == "restart-empty-now":
            idx = self.servers_subset(True)
            for i in idx:
                w.servers[i].restart_empty()
                w.lost_counter()
            return f"servers {idx} (UNSAFE)", lambda: None
        if kind == "clock-forward":
            idx = self.servers_subset(True)
            for i in idx:
                w.servers[i].set_clock(w.servers[i].clock_offset + 2 * MAX_TTL)
            return f"servers {idx} by {2 * MAX_TTL:g}s (UNSAFE)", lambda: None
        if kind == "clock-back":
            # Set a server's wall clock back (never forward: a clock that jumps forward
            # expires locks early, a documented hazard run among the known-unsafe cases).
            i = self.rng.randrange(w.n)
            step = self.rng.uniform(0.1, 2.0)
            s = w.servers[i]
            s.set_clock(s.clock_offset - step)
            return f"server {i} by {step:.2f}s (now {s.clock_offset:+.2f}s)", lambda: None
        if kind == "clock-slow":
            # A clock running at half speed for the fault's length (a skew), left behind
            # afterwards rather than stepped forward again.
            i = self.rng.randrange(w.n)
            s = w.servers[i]
            stop = threading.Event()

            def slow():
                last = time.monotonic()
                while not stop.wait(0.02):
                    t = time.monotonic()
                    s.set_clock(s.clock_offset - (t - last) / 2)
                    last = t
            th = threading.Thread(target=slow, daemon=True)
            th.start()

            def undo():
                stop.set()
                th.join()
            return f"server {i} at half speed", undo
        return None

    def heal_all(self):
        for s in self.w.servers:
            if s.proc is None:
                s.start_again()
            s.thaw()
        if self.w.proxy:
            for i in range(self.w.n):
                self.w.proxy.heal(i)


# ---------------------------------------------------------------------------------------
# Scenarios


def mixed(n, seconds, top_seed, clients=5, only=None):
    """The main workload: clients over n servers under the random nemesis."""
    seed = top_seed * 10 + n
    rng = random.Random(seed)
    hist = History()
    label = f"{n} server{'s' if n > 1 else ''}"
    print(f"faults: {label}: seed {top_seed}, {seconds:g}s of faults, {clients} clients "
          f"(replay: --servers {n} --seed {top_seed})", flush=True)
    world = World(n, hist, rng)
    stop = threading.Event()
    try:
        modes = ["n", "w", "fair"]
        # The last client runs on a terminal without a cgroup (kill-terminal-client).
        cl = [Client(world, i, modes[i % 3], random.Random(rng.random()), stop,
                     terminal=i == clients - 1)
              for i in range(clients)]
        for c in cl:
            c.start()
        nem = Nemesis(world, cl, random.Random(rng.random()), hist, only)
        # A quiet start: the system works before any fault.
        if not world.register.wait_enter_after(0, 20 * SLACK):
            nem.liveness.append((hist.t0, "start"))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            nem.once()
        nem.heal_all()
        t_end = now()
        hist.add(t_end, "NEMESIS done; all healed")
        final_live = world.register.wait_enter_after(t_end, (2 * MAX_TTL + 8.0) * SLACK)
        stop.set()
        stuck = []
        for c in cl:
            c.join((3 * MAX_TTL + 30) * SLACK)
            if c.is_alive():
                stuck.append(c)
        # Nothing left behind but the fence counter (no TTL by design): the lock and its
        # metadata are deleted or expire within the TTL; the --fair queue's keys expire
        # 10 x the 3 s drop time after their last use, so those must have a TTL within it;
        # the history stream is kept on purpose, and expires with its max age and up to a
        # sixteenth more (the counters beside it, 400 days after the last run); the wait
        # list keeps a killed waiter until a release finds nobody on its channel, or 2 h.
        leftovers = None
        deadline = time.monotonic() + (2 * MAX_TTL + 8.0) * SLACK
        while True:
            leftovers = {}
            for i, ks in world.keys().items():
                bad = {k: t for k, t in ks.items() if k != FENCE_KEY and not (
                    k in QUEUE_KEYS and 0 < t <= QUEUE_TTL_MS) and not (
                    k == HISTORY_KEY and 0 < t <= HISTORY_TTL_MS) and not (
                    k == STATS_KEY and 0 < t <= STATS_TTL_MS) and not (
                    k == WAITERS_KEY and 0 < t <= WAITERS_TTL_MS)} if ks else {}
                if bad:
                    leftovers[i] = bad
            if not leftovers or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        world.monitor.stop()

        chk = Checker(world, hist, top_seed, label, nem.faults)
        chk.mutual_exclusion()
        chk.dead_before_free()
        chk.fences()
        chk.register()
        chk.statuses()
        for t_heal, kind in nem.liveness:
            chk.violation("not live after the faults healed",
                          f"no PROGRAM entered within {(2 * MAX_TTL + 8.0) * SLACK:.0f}s "
                          f"after {kind} healed", t_heal, t_heal + int(5 * S))
        if not final_live:
            chk.violation("not live at the end", "no PROGRAM entered after everything "
                          "healed", t_end, now())
        for c in stuck:
            r = c.current
            chk.violation("redlock did not exit", f"client {c.idx}: "
                          f"{r.describe(hist) if r else '-'}\n  stderr: "
                          f"{(r.stderr if r else '')[-800:]!r}", r.spawn if r else t_end, now())
        for c in cl:
            if c.error:
                chk.violation("client loop failed", repr(c.error), t_end, t_end)
        if leftovers:
            chk.violation("keys left behind", f"{leftovers} (key: PTTL ms)", t_end, now())

        runs = world.runs
        statuses = collections.Counter(
            "killed" if (r.status is not None and r.status < 0) else r.status
            for r in runs if r.status is not None)
        held = sum(1 for r in runs if r.enter is not None)
        reg = world.register
        print(f"faults: {label}: {len(runs)} runs, {held} held the lock, exit statuses "
              f"{dict(sorted(statuses.items(), key=str))}", flush=True)
        print(f"faults: {label}: register: {reg.fenced_writes} fenced writes accepted, "
              f"{len(reg.refusals)} refused; plain value {reg.plain} after "
              f"{reg.plain_writes} writes; highest fence {reg.max_fence}", flush=True)
        print(f"faults: {label}: {sum(nem.counts.values())} faults injected: "
              f"{dict(sorted(nem.counts.items()))}", flush=True)
        rec = sorted(nem.recovery)
        if rec:
            print(f"faults: {label}: a PROGRAM entered after every heal: median "
                  f"{rec[len(rec) // 2]:.2f}s, slowest {rec[-1]:.2f}s", flush=True)
        if chk.notes:
            kinds = collections.Counter(k for k, *_ in chk.notes)
            print(f"faults: {label}: notes (allowed by the contract): {dict(kinds)}")
            if os.environ.get("FAULTS_NOTES"):
                chk.report(chk.notes, "Note")
        print(f"faults: {label}: {len(chk.violations)} violations"
              + (f": {dict(collections.Counter(k for k, *_ in chk.violations))}"
                 if chk.violations else ""), flush=True)
        chk.report(chk.violations, "VIOLATION")
        return {"label": label, "seed": top_seed, "runs": len(runs), "held": held,
                "faults": dict(nem.counts), "violations": len(chk.violations),
                "recovery_max_s": rec[-1] if rec else None,
                "notes": dict(collections.Counter(k for k, *_ in chk.notes)),
                "statuses": dict(statuses)}, not chk.violations
    finally:
        stop.set()
        world.close()


# -- known-unsafe cases: "pass" means the violation was shown (or fencing held)


def _controlled(world, run_args, pause_ms, client=0):
    run = world.new_run(client, run_args, pause_ms)
    world.start(run)
    return run


def _wait_read(world, run, timeout):
    deadline = time.monotonic() + timeout * SLACK
    while time.monotonic() < deadline:
        if run.read is not None:
            return True
        if run.popen.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def unsafe_trial(case, seed):
    """One trial of a known-unsafe case. Returns (outcome, text): outcome 'shown' (the
    violation happened), 'not reproduced', or 'FAILED' (a guarantee that should still
    hold did not, e.g. fencing)."""
    rng = random.Random(seed)
    hist = History()
    n = {"restart-majority-empty": 3, "aof-control": 3, "clock-forward": 1,
         "host-pause": 1}[case]
    world = World(n, hist, rng, use_proxy=False, verbose=True)
    try:
        # A: holds a long critical section (its renewals every ttl/3 = 10 s never come).
        a = _controlled(world, ["-t", "30s"], int(3000 * SLACK))
        if not _wait_read(world, a, 20):
            world.finish(a, 30)
            return "not reproduced", f"the first holder did not start: {a.stderr[-500:]!r}"
        if case in ("restart-majority-empty", "aof-control"):
            for i in (0, 1):
                if case == "aof-control":
                    world.servers[i].kill()
                    world.servers[i].start_again()
                else:
                    world.servers[i].restart_empty()
                    world.counter_loss.append(now())  # the register keeps its epoch
            hist.add(now(), f"NEMESIS kill -9 servers [0, 1], restarted "
                     f"{'from the AOF' if case == 'aof-control' else 'empty'}")
        elif case == "clock-forward":
            world.servers[0].set_clock(90.0)
            hist.add(now(), "NEMESIS server 0's clock jumps forward 90 s (TTL 30 s)")
        b = _controlled(world, ["-t", "30s", "-n"], 0, client=1)
        world.finish(b, 60)
        world.finish(a, 60)
        return judge(world, hist, seed, case, a, b)
    finally:
        world.close()


def host_pause_trial(seed):
    """The whole host of a holder paused (redlock, its watchdog and PROGRAM stopped) past
    the TTL: nothing local can stop PROGRAM, so it acts when it wakes, after another
    holder took the lock. The fence must refuse its write."""
    rng = random.Random(seed)
    hist = History()
    world = World(1, hist, rng, use_proxy=False, verbose=True)
    try:
        a = _controlled(world, ["-t", "1s"], int(1500 * SLACK))
        if not _wait_read(world, a, 20):
            world.finish(a, 30)
            return "not reproduced", f"the first holder did not start: {a.stderr[-500:]!r}"
        program = program_of(a)
        try:
            with open(f"/proc/{a.pid}/task/{a.pid}/children") as f:
                kids = [int(p) for p in f.read().split()]
        except OSError:
            kids = []
        dogs = [p for p in kids if p != program]
        if program is None or len(dogs) != 1:
            world.finish(a, 30)
            return "not reproduced", f"could not find PROGRAM and the watchdog: {kids}"
        fds = stop_tree([dogs[0], a.pid, program], signal.SIGSTOP)
        hist.add(now(), f"NEMESIS host pause: watchdog {dogs[0]}, redlock {a.pid}, PROGRAM "
                 f"{program} stopped")
        b = _controlled(world, ["-t", "1s", "-w", f"{20 * SLACK:g}s"], 0, client=1)
        world.finish(b, 60)
        # The host wakes: PROGRAM first (it acts before anything local runs), then the rest.
        signal.pidfd_send_signal(fds[2], signal.SIGCONT)
        deadline = time.monotonic() + 5 * SLACK
        while a.write is None and time.monotonic() < deadline and pid_alive(program):
            time.sleep(0.005)
        for fd in fds:
            try:
                signal.pidfd_send_signal(fd, signal.SIGCONT)
            except OSError:
                pass
            os.close(fd)
        hist.add(now(), "NEMESIS host wakes")
        world.finish(a, 60)
        return judge(world, hist, seed, "host-pause", a, b)
    finally:
        world.close()


def kill_both_trial(seed):
    """redlock and its watchdog SIGKILLed together (by pid: no accident kills both any
    more, neither the OOM killer nor a kill by name): only PR_SET_PDEATHSIG is left, so
    PROGRAM dies (or, without a cgroup, stays stopped) and its straggler, in a session of
    its own, runs on under the next holder. The documented limit; what the fence is
    for."""
    rng = random.Random(seed)
    hist = History()
    world = World(1, hist, rng, use_proxy=False, verbose=True)
    group = program = None
    try:
        a = _controlled(world, ["-t", "1s"], int(3000 * SLACK))
        if not _wait_read(world, a, 20):
            world.finish(a, 30)
            return "not reproduced", f"the first holder did not start: {a.stderr[-500:]!r}"
        program = program_of(a)
        dogs = [p for p, _ in family_of(a.pid)[1:] if p != program]
        if program is None or len(dogs) != 1:
            world.finish(a, 30)
            return "not reproduced", f"could not find PROGRAM and the watchdog: {dogs}"
        group = cgroup_of(program)
        a.nemesis.add("killed")
        for fd in stop_tree([a.pid, dogs[0]], signal.SIGKILL):
            os.close(fd)
        hist.add(now(), f"NEMESIS redlock {a.pid} and its watchdog {dogs[0]} killed together")
        b = _controlled(world, ["-t", "1s", "-w", f"{20 * SLACK:g}s"], 200, client=1)
        world.finish(b, 60)
        world.finish(a, 60)
        return judge(world, hist, seed, "kill-redlock+watchdog", a, b)
    finally:
        world.close()
        # Without a cgroup PROGRAM was stopped, not killed, and nothing is left to kill it.
        if program is not None and proc_state(program) == "T":
            for fd in stop_tree([program], signal.SIGKILL):
                os.close(fd)
        # Nothing was left to kill A's straggler or remove A's cgroup: the trial does,
        # so that the suite leaves neither on the machine.
        if group and os.path.basename(group).startswith("redlock-"):
            try:
                with open(os.path.join(group, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                pass
            deadline = time.monotonic() + 10 * SLACK
            while time.monotonic() < deadline:
                try:
                    os.rmdir(group)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def judge(world, hist, seed, case, a, b):
    world.monitor.stop()
    chk = Checker(world, hist, seed, f"unsafe {case}", [])
    fence_applies = case in ("clock-forward", "host-pause")

    def fenced_off(x, y):
        # The stale writer (x, the older holder) was refused once the newer one (y) had
        # been accepted: fencing held.
        return x.write == "refused" or x.write is None

    overlaps = chk.mutual_exclusion(exempt=lambda x, y: True)
    if fence_applies:
        chk.fences()
    story = f"{a.describe(hist)}\n  {b.describe(hist)}"
    if case == "aof-control":
        chk.mutual_exclusion()
        chk.dead_before_free()
        chk.fences()
        if b.enter is not None or chk.violations:
            chk.report(chk.violations or [("second holder", story, a.spawn, now())],
                       "VIOLATION")
            return "FAILED", "with the AOF kept, a second client still got the lock"
        return "held", f"B exited {b.status} (lock still held by A): mutual exclusion kept"
    if not overlaps:
        return "not reproduced", story
    text = (f"two holders at once: run {b.id} entered while run {a.id} was alive "
            f"({(a.last - b.enter) / MS:.0f} ms of overlap)")
    if case == "kill-redlock+watchdog":
        text += " (the first PROGRAM's straggler, in a process group of its own)"
    elif fence_applies:
        if chk.violations or not fenced_off(a, b) or b.write != "accepted":
            chk.report(chk.violations or [("fencing did not refuse the stale writer", story,
                                           a.spawn, now())], "VIOLATION")
            return "FAILED", text + "; fencing did NOT refuse the stale writer"
        text += (f"; fencing held: fence {b.fence} > {a.fence}, the stale writer's write "
                 f"was {a.write or 'never made (killed first)'}")
    else:
        lost = len(world.register.unclean)
        text += (f"; fencing does not apply (counters lost): the newer holder got fence "
                 f"{b.fence}, the older {a.fence}; register: newer holder's read "
                 f"{b.read}, older holder's write {a.write}; {lost} lost update(s) on the "
                 f"lock-only value")
    print(f"  history [{case}, seed {seed}]:\n{hist.slice(a.spawn, now(), limit=40)}")
    return "shown", text


def unsafe(seed, trials=2):
    rng = random.Random(seed)
    print(f"faults: known-unsafe cases: seed {seed} (replay: --unsafe --seed {seed})",
          flush=True)
    ok = True
    results = {}
    for case in ("restart-majority-empty", "aof-control", "clock-forward", "host-pause",
                 "kill-redlock+watchdog"):
        if case == "clock-forward" and not clock_shim():
            print(f"faults: {case}: skipped (no clock shim)")
            continue
        outcomes = collections.Counter()
        for trial in range(trials):
            s = rng.randrange(1 << 30)
            outcome, text = (host_pause_trial(s) if case == "host-pause"
                             else kill_both_trial(s) if case == "kill-redlock+watchdog"
                             else unsafe_trial(case, s))
            outcomes[outcome] += 1
            print(f"faults: unsafe {case} trial {trial + 1}: {outcome}: {text}", flush=True)
            if outcome == "FAILED":
                ok = False
        results[case] = dict(outcomes)
    print(f"faults: known-unsafe cases: {results}", flush=True)
    return results, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", type=int, action="append", choices=(1, 3, 5),
                    help="server counts to run (repeatable; default 1, 3, 5 and --unsafe)")
    ap.add_argument("--unsafe", action="store_true", help="run the known-unsafe cases")
    ap.add_argument("--seconds", type=float, default=None,
                    help="seconds of faults per server count ($FAULTS_SECONDS; default 45, "
                         "25 when REDLOCK_E2E_SLACK > 1)")
    ap.add_argument("--seed", type=int, default=None, help="$FAULTS_SEED; default random")
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--nemesis", help="only these fault kinds, comma-separated: "
                    + ", ".join(k for k, _ in Nemesis.KINDS))
    ap.add_argument("--cron", action="store_true",
                    help="the cron daemon instead: three daemons, 50+ jobs (cron_faults.py)")
    opts = ap.parse_args()
    seconds = opts.seconds
    if seconds is None:
        seconds = float(os.environ.get("FAULTS_SECONDS", "45" if SLACK <= 1 else "25"))
    seed = opts.seed if opts.seed is not None else int(
        os.environ.get("FAULTS_SEED", random.randrange(1 << 30)))
    if opts.cron:
        import cron_faults
        t = time.monotonic()
        seconds = opts.seconds or float(os.environ.get("FAULTS_SECONDS",
                                                       "50" if SLACK <= 1 else "30"))
        figures, ok = cron_faults.run(seconds, seed)
        if opts.json:
            with open(opts.json, "w") as f:
                json.dump([figures], f, indent=1)
        print(f"faults: {'passed' if ok else 'FAILED'} in {time.monotonic() - t:.0f}s "
              f"(seed {seed})", flush=True)
        return 0 if ok else 1
    counts = opts.servers or []
    run_unsafe = opts.unsafe or not opts.servers
    if not counts and not opts.unsafe:
        counts = [1, 3, 5]
    ok = True
    figures = []
    t = time.monotonic()
    for n in counts:
        fig, good = mixed(n, seconds, seed, opts.clients,
                          set(opts.nemesis.split(",")) if opts.nemesis else None)
        figures.append(fig)
        ok &= good
    if run_unsafe:
        res, good = unsafe(seed)
        figures.append({"unsafe": res})
        ok &= good
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(figures, f, indent=1)
    print(f"faults: {'passed' if ok else 'FAILED'} in {time.monotonic() - t:.0f}s "
          f"(seed {seed})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
