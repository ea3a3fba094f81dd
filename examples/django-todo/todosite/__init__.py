"""A Django project that serves django-todo (a published app, from PyPI) as a site would: its
settings from the environment, its tables from its own migrations (the lab's worked example in
docs/your-app-and-databases.md)."""
