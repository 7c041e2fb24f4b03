#!/usr/bin/env bash
# A real kube-apiserver and etcd for the real-API-server tier (`make k8s-real`), built once and cached.
#
# No registry this machine reaches carries a kube-apiserver binary (PyPI has clients only, npm only
# kubectl + helm). Debian bookworm's source package `kubernetes` (1.20.5+really1.20.2) carries the
# whole tree with vendor/ and staging/, and Debian ships etcd-server 3.4.23: this script builds
# kube-apiserver v1.20.2 from that source with Debian's Go 1.19 and unpacks etcd (dpkg -x: nothing is
# installed as a service). Results are cached OUTSIDE the clone, keyed on both Debian versions:
#
#   $KUBE_REAL_CACHE (default /var/cache/vllm-guardian)/kube-<kubernetes version>-etcd-<etcd version>/
#       kube-apiserver, etcd
#
# A second caller waits on the lock and then finds the cache. Cold cost: ~15 min of one core (the
# compile runs at nice 19, GOMAXPROCS=1, so tests running beside it keep their CPU); warm: < 1 s.
# Needs root (apt-get) on a Debian bookworm machine whose mirror is reachable.
#
#   tools/kube_apiserver.sh            # builds if needed, prints the cache directory
set -euo pipefail

KUBE_VERSION=1.20.5+really1.20.2-1.1+deb12u1   # the Debian source version
ETCD_VERSION=3.4.23-4+b4
ROOT=${KUBE_REAL_CACHE:-/var/cache/vllm-guardian}
DEST="$ROOT/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}"
mkdir -p "$ROOT"

ready() { [ -x "$DEST/kube-apiserver" ] && [ -x "$DEST/etcd" ] && "$DEST/etcd" --version 2>/dev/null | grep -q "^etcd Version"; }
if ready; then echo "$DEST"; exit 0; fi

exec 9>"$ROOT/.build.lock"
flock 9
if ready; then echo "$DEST"; exit 0; fi

log() { echo "kube_apiserver: $*" >&2; }
work="$ROOT/work-$KUBE_VERSION"
mkdir -p "$work"
cd "$work"

# 1. the source package (deb-src for bookworm) and Debian's Go 1.19
if [ ! -f /etc/apt/sources.list.d/vllm-guardian-src.sources ]; then
  cat >/etc/apt/sources.list.d/vllm-guardian-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt-get update -qq
fi
command -v /usr/lib/go-1.19/bin/go >/dev/null || apt-get install -y -qq golang-1.19-go >/dev/null
GO=/usr/lib/go-1.19/bin/go
orig="kubernetes_${KUBE_VERSION%-*}.orig.tar.gz"
[ -f "$orig" ] || { log "fetching the source package"; apt-get source --download-only -qq "kubernetes=$KUBE_VERSION" >/dev/null; }

# 2. the tree, with reflect2 1.0.2 in place of the vendored 1.0.1 (broken under Go >= 1.18)
src="$work/gopath/src/k8s.io/kubernetes"
if [ ! -d "$src/cmd/kube-apiserver" ]; then
  rm -rf "$work/tree" && mkdir -p "$work/tree"
  tar -xzf "$orig" -C "$work/tree" --strip-components=1
  [ -d "$work/tree/cmd/kube-apiserver" ] || { log "unexpected layout in $orig"; exit 1; }
  apt-get download -qq golang-github-modern-go-reflect2-dev >/dev/null
  rm -rf "$work/reflect2" && dpkg -x golang-github-modern-go-reflect2-dev_*.deb "$work/reflect2"
  r2="$work/tree/vendor/github.com/modern-go/reflect2"
  rm -rf "$r2" && mkdir -p "$r2"
  find "$work/reflect2/usr/share/gocode/src/github.com/modern-go/reflect2" -maxdepth 1 -name '*.go' \
    ! -name '*_test.go' -exec cp {} "$r2/" \;
  mkdir -p "$(dirname "$src")"
  ln -sfn "$work/tree" "$src"
fi

export GOPATH="$work/gopath" GO111MODULE=off GOPROXY=off CGO_ENABLED=0 GOMAXPROCS=1
export GOCACHE="$work/gocache"
cd "$src"

# 3. the OpenAPI definitions a plain `go build` misses
gen=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -s "$gen" ]; then
  log "generating $gen"
  nice -n 19 "$GO" build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  pkgs=$(grep -rl --include='*.go' '+k8s:openapi-gen=' pkg staging/src vendor/k8s.io 2>/dev/null \
    | xargs -n1 dirname | sort -u \
    | sed -e 's#^staging/src/#vendor/#' \
    | grep -v -e code-generator -e sample-apiserver -e '^vendor/k8s.io/kube-openapi' \
    | sort -u | sed -e 's#^vendor/#k8s.io/kubernetes/vendor/#' -e 's#^pkg/#k8s.io/kubernetes/pkg/#' | paste -sd, -)
  nice -n 19 "$work/openapi-gen" -i "$pkgs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$work/openapi-report.txt" -o "$GOPATH/src"
fi

# 4. kube-apiserver, with both version packages stamped (or /version says v0.0.0-master)
V=v1.20.2
ldflags="-s -w"
for p in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$V -X $p.gitMajor=1 -X $p.gitMinor=20 -X $p.gitTreeState=clean"
done
log "compiling kube-apiserver (nice 19, one core; ~15 min cold)"
nice -n 19 "$GO" build -ldflags "$ldflags" -o "$work/kube-apiserver" ./cmd/kube-apiserver

# 5. etcd from Debian, unpacked
cd "$work"
apt-get download -qq "etcd-server=$ETCD_VERSION" >/dev/null
rm -rf "$work/etcd" && dpkg -x etcd-server_*.deb "$work/etcd"

mkdir -p "$DEST"
install -m 0755 "$work/kube-apiserver" "$DEST/kube-apiserver"
install -m 0755 "$work/etcd/usr/bin/etcd" "$DEST/etcd"
"$DEST/kube-apiserver" --version >&2
echo "$DEST"
