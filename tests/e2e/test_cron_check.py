"""`redlock cron --check FILE`: the crontab read as the daemon will read it, each job listed
with its identity, zone, settings and next fires; 78 for a bad file, 64 for bad usage."""

import json
import unittest

from redlock_e2e import E2ETest

CRONTAB = """\
# the same file on every host
CRON_TZ=Europe/Berlin
MAILTO=""
30 2 * * 1-5   /usr/local/bin/backup --all
# redlock: name=monthly-report catch-up=6h overlap=queue timeout=2h
0 9 1 * *      ./monthly-report.sh
"""


class CronCheckTest(E2ETest):
    def check(self, text, *args, env=None):
        path = self.write_file("crontab", text)
        return self.run_redlock(["cron", "--check", *args, path],
                                env=env or self.env({"TZ": "UTC"})), path

    def test_a_valid_file_lists_each_job_and_its_next_fires_in_utc_and_its_zone(self):
        r, path = self.check(CRONTAB, "--from", "2026-03-27T00:00:00Z")
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout, """\
backup-0ae21532  (line 4, identity derived from the line)
  schedule  30 2 * * 1-5  (Europe/Berlin)
  command   /usr/local/bin/backup --all
  settings  overlap=skip
  next      2026-03-27T01:30:00Z  2026-03-27T02:30:00+01:00
            2026-03-30T00:30:00Z  2026-03-30T02:30:00+02:00
            2026-03-31T00:30:00Z  2026-03-31T02:30:00+02:00

monthly-report  (line 6)
  schedule  0 9 1 * *  (Europe/Berlin)
  command   ./monthly-report.sh
  settings  catch-up=6h overlap=queue timeout=2h
  next      2026-04-01T07:00:00Z  2026-04-01T09:00:00+02:00
            2026-05-01T07:00:00Z  2026-05-01T09:00:00+02:00
            2026-06-01T07:00:00Z  2026-06-01T09:00:00+02:00
""")
        self.assertEqual(r.stderr, (
            f"redlock: {path}:4: warning: job backup-0ae21532 has no name= setting: its "
            "identity changes if any host's copy of this line differs (schedule, zone or "
            "command)\n"))

    def test_n_sets_how_many_fires_are_listed(self):
        r, _ = self.check("@every 90s sync\n", "-n", "5", "--from", "1970-01-01T00:00:00Z")
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout.count("1970-01-01T"), 2 * 5)
        self.assertIn("  next      1970-01-01T00:01:30Z  1970-01-01T00:01:30+00:00\n", r.stdout)
        self.assertIn("            1970-01-01T00:07:30Z  1970-01-01T00:07:30+00:00\n", r.stdout)

    def test_json_is_one_document_with_every_job(self):
        r, path = self.check("PATH=/bin\nTZ=Asia/Kolkata\n# redlock: name=a limit=2 at-least-once\n"
                             "0 0 * * * true\n", "--json", "-n", "2",
                             "--from", "2026-01-01T00:00:00Z")
        self.assertStatus(r, 0)
        doc = json.loads(r.stdout)
        self.assertEqual(doc, {"file": path, "jobs": [{
            "identity": "a", "named": True, "line": 4, "schedule": "0 0 * * *",
            "zone": "Asia/Kolkata", "command": "true", "shell": "/bin/sh",
            "environment": {"PATH": "/bin", "TZ": "Asia/Kolkata"},
            "settings": {"catch_up_ms": None, "overlap": "skip", "timeout_ms": None,
                         "jitter_ms": 0, "limit": 2, "at_least_once": True, "dir": None},
            "next": [{"utc": "2026-01-01T18:30:00Z", "local": "2026-01-02T00:00:00+05:30"},
                     {"utc": "2026-01-02T18:30:00Z", "local": "2026-01-03T00:00:00+05:30"}],
        }]})

    def test_warnings_go_to_stderr_in_the_order_of_the_lines(self):
        r, path = self.check("* * * * * first\nMAILTO=ops@example.com\n"
                             "# redlock: name=x\n* * * * * second\n0 2 * * * root /bin/backup\n",
                             env=self.env({"TZ": "Europe/Berlin", "PATH": "/usr/bin:/bin"}))
        self.assertStatus(r, 0)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 5, r.stderr)
        self.assertRegex(lines[0], rf"^redlock: {path}:1: warning: job first-[0-9a-f]{{8}} has "
                                   "no name= setting")
        self.assertEqual(lines[1], f"redlock: {path}:1: warning: this job runs in UTC, not in "
                                   "this host's zone (Europe/Berlin): every host must agree, so "
                                   "set CRON_TZ= before it for local time")
        self.assertEqual(lines[2], f"redlock: {path}:2: warning: MAILTO is ignored: redlock "
                                   "mails nothing; a job's output goes to the daemon's stdout "
                                   "and stderr")
        self.assertRegex(lines[3], rf"^redlock: {path}:5: warning: job root-")
        self.assertEqual(lines[4], f"redlock: {path}:5: warning: the command starts with 'root', "
                                   "a user name: a redlock crontab has no user column (as "
                                   "supercronic's); the job runs as the daemon's user")
        r, _ = self.check("# redlock: name=x\n* * * * * first\n")
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        r, _ = self.check("# redlock: name=x\n* * * * * first\n", "-q")
        self.assertEqual(r.stderr, "")

    def test_a_bad_file_is_78_naming_the_line_the_column_and_the_field(self):
        r, path = self.check("CRON_TZ=Europe/Berlin\n30 2 * 13 * /bin/x\n")
        self.assertStatus(r, 78)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, f"redlock: {path}:2:8: month: 13 is out of range 1-12\n")
        r, path = self.check("CRON_TZ=Europe/Berln\n")
        self.assertStatus(r, 78)
        self.assertEqual(r.stderr, f"redlock: {path}:1:9: time zone 'Europe/Berln' is unknown (no "
                                   "zone file of that name in /usr/share/zoneinfo)\n")
        r = self.run_redlock(["cron", "--check", self.path("missing")])
        self.assertStatus(r, 78)
        self.assertEqual(r.stderr, f"redlock: cannot read crontab '{self.path('missing')}': No "
                                   "such file or directory\n")

    def test_check_reads_no_config_and_talks_to_no_server(self):
        broken = self.write_file("broken.toml", "this is not toml")
        r, _ = self.check("# redlock: name=x\n* * * * * y\n",
                          env=self.env({"REDLOCK_CONFIG": broken, "TZ": "UTC"}))
        self.assertStatus(r, 0)
        self.assertIn("  schedule  * * * * *  (UTC)\n", r.stdout)

    def test_usage_errors_are_64(self):
        path = self.write_file("crontab", "* * * * * x\n")
        for args, message in [
            (["cron", "--check"], "redlock: cron --check: a crontab FILE is required\n"),
            (["cron", "--check", "-n", "0", path], "redlock: invalid -n '0': expected 1 to 1000\n"),
            (["cron", "--check", "--from", "yesterday", path],
             "redlock: invalid --from 'yesterday': expected an ISO 8601 UTC time such as "
             "2026-03-29T00:00:00Z\n"),
            (["cron", "--check", path, path],
             f"redlock: unexpected argument '{path}' (see 'redlock cron --help')\n"),
        ]:
            with self.subTest(args=args):
                r = self.run_redlock(args)
                self.assertStatus(r, 64)
                self.assertEqual(r.stderr, message)
                self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
