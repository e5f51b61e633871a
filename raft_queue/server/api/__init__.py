"""The gRPC door: what every call passes before its servicer runs. Node
identity (node_identity.py) guards NodeService and the forwarded marker;
tokens and grants (auth.py) guard QueueService and AdminService (with the
audit log); metrics.py counts and times every call."""
