"""Tuning at fleet scale: candidates built and measured on a dask.distributed cluster.

    from kiln import autotvm
    from kiln.autotvm.cluster import ClusterBuilder, ClusterRunner, tls_security

    sec = tls_security("ca.pem", "tuner.pem", "tuner.key")
    option = autotvm.measure_option(builder=ClusterBuilder("tls://head:8786", security=sec),
                                    runner=ClusterRunner("tls://head:8786", security=sec))
    autotvm.tune_model(mod, params, measure_option=option, log_file="tune.jsonl")

Workers are dask's own (`dask worker tls://head:8786 --nthreads 1 --resources
"kiln-device-$(kiln device-key)=1" --tls-...`) in an environment with kiln installed; the
tuning client writes the log. docs/tune_cluster.md walks through it, and through what a
member of such a cluster can make the others run.
"""
from .connection import ClusterError, close_connections, connect, tls_security
from .device import RESOURCE_PREFIX, device_key, device_resource, pinned_target
from .measure import ClusterBuilder, ClusterRunner

__all__ = ["ClusterBuilder", "ClusterError", "ClusterRunner", "RESOURCE_PREFIX",
           "close_connections", "connect", "device_key", "device_resource", "pinned_target",
           "tls_security"]
