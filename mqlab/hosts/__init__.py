"""Load from other hosts through Dask distributed: the certificates of a TLS cluster, the
cluster reached as a client with a deadline on every wait and the same mqlab checked on every
host, and each host's monotonic clock against the controller's (NTP's method over Dask's own
connections). Nothing here speaks a protocol of mqlab's own across hosts."""
