"""The engines that run rounds: the local worker pool, the Temporal engine, leases, workers and the reconciler."""
