"""Monitoring and services: --metrics (checked by promtool and scraped through a real
node_exporter), systemd notifications read from a datagram socket the test owns, the
shipped units through systemd-analyze verify, --on-lost hooks, and --events."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.request

from redlock_e2e import (E2ETest, REDLOCK_BIN, SLACK, free_port, pid_alive, read_pid_file,
                         wait_until)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMTOOL = shutil.which("promtool")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")

SAMPLE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')


def parse_metrics(text):
    """{(metric, frozenset(labels)): value} of a Prometheus text file."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def sample(metrics, metric, **labels):
    return metrics.get((metric, frozenset(labels.items())))


class NotifyListener:
    """A datagram socket standing in for systemd's notification socket: every message
    received, with the time it came."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path if not path.startswith("@") else "\0" + path[1:])
        self.sock.settimeout(0.1)
        self.messages = []
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def stop(self):
        self._stop = True
        self._thread.join()
        self.sock.close()

    def texts(self):
        return [m for _, m in list(self.messages)]

    def find(self, predicate):
        return [(t, m) for t, m in list(self.messages) if predicate(m)]


class MonitoringTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def run_lock(self, args, env=None, timeout=60.0):
        return self.run_redlock(["-s", self.url, "run"] + list(args), env=env, timeout=timeout)

    def start_lock(self, args, env=None):
        return self.start_redlock(["-s", self.url, "run"] + list(args), env=env)

    def read(self, path):
        with open(path) as f:
            return f.read()

    def config(self, text):
        return self.write_file("config.toml", text)

    def leftovers(self, directory):
        """Files in `directory` that are neither .prom files nor their lock files."""
        return [f for f in os.listdir(directory)
                if not f.endswith(".prom") and not f.endswith(".lock")]


class MetricsTest(MonitoringTest):
    def assertPromtoolClean(self, path):
        if PROMTOOL is None:
            return
        with open(path, "rb") as f:
            r = subprocess.run([PROMTOOL, "check", "metrics"], stdin=f, capture_output=True,
                               text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout + r.stderr, "", "promtool found problems")

    def test_a_run_writes_its_metrics(self):
        path = self.path("m", "job.prom")
        os.makedirs(os.path.dirname(path))
        before = time.time()
        r = self.run_lock(["-k", "nightly", "--metrics", path, "--", "sh", "-c", "sleep 0.2"])
        after = time.time()
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        m = parse_metrics(self.read(path))
        self.assertEqual(sample(m, "redlock_runs_total", name="nightly", outcome="ran"), 1)
        self.assertEqual(sample(m, "redlock_runs_total", name="nightly", outcome="lost"), 0)
        self.assertEqual(sample(m, "redlock_last_run_outcome", name="nightly", outcome="ran"), 1)
        self.assertEqual(sample(m, "redlock_last_run_outcome", name="nightly",
                                outcome="skipped-held"), 0)
        self.assertEqual(sample(m, "redlock_last_run_exit_status", name="nightly"), 0)
        self.assertEqual(sample(m, "redlock_running", name="nightly"), 0)
        start = sample(m, "redlock_last_run_start_timestamp_seconds", name="nightly")
        end = sample(m, "redlock_last_run_end_timestamp_seconds", name="nightly")
        self.assertLessEqual(before - 1, start)
        self.assertLessEqual(start, end)
        self.assertLessEqual(end, after + 1)
        duration = sample(m, "redlock_last_run_duration_seconds", name="nightly")
        self.assertAlmostEqual(duration, end - start, delta=0.002)
        self.assertGreaterEqual(sample(m, "redlock_last_run_held_seconds", name="nightly"), 0.2)
        self.assertLess(sample(m, "redlock_last_run_wait_seconds", name="nightly"), 5)
        self.assertIn("# TYPE redlock_runs_total counter", self.read(path))
        self.assertEqual(self.leftovers(os.path.dirname(path)), [])
        self.assertPromtoolClean(path)

        # Counters go on across runs; the last run's status is the new one's.
        r = self.run_lock(["-k", "nightly", "--metrics", path, "--", "sh", "-c", "exit 3"])
        self.assertStatus(r, 3)
        m = parse_metrics(self.read(path))
        self.assertEqual(sample(m, "redlock_runs_total", name="nightly", outcome="ran"), 2)
        self.assertEqual(sample(m, "redlock_last_run_exit_status", name="nightly"), 3)

    def test_the_running_gauge_is_1_while_program_runs(self):
        path = self.path("running.prom")
        holder = self.holder(["-k", "gauge", "--metrics", path], global_args=["-s", self.url])
        holder.wait_ready()
        m = wait_until(lambda: os.path.exists(path) and parse_metrics(self.read(path)),
                       message="the metrics file", proc=holder.proc)
        self.assertEqual(sample(m, "redlock_running", name="gauge"), 1)
        self.assertGreater(sample(m, "redlock_running_since_timestamp_seconds", name="gauge"),
                           time.time() - 60)
        self.assertEqual(holder.release(), 0)
        m = parse_metrics(self.read(path))
        self.assertEqual(sample(m, "redlock_running", name="gauge"), 0)
        self.assertEqual(sample(m, "redlock_running_since_timestamp_seconds", name="gauge"), 0)

    def test_a_skip_is_counted_with_its_status(self):
        path = self.path("skip.prom")
        holder = self.holder(["-k", "busy"], global_args=["-s", self.url]).wait_ready()
        r = self.run_lock(["-k", "busy", "-n", "-E", "3", "--metrics", path, "--", "true"])
        self.assertStatus(r, 3)
        m = parse_metrics(self.read(path))
        self.assertEqual(sample(m, "redlock_runs_total", name="busy", outcome="skipped-held"), 1)
        self.assertEqual(sample(m, "redlock_runs_total", name="busy", outcome="ran"), 0)
        self.assertEqual(sample(m, "redlock_last_run_outcome", name="busy",
                                outcome="skipped-held"), 1)
        self.assertEqual(sample(m, "redlock_last_run_exit_status", name="busy"), 3)
        self.assertEqual(sample(m, "redlock_last_run_held_seconds", name="busy"), 0)
        self.assertEqual(sample(m, "redlock_running", name="busy"), 0)
        self.assertPromtoolClean(path)
        self.assertEqual(holder.release(), 0)

    def test_a_lost_lease_is_counted(self):
        path = self.path("lost.prom")
        p = self.start_lock(["-k", "fragile", "-t", "1s", "--metrics", path, "--",
                             "sh", "-c", "sleep 60"])
        wait_until(lambda: os.path.exists(path), message="the running metrics", proc=p)
        self.server.freeze()
        try:
            self.assertEqual(p.wait(30), 79, p.stderr)
        finally:
            self.server.thaw()
        m = parse_metrics(self.read(path))
        self.assertEqual(sample(m, "redlock_runs_total", name="fragile", outcome="lost"), 1)
        self.assertEqual(sample(m, "redlock_last_run_outcome", name="fragile", outcome="lost"), 1)
        self.assertEqual(sample(m, "redlock_last_run_exit_status", name="fragile"), 79)
        self.assertEqual(sample(m, "redlock_running", name="fragile"), 0)
        self.assertPromtoolClean(path)

    def test_runs_of_two_pid_namespaces_with_one_pid_keep_both_running_records(self):
        # Containers sharing a metrics directory: a run in each, both redlock pid 2. 0.3
        # took the other's record for its own (the same pid) or for a dead one.
        if os.geteuid() != 0:
            self.skipTest("needs root: unshare --pid")
        probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest(f"unshare --pid --fork --mount-proc fails here: {probe.stderr}")
        path, gate = self.path("pool.prom"), self.path("go")
        procs = []
        for i in range(2):
            started = self.path(f"started{i}")
            # sh is pid 1 of the new namespace, and forks redlock as pid 2.
            script = (f"{REDLOCK_BIN} -s {self.url} run -k pool --limit 2 --metrics {path} "
                      f"-- sh -c 'touch {started}; while [ ! -e {gate} ]; do sleep 0.05; "
                      f"done'; exit $?")
            p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                                  script], env=self.env(), stderr=subprocess.PIPE, text=True)
            self.addCleanup(lambda p=p: (p.kill(), p.wait(), p.stderr.close()))
            procs.append(p)
            wait_until(lambda: os.path.exists(started), 15, message=f"run {i} to start")

        def running():
            text = self.read(path)
            return sample(parse_metrics(text), "redlock_running", name="pool") == 2 and text

        text = wait_until(running, 10, message="two runs in the running gauge")
        pids = re.findall(r"^# redlock-running name=\"pool\" pid=(\d+) ", text, re.M)
        self.assertEqual(pids, ["2", "2"])
        with open(gate, "w"):
            pass
        for p in procs:
            self.assertEqual(p.wait(30), 0, p.stderr.read())
        m = parse_metrics(self.read(path))
        self.assertEqual(sample(m, "redlock_running", name="pool"), 0)
        self.assertEqual(sample(m, "redlock_runs_total", name="pool", outcome="ran"), 2)

    def test_concurrent_runs_on_one_host_lose_no_count(self):
        # One file for two names, and a metrics directory: every count is exact.
        shared = self.path("shared.prom")
        directory = self.mkdtemp("metrics-")
        procs = []
        for i in range(12):
            name = "crowd-a" if i % 2 else "crowd-b"
            procs.append(self.start_lock(["-k", name, "-w", "60s", "--metrics", shared, "--",
                                          "true"]))
            procs.append(self.start_lock(["-k", "ci/deploy", "--limit", "3", "-w", "60s",
                                          "--metrics", directory + "/", "--", "true"]))
        for p in procs:
            self.assertEqual(p.wait(120), 0, p.stderr)
        m = parse_metrics(self.read(shared))
        self.assertEqual(sample(m, "redlock_runs_total", name="crowd-a", outcome="ran"), 6)
        self.assertEqual(sample(m, "redlock_runs_total", name="crowd-b", outcome="ran"), 6)
        per_name = os.path.join(directory, "redlock_ci%2Fdeploy.prom")
        m = parse_metrics(self.read(per_name))
        self.assertEqual(sample(m, "redlock_runs_total", name="ci/deploy", outcome="ran"), 12)
        self.assertEqual(sample(m, "redlock_running", name="ci/deploy"), 0)
        self.assertEqual(self.leftovers(directory), [])
        self.assertPromtoolClean(shared)
        self.assertPromtoolClean(per_name)

    def test_metrics_dir_from_the_config(self):
        directory = self.mkdtemp("metrics-")
        cfg = self.config(f'metrics_dir = "{directory}"\n')
        r = self.run_redlock(["-c", cfg, "-s", self.url, "run", "-k", "from-config", "--",
                              "true"])
        self.assertStatus(r, 0)
        self.assertTrue(os.path.exists(os.path.join(directory, "redlock_from-config.prom")))
        # --metrics '' turns the config's off.
        r = self.run_redlock(["-c", cfg, "-s", self.url, "run", "-k", "off", "--metrics", "",
                              "--", "true"])
        self.assertStatus(r, 0)
        self.assertFalse(os.path.exists(os.path.join(directory, "redlock_off.prom")))

    def test_both_metrics_keys_are_a_config_error(self):
        cfg = self.config('metrics_file = "/tmp/a.prom"\nmetrics_dir = "/tmp"\n')
        r = self.run_redlock(["-c", cfg, "-s", self.url, "run", "-k", "x", "--", "true"])
        self.assertStatus(r, 78)
        self.assertIn("config.toml:2:15: give either 'metrics_file' or 'metrics_dir', not both",
                      r.stderr)

    def test_a_missing_directory_is_a_note_and_the_run_goes_on(self):
        path = self.path("nowhere", "x.prom")
        r = self.run_lock(["-k", "nodir", "--metrics", path, "--", "sh", "-c", "exit 4"])
        self.assertStatus(r, 4)
        self.assertMessages(r.stderr)
        self.assertIn(f"redlock: cannot write metrics to {path}", r.stderr)
        self.assertIn("No such file or directory", r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, "said once, not at start and end")

    def unshared(self, script):
        """Runs `script` (sh) in a mount namespace of its own; skips if none can be made."""
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if probe.returncode != 0:
            self.skipTest(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
        return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                              text=True, env=self.env(), timeout=60 * SLACK)

    def test_a_read_only_directory_is_a_note_and_leaves_nothing(self):
        directory = self.mkdtemp("ro-")
        path = os.path.join(directory, "x.prom")
        r = self.unshared(f"mount --bind {directory} {directory} && "
                          f"mount -o remount,bind,ro {directory} && "
                          f"{REDLOCK_BIN} -s {self.url} run -k ro --metrics {path} -- true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"redlock: cannot write metrics to {path}", r.stderr)
        self.assertIn("Read-only file system", r.stderr)
        self.assertEqual(os.listdir(directory), [])

    def test_a_full_disk_is_a_note_and_leaves_no_temporary_file(self):
        directory = self.mkdtemp("full-")
        path = os.path.join(directory, "x.prom")
        r = self.unshared(f"mount -t tmpfs -o size=64k tmpfs {directory} && "
                          f"dd if=/dev/zero of={directory}/filler bs=4k 2>/dev/null; "
                          f"{REDLOCK_BIN} -s {self.url} run -k full --metrics {path} -- true; "
                          f"echo status=$?; ls -a {directory}")
        self.assertIn("status=0", r.stdout, r.stderr)
        self.assertIn(f"redlock: cannot write metrics to {path}", r.stderr)
        self.assertIn("No space left on device", r.stderr)
        names = set(r.stdout.split()) - {"status=0", ".", ".."}
        self.assertEqual(names - {"filler", ".x.prom.lock"}, set(),
                         "a temporary file was left behind")

    @unittest.skipIf(NODE_EXPORTER is None, "prometheus-node-exporter is not installed "
                     "(scripts/setup.sh installs it)")
    def test_node_exporter_serves_the_metrics(self):
        directory = self.mkdtemp("textfile-")
        for args in (["-k", "scraped/job", "--", "true"],
                     ["-k", "scraped/job", "--", "sh", "-c", "exit 2"]):
            self.run_lock(["--metrics", directory] + args)
        port = free_port()
        exporter = subprocess.Popen(
            [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
             "--collector.disable-defaults", "--collector.textfile",
             f"--collector.textfile.directory={directory}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.addCleanup(lambda: (exporter.kill(), exporter.wait(), exporter.stderr.close()))

        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return r.read().decode()
            except OSError:
                if exporter.poll() is not None:
                    raise AssertionError(f"node_exporter exited: {exporter.stderr.read()!r}")
                return None

        text = wait_until(scrape, 30, 0.1, message="node_exporter to answer")
        m = parse_metrics(text)
        self.assertEqual(sample(m, "redlock_runs_total", name="scraped/job", outcome="ran"), 2)
        self.assertEqual(sample(m, "redlock_last_run_exit_status", name="scraped/job"), 2)
        # The textfile collector found no error in the file.
        errors = [line for line in text.splitlines()
                  if line.startswith("node_textfile_scrape_error")]
        self.assertEqual(errors, ["node_textfile_scrape_error 0"], text)


class NotifyTest(MonitoringTest):
    def listener(self, abstract=False):
        path = (f"@redlock-e2e-{os.getpid()}-{time.monotonic_ns()}" if abstract
                else self.path("notify.sock"))
        listener = NotifyListener(path)
        self.addCleanup(listener.stop)
        return listener

    def test_waiting_ready_watchdog_and_stopping(self):
        listener = self.listener()
        holder = self.holder(["-k", "leader"], global_args=["-s", self.url]).wait_ready()
        pid_file = self.path("program.pid")
        env = self.env({"NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "600000"})
        p = self.start_lock(["-k", "leader", "-t", "2s", "--", "sh", "-c",
                             'echo $$ > "$1"; echo "${NOTIFY_SOCKET:-unset}" > "$1.env"; '
                             'exec sleep 60', "sh", pid_file], env=env)
        # First "held by another owner" (the attempt's answer), then, once the holder's
        # metadata is read, who it is.
        host = socket.gethostname()
        status = re.compile(rf"^STATUS=waiting for 'leader', (held by another owner|held by "
                            rf"{re.escape(host)} \(pid {holder.proc.pid}\) for \d+s)$")
        wait_until(lambda: listener.find(lambda m: "by another owner" not in m and
                                         m.startswith("STATUS=waiting")),
                   message="a waiting STATUS naming the holder", proc=p)
        for _, message in listener.find(lambda m: m.startswith("STATUS=waiting")):
            self.assertRegex(message, status)
        self.assertFalse(listener.find(lambda m: "READY=1" in m), "ready before the lock")
        holder.release()
        ready = wait_until(lambda: listener.find(lambda m: "READY=1" in m),
                           message="READY=1", proc=p)
        program = read_pid_file(pid_file, proc=p)
        self.kill_at_cleanup(program)
        self.assertIn(f"STATUS=running PROGRAM (pid {program}) under 'leader'", ready[0][1])
        self.assertEqual(self.read(pid_file + ".env").strip(), "unset",
                         "PROGRAM got NOTIFY_SOCKET without --notify-passthrough")
        # Pings at least every WATCHDOG_USEC/2 while the lease is held.
        time.sleep(1.5)
        pings = [t for t, m in listener.find(lambda m: "WATCHDOG=1" in m)]
        self.assertGreaterEqual(len(pings), 4)
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        self.assertLess(max(gaps), 0.3 * SLACK + 0.05, gaps)
        # Lost: STOPPING=1, and no ping after it.
        self.server.freeze()
        try:
            self.assertEqual(p.wait(30), 79)
        finally:
            self.server.thaw()
        time.sleep(0.3)
        messages = listener.texts()
        stop = [i for i, m in enumerate(messages) if "STOPPING=1" in m]
        self.assertTrue(stop, messages)
        self.assertIn("lost the lock 'leader'", messages[stop[0]])
        self.assertFalse([m for m in messages[stop[0]:] if "WATCHDOG=1" in m],
                         f"a ping after the lease was lost: {messages}")
        self.assertEqual(messages[-1], "STATUS=done: 'leader' lost, exit status 79")

    def test_an_abstract_socket_is_reached(self):
        listener = self.listener(abstract=True)
        r = self.run_lock(["-k", "abstract", "--", "true"],
                          env=self.env({"NOTIFY_SOCKET": listener.path}))
        self.assertStatus(r, 0)
        wait_until(lambda: listener.find(lambda m: m.startswith("STATUS=done")),
                   message="the last STATUS")
        texts = listener.texts()
        self.assertTrue(texts[0].startswith("READY=1\nSTATUS=running PROGRAM"), texts)
        self.assertTrue(any(m.startswith("STOPPING=1") for m in texts), texts)

    def test_passthrough_leaves_ready_to_program(self):
        listener = self.listener()
        out = self.path("env")
        r = self.run_lock(["-k", "daemon", "--notify-passthrough", "--", "sh", "-c",
                           'echo "$NOTIFY_SOCKET" > "$1"', "sh", out],
                          env=self.env({"NOTIFY_SOCKET": listener.path}))
        self.assertStatus(r, 0)
        self.assertEqual(self.read(out).strip(), listener.path)
        wait_until(lambda: listener.find(lambda m: m.startswith("STATUS=done")),
                   message="the last STATUS")
        self.assertFalse(listener.find(lambda m: "READY=1" in m), listener.texts())

    def test_a_watchdog_usec_past_its_range_is_ignored_with_a_verbose_note(self):
        # 0.3 took 2^64-1 (systemd's "infinity", which it refuses) and 2^63 as 1 ms pings.
        for usec in ("18446744073709551615", "9223372036854775808", "0", "5s"):
            with self.subTest(usec=usec):
                listener = self.listener(abstract=True)
                r = self.run_redlock(["-v", "-s", self.url, "run", "-k", "dog", "--", "sleep",
                                      "0.5"],
                                     env=self.env({"NOTIFY_SOCKET": listener.path,
                                                   "WATCHDOG_USEC": usec}))
                self.assertStatus(r, 0)
                wait_until(lambda: listener.find(lambda m: m.startswith("STATUS=done")),
                           message="the last STATUS")
                self.assertEqual(len(listener.find(lambda m: "WATCHDOG=1" in m)), 0)
                self.assertIn(f"redlock: WATCHDOG_USEC '{usec}' is not a number of "
                              "microseconds from 1 to 3153600000000000 (a century); no "
                              "WATCHDOG=1 is sent\n", r.stderr)

    def test_a_socket_that_is_gone_is_a_verbose_note(self):
        env = self.env({"NOTIFY_SOCKET": self.path("gone.sock"), "WATCHDOG_USEC": "100000"})
        r = self.run_lock(["-k", "gone", "--", "sh", "-c", "sleep 0.3; exit 5"], env=env)
        self.assertStatus(r, 5)
        self.assertEqual(r.stderr, "")
        r = self.run_redlock(["-v", "-s", self.url, "run", "-k", "gone", "--", "true"], env=env)
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr.count("NOTIFY_SOCKET"), 1, r.stderr)
        self.assertIn("No such file or directory; systemd is not told how the run goes",
                      r.stderr)


@unittest.skipIf(SYSTEMD_ANALYZE is None, "systemd-analyze is not installed "
                 "(scripts/setup.sh installs the systemd package)")
class UnitFilesTest(E2ETest):
    def test_the_shipped_units_pass_systemd_analyze_verify(self):
        examples = os.path.join(REPO, "packaging", "examples")
        units = [f for f in sorted(os.listdir(examples))
                 if f.endswith((".service", ".timer"))]
        self.assertIn("redlock-leader.service", units)
        # Copied with the redlock being tested where they name /usr/bin/redlock (verify
        # checks that ExecStart's program exists), and a stand-in for my-daemon.
        work = self.mkdtemp("units-")
        for unit in units:
            with open(os.path.join(examples, unit)) as f:
                text = f.read().replace("/usr/bin/redlock", REDLOCK_BIN)
            with open(os.path.join(work, unit), "w") as f:
                f.write(text)
        r = subprocess.run([SYSTEMD_ANALYZE, "verify"] + [os.path.join(work, u) for u in units],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and ("Failed to initialize manager" in r.stderr or
                                  "Failed to setup working directory" in r.stderr):
            self.skipTest(f"systemd-analyze cannot run here: {r.stderr.strip()}")
        self.assertEqual(r.returncode, 0, r.stderr)
        problems = [line for line in r.stderr.splitlines() if "redlock" in line]
        self.assertEqual(problems, [], r.stderr)


# A hook that records its environment ($1: where) and exits with $2.
RECORD_HOOK = ('env | grep ^REDLOCK_ | sort > "{out}.tmp"; mv "{out}.tmp" "{out}"; '
               'exit {code}')


class HookTest(MonitoringTest):
    def lose(self, extra, program=("sh", "-c", "sleep 60"), ttl="1s", env=None):
        """A run under a 1s lease that loses it (the server frozen); returns it ended."""
        p = self.start_lock(["-k", "alerting", "-t", ttl] + list(extra) + ["--"] +
                            list(program), env=env)
        wait_until(lambda: self.server.command("GET", "lock:alerting"), message="the lock",
                   proc=p)
        time.sleep(0.3)
        self.server.freeze()
        try:
            p.wait(60)
        finally:
            self.server.thaw()
        return p

    def env_of(self, path):
        wait_until(lambda: os.path.exists(path), message="the hook's record")
        return dict(line.split("=", 1) for line in self.read(path).splitlines())

    def test_a_lost_lease_runs_the_hook_once_with_its_environment(self):
        out = self.path("hook.env")
        p = self.lose(["--on-lost", RECORD_HOOK.format(out=out, code=0)])
        self.assertEqual(p.returncode, 79, p.stderr)
        env = self.env_of(out)
        self.assertEqual(env["REDLOCK_EVENT"], "lost")
        self.assertEqual(env["REDLOCK_KEY"], "alerting")
        self.assertGreater(int(env["REDLOCK_FENCE"]), 10**15)  # a new name's: from the clock
        self.assertGreaterEqual(int(env["REDLOCK_HELD_MS"]), 300)
        self.assertIn("REDLOCK_REASON", env)
        self.assertNotIn("REDLOCK_TOKEN", env)
        self.assertMessages(p.stderr)

    def test_max_hold_runs_the_hook(self):
        out = self.path("hook.env")
        r = self.run_lock(["-k", "slow", "--max-hold", "300ms", "--on-lost",
                           RECORD_HOOK.format(out=out, code=0), "--", "sleep", "30"])
        self.assertStatus(r, 124)
        env = self.env_of(out)
        self.assertEqual(env["REDLOCK_EVENT"], "max-hold")
        self.assertEqual(env["REDLOCK_KEY"], "slow")

    def test_a_run_that_keeps_its_lock_runs_no_hook(self):
        out = self.path("hook.env")
        r = self.run_lock(["-k", "calm", "--on-lost", RECORD_HOOK.format(out=out, code=0),
                           "--", "true"])
        self.assertStatus(r, 0)
        self.assertFalse(os.path.exists(out))

    def test_a_failing_hook_is_a_note_and_the_status_stays(self):
        out = self.path("hook.env")
        p = self.lose(["--on-lost", RECORD_HOOK.format(out=out, code=3)])
        self.assertEqual(p.returncode, 79)
        self.assertIn("redlock: the --on-lost command exited with status 3", p.stderr)
        self.assertMessages(p.stderr)

    def test_a_hanging_hook_is_bounded_and_leaves_nothing(self):
        cfg = self.config('hook_timeout = "1s"\n')
        pid_file = self.path("hook.pid")
        started = time.monotonic()
        p = self.start_redlock(
            ["-c", cfg, "-s", self.url, "run", "-k", "alerting", "-t", "1s", "--on-lost",
             f'sleep 300 & echo $! > {pid_file}; wait', "--", "sleep", "60"])
        wait_until(lambda: self.server.command("GET", "lock:alerting"), proc=p)
        self.server.freeze()
        try:
            self.assertEqual(p.wait(60), 79)
        finally:
            self.server.thaw()
        sleeper = read_pid_file(pid_file)
        self.kill_at_cleanup(sleeper)
        self.assertLess(time.monotonic() - started, 15 * SLACK)
        self.assertIn("redlock: the --on-lost command was still running after 1s "
                      "(hook_timeout); killed it", p.stderr)
        wait_until(lambda: not pid_alive(sleeper), 5, message="the hook's sleep to be gone")
        self.assertEqual(subprocess.run(["pgrep", "-x", "rl-hook"]).returncode, 1,
                         "a hook runner is left")

    def test_the_hook_outlives_the_stop_of_a_program_that_ignores_term(self):
        # PROGRAM needs SIGKILL after the grace; the hook, started at the TERM, is not
        # part of PROGRAM's tree and finishes its own work.
        done = self.path("hook.done")
        p = self.lose(["--on-lost", f"sleep 0.8; touch {done}"],
                      program=("sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"),
                      ttl="2s")
        self.assertEqual(p.returncode, 79)
        self.assertTrue(os.path.exists(done), p.stderr)

    def test_the_hook_never_delays_the_release(self):
        # A slow hook: redlock's exit waits for it (bounded), the lock does not.
        done = self.path("hook.done")
        p = self.start_lock(["-k", "quick", "--max-hold", "200ms", "--on-lost",
                             f"sleep 2; touch {done}", "--", "sleep", "30"])
        wait_until(lambda: self.server.command("GET", "lock:quick"), proc=p)
        wait_until(lambda: self.server.command("GET", "lock:quick") is None, 10,
                   message="the release", proc=p)
        self.assertIsNone(p.poll(), "redlock did not wait for its hook")
        self.assertFalse(os.path.exists(done))
        self.assertEqual(p.wait(30), 124)
        self.assertTrue(os.path.exists(done))


class EventsTest(MonitoringTest):
    def events(self, path):
        lines = self.read(path).splitlines()
        parsed = [json.loads(line) for line in lines]
        for e in parsed:
            self.assertIn("event", e)
            self.assertRegex(e["at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        return parsed

    def test_a_run_writes_one_json_object_per_line(self):
        path = self.path("events.jsonl")
        r = self.run_lock(["-k", "evented", "--events", path, "--", "sh", "-c", "exit 6"])
        self.assertStatus(r, 6)
        events = self.events(path)
        kinds = [e["event"] for e in events]
        self.assertEqual(kinds, ["acquired", "started", "exited", "released", "end"])
        self.assertGreater(events[0]["fence"], 10**15)  # a new name's: from the clock
        self.assertEqual(events[2]["exit_status"], 6)
        self.assertEqual(events[-1]["outcome"], "ran")
        self.assertEqual(events[-1]["exit_status"], 6)
        self.assertTrue(all(e["name"] == "evented" for e in events))

    def test_waiting_and_a_lost_lease_with_secrets_redacted(self):
        path = self.path("events.jsonl")
        holder = self.holder(["-k", "evented"], global_args=["-s", self.url]).wait_ready()
        password = "hunter2-secret"
        p = self.start_lock(["-k", "evented", "-t", "1s", "--events", path, "--", "sh", "-c",
                             "sleep 60", "sh", "--password", password])
        wait_until(lambda: os.path.exists(path) and "holder" in self.read(path),
                   message="the holder event", proc=p)
        holder.release()
        wait_until(lambda: '"started"' in self.read(path), message="the start", proc=p)
        self.server.freeze()
        try:
            self.assertEqual(p.wait(30), 79)
        finally:
            self.server.thaw()
        events = self.events(path)
        kinds = [e["event"] for e in events]
        for kind in ("waiting", "holder", "acquired", "started", "stopping", "exited", "end"):
            self.assertIn(kind, kinds)
        holder_event = next(e for e in events if e["event"] == "holder")
        self.assertEqual(holder_event["holder"]["pid"], holder.proc.pid)
        stopping = next(e for e in events if e["event"] == "stopping")
        self.assertEqual(stopping["reason"], "lost")
        self.assertEqual(events[-1]["outcome"], "lost")
        self.assertNotIn(password, self.read(path))

    def test_an_inherited_descriptor(self):
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        p = self.start_redlock(["-s", self.url, "run", "-k", "piped", "--events",
                                f"fd:{write_end}", "--", "true"], pass_fds=(write_end,))
        os.close(write_end)
        self.assertEqual(p.wait(30), 0, p.stderr)
        data = b""
        while chunk := os.read(read_end, 65536):
            data += chunk
        kinds = [json.loads(line)["event"] for line in data.decode().splitlines()]
        self.assertEqual(kinds[-1], "end")

    def test_bad_targets(self):
        r = self.run_lock(["-k", "x", "--events", "fd:zz", "--", "true"])
        self.assertStatus(r, 64)
        r = self.run_lock(["-k", "x", "--events", "fd:1", "--", "true"])
        self.assertStatus(r, 64)
        self.assertIn("stdout is PROGRAM's", r.stderr)
        r = self.run_lock(["-k", "x", "--events", self.path("no", "such"), "--", "true"])
        self.assertStatus(r, 0)
        self.assertIn("running without --events", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
