"""README.md stays a front door, and the shell examples of README.md and docs/*.md run.

Every ```sh block is run, with bash -e, against a redis-server this test starts on a
unix socket: `redlock` on PATH is the built binary, a config (REDLOCK_CONFIG) names that
server, and so do $LOCK_REDIS and `redis-cli`. The placeholders the examples call are
stubs that succeed: the commands in STUB_COMMANDS and the scripts in STUB_SCRIPTS (in
the working directory). A block that needs more (root, a build, another machine) says
so on the line before it, `<!-- not run: REASON -->`, and is left out. Other fences
(```, ```toml, ```ini, ```yaml) are shown, never run."""

import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import support

README_MAX_LINES = 250

# The placeholders of the examples: commands on PATH, scripts in the working directory.
STUB_COMMANDS = ["step1", "step2", "write_the_state", "my-daemon"]
STUB_SCRIPTS = ["batch.sh", "deploy.sh", "transcode.sh", "job"]

NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")


def shell_blocks(path):
    """(first line number, text, reason it is not run or None) of each ```sh block."""
    lines = open(path).read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            fence = lines[i][3:].strip()
            start = i + 1
            end = start
            while end < len(lines) and lines[end] != "```":
                end += 1
            if fence == "sh":
                before = next((line for line in reversed(lines[:i]) if line.strip()), "")
                match = NOT_RUN.match(before)
                blocks.append((start + 1, "\n".join(lines[start:end]) + "\n",
                               match.group(1) if match else None))
            i = end + 1
        else:
            i += 1
    return blocks


def heading_anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    anchors = set()
    in_fence = False
    for line in open(path).read().split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


class ReadmeIsAFrontDoor(unittest.TestCase):
    def test_readme_has_at_most_250_lines(self):
        with open(support.README) as f:
            count = len(f.read().splitlines())
        self.assertLessEqual(count, README_MAX_LINES,
                             f"README.md has {count} lines, more than {README_MAX_LINES}: "
                             f"move the details to docs/ or redlock(1)")

    def test_links_to_files_and_sections_resolve(self):
        for path in support.markdown_docs():
            text = open(path).read()
            for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
                if re.match(r"^[a-z]+:", target):
                    continue
                linked = os.path.normpath(os.path.join(os.path.dirname(path), target)
                                          if target else path)
                with self.subTest(doc=os.path.relpath(path, support.SOURCE_DIR),
                                  link=f"{target}#{anchor}"):
                    self.assertTrue(os.path.exists(linked), target)
                    if anchor and linked.endswith(".md"):
                        self.assertIn(anchor, heading_anchors(linked))

    def test_every_block_left_out_says_why(self):
        for path in support.markdown_docs():
            for line, _, reason in shell_blocks(path):
                if reason is not None:
                    with self.subTest(doc=os.path.relpath(path, support.SOURCE_DIR), line=line):
                        self.assertGreater(len(reason.strip()), 5)


class ShellExamplesRun(unittest.TestCase):
    def setUp(self):
        redis = shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if redis is None or cli is None:
            self.skipTest("redis-server and redis-cli are needed (apt-get install redis-server)")
        self.dir = tempfile.mkdtemp(prefix="redlock-docs-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.socket = os.path.join(self.dir, "redis.sock")
        self.server = subprocess.Popen(
            [redis, "--port", "0", "--unixsocket", self.socket, "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop_server)
        self.cli = cli
        deadline = time.monotonic() + 30
        while not self.ping():
            if time.monotonic() > deadline or self.server.poll() is not None:
                self.fail("redis-server did not start")
            time.sleep(0.05)
        self.bin = os.path.join(self.dir, "bin")
        os.mkdir(self.bin)
        os.symlink(os.path.abspath(support.REDLOCK_BIN), os.path.join(self.bin, "redlock"))
        self.stub(os.path.join(self.bin, "redis-cli"), f'exec {cli} -s {self.socket} "$@"\n')
        for name in STUB_COMMANDS:
            self.stub(os.path.join(self.bin, name), "exit 0\n")
        self.url = f"unix://{self.socket}"
        self.config = os.path.join(self.dir, "config.toml")
        with open(self.config, "w") as f:
            f.write(f'[[servers]]\nurl = "{self.url}"\n')

    def stop_server(self):
        self.server.terminate()
        try:
            self.server.wait(30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()

    def ping(self):
        result = subprocess.run([self.cli, "-s", self.socket, "PING"], capture_output=True,
                                text=True, timeout=30)
        return result.stdout.strip() == "PONG"

    @staticmethod
    def stub(path, body):
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)

    def run_block(self, text):
        """Runs one block in a fresh working directory on an emptied server."""
        subprocess.run([self.cli, "-s", self.socket, "FLUSHALL"], capture_output=True,
                       check=True, timeout=30)
        work = tempfile.mkdtemp(dir=self.dir)
        for name in STUB_SCRIPTS:
            self.stub(os.path.join(work, name), "exit 0\n")
        env = {
            "PATH": self.bin + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": work,
            "LANG": "C.UTF-8",
            "REDLOCK_CONFIG": self.config,
            "LOCK_REDIS": self.url,
        }
        # A sanitizer build's settings (ASAN_OPTIONS, ...) reach the examples' redlock.
        env.update({k: v for k, v in os.environ.items() if k.endswith("SAN_OPTIONS")})
        return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=work,
                              env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)

    def test_the_shell_examples_run(self):
        ran = 0
        for path in support.markdown_docs():
            for line, text, reason in shell_blocks(path):
                if reason is not None:
                    continue
                where = f"{os.path.relpath(path, support.SOURCE_DIR)}:{line}"
                with self.subTest(block=where):
                    result = self.run_block(text)
                    self.assertEqual(result.returncode, 0,
                                     f"the ```sh block at {where} exited {result.returncode}"
                                     f"\n{text}stdout:\n{result.stdout}\nstderr:\n"
                                     f"{result.stderr}")
                    ran += 1
        # The README's own examples at least: a run, a script, the inspection commands.
        self.assertGreaterEqual(ran, 4)


if __name__ == "__main__":
    unittest.main()
