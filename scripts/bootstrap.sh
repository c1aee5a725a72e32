#!/usr/bin/env bash
# Everything ualdbg needs on a fresh Debian 12 machine of this project's kind: the debuggers and
# compilers (apt, when running as root and something is missing), a virtualenv made from the
# Python that gdb embeds (/usr/bin/python3, PLATFORM.md), and the examples.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gdb >/dev/null || need+=(gdb)
command -v gcc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
command -v gfortran >/dev/null || need+=(gfortran)
command -v sqlite3 >/dev/null || need+=(sqlite3)  # a real program the agent tests run
command -v curl >/dev/null || need+=(curl)
command -v xz >/dev/null || need+=(xz-utils)  # Debian 13's sh4 glibc, below
command -v lldb-19 >/dev/null || need+=(lldb-19)
[ -e /usr/lib/llvm-19/lib/python3/dist-packages/lldb ] || [ -e /usr/lib/python3/dist-packages/lldb ] || need+=(python3-lldb-19)
[ -e /usr/lib/llvm-19/lib/liblldb.so ] || need+=(liblldb-19-dev)
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
[ -e /usr/lib/gcc/x86_64-linux-gnu/12/32/libgcc.a ] || need+=(gcc-multilib)
# Strict-alignment CPUs (tests/cross, README: architectures): qemu-user runs their programs,
# gdb-multiarch debugs them through qemu's stub, the cross compilers build the examples.
# qemu-user 9 or newer: its gdb stub serves the signal's siginfo ($_siginfo: si_addr, si_code),
# which Debian 12's qemu 7.2 lacks; Debian's bookworm-backports has qemu 10 (static binaries).
qemu_new=0
if command -v qemu-sparc64 >/dev/null; then
  major=$(qemu-sparc64 --version | sed -n '1s/.*version \([0-9]*\).*/\1/p')
  [ "${major:-0}" -ge 9 ] && qemu_new=1
fi
command -v gdb-multiarch >/dev/null || need+=(gdb-multiarch)
for triplet in sparc64 alpha hppa sh4 aarch64; do
  command -v $triplet-linux-gnu-gcc >/dev/null || need+=(gcc-$triplet-linux-gnu)
done
[ -e /usr/sparc64-linux-gnu/lib/libc.a ] || need+=(libc6-dev-sparc64-cross)
[ -e /usr/alpha-linux-gnu/lib/libc.so.6.1 ] || need+=(libc6-dev-alpha-cross)
[ -e /usr/hppa-linux-gnu/lib/libc.so.6 ] || need+=(libc6-dev-hppa-cross)
[ -e /usr/sh4-linux-gnu/lib/libc.so.6 ] || need+=(libc6-dev-sh4-cross)
[ -e /usr/aarch64-linux-gnu/lib/libc.a ] || need+=(libc6-dev-arm64-cross)
if [ ${#need[@]} -gt 0 ] || [ $qemu_new = 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    if [ $qemu_new = 0 ] && ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d; then
      printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        > /etc/apt/sources.list.d/bookworm-backports.sources
    fi
    echo "bootstrap: installing ${need[*]}$([ $qemu_new = 0 ] && echo ' qemu-user (bookworm-backports)')"
    apt-get update -qq >/dev/null
    [ ${#need[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    [ $qemu_new = 1 ] || apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-user >/dev/null
  else
    echo "bootstrap: missing ${need[*]}$([ $qemu_new = 0 ] && echo ' qemu-user>=9 (bookworm-backports)'); install them as root and run again" >&2
    exit 2
  fi
fi

# SH4: Debian 12's sh4 glibc (2.36-8cross1) cannot start a program: a static one loops forever
# in __libc_start_main (a `bf.s` to itself), a dynamic one's loader dies of SIGSEGV, under
# qemu-sh4 7.2 and 10 alike. Debian 13's (2.41) works: its three cross packages (architecture
# `all`, no other dependencies) replace them, from Debian's own archive.
sh4_libc=$(dpkg-query -W -f='${Version}' libc6-sh4-cross 2>/dev/null || true)
case "$sh4_libc" in
  2.36-*)
    if [ "$(id -u)" = 0 ]; then
      echo "bootstrap: replacing Debian 12's sh4 glibc $sh4_libc (it cannot start programs) with Debian 13's"
      tmp=$(mktemp -d)
      curl -sSfL http://deb.debian.org/debian/dists/trixie/main/binary-all/Packages.xz | xz -dc \
        | awk '/^Package: (libc6|libc6-dev|linux-libc-dev)-sh4-cross$/{p=1} p&&/^Filename:/{print $2; p=0}' \
        | while read -r f; do curl -sSfL -o "$tmp/$(basename "$f")" "http://deb.debian.org/debian/$f"; done
      dpkg -i "$tmp"/*.deb >/dev/null
      rm -rf "$tmp"
    else
      echo "bootstrap: Debian 12's sh4 glibc $sh4_libc cannot start programs; run as root to replace it with Debian 13's" >&2
      exit 2
    fi
    ;;
esac

if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.installed ]; then
  /usr/bin/python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  touch .venv/.installed
fi
make -s -C examples >/dev/null
for arch in sparc64 alpha hppa sh4; do make -s -C examples cross ARCH=$arch >/dev/null; done
