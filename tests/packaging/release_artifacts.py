"""What scripts/release.sh left in dist/ for the `release: build` fixture: the six
artifacts and SHA256SUMS, tarballs laid out as a prefix tree with fixed owners and times,
binaries within the glibc and size limits (and the check that says so refuses a binary
that is not), .rpm metadata and rpmlint. The .debs: test_deb.ReleaseDebianPackages."""

import os
import re
import subprocess
import tarfile
import tempfile
import unittest

import release
import support

TARBALL_FILES = [
    "bin/redlock",
    "share/man/man1/redlock.1.gz",
    "share/man/man5/redlock.toml.5.gz",
    "share/man/man5/redlock-cron.5.gz",
    "share/bash-completion/completions/redlock",
    "share/zsh/vendor-completions/_redlock",
    "share/fish/vendor_completions.d/redlock.fish",
    "share/doc/redlock/config.example.toml",
    "share/doc/redlock/copyright",
    "share/doc/redlock/changelog.gz",
    "share/doc/redlock/examples/crontab",
    "share/doc/redlock/examples/redlock-nightly.service",
    "share/doc/redlock/examples/redlock-nightly.timer",
    "share/doc/redlock/LICENSE",
    "share/doc/redlock/README.md",
    "share/doc/redlock/docs/safety.md",
    "share/doc/redlock/docs/redlock.md",
    "share/doc/redlock/docs/monitoring.md",
    "share/doc/redlock/docs/operations.md",
    "share/doc/redlock/docs/development.md",
]

# What a release binary may ask of the system, as rpm's dependency generator words it.
GLIBC_REQUIRES = re.compile(r"^(rtld\(GNU_HASH\)|rpmlib\(.*\)( <= \S+)?|"
                            r"(libc\.so\.6|libdl\.so\.2|libpthread\.so\.0|libm\.so\.6|"
                            r"ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)"
                            r"(\((GLIBC_[0-9.]+)?\))?(\(64bit\))?)$")


def check_binary(binary, arch):
    """check_binary.cmake's verdict on `binary`: (exit status, its output)."""
    strip = f"{arch}-linux-gnu-strip"
    result = subprocess.run([support.CMAKE, f"-DBINARY={binary}", f"-DSTRIP={strip}",
                             "-P", release.CHECK_BINARY], capture_output=True, text=True,
                            timeout=120)
    return result.returncode, result.stdout + result.stderr


class Artifacts(unittest.TestCase):
    def setUp(self):
        release.require_dist(self)
        self.version = release.project_version()

    def test_dist_holds_the_six_artifacts_and_their_checksums(self):
        v = self.version
        packages = {f"redlock-{v}-linux-x86_64.tar.gz", f"redlock-{v}-linux-aarch64.tar.gz",
                    f"redlock_{v}_amd64.deb", f"redlock_{v}_arm64.deb",
                    f"redlock-{v}-1.x86_64.rpm", f"redlock-{v}-1.aarch64.rpm"}
        self.assertEqual(set(release.artifacts()), packages | {"SHA256SUMS"})
        with open(os.path.join(release.DIST, "SHA256SUMS")) as f:
            listed = {line.split()[1] for line in f}
        self.assertEqual(listed, packages)
        support.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=release.DIST)

    def test_tarballs_are_a_prefix_tree_with_fixed_owners_and_times(self):
        for arch in release.ARCHES:
            with self.subTest(arch), tarfile.open(release.tarball(arch)) as tar:
                members = tar.getmembers()
                top = f"redlock-{self.version}-linux-{arch}"
                names = [m.name for m in members]
                self.assertEqual(names, sorted(names), "members sorted by name")
                for path in TARBALL_FILES:
                    self.assertIn(f"{top}/{path}", names)
                for m in members:
                    self.assertTrue(m.name == top or m.name.startswith(top + "/"), m.name)
                    self.assertEqual((m.uid, m.gid, m.uname, m.gname), (0, 0, "", ""), m.name)
                    self.assertEqual(m.mtime, members[0].mtime, m.name)
                    self.assertFalse(m.issym() or m.islnk(), m.name)
                    expected = 0o755 if m.isdir() or "/bin/" in m.name else 0o644
                    self.assertEqual(m.mode, expected, m.name)
            with open(release.tarball(arch), "rb") as f:
                header = f.read(10)
            self.assertEqual(header[4:8], b"\0\0\0\0", "gzip -n: no time in the header")

    def test_binaries_need_glibc_2_28_at_most_and_are_at_most_3_mib_stripped(self):
        for arch, (_, machine) in release.ARCHES.items():
            with self.subTest(arch), tempfile.TemporaryDirectory() as tmp:
                binary = release.unpack_binary(release.tarball(arch), tmp)
                status, out = check_binary(binary, arch)
                self.assertEqual(status, 0, out)
                highest = re.search(r"highest glibc symbol GLIBC_2\.(\d+), (\d+) KiB", out)
                self.assertIsNotNone(highest, out)
                self.assertLessEqual(int(highest.group(1)), 28, out)
                self.assertLessEqual(int(highest.group(2)), 3 * 1024, out)
                header = support.run(["readelf", "-h", binary]).stdout
                self.assertRegex(header, rf"Machine:\s+(Advanced Micro Devices X86-64|AArch64)")
                self.assertIn("AArch64" if arch == "aarch64" else "X86-64", header)
                # Stripped already: the tarball's binary is the one the size is about.
                self.assertNotIn(".symtab", support.run(["readelf", "-S", binary]).stdout)

    def test_the_check_refuses_a_binary_of_the_default_build(self):
        # The development build binds glibc 2.34+ symbols and packs its relocations as
        # DT_RELR (glibc 2.36): the release check must say so and fail.
        status, out = check_binary(support.REDLOCK_BIN, "x86_64")
        self.assertNotEqual(status, 0, out)
        self.assertRegex(out, r"needs GLIBC_2\.3[4-9] \(newer than GLIBC_2\.28\)")
        self.assertIn("has a DT_RELR table", out)


class Rpms(unittest.TestCase):
    def setUp(self):
        release.require_dist(self)
        support.require_tool(self, "rpm")
        self.version = release.project_version()

    def rpm(self, arch):
        return os.path.join(release.DIST, f"redlock-{self.version}-1.{arch}.rpm")

    def query(self, arch, *args):
        return support.run(["rpm", "-qp", *args, self.rpm(arch)], timeout=60).stdout

    def test_metadata_and_files(self):
        for arch in release.ARCHES:
            with self.subTest(arch):
                self.assertEqual(self.query(arch, "--qf", "%{NAME} %{VERSION} %{RELEASE} "
                                                          "%{ARCH} %{LICENSE}"),
                                 f"redlock {self.version} 1 {arch} MIT")
                self.assertEqual(self.query(arch, "--qf", "%{BUILDHOST}"), "reproducible")
                files = self.query(arch, "-l").split()
                for path in ["/usr/bin/redlock", "/usr/share/man/man1/redlock.1.gz",
                             "/usr/share/man/man5/redlock.toml.5.gz",
                             "/usr/share/man/man5/redlock-cron.5.gz",
                             "/usr/share/bash-completion/completions/redlock",
                             "/usr/share/zsh/site-functions/_redlock",
                             "/usr/share/fish/vendor_completions.d/redlock.fish",
                             "/usr/share/doc/redlock/config.example.toml",
                             "/usr/share/licenses/redlock/LICENSE"]:
                    self.assertIn(path, files)

    def test_requires_names_only_glibc(self):
        for arch in release.ARCHES:
            with self.subTest(arch):
                requires = self.query(arch, "--requires").splitlines()
                self.assertIn("libc.so.6()(64bit)", requires)
                for requirement in requires:
                    self.assertRegex(requirement, GLIBC_REQUIRES)
                for version in re.findall(r"GLIBC_2\.(\d+)", " ".join(requires)):
                    self.assertLessEqual(int(version), 28, requires)

    def test_rpmlint_finds_no_error(self):
        rpmlint = support.require_tool(self, "rpmlint")
        for arch in release.ARCHES:
            with self.subTest(arch):
                config = os.path.join(support.SOURCE_DIR, "packaging", "release", "rpmlint.toml")
                result = support.run([rpmlint, "--config", config, self.rpm(arch)],
                                     timeout=300, check=False)
                errors = [l for l in result.stdout.splitlines() if re.search(r": E: ", l)]
                self.assertEqual(errors, [], result.stdout + result.stderr)
                self.assertRegex(result.stdout, r"\b0 errors\b")


if __name__ == "__main__":
    unittest.main()
