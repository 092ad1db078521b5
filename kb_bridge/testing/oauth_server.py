"""A small real authorization server for tests and demos: it publishes RFC 8414 metadata (and/or OpenID
Connect discovery) and a JWKS over HTTP on loopback, rotates keys, and mints access tokens signed with
them (PyJWT and cryptography do the signing). It counts every document it serves, so tests can see how
often the bridge fetched keys.

It can serve over TLS with a self-signed certificate for 127.0.0.1 and localhost (`self_signed_certificate`;
clients trust it through REQUESTS_CA_BUNDLE), answer chosen paths with a redirect, and mirror another
server's documents (the same metadata and keys, from another address).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

Key = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass
class SigningKey:
    kid: str
    private: Key
    algorithm: str

    def public_jwk(self) -> dict[str, Any]:
        if isinstance(self.private, rsa.RSAPrivateKey):
            jwk = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        else:
            jwk = ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.algorithm}


def new_key(algorithm: str = "RS256", kid: str | None = None) -> SigningKey:
    private: Key = (
        ec.generate_private_key(ec.SECP256R1()) if algorithm == "ES256" else rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    return SigningKey(kid or uuid.uuid4().hex[:12], private, algorithm)


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate and its key, as PEM files: `cert` is also the CA bundle that trusts it."""

    cert: Path
    key: Path


def self_signed_certificate(directory: Path) -> Certificate:
    """A certificate for 127.0.0.1, ::1 and localhost, valid for a day, that is its own CA."""
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kb-bridge test issuer")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(private.public_key()), critical=False)
        .sign(private, hashes.SHA256())
    )
    files = Certificate(directory / "issuer-cert.pem", directory / "issuer-key.pem")
    files.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    files.key.chmod(0o600)
    return files


class AuthServer:
    """`discovery`: "rfc8414" (only /.well-known/oauth-authorization-server), "oidc" (only
    /.well-known/openid-configuration) or "both". `issuer_path` puts the issuer below the root
    (as Keycloak does with /realms/NAME). With `tls` it serves https; with `mirror_of` it serves that
    server's documents (its metadata, naming that server as issuer, and its keys). `redirects` maps a
    request path (query included) to the URL a 302 sends the client to."""

    def __init__(self, discovery: str = "rfc8414", issuer_path: str = "", audience: str | None = None,
                 tls: Certificate | None = None, mirror_of: AuthServer | None = None) -> None:
        self.discovery = discovery
        self.issuer_path = issuer_path
        self.audience = audience
        self.keys: list[SigningKey] = [new_key()]
        self.requests: Counter[str] = Counter()
        self.redirects: dict[str, str] = {}
        self._mirror_of = mirror_of
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.cert, tls.key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, name="auth-server", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> AuthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    @property
    def base(self) -> str:
        port = self._server.server_address[1]
        return f"{self._scheme}://127.0.0.1:{port}"

    @property
    def issuer(self) -> str:
        return self.base + self.issuer_path

    @property
    def jwks_uri(self) -> str:
        return self.base + "/jwks"

    @property
    def jwks_fetches(self) -> int:
        return self.requests["/jwks"]

    # --- keys and tokens ----------------------------------------------------------------------

    def rotate(self, algorithm: str = "RS256", keep_old: bool = True) -> SigningKey:
        """Publish a new key (first in the set); the old ones stay published unless keep_old is False."""
        key = new_key(algorithm)
        with self._lock:
            self.keys = [key, *(self.keys if keep_old else [])]
        return key

    def token(self, key: SigningKey | None = None, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        """An access token: iss, aud, sub, iat, exp (5 minutes) by default; a claim given as None is left out."""
        key = key or self.keys[0]
        now = int(time.time())
        body: dict[str, Any] = {"iss": self.issuer, "aud": self.audience, "sub": "agent-1", "iat": now, "exp": now + 300,
                                "scope": "kb:read kb:write kb:delete", "client_id": "test-client"}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key.private, algorithm=key.algorithm, headers={"kid": key.kid, **(headers or {})})

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            return {"keys": [k.public_jwk() for k in self.keys]}

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": self.jwks_uri,
            "authorization_endpoint": self.base + "/authorize",
            "token_endpoint": self.base + "/token",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": ["kb:read", "kb:write", "kb:delete"],
        }

    # --- HTTP ---------------------------------------------------------------------------------

    def _documents(self) -> dict[str, Callable[[], dict[str, Any]]]:
        if self._mirror_of is not None:
            return self._mirror_of._documents()
        docs: dict[str, Callable[[], dict[str, Any]]] = {"/jwks": self.jwks}
        if self.discovery in ("rfc8414", "both"):
            docs["/.well-known/oauth-authorization-server" + self.issuer_path] = self.metadata
        if self.discovery in ("oidc", "both"):
            docs[self.issuer_path + "/.well-known/openid-configuration"] = self.metadata
        return docs

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?")[0]
                server.requests[path] += 1
                if self.path in server.redirects:
                    self.send_response(302)
                    self.send_header("Location", server.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                document = server._documents().get(path)
                body = json.dumps(document() if document else {"error": "not_found"}).encode()
                self.send_response(200 if document else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
