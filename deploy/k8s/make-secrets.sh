#!/usr/bin/env bash
# The three TLS Secrets the manifests mount (deploy/README.md, TLS), from a throwaway CA made with
# openssl, and the API keys Secret with one admin key (DIR/admin.key; deploy/README.md, API keys):
# for trying the cluster out. For production use components/cert-manager or your own PKI, and
# `yoco-cli make-key` for the keys.
#   deploy/k8s/make-secrets.sh DIR [NAMESPACE]   (DIR keeps the CA; clients use DIR/ca.crt)
# Re-running it issues new certificates from the same CA and updates the Secrets in place: the
# processes pick them up within --tls-reload-seconds (certificate rotation, without a restart).
set -eu
dir=${1:?usage: make-secrets.sh DIR [NAMESPACE]}
ns=${2:-yoco}
mkdir -p "$dir"
cd "$dir"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
if [ ! -f ca.key ]; then
  # shellcheck disable=SC2086
  openssl req -x509 $ec -keyout ca.key -out ca.crt -days 3650 -subj /CN=yoco-internal-ca 2>/dev/null
fi
# leaf NAME USAGE [SAN]
leaf() {
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n' "$2" > "$1.ext"
  [ -n "${3:-}" ] && printf 'subjectAltName=%s\n' "$3" >> "$1.ext"
  # shellcheck disable=SC2086
  openssl req $ec -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" -days 90 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
leaf yoco-router serverAuth \
  "DNS:yoco-router,DNS:yoco-router.$ns.svc,DNS:yoco-router.$ns.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
leaf yoco-worker serverAuth "DNS:yoco-worker,DNS:yoco-prefill,DNS:yoco-decode"
leaf yoco-router-client clientAuth
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
secret() {
  kubectl -n "$ns" create secret generic "$1" --from-file=tls.crt="$2.crt" --from-file=tls.key="$2.key" \
    --from-file=ca.crt=ca.crt --dry-run=client -o yaml | kubectl apply -f -
}
secret yoco-router-tls yoco-router
secret yoco-router-client-tls yoco-router-client
secret yoco-worker-tls yoco-worker
# One admin API key, minted once: keys.json holds only its salted SHA-256 (docs/design.md §9b).
if [ ! -f keys.json ]; then
  key="yoco_$(openssl rand -hex 32)"
  salt=$(openssl rand -hex 16)
  digest=$( (printf "$(printf '%s' "$salt" | sed 's/../\\x&/g')"; printf '%s' "$key") | openssl dgst -sha256 -r | cut -c1-64)
  printf '{"keys": [{"name": "admin", "salt": "%s", "sha256": "%s", "admin": true}]}\n' "$salt" "$digest" > keys.json
  (umask 077 && printf '%s\n' "$key" > admin.key)
fi
kubectl -n "$ns" create secret generic yoco-api-keys --from-file=keys.json --dry-run=client -o yaml | kubectl apply -f -
echo "Secrets in namespace $ns; clients: --tls-ca $dir/ca.crt --api-key \"\$(cat $dir/admin.key)\""
