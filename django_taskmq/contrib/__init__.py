"""Integrations with other projects' tools; each module imports its tool only when used."""
