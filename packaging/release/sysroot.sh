#!/usr/bin/env bash
# Usage: sysroot.sh ARCH DIR
#
# Makes DIR a sysroot of Debian 11 (bullseye, glibc 2.31) for ARCH (x86_64 or aarch64):
# the C library's headers and link files, the kernel headers, hiredis (static) and the
# OpenSSL headers, fetched from Debian's archive with apt-get under a private
# configuration (the archive keyring checks them; the host's own apt is not touched) and
# unpacked with dpkg-deb -x. The compiler stays the host's g++ 12: the symbols a binary
# binds are those of the glibc it links against, so this is what makes release binaries
# start on glibc 2.28..2.31 systems (packaging/release/glibc_compat.cpp does the rest).
#
# Idempotent: DIR/.complete names the packages it holds; a DIR made from the same list is
# kept. Needs no root. Environment: REDLOCK_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

arch=${1:?usage: sysroot.sh ARCH DIR}
dir=${2:?usage: sysroot.sh ARCH DIR}
mirror=${REDLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
case $arch in
x86_64) debarch=amd64 ;;
aarch64) debarch=arm64 ;;
*)
    echo "sysroot.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2
    exit 64
    ;;
esac
# libmicrohttpd-dev for its header only: `redlock exporter` loads the library at its start.
packages=(libc6 libc6-dev linux-libc-dev libhiredis0.14 libhiredis-dev libssl-dev
    libmicrohttpd-dev)
stamp="bullseye $debarch ${packages[*]}"
if [[ -f "$dir/.complete" && "$(cat "$dir/.complete")" == "$stamp" ]]; then
    exit 0
fi

rm -rf "$dir"
apt_dir="$dir.apt"
rm -rf "$apt_dir"
mkdir -p "$apt_dir"/{state/lists/partial,cache/archives/partial,parts,debs} "$dir"
: >"$apt_dir/state/status"
echo "deb [arch=$debarch signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bullseye main" \
    >"$apt_dir/sources.list"
apt_opts=(
    -o "Dir::State=$apt_dir/state" -o "Dir::State::status=$apt_dir/state/status"
    -o "Dir::Cache=$apt_dir/cache" -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=$apt_dir/parts" -o "Dir::Etc::Preferences=$apt_dir/parts/none"
    -o "Dir::Etc::PreferencesParts=$apt_dir/parts"
    -o "APT::Architecture=$debarch" -o "APT::Architectures::=$debarch"
    -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1" -q
)
apt-get "${apt_opts[@]}" update >"$apt_dir/update.log" 2>&1 || {
    cat "$apt_dir/update.log" >&2
    exit 1
}
(cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download "${packages[@]}") >"$apt_dir/download.log" 2>&1 || {
    cat "$apt_dir/download.log" >&2
    exit 1
}
for deb in "$apt_dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dir"
done
# Absolute symlinks (libc.so's linker script names /lib/...; libfoo.so -> /lib/...) point
# into the host once the root is not / : make them relative to stay inside DIR.
while IFS= read -r link; do
    target=$(readlink "$link")
    if [[ "$target" == /* ]]; then
        ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dir$target")" "$link"
    fi
done < <(find "$dir" -type l)
(cd "$apt_dir/debs" && ls) >"$dir/.packages"
echo "$stamp" >"$dir/.complete"
rm -rf "$apt_dir"
