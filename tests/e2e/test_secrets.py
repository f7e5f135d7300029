"""Nothing redlock stores or shows may carry a password (issue: holder metadata leak).

`acquire` records the command line of the script that ran it, and cron and CI run lines
through `sh -c "<line>"`, so the URL with the password is in that command line; `run`
records PROGRAM's own arguments, which may carry secrets of their own. Checked on the raw
metadata hash in Redis and on what status shows, text and JSON.
"""

import json
import os
import shutil
import signal
import subprocess
import unittest

from redlock_e2e import (E2ETest, HOLDER_SCRIPT, REDLOCK_BIN, SLACK, Timeout, kill_quietly,
                         wait_until)

PASSWORD = "s3cret-Pw-42"


class SecretsTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server(requirepass=PASSWORD)
        self.url = self.server.url(password=PASSWORD)

    def meta_values(self, name):
        fields = self.server.command("HGETALL", "{lock:" + name + "}:meta")
        self.assertTrue(fields, "no holder metadata")
        return fields

    def assertNoSecret(self, text, secrets=(PASSWORD,)):
        for secret in secrets:
            self.assertNotIn(secret, text)

    def assertStatusClean(self, name, secrets=(PASSWORD,)):
        for args in (["status", name], ["status", "--json", name], ["list"], ["list", "--json"]):
            r = self.run_redlock(["-s", self.url] + args)
            self.assertStatus(r, 0)
            self.assertNoSecret(r.stdout + r.stderr, secrets)
        return json.loads(self.run_redlock(["-s", self.url, "status", "--json", name]).stdout)

    def test_acquire_from_sh_c_does_not_store_the_url_password(self):
        line = f"tok=$('{REDLOCK_BIN}' -s '{self.url}' acquire -t 1m job) && echo \"$tok\""
        cp = subprocess.run(["sh", "-c", line], capture_output=True, env=self.env(),
                            cwd=self.tmp, timeout=30 * SLACK, stdin=subprocess.DEVNULL)
        self.assertEqual(cp.returncode, 0, cp)
        token = cp.stdout.decode().strip()
        values = self.meta_values("job")
        self.assertNoSecret(" ".join(values))
        lock = self.assertStatusClean("job")["locks"][0]
        # The command line is still there, masked where the password was.
        self.assertIn("acquire -t 1m job", lock["holder"]["command"])
        self.assertIn("redis://:***@127.0.0.1", lock["holder"]["command"])
        r = self.run_redlock(["-s", self.url, "release", "job", "--token", token])
        self.assertStatus(r, 0)

    def test_run_masks_secrets_in_program_arguments(self):
        hold = self.mkdtemp("hold-")
        argv = ["sh", "-c", HOLDER_SCRIPT, "sh", hold, "0",
                "--password", "hunter2", f"PGPASSWORD={PASSWORD}x", "--known", PASSWORD]
        proc = self.start_redlock(["-s", self.url, "run", "-k", "job", "--"] + argv)
        wait_until(lambda: self.server.command("EXISTS", "{lock:job}:meta"), 15,
                   message="the metadata", proc=proc)
        secrets = (PASSWORD, "hunter2")
        self.assertNoSecret(" ".join(self.meta_values("job")), secrets)
        lock = self.assertStatusClean("job", secrets)["locks"][0]
        self.assertIn("--password *** PGPASSWORD=*** --known ***", lock["holder"]["command"])
        open(f"{hold}/go", "w").close()
        self.assertEqual(proc.wait(30), 0)

    def test_a_password_from_the_environment_is_masked_too(self):
        config = self.write_file("c.toml", f'[[servers]]\nurl = "{self.server.url()}"\n'
                                           'password_env = "JOB_REDIS_PW"\n')
        r = self.run_redlock(["-c", config, "acquire", "-t", "1m", "envjob"],
                             env=self.env({"JOB_REDIS_PW": PASSWORD}))
        self.assertStatus(r, 0)
        hold = self.mkdtemp("hold-")
        proc = self.start_redlock(
            ["-c", config, "run", "-k", "other", "--", "sh", "-c", HOLDER_SCRIPT, "sh", hold,
             "0", f"echo {PASSWORD}"], env=self.env({"JOB_REDIS_PW": PASSWORD}))
        wait_until(lambda: self.server.command("EXISTS", "{lock:other}:meta"), 15,
                   message="the metadata", proc=proc)
        self.assertNoSecret(" ".join(self.meta_values("other")))
        open(f"{hold}/go", "w").close()
        self.assertEqual(proc.wait(30), 0)


NOBODY = 65534


class OutOfReachTest(E2ETest):
    """A run keeps its servers' passwords in memory and in its will (a memfd its watchdog
    holds): PROGRAM, which runs as the same user, must not read them through
    /proc/$PPID/fd or /proc/$PPID/mem. Run as an unprivileged user: root reads anything."""

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv(1) to run redlock as another user")
        self.server = self.redis_server(requirepass=PASSWORD)
        os.chmod(self.tmp, 0o755)
        self.shared = self.mkdtemp("shared-")
        os.chmod(self.shared, 0o777)
        self.config = self.write_file("c.toml", f'[[servers]]\nurl = "{self.server.url()}"\n'
                                                 'password_env = "JOB_REDIS_PW"\n', mode=0o644)

    def start_as_nobody(self, args):
        env = self.env({"JOB_REDIS_PW": PASSWORD, "REDLOCK_NO_CGROUP": "1",
                        "HOME": self.shared, "XDG_CONFIG_HOME": self.shared})
        proc = subprocess.Popen(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
             REDLOCK_BIN, "-c", self.config] + args,
            env=env, cwd=self.shared, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        return proc

    def test_program_cannot_read_the_runs_will_or_memory(self):
        seen = os.path.join(self.shared, "seen")
        probe = ('for f in /proc/$PPID/fd/* /proc/$PPID/mem; do '
                 'if head -c 1 "$f" >/dev/null 2>&1; then echo "read $f"; fi; done > "$1"; '
                 'ls /proc/$PPID/fd >/dev/null 2>&1 && echo listed >> "$1"; :')
        proc = self.start_as_nobody(["run", "-k", "reach", "--", "sh", "-c", probe, "sh", seen])
        out, err = proc.communicate(timeout=30 * SLACK)
        self.assertEqual(proc.returncode, 0, err)
        with open(seen) as f:
            self.assertEqual(f.read(), "", "PROGRAM read what redlock holds")

    def test_the_watchdog_still_frees_a_killed_runs_lock(self):
        # Not dumpable, redlock's /proc files belong to root: the watchdog, which runs as
        # the same user, must still read its tree there, or no kill would be proven.
        # Killed once PROGRAM runs: killed between its acquisition and PROGRAM's exec, the
        # lock was kept to its TTL in about half of the tries (a gap not closed yet).
        started = os.path.join(self.shared, "started")
        proc = self.start_as_nobody(["run", "-k", "reach", "-t", "60s", "--", "sh", "-c",
                                     'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 600',
                                     "sh", started])
        wait_until(lambda: os.path.exists(started), 15, message="PROGRAM to start")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        try:
            wait_until(lambda: not self.server.command("EXISTS", "lock:reach"),
                       10, message="the lock freed long before its 60 s ttl")
        except Timeout:
            kill_quietly(-proc.pid)  # what the watchdog said, on redlock's stderr
            raise AssertionError(proc.stderr.read().decode(errors="replace")) from None


if __name__ == "__main__":
    unittest.main()
