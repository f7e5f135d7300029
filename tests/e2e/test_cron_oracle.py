"""The fire times `redlock cron --check` lists, against implementations that share no code
with it: croniter (python3-croniter, a test tool only) for 1,200 random expressions in
UTC, and a brute-force reading of the ISC daylight-saving rule over Python's zoneinfo for
every change of offset in 2026-2030 in five zones.

croniter's differences from cron(5), which the generator steers clear of: it decides
whether the two day fields are OR-ed from their expanded values (a day field that lists
every day counts as '*', and '*/2' does not), not from a leading '*'; it puts the
seconds of six fields last; its day-of-week 7 inside a range or after a step is never
matched; and it does not take supercronic's '*' year. And a bug of its own (1.3.5): from
a day past the last listed day that a month has, it overshoots into the next month
('0 0 */10 * *' after 21 February gives 11 March, not 1 March), so the days of the month
generated stay at or under 28; the unit tests (tests/cron/fire_test.cpp) cover 29-31."""

import datetime
import json
import os
import random
import sys
import unittest
import zoneinfo

from redlock_e2e import E2ETest

try:
    import croniter
except ImportError:  # a Python of its own (pyenv) beside Debian's python3-croniter
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import croniter
    except ImportError:
        croniter = None

UTC = datetime.timezone.utc
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
MONTH_LENGTH = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def iso(t):
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Generator:
    """Random fields, each written twice: as redlock reads it and as croniter does."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def value(self, low, high, names=None, name_base=0):
        v = self.rng.randint(low, high)
        if names and self.rng.random() < 0.4:
            text = names[v - name_base]
            return v, text.upper() if self.rng.random() < 0.2 else text
        return v, str(v)

    def item(self, low, high, names=None, name_base=0, weekday=False, to_the_end=True):
        kind = self.rng.choice(["one", "one", "range", "range-step", "from-step"])
        if kind == "from-step" and (weekday or not to_the_end):
            kind = "range-step"  # N/S runs to the field's end (croniter's dead 7 for days)
        if kind == "one":
            if weekday and self.rng.random() < 0.1:
                return "7", "0"  # Sunday; croniter's six fields take 7 for no day
            _, text = self.value(low, high, names, name_base)
            return text, text
        a, ta = self.value(low, high, names, name_base)
        b, tb = self.value(low, high, names, name_base)
        if a > b:
            (a, ta), (b, tb) = (b, tb), (a, ta)
        if kind == "range":
            return f"{ta}-{tb}", f"{ta}-{tb}"
        step = self.rng.randint(1, max(1, (high - low) // 2))
        if kind == "range-step":
            return f"{ta}-{tb}/{step}", f"{ta}-{tb}/{step}"
        return f"{a}/{step}", f"{a}/{step}"

    def field(self, low, high, names=None, name_base=0, weekday=False, star=0.3, top=None):
        """`top`: the field's values, '*' aside, stay at or under it (*/N too)."""
        r = self.rng.random()
        if r < star:
            return "*", "*"
        if r < star + 0.15:
            steps = [n for n in range(2, max(3, (high - low) // 2 + 1))
                     if top is None or low + (high - low) // n * n <= top]
            step = self.rng.choice(steps)
            return f"*/{step}", f"*/{step}"
        items = [self.item(low, high if top is None else top, names, name_base, weekday,
                           to_the_end=top is None)
                 for _ in range(self.rng.choice([1, 1, 2, 3]))]
        return ",".join(i[0] for i in items), ",".join(i[1] for i in items)

    def expression(self):
        """(redlock's text, croniter's text)."""
        if self.rng.random() < 0.03:
            shorthand = self.rng.choice(["@yearly", "@annually", "@monthly", "@weekly",
                                         "@daily", "@midnight", "@hourly"])
            return shorthand, shorthand
        fields = [
            self.field(0, 59, star=0.1),
            self.field(0, 23, star=0.3),
            self.field(1, 31, star=0.6, top=28),
            self.field(1, 12, MONTHS, 1, star=0.6),
            self.field(0, 6, DAYS, 0, weekday=True, star=0.6),
        ]
        ours = " ".join(f[0] for f in fields)
        theirs = " ".join(f[1] for f in fields)
        form = self.rng.random()
        if form < 0.25:  # seconds first; croniter wants them last
            second = self.field(0, 59, star=0.2)
            return f"{second[0]} {ours}", f"{theirs} {second[1]}"
        if form < 0.30:  # supercronic's seven fields
            second = self.field(0, 59, star=0.2)
            return f"{second[0]} {ours} *", f"{theirs} {second[1]}"
        return ours, theirs


def days_or(ours):
    """Whether cron(5) ORs the two day fields: neither starts with '*'."""
    if ours.startswith("@"):
        return False
    fields = ours.split()
    day, weekday = (fields[2], fields[4]) if len(fields) == 5 else (fields[3], fields[5])
    return not day.startswith("*") and not weekday.startswith("*")


def same_day_rule(ours, expanded):
    """Whether croniter and cron(5) agree on OR-ing the two day fields."""
    return days_or(ours) == (expanded[2] != ["*"] and expanded[4] != ["*"])


def can_fire(expanded):
    if expanded[2] == ["*"] or expanded[4] != ["*"]:
        return True
    months = range(1, 13) if expanded[3] == ["*"] else expanded[3]
    return any(d <= MONTH_LENGTH[m - 1] for m in months for d in expanded[2])


class AgainstCroniter(E2ETest):
    EXPRESSIONS = 1200
    FIRES = 50
    START = datetime.datetime(2026, 2, 14, 13, 37, 11)  # mid-minute, naive: UTC for croniter

    def test_the_next_50_fires_of_1200_random_expressions_are_croniters(self):
        self.assertIsNotNone(croniter, "python3-croniter is missing (scripts/setup.sh installs it)")
        gen = Generator(seed=48)
        cases = []
        while len(cases) < self.EXPRESSIONS:
            ours, theirs = gen.expression()
            expanded, _ = croniter.croniter.expand(theirs)
            if same_day_rule(ours, expanded) and can_fire(expanded):
                cases.append((ours, theirs))
        lines = [f"{ours} true {i}" for i, (ours, _) in enumerate(cases)]
        path = self.write_file("crontab", "\n".join(lines) + "\n")
        r = self.run_redlock(["-q", "cron", "--check", "--json", "-n", str(self.FIRES),
                              "--from", iso(self.START.replace(tzinfo=UTC)), path],
                             timeout=120)
        self.assertStatus(r, 0)
        jobs = json.loads(r.stdout)["jobs"]
        self.assertEqual(len(jobs), len(cases))
        mismatches = []
        for (ours, theirs), job in zip(cases, jobs):
            it = croniter.croniter(theirs, self.START)
            expected = [iso(it.get_next(datetime.datetime).replace(tzinfo=UTC))
                        for _ in range(self.FIRES)]
            got = [fire["utc"] for fire in job["next"]]
            if got != expected:
                mismatches.append(f"{ours!r} (croniter {theirs!r}): ours {got[:4]}..., "
                                  f"croniter {expected[:4]}...")
        self.assertEqual(mismatches, [])
        forms = [len(ours.split()) for ours, _ in cases]
        self.assertGreater(forms.count(6), 150)
        self.assertGreater(forms.count(7), 20)
        self.assertGreater(sum(days_or(ours) for ours, _ in cases), 50)


# --- daylight saving ----------------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe",
         "Asia/Kolkata"]
WINDOW = datetime.timedelta(hours=3)


def changes(zone, start, end):
    """[(instant, offset before, offset after)]: sampled every 15 minutes, then halved to
    the second."""
    out = []
    step = datetime.timedelta(minutes=15)
    t = start
    before = t.astimezone(zone).utcoffset()
    while t < end:
        after = (t + step).astimezone(zone).utcoffset()
        if after != before:
            low, high = t, t + step
            while high - low > datetime.timedelta(seconds=1):
                mid = low + (high - low) / 2
                mid = mid.replace(microsecond=0)
                if mid.astimezone(zone).utcoffset() == before:
                    low = mid
                else:
                    high = mid
            out.append((high, before, after))
            before = after
        t += step
    return out


def civil(t, zone):
    return t.astimezone(zone).replace(tzinfo=None)


def matches(minute, hour, when):
    return (minute is None or when.minute == minute) and (hour is None or when.hour == hour)


def clock_fires(minute, hour, zone, start, end):
    """A job that follows the clock: every UTC minute whose civil time matches."""
    out, t = [], start.replace(second=0) + datetime.timedelta(minutes=1)
    while t <= end:
        if matches(minute, hour, civil(t, zone)):
            out.append(t)
        t += datetime.timedelta(minutes=1)
    return out


def fixed_fires(minute, hour, zone, start, end):
    """A fixed-time job, by cron(8)'s rule read literally: each matching civil minute fires
    at its first instant, or, when no instant shows it, at the first instant after it."""
    out = set()
    first = civil(start, zone) - datetime.timedelta(hours=3)
    last = civil(end, zone) + datetime.timedelta(hours=3)
    when = first.replace(second=0)
    while when <= last:
        if matches(minute, hour, when):
            instants = []
            for fold in (0, 1):
                t = when.replace(tzinfo=zone, fold=fold).astimezone(UTC)
                if civil(t, zone) == when:
                    instants.append(t)
            if instants:
                fire = min(instants)
            else:  # skipped: the first second whose civil time is past it
                second = datetime.timedelta(seconds=1)
                fire = when.replace(tzinfo=zone, fold=0).astimezone(UTC)  # past it (PEP 495)
                while civil(fire - second, zone) > when:
                    fire -= second
            if start < fire <= end:
                out.add(fire)
        when += datetime.timedelta(minutes=1)
    return sorted(out)


class DaylightSaving(E2ETest):
    def fires(self, crontab, start, count):
        path = self.write_file("crontab", crontab)
        r = self.run_redlock(["-q", "cron", "--check", "--json", "-n", str(count),
                              "--from", iso(start), path])
        self.assertStatus(r, 0)
        return {job["identity"]: [fire["utc"] for fire in job["next"]]
                for job in json.loads(r.stdout)["jobs"]}

    def test_every_change_of_2026_to_2030_in_five_zones(self):
        start = datetime.datetime(2026, 1, 1, tzinfo=UTC)
        end = datetime.datetime(2031, 1, 1, tzinfo=UTC)
        checked = 0
        for name in ZONES:
            zone = zoneinfo.ZoneInfo(name)
            found = changes(zone, start, end)
            if name == "Asia/Kolkata":
                self.assertEqual(found, [])
                # No change: the Berlin changes' hours are ordinary hours here.
                found = [(t, None, None) for t, _, _ in
                         changes(zoneinfo.ZoneInfo("Europe/Berlin"), start, end)]
            else:
                self.assertEqual(len(found), 10, name)
            for at, before, after in found:
                with self.subTest(zone=name, change=iso(at)):
                    self.check_change(name, zone, at, before, after)
                    checked += 1
        self.assertEqual(checked, 50)

    def check_change(self, name, zone, at, before, after):
        # A fixed time inside the skipped or repeated civil times (or at the change).
        if before is None:
            inside = civil(at, zone)
        else:
            low, high = sorted([at + before, at + after])
            inside = (low + (high - low) / 2).replace(tzinfo=None, second=0)
        jobs = {
            "fixed": (inside.minute, inside.hour),
            "hourly": (0, None),
            "minutely": (None, None),
            "minutes-of-an-hour": (None, inside.hour),
        }
        crontab = f"CRON_TZ={name}\n"
        crontab += f"# redlock: name=fixed\n{inside.minute} {inside.hour} * * * x\n"
        crontab += "# redlock: name=hourly\n0 * * * * x\n"
        crontab += "# redlock: name=minutely\n* * * * * x\n"
        crontab += f"# redlock: name=minutes-of-an-hour\n* {inside.hour} * * * x\n"
        window_start, window_end = at - WINDOW, at + WINDOW
        listed = self.fires(crontab, window_start, 500)
        for job, (minute, hour) in jobs.items():
            fixed = job == "fixed"
            expected = (fixed_fires if fixed else clock_fires)(minute, hour, zone, window_start,
                                                               window_end)
            got = [t for t in listed[job] if t <= iso(window_end)]
            self.assertEqual(got, [iso(t) for t in expected], job)
            self.assertTrue(expected or job == "minutes-of-an-hour", job)


if __name__ == "__main__":
    unittest.main()
