"""Coming from django-q2: its API (:mod:`.django_q`), its ``Q_CLUSTER`` setting (:mod:`.q_cluster`)
and its tables (:mod:`.djangoq_import`, used by ``manage.py qimport_djangoq``).

This package imports nothing itself: ``conf`` reads :mod:`.q_cluster`, a leaf, and must not pull
in the API with it.
"""
