"""The example's data, after its migrations: a staff user in a group, one list of 10 tasks,
and a session for that user with a fixed key, so every request of the load carries the same
logged-in cookie (--header 'Cookie: sessionid=labexamplesession0001') as a signed-in user's
browser does."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "todosite.settings")
django.setup()

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from todo.models import Task, TaskList  # noqa: E402

SESSION = "labexamplesession0001"

group = Group.objects.create(name="staff")
user = User.objects.create_user("lab", "lab@example.com", "lab", is_staff=True)
user.groups.add(group)
tasks = TaskList.objects.create(name="Groceries", slug="groceries", group=group)
Task.objects.bulk_create(
    Task(title=f"task {i}", task_list=tasks, created_by=user, note=f"note {i}" * 5)
    for i in range(10)
)
store = SessionStore()
store.update(
    {
        SESSION_KEY: str(user.pk),
        BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
        HASH_SESSION_KEY: user.get_session_auth_hash(),
    }
)
store._session_key = SESSION
store.save(must_create=True)
