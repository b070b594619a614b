#!/usr/bin/env bash
# Builds the Debian package of nettrace from this workspace: the binaries,
# the Wireshark Lua plugin and the extcap program in Wireshark's system
# folders, systemd units with their options in /etc/default (off until
# enabled), man pages and shell completions generated from each binary's
# clap definition (`--generate`). Prints the .deb's path on its last line.
#
#   PROFILE=release (default) or debug: the cargo profile built and shipped.
#   BIN_DIR=DIR: ship the binaries already built in DIR instead of running
#     cargo (the package test does, from inside `cargo test`, which holds
#     the build lock).
#   DEB_COMPRESS=xz (default), zstd, gzip or none: dpkg-deb's compression.
#
# Depends is what dpkg-shlibdeps reads from the binaries' dynamic links.
# See docs/install.md for installing and configuring the result.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${PROFILE:-release}
case "$PROFILE" in
    release) cargo_profile=release ;;
    debug | dev) cargo_profile=dev PROFILE=debug ;;
    *) echo "package: PROFILE must be release or debug, not $PROFILE" >&2; exit 2 ;;
esac

# The binaries shipped in /usr/bin, and the extcap program, which only
# Wireshark runs (from its extcap folder).
BINS=(tracer-agent tracer-sink nettrace-match clocksync)
EXTCAP=nettrace-extcap
CRATES=(tracer-agent tracer-sink tracer-match clocksync tracer-extcap)

for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture strip gzip; do
    command -v "$tool" >/dev/null || {
        echo "package: $tool not found (scripts/setup.sh installs it)" >&2
        exit 1
    }
done

if [[ -z "${BIN_DIR:-}" ]]; then
    pkgs=()
    for c in "${CRATES[@]}"; do pkgs+=(-p "$c"); done
    cargo build --locked --profile "$cargo_profile" --bins "${pkgs[@]}" >&2
    BIN_DIR=target/$PROFILE
fi

# The workspace's version, from [workspace.package] of the root manifest.
VERSION=$(awk '/^\[/ {in_ws = ($0 == "[workspace.package]")}
               in_ws && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' Cargo.toml)
[[ -n "$VERSION" ]] || { echo "package: no version in [workspace.package]" >&2; exit 1; }
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# Debian's Wireshark: the global Lua plugin folder is not tied to a
# Wireshark version (binary plugins are, in plugins/X.Y), so the plugin
# survives Wireshark upgrades. `tshark -G folders` names both folders.
WS_LUA_DIR=/usr/lib/$MULTIARCH/wireshark/plugins
WS_EXTCAP_DIR=/usr/lib/$MULTIARCH/wireshark/extcap
if command -v tshark >/dev/null; then
    folders=$(tshark -G folders 2>/dev/null || true)
    for pair in "Global Lua Plugins:$WS_LUA_DIR" "Extcap path:$WS_EXTCAP_DIR"; do
        name=${pair%%:*} want=${pair#*:}
        have=$(awk -F'\t+' -v n="$name:" '$1 == n {print $2; exit}' <<<"$folders")
        if [[ -n "$have" && "$have" != "$want" ]]; then
            echo "package: warning: this tshark's \"$name\" is $have, the package uses $want" >&2
        fi
    done
fi

OUT=target/debian
ROOT=$OUT/nettrace_${VERSION}_$ARCH
DEB=$OUT/nettrace_${VERSION}_$ARCH.deb
rm -rf "$ROOT" "$DEB"
mkdir -p "$ROOT/DEBIAN"

# Binaries without their debug sections (the release profile keeps line
# tables for profiling; a package does not need them). Symbols stay, so a
# backtrace still names functions.
ship_bin() { # ship_bin NAME DESTDIR
    [[ -x "$BIN_DIR/$1" ]] || { echo "package: $BIN_DIR/$1 not built" >&2; exit 1; }
    install -d "$ROOT$2"
    strip --strip-debug -o "$ROOT$2/$1" "$BIN_DIR/$1"
    chmod 755 "$ROOT$2/$1"
}
for b in "${BINS[@]}"; do ship_bin "$b" /usr/bin; done
ship_bin "$EXTCAP" "$WS_EXTCAP_DIR"

# The plugin is the folder wireshark/nettrace, whatever files it holds.
install -d "$ROOT$WS_LUA_DIR"
cp -r wireshark/nettrace "$ROOT$WS_LUA_DIR/"
find "$ROOT$WS_LUA_DIR/nettrace" -type d -exec chmod 755 {} + -o -type f -exec chmod 644 {} +

# Man pages and completions, from the shipped binaries themselves.
MAN=$ROOT/usr/share/man/man1
BASH=$ROOT/usr/share/bash-completion/completions
ZSH=$ROOT/usr/share/zsh/vendor-completions
FISH=$ROOT/usr/share/fish/vendor_completions.d
install -d "$MAN" "$BASH" "$ZSH" "$FISH"
for b in "${BINS[@]}" "$EXTCAP"; do
    exe=$BIN_DIR/$b
    # -n: no name or time stamp in the gzip header (reproducible).
    "$exe" --generate man | gzip -9n >"$MAN/$b.1.gz"
    "$exe" --generate bash >"$BASH/$b"
    "$exe" --generate zsh >"$ZSH/_$b"
    "$exe" --generate fish >"$FISH/$b.fish"
done

# Services: units, their options as conffiles, maintainer scripts.
install -D -m 644 -t "$ROOT/usr/lib/systemd/system" \
    packaging/deb/nettrace-agent.service packaging/deb/nettrace-sink.service
install -D -m 644 -t "$ROOT/etc/default" \
    packaging/deb/default/nettrace-agent packaging/deb/default/nettrace-sink
printf '%s\n' /etc/default/nettrace-agent /etc/default/nettrace-sink >"$ROOT/DEBIAN/conffiles"
install -m 755 -t "$ROOT/DEBIAN" packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm

install -d "$ROOT/usr/share/doc/nettrace"
install -m 644 docs/install.md "$ROOT/usr/share/doc/nettrace/install.md"

# Depends: the shared libraries the binaries link (libc, libelf, zlib...),
# as dpkg-shlibdeps names their packages and minimal versions. It wants a
# debian/control to read; a stub in a scratch folder is enough.
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
mkdir "$SCRATCH/debian"
printf 'Source: nettrace\n\nPackage: nettrace\nArchitecture: any\n' >"$SCRATCH/debian/control"
elves=()
for b in "${BINS[@]}"; do elves+=("$PWD/$ROOT/usr/bin/$b"); done
elves+=("$PWD/$ROOT$WS_EXTCAP_DIR/$EXTCAP")
DEPENDS=$(cd "$SCRATCH" && dpkg-shlibdeps -O "${elves[@]}" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[[ -n "$DEPENDS" ]] || { echo "package: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

INSTALLED_KB=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
cat >"$ROOT/DEBIAN/control" <<EOF
Package: nettrace
Version: $VERSION
Architecture: $ARCH
Maintainer: ${DEB_MAINTAINER:-nettrace developers <nettrace@localhost>}
Section: net
Priority: optional
Installed-Size: $INSTALLED_KB
Depends: $DEPENDS
Recommends: tshark | wireshark
Description: clock-synchronized kernel network tracing across hosts
 nettrace tells where a request spends its time between two machines: the
 application, the sender's kernel (qdisc, driver), the wire or the
 receiver's stack. An agent on each host (tracer-agent) captures kernel
 network events with eBPF, stamps them on one global clock disciplined to
 a PTP hardware clock or to the sink's clock, and sends them to a sink
 (tracer-sink), which writes pcapng traces with one interface per host.
 .
 Wireshark and tshark decode the traces with the bundled Lua dissector,
 installed as a system plugin, and open a running sink's live stream
 through the nettrace-extcap program. nettrace-match links each sent
 packet to its reception on the other host, with the one-way latency per
 stage; clocksync measures and disciplines clocks on its own. The
 nettrace-agent and nettrace-sink services are off until enabled.
EOF

dpkg-deb --build --root-owner-group -Z"${DEB_COMPRESS:-xz}" "$ROOT" "$DEB" >&2
rm -rf "$ROOT"
echo "$DEB"
