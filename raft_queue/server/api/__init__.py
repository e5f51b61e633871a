"""The gRPC door's guards: interceptors and the like that decide, before any
handler runs, whether a call may be served (node identity; tokens and
grants live beside it)."""
