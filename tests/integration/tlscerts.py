"""Test certificates made with the `openssl` command line into a test's temp dir: a CA, a
server certificate for 127.0.0.1 and localhost, client certificates with a given CN, and a
certificate from a second CA the server does not trust.

Keys are EC P-256 (quick to make); certificates carry the extensions strict verifiers want
(basicConstraints and keyUsage on the CA, subjectAltName and extendedKeyUsage on the leaves,
key identifiers on all), so Python's default client contexts accept them.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

_CA_EXT = """[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""
_LEAF_EXT = """[ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = {usage}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
{san}"""
_REQ_CNF = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
"""


@dataclass
class Pair:
    cert: str  # PEM certificate path
    key: str  # PEM private key path


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=str(cwd), capture_output=True, text=True,
                         timeout=60)
    if res.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)} failed: {res.stderr}")


class CertFactory:
    """A CA in `folder`, and certificates it signs."""

    def __init__(self, folder: Path, name: str = "leveret-test-ca"):
        if shutil.which("openssl") is None:
            pytest.skip("the openssl command is needed to make test certificates")
        self.dir = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "req.cnf").write_text(_REQ_CNF)
        self.name = name
        self.ca = self._ca(name)

    def _key(self, stem: str) -> str:
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", f"{stem}.key", cwd=self.dir)
        return str(self.dir / f"{stem}.key")

    def _ca(self, name: str) -> Pair:
        key = self._key(name)
        (self.dir / f"{name}.cnf").write_text(_REQ_CNF + _CA_EXT)  # req -x509 reads its
        _openssl("req", "-config", f"{name}.cnf", "-new", "-x509", "-key", key,  # extensions
                 "-days", "2", "-subj", f"/CN={name}", "-extensions", "ext",    # from -config
                 "-out", f"{name}.pem", cwd=self.dir)
        return Pair(str(self.dir / f"{name}.pem"), key)

    def leaf(self, stem: str, cn: str, server: bool = False) -> Pair:
        """A certificate signed by this CA: for a server (127.0.0.1, localhost) or a client."""
        key = self._key(stem)
        san = "subjectAltName = DNS:localhost,IP:127.0.0.1\n" if server else ""
        usage = "serverAuth" if server else "clientAuth"
        (self.dir / f"{stem}.ext").write_text(_LEAF_EXT.format(usage=usage, san=san))
        _openssl("req", "-config", "req.cnf", "-new", "-key", key, "-subj", f"/CN={cn}",
                 "-out", f"{stem}.csr", cwd=self.dir)
        _openssl("x509", "-req", "-in", f"{stem}.csr", "-CA", self.ca.cert, "-CAkey",
                 self.ca.key, "-set_serial", str(abs(hash((stem, cn))) % 10**12 + 1),
                 "-days", "2", "-extfile", f"{stem}.ext", "-extensions", "ext",
                 "-out", f"{stem}.pem", cwd=self.dir)
        return Pair(str(self.dir / f"{stem}.pem"), key)
