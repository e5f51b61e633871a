"""Where a request enters the node. The door first: node identity
(node_identity.py) guards NodeService and the forwarded marker; tokens and
grants (auth.py) guard QueueService and AdminService (with the audit log);
metrics.py counts and times every call. Then the servicers (queue_service.py,
admin_service.py, node_service.py), which turn protobufs into our types
(convert.py) and our errors into gRPC codes (status.py)."""
