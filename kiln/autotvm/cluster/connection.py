"""The tuning client's connection to a dask.distributed scheduler.

    client = connect("tls://tuner-head:8786", security=tls_security("ca.pem", "me.pem", "me.key"))

One Client per (address, security) serves every builder and runner of a process; a LocalCluster
or a Client can be passed instead of an address. Connecting to a scheduler that does not
answer is a ClusterError naming the address, never a hang.
"""
from __future__ import annotations

import os
import threading

__all__ = ["ClusterError", "close_connections", "connect", "tls_security"]

CONNECT_TIMEOUT = 30.0
_INSTALL = "pip install 'kiln[cluster]' (the project's `make` installs it)"

_clients: dict = {}         # (address, id(security)) -> (Client, security: kept alive)
_lock = threading.Lock()


class ClusterError(RuntimeError):
    """The cluster cannot serve the tuning run: its scheduler cannot be reached, or no worker
    has the device a measurement needs. Records already logged are kept: fix the cluster and
    run the same tuning again to resume."""


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ClusterError(f"measuring on a dask cluster needs dask.distributed: {_INSTALL}") \
            from None
    return distributed


def tls_security(ca_file, cert_file, key_file):
    """A dask Security for a TLS cluster whose members all hold a certificate signed by one CA:
    connections are encrypted, and each side checks the other's certificate.

    Example:
        >>> sec = tls_security("ca.pem", "node.pem", "node.key")         # doctest: +SKIP
        >>> sec.require_encryption                                         # doctest: +SKIP
        True
    """
    for what, path in (("CA certificate", ca_file), ("certificate", cert_file),
                       ("private key", key_file)):
        if not os.path.isfile(path):
            raise ClusterError(f"TLS {what} {path!r} does not exist")
    return _distributed().Security(tls_ca_file=str(ca_file), tls_client_cert=str(cert_file),
                                   tls_client_key=str(key_file), require_encryption=True)


def connect(cluster, security=None, timeout: float = CONNECT_TIMEOUT):
    """A dask Client of `cluster`: a scheduler address ("tcp://host:8786", "tls://..."), a
    LocalCluster (its own security unless `security` is given) or a Client (returned as is).
    Clients are shared per (address, security) until close_connections().

    Example:
        >>> client = connect("tcp://127.0.0.1:8786")                       # doctest: +SKIP
    """
    distributed = _distributed()
    if isinstance(cluster, distributed.Client):
        return cluster
    address = getattr(cluster, "scheduler_address", cluster)
    if security is None and not isinstance(cluster, str):
        security = getattr(cluster, "security", None)
    if not isinstance(address, str) or "://" not in address:
        raise ValueError(f"a cluster is a scheduler address such as 'tcp://host:8786', a "
                         f"LocalCluster or a dask Client, got {cluster!r}")
    if address.startswith("tls://") and security is None:
        raise ClusterError(f"the scheduler at {address} speaks TLS: pass security= (a dask "
                           f"Security, e.g. kiln.autotvm.cluster.tls_security(ca, cert, key))")
    key = (address, id(security))
    with _lock:
        client, _ = _clients.get(key, (None, None))
        if client is not None and client.status not in ("closing", "closed"):
            return client
        try:
            client = distributed.Client(address, security=security, timeout=timeout,
                                        set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"cannot reach the dask scheduler at {address} within "
                               f"{timeout:g} s: {e}") from None
        _clients[key] = (client, security)
        return client


def close_connections() -> None:
    """Close every Client that connect() opened.

    Example:
        >>> close_connections()
    """
    with _lock:
        clients = [client for client, _ in _clients.values()]
        _clients.clear()
    for client in clients:
        client.close()
