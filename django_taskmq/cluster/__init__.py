"""The cluster: a sentinel that spawns and guards a pusher, workers and a monitor."""
