"""A Django database backend of an engine django_taskmq does not know (the unsupported-engine tests)."""
