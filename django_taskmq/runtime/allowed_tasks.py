"""Which functions a row without a signed package may name (a schedule, say).

A task package is signed by the code that enqueued it, so it may name any function. A schedule's
``func`` is a plain column that an admin user or anyone who can write the table chooses: it may
name only the project's own tasks, or a scheduler would sign and run ``os.system``.

Allowed are functions declared with ``@task`` (or ``Task`` subclasses) in a module this process
has imported, and module-level Python functions whose module lies inside an allowed package. The allowed packages are
``TASKMQ['task_modules']`` when set, else the packages of ``INSTALLED_APPS`` and the top-level
package of the settings module. A path outside them is refused before anything is imported, so
naming a module cannot run its import-time code either.
"""

from __future__ import annotations

import inspect

from django.apps import apps
from django.conf import settings as django_settings

from ..conf import Settings, get_settings
from ..exceptions import ConfigError
from .loading import DECLARED, is_django_task, is_task, is_task_class, resolve
from ..options import check_path


def allowed_prefixes(settings: Settings | None = None) -> tuple[str, ...]:
    """Return the module prefixes whose functions schedules may name."""
    settings = settings or get_settings()
    if settings.task_modules is not None:
        return settings.task_modules
    prefixes = [config.name for config in apps.get_app_configs()]
    module = getattr(django_settings, "SETTINGS_MODULE", None)
    if module:
        prefixes.append(module.split(".", 1)[0])
    return tuple(sorted(set(prefixes)))


def _inside(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def check_allowed(path: str, settings: Settings | None = None) -> str:
    """Return ``path`` if a schedule may name it; raise :class:`ConfigError` saying why not."""
    if not isinstance(path, str):
        raise ConfigError(f"func must be a dotted path, got {path!r}")
    if path in DECLARED:  # declared with @task here: its module is imported already
        return check_path(path)
    prefixes = allowed_prefixes(settings)
    module_path = path.rpartition(".")[0]
    if not _inside(module_path, prefixes):
        raise ConfigError(
            f"func {path!r} is not in an allowed task module: schedules may name @task functions and "
            f"functions of {', '.join(prefixes) or 'no module'} (TASKMQ['task_modules'])"
        )
    check_path(path)
    target = resolve(path)
    if is_task(target) or is_task_class(target):
        owner = target.path if is_task(target) else f"{target.__module__}.{target.__qualname__}"
    elif inspect.isfunction(target):
        owner = f"{target.__module__}.{target.__qualname__}"
    elif is_django_task(target):
        owner = target.module_path
    else:
        raise ConfigError(f"func {path!r} is a {type(target).__name__}, not a Python function or a task")
    # The object must live where the path says: "myapp.tasks.system" that is os.system imported
    # into myapp.tasks is not the project's function.
    if owner != path or not _inside(owner.rpartition(".")[0], prefixes):
        raise ConfigError(f"func {path!r} is {owner!r}, which is defined outside the allowed task modules")
    return path
