"""Where messages go: the send path (sending.py, with sealing and
auto-create), receive with leases and long polls (receiving.py, lingering.py,
wakeups.py), replay (reading.py), push delivery (subscribing.py), receipts and
the limits on each request (bounds.py)."""
