"""Pure policy: pick order, backoff, cron, states, leases. Imports neither Django nor multiprocessing."""
