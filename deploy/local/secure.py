"""Throwaway certificates and API keys for `cluster.py --secure` (docs/design.md §9b), made with the openssl CLI.

Two CAs, so that the public side cannot reach the internal one:
  ca           signs every server certificate (SAN IP:127.0.0.1, DNS:localhost) and the test client's
               certificate; clients (and the router, dialling the workers) verify servers against it.
  internal-ca  signs the router's client certificate only; the workers require a client certificate
               from it (--tls-client-ca), so only the router can call them (a public client's valid
               certificate from `ca` is refused).
API keys: an admin key "admin" and a normal key "tenant", stored as salted SHA-256 hashes.
"""

import hashlib
import json
import os
import secrets
import subprocess

SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"


def _openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_ca(directory, name):
    crt, key = os.path.join(directory, name + ".crt"), os.path.join(directory, name + ".key")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
             "-out", crt, "-days", "30", "-subj", "/CN=yoco " + name)
    return crt, key


def make_cert(directory, name, ca, server):
    """A leaf certificate signed by `ca` (crt, key) with a random serial; returns (crt, key)."""
    crt, key, csr = (os.path.join(directory, name + ext) for ext in (".crt", ".key", ".csr"))
    ext = os.path.join(directory, name + ".ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\n")
        f.write("extendedKeyUsage=%s\n" % ("serverAuth,clientAuth" if server else "clientAuth"))
        if server:
            f.write(SAN + "\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
             csr, "-subj", "/CN=" + name)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-set_serial", "0x" + secrets.token_hex(16),
             "-days", "30", "-extfile", ext, "-out", crt)
    os.unlink(csr)
    os.unlink(ext)
    return crt, key


def key_entry(name, key, admin):
    salt = secrets.token_hex(16)
    digest = hashlib.sha256(bytes.fromhex(salt) + key.encode()).hexdigest()
    return {"name": name, "salt": salt, "sha256": digest, "max_concurrent": 0, "tokens_per_minute": 0,
            "max_context": 0, "admin": admin}


class Secure:
    def __init__(self, state_dir, reload_seconds):
        self.dir = os.path.join(state_dir, "tls")
        os.makedirs(self.dir, exist_ok=True)
        self.reload_seconds = reload_seconds
        self.ca = make_ca(self.dir, "ca")
        self.internal_ca = make_ca(self.dir, "internal-ca")
        self.router_client = make_cert(self.dir, "router-client", self.internal_ca, server=False)
        self.client = make_cert(self.dir, "client", self.ca, server=False)
        self.keys = {"admin": "yoco-" + secrets.token_hex(24), "tenant": "yoco-" + secrets.token_hex(24)}
        self.keys_file = os.path.join(state_dir, "api-keys.json")
        with open(self.keys_file, "w") as f:
            json.dump({"keys": [key_entry("admin", self.keys["admin"], True),
                                key_entry("tenant", self.keys["tenant"], False)]}, f, indent=2)
        os.chmod(self.keys_file, 0o600)

    def server_args(self, name, internal):
        """A listener's flags: its own certificate; internal services require the router's (mTLS)."""
        crt, key = make_cert(self.dir, name, self.ca, server=True)
        args = ["--tls-cert", crt, "--tls-key", key, "--tls-reload-seconds", str(self.reload_seconds)]
        return args + ["--tls-client-ca", self.internal_ca[0]] if internal else args

    def router_worker_args(self):
        return ["--worker-tls-ca", self.ca[0], "--worker-tls-cert", self.router_client[0], "--worker-tls-key",
                self.router_client[1]]

    def describe(self, with_keys):
        d = {"tls": {"dir": self.dir, "ca": self.ca[0], "ca_key": self.ca[1], "client_cert": self.client[0],
                     "client_key": self.client[1], "internal_ca": self.internal_ca[0]}}
        if with_keys:
            d["api_keys"] = dict(self.keys)
        return d
