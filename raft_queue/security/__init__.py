"""Security: the cluster secret and keys derived from it, node identity,
principals, grants, tokens, TLS material and the audit log.

Everything here is I/O-light and imported by the doors (``replication/`` for
Raft links, ``server/`` for gRPC); ``core/`` never imports it.
"""
