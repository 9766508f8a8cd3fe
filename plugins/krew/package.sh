#!/usr/bin/env bash
# Builds the release `kubectl-configrollout` for linux/amd64, packs it with the README
# into target/krew/kubectl-configrollout-v<version>-linux-amd64.tar.gz, and writes the
# krew manifest target/krew/configrollout.yaml from configrollout.yaml.template with the
# archive's sha256 and the URL it will be published at.
#
#   RELEASE_URL=https://.../kubectl-configrollout-v0.1.0-linux-amd64.tar.gz plugins/krew/package.sh
#
# RELEASE_URL is where you will upload the archive; nothing here invents one.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${RELEASE_URL:-}" ]; then
  echo "package.sh: set RELEASE_URL to the URL the archive will be published at" >&2
  exit 1
fi
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "package.sh: builds for linux/amd64 only, on linux/amd64" >&2
  exit 1
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' controller/Cargo.toml | head -n 1)
cargo build --release --locked -p kubectl-configrollout --bin kubectl-configrollout
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

out="$target_dir/krew"
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage"
cp "$target_dir/release/kubectl-configrollout" "$stage/"
# The release profile keeps debug info; the plugin people install does not need it.
if command -v strip >/dev/null 2>&1; then
  strip "$stage/kubectl-configrollout"
fi
cp README.md "$stage/"
archive="$out/kubectl-configrollout-v$version-linux-amd64.tar.gz"
# Reproducible: fixed order, owner and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='@0' \
  -C "$stage" -czf "$archive" kubectl-configrollout README.md
sha=$(sha256sum "$archive" | cut -d' ' -f1)

sed -e "s|@VERSION@|$version|" -e "s|@URI@|$RELEASE_URL|" -e "s|@SHA256@|$sha|" \
  plugins/krew/configrollout.yaml.template | grep -v '^#' >"$out/configrollout.yaml"
rm -rf "$stage"
echo "archive:  $archive"
echo "sha256:   $sha"
echo "manifest: $out/configrollout.yaml (upload the archive to $RELEASE_URL first)"
