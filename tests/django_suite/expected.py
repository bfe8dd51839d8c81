"""The tests of Django's tests/tasks suite (Django 6.1) that fail against TaskMQBackend, and why:
each tests another backend's internals or meets a documented difference. docs/api.rst lists the
same (tests/unit/test_django_suite_list.py compares them). Every other test of the suite passes."""

from __future__ import annotations

IS_DUMMY = "asserts that the default backend is Django's DummyBackend"
IS_IMMEDIATE = "asserts that the default backend is Django's ImmediateBackend"
DUMMY_RESULTS = "reads DummyBackend.results, the dummy backend's list of what it was given"
SYNC_IN_ASYNC = ("calls get_result() or refresh() inside async code: they read the database, which Django refuses "
                 "there (SynchronousOnlyOperation); async code calls aget_result() and arefresh()")
QUEUES = ("builds task.using(queue_name='unknown_queue') under TaskMQBackend, which refuses a queue TASKMQ['queues'] "
          "does not hold when the backend has no QUEUES (Django's backends then accept any), before the test's own "
          "TASKS with a DummyBackend or ImmediateBackend applies")
NO_RESULTS = "asserts that get_result() raises NotImplementedError: ImmediateBackend keeps no results, ours does"

# These fail in their subtests (one per task): not strict, the test itself passes.
SUBTESTS = {"TaskMQDummyBackendTestCase.test_enqueue_task", "TaskMQDummyBackendTestCase.test_enqueue_task_async"}

# "Class.test" -> why it fails against TaskMQBackend, Django 6.1's suite; docs/api.rst lists
# the same. Every other test passes.
EXPECTED_FAILURES: dict[str, str] = {
    "TaskMQTaskTestCase.test_using_correct_backend": IS_DUMMY,
    "TaskMQTaskTestCase.test_get_backend": IS_DUMMY,
    "TaskMQTaskTestCase.test_enqueue_task": DUMMY_RESULTS,
    "TaskMQTaskTestCase.test_enqueue_task_async": DUMMY_RESULTS,
    "TaskMQTaskTestCase.test_get_missing_result": SYNC_IN_ASYNC,
    "TaskMQTaskTestCase.test_refresh_result": SYNC_IN_ASYNC,
    "TaskMQDummyBackendTestCase.test_using_correct_backend": IS_DUMMY,
    "TaskMQDummyBackendTestCase.test_clear": "calls DummyBackend.clear(), which empties its list of results",
    "TaskMQDummyBackendTestCase.test_enqueue_task": DUMMY_RESULTS,
    "TaskMQDummyBackendTestCase.test_enqueue_task_async": DUMMY_RESULTS,
    "TaskMQDummyBackendTestCase.test_refresh_result": DUMMY_RESULTS,
    "TaskMQDummyBackendTestCase.test_refresh_result_async": DUMMY_RESULTS,
    "TaskMQDummyBackendTestCase.test_get_missing_result": SYNC_IN_ASYNC,
    "TaskMQDummyBackendTestCase.test_validate_on_enqueue": QUEUES,
    "TaskMQDummyBackendTestCase.test_validate_on_aenqueue": QUEUES,
    "TaskMQImmediateBackendTestCase.test_using_correct_backend": IS_IMMEDIATE,
    "TaskMQImmediateBackendTestCase.test_cannot_get_result": NO_RESULTS,
    "TaskMQImmediateBackendTestCase.test_cannot_refresh_result": NO_RESULTS,
    "TaskMQImmediateBackendTestCase.test_cannot_pass_run_after": ("asserts that run_after is refused: "
                                                                  "ImmediateBackend cannot defer a task, ours can"),
    "TaskMQImmediateBackendTestCase.test_validate_on_enqueue": QUEUES,
    "TaskMQImmediateBackendTestCase.test_validate_on_aenqueue": QUEUES,
}
