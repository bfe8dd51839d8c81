"""The ``hooks`` module of django-q2's documentation examples (``hook='hooks.print_result'``).

``tests/api/test_compat_django_q.py`` puts this directory on ``sys.path`` so the examples' path
imports as it is written there.
"""


def print_result(task):
    print(task.result)
