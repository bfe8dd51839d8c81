"""Logs as JSON lines, one object per record, with the job's fields on every record about a job.

Needs ``python-json-logger``. In your settings: ``from example.json_logging import LOGGING`` (or copy it).
"""

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        # Records that a task's own code logs while it runs get the job's fields too.
        "job": {"()": "django_taskmq.observability.joblog.JobFields"},
    },
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["job"]},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # Cluster start and stop, every failure; set "django_taskmq.jobs" to DEBUG for a record per success too.
        "django_taskmq": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
