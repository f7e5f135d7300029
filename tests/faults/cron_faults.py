"""The cron daemon under a nemesis (`faults.py --cron`): three daemons, three hosts, one
crontab of JOBS jobs with seconds fields, three servers (AOF, appendfsync always).

Each daemon is a host of its own (`unshare --uts`, as root; else all share the host name);
host-c runs with its clock 30 s ahead (faketime). Every job's command appends a START line
(job, slot, fence, host) to a shared log, sleeps a little, and appends an END line. A
seeded nemesis, one fault at a time, SIGKILLs a daemon (restarted after 0.5-2 s; its runs
die with it, as under systemd or in a container), SIGSTOPs one (continued after 1-3 s),
or kills a server (restarted from its AOF after 1-3 s), never leaving fewer than one
daemon running or a minority of servers up. The oracle, from the log and the servers'
history:

- at most once: no (job, slot) of an at-most-once job started twice;
- at least once: every slot of an at-least-once job ended (its command ran to its end)
  exactly once, but for a second end after a run that was killed once its command had
  ended (history `killed`: the run died before its end was recorded);
- nothing missed: every slot between the warm-up and the end was claimed (started, or in
  the history with its slot), since one daemon and a majority of servers were up all
  along; none recorded `missed`.
"""

import collections
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

import redlock_e2e as e2e  # noqa: E402
from redlock_e2e import REDLOCK_BIN, SLACK, RedisServer, isolated_env  # noqa: E402

HOSTS = ("host-a", "host-b", "host-c")
AHEAD = "host-c"  # its clock runs 30 s ahead of the servers'
WARM_UP = 4.0     # seconds after the start whose slots are not judged (daemons starting)
TAIL = 6.0        # nor those of the last seconds (runs still under way at the end)


def can_unshare():
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def crontab(jobs, log):
    """JOBS jobs, every 2 to 5 seconds with offsets; every fifth at-least-once."""
    lines = []
    for i in range(jobs):
        period = 2 + i % 4
        offset = i % period
        settings = f"name=j{i:02d}" + (" at-least-once" if i % 5 == 0 else "")
        line = (f'echo "START $REDLOCK_KEY $REDLOCK_SLOT $REDLOCK_FENCE $FAULT_HOST" >> {log}; '
                f'sleep 0.{1 + i % 3}; '
                f'echo "END $REDLOCK_KEY $REDLOCK_SLOT $REDLOCK_FENCE $FAULT_HOST" >> {log}')
        lines.append(f"# redlock: {settings}\n{offset}/{period} * * * * * {line}\n")
    return "".join(lines)


def slots_of(i, start, end):
    """The instants (Unix seconds) of job i's slots in [start, end]."""
    period = 2 + i % 4
    offset = i % period
    out = []
    t = int(start)
    while t <= end:
        if t % 60 % period == offset and t % 60 >= offset:
            out.append(t)
        t += 1
    return out


def slot_text(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class Daemon:
    def __init__(self, work, host, servers, tab):
        self.host = host
        self.work = work
        self.servers = servers
        self.tab = tab
        self.proc = None
        self.stopped = False
        self.starts = 0
        self.out = open(os.path.join(work, f"{host}.out"), "ab")

    def start(self):
        verbose = ["-v"] if os.environ.get("CRON_FAULTS_VERBOSE") else []
        words = [REDLOCK_BIN] + [a for s in self.servers for a in ("-s", s.url())] + verbose + [
            "cron", "--grace", "2s", self.tab]
        if can_unshare():
            words = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                     self.host] + words
        if self.host == AHEAD:
            words = ["faketime", "-f", "+30s"] + words
        env = isolated_env(self.work, {"FAULT_HOST": self.host})
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") +
                               ":verify_asan_link_order=0").lstrip(":")
        self.proc = subprocess.Popen(words, env=env, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=subprocess.STDOUT, preexec_fn=e2e._die_with_parent)
        self.stopped = False
        self.starts += 1

    def pid(self):
        """The daemon's own pid: faketime forks its command rather than exec it, and dies
        of a SIGTERM meant for the daemon."""
        return e2e.redlock_pid(self.proc)

    def up(self):
        return self.proc is not None and self.proc.poll() is None and not self.stopped

    def kill(self):
        pid = self.pid()
        if pid != self.proc.pid:  # faketime's child: it would outlive faketime
            os.kill(pid, signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        os.kill(self.pid(), signal.SIGSTOP)
        self.stopped = True

    def cont(self):
        os.kill(self.pid(), signal.SIGCONT)
        self.stopped = False


def history(servers, name, config):
    """The history of `name`, read with long timeouts (`config`): servers that fsync every
    write on a busy machine answer late, and the oracle must not judge on a partial read."""
    for attempt in range(5):
        r = subprocess.run([REDLOCK_BIN, "-c", config] +
                           [a for s in servers for a in ("-s", s.url())] +
                           ["history", name, "--json", "-n", "100000"], capture_output=True,
                           text=True, timeout=120 * SLACK)
        if r.returncode == 0:
            return json.loads(r.stdout)["runs"]
        time.sleep(1 + attempt)
    raise RuntimeError(f"history {name}: {r.stderr}")


def run(seconds, seed, jobs=int(os.environ.get("CRON_FAULTS_JOBS", "52"))):
    """Returns (figures, ok)."""
    rng = random.Random(seed)
    print(f"faults: cron: {jobs} jobs, 3 daemons (host-c 30 s ahead), 3 servers, "
          f"{seconds:.0f}s of faults, seed {seed}", flush=True)
    if not shutil.which("faketime"):
        print("faults: cron: faketime is not installed (scripts/setup.sh installs it)")
        return {"cron": "skipped"}, True
    work = tempfile.mkdtemp(prefix="redlock-faults-cron-")
    log = os.path.join(work, "runs.log")
    open(log, "w").close()
    tab = os.path.join(work, "crontab")
    with open(tab, "w") as f:
        f.write(crontab(jobs, log))
    servers = [RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
               for _ in range(3)]
    daemons = [Daemon(work, h, servers, tab) for h in HOSTS]
    events = []  # (wall, text)
    problems = []

    def note(text):
        events.append((time.time(), text))

    try:
        started = time.time()
        for d in daemons:
            d.start()
        end = started + seconds
        while time.time() < end:
            time.sleep(rng.uniform(1.0, 2.5))
            up = [d for d in daemons if d.up()]
            kind = rng.choice(["kill-daemon", "kill-daemon", "stop-daemon", "kill-server"])
            if kind == "kill-daemon" and len(up) >= 2:
                d = rng.choice(up)
                d.kill()
                note(f"kill -9 daemon {d.host}")
                time.sleep(rng.uniform(0.5, 2.0))
                d.start()
                note(f"restart daemon {d.host}")
            elif kind == "stop-daemon" and len(up) >= 2:
                d = rng.choice(up)
                d.stop()
                note(f"SIGSTOP daemon {d.host}")
                time.sleep(rng.uniform(1.0, 3.0))
                d.cont()
                note(f"SIGCONT daemon {d.host}")
            elif kind == "kill-server":
                s = rng.choice(servers)
                s.kill()
                note(f"kill -9 server {s.port}")
                time.sleep(rng.uniform(1.0, 3.0))
                s.restart()
                note(f"restart server {s.port} (AOF)")
        judged_until = time.time() - TAIL
        time.sleep(TAIL)
        for d in daemons:
            if d.proc.poll() is not None:
                problems.append(f"daemon {d.host} exited {d.proc.returncode} on its own")
            os.kill(d.pid(), signal.SIGTERM)
        for d in daemons:
            try:
                rc = d.proc.wait(30 * SLACK)
            except subprocess.TimeoutExpired:
                d.kill()
                rc = "hung"
            if rc != 0:
                problems.append(f"daemon {d.host} exited {rc} after SIGTERM")

        # The oracle.
        starts = collections.defaultdict(list)
        ends = collections.defaultdict(list)
        with open(log) as f:
            for line in f:
                words = line.split()
                if len(words) != 5:
                    continue
                what, job, slot, fence, host = words
                (starts if what == "START" else ends)[(job, slot)].append((int(fence), host))
        claimed = collections.defaultdict(set)  # (job, slot) -> outcomes in the history
        patient = os.path.join(work, "oracle.toml")
        with open(patient, "w") as f:
            f.write('connect_timeout = "5s"\ncommand_timeout = "20s"\n')
        for i in range(jobs):
            name = f"j{i:02d}"
            for entry in history(servers, name, patient):
                if entry.get("slot"):
                    claimed[(name, entry["slot"])].add((entry["outcome"], entry.get("fence")))
        judged = 0
        for i in range(jobs):
            name = f"j{i:02d}"
            at_least_once = i % 5 == 0
            for t in slots_of(i, started + WARM_UP, judged_until):
                key = (name, slot_text(t))
                judged += 1
                outcomes = {o for o, _ in claimed[key]}
                if "skipped-overlap" in outcomes:
                    continue  # the policy's (a rerun that went first overlapped it)
                if "missed" in outcomes:
                    problems.append(f"{key}: recorded missed")
                if not at_least_once and len(starts[key]) > 1:
                    problems.append(f"{key}: at most once, started {len(starts[key])} times: "
                                    f"{starts[key]}")
                if at_least_once:
                    done = ends[key]
                    killed = {f for o, f in claimed[key] if o == "killed"}
                    excused = [e for e in done[:-1] if e[0] in killed]
                    if not done:
                        problems.append(f"{key}: at least once, never ran to its end "
                                        f"(starts {starts[key]}, history {claimed[key]})")
                    elif len(done) - len(excused) > 1:
                        problems.append(f"{key}: ran to its end {len(done)} times: {done}")
                elif not starts[key] and not claimed[key]:
                    problems.append(f"{key}: missed (no run, nothing in the history)")
        figures = {"cron": {"seed": seed, "jobs": jobs, "seconds": seconds, "slots": judged,
                            "faults": len(events), "problems": len(problems)}}
        for p in problems[:40]:
            print(f"faults: cron: VIOLATION {p}", flush=True)
        kinds = collections.Counter()
        for p in problems:
            kind = p.split("): ", 1)[-1].split(":", 1)[0].split(" (", 1)[0]
            kinds[kind if p.startswith("(") else "daemon"] += 1
        for kind, n in kinds.most_common():
            print(f"faults: cron: {n} {kind}", flush=True)
        if problems:
            print("faults: cron: nemesis:", flush=True)
            for t, text in events:
                print(f"  {slot_text(int(t))} +{t - started:6.2f}s {text}", flush=True)
            print(f"faults: cron: the daemons' output is in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
        print(f"faults: cron: {judged} slots judged, {len(events)} nemesis events, "
              f"{len(problems)} violations (seed {seed})", flush=True)
        return figures, not problems
    finally:
        for d in daemons:
            if d.proc is not None and d.proc.poll() is None:
                os.kill(d.pid(), signal.SIGCONT)
                d.kill()
        for s in servers:
            s.stop()
