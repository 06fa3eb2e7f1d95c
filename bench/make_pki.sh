#!/usr/bin/env bash
# A throwaway PKI for the TLS benches: DIR/ca.crt, DIR/server.{crt,key} (SAN IP:127.0.0.1) and
# DIR/client.{crt,key}, signed by the CA, valid one day. Usage: bench/make_pki.sh DIR
set -euo pipefail
cd "$1"
{
  printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca -keyout ca.key -out ca.crt
  for n in server client; do
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$n" -keyout "$n.key" -out "$n.csr"
    openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile san.ext -out "$n.crt"
  done
} >/dev/null 2>&1
