"""Who can reach a cluster: TLS credentials for a scheduler, and listen addresses beyond loopback.

- :func:`client_security` checks the ``--tls-*`` files before anything connects and turns them
  into a ``distributed.Security`` for the client (mutual TLS: the scheduler checks the client's
  certificate too).
- :func:`check_address` makes an existing scheduler's address and the TLS options agree.
- :func:`explain_failure` turns a refused TLS handshake into one line for the user.
- :func:`exposure_notice` warns when something daskgpu starts listens beyond loopback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import ssl

from daskgpu.errors import ClusterError

TLS_OPTIONS = "--tls-ca-file, --tls-cert and --tls-key"


def _readable(option: str, path) -> str:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ClusterError(f"{option} {path}: no such file (give a PEM file)")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ClusterError(f"{option} {path}: cannot be read ({exc.strerror})") from None
    return path


def _holds_private_key(path: str) -> bool:
    with open(path, "rb") as f:
        return b"PRIVATE KEY-----" in f.read()


def client_security(ca_file=None, cert=None, key=None):
    """The ``distributed.Security`` a client needs for the given TLS files, checked first.

    Parameters
    ----------
    ca_file : str or path, optional
        PEM file of the CA that signed the scheduler's certificate.
    cert : str or path, optional
        PEM certificate of this client, signed by a CA the scheduler trusts. It may also hold
        the private key, in which case ``key`` can be left out.
    key : str or path, optional
        PEM private key of ``cert``.

    Returns
    -------
    distributed.Security or None
        None when no TLS option is given; else a ``Security`` that requires encryption.

    Raises
    ------
    ClusterError
        A missing option, a missing or unreadable file, a file that is not PEM, a key that does
        not belong to the certificate.
    """
    if ca_file is None and cert is None and key is None:
        return None
    if ca_file is None:
        raise ClusterError(
            "--tls-cert/--tls-key need --tls-ca-file too: the CA that signed the scheduler's "
            f"certificate (give {TLS_OPTIONS})"
        )
    if cert is None:
        raise ClusterError(
            "TLS needs a client certificate: the scheduler checks it (mutual TLS); give "
            f"{TLS_OPTIONS}"
        )
    ca_file = _readable("--tls-ca-file", ca_file)
    cert = _readable("--tls-cert", cert)
    if key is not None:
        key = _readable("--tls-key", key)
    elif not _holds_private_key(cert):
        raise ClusterError(
            f"--tls-cert {cert} holds no private key: give it with --tls-key KEY.pem (or use "
            "one PEM file holding both)"
        )
    _check_pem(ca_file, cert, key)
    from distributed import Security

    return Security(
        tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True
    )


class _PasswordAsked(Exception):
    pass


def _no_password():
    raise _PasswordAsked


def _check_pem(ca_file: str, cert: str, key: str | None) -> None:
    """Load the files as ``ssl`` will when connecting, so that a bad one fails here."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except ssl.SSLError as exc:
        raise ClusterError(
            f"--tls-ca-file {ca_file}: not a PEM CA certificate ({exc.reason or exc})"
        ) from None
    which = f"--tls-key {key}" if key else f"--tls-cert {cert}"
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except _PasswordAsked:
        raise ClusterError(
            f"{which}: the key is protected by a password, which Dask cannot ask for; give an "
            "unencrypted key (openssl pkey -in KEY.pem -out PLAIN.pem)"
        ) from None
    except ssl.SSLError as exc:
        which = f"--tls-cert {cert}" + (f" with --tls-key {key}" if key else "")
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ClusterError(
                f"{which}: the key does not belong to the certificate; give the key it was "
                "issued with"
            ) from None
        raise ClusterError(
            f"{which}: not a PEM certificate and its private key ({exc.reason or exc})"
        ) from None


def scheduler_file_address(path) -> str | None:
    """The address written in a scheduler file, or None where it cannot be read (yet)."""
    try:
        with open(path) as f:
            address = json.load(f).get("address")
    except (OSError, ValueError, AttributeError):
        return None
    return address if isinstance(address, str) else None


def check_address(address: str | None, scheduler_file, security) -> str | None:
    """The scheduler address to connect to, made to agree with the TLS options.

    Parameters
    ----------
    address : str or None
        ``--scheduler-address`` as given; ``host:port`` without a scheme becomes
        ``tls://host:port`` when ``security`` is set.
    scheduler_file : str or None
        ``--scheduler-file``, whose address is checked the same way (but not changed).
    security : distributed.Security or None
        From :func:`client_security`.

    Returns
    -------
    str or None
        ``address``, with ``tls://`` added where needed (None when a file is used).

    Raises
    ------
    ClusterError
        A ``tls://`` scheduler without certificates, or certificates for a non-TLS address.
    """
    given = address
    if given is None and scheduler_file:
        given = scheduler_file_address(scheduler_file)
    if given is None:
        return address
    where = (
        f"--scheduler-address {address}"
        if address
        else f"the scheduler file {scheduler_file} ({given})"
    )
    scheme = given.split("://", 1)[0].lower() if "://" in given else None
    if security is None:
        if scheme == "tls":
            raise ClusterError(
                f"{where} is a TLS scheduler: give {TLS_OPTIONS} to connect"
            )
        return address
    if scheme is None and address:
        return f"tls://{address}"
    if scheme != "tls":
        raise ClusterError(
            f"{where} does not use TLS, but {TLS_OPTIONS} were given: use a tls:// "
            "address (a scheduler started with --protocol tls), or drop the TLS options"
        )
    return address


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def explain_failure(exc: BaseException, target: str, tls: bool) -> str | None:
    """One line for a connection that TLS (or its absence) refused, else None.

    Parameters
    ----------
    exc : BaseException
        What ``distributed.Client`` raised.
    target : str
        The scheduler, in words.
    tls : bool
        Whether the client connected with TLS options.

    Returns
    -------
    str or None
        The message, or None when the failure has nothing to do with TLS.
    """
    chain = list(_chain(exc))
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        reason = next(e for e in chain if isinstance(e, ssl.SSLCertVerificationError))
        return (
            f"TLS: the certificate of {target} is not signed by the CA in --tls-ca-file "
            f"({reason.verify_message or reason.reason}); give the CA that signed the "
            "scheduler's certificate"
        )
    if any("TLS expects" in str(e) for e in chain):
        return f"{target} uses TLS: give {TLS_OPTIONS} to connect"
    # Closed during the handshake (not a refused connection, which ends in a timeout)
    closed = type(exc).__name__.endswith("CommClosedError")
    if tls and (closed or any(isinstance(e, ssl.SSLError) for e in chain)):
        return (
            f"TLS handshake with {target} failed: the scheduler refused the client "
            "certificate; give a --tls-cert/--tls-key signed by the CA the scheduler trusts"
        )
    if not tls and closed:
        return (
            f"{target} closed the connection at once; if it is a TLS scheduler (dask "
            f"scheduler --protocol tls), connect to its tls:// address with {TLS_OPTIONS}"
        )
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or a name) only ever means this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost")
    (True, True, True)
    >>> is_loopback(""), is_loopback("0.0.0.0"), is_loopback("10.0.0.5")
    (False, False, False)
    """
    host = host.strip().strip("[]")
    if not host:
        return False  # every interface
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if host.lower() == "localhost":
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def dashboard_hosts(address: str) -> list[str]:
    """The hosts of a dashboard address as Dask reads it (``:8787`` and ``8787``: every host).

    >>> dashboard_hosts("127.0.0.1:8787"), dashboard_hosts(":8787"), dashboard_hosts("8787")
    (['127.0.0.1'], [''], [''])
    >>> dashboard_hosts("localhost:8787,0.0.0.0:8788")
    ['localhost', '0.0.0.0']

    Raises
    ------
    ClusterError
        A port that is not a number from 0 to 65535, or an IPv6 address (Dask reads none).
    """
    hosts = []
    for part in str(address).split(","):
        part = part.strip()
        if part.count(":") == 1:
            host, port = part.split(":")
        elif part.isdigit():
            host, port = "", part
        else:
            host, port = part, "0"
        if ":" in part and part.count(":") != 1 or not port.isdigit() or int(port) > 65535:
            raise ClusterError(
                f"--dashboard-address {address}: use HOST:PORT, e.g. 127.0.0.1:8787 (port 0: "
                "any free one)"
            )
        hosts.append(host)
    return hosts


def exposure_notice(what: str, option: str, value: str, local: str) -> str:
    """The one-line warning for ``what`` listening beyond loopback.

    >>> exposure_notice("the dashboard", "--dashboard-address", ":8787", "127.0.0.1:8787")[:60]
    'Warning: the dashboard listens on :8787, reachable from the '
    """
    return (
        f"Warning: {what} listens on {value or 'every interface'}, "
        "reachable from the network without TLS or authentication; to keep it on this machine "
        f"use {option} {local}."
    )
