"""The API door: what every QueueService and AdminService call passes before
its servicer runs (authentication, authorization, audit)."""
